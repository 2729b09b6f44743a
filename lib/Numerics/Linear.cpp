//===- Linear.cpp - reference numerics of biased linear layers ------------===//

#include "coat/Numerics/ColumnSums.h"
#include "coat/Numerics/Reference.h"

#include <vector>

namespace coat::ref {

void linearBiasEpilogue(const float *acc, int64_t rows, int64_t cols,
                        float scale, const float *bias, float *out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float scaled = acc[r * cols + c] * scale;
      out[r * cols + c] = scaled + bias[c];
    }
}

void biasGradient(const float *dy, int64_t rows, int64_t cols,
                  int64_t partials, float *db) {
  // Partial p: rows p, p + partials, ... in order.
  std::vector<float> partial(static_cast<size_t>(partials * cols), 0.0f);
  for (int64_t p = 0; p < partials; ++p)
    for (int64_t r = p; r < rows; r += partials)
      for (int64_t c = 0; c < cols; ++c)
        partial[p * cols + c] += dy[r * cols + c];
  // kColumnSumStrides strided runs over the partials, then the runs in order.
  for (int64_t c = 0; c < cols; ++c) {
    float total = 0.0f;
    for (int64_t w = 0; w < kColumnSumStrides; ++w) {
      float run = 0.0f;
      for (int64_t p = w; p < partials; p += kColumnSumStrides)
        run += partial[p * cols + c];
      total = w == 0 ? run : total + run;
    }
    db[c] = total;
  }
}

} // namespace coat::ref
