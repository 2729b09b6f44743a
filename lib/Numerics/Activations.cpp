//===- Activations.cpp - Reference non-linear operators (COAT.md §3.4) ----===//
//
// f32 math, IEEE division and correctly rounded sqrt, row sums accumulated
// left to right. COAT's Triton kernels use div.full / fast sqrt and tree
// reductions, so GPU results agree to a few ulp, not bit for bit.
//
//===----------------------------------------------------------------------===//

#include "coat/Numerics/Reference.h"

#include <cmath>

namespace coat::ref {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

const float kSqrt2 = std::sqrt(2.0f);
const float kSqrt2Pi = static_cast<float>(std::sqrt(2.0 * 3.14159265358979323846));

float geluCdf(float x) { return (1.0f + std::erf(x / kSqrt2)) / 2.0f; }

/// tanh(sqrt(2/pi) * (x + 0.044715 x^3)), the cube formed as (x * x) * x.
float geluTanhInner(float x) {
  const float cube = x * x * x;
  return std::tanh(kGeluTanhScale * (x + kGeluTanhCubic * cube));
}

float rowMean(const float *row, int64_t cols) {
  float sum = 0.0f;
  for (int64_t j = 0; j < cols; ++j)
    sum += row[j];
  return sum / static_cast<float>(cols);
}

float rmsRstd(const float *row, int64_t cols, float eps) {
  float sumSquares = 0.0f;
  for (int64_t j = 0; j < cols; ++j)
    sumSquares += row[j] * row[j];
  return 1.0f / std::sqrt(sumSquares / static_cast<float>(cols) + eps);
}

void layerNormStats(const float *row, int64_t cols, float eps, float &mean,
                    float &rstd) {
  mean = rowMean(row, cols);
  float sumSquares = 0.0f;
  for (int64_t j = 0; j < cols; ++j) {
    const float d = row[j] - mean;
    sumSquares += d * d;
  }
  rstd = 1.0f / std::sqrt(sumSquares / static_cast<float>(cols) + eps);
}

} // namespace

void siluForward(const float *x, int64_t n, float *y) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = x[i] * sigmoid(x[i]);
}

void siluBackward(const float *x, const float *g, int64_t n, float *dx) {
  for (int64_t i = 0; i < n; ++i) {
    const float s = sigmoid(x[i]);
    dx[i] = g[i] * (s + x[i] * s * (1.0f - s));
  }
}

void geluForward(const float *x, int64_t n, float *y) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = x[i] * geluCdf(x[i]);
}

void geluBackward(const float *x, const float *g, int64_t n, float *dx) {
  for (int64_t i = 0; i < n; ++i) {
    const float pdfTerm = x[i] * std::exp(-(x[i] * x[i]) / 2.0f) / kSqrt2Pi;
    dx[i] = g[i] * (geluCdf(x[i]) + pdfTerm);
  }
}

void geluTanhForward(const float *x, int64_t n, float *y) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = 0.5f * x[i] * (1.0f + geluTanhInner(x[i]));
}

void geluTanhBackward(const float *x, const float *g, int64_t n, float *dx) {
  for (int64_t i = 0; i < n; ++i) {
    const float t = geluTanhInner(x[i]);
    const float cdf = 0.5f * (1.0f + t);
    const float slope =
        kGeluTanhScale * (1.0f + 3.0f * kGeluTanhCubic * (x[i] * x[i]));
    const float pdfTerm = 0.5f * x[i] * (1.0f - t * t) * slope;
    dx[i] = g[i] * (cdf + pdfTerm);
  }
}

void swigluMulForward(const float *x1, const float *x2, int64_t n, float *y) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = x1[i] * x2[i];
}

void swigluMulBackward(const float *x1, const float *x2, const float *g,
                       int64_t n, float *g1, float *g2) {
  for (int64_t i = 0; i < n; ++i) {
    g1[i] = g[i] * x2[i];
    g2[i] = g[i] * x1[i];
  }
}

void rmsNormForward(const float *x, const float *w, int64_t rows, int64_t cols,
                    float eps, float *y, float *rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = x + r * cols;
    const float rowRstd = rmsRstd(row, cols, eps);
    if (rstd)
      rstd[r] = rowRstd;
    for (int64_t j = 0; j < cols; ++j)
      y[r * cols + j] = row[j] * rowRstd * w[j];
  }
}

void rmsNormBackward(const float *x, const float *w, const float *dy,
                     int64_t rows, int64_t cols, float eps, float *dx,
                     float *dw) {
  if (dw)
    for (int64_t j = 0; j < cols; ++j)
      dw[j] = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = x + r * cols;
    const float *dyRow = dy + r * cols;
    const float rstd = rmsRstd(row, cols, eps);
    float dot = 0.0f; // sum(xh * w * dy)
    for (int64_t j = 0; j < cols; ++j)
      dot += (row[j] * rstd) * (w[j] * dyRow[j]);
    const float meanDot = dot / static_cast<float>(cols);
    for (int64_t j = 0; j < cols; ++j) {
      const float normalized = row[j] * rstd;
      dx[r * cols + j] = (w[j] * dyRow[j] - normalized * meanDot) * rstd;
      if (dw)
        dw[j] += dyRow[j] * normalized;
    }
  }
}

void layerNormForward(const float *x, const float *w, const float *b,
                      int64_t rows, int64_t cols, float eps, float *y,
                      float *mean, float *rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = x + r * cols;
    float rowMeanValue, rowRstd;
    layerNormStats(row, cols, eps, rowMeanValue, rowRstd);
    if (mean)
      mean[r] = rowMeanValue;
    if (rstd)
      rstd[r] = rowRstd;
    for (int64_t j = 0; j < cols; ++j) {
      const float normalized = (row[j] - rowMeanValue) * rowRstd;
      float out = normalized;
      if (w)
        out = normalized * w[j] + (b ? b[j] : 0.0f);
      y[r * cols + j] = out;
    }
  }
}

void layerNormBackward(const float *x, const float *w, const float *dy,
                       int64_t rows, int64_t cols, float eps, float *dx,
                       float *dw, float *db) {
  for (int64_t j = 0; j < cols; ++j) {
    if (dw)
      dw[j] = 0.0f;
    if (db)
      db[j] = 0.0f;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = x + r * cols;
    const float *dyRow = dy + r * cols;
    float rowMeanValue, rstd;
    layerNormStats(row, cols, eps, rowMeanValue, rstd);
    float dot = 0.0f, sum = 0.0f; // sum(xh * w*dy), sum(w*dy)
    for (int64_t j = 0; j < cols; ++j) {
      const float weighted = w ? w[j] * dyRow[j] : dyRow[j];
      dot += ((row[j] - rowMeanValue) * rstd) * weighted;
      sum += weighted;
    }
    const float meanDot = dot / static_cast<float>(cols);
    const float meanWeighted = sum / static_cast<float>(cols);
    for (int64_t j = 0; j < cols; ++j) {
      const float normalized = (row[j] - rowMeanValue) * rstd;
      const float weighted = w ? w[j] * dyRow[j] : dyRow[j];
      dx[r * cols + j] =
          (weighted - (normalized * meanDot + meanWeighted)) * rstd;
      if (dw)
        dw[j] += dyRow[j] * normalized;
      if (db)
        db[j] += dyRow[j];
    }
  }
}

std::optional<std::string>
residualAddForward(const float *residual, const float *branch, int64_t rows,
                   int64_t cols, int64_t groupSize, Fp8Format format,
                   uint16_t *sumBf16, uint8_t *codes, float *scales) {
  const int64_t n = rows * cols;
  std::vector<float> sum(n);
  for (int64_t i = 0; i < n; ++i) {
    sum[i] = residual[i] + branch[i];
    sumBf16[i] = encodeBf16(sum[i]);
  }
  // The FP8 copy is taken from the f32 sum, before the bf16 rounding, as the
  // fused Triton kernel does.
  QuantizeOptions opts;
  opts.format = format;
  opts.eps = kActivationScaleEps;
  opts.bf16Scale = true;
  return quantize(sum.data(), {rows, cols}, Scaling::perGroup(groupSize), opts,
                  codes, scales);
}

namespace {

std::optional<std::string> checkRopeShape(int64_t rows, int64_t cols,
                                          int64_t headDim,
                                          int64_t rotatedHeads) {
  if (rows < 0 || cols < 0)
    return std::string("rope: rows and cols must be >= 0");
  if (headDim <= 0 || headDim % 2 != 0)
    return "rope: head_dim must be positive and even, got " +
           std::to_string(headDim);
  if (cols % headDim != 0)
    return "rope: " + std::to_string(cols) +
           " columns are not whole heads of " + std::to_string(headDim);
  if (rotatedHeads < 0 || rotatedHeads > cols / headDim)
    return "rope: rotated_heads must be in [0, " +
           std::to_string(cols / headDim) + "], got " +
           std::to_string(rotatedHeads);
  return std::nullopt;
}

/// The rotation (`forward`) or its transpose of the leading heads of each
/// row; the other columns are copied. Every product, and the sum, is its
/// own statement, so no compiler contracts them into a fused multiply-add.
std::optional<std::string> rotate(const float *in, const float *cos,
                                  const float *sin, int64_t rows, int64_t cols,
                                  int64_t headDim, int64_t rotatedHeads,
                                  bool forward, float *out) {
  if (auto err = checkRopeShape(rows, cols, headDim, rotatedHeads))
    return err;
  const int64_t half = headDim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float *x = in + r * cols;
    const float *c = cos + r * headDim;
    const float *s = sin + r * headDim;
    float *y = out + r * cols;
    for (int64_t j = rotatedHeads * headDim; j < cols; ++j)
      y[j] = x[j];
    for (int64_t h = 0; h < rotatedHeads; ++h) {
      const float *x1 = x + h * headDim, *x2 = x1 + half;
      float *y1 = y + h * headDim, *y2 = y1 + half;
      for (int64_t j = 0; j < half; ++j) {
        // Read both halves before writing: `out` may be `in`.
        const float a1 = x1[j], a2 = x2[j];
        if (forward) {
          // y = x*cos + rotate_half(x)*sin, rotate_half(x) = [-x2, x1].
          const float p1 = a1 * c[j], q1 = a2 * s[j];
          const float p2 = a2 * c[half + j], q2 = a1 * s[half + j];
          y1[j] = p1 - q1;
          y2[j] = p2 + q2;
        } else {
          // dx = dy*cos - rotate_half(dy*sin): the transpose of the above.
          const float p1 = a1 * c[j], q1 = a2 * s[half + j];
          const float p2 = a2 * c[half + j], q2 = a1 * s[j];
          y1[j] = p1 + q1;
          y2[j] = p2 - q2;
        }
      }
    }
  }
  return std::nullopt;
}

} // namespace

std::optional<std::string> ropeForward(const float *x, const float *cos,
                                       const float *sin, int64_t rows,
                                       int64_t cols, int64_t headDim,
                                       int64_t rotatedHeads, float *y) {
  return rotate(x, cos, sin, rows, cols, headDim, rotatedHeads,
                /*forward=*/true, y);
}

std::optional<std::string> ropeBackward(const float *dy, const float *cos,
                                        const float *sin, int64_t rows,
                                        int64_t cols, int64_t headDim,
                                        int64_t rotatedHeads, float *dx) {
  return rotate(dy, cos, sin, rows, cols, headDim, rotatedHeads,
                /*forward=*/false, dx);
}

} // namespace coat::ref
