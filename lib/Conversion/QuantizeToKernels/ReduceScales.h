//===- ReduceScales.h - the scale-reduction kernel family -------*- C++ -*-===//
//
// The second stage of group scaling as one kernel: what a spec holding a
// `coat.reduce_scales` means (ReduceScalesSpec.cpp), the GPU kernel and CPU
// twin that compute it (ReduceScalesEmitter.cpp), and the pass
// (ReduceScales.cpp). The smallest family: docs/design.md walks through it.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_LIB_CONVERSION_QUANTIZETOKERNELS_REDUCESCALES_H
#define COAT_LIB_CONVERSION_QUANTIZETOKERNELS_REDUCESCALES_H

#include "coat/Conversion/KernelDriver.h"
#include "coat/Dialect/CoatDialect.h"

#include <optional>
#include <utility>

namespace mlir::coat {

/// Bytes one thread reads per step (one 16-byte access) and steps per CTA:
/// a CTA covers blockSize * scaleVector(input) * kScaleSteps elements.
constexpr int64_t kScaleAccessBytes = 16;
constexpr int64_t kScaleSteps = 8;
/// Elements of `t` in one access.
inline int64_t scaleVector(Type t) {
  return kScaleAccessBytes / (t.getIntOrFloatBitWidth() / 8);
}

/// A scale kernel: one coat.reduce_scales and the rank-0 arithmetic on its
/// result.
struct ScaleSpec {
  ReduceScalesOp reduce;
  /// When the reduced scales are those of a per_group argument: its parts.
  DisassembleOp groupScalesOf;
  /// When the reduced maxima are those of a tensor argument that nothing
  /// else reads (`coat.absmax` in the spec): the kernel reduces the
  /// tensor's absolute values, the same maximum, without the maxima.
  AbsMaxOp maximaOf;
  Type inputType;           ///< what the kernel reads: f32 or bf16 partial
                            ///< maxima / scales, or the tensor (maximaOf)
  Type maximumType;         ///< element type of coat.reduce_scales' input
  Type outputType;          ///< element type of the returned scalar
  SmallVector<Operation *> scalarOps; ///< the rank-0 arithmetic, in order
  Value returned;           ///< the returned rank-0 value
  /// When the arithmetic is the scale derivation coat-group-scaling writes,
  /// `(max + eps) / fp8max` (then rounded to the scale type): its constants,
  /// recorded in the manifest so callers and tests know what the scale is
  /// for without reading the IR.
  std::optional<std::pair<float, float>> epsAndFp8Max;
};

/// The kernel-lowering hooks of coat-lower-reduce-scales.
class ReduceScalesLowering
    : public KernelLowering<ReduceScalesLowering, ScaleSpec> {
public:
  explicit ReduceScalesLowering(int64_t blockSize)
      : KernelLowering({"coat-lower-reduce-scales", "coat_scale_kernels"}),
        blockSize(blockSize) {}

  bool isSpecOp(Operation *op) const { return isa<ReduceScalesOp>(op); }
  LogicalResult checkOptions(Operation *anchor) const;

  FailureOr<ScaleSpec> analyze(func::FuncOp fn) const;
  // analyze, declare, record: ReduceScalesSpec.cpp; emitGpu, emitCpu:
  // ReduceScalesEmitter.cpp.
  COAT_KERNEL_LOWERING_HOOKS(ScaleSpec)

private:
  int64_t blockSize;
};

} // namespace mlir::coat

#endif // COAT_LIB_CONVERSION_QUANTIZETOKERNELS_REDUCESCALES_H
