//===- OptimizerToKernels.cpp - coat.adamw_step to GPU/CPU kernels --------===//
//
// Lowers kernel-spec functions holding one coat.adamw_step into a fused
// per-group kernel (Optimizer.h) through the kernel driver.
//
//===----------------------------------------------------------------------===//

#include "Optimizer.h"

#include "coat/Conversion/Passes.h"

// The dialects the pass depends on (Passes.h.inc registers them).
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATLOWEROPTIMIZER
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;

namespace {

struct CoatLowerOptimizerPass
    : mlir::coat::impl::CoatLowerOptimizerBase<CoatLowerOptimizerPass> {
  using Base::Base;

  void runOnOperation() override {
    mlir::coat::OptimizerLowering lowering(elementsPerThread, blockSize,
                                           lanesPerThread, minCtas,
                                           bf16MinCtas, splitMetadata,
                                           softExp2);
    if (failed(lowering.run(getOperation(), target)))
      signalPassFailure();
  }
};

} // namespace
