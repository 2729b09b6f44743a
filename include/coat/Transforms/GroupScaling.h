//===- GroupScaling.h - per-tensor scales from partial maxima ---*- C++ -*-===//
//
// The two stages of COAT's just-in-time per-tensor scaling (COAT.md §3.1),
// shared by coat-group-scaling (maxima from the producer's epilogue) and
// coat-outline-kernels (maxima from a kernel of their own, for tensors that
// enter the program from outside).
//
//===----------------------------------------------------------------------===//

#ifndef COAT_TRANSFORMS_GROUPSCALING_H
#define COAT_TRANSFORMS_GROUPSCALING_H

#include "coat/Dialect/CoatDialect.h"

#include "mlir/IR/Builders.h"

#include <optional>

namespace mlir::coat {

/// The partial-maxima granularity for a tensor of `shape`: 1xG groups of the
/// innermost dimension when G divides it, else whole rows. Nothing for
/// rank-0 tensors or a dynamic innermost extent (no static row length).
std::optional<::coat::Scaling> partialMaximaScaling(ArrayRef<int64_t> shape,
                                                    int64_t groupSize);

/// Rewrites `q`, a per-tensor `coat.quantize` that derives its scale, into
/// `coat.absmax` (marked `epilogue` when `inProducer`) right after its input's
/// definition, `coat.reduce_scales`, the scale `(max + eps) / fp8max` in f32
/// rounded to the scale type, and `coat.quantize ... scale`. Returns the new
/// quantize.
QuantizeOp splitDerivedPerTensorScale(QuantizeOp q, ::coat::Scaling partial,
                                      bool inProducer);

/// Whether `op` is a step of the scale arithmetic that
/// splitDerivedPerTensorScale emits: an arith op with one rank-0 tensor
/// result (constants included).
bool isScaleArithmetic(Operation *op);

} // namespace mlir::coat

#endif // COAT_TRANSFORMS_GROUPSCALING_H
