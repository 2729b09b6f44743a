//===- FuseSilu.cpp - SiLU into the SwiGLU product and its backward --------===//
//
// silu(gate) and the gradient of the SiLU's output are each written by one
// kernel and read once by the next; folded into the product's kernels they
// stay in registers (coat.swiglu_mul{,_grad} `silu_gate`).
//
//===----------------------------------------------------------------------===//

#include "coat/Dialect/CoatDialect.h"
#include "coat/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATFUSESILU
#include "coat/Transforms/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

/// The coat.silu_grad of `gate` that is the only reader of `product`'s
/// dlhs, and that a fused product can replace: no FP8 copies, its dx in the
/// type of dlhs.
SiluGradOp siluGradOf(SwigluMulGradOp product, Value gate) {
  Value dlhs = product.getDlhs();
  if (!dlhs.hasOneUse())
    return {};
  auto grad = dyn_cast<SiluGradOp>(*dlhs.getUsers().begin());
  if (!grad || grad.getGrad() != dlhs || grad.getInput() != gate ||
      grad.getDxQ() || grad.getDxQt() || grad.getDx().getType() != dlhs.getType())
    return {};
  return grad;
}

/// Whether every use of `silu`'s result is the lhs of a product that can
/// take the gate instead.
bool foldable(SiluOp silu) {
  Value s = silu.getResult();
  if (s.use_empty() || s.getType() != silu.getInput().getType())
    return false;
  for (OpOperand &use : s.getUses()) {
    if (use.getOperandNumber() != 0)
      return false;
    Operation *user = use.getOwner();
    if (auto product = dyn_cast<SwigluMulOp>(user)) {
      if (product.getSiluGate())
        return false;
      continue;
    }
    auto product = dyn_cast<SwigluMulGradOp>(user);
    if (!product || product.getSiluGate() ||
        !siluGradOf(product, silu.getInput()))
      return false;
  }
  return true;
}

struct CoatFuseSiluPass
    : mlir::coat::impl::CoatFuseSiluBase<CoatFuseSiluPass> {
  void runOnOperation() override {
    SmallVector<SiluOp> silus;
    getOperation().walk([&](SiluOp op) { silus.push_back(op); });
    for (SiluOp silu : silus) {
      if (!foldable(silu))
        continue;
      Value gate = silu.getInput();
      for (OpOperand &use : llvm::make_early_inc_range(silu.getResult().getUses())) {
        Operation *user = use.getOwner();
        if (auto product = dyn_cast<SwigluMulOp>(user)) {
          product.getLhsMutable().assign(gate);
          product.setSiluGate(true);
          continue;
        }
        auto product = cast<SwigluMulGradOp>(user);
        SiluGradOp grad = siluGradOf(product, gate);
        product.getLhsMutable().assign(gate);
        product.setSiluGate(true);
        // dlhs is the gate's gradient now; it precedes every use of dx.
        grad.getDx().replaceAllUsesWith(product.getDlhs());
        grad.erase();
      }
      silu.erase();
    }
  }
};

} // namespace
