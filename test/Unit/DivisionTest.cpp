//===- DivisionTest.cpp - division by a shared divisor vs IEEE division ---===//
//
// divideBySharedDivisor (include/coat/Conversion/GroupKernel.h) emits, per
// divisor s, one IEEE reciprocal r = RN(1/s) and, per element x,
//
//   q = RN(x * r);  n = fma(q, s', -x);  q' = fma(-n, r, q)
//
// with s' = 0 for s = +inf, and IEEE divisions unless 2^-126 <= s <= 2^126,
// s = +inf or s is NaN. `sharedDivide` below is that sequence in C++; the
// tests check it against IEEE x / s bit for bit (and, where the contract
// allows, within one ulp). Exhaustive over bf16 divisors with
// COAT_EXHAUSTIVE_DIVISION=1 (all 2^23 dividend significands x 128 divisor
// significands, 2^31 quotients: about 30 s); otherwise a stride through the
// same space.
//
// With DivisionUse::Fp8Codes (`codesDivide` below: divisors down to 2^-80,
// an overflowing first product kept) the tests check the FP8 codes in both
// formats against those of IEEE x / s for every x and s, as the per-tensor
// quantizers need for a scale they are given.
//
//===----------------------------------------------------------------------===//

#include "coat/Numerics/Reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

namespace {

float sharedDivide(float x, float s) {
  const float inf = std::numeric_limits<float>::infinity();
  bool fast = (0x1p-126f <= s && s <= 0x1p126f) || s == inf || std::isnan(s);
  if (!fast)
    return x / s;
  volatile float one = 1.0f; // keep the reciprocal a run-time IEEE division
  float r = one / s;
  float sFinite = s == inf ? 0.0f : s;
  float q = x * r;
  float n = std::fma(q, sFinite, -x);
  return std::fma(-n, r, q);
}

float codesDivide(float x, float s) {
  const float inf = std::numeric_limits<float>::infinity();
  bool fast = (0x1p-80f <= s && s <= 0x1p126f) || s == inf || std::isnan(s);
  if (!fast)
    return x / s;
  volatile float one = 1.0f;
  float r = one / s;
  float sFinite = s == inf ? 0.0f : s;
  float q = x * r;
  float n = std::fma(q, sFinite, -x);
  float corrected = std::fma(-n, r, q);
  return std::fabs(q) == inf ? q : corrected;
}

float fromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

/// Equal bit patterns, or both NaN.
bool same(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || bits(a) == bits(b);
}

/// The documented contract: RN(x / s) exactly when the divisor takes the
/// fast path and 2^-102 <= |x|, 2^-126 <= |x / s| < 2^127, or x = +-0, or s
/// is +inf or NaN; the quotient's sign and at most one ulp of error
/// otherwise. Dividends of +-inf need s = +inf or NaN (the quantizer's scale
/// is inf when its group holds an inf).
bool withinContract(float x, float s) {
  float got = sharedDivide(x, s), want = x / s;
  if (same(got, want))
    return true;
  if (std::isnan(got) || std::isnan(want) || std::isinf(want))
    return false;
  double q = std::fabs(double(x) / double(s));
  bool exactCase = (0x1p-126f <= s && s <= 0x1p126f && q >= 0x1p-126 &&
                    q < 0x1p127 && std::fabs(x) >= 0x1p-102f) ||
                   x == 0.0f || std::isinf(s);
  if (exactCase)
    return false;
  float ulp = std::nextafter(std::fabs(want), 1e38f) - std::fabs(want);
  return std::signbit(got) == std::signbit(want) &&
         std::fabs(double(got) - double(want)) <= ulp;
}

/// The quantizer's contract: the same FP8 code in every format, i.e. equal,
/// or both below 2^-17 in magnitude (+-0 even in E5M2) with the same sign.
bool sameCode(float x, float s) {
  float got = sharedDivide(x, s), want = x / s;
  return same(got, want) ||
         (std::fabs(got) < 0x1p-17f && std::fabs(want) < 0x1p-17f &&
          std::signbit(got) == std::signbit(want));
}

TEST(SharedDivisor, ExactForBf16Divisors) {
  // Without over/underflow the sequence commutes with scaling x and s by
  // powers of two, so dividend significands in [1, 2) against the 128 bf16
  // divisor significands (and their negations) cover every normal case.
  bool exhaustive = std::getenv("COAT_EXHAUSTIVE_DIVISION") != nullptr;
  uint32_t stride = exhaustive ? 1 : 4099;
  int64_t checked = 0;
  for (uint32_t sm = 0; sm < 128; ++sm) {
    float s = fromBits(0x3F800000u | (sm << 16));
    for (uint32_t xm = 0; xm < (1u << 23); xm += stride) {
      float x = fromBits(0x3F800000u | xm);
      for (float sign : {1.0f, -1.0f}) {
        ASSERT_TRUE(same(sharedDivide(sign * x, s), sign * x / s))
            << x << " / " << s;
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, exhaustive ? int64_t(1) << 31 : 500000);
}

TEST(SharedDivisor, ExactForRandomNormalPairs) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> mant(0, (1u << 23) - 1);
  std::uniform_int_distribution<int> exps(-126, 126), sign(0, 1);
  auto make = [&](int e) {
    return std::ldexp(fromBits(0x3F800000u | mant(rng)), e) *
           (sign(rng) ? -1.0f : 1.0f);
  };
  for (int i = 0; i < 4000000; ++i) {
    float s = make(exps(rng));
    float x = make(exps(rng));
    double quotient = std::fabs(double(x) / double(s));
    if (quotient >= 0x1p127)
      continue;
    if (quotient >= 0x1p-126 && std::fabs(x) >= 0x1p-102f) {
      ASSERT_TRUE(same(sharedDivide(x, s), x / s)) << x << " / " << s;
    } else {
      ASSERT_TRUE(withinContract(x, s)) << x << " / " << s;
    }
  }
}

TEST(SharedDivisor, ExactNearRoundingBoundaries) {
  // x = RN(m * s) for m at or next to the midpoint of two floats: quotients
  // that lie as close to a rounding boundary as the inputs allow.
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> mant(0, (1u << 23) - 1);
  std::uniform_int_distribution<int> exps(-60, 60);
  for (int i = 0; i < 2000000; ++i) {
    float s = std::ldexp(fromBits(0x3F800000u | mant(rng)), exps(rng));
    if (i % 4 == 0) // significand 1.11...1 and powers of two
      s = std::ldexp(i % 8 ? 1.0f : fromBits(0x3FFFFFFFu), exps(rng));
    float q = std::ldexp(fromBits(0x3F800000u | mant(rng)), exps(rng));
    double mid = double(q) + std::ldexp(1.0, std::ilogb(q) - 24);
    float x = float(mid * double(s));
    for (float xi : {x, std::nextafter(x, 0.0f), std::nextafter(x, 1e30f)})
      ASSERT_TRUE(std::fabs(xi) >= 0x1p-102f
                      ? same(sharedDivide(xi, s), xi / s)
                      : withinContract(xi, s))
          << xi << " / " << s;
  }
}

TEST(SharedDivisor, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float xs[] = {0.0f, -0.0f, 1.0f, -3.5f, 1e-45f, -1e-40f, 1e-30f,
                      3e38f, -3e38f, inf, -inf, nan};
  const float ss[] = {inf, -inf, nan, 0.0f, -0.0f, 1e-45f, 1e-40f, -1e-39f,
                      0x1p-126f, 0x1p126f, 0x1.8p126f, -3e38f, 1.0f, -0.75f,
                      1.7e-15f, 7.6e35f};
  for (float s : ss)
    for (float x : xs) {
      double quotient = std::fabs(double(x) / double(s));
      // Overflowing quotients and infinite dividends over finite divisors
      // are outside the contract (the quantizer never has them).
      if (std::isfinite(x) && std::isfinite(quotient) && quotient >= 0x1p127)
        continue;
      if (std::isinf(x) && std::isfinite(s))
        continue;
      EXPECT_TRUE(withinContract(x, s))
          << x << " / " << s << ": " << sharedDivide(x, s) << " vs " << x / s;
    }
}

TEST(SharedDivisor, QuantizerRangeIncludingTinyDividends) {
  // Group scales s = bf16((amax + 1e-10) / fp8max) and |x| <= amax: every
  // dividend, from subnormal to amax, within the contract and giving the
  // IEEE quotient's FP8 code.
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> any(0, 0x7F7FFFFFu);
  std::uniform_real_distribution<float> frac(0.0f, 1.0f);
  for (int i = 0; i < 2000000; ++i) {
    float amax = fromBits(any(rng));
    float fp8max = i % 2 ? 448.0f : 57344.0f;
    float s = (amax + 1e-10f) / fp8max;
    s = fromBits((bits(s) + 0x7FFFu + ((bits(s) >> 16) & 1)) & 0xFFFF0000u);
    float x = i % 3 ? amax * frac(rng) : fromBits(any(rng) % (bits(amax) + 1));
    ASSERT_TRUE(withinContract(x, s)) << x << " / " << s;
    ASSERT_TRUE(withinContract(-x, s)) << -x << " / " << s;
    ASSERT_TRUE(sameCode(x, s) && sameCode(-x, s)) << x << " / " << s;
  }
}

TEST(SharedDivisorCodes, GroupScaleByFp8MaxIsTheIeeeQuotient) {
  // The quantizing GEMM epilogue forms s = (amax + 1e-10) / fp8max with the
  // codes' sequence and the constant divisor (no branch): for every
  // amax + 1e-10 >= 1e-10 (the quotient stays normal), +inf and NaN it is
  // IEEE's s bit for bit, which the codes and the stored bf16(s) then take.
  const float inf = std::numeric_limits<float>::infinity();
  const uint32_t lowest = bits(1e-10f);
  int64_t checked = 0;
  for (float fp8max : {448.0f, 57344.0f}) {
    for (uint32_t b = lowest; b <= 0x7F7FFFFFu; b += 997) {
      float x = fromBits(b);
      ASSERT_TRUE(same(codesDivide(x, fp8max), x / fp8max)) << x << " / " << fp8max;
      ++checked;
    }
    for (float x : {1e-10f, std::numeric_limits<float>::max(), inf,
                    std::numeric_limits<float>::quiet_NaN()})
      ASSERT_TRUE(same(codesDivide(x, fp8max), x / fp8max)) << x << " / " << fp8max;
  }
  EXPECT_GE(checked, 2000000);
}

/// Equal saturating FP8 codes of codesDivide and IEEE division in E4M3 and
/// E5M2 (any two NaNs count as equal: the conversion's NaN is canonical).
bool sameCodes(float x, float s) {
  float got = codesDivide(x, s), want = x / s;
  if (std::isnan(got) || std::isnan(want))
    return std::isnan(got) && std::isnan(want);
  for (coat::Fp8Format fmt : {coat::Fp8Format::E4M3, coat::Fp8Format::E5M2})
    if (coat::ref::encodeFp8(got, fmt) != coat::ref::encodeFp8(want, fmt))
      return false;
  return true;
}

TEST(SharedDivisorCodes, AnyDividendAnyDivisor) {
  // Both operands over every bit pattern: subnormals, +-inf, NaN, zeros,
  // divisors outside the fast range, quotients that overflow.
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 4000000; ++i) {
    float x = fromBits(any(rng)), s = fromBits(any(rng));
    ASSERT_TRUE(sameCodes(x, s)) << x << " / " << s << ": "
                                 << codesDivide(x, s) << " vs " << x / s;
  }
}

TEST(SharedDivisorCodes, SpecialValuesAndRangeEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float big = std::numeric_limits<float>::max();
  const float xs[] = {0.0f, -0.0f, 1.0f, -3.5f, 1e-45f, -1e-40f, 0x1p-102f,
                      -0x1.fffffep-103f, 1e-30f, 448.0f, 3e38f, -big, inf,
                      -inf, nan};
  const float ss[] = {inf, -inf, nan, 0.0f, -0.0f, 1e-45f, -1e-39f,
                      0x1p-126f, 0x1.fffffep-81f, 0x1p-80f, 0x1.000002p-80f,
                      0x1p126f, 0x1.000002p126f, -3e38f, 1.0f, -0.75f,
                      1.7e-15f, 7.6e35f};
  for (float s : ss)
    for (float x : xs)
      EXPECT_TRUE(sameCodes(x, s)) << x << " / " << s << ": "
                                   << codesDivide(x, s) << " vs " << x / s;
}

TEST(SharedDivisorCodes, OverflowingQuotients) {
  // |x / s| at and past f32's largest value, where x * RN(1/s) may round
  // to inf before the correction: it saturates like the IEEE quotient.
  std::mt19937 rng(13);
  std::uniform_int_distribution<uint32_t> mant(0, (1u << 23) - 1);
  std::uniform_int_distribution<int> exps(-80, -1), sign(0, 1);
  for (int i = 0; i < 1000000; ++i) {
    float s = std::ldexp(fromBits(0x3F800000u | mant(rng)), exps(rng));
    double target = std::ldexp(1.0 + std::ldexp(double(mant(rng)), -23), 127);
    float x = float(target * double(s));
    if (!std::isfinite(x))
      continue;
    x = sign(rng) ? -x : x;
    for (float xi : {x, std::nextafter(x, 0.0f), std::nextafter(x, -x * 2)})
      ASSERT_TRUE(sameCodes(xi, s)) << xi << " / " << s;
  }
}

TEST(SharedDivisorCodes, QuotientsAtFp8Midpoints) {
  // x = RN(m * s) for m half-way between two FP8 values (and next to it):
  // the quotients where a one-ulp error would change the code.
  std::mt19937 rng(17);
  std::uniform_int_distribution<uint32_t> mant(0, (1u << 23) - 1);
  std::uniform_int_distribution<int> exps(-126, 100), mid(0, 63), mexp(-17, 15);
  for (int i = 0; i < 2000000; ++i) {
    float s = std::ldexp(fromBits(0x3F800000u | mant(rng)), exps(rng));
    // 1 + (2k + 1) / 16: a midpoint of E4M3's (and E5M2's) significands.
    double m = std::ldexp(1.0 + (2 * (mid(rng) % 8) + 1) / 16.0, mexp(rng));
    float x = float(m * double(s));
    if (!std::isfinite(x) || x == 0.0f)
      continue;
    for (float xi : {x, std::nextafter(x, 0.0f), std::nextafter(x, 1e30f),
                     -x})
      ASSERT_TRUE(sameCodes(xi, s)) << xi << " / " << s;
  }
}

} // namespace
