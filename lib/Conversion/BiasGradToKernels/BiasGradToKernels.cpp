//===- BiasGradToKernels.cpp - bias gradients to GPU/CPU kernels ----------===//
//
// The coat-lower-bias-grad pass: coat.bias_grad kernel specs (with the 1xG
// maxima of their input, where coat-outline-kernels put them together) as
// GPU kernels or CPU twins, run by the kernel driver over the hooks of
// BiasGrad.h.
//
//===----------------------------------------------------------------------===//

#include "BiasGrad.h"

#include "coat/Conversion/Passes.h"

// The dialects the pass depends on (Passes.h.inc registers them).
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATLOWERBIASGRAD
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

struct CoatLowerBiasGradPass
    : mlir::coat::impl::CoatLowerBiasGradBase<CoatLowerBiasGradPass> {
  using Base::Base;

  void runOnOperation() override {
    BiasGradLowering lowering(blockSize, rowsPerPartial, rowsInFlight);
    if (failed(lowering.run(getOperation(), target)))
      signalPassFailure();
  }
};

} // namespace
