//===- NormsToKernels.cpp - RMSNorm/LayerNorm flow ops to GPU/CPU kernels -===//
//
// The coat-lower-norms pass: the row-normalization ops of the FP8 precision
// flow (coat.rmsnorm, coat.layernorm, their _grad ops) as GPU kernels or CPU
// twins, run by the kernel driver over the hooks of Norms.h.
//
//===----------------------------------------------------------------------===//

#include "Norms.h"

#include "coat/Conversion/Passes.h"

// The dialects the pass depends on (Passes.h.inc registers them).
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATLOWERNORMS
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

struct CoatLowerNormsPass
    : mlir::coat::impl::CoatLowerNormsBase<CoatLowerNormsPass> {
  using Base::Base;

  void runOnOperation() override {
    NormsLowering lowering(blockSize, threadsPerRow, groupsPerThread,
                           laneElements, stageStores, maxCols, columnSums,
                           backwardMinCtas, rowPrefetch);
    if (failed(lowering.run(getOperation(), target)))
      signalPassFailure();
  }
};

} // namespace
