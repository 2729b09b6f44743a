//===- Fp8ConvertTest.cpp - FP8 / bf16 conversions against an oracle ------===//
//
// The library rounds with integer arithmetic on the f32 bit pattern. The
// oracle here is deliberately different: it builds the value of every code
// from the format definition in double precision and picks the nearest code
// by brute force, breaking ties on the code's least significant bit.
//
//===----------------------------------------------------------------------===//

#include "coat/Numerics/Reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace coat;
using namespace coat::ref;

namespace {

const Fp8Format kFormats[] = {Fp8Format::E4M3, Fp8Format::E5M2};
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

float fromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

/// Value of a code straight from the OCP FP8 definition (NaN for NaN codes,
/// inf for E5M2's inf codes).
double definitionValue(uint8_t code, Fp8Format f) {
  const bool e4m3 = f == Fp8Format::E4M3;
  const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int expField = (code & 0x7F) >> mbits;
  const int mant = code & ((1 << mbits) - 1);
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  if (e4m3 && (code & 0x7F) == 0x7F)
    return std::nan("");
  if (!e4m3 && expField == 31)
    return mant ? std::nan("") : sign * HUGE_VAL;
  if (expField == 0)
    return sign * std::pow(2.0, 1 - bias) * (mant / std::pow(2.0, mbits));
  return sign * std::pow(2.0, expField - bias) *
         (1.0 + mant / std::pow(2.0, mbits));
}

struct Candidate {
  double value;
  int code; ///< -1 marks the virtual code just beyond the largest finite one
  int parity;
};

/// Nearest-code search over all non-negative finite codes plus the virtual
/// next binade step (480 for E4M3, 65536 for E5M2) that RNE overflows into.
uint8_t oracleEncode(float x, Fp8Format f, bool saturate) {
  const bool e4m3 = f == Fp8Format::E4M3;
  const uint8_t maxCode = e4m3 ? 0x7E : 0x7B;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  auto overflow = [&]() -> uint8_t {
    if (saturate)
      return maxCode | sign;
    return (e4m3 ? 0x7F : 0x7C) | sign;
  };
  if (std::isnan(x))
    return saturate ? 0x7F : (0x7F | sign);
  if (std::isinf(x))
    return overflow();

  std::vector<Candidate> candidates;
  for (int c = 0; c <= maxCode; ++c)
    candidates.push_back({definitionValue(c, f), c, c & 1});
  const double top = definitionValue(maxCode, f);
  const double topStep = top - definitionValue(maxCode - 1, f);
  candidates.push_back({top + topStep, -1, (maxCode + 1) & 1});

  const double a = std::fabs(static_cast<double>(x));
  const Candidate *best = &candidates[0];
  for (const Candidate &c : candidates) {
    const double d = std::fabs(c.value - a), bestD = std::fabs(best->value - a);
    if (d < bestD || (d == bestD && c.parity == 0 && best->parity == 1))
      best = &c;
  }
  if (a > candidates.back().value || best->code < 0)
    return overflow();
  return static_cast<uint8_t>(best->code | sign);
}

void expectMatchesOracle(float x, Fp8Format f) {
  for (bool saturate : {true, false}) {
    const uint8_t got = encodeFp8(
        x, f, saturate ? Fp8Overflow::SatFinite : Fp8Overflow::NonSaturating);
    EXPECT_EQ(got, oracleEncode(x, f, saturate))
        << "x=" << x << " (bits " << std::hex << [&] {
             uint32_t b;
             std::memcpy(&b, &x, 4);
             return b;
           }() << std::dec << ") format=" << getFp8Traits(f).name
        << " saturate=" << saturate;
  }
}

/// Positive finite codes in increasing value order.
std::vector<uint8_t> positiveFiniteCodes(Fp8Format f) {
  std::vector<uint8_t> codes;
  for (int c = 0; c <= fp8MaxFiniteCode(f); ++c)
    codes.push_back(static_cast<uint8_t>(c));
  return codes;
}

} // namespace

TEST(Fp8Decode, AllCodesMatchTheFormatDefinition) {
  for (Fp8Format f : kFormats) {
    for (int c = 0; c < 256; ++c) {
      const double expected = definitionValue(c, f);
      const float got = decodeFp8(c, f);
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(got)) << c;
        EXPECT_TRUE(isFp8NaN(c, f)) << c;
        // CUDA's fp8 -> f16 -> f32 path returns the canonical positive NaN.
        EXPECT_FALSE(std::signbit(got)) << c;
      } else {
        EXPECT_EQ(static_cast<double>(got), expected) << c;
        EXPECT_FALSE(isFp8NaN(c, f)) << c;
      }
    }
  }
}

TEST(Fp8Decode, AgreesWithFormatTraits) {
  for (Fp8Format f : kFormats) {
    const Fp8Traits t = getFp8Traits(f);
    EXPECT_EQ(decodeFp8(fp8MaxFiniteCode(f), f), t.maxFinite);
    EXPECT_EQ(decodeFp8(0x01, f), t.minSubnormal);
    EXPECT_EQ(decodeFp8(1 << t.mantissaBits, f), t.minNormal);
    EXPECT_EQ(decodeFp8(0x80, f), 0.0f);
    EXPECT_TRUE(std::signbit(decodeFp8(0x80, f)));
  }
  EXPECT_EQ(fp8MaxFiniteCode(Fp8Format::E4M3), 0x7E);
  EXPECT_EQ(fp8MaxFiniteCode(Fp8Format::E5M2), 0x7B);
  EXPECT_TRUE(isFp8Inf(0x7C, Fp8Format::E5M2));
  EXPECT_TRUE(isFp8Inf(0xFC, Fp8Format::E5M2));
  EXPECT_EQ(decodeFp8(0xFC, Fp8Format::E5M2), -kInf);
  int nanCodes[2] = {0, 0};
  for (int c = 0; c < 256; ++c)
    for (int i = 0; i < 2; ++i)
      nanCodes[i] += isFp8NaN(c, kFormats[i]);
  EXPECT_EQ(nanCodes[0], 2); // 0x7F, 0xFF
  EXPECT_EQ(nanCodes[1], 6); // 0x7D-0x7F, 0xFD-0xFF
}

TEST(Fp8Encode, AllCodesRoundTrip) {
  for (Fp8Format f : kFormats) {
    for (int c = 0; c < 256; ++c) {
      const float v = decodeFp8(c, f);
      if (isFp8NaN(c, f)) {
        EXPECT_EQ(encodeFp8(v, f), kFp8CanonicalNaN);
        continue;
      }
      if (isFp8Inf(c, f)) {
        // satfinite clamps inf; the non-saturating conversion keeps it.
        EXPECT_EQ(encodeFp8(v, f), fp8MaxFiniteCode(f) | (c & 0x80));
        EXPECT_EQ(encodeFp8(v, f, Fp8Overflow::NonSaturating), c);
        continue;
      }
      EXPECT_EQ(encodeFp8(v, f), c) << "code " << c;
      EXPECT_EQ(encodeFp8(v, f, Fp8Overflow::NonSaturating), c);
      EXPECT_EQ(decodeFp8(encodeFp8(decodeFp8(c, f), f), f), v);
    }
  }
}

TEST(Fp8Encode, MidpointsTieToEvenAndNeighboursRoundAway) {
  for (Fp8Format f : kFormats) {
    std::vector<uint8_t> codes = positiveFiniteCodes(f);
    for (size_t i = 0; i + 1 < codes.size(); ++i) {
      const float lo = decodeFp8(codes[i], f), hi = decodeFp8(codes[i + 1], f);
      // One more significand bit than FP8 has: exact in f32.
      const float mid = (lo + hi) / 2.0f;
      ASSERT_EQ(static_cast<double>(mid),
                (static_cast<double>(lo) + static_cast<double>(hi)) / 2.0);
      const uint8_t even = (codes[i] & 1) ? codes[i + 1] : codes[i];
      for (float sign : {1.0f, -1.0f}) {
        const uint8_t signBit = sign < 0 ? 0x80 : 0x00;
        EXPECT_EQ(encodeFp8(sign * mid, f), even | signBit)
            << getFp8Traits(f).name << " mid=" << mid;
        EXPECT_EQ(encodeFp8(sign * std::nextafter(mid, 0.0f), f),
                  codes[i] | signBit);
        EXPECT_EQ(encodeFp8(sign * std::nextafter(mid, kInf), f),
                  codes[i + 1] | signBit);
        expectMatchesOracle(sign * mid, f);
        expectMatchesOracle(sign * std::nextafter(mid, 0.0f), f);
        expectMatchesOracle(sign * std::nextafter(mid, kInf), f);
        expectMatchesOracle(sign * std::nextafter(lo, kInf), f);
        expectMatchesOracle(sign * std::nextafter(hi, 0.0f), f);
      }
    }
  }
}

TEST(Fp8Encode, SubnormalBoundaries) {
  for (Fp8Format f : kFormats) {
    const Fp8Traits t = getFp8Traits(f);
    const float halfMin = t.minSubnormal / 2.0f;
    EXPECT_EQ(encodeFp8(halfMin, f), 0x00); // tie to the even code 0
    EXPECT_EQ(encodeFp8(-halfMin, f), 0x80);
    EXPECT_EQ(encodeFp8(std::nextafter(halfMin, kInf), f), 0x01);
    EXPECT_EQ(encodeFp8(std::nextafter(halfMin, 0.0f), f), 0x00);
    EXPECT_EQ(encodeFp8(1.5f * t.minSubnormal, f), 0x02); // tie 1|2 -> 2
    EXPECT_EQ(encodeFp8(2.5f * t.minSubnormal, f), 0x02); // tie 2|3 -> 2
    // Largest subnormal to smallest normal.
    const uint8_t maxSub = static_cast<uint8_t>((1 << t.mantissaBits) - 1);
    const float top = decodeFp8(maxSub, f);
    EXPECT_EQ(encodeFp8((top + t.minNormal) / 2.0f, f), maxSub + 1);
    // f32 subnormals, the smallest f32, and signed zeros.
    for (float tiny : {fromBits(1), fromBits(0x007FFFFF), 1e-30f, 0.0f}) {
      EXPECT_EQ(encodeFp8(tiny, f), 0x00);
      EXPECT_EQ(encodeFp8(-tiny, f), 0x80);
      expectMatchesOracle(tiny, f);
      expectMatchesOracle(-tiny, f);
    }
  }
}

TEST(Fp8Encode, OverflowSaturatesOrBecomesNaNInf) {
  // E4M3: 448 max, 464 is the tie between 448 (even) and the virtual 480.
  const Fp8Format e4 = Fp8Format::E4M3, e5 = Fp8Format::E5M2;
  const Fp8Overflow noSat = Fp8Overflow::NonSaturating;
  EXPECT_EQ(encodeFp8(464.0f, e4), 0x7E);
  EXPECT_EQ(encodeFp8(464.0f, e4, noSat), 0x7E);
  EXPECT_EQ(encodeFp8(std::nextafter(464.0f, kInf), e4), 0x7E);
  EXPECT_EQ(encodeFp8(std::nextafter(464.0f, kInf), e4, noSat), 0x7F);
  EXPECT_EQ(encodeFp8(-std::nextafter(464.0f, kInf), e4, noSat), 0xFF);
  EXPECT_EQ(encodeFp8(1e30f, e4), 0x7E);
  EXPECT_EQ(encodeFp8(-1e30f, e4), 0xFE);
  EXPECT_EQ(encodeFp8(kInf, e4), 0x7E);
  EXPECT_EQ(encodeFp8(-kInf, e4), 0xFE);
  EXPECT_EQ(encodeFp8(kInf, e4, noSat), 0x7F);
  EXPECT_EQ(encodeFp8(-kInf, e4, noSat), 0xFF);
  // E5M2: 57344 max (odd code 0x7B), 61440 ties to the even virtual 65536.
  EXPECT_EQ(encodeFp8(std::nextafter(61440.0f, 0.0f), e5, noSat), 0x7B);
  EXPECT_EQ(encodeFp8(61440.0f, e5, noSat), 0x7C);
  EXPECT_EQ(encodeFp8(61440.0f, e5), 0x7B);
  EXPECT_EQ(encodeFp8(-61440.0f, e5, noSat), 0xFC);
  EXPECT_EQ(encodeFp8(kInf, e5), 0x7B);
  EXPECT_EQ(encodeFp8(-kInf, e5), 0xFB);
  EXPECT_EQ(encodeFp8(kInf, e5, noSat), 0x7C);
  EXPECT_EQ(encodeFp8(-kInf, e5, noSat), 0xFC);
  for (Fp8Format f : kFormats)
    for (float x : {464.0f, 480.0f, 61440.0f, 65536.0f, 3.4e38f, kInf})
      for (float s : {1.0f, -1.0f})
        expectMatchesOracle(s * x, f);
}

TEST(Fp8Encode, NaNStaysNaN) {
  const float negNaN = -kNaN;
  ASSERT_TRUE(std::signbit(negNaN));
  for (Fp8Format f : kFormats) {
    EXPECT_EQ(encodeFp8(kNaN, f), kFp8CanonicalNaN);
    EXPECT_EQ(encodeFp8(negNaN, f), kFp8CanonicalNaN); // satfinite drops it
    EXPECT_EQ(encodeFp8(fromBits(0x7F800001), f), kFp8CanonicalNaN);
    EXPECT_EQ(encodeFp8(kNaN, f, Fp8Overflow::NonSaturating), 0x7F);
    EXPECT_EQ(encodeFp8(negNaN, f, Fp8Overflow::NonSaturating), 0xFF);
    EXPECT_TRUE(isFp8NaN(encodeFp8(negNaN, f, Fp8Overflow::NonSaturating), f));
  }
}

TEST(Fp8Encode, RandomF32PatternsMatchOracle) {
  std::mt19937 rng(1234);
  // Exponents spread over the whole FP8 range and a margin either side.
  std::uniform_int_distribution<uint32_t> exponent(127 - 20, 127 + 17);
  std::uniform_int_distribution<uint32_t> mantissa(0, 0x7FFFFF);
  for (int i = 0; i < 40000; ++i) {
    const uint32_t bits = (exponent(rng) << 23) | mantissa(rng) |
                          (i & 1 ? 0x80000000u : 0u);
    for (Fp8Format f : kFormats)
      expectMatchesOracle(fromBits(bits), f);
  }
}

TEST(Bf16, RoundTripsEveryPattern) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float v = decodeBf16(static_cast<uint16_t>(b));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(decodeBf16(encodeBf16(v))));
      continue;
    }
    EXPECT_EQ(encodeBf16(v), b);
  }
}

TEST(Bf16, RoundsToNearestEven) {
  // 1 + 2^-8 is the midpoint of 1 and 1 + 2^-7: ties to 1 (even).
  EXPECT_EQ(roundToBf16(1.00390625f), 1.0f);
  EXPECT_EQ(roundToBf16(std::nextafter(1.00390625f, 2.0f)), 1.0078125f);
  // 1 + 3*2^-8 ties to 1 + 2^-6 (even mantissa 0000010).
  EXPECT_EQ(roundToBf16(1.01171875f), 1.015625f);
  EXPECT_EQ(roundToBf16(3.4e38f), kInf); // beyond bf16 max + half ulp
  EXPECT_EQ(roundToBf16(-kInf), -kInf);
  EXPECT_TRUE(std::signbit(roundToBf16(-0.0f)));
  EXPECT_TRUE(std::isnan(roundToBf16(fromBits(0x7F800001)))); // sNaN stays NaN
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any(0, 0xFFFFFFFFu);
  for (int i = 0; i < 100000; ++i) {
    const float x = fromBits(any(rng));
    if (!std::isfinite(x))
      continue;
    // Independent: neighbours by truncation, nearest by double distance.
    uint32_t b;
    std::memcpy(&b, &x, 4);
    const float lo = fromBits(b & 0xFFFF0000u);
    const float hi = fromBits((b & 0xFFFF0000u) + 0x10000u);
    // Past the largest bf16 the next step would be 2^128 (then inf).
    const double hiValue =
        std::isinf(hi) ? std::copysign(std::ldexp(1.0, 128), x) : hi;
    const double dLo = std::fabs((double)x - lo);
    const double dHi = std::fabs(hiValue - x);
    const bool loEven = ((b >> 16) & 1u) == 0;
    const float expected = dLo < dHi ? lo : dHi < dLo ? hi : (loEven ? lo : hi);
    EXPECT_EQ(roundToBf16(x), expected) << x;
  }
}
