//===- RecomputeActivations.cpp - cheap forward values again in the backward =//
//
// A program keeps for its backward every forward value that a backward op
// reads. An element-wise op whose operands are kept anyway can run again in
// the backward for the price of one memory-bound kernel, and then its result
// need not be kept: a Llama MLP keeps gate and up (silu_grad and
// swiglu_mul_grad read them), so it need not also keep silu(gate).
//
//===----------------------------------------------------------------------===//

#include "coat/Dialect/CoatDialect.h"
#include "coat/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATRECOMPUTEACTIVATIONS
#include "coat/Transforms/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

/// Whether one run of the op reproduces `v` completely: a 1xG FP8 tensor
/// carries scales its producer derived itself, while a per-tensor result
/// depends on a scale computed by other kernels (coat-group-scaling).
bool selfScaled(Value v) {
  auto q = dyn_cast<QTensorType>(v.getType());
  return q && q.getScalingValue().kind == ::coat::ScalingKind::PerGroup;
}

struct CoatRecomputeActivationsPass
    : mlir::coat::impl::CoatRecomputeActivationsBase<
          CoatRecomputeActivationsPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (fn.isExternal() || !fn.getBody().hasOneBlock())
      return;
    llvm::DenseSet<Value> backward;
    for (BlockArgument a : fn.getArguments())
      if (fn.getArgAttr(a.getArgNumber(), kGradientAttr))
        backward.insert(a);
    if (backward.empty())
      return; // a forward alone keeps nothing
    Block &body = fn.getBody().front();
    for (Operation &op : body)
      if (runsInBackward(&op, backward))
        backward.insert(op.result_begin(), op.result_end());

    auto isBackwardUser = [&](Operation *user) {
      return !user->hasTrait<OpTrait::ReturnLike>() &&
             runsInBackward(user, backward);
    };
    // Kept for the backward whatever this pass does: read by a backward op.
    auto keptAnyway = [&](Value v) {
      return !backward.contains(v) &&
             llvm::any_of(v.getUsers(), isBackwardUser);
    };

    SmallVector<Operation *> candidates;
    for (Operation &op : body)
      if (op.hasTrait<OpTrait::coat::Recomputable>() &&
          !runsInBackward(&op, backward) &&
          llvm::all_of(op.getResults(), selfScaled) &&
          llvm::all_of(op.getOperands(), keptAnyway))
        candidates.push_back(&op);

    for (Operation *op : candidates) {
      // The backward's reads of the results, and the first of them.
      SmallVector<OpOperand *> reads;
      Operation *first = nullptr;
      for (Value r : op->getResults())
        for (OpOperand &use : r.getUses())
          if (isBackwardUser(use.getOwner())) {
            reads.push_back(&use);
            if (!first || use.getOwner()->isBeforeInBlock(first))
              first = use.getOwner();
          }
      if (!first)
        continue; // the result is not kept
      OpBuilder b(first);
      Operation *again = b.clone(*op);
      again->setAttr(kRecomputeAttr, b.getUnitAttr());
      backward.insert(again->result_begin(), again->result_end());
      for (OpOperand *use : reads)
        use->set(again->getResult(
            cast<OpResult>(use->get()).getResultNumber()));
    }
  }
};

} // namespace
