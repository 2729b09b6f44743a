//===- SoftExp2Test.cpp - 2^x on the FMA units against exp2 ---------------===//
//
// coat::softExp2 (coat/Numerics/SoftExp2.h) performs the f32 operations
// coat-expand-soft-exp2 emits. Its error against the exact 2^x (fp64 exp2)
// must stay within the SFU's documented 2 ulp (ex2.approx.f32), which the
// error bounds of coat-lower-pointwise's fast forms assume.
//
//===----------------------------------------------------------------------===//

#include "coat/Numerics/SoftExp2.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace coat;

namespace {

/// |got - 2^x| in ulps of the f32 result.
double ulpError(float x, float got) {
  double exact = std::exp2(double(x));
  float rounded = static_cast<float>(exact);
  double ulp = std::nextafter(rounded, std::numeric_limits<float>::infinity()) -
               double(rounded);
  return std::fabs(double(got) - exact) / ulp;
}

TEST(SoftExp2, WithinTwoUlpOverTheNormalRange) {
  // Every 97th f32 in [-126, 128): results from 2^-126 to just below 2^128.
  double worst = 0;
  float worstAt = 0;
  for (float x = -126.0f; x < 128.0f;) {
    double e = ulpError(x, softExp2(x));
    if (e > worst) {
      worst = e;
      worstAt = x;
    }
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    u = x < 0 ? u - 97 : u + 97;
    if (x < 0 && (u & 0x7fffffffu) < 97)
      u = 0; // crossed zero
    std::memcpy(&x, &u, sizeof x);
  }
  EXPECT_LE(worst, 2.0) << "at x = " << worstAt;
  // The fit's own bound, with a little room for its f32 evaluation.
  EXPECT_LE(worst, 1.5) << "at x = " << worstAt;
}

TEST(SoftExp2, IntegersAndHalvesAreExactOrNearly) {
  for (int n = -126; n < 128; ++n) {
    EXPECT_EQ(softExp2(float(n)), std::ldexp(1.0f, n)) << n;
    EXPECT_LE(ulpError(n + 0.5f, softExp2(n + 0.5f)), 1.5) << n;
  }
}

TEST(SoftExp2, EdgesFollowTheSfu) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(softExp2(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(softExp2(inf), inf);
  EXPECT_EQ(softExp2(128.0f), inf);
  EXPECT_EQ(softExp2(1e30f), inf);
  EXPECT_EQ(softExp2(-inf), 0.0f);
  EXPECT_EQ(softExp2(-1e30f), 0.0f);
  EXPECT_EQ(softExp2(-127.0f), 0.0f); // ex2.approx.ftz flushes it too
  EXPECT_EQ(softExp2(-0.0f), 1.0f);
  // Just below the normal range: 0 or a subnormal, never above 2^-126.
  float r = softExp2(-126.25f);
  EXPECT_TRUE(r == 0.0f || std::fpclassify(r) == FP_SUBNORMAL) << r;
}

} // namespace
