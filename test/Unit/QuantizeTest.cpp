//===- QuantizeTest.cpp - per-tensor/group/flat-group/block quantizers ----===//

#include "coat/Numerics/Reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace coat;
using namespace coat::ref;
using Shape = std::vector<int64_t>;

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

QuantizeOptions activationOptions(Fp8Format f = Fp8Format::E4M3,
                                  bool bf16Scale = true) {
  QuantizeOptions o;
  o.format = f;
  o.eps = kActivationScaleEps;
  o.bf16Scale = bf16Scale;
  return o;
}

struct Quantized {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  std::vector<float> dequantized;
};

Quantized roundTrip(const std::vector<float> &x, const Shape &shape,
                    const Scaling &s, const QuantizeOptions &o) {
  Quantized q;
  q.codes.resize(x.size());
  q.scales.resize(numScales(shape, s));
  q.dequantized.resize(x.size());
  EXPECT_FALSE(quantize(x.data(), shape, s, o, q.codes.data(), q.scales.data()));
  EXPECT_FALSE(dequantize(q.codes.data(), q.scales.data(), shape, s, o.format,
                          q.dequantized.data()));
  return q;
}

std::vector<float> randomValues(size_t n, unsigned seed, float spread = 3.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> x(n);
  for (float &v : x)
    v = normal(rng);
  return x;
}

} // namespace

TEST(Quantize, ScaleFollowsCoatConvention) {
  QuantizeOptions o = activationOptions(Fp8Format::E4M3, false);
  EXPECT_EQ(scaleFromAbsMax(448.0f, o), (448.0f + 1e-10f) / 448.0f);
  o.bf16Scale = true;
  // 1.5/448 is not a bf16 value; the scale is its bf16 rounding.
  EXPECT_EQ(scaleFromAbsMax(1.5f, o), roundToBf16((1.5f + 1e-10f) / 448.0f));
  o.format = Fp8Format::E5M2;
  EXPECT_EQ(scaleFromAbsMax(0.0f, o), roundToBf16(1e-10f / 57344.0f));
}

TEST(Quantize, PerTensorRoundTripIsWithinHalfAnFp8Step) {
  std::vector<float> x = randomValues(1000, 1);
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    Quantized q = roundTrip(x, {1000}, Scaling::perTensor(),
                            activationOptions(f, false));
    ASSERT_EQ(q.scales.size(), 1u);
    const Fp8Traits t = getFp8Traits(f);
    const float relStep = std::ldexp(1.0f, -t.mantissaBits);
    for (size_t i = 0; i < x.size(); ++i) {
      const float scaled = std::fabs(x[i]) / q.scales[0];
      const float bound = scaled >= t.minNormal
                              ? std::fabs(x[i]) * relStep / 2.0f * 1.0001f
                              : t.minSubnormal / 2.0f * q.scales[0] * 1.0001f;
      EXPECT_LE(std::fabs(q.dequantized[i] - x[i]), bound) << i;
    }
    // The absolute maximum maps onto the top of the format.
    EXPECT_EQ(*std::max_element(q.codes.begin(), q.codes.end(),
                                [](uint8_t a, uint8_t b) {
                                  return (a & 0x7F) < (b & 0x7F);
                                }) &
                  0x7F,
              fp8MaxFiniteCode(f));
  }
}

TEST(Quantize, AllZeroGroupsGiveZeroCodesAndEpsScale) {
  std::vector<float> x(64, 0.0f);
  x[40] = 2.0f; // second group only
  Quantized q = roundTrip(x, {2, 32}, Scaling::perGroup(16),
                          activationOptions());
  ASSERT_EQ(q.scales.size(), 4u);
  EXPECT_EQ(q.scales[0], roundToBf16(1e-10f / 448.0f));
  EXPECT_GT(q.scales[0], 0.0f);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(q.codes[i], 0);
    EXPECT_EQ(q.dequantized[i], 0.0f);
  }
  // Row 1, elements 32..47: group 2 carries the 2.0.
  EXPECT_EQ(scaleIndexOf({2, 32}, Scaling::perGroup(16), 40), 2);
  EXPECT_EQ(q.codes[40], 0x7E);
  EXPECT_EQ(q.dequantized[40], 448.0f * q.scales[2]);
}

TEST(Quantize, AllEqualGroupMapsToFp8Max) {
  for (float v : {1.0f, -3.0f, 0.37f, 1e-6f}) {
    std::vector<float> x(16, v);
    Quantized q = roundTrip(x, {16}, Scaling::perGroup(16),
                            activationOptions(Fp8Format::E4M3, false));
    for (size_t i = 0; i < x.size(); ++i) {
      // x / ((|x| + 1e-10) / 448) is 448 or a hair below: code 448.
      EXPECT_EQ(q.codes[i] & 0x7F, 0x7E) << v;
      EXPECT_EQ(std::signbit(decodeFp8(q.codes[i], Fp8Format::E4M3)),
                std::signbit(v));
      EXPECT_NEAR(q.dequantized[i], v, std::fabs(v) * 1e-4f + 1e-10f);
    }
  }
}

TEST(Quantize, FlatGroupHasPartialLastGroup) {
  std::vector<float> x = randomValues(130, 2);
  x[128] = 0.5f;
  x[129] = -0.25f;
  Quantized q = roundTrip(x, {13, 10}, Scaling::flatGroup(64),
                          activationOptions(Fp8Format::E4M3, false));
  ASSERT_EQ(q.scales.size(), 3u);
  EXPECT_EQ(q.scales[2], (0.5f + 1e-10f) / 448.0f);
  EXPECT_EQ(q.codes[128], 0x7E);
  EXPECT_EQ(q.dequantized[129], -0.25f); // 224 * s: exact in E4M3
  for (int g = 0; g < 2; ++g) {
    float m = 0.0f;
    for (int i = 64 * g; i < 64 * g + 64; ++i)
      m = std::max(m, std::fabs(x[i]));
    EXPECT_EQ(q.scales[g], (m + 1e-10f) / 448.0f);
  }
}

TEST(Quantize, PerBlockHandlesPartialEdgeBlocksAndBatches) {
  const Shape shape{2, 5, 7};
  const Scaling s = Scaling::perBlock(2, 3);
  std::vector<float> x = randomValues(70, 3);
  Quantized q = roundTrip(x, shape, s,
                          activationOptions(Fp8Format::E5M2, false));
  ASSERT_EQ(q.scales.size(), 2u * 3u * 3u);
  // Independent block maxima with explicit loops over the block grid.
  for (int b = 0; b < 2; ++b)
    for (int br = 0; br < 3; ++br)
      for (int bc = 0; bc < 3; ++bc) {
        float m = 0.0f;
        for (int r = 2 * br; r < std::min(5, 2 * br + 2); ++r)
          for (int c = 3 * bc; c < std::min(7, 3 * bc + 3); ++c)
            m = std::max(m, std::fabs(x[(b * 5 + r) * 7 + c]));
        EXPECT_EQ(q.scales[(b * 3 + br) * 3 + bc], (m + 1e-10f) / 57344.0f)
            << b << " " << br << " " << bc;
      }
  // The bottom-right partial block (1 row x 1 column) of batch 1.
  EXPECT_EQ(scaleIndexOf(shape, s, 69), 17);
  EXPECT_EQ(q.codes[69] & 0x7F, fp8MaxFiniteCode(Fp8Format::E5M2));
}

TEST(Quantize, RejectsMisfitGranularity) {
  std::vector<float> x(30, 1.0f);
  std::vector<uint8_t> codes(30);
  std::vector<float> scales(4);
  auto err = quantize(x.data(), {3, 10}, Scaling::perGroup(4),
                      activationOptions(), codes.data(), scales.data());
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("does not divide"), std::string::npos);
  EXPECT_TRUE(quantize(x.data(), {30}, Scaling::perBlock(2, 2),
                       activationOptions(), codes.data(), scales.data()));
}

TEST(Quantize, DenormalInputsQuantizeToZero) {
  std::vector<float> x = {1e-40f, -1e-42f, 1e-45f, 0.0f};
  Quantized q = roundTrip(x, {4}, Scaling::perTensor(),
                          activationOptions(Fp8Format::E4M3, false));
  // The 1e-10 epsilon dominates the scale, so everything rounds to +-0.
  EXPECT_EQ(q.scales[0], (1e-40f + 1e-10f) / 448.0f);
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0x00, 0x80, 0x00, 0x00}));
  // Without epsilon the denormals span the format.
  QuantizeOptions noEps = activationOptions(Fp8Format::E4M3, false);
  noEps.eps = 0.0f;
  Quantized r = roundTrip(x, {4}, Scaling::perTensor(), noEps);
  EXPECT_EQ(r.codes[0], 0x7E);
  EXPECT_NEAR(r.dequantized[0], 1e-40f, 1e-41f);
}

TEST(Quantize, NaNIsIgnoredByTheMaxAndEncodedAsNaN) {
  std::vector<float> x = {1.0f, kNaN, -2.0f, 0.5f};
  Quantized q = roundTrip(x, {4}, Scaling::perTensor(),
                          activationOptions(Fp8Format::E4M3, false));
  EXPECT_EQ(q.scales[0], (2.0f + 1e-10f) / 448.0f);
  EXPECT_EQ(q.codes[1], kFp8CanonicalNaN);
  EXPECT_EQ(q.codes[2], 0xFE);
  EXPECT_EQ(q.dequantized[3], 0.5f);
}

TEST(Quantize, InfinityPoisonsItsGroupScale) {
  // max|x| = inf -> s = inf: finite values become (signed) zero, inf/inf NaN.
  std::vector<float> x = {1.0f, -kInf, -2.0f, 0.5f, 3.0f, 4.0f, 5.0f, 6.0f};
  Quantized q = roundTrip(x, {8}, Scaling::flatGroup(4),
                          activationOptions(Fp8Format::E5M2, true));
  EXPECT_EQ(q.scales[0], kInf);
  EXPECT_EQ(q.codes[0], 0x00);
  EXPECT_TRUE(isFp8NaN(q.codes[1], Fp8Format::E5M2));
  EXPECT_EQ(q.codes[2], 0x80);
  EXPECT_EQ(q.codes[7] & 0x7F, fp8MaxFiniteCode(Fp8Format::E5M2));
  EXPECT_EQ(q.scales[1], roundToBf16((6.0f + 1e-10f) / 57344.0f));
  EXPECT_EQ(q.dequantized[7],
            decodeFp8(q.codes[7], Fp8Format::E5M2) * q.scales[1]);
}

TEST(Quantize, ValuesBeyondFp8MaxSaturateUnderBf16Scales) {
  // absmax/448 = 1 + 2^-9 rounds down to 1.0 in bf16, so absmax/s > 448.
  const float absMax = 448.0f * (1.0f + std::ldexp(1.0f, -9));
  std::vector<float> x = {absMax, -absMax, 1.0f};
  Quantized q = roundTrip(x, {3}, Scaling::perTensor(), activationOptions());
  EXPECT_EQ(q.scales[0], 1.0f);
  EXPECT_EQ(q.codes[0], 0x7E);
  EXPECT_EQ(q.codes[1], 0xFE);
  // With a given scale, values far beyond fp8max saturate (satfinite) or
  // become NaN (non-saturating E4M3).
  std::vector<float> big = {1000.0f, -1e6f};
  std::vector<uint8_t> codes(2);
  quantizeWithScale(big.data(), 2, 1.0f, Fp8Format::E4M3,
                    Fp8Overflow::SatFinite, codes.data());
  EXPECT_EQ(codes, (std::vector<uint8_t>{0x7E, 0xFE}));
  quantizeWithScale(big.data(), 2, 1.0f, Fp8Format::E4M3,
                    Fp8Overflow::NonSaturating, codes.data());
  EXPECT_EQ(codes, (std::vector<uint8_t>{0x7F, 0xFF}));
}

TEST(Quantize, TwoStageTensorScaleIsMaxOfBf16GroupScales) {
  std::vector<float> x = randomValues(8 * 64, 4);
  const Shape shape{8, 64};
  const QuantizeOptions o = activationOptions();
  const float s = twoStageTensorScale(x.data(), shape, Scaling::perGroup(16), o);
  std::vector<uint8_t> codes(x.size());
  std::vector<float> groupScales(32);
  ASSERT_FALSE(quantize(x.data(), shape, Scaling::perGroup(16), o, codes.data(),
                        groupScales.data()));
  EXPECT_EQ(s, *std::max_element(groupScales.begin(), groupScales.end()));
  // bf16 rounding is monotone, so it equals the bf16 per-tensor scale.
  std::vector<float> tensorScale(1);
  ASSERT_FALSE(quantize(x.data(), shape, Scaling::perTensor(), o, codes.data(),
                        tensorScale.data()));
  EXPECT_EQ(s, tensorScale[0]);
  // Per-row group scaling (the norms) gives the same scalar.
  EXPECT_EQ(twoStageTensorScale(x.data(), shape, Scaling::perGroup(64), o), s);
}
