//===- CrossEntropyToKernels.cpp - cross-entropy to GPU/CPU kernels -------===//
//
// The coat-lower-cross-entropy pass: coat.cross_entropy kernel specs as GPU
// kernels or CPU twins, run by the kernel driver over the hooks of
// CrossEntropy.h.
//
//===----------------------------------------------------------------------===//

#include "CrossEntropy.h"

#include "coat/Conversion/Passes.h"

// The dialects the pass depends on (Passes.h.inc registers them).
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATLOWERCROSSENTROPY
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

struct CoatLowerCrossEntropyPass
    : mlir::coat::impl::CoatLowerCrossEntropyBase<CoatLowerCrossEntropyPass> {
  using Base::Base;

  void runOnOperation() override {
    CrossEntropyLowering lowering(threads);
    if (failed(lowering.run(getOperation(), target)))
      signalPassFailure();
  }
};

} // namespace
