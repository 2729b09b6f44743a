//===- BiasGrad.h - the bias-gradient kernel family -------------*- C++ -*-===//
//
// Lowers kernel-spec functions holding one coat.bias_grad, alone or with the
// 1xG maxima of the same input (coat.absmax, which coat-outline-kernels puts
// beside it for a gradient entering the program), into two kernels: one
// where each thread adds a 16-byte column vector of its partial's rows into
// an f32 workspace (and writes the rows' maxima), and `<name>_reduce`, which
// adds the workspace rows. The order of every addition is the one of
// coat/Numerics/ColumnSums.h, on the GPU and in the CPU twins alike.
//
// What a spec means, its ABI and records: BiasGradSpec.cpp; the kernels and
// their twins: BiasGradEmitter.cpp; the pass: BiasGradToKernels.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_LIB_CONVERSION_BIASGRADTOKERNELS_BIASGRAD_H
#define COAT_LIB_CONVERSION_BIASGRADTOKERNELS_BIASGRAD_H

#include "coat/Conversion/KernelDriver.h"
#include "coat/Dialect/CoatDialect.h"

namespace mlir::coat {

/// Threads of a `<name>_reduce` CTA: 32 columns, one warp per strided run of
/// the partials (coat::kColumnSumStrides).
constexpr int64_t kBiasGradReduceColumns = 32;

/// A bias-gradient spec and the shape of its kernels.
struct BiasGradPlan {
  BiasGradOp op;
  AbsMaxOp maxima;         ///< the fused 1xG maxima, or null
  Type gradType;           ///< bf16, f16 or f32
  Type dbiasType;          ///< f32 or bf16
  int64_t laneElements;    ///< V: one 16-byte load of a row per thread
  /// G of the fused maxima, else V: what the launch checks cols against
  /// (config.group_size) and what a CPU-twin iteration holds.
  int64_t groupSize;
  /// dbias is `coat.finite_flag`: the reduction writes `finite_dbias`.
  bool flagDbias = false;
  int64_t lanesPerGroup() const { return groupSize / laneElements; }
};

/// The kernel-lowering hooks of coat-lower-bias-grad.
class BiasGradLowering : public KernelLowering<BiasGradLowering, BiasGradPlan> {
public:
  BiasGradLowering(int64_t blockSize, int64_t rowsPerPartial,
                   int64_t rowsInFlight)
      : KernelLowering({"coat-lower-bias-grad", "coat_bias_grad_kernels"}),
        blockSize(blockSize), rowsPerPartial(rowsPerPartial),
        rowsInFlight(rowsInFlight) {}

  bool isSpecOp(Operation *op) const { return isa<BiasGradOp>(op); }
  LogicalResult checkOptions(Operation *anchor) const;
  FailureOr<BiasGradPlan> analyze(func::FuncOp fn) const;
  SpecBindings bindings(func::FuncOp fn, const BiasGradPlan &plan) const;
  // analyze, declare, bindings, record: BiasGradSpec.cpp; emitGpu, emitCpu:
  // BiasGradEmitter.cpp.
  COAT_KERNEL_LOWERING_HOOKS(BiasGradPlan)

private:
  int64_t blockSize;
  int64_t rowsPerPartial;
  int64_t rowsInFlight;
};

} // namespace mlir::coat

#endif // COAT_LIB_CONVERSION_BIASGRADTOKERNELS_BIASGRAD_H
