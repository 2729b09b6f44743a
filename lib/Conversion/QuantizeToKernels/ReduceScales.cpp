//===- ReduceScales.cpp - the second stage of group scaling as a kernel ---===//
//
// Lowers kernel-spec functions holding one `coat.reduce_scales` followed by
// scalar arithmetic on rank-0 tensors (the derivation of a per-tensor scale
// from the maximum, as coat-group-scaling writes it) into one kernel: every
// CTA reduces a slice of the partial maxima, combines its result into a
// two-word workspace with atomics, and the last CTA to finish runs the
// scalar arithmetic, stores the scale and clears the workspace. The scale
// never leaves the device, and the reduction uses the whole GPU.
//
//===----------------------------------------------------------------------===//

#include "ReduceScales.h"

#include "coat/Conversion/Passes.h"

// The dialects the pass depends on (Passes.h.inc registers them).
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATLOWERREDUCESCALES
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

LogicalResult ReduceScalesLowering::checkOptions(Operation *anchor) const {
  if (blockSize < 32 || blockSize > 1024 || blockSize % 32 != 0)
    return anchor->emitError("coat-lower-reduce-scales: block-size must be a "
                              "multiple of 32 in [32, 1024], got ")
           << blockSize;
  return success();
}

namespace {

struct CoatLowerReduceScalesPass
    : mlir::coat::impl::CoatLowerReduceScalesBase<CoatLowerReduceScalesPass> {
  using Base::Base;

  void runOnOperation() override {
    ReduceScalesLowering lowering(blockSize);
    if (failed(lowering.run(getOperation(), target)))
      signalPassFailure();
  }
};

} // namespace
