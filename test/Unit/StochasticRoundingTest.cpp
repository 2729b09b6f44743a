//===- StochasticRoundingTest.cpp - stochastic rounding of the AdamW step --===//
//
// coat/Numerics/StochasticRounding.h against first principles: values of the
// target format are kept, every result is one of the two neighbours of its
// input, the rounding is unbiased (exactly, over every random word, and
// statistically, over the counter-based bits), and the step with stochastic
// rounding is unbiased against the same step computed in f32.
//
//===----------------------------------------------------------------------===//

#include "coat/Numerics/Reference.h"
#include "coat/Numerics/StochasticRounding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace coat;
using namespace coat::ref;

namespace {

const Fp8Format kFormats[] = {Fp8Format::E4M3, Fp8Format::E5M2};

/// The finite FP8 values of `f` around |x| (x within the format's range).
std::pair<float, float> fp8Neighbours(float x, Fp8Format f) {
  float lo = 0.0f, hi = getFp8Traits(f).maxFinite;
  for (int code = 0; code <= fp8MaxFiniteCode(f); ++code) {
    float v = decodeFp8(static_cast<uint8_t>(code), f);
    if (v <= std::fabs(x))
      lo = std::max(lo, v);
    if (v >= std::fabs(x))
      hi = std::min(hi, v);
  }
  return {lo, hi};
}

TEST(StochasticRounding, KeepsEveryValueOfTheTargetFormat) {
  const uint32_t words[] = {0u, 1u, 0x7fffffffu, 0x80000000u, 0xffffffffu,
                            0x12345678u};
  for (Fp8Format f : kFormats)
    for (int code = 0; code < 256; ++code) {
      float v = decodeFp8(static_cast<uint8_t>(code), f);
      if (!std::isfinite(v))
        continue;
      for (uint32_t w : words) {
        float r = stochasticRoundToFp8(v, f, w);
        EXPECT_EQ(floatBits(r), floatBits(v)) << "code " << code;
      }
    }
  for (uint32_t bits = 0; bits < 0x10000u; bits += 7) {
    float v = decodeBf16(static_cast<uint16_t>(bits));
    if (std::isfinite(v))
      EXPECT_EQ(floatBits(stochasticRoundToBf16(v, 0xffffffffu)), floatBits(v));
  }
}

TEST(StochasticRounding, PassesNonFiniteValuesAndKeepsSigns) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Fp8Format f : kFormats) {
    EXPECT_TRUE(std::isnan(stochasticRoundToFp8(nan, f, 0xffffffffu)));
    EXPECT_EQ(stochasticRoundToFp8(-inf, f, 0xffffffffu), -inf);
    EXPECT_TRUE(std::signbit(stochasticRoundToFp8(-0.0f, f, 0xffffffffu)));
    // A negative value rounds its magnitude: to -0 or the smallest subnormal.
    float tiny = -0.25f * getFp8Traits(f).minSubnormal;
    EXPECT_EQ(stochasticRoundToFp8(tiny, f, 0u), -0.0f);
    EXPECT_EQ(stochasticRoundToFp8(tiny, f, 0xffffffffu),
              -getFp8Traits(f).minSubnormal);
  }
  EXPECT_TRUE(std::isnan(stochasticRoundToBf16(nan, 0xffffffffu)));
  EXPECT_EQ(stochasticRoundToBf16(inf, 0xffffffffu), inf);
  // A NaN whose payload lies in the dropped bits stays NaN.
  EXPECT_TRUE(std::isnan(stochasticRoundToBf16(bitsFloat(0x7f800001u), 0u)));
  EXPECT_TRUE(std::isnan(
      stochasticRoundToFp8(bitsFloat(0x7f800001u), Fp8Format::E4M3, 0u)));
}

/// Inputs across the normal and subnormal ranges of each format, binade
/// edges and values below the smallest subnormal, both signs.
std::vector<float> probeValues(Fp8Format f, std::mt19937 &rng) {
  const Fp8Traits t = getFp8Traits(f);
  std::vector<float> xs = {std::nextafter(t.minNormal, 0.0f),
                           std::nextafter(t.minNormal, 1.0f),
                           0.3f * t.minSubnormal,
                           1.5f * t.minSubnormal,
                           std::nextafter(2.0f, 0.0f),
                           std::nextafter(t.maxFinite, 0.0f)};
  std::uniform_real_distribution<float> logMag(std::log2(t.minSubnormal) - 2,
                                               std::log2(t.maxFinite));
  for (int i = 0; i < 40; ++i)
    xs.push_back((i % 2 ? -1.0f : 1.0f) * std::exp2(logMag(rng)));
  return xs;
}

TEST(StochasticRounding, GivesANeighbourWithTheExactProbability) {
  // Over every value of the random bits that are used, the mean is x
  // exactly for inputs whose lift is exact (normal range, and subnormal
  // inputs with at most 23 significant bits below minNormal's binade).
  std::mt19937 rng(7);
  for (Fp8Format f : kFormats) {
    const int drop = fp8DroppedBits(f);
    for (float x : probeValues(f, rng)) {
      auto [lo, hi] = fp8Neighbours(x, f);
      double sum = 0;
      for (uint32_t j = 0; j < (uint32_t(1) << drop); ++j) {
        float r = std::fabs(stochasticRoundToFp8(x, f, j << (32 - drop)));
        ASSERT_TRUE(r == lo || r == hi) << x << " -> " << r;
        sum += r;
      }
      double mean = sum / double(uint32_t(1) << drop);
      const float a = std::fabs(x), lift = getFp8Traits(f).minNormal;
      bool liftExact = a >= lift || (a + lift) - lift == a;
      if (liftExact)
        EXPECT_EQ(mean, a) << "format " << getFp8Traits(f).name << " x " << x;
      else // the lift rounded x to a multiple of 2^-23 minNormal
        EXPECT_NEAR(mean, a, std::ldexp(double(lift), -24)) << x;
    }
  }
  // bf16: 16 random bits, exact over all of them.
  for (float x : {1.0f + 0x1p-9f, -3.14159f, 1e-39f, 7.7e30f}) {
    double sum = 0;
    for (uint32_t j = 0; j < 0x10000u; ++j)
      sum += stochasticRoundToBf16(x, j << 16);
    EXPECT_EQ(sum / 65536.0, double(x)) << x;
  }
}

TEST(StochasticRounding, CounterBasedBitsAreUnbiased) {
  // The bits of consecutive elements (one key) as the kernels draw them:
  // the mean of many roundings of one value is within 5 standard errors.
  const uint32_t key = stochasticStepKey(0x0123456789abcdefull, 3.0f);
  const int64_t n = 1 << 18;
  for (Fp8Format f : kFormats)
    for (RandomStream s : {RandomStream::M, RandomStream::V}) {
      for (float x : {1.3f, 0.7f * getFp8Traits(f).minSubnormal, -41.0f}) {
        auto [lo, hi] = fp8Neighbours(x, f);
        double p = (std::fabs(x) - lo) / (hi - lo), sum = 0;
        for (int64_t i = 0; i < n; ++i)
          sum += std::fabs(stochasticRoundToFp8(x, f, stochasticBits(key, i, s)));
        double se = (hi - lo) * std::sqrt(p * (1 - p) / n);
        EXPECT_NEAR(sum / n, std::fabs(x), 5 * se) << x;
      }
    }
  for (float x : {1.0f + 0x1p-10f, 0.1f}) {
    double sum = 0, ulp = std::ldexp(1.0, std::ilogb(x) - 7);
    for (int64_t i = 0; i < n; ++i)
      sum += stochasticRoundToBf16(x, stochasticBits(key, i, RandomStream::Param));
    EXPECT_NEAR(sum / n, x, 5 * ulp * 0.5 / std::sqrt(double(n))) << x;
  }
}

TEST(StochasticRounding, BitsDependOnSeedStepStreamAndElementOnly) {
  uint32_t k1 = stochasticStepKey(42, 1.0f), k2 = stochasticStepKey(42, 2.0f);
  EXPECT_EQ(k1, stochasticStepKey(42, 1.0f));
  EXPECT_NE(k1, k2);
  EXPECT_NE(k1, stochasticStepKey(43, 1.0f));
  EXPECT_NE(k1, stochasticStepKey(42ull | (1ull << 40), 1.0f));
  // Elements 2^35 apart (blocks 2^32 apart) get different words.
  EXPECT_NE(stochasticBlockWord(k1, 5), stochasticBlockWord(k1, 5 + (1ull << 35)));
  // Per element and stream, the bits are roughly balanced.
  int ones[3] = {0, 0, 0};
  for (int64_t i = 0; i < 4096; ++i)
    for (unsigned s = 0; s < 3; ++s)
      ones[s] += __builtin_popcount(
          stochasticBits(k1, i, static_cast<RandomStream>(s)) >> 16);
  for (int o : ones)
    EXPECT_NEAR(o / (4096.0 * 16), 0.5, 0.01);
}

/// `steps` steps of a plain-moment bf16 AdamW from one state, once per seed:
/// the means of the stochastic results against the f32 results of the same
/// step (f32 parameters, moments dequantized as they would be rounded).
TEST(StochasticRounding, TheStepIsUnbiasedAgainstItsF32Values) {
  const int64_t n = 300; // a partial last group
  MomentQuantConfig cfg;
  MomentFormat plainM{Fp8Format::E4M3, false, true};
  MomentFormat plainV{Fp8Format::E4M3, false, false};
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> p0(n), g(n);
  for (int64_t i = 0; i < n; ++i) {
    p0[i] = roundToBf16(normal(rng));
    g[i] = normal(rng) * 1e-2f;
  }
  const int64_t groups = (n + cfg.groupSize - 1) / cfg.groupSize;
  AdamWHyper hyper;
  hyper.lr = 3e-3f; // updates of a few bf16 ulps

  // The f32 step: parameters and moments unrounded.
  std::vector<float> p32 = p0;
  std::vector<uint8_t> mc(n), vc(n);
  std::vector<float> ms(groups), vs(groups);
  ASSERT_FALSE(adamwStep(n, HostFloat::F32, p32.data(), HostFloat::F32,
                         g.data(), {mc.data(), ms.data(), nullptr, nullptr, plainM},
                         {vc.data(), vs.data(), nullptr, nullptr, plainV}, cfg,
                         hyper));
  const float b1 = hyper.beta1, b2 = hyper.beta2;
  std::vector<double> mMean(n), vMean(n), pMean(n);
  const int seeds = 400;
  for (int seed = 0; seed < seeds; ++seed) {
    std::vector<uint16_t> p(n);
    for (int64_t i = 0; i < n; ++i)
      p[i] = encodeBf16(p0[i]);
    std::vector<uint8_t> smc(n), svc(n);
    std::vector<float> sms(groups), svs(groups);
    ASSERT_FALSE(adamwStep(n, HostFloat::BF16, p.data(), HostFloat::F32,
                           g.data(),
                           {smc.data(), sms.data(), nullptr, nullptr, plainM},
                           {svc.data(), svs.data(), nullptr, nullptr, plainV},
                           cfg, hyper, AdamWRounding{true, true, uint64_t(seed)}));
    for (int64_t i = 0; i < n; ++i) {
      pMean[i] += decodeBf16(p[i]) / double(seeds);
      mMean[i] += decodeFp8(smc[i], Fp8Format::E4M3) * sms[i / 128] / seeds;
      vMean[i] += decodeFp8(svc[i], Fp8Format::E4M3) * svs[i / 128] / seeds;
    }
  }
  // Standard errors: at most half a grid step over sqrt(seeds).
  int pOff = 0, mOff = 0, vOff = 0;
  for (int64_t i = 0; i < n; ++i) {
    double m = (1.0f - b1) * g[i], v = ((1.0f - b2) * g[i]) * g[i];
    double pUlp = std::ldexp(1.0, std::ilogb(p32[i]) - 7);
    // E4M3's step at a code: 2^(exponent - 3), 2^-9 among subnormals.
    auto codeStep = [](double x) {
      return std::ldexp(1.0, std::max(std::ilogb(x), -6) - 3);
    };
    double mUlp = ms[i / 128] * codeStep(m / ms[i / 128]);
    double vUlp = vs[i / 128] * codeStep(v / vs[i / 128]);
    pOff += std::fabs(pMean[i] - p32[i]) > 2.5 * pUlp / std::sqrt(seeds);
    mOff += std::fabs(mMean[i] - m) > 2.5 * mUlp / std::sqrt(seeds);
    vOff += std::fabs(vMean[i] - v) > 2.5 * vUlp / std::sqrt(seeds);
  }
  // A 5-sigma bound per element would make a fluke unlikely but hide a
  // one-sided bias; at 5 standard errors (2.5 x the half-step bound) only a
  // few elements of 300 may stray.
  EXPECT_LE(pOff, 6);
  EXPECT_LE(mOff, 6);
  EXPECT_LE(vOff, 6);
  // Round to nearest would be off by up to half a step on every element.
}

TEST(StochasticRounding, TheStepRejectsWhatItCannotRound) {
  std::vector<float> p(4, 1.0f), g(4, 0.5f), s(1);
  std::vector<uint8_t> codes(4);
  MomentFormat plain{Fp8Format::E4M3, false, true};
  MomentState m{codes.data(), s.data(), nullptr, nullptr, plain};
  MomentQuantConfig cfg;
  auto err = adamwStep(4, HostFloat::F32, p.data(), HostFloat::F32, g.data(),
                       m, m, cfg, AdamWHyper{}, AdamWRounding{true, false, 1});
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("bf16"), std::string::npos) << *err;
  cfg.mode = AdamWMode::Reference;
  err = adamwStep(4, HostFloat::F32, p.data(), HostFloat::F32, g.data(), m, m,
                  cfg, AdamWHyper{}, AdamWRounding{false, true, 1});
  ASSERT_TRUE(err);
  EXPECT_NE(err->find("mode fixed"), std::string::npos) << *err;
}

} // namespace
