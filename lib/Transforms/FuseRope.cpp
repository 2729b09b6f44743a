//===- FuseRope.cpp - RoPE into the epilogue of its GEMM ------------------===//
//
// The q/k/v projection is written by its GEMM and read once by the rope
// kernel, which writes the rotated heads again; marked `epilogue`, the
// rope runs in the GEMM's epilogue and the projection is stored once.
//
//===----------------------------------------------------------------------===//

#include "coat/Dialect/CoatDialect.h"
#include "coat/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATFUSEROPE
#include "coat/Transforms/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

/// Heads whose width divides this lie whole inside every tile width
/// coat-lower-linear picks for a GEMM with a fused rope.
constexpr int64_t kFusedHeadSpan = 128;

bool fusable(RopeOp rope) {
  if (rope.getEpilogue())
    return false;
  Value x = rope.getInput();
  auto linear = x.getDefiningOp<LinearOp>();
  if (!linear || !x.hasOneUse() ||
      !isa<RankedTensorType>(linear.getResult().getType()))
    return false;
  // The GEMM's epilogue writes no maxima (coat-group-scaling's `epilogue`
  // absmax of the rotated values would need them).
  if (llvm::any_of(rope.getResult().getUsers(), [](Operation *u) {
        auto a = dyn_cast<AbsMaxOp>(u);
        return a && a.getEpilogue();
      }))
    return false;
  // Both halves of a head's columns in one thread's fragment: halves of
  // whole 8-column chunks.
  int64_t d = rope.getHeadDim();
  return kFusedHeadSpan % d == 0 && d % 16 == 0;
}

struct CoatFuseRopePass
    : mlir::coat::impl::CoatFuseRopeBase<CoatFuseRopePass> {
  void runOnOperation() override {
    getOperation().walk([&](RopeOp rope) {
      if (fusable(rope))
        rope.setEpilogue(true);
    });
  }
};

} // namespace
