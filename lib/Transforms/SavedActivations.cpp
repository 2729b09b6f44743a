//===- SavedActivations.cpp - bytes kept from the forward for the backward ===//
//
// In a program holding a forward and its backward, the tensors saved for the
// backward are the values computed before the gradient arrives and used
// after: defined by ops that do not depend on an incoming gradient argument
// (`coat.gradient`), used by ops that do. This pass reports them and their
// bytes (FP8 codes plus scales, or high-precision elements), next to what
// the same tensors would take in BF16, COAT's Table 2 comparison.
//
//===----------------------------------------------------------------------===//

#include "coat/Dialect/CoatDialect.h"
#include "coat/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Format.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATREPORTSAVEDACTIVATIONS
#include "coat/Transforms/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

/// The high-precision tensor a saved value stands for: FP8 copies and their
/// transposes of one tensor are one tensor in a BF16 program.
Value logicalTensor(Value v) {
  while (true) {
    Operation *def = v.getDefiningOp();
    if (auto t = dyn_cast_or_null<TransposeOp>(def)) {
      v = t.getInput();
      continue;
    }
    if (auto q = dyn_cast_or_null<QuantizeOp>(def)) {
      v = q.getInput();
      continue;
    }
    return v;
  }
}

struct CoatReportSavedActivationsPass
    : mlir::coat::impl::CoatReportSavedActivationsBase<
          CoatReportSavedActivationsPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (fn.isExternal())
      return;
    if (tokens < 0) {
      fn.emitError("coat-report-saved-activations: tokens must be positive "
                   "(or 0: dynamic shapes not counted), got ")
          << static_cast<int64_t>(tokens);
      return signalPassFailure();
    }
    std::optional<int64_t> extent;
    if (tokens > 0)
      extent = tokens;
    // Elements of a shaped type, its dynamic dimensions `tokens` long.
    auto elements = [&](ShapedType t) -> std::optional<int64_t> {
      if (!t.hasRank())
        return std::nullopt;
      int64_t n = 1;
      for (int64_t d : t.getShape()) {
        if (ShapedType::isDynamic(d) && !extent)
          return std::nullopt;
        n *= ShapedType::isDynamic(d) ? *extent : d;
      }
      return n;
    };
    SmallVector<BlockArgument> gradients, weights, activations;
    for (BlockArgument a : fn.getArguments()) {
      if (fn.getArgAttr(a.getArgNumber(), "coat.gradient"))
        gradients.push_back(a);
      else if (fn.getArgAttr(a.getArgNumber(), "coat.weight"))
        weights.push_back(a);
      else
        activations.push_back(a);
    }
    if (gradients.empty())
      return; // a forward-only program saves nothing for a backward

    // The backward: everything that depends on an incoming gradient, and
    // what is recomputed for it.
    llvm::SetVector<Value> backward(gradients.begin(), gradients.end());
    fn.walk([&](Operation *op) {
      if (runsInBackward(op, backward))
        backward.insert(op->result_begin(), op->result_end());
    });
    // The function's results are outputs, not saved tensors.
    auto inBackward = [&](Operation *op) {
      return !op->hasTrait<OpTrait::ReturnLike>() &&
             runsInBackward(op, backward);
    };
    // Values that derive from weights alone are weight copies, not
    // activations (a memory-efficient program recomputes them instead).
    llvm::DenseSet<Value> weightOnly(weights.begin(), weights.end());
    fn.walk([&](Operation *op) {
      if (op->getNumOperands() &&
          llvm::all_of(op->getOperands(), [&](Value v) {
            return weightOnly.contains(v) || isa_and_nonnull<arith::ConstantOp>(
                                                 v.getDefiningOp());
          }))
        weightOnly.insert(op->result_begin(), op->result_end());
    });

    int64_t saved = 0, weightCopies = 0, bf16 = 0, keptByCaller = 0;
    llvm::SetVector<Value> logical;
    auto visit = [&](Value v) {
      if (backward.contains(v) || v.use_empty() ||
          matchPattern(v, m_Constant()))
        return;
      if (!llvm::any_of(v.getUsers(), inBackward))
        return;
      std::optional<int64_t> bytes = storageBytes(v.getType(), extent);
      if (!bytes) {
        emitWarning(v.getLoc())
            << "saved value of dynamic shape " << v.getType()
            << " is not counted (tokens=N counts it)";
        return;
      }
      // The caller holds it for its own backward, with or without us.
      if (auto arg = dyn_cast<BlockArgument>(v);
          arg && fn.getArgAttr(arg.getArgNumber(), kKeptByCallerAttr)) {
        keptByCaller += *bytes;
        emitRemark(v.getLoc()) << "read by the backward, kept by the caller: "
                               << v.getType() << ", " << *bytes
                               << " bytes (not counted)";
        return;
      }
      bool weight = weightOnly.contains(v);
      (weight ? weightCopies : saved) += *bytes;
      if (!weight && logical.insert(logicalTensor(v)))
        bf16 += elements(cast<ShapedType>(logicalTensor(v).getType()))
                    .value_or(0) * 2;
      emitRemark(v.getLoc()) << "saved for the backward: " << v.getType()
                             << ", " << *bytes << " bytes"
                             << (weight ? " (weight copy)" : "");
    };
    for (BlockArgument a : activations)
      visit(a);
    fn.walk([&](Operation *op) {
      for (Value r : op->getResults())
        visit(r);
      // A value recomputed for the backward (not a step of recomputing
      // one) is one a BF16 program keeps.
      if (op->hasAttr(kRecomputeAttr))
        for (Value r : op->getResults()) {
          bool readByBackward = llvm::any_of(r.getUsers(), [](Operation *u) {
            return !u->hasAttr(kRecomputeAttr) &&
                   !u->hasTrait<OpTrait::ReturnLike>();
          });
          auto shaped = dyn_cast<ShapedType>(logicalTensor(r).getType());
          std::optional<int64_t> n = shaped ? elements(shaped) : std::nullopt;
          if (readByBackward && n && logical.insert(logicalTensor(r)))
            bf16 += *n * 2;
        }
    });

    // COAT's unit: U = one BF16 tensor of the first activation argument.
    std::string unit;
    if (!activations.empty())
      if (std::optional<int64_t> n = elements(
              cast<ShapedType>(activations.front().getType()))) {
        int64_t ubytes = *n * 2;
        llvm::raw_string_ostream os(unit);
        os << " (" << llvm::format("%.2f", double(saved) / ubytes)
           << "U vs BF16 " << llvm::format("%.2f", double(bf16) / ubytes)
           << "U, U = " << ubytes << " bytes)";
      }
    fn.emitRemark("saved activations: ")
        << saved << " bytes, BF16 " << bf16 << " bytes" << unit
        << "; weight copies kept for the backward: " << weightCopies
        << " bytes"
        << (keptByCaller ? "; read from the caller's: " +
                               std::to_string(keptByCaller) + " bytes"
                         : std::string());
  }
};

} // namespace
