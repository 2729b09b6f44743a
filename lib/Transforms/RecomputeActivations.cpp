//===- RecomputeActivations.cpp - cheap forward values again in the backward =//
//
// A program keeps for its backward every forward value that a backward op
// reads. A value that memory-bound ops derive from values kept anyway can be
// derived again in the backward for the price of those kernels, and then it
// need not be kept: a Llama MLP keeps its input's 1x16 copy, the gate and up
// (the backward of the norm, SiLU and SwiGLU read them), so silu(gate), the
// norm's output and the product can all be recomputed from them. A program
// that has the memory may keep the per-tensor FP8 operands of its backward
// GEMMs instead (`coat.keep_gemm_operands`): the forward made them anyway.
//
//===----------------------------------------------------------------------===//

#include "coat/Dialect/CoatDialect.h"
#include "coat/Transforms/GroupScaling.h"
#include "coat/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <functional>
#include <string>

namespace mlir::coat {
#define GEN_PASS_DEF_COATRECOMPUTEACTIVATIONS
#include "coat/Transforms/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

/// Whether `v` is an argument of its function marked `name`.
bool isArgumentMarked(Value v, StringRef name) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg)
    return false;
  auto fn = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
  return fn && fn.getArgAttr(arg.getArgNumber(), name);
}

/// Whether `v` is a `{coat.weight}` argument of its function.
bool isWeight(Value v) { return isArgumentMarked(v, kWeightAttr); }

/// Whether `v` is a `{coat.kept_by_caller}` argument of its function.
bool isKeptByCaller(Value v) { return isArgumentMarked(v, kKeptByCallerAttr); }

/// Whether `v` is a `{coat.gradient}` argument: the backward's input.
bool isGradient(Value v) { return isArgumentMarked(v, kGradientAttr); }

/// Whether `q` quantizes a weight into a copy of at least `minBytes`
/// (negative: no copy qualifies). Its scale comes from the whole weight,
/// which the backward has unchanged, so the copy can be derived again.
bool isLargeWeightCopy(QuantizeOp q, int64_t minBytes) {
  if (minBytes < 0 || !isWeight(q.getInput()))
    return false;
  std::optional<int64_t> bytes = storageBytes(q.getResult().getType());
  return bytes && *bytes >= minBytes;
}

/// Whether `q` scales a caller-kept argument per tensor by itself: the
/// backward has the whole argument unchanged, so it derives the same scale
/// and copy again (whatever its size: the copy is what it saves).
bool isCopyOfKeptArgument(QuantizeOp q) { return isKeptByCaller(q.getInput()); }

/// Whether `op` may run again in the backward: a Coat_Recomputable op, or
/// the scale arithmetic on rank-0 tensors between a coat.reduce_scales and
/// the coat.quantize it scales. A per-tensor FP8 result must get its scale
/// from an operand (a coat.quantize with `scale`, which the recomputation
/// derives again too) or be the transpose of such a tensor: an op that
/// scales per tensor by itself could not reproduce its result alone, except
/// the copy of a weight of at least `weightCopyMinBytes` or of a caller-kept
/// argument.
bool mayRecompute(Operation *op, int64_t weightCopyMinBytes) {
  if (op->hasTrait<OpTrait::coat::Recomputable>()) {
    for (Type t : op->getResultTypes()) {
      auto q = dyn_cast<QTensorType>(t);
      if (!q || q.getScalingValue().kind != ::coat::ScalingKind::PerTensor)
        continue;
      auto quantize = dyn_cast<QuantizeOp>(op);
      if (!(quantize && quantize.getScale()) && !isa<TransposeOp>(op) &&
          !(quantize && (isLargeWeightCopy(quantize, weightCopyMinBytes) ||
                         isCopyOfKeptArgument(quantize))))
        return false;
    }
    return true;
  }
  // Constants are not copied: the copies read the originals.
  return isScaleArithmetic(op) && !isa<arith::ConstantOp>(op);
}

/// Whether `v` is computed from weights and constants alone (a weight's FP8
/// copy and its transpose), so the weight copy rule decides it.
bool isFromWeightsAlone(Value v) {
  if (isWeight(v) || matchPattern(v, m_Constant()))
    return true;
  Operation *def = v.getDefiningOp();
  return def && !def->getOperands().empty() &&
         llvm::all_of(def->getOperands(), isFromWeightsAlone);
}

/// Whether forward value `v` is a per-tensor FP8 operand of a GEMM that runs
/// in the backward (a dgrad or wgrad), directly or through transposes, that
/// is not derived from weights alone. `isBackwardUser` tells backward ops.
bool isBackwardGemmOperand(Value v,
                           llvm::function_ref<bool(Operation *)> isBackwardUser) {
  auto q = dyn_cast<QTensorType>(v.getType());
  if (!q || q.getScalingValue().kind != ::coat::ScalingKind::PerTensor ||
      isFromWeightsAlone(v))
    return false;
  std::function<bool(Value)> readByGemm = [&](Value x) {
    return llvm::any_of(x.getUsers(), [&](Operation *user) {
      if (isa<LinearOp>(user))
        return isBackwardUser(user);
      auto t = dyn_cast<TransposeOp>(user);
      return t && readByGemm(t.getResult());
    });
  };
  return readByGemm(v);
}

/// A rank-0 tensor: a per-tensor scale (or its arithmetic). Keeping one
/// costs a few bytes; deriving it again re-reads what it was reduced from
/// (a whole weight for a weight copy's scale).
bool isScalarTensor(Value v) {
  auto shaped = dyn_cast<RankedTensorType>(v.getType());
  return shaped && shaped.getRank() == 0;
}

/// A token-sized value: worth recomputing on its own (statistics such as a
/// norm's rstd are not, but come along when their op is recomputed).
bool isActivation(Value v) {
  auto shaped = dyn_cast<ShapedType>(v.getType());
  return shaped && shaped.getRank() >= 2;
}

struct CoatRecomputeActivationsPass
    : mlir::coat::impl::CoatRecomputeActivationsBase<
          CoatRecomputeActivationsPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (fn.isExternal() || !fn.getBody().hasOneBlock())
      return;
    recomputeActivations(fn);
    recomputeOutputs(fn);
  }

  /// Derives kept activations again in the backward; with
  /// `coat.keep_gemm_operands` (or the option, where the function does not
  /// say) the per-tensor FP8 operands of backward GEMMs stay kept.
  void recomputeActivations(func::FuncOp fn) {
    llvm::DenseSet<Value> backward;
    for (BlockArgument a : fn.getArguments())
      if (isGradient(a))
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

    // Weights are parameters, alive in the backward whether it reads them
    // or not: anchors from the start, never kept (a LayerNorm's bias is
    // read by the forward only, yet its output can be derived again). So
    // are the activations the caller keeps for its own backward.
    llvm::DenseSet<Value> anchors;
    for (BlockArgument a : fn.getArguments())
      if (isWeight(a) || isKeptByCaller(a))
        anchors.insert(a);

    // The kept values, in program order: arguments, then op results.
    SmallVector<Value> kept;
    auto considerKept = [&](Value v) {
      if (!backward.contains(v) && !anchors.contains(v) &&
          !matchPattern(v, m_Constant()) &&
          llvm::any_of(v.getUsers(), isBackwardUser))
        kept.push_back(v);
    };
    for (BlockArgument a : fn.getArguments())
      considerKept(a);
    for (Operation &op : body)
      for (Value r : op.getResults())
        considerKept(r);

    // Decide in program order: a value is recomputed when ops that may run
    // again derive it from constants, weights and values that stay kept
    // (decided before it); otherwise it stays kept, an anchor for later
    // values.
    std::function<bool(Value, llvm::SetVector<Operation *> &)> collect =
        [&](Value v, llvm::SetVector<Operation *> &cone) {
          if (anchors.contains(v) || matchPattern(v, m_Constant()))
            return true;
          // A forward scale is kept, not derived again: the copies read
          // the original.
          if (isScalarTensor(v) && v.getDefiningOp() &&
              !runsInBackward(v.getDefiningOp(), backward))
            return true;
          Operation *def = v.getDefiningOp();
          if (!def)
            return false; // an activation argument that is not kept
          if (cone.contains(def))
            return true;
          if (!mayRecompute(def, weightCopiesMinBytes) ||
              runsInBackward(def, backward))
            return false;
          for (Value o : def->getOperands())
            if (!collect(o, cone))
              return false;
          cone.insert(def); // after its operands' ops: program order
          return true;
        };
    struct Target {
      Value value;
      llvm::SetVector<Operation *> cone;
      Operation *firstReader;
    };
    bool keepGemm = keepGemmOperands;
    if (auto attr = fn->getAttrOfType<BoolAttr>(kKeepGemmOperandsAttr))
      keepGemm = attr.getValue();
    SmallVector<Target> targets;
    for (Value v : kept) {
      Target t{v, {}, nullptr};
      if (!isActivation(v) ||
          (keepGemm && isBackwardGemmOperand(v, isBackwardUser)) ||
          !collect(v, t.cone)) {
        anchors.insert(v);
        continue;
      }
      for (Operation *user : v.getUsers())
        if (isBackwardUser(user) &&
            (!t.firstReader || user->isBeforeInBlock(t.firstReader)))
          t.firstReader = user;
      targets.push_back(std::move(t));
    }

    // Each op is copied once, right before the first backward reader of
    // the first value that needs it; later values reuse the copy.
    llvm::stable_sort(targets, [](const Target &a, const Target &b) {
      return a.firstReader->isBeforeInBlock(b.firstReader);
    });
    IRMapping copies;
    DenseMap<Operation *, Operation *> copyOf;
    auto redirect = [&](Value from, Operation *copy) {
      Value to = copies.lookup(from);
      from.replaceUsesWithIf(to, [&](OpOperand &use) {
        Operation *user = use.getOwner();
        return isBackwardUser(user) && !user->hasAttr(kRecomputeAttr) &&
               copy->isBeforeInBlock(user);
      });
    };
    for (Target &t : targets) {
      OpBuilder b(t.firstReader);
      for (Operation *op : t.cone) {
        if (copyOf.count(op))
          continue;
        Operation *copy = b.clone(*op, copies);
        copy->setAttr(kRecomputeAttr, b.getUnitAttr());
        copyOf[op] = copy;
      }
      redirect(t.value, copyOf[t.value.getDefiningOp()]);
    }
    // Kept values the copies compute anyway (a norm's rstd next to its
    // output) are read from the copies where those come first.
    for (Value v : kept)
      if (Operation *def = v.getDefiningOp(); def && copyOf.count(def))
        redirect(v, copyOf[def]);
    remarkWeightCopies(body, copyOf, isBackwardUser);
  }

  /// Gives the caller the forward results marked `coat.recompute` again:
  /// clones of the ops that compute each from values the backward has
  /// anyway (weights, constants, values the program keeps), marked
  /// `coat.recompute = "output"` (the `recompute` phase), whose value
  /// becomes a new result `coat.recompute_of = i`. A GEMM is cloned here
  /// although it is not Coat_Recomputable: the caller gives up the whole
  /// output for it. Each decision is a remark at the result's producer.
  void recomputeOutputs(func::FuncOp fn) {
    Block &body = fn.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    SmallVector<unsigned> marked;
    for (unsigned i = 0, e = fn.getNumResults(); i < e; ++i)
      if (fn.getResultAttr(i, kRecomputeAttr))
        marked.push_back(i);
    if (marked.empty())
      return;
    auto remarkAt = [&](Value v) {
      Operation *def = v.getDefiningOp();
      return def ? def->emitRemark() : fn.emitRemark();
    };

    llvm::DenseSet<Value> backward;
    for (BlockArgument a : fn.getArguments())
      if (isGradient(a))
        backward.insert(a);
    if (backward.empty()) {
      for (unsigned i : marked)
        remarkAt(ret.getOperand(i))
            << "result " << i << " is not recomputed: the program has no "
            << "backward (no '" << kGradientAttr << "' argument)";
      return;
    }
    Operation *firstBackward = nullptr;
    for (Operation &op : body.without_terminator())
      if (runsInBackward(&op, backward)) {
        backward.insert(op.result_begin(), op.result_end());
        if (!firstBackward)
          firstBackward = &op;
      }
    auto isBackwardUser = [&](Operation *user) {
      return !user->hasTrait<OpTrait::ReturnLike>() &&
             runsInBackward(user, backward);
    };
    // What the backward has anyway: weights, caller-kept arguments,
    // constants and the forward values it reads (kept for it); a forward
    // scale is kept for the recomputation, as recomputeActivations keeps it.
    auto available = [&](Value v) {
      if (backward.contains(v))
        return false;
      return matchPattern(v, m_Constant()) || isWeight(v) || isKeptByCaller(v) ||
             (isScalarTensor(v) && v.getDefiningOp()) ||
             llvm::any_of(v.getUsers(), isBackwardUser);
    };

    // The ops computing `v` from available values, in program order; or
    // why there are none.
    std::function<LogicalResult(Value, llvm::SetVector<Operation *> &,
                                std::string &)>
        collect = [&](Value v, llvm::SetVector<Operation *> &cone,
                      std::string &why) -> LogicalResult {
      if (available(v))
        return success();
      Operation *def = v.getDefiningOp();
      if (!def) {
        why = "argument " +
              std::to_string(cast<BlockArgument>(v).getArgNumber()) +
              ", which the backward does not keep";
        return failure();
      }
      if (cone.contains(def))
        return success();
      auto linear = dyn_cast<LinearOp>(def);
      bool gemm = linear && linear.getKind() == LinearKind::forward;
      if (runsInBackward(def, backward) ||
          !(gemm || mayRecompute(def, /*weightCopyMinBytes=*/0))) {
        why = "'" + def->getName().getStringRef().str() +
              "', which cannot run again for it";
        return failure();
      }
      for (Value o : def->getOperands())
        if (failed(collect(o, cone, why)))
          return failure();
      cone.insert(def);
      return success();
    };

    IRMapping copies;
    llvm::DenseSet<Operation *> copied;
    SmallVector<std::pair<unsigned, Value>> added;
    for (unsigned i : marked) {
      Value v = ret.getOperand(i);
      auto remark = [&]() { return remarkAt(v) << "result " << i << " "; };
      if (backward.contains(v)) {
        remark() << "is not recomputed: it depends on an incoming gradient";
        continue;
      }
      if (available(v)) {
        remark() << "is not recomputed: the program keeps it for its "
                 << "backward, so dropping it frees nothing";
        continue;
      }
      llvm::SetVector<Operation *> cone;
      std::string why;
      if (failed(collect(v, cone, why))) {
        remark() << "is not recomputed: it needs " << why;
        continue;
      }
      // Between the forward and the backward; after the cone's own ops
      // where the program interleaves them.
      Operation *at = firstBackward ? firstBackward : ret.getOperation();
      if (at->isBeforeInBlock(cone.back()))
        at = cone.back()->getNextNode();
      OpBuilder b(at);
      unsigned gemms = 0;
      for (Operation *op : cone) {
        gemms += isa<LinearOp>(op);
        if (!copied.insert(op).second)
          continue; // shared with an earlier result's cone
        Operation *copy = b.clone(*op, copies);
        copy->setAttr(kRecomputeAttr, b.getStringAttr(kRecomputeOutput));
      }
      added.push_back({i, copies.lookup(v)});
      auto diag = remark();
      diag << "may be dropped after the forward: result "
           << fn.getNumResults() + added.size() - 1
           << " recomputes it for the backward from values the backward has "
           << "anyway (" << cone.size() << " ops, " << gemms << " GEMM"
           << (gemms == 1 ? "" : "s") << "); ";
      if (std::optional<int64_t> bytes = storageBytes(v.getType()))
        diag << "frees " << *bytes << " bytes";
      else if (std::optional<int64_t> perToken = storageBytes(v.getType(), 1))
        diag << "frees " << *perToken << " bytes a token";
    }

    for (auto [of, value] : added) {
      MLIRContext *ctx = fn.getContext();
      auto attrs = DictionaryAttr::get(
          ctx, {NamedAttribute(StringAttr::get(ctx, kRecomputeOfAttr),
                               IntegerAttr::get(IntegerType::get(ctx, 64),
                                                of))});
      unsigned index = fn.getNumResults();
      if (failed(fn.insertResult(index, value.getType(), attrs)))
        return signalPassFailure();
      ret->insertOperands(index, value);
    }
  }

  /// Says, at each forward quantize of a weight whose copy the backward
  /// reads, whether the copy is derived again there or kept, and why.
  void
  remarkWeightCopies(Block &body,
                     const DenseMap<Operation *, Operation *> &copyOf,
                     llvm::function_ref<bool(Operation *)> isBackwardUser) {
    auto readInBackward = [&](Value v) {
      return llvm::any_of(v.getUsers(), [&](Operation *user) {
        if (isBackwardUser(user))
          return true;
        auto t = dyn_cast<TransposeOp>(user);
        return t && llvm::any_of(t.getResult().getUsers(), isBackwardUser);
      });
    };
    for (Operation &op : body) {
      auto q = dyn_cast<QuantizeOp>(&op);
      if (!q || q.getScale() || q->hasAttr(kRecomputeAttr) ||
          !isWeight(q.getInput()))
        continue;
      std::optional<int64_t> bytes = storageBytes(q.getResult().getType());
      if (!bytes)
        continue;
      std::string decision;
      if (copyOf.count(q))
        decision = "derived again in the backward: at least "
                   "weight-copies-min-bytes (" +
                   std::to_string(weightCopiesMinBytes) + ")";
      else if (readInBackward(q.getResult()))
        decision = weightCopiesMinBytes < 0
                       ? "kept for the backward: weight-copies-min-bytes is "
                         "negative"
                       : "kept for the backward: under weight-copies-min-bytes "
                         "(" + std::to_string(weightCopiesMinBytes) + ")";
      else
        continue; // the forward alone reads it
      q.emitRemark() << "FP8 copy of weight argument "
                     << cast<BlockArgument>(q.getInput()).getArgNumber() << " ("
                     << *bytes << " bytes) " << decision;
    }
  }
};

} // namespace
