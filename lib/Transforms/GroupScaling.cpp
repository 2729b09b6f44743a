//===- GroupScaling.cpp - per-tensor scales from the producer's maxima ----===//
//
// COAT's "group scaling" (COAT.md §3.1): the op that produces a tensor also
// emits its partial (1xG or per-row) maxima; the per-tensor scale is the
// maximum of that small tensor, so no kernel re-reads the whole tensor just to
// find its maximum.
//
//===----------------------------------------------------------------------===//

#include "coat/Dialect/CoatDialect.h"
#include "coat/Numerics/Fp8.h"
#include "coat/Transforms/GroupScaling.h"
#include "coat/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATGROUPSCALING
#include "coat/Transforms/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

std::optional<::coat::Scaling>
mlir::coat::partialMaximaScaling(ArrayRef<int64_t> shape, int64_t groupSize) {
  if (shape.empty() || ShapedType::isDynamic(shape.back()) ||
      shape.back() <= 0)
    return std::nullopt;
  int64_t inner = shape.back();
  return ::coat::Scaling::perGroup(inner % groupSize == 0 ? groupSize : inner);
}

bool mlir::coat::isScaleArithmetic(Operation *op) {
  if (!isa_and_nonnull<arith::ArithDialect>(op->getDialect()) ||
      op->getNumResults() != 1)
    return false;
  auto t = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  return t && t.getRank() == 0;
}

QuantizeOp mlir::coat::splitDerivedPerTensorScale(QuantizeOp q,
                                                  ::coat::Scaling partial,
                                                  bool inProducer) {
  MLIRContext *ctx = q.getContext();
  Location loc = q.getLoc();
  Value x = q.getInput();
  QTensorType out = q.getResult().getType();
  auto f32 = Float32Type::get(ctx);
  auto scalar = RankedTensorType::get({}, f32);

  // The maxima are computed where %x is produced: right after its producer.
  // A quantize that recomputes (coat-recompute-activations) takes them where
  // it runs, in its phase, and so do the scale's ops: the forward neither
  // computes them for it nor keeps them.
  Attribute recompute = q->getAttr(kRecomputeAttr);
  OpBuilder b(ctx);
  if (recompute)
    b.setInsertionPoint(q);
  else
    b.setInsertionPointAfterValue(x);
  auto shape = cast<ShapedType>(x.getType()).getShape();
  auto partialType = RankedTensorType::get(
      ::coat::scaleShape(toLayoutShape(shape), partial), f32);
  auto absmax = AbsMaxOp::create(b, loc, partialType, x,
                                 ScalingAttr::get(ctx, partial),
                                 inProducer ? b.getUnitAttr() : UnitAttr());

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
  if (recompute)
    for (Operation *op = absmax; op != q; op = op->getNextNode())
      if (!isa<arith::ConstantOp>(op))
        op->setAttr(kRecomputeAttr, recompute);
  q.getResult().replaceAllUsesWith(given.getResult());
  q.erase();
  return given;
}

namespace {

/// A precision-flow op's fused per-tensor FP8 copy of one of its values: the
/// value (`valueIndex`, or the FP8 result itself for forward ops, whose
/// unquantized form replaces it) and the copy's result and optional transposed
/// copy.
struct FusedCopy {
  std::optional<unsigned> valueIndex;
  unsigned copyIndex;
  std::optional<unsigned> transposedIndex;
};

/// Where `op` carries a derived per-tensor FP8 copy that group scaling must
/// split off; nothing for ops without one.
static std::optional<FusedCopy> fusedPerTensorCopy(Operation *op) {
  auto optIndex = [](Value v) -> std::optional<unsigned> {
    if (!v)
      return std::nullopt;
    return cast<OpResult>(v).getResultNumber();
  };
  auto index = [](Value v) { return cast<OpResult>(v).getResultNumber(); };
  std::optional<FusedCopy> copy =
      llvm::TypeSwitch<Operation *, std::optional<FusedCopy>>(op)
          .Case<GeluOp, SwigluMulOp, RMSNormOp, LayerNormOp>(
              [&](auto o) -> std::optional<FusedCopy> {
                return FusedCopy{std::nullopt, index(o.getResult()),
                                 optIndex(o.getResultT())};
              })
          .Case<SiluGradOp, GeluGradOp>([&](auto o) -> std::optional<FusedCopy> {
            if (!o.getDxQ())
              return std::nullopt;
            return FusedCopy{index(o.getDx()), index(o.getDxQ()),
                             optIndex(o.getDxQt())};
          })
          .Case([&](SwigluMulGradOp o) -> std::optional<FusedCopy> {
            if (!o.getDrhsQ())
              return std::nullopt;
            return FusedCopy{index(o.getDrhs()), index(o.getDrhsQ()),
                             optIndex(o.getDrhsQt())};
          })
          .Case([&](ResidualAddGradOp o) -> std::optional<FusedCopy> {
            if (!o.getSumQ())
              return std::nullopt;
            return FusedCopy{index(o.getSum()), index(o.getSumQ()),
                             std::nullopt};
          })
          .Default([](Operation *) { return std::nullopt; });
  if (!copy)
    return std::nullopt;
  auto q = dyn_cast<QTensorType>(op->getResult(copy->copyIndex).getType());
  if (!q || !q.getScaling().isPerTensor())
    return std::nullopt;
  return copy;
}

/// The element type a forward op's unquantized values are kept in between
/// the two stages, as COAT keeps them (§3.4: bf16; LayerNorm's in f32).
static Type unquantizedElementType(Operation *op) {
  Builder b(op->getContext());
  if (isa<LayerNormOp>(op))
    return b.getF32Type();
  return b.getBF16Type();
}

struct CoatGroupScalingPass
    : mlir::coat::impl::CoatGroupScalingBase<CoatGroupScalingPass> {
  using Base::Base;

  /// Rebuilds `op` without its fused per-tensor copy: the copy becomes a
  /// derived per-tensor `coat.quantize` of the op's (unquantized) value, and
  /// the transposed copy a `coat.transpose` of it, which `rewrite` and the
  /// lowering then treat like any other.
  void splitFusedCopy(Operation *op, const FusedCopy &copy) {
    OpBuilder b(op);
    Location loc = op->getLoc();
    auto q = cast<QTensorType>(op->getResult(copy.copyIndex).getType());
    SmallVector<Type> types;
    SmallVector<int> newIndex(op->getNumResults(), -1);
    for (OpResult r : op->getResults()) {
      unsigned i = r.getResultNumber();
      if (i == copy.transposedIndex || (copy.valueIndex && i == copy.copyIndex))
        continue;
      Type t = r.getType();
      if (!copy.valueIndex && i == copy.copyIndex)
        t = RankedTensorType::get(q.getShape(), unquantizedElementType(op));
      newIndex[i] = types.size();
      types.push_back(t);
    }
    OperationState state(loc, op->getName(), op->getOperands(), types,
                         llvm::to_vector(op->getDiscardableAttrs()));
    // Ops with several optional results size them in a segment property;
    // the fused copies are always trailing optional segments.
    if (auto dict = dyn_cast_or_null<DictionaryAttr>(
            op->getPropertiesAsAttribute())) {
      NamedAttrList props(dict.getValue());
      if (auto sizes = dyn_cast_or_null<DenseI32ArrayAttr>(
              props.get("resultSegmentSizes"))) {
        SmallVector<int32_t> kept(sizes.asArrayRef());
        for (size_t i = 0, first = 0; i < kept.size(); first += kept[i], ++i)
          if (first == copy.copyIndex || first == copy.transposedIndex)
            kept[i] = 0;
        props.set("resultSegmentSizes", b.getDenseI32ArrayAttr(kept));
      }
      state.propertiesAttr = props.getDictionary(op->getContext());
    }
    Operation *split = b.create(state);
    for (OpResult r : op->getResults()) {
      unsigned i = r.getResultNumber();
      if (i != copy.copyIndex && i != copy.transposedIndex)
        r.replaceAllUsesWith(split->getResult(newIndex[i]));
    }

    Value value = split->getResult(
        newIndex[copy.valueIndex ? *copy.valueIndex : copy.copyIndex]);
    Value quantized = QuantizeOp::create(b, loc, q, value, Value(),
                                         b.getF32FloatAttr(::coat::kActivationScaleEps),
                                         b.getI64IntegerAttr(16));
    op->getResult(copy.copyIndex).replaceAllUsesWith(quantized);
    if (copy.transposedIndex) {
      Value t = op->getResult(*copy.transposedIndex);
      t.replaceAllUsesWith(TransposeOp::create(b, loc, t.getType(), quantized));
    }
    op->erase();
  }

  void runOnOperation() override {
    if (groupSize <= 0) {
      getOperation()->emitError("coat-group-scaling: group-size must be "
                                "positive, got ")
          << static_cast<int64_t>(groupSize);
      return signalPassFailure();
    }
    SmallVector<std::pair<Operation *, FusedCopy>> fused;
    getOperation()->walk([&](Operation *op) {
      std::optional<FusedCopy> copy = fusedPerTensorCopy(op);
      if (!copy)
        return;
      auto shape = cast<ShapedType>(op->getResult(copy->copyIndex).getType())
                       .getShape();
      // Without static row lengths there are no partial maxima to take the
      // scale from; the op keeps computing its copy itself.
      if (partialMaximaScaling(shape, groupSize))
        fused.emplace_back(op, *copy);
    });
    for (auto &[op, copy] : fused)
      splitFusedCopy(op, copy);

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
      if (std::optional<::coat::Scaling> p = partialMaximaScaling(shape, groupSize))
        work.emplace_back(q, *p);
    });
    for (auto &[q, partial] : work)
      splitDerivedPerTensorScale(q, partial, /*inProducer=*/true);
  }
};

} // namespace
