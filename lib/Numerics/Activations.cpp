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

} // namespace coat::ref
