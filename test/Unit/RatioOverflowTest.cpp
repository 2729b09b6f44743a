//===- RatioOverflowTest.cpp - the optimizer's exact overflow test --------===//
//
// On the GPU, coat-lower-optimizer derives a moment group's expansion
// exponent from log2 M - log2 mn instead of log2(M / mn). Where the f32
// division M / mn overflows, the specification takes the smallest exponent;
// approximate logarithms cannot see that boundary, so the kernel decides it
// with
//
//   mn < 1  and  M * 2^-64 - mn * 2^64 >= -(mn * 2^39)
//
// (OptimizerEmitter.cpp). `overflowsByTest` is that sequence in C++, plain
// and with the subtraction contracted into an fma as the GPU compiler may;
// the tests check it against the division itself on both sides of the
// boundary and over random pairs.
//
//===----------------------------------------------------------------------===//

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <cstdint>
#include <cstring>

namespace {

bool overflowsByDivision(float m, float mn) {
  volatile float q = m / mn;
  return std::isinf(q);
}

bool overflowsByTest(float m, float mn, bool contracted) {
  float margin = contracted ? std::fma(m, 0x1p-64f, -(mn * 0x1p64f))
                            : m * 0x1p-64f - mn * 0x1p64f;
  return mn < 1.0f && -(mn * 0x1p39f) <= margin;
}

/// Checks both forms against the division; returns whether it overflows.
bool expectAgree(float m, float mn) {
  for (bool contracted : {false, true})
    EXPECT_EQ(overflowsByTest(m, mn, contracted), overflowsByDivision(m, mn))
        << "M = " << m << ", mn = " << mn << (contracted ? " (fma)" : "");
  return overflowsByDivision(m, mn);
}

TEST(RatioOverflow, ExactAroundTheBoundary) {
  // For minima across the normal and subnormal range, maxima a few ulps
  // either side of mn * 2^128 (1 - 2^-25), the smallest overflowing ratio.
  const float fltMax = std::numeric_limits<float>::max();
  int overflowing = 0, finite = 0;
  for (int e = -149; e <= 0; ++e) {
    for (float mant : {1.0f, 1.25f, 1.5f, 1.9999999f}) {
      float mn = std::ldexp(mant, e);
      if (mn == 0.0f)
        continue;
      double edge = double(mn) * std::ldexp(1.0 - std::ldexp(1.0, -25), 128);
      if (edge > fltMax * 4.0)
        continue;
      float m = edge > fltMax ? fltMax : float(edge);
      for (int step = 0; step < 8; ++step)
        m = std::nextafter(m, 0.0f);
      for (int step = 0; step < 16 && m <= fltMax; ++step) {
        (expectAgree(m, mn) ? overflowing : finite) += 1;
        m = std::nextafter(m, std::numeric_limits<float>::infinity());
      }
    }
  }
  // Both sides of the boundary were visited.
  EXPECT_GT(overflowing, 1000);
  EXPECT_GT(finite, 1000);
}

TEST(RatioOverflow, AgreesOnRandomPairs) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits(1, 0x7F7FFFFFu);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t a = bits(rng), b = bits(rng);
    float x, y;
    std::memcpy(&x, &a, 4);
    std::memcpy(&y, &b, 4);
    expectAgree(std::fmax(x, y), std::fmin(x, y));
  }
}

TEST(RatioOverflow, SpecialValues) {
  const float fltMax = std::numeric_limits<float>::max();
  const float tiny = std::numeric_limits<float>::denorm_min();
  expectAgree(fltMax, tiny);
  expectAgree(fltMax, 1.0f);
  expectAgree(1.0f, 1.0f);
  expectAgree(0x1p127f, 0x1p-1f);  // 2^128: overflows
  expectAgree(0x1p127f, 0x1p-0f);  // 2^127: does not
  expectAgree(0x1p-20f, tiny);     // 2^129: overflows
}

} // namespace
