//===- GroupScaling.cpp - per-tensor scales from the producer's maxima ----===//
//
// COAT's "group scaling" (COAT.md §3.1): the op that produces a tensor also
// emits its partial (1xG or per-row) maxima; the per-tensor scale is the
// maximum of that small tensor, so no kernel re-reads the whole tensor just to
// find its maximum.
//
//===----------------------------------------------------------------------===//

#include "coat/Dialect/CoatDialect.h"
#include "coat/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATGROUPSCALING
#include "coat/Transforms/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

/// The partial-maxima granularity for a tensor of `shape`: 1xG groups of the
/// innermost dimension when G divides it, else whole rows. Nothing for
/// rank-0 tensors or a dynamic innermost extent (no static row length).
static std::optional<::coat::Scaling> partialScaling(ArrayRef<int64_t> shape,
                                                     int64_t groupSize) {
  if (shape.empty() || ShapedType::isDynamic(shape.back()) ||
      shape.back() <= 0)
    return std::nullopt;
  int64_t inner = shape.back();
  return ::coat::Scaling::perGroup(inner % groupSize == 0 ? groupSize : inner);
}

struct CoatGroupScalingPass
    : mlir::coat::impl::CoatGroupScalingBase<CoatGroupScalingPass> {
  using Base::Base;

  /// quantize %x (per_tensor, derived scale) with %x produced by an op =>
  /// absmax epilogue + reduce_scales + (max + eps) / fp8max + quantize scale.
  void rewrite(QuantizeOp q, ::coat::Scaling partial) {
    MLIRContext *ctx = q.getContext();
    Location loc = q.getLoc();
    Value x = q.getInput();
    QTensorType out = q.getResult().getType();
    auto f32 = Float32Type::get(ctx);
    auto scalar = RankedTensorType::get({}, f32);

    // The maxima are computed where %x is produced: right after its producer.
    OpBuilder b(ctx);
    b.setInsertionPointAfterValue(x);
    auto shape = cast<ShapedType>(x.getType()).getShape();
    auto partialType = RankedTensorType::get(
        ::coat::scaleShape(toLayoutShape(shape), partial), f32);
    auto absmax = AbsMaxOp::create(b, loc, partialType, x,
                                   ScalingAttr::get(ctx, partial),
                                   /*epilogue=*/b.getUnitAttr());

    // The scale, derived as coat.quantize derives it (COAT.md §1.2).
    b.setInsertionPoint(q);
    Value max = ReduceScalesOp::create(b, loc, scalar, absmax.getResult());
    float fp8max = ::coat::getFp8Traits(out.getFormat()).maxFinite;
    auto cst = [&](float v) {
      return arith::ConstantOp::create(
          b, loc, DenseElementsAttr::get(scalar, b.getF32FloatAttr(v)));
    };
    Value scale = arith::DivFOp::create(
        b, loc,
        arith::AddFOp::create(b, loc, max, cst(q.getEps().convertToFloat())),
        cst(fp8max));
    if (!out.getScaleType().isF32())
      scale = arith::TruncFOp::create(
          b, loc, RankedTensorType::get({}, out.getScaleType()), scale);
    auto given = QuantizeOp::create(b, loc, out, x, scale, q.getEpsAttr(),
                                    q.getExpandMinAttr());
    q.getResult().replaceAllUsesWith(given.getResult());
    q.erase();
  }

  void runOnOperation() override {
    if (groupSize <= 0) {
      getOperation()->emitError("coat-group-scaling: group-size must be "
                                "positive, got ")
          << static_cast<int64_t>(groupSize);
      return signalPassFailure();
    }
    SmallVector<std::pair<QuantizeOp, ::coat::Scaling>> work;
    getOperation()->walk([&](QuantizeOp q) {
      QTensorType out = q.getResult().getType();
      // Only derived per-tensor scales need a global maximum. The producer
      // must be a coat op, which lowers to a kernel with an epilogue; a block
      // argument or a foreign op has none to compute the maxima in.
      Operation *producer = q.getInput().getDefiningOp();
      if (q.getScale() || !out.getScaling().isPerTensor() || !producer ||
          !producer->getDialect() || !isa<CoatDialect>(producer->getDialect()))
        return;
      auto shape = cast<ShapedType>(q.getInput().getType()).getShape();
      if (std::optional<::coat::Scaling> p = partialScaling(shape, groupSize))
        work.emplace_back(q, *p);
    });
    for (auto &[q, partial] : work)
      rewrite(q, partial);
  }
};

} // namespace
