//===- ColumnSums.h - the order of a deterministic column sum ----*- C++ -*-===//
//
// A bias gradient is the sum of dy[T, O] over its T rows (tokens). Its
// kernels add in one fixed order that depends on the shape alone, never on
// scheduling or on the GPU, so the GPU kernel, its CPU twin and the host
// reference (coat::ref::biasGradient) agree bit for bit. The order and the
// thread layout it implies live here, once; coat-lower-bias-grad, the
// dialect (which maxima a bias-gradient kernel can take along) and the
// reference read them. No MLIR dependency.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_NUMERICS_COLUMNSUMS_H
#define COAT_NUMERICS_COLUMNSUMS_H

#include <cstdint>

namespace coat {

/// The sum of column c of a [rows, cols] tensor, in f32:
///
/// 1. `partials` partial sums: partial p adds rows p, p + partials,
///    p + 2 * partials, ... in that order, starting from +0;
/// 2. kColumnSumStrides strided runs over the partials: run w adds partials
///    w, w + kColumnSumStrides, ... in that order, starting from +0;
/// 3. the runs added in order (run 0, then 1, ...), the result rounded once
///    to the output type.
///
/// The kernels take `partials = ceil(rows / rowsPerPartial)`.
inline constexpr int64_t kColumnSumStrides = 8;

/// The partials of `rows` rows at `rowsPerPartial` rows each (0 for none).
inline int64_t columnSumPartials(int64_t rows, int64_t rowsPerPartial) {
  return rows <= 0 ? 0 : (rows + rowsPerPartial - 1) / rowsPerPartial;
}

/// Elements of one 16-byte load: what a thread of the partial-sum kernel
/// takes of each row.
inline int64_t columnSumLaneElements(int64_t elementBytes) {
  return 16 / elementBytes;
}

/// Whether a bias-gradient kernel over `elementBytes`-byte values can also
/// write their 1xG maxima (per_group<G>): a group must be a power-of-two
/// count, at most 32, of its threads' 16-byte vectors, so that the lanes of
/// a group combine their maxima with warp shuffles.
inline bool columnSumFusesMaxima(int64_t groupSize, int64_t elementBytes) {
  int64_t lane = columnSumLaneElements(elementBytes);
  if (groupSize <= 0 || groupSize % lane != 0)
    return false;
  int64_t lanes = groupSize / lane;
  return lanes <= 32 && (lanes & (lanes - 1)) == 0;
}

} // namespace coat

#endif // COAT_NUMERICS_COLUMNSUMS_H
