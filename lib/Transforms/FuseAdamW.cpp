//===- FuseAdamW.cpp - fuse the decomposed FP8 AdamW chain ----------------===//

#include "coat/Dialect/CoatDialect.h"
#include "coat/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATFUSEADAMW
#include "coat/Transforms/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

/// The single quantize user of `v` that re-quantizes to `type`, if any.
static QuantizeOp getSoleRequantize(Value v, QTensorType type) {
  if (!v.hasOneUse())
    return {};
  auto q = dyn_cast<QuantizeOp>(*v.getUsers().begin());
  if (!q || q.getScale() || q.getResult().getType() != type)
    return {};
  return q;
}

/// dequantize -> adamw_update -> quantize (both moments) => adamw_step.
struct FuseAdamWChain : OpRewritePattern<AdamWUpdateOp> {
  FuseAdamWChain(MLIRContext *ctx, OptimizerMode mode, bool &refused)
      : OpRewritePattern(ctx), mode(mode), refused(refused) {}

  LogicalResult matchAndRewrite(AdamWUpdateOp op,
                                PatternRewriter &rewriter) const override {
    auto dm = op.getM().getDefiningOp<DequantizeOp>();
    auto dv = op.getV().getDefiningOp<DequantizeOp>();
    if (!dm || !dv)
      return rewriter.notifyMatchFailure(op, "moments are not dequantized");
    QTensorType mType = dm.getInput().getType();
    QTensorType vType = dv.getInput().getType();
    QuantizeOp qm = getSoleRequantize(op.getNewM(), mType);
    QuantizeOp qv = getSoleRequantize(op.getNewV(), vType);
    if (!qm || !qv)
      return rewriter.notifyMatchFailure(
          op, "new moments are not re-quantized to the same types");
    if (qm.getExpandMin() != qv.getExpandMin())
      return rewriter.notifyMatchFailure(op, "moments disagree on expand_min");

    // The step is built detached and verified first: a chain whose types
    // the fused step does not take is reported once, on the update, and
    // leaves the IR as it is (a pattern that fails must not change it).
    OpBuilder detached(op.getContext());
    auto step = AdamWStepOp::create(
        detached, op.getLoc(), op.getNewParam().getType(), mType, vType,
        /*new_master=*/Type(), op.getParam(), op.getGrad(), dm.getInput(), dv.getInput(),
        op.getStep(), op.getLr(), op.getBeta1(), op.getBeta2(), op.getEps(),
        op.getWeightDecay(), qm.getExpandMin(), llvm::APFloat(16.0f), mode,
        /*stochastic_param=*/false, /*stochastic_moments=*/false,
        /*seed=*/Value(), op.getGradScale(), /*master=*/Value());
    std::string why;
    LogicalResult verified = [&] {
      ScopedDiagnosticHandler capture(op.getContext(), [&](Diagnostic &d) {
        if (why.empty() && d.getSeverity() == DiagnosticSeverity::Error)
          why = d.str();
        return success();
      });
      return mlir::verify(step);
    }();
    if (failed(verified)) {
      step->erase();
      op.emitOpError("coat-fuse-adamw: the dequantize -> adamw_update -> "
                     "quantize chain does not fuse into coat.adamw_step: ")
          << why;
      refused = true;
      return rewriter.notifyMatchFailure(op, "fused step would not verify");
    }
    // The fused step must be inserted after both quantize ops' operands are
    // available; the update itself is the latest of them.
    rewriter.setInsertionPoint(op);
    rewriter.insert(step);
    rewriter.replaceOp(qm, step.getNewM());
    rewriter.replaceOp(qv, step.getNewV());
    rewriter.replaceAllUsesWith(op.getNewParam(), step.getNewParam());
    rewriter.eraseOp(op);
    return success();
  }

  OptimizerMode mode;
  bool &refused;
};

struct CoatFuseAdamWPass
    : mlir::coat::impl::CoatFuseAdamWBase<CoatFuseAdamWPass> {
  using Base::Base;
  void runOnOperation() override {
    std::optional<OptimizerMode> m = symbolizeOptimizerMode(mode);
    if (!m) {
      getOperation()->emitError("coat-fuse-adamw: unknown mode '")
          << mode << "' (expected 'fixed' or 'reference')";
      return signalPassFailure();
    }
    RewritePatternSet patterns(&getContext());
    bool refused = false;
    patterns.add<FuseAdamWChain>(&getContext(), *m, refused);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))) ||
        refused)
      return signalPassFailure();
  }
};

} // namespace
