//===- CrossEntropy.h - the softmax cross-entropy kernel --------*- C++ -*-===//
//
// Lowers kernel-spec functions holding one coat.cross_entropy into one
// kernel: a CTA a row, whose threads take the row's aligned 8-element chunks
// round-robin, keep an online maximum and sum of exponentials, combine them
// (warp butterflies, then warps in order), and write the loss and the bf16
// gradient, over the logits where the spec lends their buffer. The CPU twin
// runs the same chunks and combinations with loops, so both agree with the
// reference library (coat::ref::crossEntropy) bit for bit.
//
// What a spec means, its ABI and record: CrossEntropySpec.cpp; the kernel
// and its twin: CrossEntropyEmitter.cpp; the pass: CrossEntropyToKernels.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_LIB_CONVERSION_CROSSENTROPYTOKERNELS_CROSSENTROPY_H
#define COAT_LIB_CONVERSION_CROSSENTROPYTOKERNELS_CROSSENTROPY_H

#include "coat/Conversion/KernelDriver.h"
#include "coat/Dialect/CoatDialect.h"

namespace mlir::coat {

/// A cross-entropy spec and the shape of its kernel.
struct CrossEntropyPlan {
  CrossEntropyOp op;
  int64_t vocab = 0;       ///< V, the row length
  int64_t ignoreIndex = -100;
  int64_t threads = 32;    ///< a row's team (the CTA on the GPU)
  bool inPlace = false;    ///< the gradient overwrites the logits
  bool flagLoss = false, flagGrad = false; ///< coat.finite_flag results
  /// The ABI name of the buffer the gradient goes to.
  StringRef gradArg() const { return inPlace ? "logits" : "dlogits"; }
};

/// The team of a row of V logits: about eight 16-byte chunks a thread, a
/// power of two in [32, 1024].
int64_t crossEntropyThreads(int64_t vocab);

/// The kernel-lowering hooks of coat-lower-cross-entropy.
class CrossEntropyLowering
    : public KernelLowering<CrossEntropyLowering, CrossEntropyPlan> {
public:
  explicit CrossEntropyLowering(int64_t threads)
      : KernelLowering(
            {"coat-lower-cross-entropy", "coat_cross_entropy_kernels"}),
        threads(threads) {}

  bool isSpecOp(Operation *op) const { return isa<CrossEntropyOp>(op); }
  LogicalResult checkOptions(Operation *anchor) const;
  FailureOr<CrossEntropyPlan> analyze(func::FuncOp fn) const;
  SpecBindings bindings(func::FuncOp fn, const CrossEntropyPlan &plan) const;
  // analyze, declare, bindings, record: CrossEntropySpec.cpp; emitGpu,
  // emitCpu: CrossEntropyEmitter.cpp.
  COAT_KERNEL_LOWERING_HOOKS(CrossEntropyPlan)

private:
  int64_t threads; ///< the option; 0: crossEntropyThreads(V)
};

} // namespace mlir::coat

#endif // COAT_LIB_CONVERSION_CROSSENTROPYTOKERNELS_CROSSENTROPY_H
