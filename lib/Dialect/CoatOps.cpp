//===- CoatOps.cpp - coat operations --------------------------------------===//

#include "coat/Dialect/CoatDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace mlir::coat;

/// Checks that two shapes agree where both are static.
static bool shapesCompatible(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  if (a.size() != b.size())
    return false;
  for (auto [x, y] : llvm::zip(a, b))
    if (!ShapedType::isDynamic(x) && !ShapedType::isDynamic(y) && x != y)
      return false;
  return true;
}

//===----------------------------------------------------------------------===//
// QuantizeOp
//===----------------------------------------------------------------------===//

LogicalResult QuantizeOp::verify() {
  auto in = getInput().getType();
  QTensorType out = getResult().getType();
  if (!shapesCompatible(in.getShape(), out.getShape()))
    return emitOpError("input shape ")
           << in << " does not match result shape " << out;
  if (getScale()) {
    if (!out.getScaling().isPerTensor())
      return emitOpError("a given scale needs a per_tensor result, got ")
             << ::coat::toString(out.getScalingValue());
    if (cast<RankedTensorType>(getScale().getType()).getRank() != 0)
      return emitOpError("a given scale must be a rank-0 tensor");
  }
  if (getExpandMin() <= 0)
    return emitOpError("expand_min must be positive, got ") << getExpandMin();
  if (getEps().convertToFloat() < 0.0f)
    return emitOpError("eps must be non-negative");
  return success();
}

OpFoldResult QuantizeOp::fold(FoldAdaptor) {
  // quantize(dequantize(q)) with the same type and no given scale is q:
  // dequantizing to f32 is exact and the scales re-derive identically only for
  // f32, so restrict the fold to f32 round trips.
  if (getScale())
    return {};
  auto deq = getInput().getDefiningOp<DequantizeOp>();
  if (!deq || deq.getInput().getType() != getResult().getType())
    return {};
  if (!cast<RankedTensorType>(deq.getResult().getType()).getElementType().isF32())
    return {};
  if (getResult().getType().getExpanded())
    return {};
  return deq.getInput();
}

//===----------------------------------------------------------------------===//
// DequantizeOp
//===----------------------------------------------------------------------===//

LogicalResult DequantizeOp::verify() {
  QTensorType in = getInput().getType();
  auto out = cast<RankedTensorType>(getResult().getType());
  if (!shapesCompatible(in.getShape(), out.getShape()))
    return emitOpError("input shape ")
           << in << " does not match result shape " << out;
  return success();
}

//===----------------------------------------------------------------------===//
// AssembleOp / DisassembleOp
//===----------------------------------------------------------------------===//

LogicalResult AssembleOp::verify() {
  QTensorType q = getResult().getType();
  if (getData().getType() != q.getDataType())
    return emitOpError("data type ")
           << getData().getType() << " does not match the derived "
           << q.getDataType();
  if (getScale().getType() != q.getScaleTensorType())
    return emitOpError("scale type ")
           << getScale().getType() << " does not match the derived "
           << q.getScaleTensorType();
  if (q.getExpanded() != static_cast<bool>(getK()))
    return emitOpError(q.getExpanded()
                           ? "an expanded result needs k and c operands"
                           : "k and c operands need an expanded result");
  if (getK()) {
    if (getK().getType() != q.getExpansionTensorType() ||
        getC().getType() != q.getExpansionTensorType())
      return emitOpError("k and c must have type ")
             << q.getExpansionTensorType();
  }
  return success();
}

namespace {
/// assemble(disassemble(q)) -> q.
struct AssembleOfDisassemble : OpRewritePattern<AssembleOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AssembleOp op,
                                PatternRewriter &rewriter) const override {
    auto dis = op.getData().getDefiningOp<DisassembleOp>();
    if (!dis || dis.getInput().getType() != op.getResult().getType() ||
        op.getScale() != dis.getScale())
      return failure();
    if (op.getK() && (dis.getExpansion().size() != 2 ||
                      op.getK() != dis.getExpansion()[0] ||
                      op.getC() != dis.getExpansion()[1]))
      return failure();
    rewriter.replaceOp(op, dis.getInput());
    return success();
  }
};
} // namespace

void AssembleOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                             MLIRContext *context) {
  results.add<AssembleOfDisassemble>(context);
}

LogicalResult DisassembleOp::inferReturnTypes(
    MLIRContext *, std::optional<Location>, ValueRange operands,
    DictionaryAttr, OpaqueProperties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  auto q = dyn_cast<QTensorType>(operands[0].getType());
  if (!q)
    return failure();
  inferred.push_back(q.getDataType());
  inferred.push_back(q.getScaleTensorType());
  if (q.getExpanded()) {
    inferred.push_back(q.getExpansionTensorType());
    inferred.push_back(q.getExpansionTensorType());
  }
  return success();
}

LogicalResult DisassembleOp::fold(FoldAdaptor,
                                  SmallVectorImpl<OpFoldResult> &results) {
  auto as = getInput().getDefiningOp<AssembleOp>();
  if (!as)
    return failure();
  results.push_back(as.getData());
  results.push_back(as.getScale());
  if (as.getK()) {
    results.push_back(as.getK());
    results.push_back(as.getC());
  }
  return success();
}

//===----------------------------------------------------------------------===//
// AdamW
//===----------------------------------------------------------------------===//

/// Common checks for the moments of an FP8 optimizer step.
static LogicalResult verifyMoment(Operation *op, StringRef name, QTensorType q,
                                  ShapedType param) {
  if (!shapesCompatible(q.getShape(), param.getShape()))
    return op->emitOpError() << name << " shape does not match the parameter: "
                             << q << " vs " << param;
  if (q.getScalingValue().kind != ::coat::ScalingKind::FlatGroup)
    return op->emitOpError()
           << name << " must use flat_group<G> scaling, got "
           << ::coat::toString(q.getScalingValue());
  int64_t g = q.getScalingValue().groupSize;
  if (g < 32 || g > 1024 || !llvm::isPowerOf2_64(g))
    return op->emitOpError() << name
                             << " group size must be a power of two in "
                                "[32, 1024], got "
                             << g;
  if (!isa<Float32Type>(q.getScaleType()))
    return op->emitOpError() << name << " scales must be f32";
  return success();
}

LogicalResult AdamWUpdateOp::verify() {
  if (!shapesCompatible(getParam().getType().getShape(),
                        getGrad().getType().getShape()) ||
      !shapesCompatible(getParam().getType().getShape(),
                        getM().getType().getShape()))
    return emitOpError("param, grad and moments must have the same shape");
  return success();
}

LogicalResult AdamWStepOp::verify() {
  auto param = cast<ShapedType>(getParam().getType());
  if (!shapesCompatible(param.getShape(),
                        cast<ShapedType>(getGrad().getType()).getShape()))
    return emitOpError("grad shape does not match the parameter");
  if (failed(verifyMoment(*this, "m", getM().getType(), param)) ||
      failed(verifyMoment(*this, "v", getV().getType(), param)))
    return failure();
  if (getM().getType().getScalingValue() != getV().getType().getScalingValue())
    return emitOpError("m and v must use the same group size");
  if (getExpandMin() <= 0)
    return emitOpError("expand_min must be positive, got ") << getExpandMin();
  if (getMaxK().convertToFloat() < 1.0f)
    return emitOpError("max_k must be at least 1");
  return success();
}

#define GET_OP_CLASSES
#include "coat/Dialect/CoatOps.cpp.inc"
