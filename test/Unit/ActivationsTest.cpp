//===- ActivationsTest.cpp - COAT.md §3.4 operators against fp64 ----------===//
//
// Forward passes are compared with fp64 evaluations of the same formulas;
// backward passes with central differences of an fp64 forward, so a wrong
// derivative formula cannot hide behind a matching re-derivation.
//
//===----------------------------------------------------------------------===//

#include "coat/Numerics/Reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

using namespace coat;
using namespace coat::ref;

namespace {

std::vector<float> randomValues(size_t n, unsigned seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> x(n);
  for (float &v : x)
    v = normal(rng);
  return x;
}

/// d/dx_i of sum_j dy_j * f(x)_j by central differences in fp64.
std::vector<double>
numericGradient(const std::vector<float> &x, const std::vector<float> &dy,
                const std::function<std::vector<double>(
                    const std::vector<double> &)> &forward) {
  std::vector<double> xd(x.begin(), x.end()), grad(x.size());
  auto loss = [&](const std::vector<double> &v) {
    std::vector<double> y = forward(v);
    double l = 0;
    for (size_t j = 0; j < y.size(); ++j)
      l += dy[j] * y[j];
    return l;
  };
  for (size_t i = 0; i < x.size(); ++i) {
    const double h = 1e-5 * std::max(1.0, std::fabs(xd[i]));
    std::vector<double> up = xd, down = xd;
    up[i] += h;
    down[i] -= h;
    grad[i] = (loss(up) - loss(down)) / (2 * h);
  }
  return grad;
}

void expectClose(const std::vector<float> &got, const std::vector<double> &want,
                 double relTol, double absTol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], relTol * std::fabs(want[i]) + absTol) << i;
}

std::vector<double> rmsNormDouble(const std::vector<double> &x,
                                  const std::vector<float> &w, int rows,
                                  int cols) {
  std::vector<double> y(x.size());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int j = 0; j < cols; ++j)
      ss += x[r * cols + j] * x[r * cols + j];
    const double rstd = 1.0 / std::sqrt(ss / cols + 1e-5);
    for (int j = 0; j < cols; ++j)
      y[r * cols + j] = x[r * cols + j] * rstd * w[j];
  }
  return y;
}

std::vector<double> layerNormDouble(const std::vector<double> &x,
                                    const float *w, const float *b, int rows,
                                    int cols) {
  std::vector<double> y(x.size());
  for (int r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int j = 0; j < cols; ++j)
      mean += x[r * cols + j];
    mean /= cols;
    for (int j = 0; j < cols; ++j)
      var += (x[r * cols + j] - mean) * (x[r * cols + j] - mean);
    const double rstd = 1.0 / std::sqrt(var / cols + 1e-5);
    for (int j = 0; j < cols; ++j) {
      const double xh = (x[r * cols + j] - mean) * rstd;
      y[r * cols + j] = w ? xh * w[j] + (b ? b[j] : 0.0) : xh;
    }
  }
  return y;
}

} // namespace

TEST(Activations, SiluForwardAndBackward) {
  std::vector<float> x = randomValues(256, 1, 4.0f), g = randomValues(256, 2, 1.0f);
  std::vector<float> y(256), dx(256);
  siluForward(x.data(), 256, y.data());
  siluBackward(x.data(), g.data(), 256, dx.data());
  std::vector<double> yWant(256), dxWant(256);
  for (int i = 0; i < 256; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-double(x[i])));
    yWant[i] = x[i] * s;
    dxWant[i] = g[i] * (s + x[i] * s * (1 - s));
  }
  expectClose(y, yWant, 1e-6, 1e-7);
  expectClose(dx, dxWant, 1e-6, 1e-7);
  // A sign check on the formula itself: silu'(0) = 1/2.
  const float zero = 0.0f, one = 1.0f;
  float d;
  siluBackward(&zero, &one, 1, &d);
  EXPECT_EQ(d, 0.5f);
}

TEST(Activations, GeluIsExactErfAndItsDerivative) {
  std::vector<float> x = randomValues(256, 3, 3.0f), g = randomValues(256, 4, 1.0f);
  std::vector<float> y(256), dx(256);
  geluForward(x.data(), 256, y.data());
  geluBackward(x.data(), g.data(), 256, dx.data());
  std::vector<double> yWant(256);
  for (int i = 0; i < 256; ++i)
    yWant[i] = x[i] * 0.5 * (1.0 + std::erf(x[i] / std::sqrt(2.0)));
  expectClose(y, yWant, 1e-6, 1e-7);
  auto numeric = numericGradient(x, g, [](const std::vector<double> &v) {
    std::vector<double> out(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      out[i] = v[i] * 0.5 * (1.0 + std::erf(v[i] / std::sqrt(2.0)));
    return out;
  });
  expectClose(dx, numeric, 1e-5, 1e-6);
}

double geluTanhDouble(double x) {
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

TEST(Activations, GeluTanhFormAndItsDerivative) {
  std::vector<float> x = randomValues(256, 8, 3.0f), g = randomValues(256, 9, 1.0f);
  std::vector<float> y(256), dx(256), exact(256);
  geluTanhForward(x.data(), 256, y.data());
  geluTanhBackward(x.data(), g.data(), 256, dx.data());
  std::vector<double> yWant(256);
  for (int i = 0; i < 256; ++i)
    yWant[i] = geluTanhDouble(x[i]);
  // 1 + tanh cancels for negative x: absolute error of the order of x ulp(1).
  expectClose(y, yWant, 1e-6, 1e-6);
  auto numeric = numericGradient(x, g, [](const std::vector<double> &v) {
    std::vector<double> out(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      out[i] = geluTanhDouble(v[i]);
    return out;
  });
  expectClose(dx, numeric, 1e-5, 1e-5);
  // It is not the exact form: they differ by up to 5e-4 (x near +-2).
  geluForward(x.data(), 256, exact.data());
  double most = 0;
  for (int i = 0; i < 256; ++i)
    most = std::max(most, double(std::fabs(exact[i] - y[i])));
  EXPECT_GT(most, 1e-4);
  // The derivative at 0 is 1/2, and the form saturates to x and 0.
  const float at[] = {0.0f, 20.0f, -20.0f}, ones[] = {1.0f, 1.0f, 1.0f};
  float d[3], v[3];
  geluTanhBackward(at, ones, 3, d);
  geluTanhForward(at, 3, v);
  EXPECT_EQ(d[0], 0.5f);
  EXPECT_EQ(v[1], 20.0f);
  EXPECT_EQ(v[2], 0.0f);
}

TEST(Activations, SwigluMul) {
  std::vector<float> a = randomValues(64, 5, 1.0f), b = randomValues(64, 6, 1.0f),
                     g = randomValues(64, 7, 1.0f);
  std::vector<float> y(64), ga(64), gb(64);
  swigluMulForward(a.data(), b.data(), 64, y.data());
  swigluMulBackward(a.data(), b.data(), g.data(), 64, ga.data(), gb.data());
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(y[i], a[i] * b[i]);
    EXPECT_EQ(ga[i], g[i] * b[i]);
    EXPECT_EQ(gb[i], g[i] * a[i]);
  }
}

TEST(Activations, RmsNormForwardAndBackward) {
  const int rows = 3, cols = 48;
  std::vector<float> x = randomValues(rows * cols, 8, 2.0f);
  std::vector<float> w = randomValues(cols, 9, 1.0f);
  std::vector<float> dy = randomValues(rows * cols, 10, 1.0f);
  std::vector<float> y(rows * cols), rstd(rows), dx(rows * cols), dw(cols);
  rmsNormForward(x.data(), w.data(), rows, cols, kNormEps, y.data(), rstd.data());
  std::vector<double> xd(x.begin(), x.end());
  expectClose(y, rmsNormDouble(xd, w, rows, cols), 1e-5, 1e-6);
  rmsNormBackward(x.data(), w.data(), dy.data(), rows, cols, kNormEps,
                  dx.data(), dw.data());
  expectClose(dx, numericGradient(x, dy, [&](const std::vector<double> &v) {
                return rmsNormDouble(v, w, rows, cols);
              }),
              1e-4, 1e-5);
  std::vector<double> dwWant(cols, 0.0);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < cols; ++j)
      dwWant[j] += dy[r * cols + j] * x[r * cols + j] * double(rstd[r]);
  expectClose(dw, dwWant, 1e-5, 1e-6);
}

TEST(Activations, LayerNormWithAndWithoutAffine) {
  const int rows = 2, cols = 40;
  std::vector<float> x = randomValues(rows * cols, 11, 2.0f);
  for (float &v : x)
    v += 1.5f; // a non-zero mean exercises the centring
  std::vector<float> w = randomValues(cols, 12, 1.0f), b = randomValues(cols, 13, 1.0f);
  std::vector<float> dy = randomValues(rows * cols, 14, 1.0f);
  for (bool affine : {false, true}) {
    const float *wp = affine ? w.data() : nullptr;
    const float *bp = affine ? b.data() : nullptr;
    std::vector<float> y(rows * cols), dx(rows * cols), dw(cols), db(cols);
    layerNormForward(x.data(), wp, bp, rows, cols, kNormEps, y.data(), nullptr,
                     nullptr);
    std::vector<double> xd(x.begin(), x.end());
    expectClose(y, layerNormDouble(xd, wp, bp, rows, cols), 1e-5, 1e-6);
    layerNormBackward(x.data(), wp, dy.data(), rows, cols, kNormEps, dx.data(),
                      affine ? dw.data() : nullptr, affine ? db.data() : nullptr);
    expectClose(dx, numericGradient(x, dy, [&](const std::vector<double> &v) {
                  return layerNormDouble(v, wp, bp, rows, cols);
                }),
                1e-4, 1e-5);
    if (affine)
      for (int j = 0; j < cols; ++j) {
        double dbWant = 0;
        for (int r = 0; r < rows; ++r)
          dbWant += dy[r * cols + j];
        EXPECT_NEAR(db[j], dbWant, 1e-5);
      }
  }
}

TEST(Activations, ResidualAddGivesBf16SumAndGroupQuantizedCopy) {
  const int rows = 2, cols = 32;
  std::vector<float> r = randomValues(rows * cols, 15, 1.0f);
  std::vector<float> b = randomValues(rows * cols, 16, 0.1f);
  std::vector<uint16_t> sum(rows * cols);
  std::vector<uint8_t> codes(rows * cols);
  std::vector<float> scales(rows * cols / 16);
  ASSERT_FALSE(residualAddForward(r.data(), b.data(), rows, cols, 16,
                                  Fp8Format::E4M3, sum.data(), codes.data(),
                                  scales.data()));
  for (int i = 0; i < rows * cols; ++i) {
    const float s = r[i] + b[i];
    EXPECT_EQ(sum[i], encodeBf16(s));
    const float scale = scales[i / 16];
    EXPECT_EQ(scale, roundToBf16(scale)); // bf16 scales
    EXPECT_EQ(codes[i], encodeFp8(s / scale, Fp8Format::E4M3));
  }
  EXPECT_TRUE(residualAddForward(r.data(), b.data(), rows, cols, 24,
                                 Fp8Format::E4M3, sum.data(), codes.data(),
                                 scales.data()));
}

namespace {

/// y = x * cos + rotate_half(x) * sin in fp64, head by head, with
/// rotate_half built as the concatenation [-x2, x1] (the Hugging Face form,
/// not the reference's split into halves).
std::vector<double> ropeDouble(const std::vector<double> &x,
                               const std::vector<float> &cos,
                               const std::vector<float> &sin, int rows,
                               int cols, int d, int heads) {
  std::vector<double> y = x;
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h) {
      const double *head = x.data() + r * cols + h * d;
      std::vector<double> rot(head + d / 2, head + d);
      for (double &v : rot)
        v = -v;
      rot.insert(rot.end(), head, head + d / 2);
      for (int j = 0; j < d; ++j)
        y[r * cols + h * d + j] =
            head[j] * cos[r * d + j] + rot[j] * sin[r * d + j];
    }
  return y;
}

} // namespace

TEST(Activations, RopeRotatesTheLeadingHeadsAndCopiesTheRest) {
  const int rows = 3, d = 8, heads = 3, rotated = 2, cols = heads * d;
  std::vector<float> x = randomValues(rows * cols, 21, 1.0f);
  std::vector<float> cos = randomValues(rows * d, 22, 1.0f),
                     sin = randomValues(rows * d, 23, 1.0f);
  std::vector<float> y(x.size());
  ASSERT_FALSE(ropeForward(x.data(), cos.data(), sin.data(), rows, cols, d,
                           rotated, y.data()));
  std::vector<double> want = ropeDouble(std::vector<double>(x.begin(), x.end()),
                                        cos, sin, rows, cols, d, rotated);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < cols; ++j) {
      const int i = r * cols + j;
      if (j >= rotated * d) {
        EXPECT_EQ(y[i], x[i]) << "v column " << j;
        continue;
      }
      // Two f32 products and their sum, each rounded once.
      const int k = j % d;
      const int partner = k < d / 2 ? i + d / 2 : i - d / 2;
      const double bound = 0x1p-23 * 2 *
                           (std::fabs(x[i] * cos[r * d + k]) +
                            std::fabs(x[partner] * sin[r * d + k]));
      EXPECT_NEAR(y[i], want[i], bound) << r << "," << j;
    }
}

TEST(Activations, RopeGradIsTheTransposeOfTheForward) {
  const int rows = 2, d = 6, heads = 4, rotated = 3, cols = heads * d;
  std::vector<float> x = randomValues(rows * cols, 31, 1.0f),
                     dy = randomValues(rows * cols, 32, 1.0f);
  // Unequal table halves: a backward that assumed cos1 == cos2 would pass
  // with Hugging Face's tables.
  std::vector<float> cos = randomValues(rows * d, 33, 1.0f),
                     sin = randomValues(rows * d, 34, 1.0f);
  std::vector<float> dx(x.size());
  ASSERT_FALSE(ropeBackward(dy.data(), cos.data(), sin.data(), rows, cols, d,
                            rotated, dx.data()));
  std::vector<double> want =
      numericGradient(x, dy, [&](const std::vector<double> &v) {
        return ropeDouble(v, cos, sin, rows, cols, d, rotated);
      });
  expectClose(dx, want, 1e-5, 1e-5);
}

TEST(Activations, RopeInPlaceAndNonFinite) {
  const int rows = 1, d = 4, cols = 8;
  std::vector<float> x = {1, 2, NAN, 4, INFINITY, 0, -0.0f, 5};
  const std::vector<float> cos = {0, 1, 0, 1}, sin = {1, 0, 1, 0};
  std::vector<float> y(x.size());
  ASSERT_FALSE(ropeForward(x.data(), cos.data(), sin.data(), rows, cols, d, 2,
                           y.data()));
  // Head 0 = [1, 2 | nan, 4]: y1 = x1*c1 - x2*s1, y2 = x2*c2 + x1*s2.
  EXPECT_TRUE(std::isnan(y[0])); // 1*0 - nan*1
  EXPECT_EQ(y[1], 2.0f);         // 2*1 - 4*0
  EXPECT_TRUE(std::isnan(y[2])); // nan*0 + 1*1
  EXPECT_EQ(y[3], 4.0f);         // 4*1 + 2*0
  // Head 1 = [inf, 0 | -0, 5]: inf * 0 is NaN.
  EXPECT_TRUE(std::isnan(y[4])); // inf*0 - (-0)*1
  EXPECT_EQ(y[5], 0.0f);         // 0*1 - 5*0
  EXPECT_FALSE(std::signbit(y[5]));
  EXPECT_EQ(y[6], INFINITY);     // -0*0 + inf*1
  EXPECT_EQ(y[7], 5.0f);         // 5*1 + 0*0
  // Written over its input, the result is the same.
  std::vector<float> inPlace = x;
  ASSERT_FALSE(ropeForward(inPlace.data(), cos.data(), sin.data(), rows, cols,
                           d, 2, inPlace.data()));
  for (int i = 0; i < cols; ++i)
    EXPECT_TRUE(std::memcmp(&inPlace[i], &y[i], sizeof(float)) == 0) << i;
}

TEST(Activations, RopeRejectsShapesThatAreNotWholeHeads) {
  float v[16] = {};
  EXPECT_TRUE(ropeForward(v, v, v, 1, 12, 8, 1, v)); // 12 % 8
  EXPECT_TRUE(ropeForward(v, v, v, 1, 9, 3, 1, v));  // odd head_dim
  EXPECT_TRUE(ropeBackward(v, v, v, 1, 8, 4, 3, v)); // 3 heads of 2
  EXPECT_FALSE(ropeBackward(v, v, v, 1, 8, 4, 0, v));
}
