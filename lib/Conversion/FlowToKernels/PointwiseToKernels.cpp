//===- PointwiseToKernels.cpp - pointwise flow ops to GPU/CPU kernels -----===//
//
// The coat-lower-pointwise pass: one parameterized lowering for COAT's
// pointwise non-linear operators (COAT.md §3.4), run by the kernel driver
// over the hooks of Pointwise.h.
//
//===----------------------------------------------------------------------===//

#include "Pointwise.h"

#include "coat/Conversion/Passes.h"

// The dialects the pass depends on (Passes.h.inc registers them).
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATLOWERPOINTWISE
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

LogicalResult PointwiseLowering::checkOptions(Operation *anchor) const {
  if (blockSize <= 0 || blockSize % 32 != 0 || blockSize > 1024)
    return anchor->emitError("coat-lower-pointwise: block-size must be a "
                              "multiple of 32 in [32, 1024], got ")
           << blockSize;
  if (lanesPerThread < 1 || lanesPerThread > 8)
    return anchor->emitError("coat-lower-pointwise: lanes-per-thread must be "
                              "in [1, 8], got ")
           << lanesPerThread;
  if (failed(checkMinCtasOption(anchor, "min-ctas", minCtas,
                                "coat-lower-pointwise: ")))
    return failure();
  if (exactMath && softExp2)
    return anchor->emitError("coat-lower-pointwise: soft-exp2 applies to the "
                              "fast forms; exact-math evaluates expf");
  if (exactMath && reciprocalDivision)
    return anchor->emitError("coat-lower-pointwise: reciprocal-division "
                              "applies to the fast forms; exact-math divides "
                              "as the library does");
  return success();
}

namespace {

struct CoatLowerPointwisePass
    : mlir::coat::impl::CoatLowerPointwiseBase<CoatLowerPointwisePass> {
  using Base::Base;

  void runOnOperation() override {
    PointwiseLowering lowering(blockSize, lanesPerThread, exactMath,
                               softExp2, reciprocalDivision, minCtas);
    if (failed(lowering.run(getOperation(), target)))
      signalPassFailure();
  }
};

} // namespace
