//===- LinearTest.cpp - bias epilogue and bias gradient references --------===//
//
// The bias gradient against an fp64 sum (within the f32 rounding of its
// additions), its documented order on a case where order decides the
// result, its independence from `partials` where every partial sum is exact,
// and IEEE propagation of NaN and infinities; the bias epilogue as two
// roundings, never a fused multiply-add.
//
//===----------------------------------------------------------------------===//

#include "coat/Numerics/ColumnSums.h"
#include "coat/Numerics/Reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace coat;
using namespace coat::ref;

namespace {

TEST(BiasGradient, MatchesFp64WithinSummationError) {
  const int64_t rows = 1037, cols = 48;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> dy(rows * cols);
  for (float &v : dy)
    v = normal(rng);
  for (int64_t partials :
       {int64_t(1), int64_t(7), int64_t(33), columnSumPartials(rows, 32), rows}) {
    std::vector<float> db(cols);
    biasGradient(dy.data(), rows, cols, partials, db.data());
    for (int64_t c = 0; c < cols; ++c) {
      double exact = 0, mag = 0;
      for (int64_t r = 0; r < rows; ++r) {
        exact += dy[r * cols + c];
        mag += std::fabs(dy[r * cols + c]);
      }
      // Each of the rows + partials additions rounds once.
      double bound = mag * double(rows + partials) * 0x1p-24;
      EXPECT_NEAR(db[c], exact, bound) << "partials " << partials << " col " << c;
    }
  }
}

TEST(BiasGradient, AddsInTheDocumentedOrder) {
  // Sums near 2^24, where adding 1 rounds (to even) away, tell orders apart.
  // partials = 2: partial 0 = rows 0, 2 = 2^24 + 1 -> 2^24; partial 1 =
  // rows 1, 3 = 2; the total 2^24 + 2 is exact.
  std::vector<float> dy = {0x1p24f, 1.0f, 1.0f, 1.0f};
  float db;
  biasGradient(dy.data(), 4, 1, 2, &db);
  EXPECT_EQ(db, 0x1p24f + 2.0f);
  // partials = 1, row order: each 1 rounds away.
  biasGradient(dy.data(), 4, 1, 1, &db);
  EXPECT_EQ(db, 0x1p24f);
  // Nine partials of one row each: run 0 holds partials 0 and 8 (1 + 2^24
  // -> 2^24), runs 1..7 one 1 each, and each run's 1 rounds away from the
  // total. Partials added in their own order would give 8 + 2^24, exact.
  std::vector<float> nine(9, 1.0f);
  nine[8] = 0x1p24f;
  biasGradient(nine.data(), 9, 1, 9, &db);
  EXPECT_EQ(db, 0x1p24f);
  static_assert(kColumnSumStrides == 8, "the case above has 8 runs");
}

TEST(BiasGradient, ExactSumsDoNotDependOnPartials) {
  const int64_t rows = 300, cols = 16;
  std::vector<float> dy(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    dy[i] = float(int64_t(i * 7919 % 201) - 100); // integers, exact sums
  std::vector<float> a(cols), b(cols);
  biasGradient(dy.data(), rows, cols, 1, a.data());
  for (int64_t partials : {2, 8, 9, 64, 300}) {
    biasGradient(dy.data(), rows, cols, partials, b.data());
    EXPECT_EQ(a, b) << partials;
  }
}

TEST(BiasGradient, PropagatesNaNAndInfinities) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Columns: +inf once, +inf and -inf, a NaN, all zeros, no rows at all.
  std::vector<float> dy = {inf, inf, nan, 0.0f, //
                           1.0f, -inf, 1.0f, -0.0f};
  std::vector<float> db(4);
  biasGradient(dy.data(), 2, 4, 2, db.data());
  EXPECT_EQ(db[0], inf);
  EXPECT_TRUE(std::isnan(db[1]));
  EXPECT_TRUE(std::isnan(db[2]));
  EXPECT_EQ(db[3], 0.0f);
  EXPECT_FALSE(std::signbit(db[3])); // sums start from +0
  biasGradient(dy.data(), 0, 4, 1, db.data());
  for (float v : db)
    EXPECT_EQ(v, 0.0f);
}

TEST(LinearBiasEpilogue, RoundsTheProductThenTheSum) {
  // acc * scale = 1 + 2^-24 - 2^-47 rounds to 1, so adding -1 gives 0,
  // where a fused multiply-add would keep 2^-24 - 2^-47.
  float acc = 1.0f + 0x1p-23f, scale = 1.0f - 0x1p-24f, bias = -1.0f, out;
  linearBiasEpilogue(&acc, 1, 1, scale, &bias, &out);
  EXPECT_EQ(out, float(acc * scale) + bias);
  EXPECT_NE(out, std::fma(acc, scale, bias));
  std::vector<float> accs = {1, 2, 3, 4, 5, 6}, bias2 = {0.5f, -1.0f, 2.0f},
                     outs(6);
  linearBiasEpilogue(accs.data(), 2, 3, 2.0f, bias2.data(), outs.data());
  EXPECT_EQ(outs, (std::vector<float>{2.5f, 3.0f, 8.0f, 8.5f, 9.0f, 14.0f}));
}

} // namespace
