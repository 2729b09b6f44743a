//===- Optimizer.h - the fused FP8 AdamW kernel family ----------*- C++ -*-===//
//
// coat.adamw_step as one fused per-group kernel: every byte of p, g, m, v
// and the group metadata is read once and written once. What a spec means
// and how it is launched (OptimizerSpec.cpp), the GPU kernel and its CPU
// twin, which share the element math through GroupLane
// (OptimizerEmitter.cpp), and the pass (OptimizerToKernels.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef COAT_LIB_CONVERSION_OPTIMIZERTOKERNELS_OPTIMIZER_H
#define COAT_LIB_CONVERSION_OPTIMIZERTOKERNELS_OPTIMIZER_H

#include "coat/Conversion/KernelDriver.h"
#include "coat/Dialect/CoatDialect.h"
#include "coat/Numerics/Fp8.h"

namespace mlir::coat {

/// What one moment (m or v) looks like in memory.
struct MomentSpec {
  ::coat::Fp8Format format;
  bool expanded;
  bool isSigned; ///< m is signed; v >= 0
  StringRef name;
};

/// Everything the element math needs, fixed per kernel, and its launch
/// shape: a lane holds E consecutive elements, L lanes form a group, and a
/// thread updates U lanes, one in each tile its block visits, the tiles a
/// grid apart (the GPU kernel); or one lane holds a whole group (the CPU
/// twin).
struct AdamWKernelSpec {
  Type paramType, gradType; ///< f32 or bf16
  MomentSpec m, v;
  int64_t groupSize;
  int64_t expandMin;
  float maxK;
  OptimizerMode mode;
  int64_t elementsPerLane; ///< E
  int64_t lanesPerGroup;   ///< L
  int64_t blockSize;       ///< GPU threads per CTA
  int64_t lanesPerThread;  ///< U: lanes a GPU thread updates in turn
  int64_t minCtas = 0;     ///< requested CTAs per multiprocessor (GPU)
  /// GPU: lane pairs split the moments' new group metadata between them
  /// (only where both moments are expanded, in fixed mode, and L >= 2).
  bool splitMetadata = false;
  /// Stochastic rounding (docs/optimizer-numerics.md §5) of the bf16
  /// parameter and of the moments' codes; either adds the `seed` argument.
  bool stochasticParam = false;
  bool stochasticMoments = false;
  bool stochastic() const { return stochasticParam || stochasticMoments; }
  /// The gradient is multiplied by the f32 in the `grad_scale` buffer as it
  /// is loaded (global gradient-norm clipping).
  bool gradScale = false;
  /// The update reads and writes the f32 `master` buffer; the bf16 `param`
  /// buffer receives the new master rounded to nearest even.
  bool master = false;
  /// GPU, fixed mode: the moments (of m, v) whose requantization takes its
  /// ex2 on the FMA units (coat-expand-soft-exp2).
  bool softExp2M = false, softExp2V = false;
};

/// The kernel-lowering hooks of coat-lower-optimizer.
class OptimizerLowering
    : public KernelLowering<OptimizerLowering, AdamWKernelSpec> {
public:
  OptimizerLowering(int64_t elementsPerThread, int64_t blockSize,
                    int64_t lanesPerThread, int64_t minCtas,
                    int64_t bf16MinCtas, bool splitMetadata,
                    StringRef softExp2)
      : KernelLowering({"coat-lower-optimizer", "coat_kernels",
                        /*stopAtFirstFailure=*/true}),
        elementsPerThread(elementsPerThread), blockSize(blockSize),
        lanesPerThread(lanesPerThread), minCtas(minCtas),
        bf16MinCtas(bf16MinCtas), splitMetadata(splitMetadata),
        softExp2(softExp2.str()) {}

  bool isSpecOp(Operation *op) const { return isa<AdamWStepOp>(op); }

  // analyze, declare, record: OptimizerSpec.cpp; emitGpu, emitCpu:
  // OptimizerEmitter.cpp.
  FailureOr<AdamWKernelSpec> analyze(func::FuncOp fn) const;
  COAT_KERNEL_LOWERING_HOOKS(AdamWKernelSpec)

private:
  int64_t elementsPerThread; ///< 0: the default for the group size
  int64_t blockSize;
  int64_t lanesPerThread;
  int64_t minCtas; ///< 0: no occupancy request
  int64_t bf16MinCtas; ///< bf16 parameters; 0: minCtas
  bool splitMetadata;
  std::string softExp2; ///< none, m, v or both
};

} // namespace mlir::coat

#endif // COAT_LIB_CONVERSION_OPTIMIZERTOKERNELS_OPTIMIZER_H
