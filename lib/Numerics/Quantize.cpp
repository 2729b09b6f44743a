//===- Quantize.cpp - Reference quantizers for every scaling granularity --===//
//
// COAT's convention (COAT.md §1.2): a scale multiplies on dequantization,
// s = (absmax + eps) / fp8max, q = cvt(x / s) with an IEEE division.
//
//===----------------------------------------------------------------------===//

#include "coat/Numerics/Reference.h"

#include <cmath>

namespace coat::ref {
namespace {

std::optional<std::string> checkStatic(const std::vector<int64_t> &shape,
                                       const Scaling &scaling) {
  if (auto err = verifyScalingForShape(shape, scaling))
    return err;
  for (int64_t d : shape)
    if (d == kDynamicExtent)
      return std::string("the reference needs a static shape");
  return std::nullopt;
}

int64_t numElements(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

} // namespace

float scaleFromAbsMax(float absMax, const QuantizeOptions &opts) {
  float scale = (absMax + opts.eps) / getFp8Traits(opts.format).maxFinite;
  return opts.bf16Scale ? roundToBf16(scale) : scale;
}

int64_t scaleIndexOf(const std::vector<int64_t> &shape, const Scaling &scaling,
                     int64_t linearIndex) {
  switch (scaling.kind) {
  case ScalingKind::PerTensor:
    return 0;
  case ScalingKind::PerGroup: // G divides the innermost extent: rows align
  case ScalingKind::FlatGroup:
    return linearIndex / scaling.groupSize;
  case ScalingKind::PerBlock: {
    const size_t r = shape.size();
    const int64_t rows = shape[r - 2], cols = shape[r - 1];
    const int64_t batch = linearIndex / (rows * cols);
    const int64_t within = linearIndex % (rows * cols);
    const int64_t blockRowsCount = ceilDivExtent(rows, scaling.blockRows);
    const int64_t blockColsCount = ceilDivExtent(cols, scaling.blockCols);
    const int64_t blockRow = (within / cols) / scaling.blockRows;
    const int64_t blockCol = (within % cols) / scaling.blockCols;
    return (batch * blockRowsCount + blockRow) * blockColsCount + blockCol;
  }
  }
  return 0;
}

std::vector<float> groupAbsMax(const float *x, const std::vector<int64_t> &shape,
                               const Scaling &scaling) {
  std::vector<float> maxima(numScales(shape, scaling), 0.0f);
  const int64_t n = numElements(shape);
  for (int64_t i = 0; i < n; ++i) {
    float &slot = maxima[scaleIndexOf(shape, scaling, i)];
    slot = std::fmax(slot, std::fabs(x[i]));
  }
  return maxima;
}

std::optional<std::string> quantize(const float *x,
                                    const std::vector<int64_t> &shape,
                                    const Scaling &scaling,
                                    const QuantizeOptions &opts,
                                    uint8_t *codes, float *scales) {
  if (auto err = checkStatic(shape, scaling))
    return err;
  std::vector<float> maxima = groupAbsMax(x, shape, scaling);
  for (size_t j = 0; j < maxima.size(); ++j)
    scales[j] = scaleFromAbsMax(maxima[j], opts);
  const int64_t n = numElements(shape);
  for (int64_t i = 0; i < n; ++i)
    codes[i] = encodeFp8(x[i] / scales[scaleIndexOf(shape, scaling, i)],
                         opts.format, opts.overflow);
  return std::nullopt;
}

std::optional<std::string> dequantize(const uint8_t *codes, const float *scales,
                                      const std::vector<int64_t> &shape,
                                      const Scaling &scaling, Fp8Format format,
                                      float *out) {
  if (auto err = checkStatic(shape, scaling))
    return err;
  const int64_t n = numElements(shape);
  for (int64_t i = 0; i < n; ++i)
    out[i] = decodeFp8(codes[i], format) *
             scales[scaleIndexOf(shape, scaling, i)];
  return std::nullopt;
}

void quantizeWithScale(const float *x, int64_t n, float scale, Fp8Format format,
                       Fp8Overflow overflow, uint8_t *codes) {
  for (int64_t i = 0; i < n; ++i)
    codes[i] = encodeFp8(x[i] / scale, format, overflow);
}

float twoStageTensorScale(const float *x, const std::vector<int64_t> &shape,
                          const Scaling &groupScaling,
                          const QuantizeOptions &opts) {
  float scale = 0.0f;
  for (float absMax : groupAbsMax(x, shape, groupScaling))
    scale = std::fmax(scale, scaleFromAbsMax(absMax, opts));
  return scale;
}

} // namespace coat::ref
