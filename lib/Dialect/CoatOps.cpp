//===- CoatOps.cpp - coat operations --------------------------------------===//

#include "coat/Dialect/CoatDialect.h"
#include "coat/Numerics/ColumnSums.h"

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

/// I64Attr getters return uint64_t; a negative value must not pass as huge.
static LogicalResult verifyExpandMin(Operation *op, uint64_t raw) {
  int64_t v = static_cast<int64_t>(raw);
  if (v <= 0)
    return op->emitOpError("expand_min must be positive, got ") << v;
  return success();
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
  if (failed(verifyExpandMin(*this, getExpandMin())))
    return failure();
  if (!(getEps().convertToFloat() >= 0.0f))
    return emitOpError("eps must be non-negative");
  return success();
}

//===----------------------------------------------------------------------===//
// QuantizeAutoOp
//===----------------------------------------------------------------------===//

LogicalResult QuantizeAutoOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  UnresolvedType out = getResult().getType();
  if (!shapesCompatible(in.getShape(), out.getShape()) ||
      in.getElementType() != out.getElementType())
    return emitOpError("result must be !coat.unresolved of the input shape and "
                       "element type, got ")
           << out;
  return success();
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
  if (static_cast<bool>(getK()) != static_cast<bool>(getC()))
    return emitOpError("k and c must be given together");
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
    MLIRContext *, std::optional<Location> location, ValueRange operands,
    DictionaryAttr, OpaqueProperties, RegionRange,
    SmallVectorImpl<Type> &inferred) {
  auto q = operands.size() == 1 ? dyn_cast<QTensorType>(operands[0].getType())
                                : QTensorType();
  if (!q)
    return emitOptionalError(location, "expects one !coat.qtensor operand");
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

/// The gradient scale of an AdamW op is one f32 the kernel reads from memory
/// (ODS checks the element type).
static LogicalResult verifyGradScale(Operation *op, Value scale) {
  if (!scale)
    return success();
  auto type = cast<RankedTensorType>(scale.getType());
  if (type.getRank() != 0)
    return op->emitOpError("grad_scale must be a rank-0 tensor, got ") << type;
  return success();
}

LogicalResult AdamWUpdateOp::verify() {
  if (!shapesCompatible(getParam().getType().getShape(),
                        getGrad().getType().getShape()) ||
      !shapesCompatible(getParam().getType().getShape(),
                        getM().getType().getShape()))
    return emitOpError("param, grad and moments must have the same shape");
  return verifyGradScale(*this, getGradScale());
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
  if (failed(verifyExpandMin(*this, getExpandMin())))
    return failure();
  if (!(getMaxK().convertToFloat() >= 1.0f))
    return emitOpError("max_k must be at least 1");
  bool stochastic = getStochasticParam() || getStochasticMoments();
  if (stochastic != bool(getSeed()))
    return emitOpError(stochastic ? "stochastic rounding needs a seed operand"
                                  : "a seed operand needs stochastic_param or "
                                    "stochastic_moments");
  if (stochastic && getMode() != OptimizerMode::fixed)
    return emitOpError("stochastic rounding needs mode = fixed");
  if (getStochasticParam() && !param.getElementType().isBF16())
    return emitOpError("stochastic_param needs bf16 parameters (f32 "
                       "parameters are not rounded)");
  if (bool(getMaster()) != bool(getNewMaster()))
    return emitOpError("a master operand and a new_master result go "
                       "together");
  if (Value master = getMaster()) {
    if (!param.getElementType().isBF16())
      return emitOpError("a master copy needs bf16 parameters (f32 "
                         "parameters are their own master)");
    if (getStochasticParam())
      return emitOpError("stochastic_param does not go with a master copy "
                         "(the bf16 parameter is the master rounded to "
                         "nearest)");
    auto masterType = cast<ShapedType>(master.getType());
    if (!shapesCompatible(param.getShape(), masterType.getShape()))
      return emitOpError("master shape does not match the parameter");
    if (getNewMaster().getType() != master.getType())
      return emitOpError("new_master must have the master's type");
  }
  return verifyGradScale(*this, getGradScale());
}

//===----------------------------------------------------------------------===//
// Shared checks
//===----------------------------------------------------------------------===//

/// `128x?x16` for diagnostics.
static std::string shapeString(ArrayRef<int64_t> shape) {
  std::string s;
  llvm::raw_string_ostream os(s);
  llvm::interleave(
      shape, os,
      [&](int64_t d) {
        if (ShapedType::isDynamic(d))
          os << "?";
        else
          os << d;
      },
      "x");
  return s;
}

static StringRef formatName(::coat::Fp8Format f) {
  return ::coat::getFp8Traits(f).mlirType;
}

static bool dimsCompatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

/// The shape of the 2-D transposed copy of a tensor viewed as
/// `[prod(leading dims), innermost]` (COAT flattens [B, S, H] to [B*S, H]).
static SmallVector<int64_t> transposed2DShape(ArrayRef<int64_t> shape) {
  int64_t rows = 1;
  for (int64_t d : shape.drop_back()) {
    if (ShapedType::isDynamic(d)) {
      rows = ShapedType::kDynamic;
      break;
    }
    rows *= d;
  }
  return {shape.back(), rows};
}

/// A 1xG FP8 activation as the non-linear layers consume it (COAT.md §3.1,
/// §3.8): per_group<G>, E4M3, not range-expanded.
static LogicalResult verifyGroupedActivation(Operation *op, StringRef name,
                                             QTensorType q) {
  if (!q) // unresolved: coat-mixed-granularity will make it 1xG E4M3
    return success();
  if (q.getScalingValue().kind != ::coat::ScalingKind::PerGroup)
    return op->emitOpError()
           << name << " must be a 1xG (per_group<G>) tensor, got "
           << ::coat::toString(q.getScalingValue());
  if (q.getExpanded())
    return op->emitOpError() << name << " must not be range-expanded";
  if (q.getFormat() != ::coat::Fp8Format::E4M3)
    return op->emitOpError()
           << name << " must be f8E4M3FN (forward activations are E4M3), got "
           << q.getElementType();
  return success();
}

/// A per-tensor FP8 copy of a value shaped `shape`, in `format`.
static LogicalResult verifyPerTensorCopy(Operation *op, StringRef name,
                                         QTensorType q, ArrayRef<int64_t> shape,
                                         ::coat::Fp8Format format,
                                         StringRef why) {
  if (!q.getScaling().isPerTensor())
    return op->emitOpError() << name << " must be per_tensor, got "
                             << ::coat::toString(q.getScalingValue());
  if (!shapesCompatible(q.getShape(), shape))
    return op->emitOpError() << name << " shape " << shapeString(q.getShape())
                             << " does not match " << shapeString(shape);
  if (q.getFormat() != format)
    return op->emitOpError() << name << " must be " << formatName(format)
                             << " (" << why << "), got " << q.getElementType();
  return success();
}

/// The optional 2-D transposed copy `t` of the per-tensor tensor `q`: the
/// same codes and scale in `[N, M]`.
static LogicalResult verifyTransposedCopy(Operation *op, StringRef name,
                                          QTensorType q, QTensorType t) {
  if (q.getRank() < 2)
    return op->emitOpError() << name << ": a transposed copy needs a value of "
                                        "rank >= 2";
  QTensorType expected = q.cloneWithShape(transposed2DShape(q.getShape()));
  if (t.getElementType() != expected.getElementType() ||
      t.getScaling() != expected.getScaling() ||
      t.getScaleType() != expected.getScaleType() ||
      !shapesCompatible(t.getShape(), expected.getShape()))
    return op->emitOpError() << name << " must be the transposed copy "
                             << expected << ", got " << t;
  return success();
}

/// Gradient outputs of a backward op: `dx` in the type of `grad` and shaped
/// like `shape`, an optional per-tensor E5M2 copy and its transposed copy.
static LogicalResult verifyGradOutputs(Operation *op, StringRef name,
                                       ArrayRef<int64_t> shape, Value grad,
                                       Value dx, Value dxq, Value dxqt) {
  if (!shapesCompatible(cast<ShapedType>(grad.getType()).getShape(), shape))
    return op->emitOpError() << "gradient shape "
                             << shapeString(
                                    cast<ShapedType>(grad.getType()).getShape())
                             << " does not match the input shape "
                             << shapeString(shape);
  if (dx.getType() != grad.getType())
    return op->emitOpError() << name << " must have the gradient's type "
                             << grad.getType() << ", got " << dx.getType();
  if (dxqt && !dxq)
    return op->emitOpError() << "a transposed " << name
                             << " copy needs the per_tensor copy";
  if (dxq &&
      failed(verifyPerTensorCopy(op, (name + " copy").str(),
                                 cast<QTensorType>(dxq.getType()), shape,
                                 ::coat::Fp8Format::E5M2,
                                 "backward gradient copies are E5M2")))
    return failure();
  if (dxqt && failed(verifyTransposedCopy(op, (name + " transposed copy").str(),
                                          cast<QTensorType>(dxq.getType()),
                                          cast<QTensorType>(dxqt.getType()))))
    return failure();
  return success();
}

/// A per-row statistic (rstd, mean): f32 shaped like the input without its
/// innermost dimension.
static LogicalResult verifyRowStat(Operation *op, StringRef name,
                                   ShapedType stat, ArrayRef<int64_t> shape) {
  if (!shapesCompatible(stat.getShape(), shape.drop_back()))
    return op->emitOpError()
           << name << " must have the input shape without its innermost "
           << "dimension (" << shapeString(shape.drop_back()) << "), got "
           << stat;
  return success();
}

/// A per-channel vector (norm weight or bias, or their gradients): 1-D of
/// the input's innermost extent.
static LogicalResult verifyChannelVector(Operation *op, StringRef name,
                                         ShapedType v, ArrayRef<int64_t> shape) {
  if (v.getRank() != 1 || !dimsCompatible(v.getDimSize(0), shape.back()))
    return op->emitOpError() << name << " must be 1-D of the innermost extent "
                             << shapeString(shape.back()) << ", got " << v;
  return success();
}

static LogicalResult verifyEps(Operation *op, const APFloat &eps) {
  // Also rejects NaN.
  if (!(eps.convertToFloat() > 0.0f))
    return op->emitOpError("eps must be positive");
  return success();
}

/// The quantized type of an FP8 operand, or null while it is unresolved
/// (`!coat.unresolved`, before coat-mixed-granularity chooses its type).
static QTensorType resolvedType(Value v) {
  return dyn_cast<QTensorType>(v.getType());
}

//===----------------------------------------------------------------------===//
// RequantizeOp / TransposeOp
//===----------------------------------------------------------------------===//

LogicalResult RequantizeOp::verify() {
  QTensorType in = getInput().getType(), out = getResult().getType();
  if (!shapesCompatible(in.getShape(), out.getShape()))
    return emitOpError("input shape ")
           << shapeString(in.getShape()) << " does not match result shape "
           << shapeString(out.getShape());
  if (failed(verifyExpandMin(*this, getExpandMin())))
    return failure();
  if (!(getEps().convertToFloat() >= 0.0f))
    return emitOpError("eps must be non-negative");
  return success();
}

bool RequantizeOp::takesMaxOfGroupScales() {
  QTensorType in = getInput().getType(), out = getResult().getType();
  return in.getScalingValue().kind == ::coat::ScalingKind::PerGroup &&
         out.getScaling().isPerTensor() && !in.getExpanded() &&
         !out.getExpanded() && in.getFormat() == out.getFormat() &&
         in.getScaleType() == out.getScaleType();
}

OpFoldResult RequantizeOp::fold(FoldAdaptor) {
  // Defined as the identity when nothing about the representation changes.
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

LogicalResult TransposeOp::verify() {
  ShapedType inShaped = getInput().getType(), outShaped = getResult().getType();
  if (inShaped.getRank() != 2)
    return emitOpError("expects a 2-D input, got rank ") << inShaped.getRank();
  if (isa<UnresolvedType>(inShaped) || isa<UnresolvedType>(outShaped)) {
    // Before coat-mixed-granularity: the transposed copy is as unresolved as
    // its source and resolves with it.
    if (!isa<UnresolvedType>(inShaped))
      return emitOpError("an unresolved result needs an unresolved input, got ")
             << inShaped;
    auto expected = UnresolvedType::get(
        getContext(), {inShaped.getDimSize(1), inShaped.getDimSize(0)},
        inShaped.getElementType());
    auto outU = dyn_cast<UnresolvedType>(outShaped);
    if (!outU || outU.getRank() != 2 ||
        !shapesCompatible(outU.getShape(), expected.getShape()) ||
        outU.getElementType() != expected.getElementType())
      return emitOpError("result must be ")
             << expected << " for an unresolved input, got " << outShaped;
    return success();
  }
  QTensorType in = cast<QTensorType>(inShaped), out = cast<QTensorType>(outShaped);
  ::coat::Scaling s = in.getScalingValue();
  if (s.isGrouped())
    return emitOpError("cannot transpose a ")
           << ::coat::toString(s)
           << " tensor without re-quantization; use coat.requantize to "
              "per_tensor or per_block scaling first";
  if (s.kind == ::coat::ScalingKind::PerBlock)
    std::swap(s.blockRows, s.blockCols);
  QTensorType expected = QTensorType::get(
      {in.getDimSize(1), in.getDimSize(0)}, in.getElementType(),
      ScalingAttr::get(getContext(), s), in.getScaleType(), in.getExpanded());
  if (out.getRank() != 2 || !shapesCompatible(out.getShape(), expected.getShape()) ||
      out.getElementType() != expected.getElementType() ||
      out.getScaling() != expected.getScaling() ||
      out.getScaleType() != expected.getScaleType() ||
      out.getExpanded() != expected.getExpanded())
    return emitOpError("result must be ") << expected << ", got " << out;
  return success();
}

OpFoldResult TransposeOp::fold(FoldAdaptor) {
  // Pure data movement: transposing twice restores codes and scales exactly.
  if (auto inner = getInput().getDefiningOp<TransposeOp>())
    if (inner.getInput().getType() == getResult().getType())
      return inner.getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// AbsMaxOp / ReduceScalesOp
//===----------------------------------------------------------------------===//

static ParseResult parseScalingBody(OpAsmParser &parser, ScalingAttr &attr) {
  SMLoc loc = parser.getCurrentLocation();
  FailureOr<::coat::Scaling> s = ScalingAttr::parseBody(parser);
  if (failed(s))
    return failure();
  attr = ScalingAttr::getChecked([&] { return parser.emitError(loc); },
                                 parser.getContext(), *s);
  return success(static_cast<bool>(attr));
}

static void printScalingBody(OpAsmPrinter &printer, Operation *,
                             ScalingAttr attr) {
  ScalingAttr::printBody(printer, attr.getValue());
}

LogicalResult AbsMaxOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  if (getEpilogue() && !getInput().getDefiningOp())
    return emitOpError("epilogue maxima need an input produced by an op, got "
                       "a block argument");
  ::coat::Scaling s = getScaling().getValue();
  std::vector<int64_t> shape = toLayoutShape(in.getShape());
  if (auto err = ::coat::verifyScalingForShape(shape, s))
    return emitOpError("scaling ")
           << ::coat::toString(s) << " does not fit the input: " << *err;
  if (auto err = verifyLayoutLimits(in.getShape(), s))
    return emitOpError() << *err;
  auto expected = RankedTensorType::get(::coat::scaleShape(shape, s),
                                        Float32Type::get(getContext()));
  auto out = cast<RankedTensorType>(getResult().getType());
  if (!shapesCompatible(out.getShape(), expected.getShape()))
    return emitOpError("result must be ")
           << expected << " (the scale shape of " << ::coat::toString(s)
           << "), got " << out;
  return success();
}

LogicalResult ReduceScalesOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (out.getRank() != 0)
    return emitOpError("result must be a rank-0 tensor, got ") << out;
  if (in.getElementType() != out.getElementType())
    return emitOpError("result element type ")
           << out.getElementType() << " differs from the input's "
           << in.getElementType();
  return success();
}

OpFoldResult ReduceScalesOp::fold(FoldAdaptor) {
  // The maximum of one element is that element.
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// LinearOp
//===----------------------------------------------------------------------===//

static ParseResult parseLinearKind(OpAsmParser &parser, LinearKindAttr &attr) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef kw;
  if (parser.parseKeyword(&kw))
    return failure();
  std::optional<LinearKind> kind = symbolizeLinearKind(kw);
  if (!kind)
    return parser.emitError(loc, "expected 'forward', 'dgrad' or 'wgrad', got '")
           << kw << "'";
  attr = LinearKindAttr::get(parser.getContext(), *kind);
  return success();
}

static void printLinearKind(OpAsmPrinter &printer, Operation *,
                            LinearKindAttr attr) {
  printer << stringifyLinearKind(attr.getValue());
}

LogicalResult LinearOp::verify() {
  ShapedType lhsShaped = getLhs().getType(), rhsShaped = getRhs().getType();
  LinearKind kind = getKind();
  if (lhsShaped.getRank() != 2 || rhsShaped.getRank() != 2)
    return emitOpError("operands must be 2-D, got ")
           << lhsShaped << " and " << rhsShaped;
  if (!dimsCompatible(lhsShaped.getDimSize(1), rhsShaped.getDimSize(1)))
    return emitOpError("operands disagree on the K-major reduction dimension: ")
           << shapeString(lhsShaped.getShape()) << " vs "
           << shapeString(rhsShaped.getShape());
  SmallVector<int64_t> resultShape = {lhsShaped.getDimSize(0),
                                      rhsShaped.getDimSize(0)};
  auto outShaped = cast<ShapedType>(getResult().getType());
  if (!shapesCompatible(outShaped.getShape(), resultShape))
    return emitOpError("result shape must be ")
           << shapeString(resultShape) << ", got "
           << shapeString(outShaped.getShape());
  if (Value addend = getAddend())
    if (addend.getType() != getResult().getType())
      return emitOpError("the addend must have the result's type ")
             << getResult().getType() << ", got " << addend.getType();
  if (Value bias = getBias()) {
    if (kind != LinearKind::forward)
      return emitOpError("a bias is only allowed for forward");
    auto b = cast<ShapedType>(bias.getType());
    if (b.getRank() != 1 || !dimsCompatible(b.getDimSize(0), resultShape[1]))
      return emitOpError("bias must be 1-D of length ")
             << shapeString(resultShape[1]) << ", got " << b;
  }

  QTensorType lhs = resolvedType(getLhs()), rhs = resolvedType(getRhs());
  if (!lhs || !rhs) {
    // Formats and scalings are coat-mixed-granularity's to choose; a
    // quantized result is only possible with per-tensor E4M3 operands.
    if (auto q = dyn_cast<QTensorType>(getResult().getType()))
      if (kind != LinearKind::forward ||
          q.getScalingValue() != ::coat::Scaling::perGroup(16) ||
          q.getExpanded() || q.getFormat() != ::coat::Fp8Format::E4M3)
        return emitOpError("a quantized result must be per_group<16> "
                           "f8E4M3FN of a forward GEMM, got ")
               << q;
    return success();
  }
  if (lhs.getExpanded() || rhs.getExpanded())
    return emitOpError("operands must not be range-expanded");

  // Formats (COAT.md §3.8, §4.1): E5M2 only for gradients.
  auto e4m3 = ::coat::Fp8Format::E4M3;
  switch (kind) {
  case LinearKind::forward:
    if (lhs.getFormat() != e4m3 || rhs.getFormat() != e4m3)
      return emitOpError("forward operands must both be f8E4M3FN");
    break;
  case LinearKind::dgrad:
    if (rhs.getFormat() != e4m3)
      return emitOpError("the dgrad weight operand (rhs) must be f8E4M3FN");
    break;
  case LinearKind::wgrad:
    if (lhs.getFormat() != e4m3 && rhs.getFormat() != e4m3)
      return emitOpError("at most one wgrad operand may be f8E5M2");
    break;
  }

  // Scaling: per-tensor x per-tensor, or 1x128 x 128x128 block scales.
  ::coat::Scaling ls = lhs.getScalingValue(), rs = rhs.getScalingValue();
  bool perTensor = lhs.getScaling().isPerTensor() && rhs.getScaling().isPerTensor();
  bool blocked = ls == ::coat::Scaling::perGroup(128) &&
                 rs == ::coat::Scaling::perBlock(128, 128);
  if (!perTensor && !blocked)
    return emitOpError("operands must both be per_tensor, or per_group<128> x "
                       "per_block<128x128>; got ")
           << ::coat::toString(ls) << " x " << ::coat::toString(rs);
  if (blocked && (!lhs.getScaleType().isF32() || !rhs.getScaleType().isF32()))
    return emitOpError("block-scaled operands need f32 scales");

  if (auto q = dyn_cast<QTensorType>(getResult().getType())) {
    if (kind != LinearKind::forward || !perTensor)
      return emitOpError("a quantized result needs kind forward with "
                         "per_tensor operands");
    if (q.getScalingValue() != ::coat::Scaling::perGroup(16) || q.getExpanded())
      return emitOpError("a quantized result must be per_group<16>, got ")
             << q;
    if (q.getElementType() != lhs.getElementType())
      return emitOpError("a quantized result must have the lhs format ")
             << lhs.getElementType() << ", got " << q.getElementType();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// BiasGradOp
//===----------------------------------------------------------------------===//

LogicalResult BiasGradOp::verify() {
  auto dy = cast<ShapedType>(getGrad().getType());
  if (dy.getRank() != 2)
    return emitOpError("grad must be 2-D [tokens, features], got ") << dy;
  return verifyChannelVector(*this, "dbias",
                             cast<ShapedType>(getDbias().getType()),
                             dy.getShape());
}

bool BiasGradOp::canFuseMaxima(AbsMaxOp maxima) {
  if (maxima.getInput() != getGrad() || maxima.getEpilogue())
    return false;
  ::coat::Scaling s = maxima.getScaling().getValue();
  Type elem = cast<ShapedType>(getGrad().getType()).getElementType();
  return s.kind == ::coat::ScalingKind::PerGroup &&
         ::coat::columnSumFusesMaxima(s.groupSize,
                                      elem.getIntOrFloatBitWidth() / 8);
}

//===----------------------------------------------------------------------===//
// CrossEntropyOp
//===----------------------------------------------------------------------===//

int64_t CrossEntropyOp::getVocab() {
  return cast<ShapedType>(getLogits().getType()).getDimSize(1);
}

LogicalResult CrossEntropyOp::verify() {
  auto logits = cast<RankedTensorType>(getLogits().getType());
  if (logits.getRank() != 2)
    return emitOpError("logits must be 2-D [tokens, vocab], got ") << logits;
  int64_t vocab = logits.getDimSize(1);
  if (ShapedType::isDynamic(vocab) || vocab < 1)
    return emitOpError("the vocabulary (logits' row length) must be static "
                       "and positive, got ")
           << logits;
  int64_t rows = logits.getDimSize(0);
  auto targets = cast<RankedTensorType>(getTargets().getType());
  if (targets.getRank() != 1 || !dimsCompatible(targets.getDimSize(0), rows))
    return emitOpError("targets must be 1-D with one class per row of the "
                       "logits, got ")
           << targets << " for " << logits;
  auto loss = cast<RankedTensorType>(getLoss().getType());
  if (loss.getRank() != 1 || !dimsCompatible(loss.getDimSize(0), rows))
    return emitOpError("loss must be 1-D with one value per row of the "
                       "logits, got ")
           << loss << " for " << logits;
  if (getDlogits().getType() != logits)
    return emitOpError("dlogits must have the type of the logits ")
           << logits << ", got " << getDlogits().getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Precision flow
//===----------------------------------------------------------------------===//

/// A forward flow op's unquantized result: a high-precision tensor of the
/// input shape, without a transposed copy.
static LogicalResult verifyUnquantizedResult(Operation *op, Value input,
                                             Value result, Value transposed) {
  auto in = cast<ShapedType>(input.getType()).getShape();
  auto out = cast<ShapedType>(result.getType()).getShape();
  if (!shapesCompatible(out, in))
    return op->emitOpError("result shape ")
           << shapeString(out) << " does not match the input shape "
           << shapeString(in);
  if (transposed)
    return op->emitOpError("an unquantized result has no transposed copy");
  return success();
}

/// Forward ops that emit a per-tensor FP8 tensor in the input format, plus an
/// optional transposed copy.
static LogicalResult verifyPerTensorForwardResult(Operation *op, Value input,
                                                  Value result,
                                                  Value transposed) {
  auto out = dyn_cast<QTensorType>(result.getType());
  if (!out)
    return verifyUnquantizedResult(op, input, result, transposed);
  // An unresolved input becomes E4M3, the format of forward activations.
  QTensorType in = resolvedType(input);
  if (failed(verifyPerTensorCopy(
          op, "result", out, cast<ShapedType>(input.getType()).getShape(),
          in ? in.getFormat() : ::coat::Fp8Format::E4M3,
          "the format of the input")))
    return failure();
  if (transposed &&
      failed(verifyTransposedCopy(op, "transposed result", out,
                                  cast<QTensorType>(transposed.getType()))))
    return failure();
  return success();
}

LogicalResult SiluOp::verify() {
  if (!isa<QTensorType>(getResult().getType())) {
    if (failed(verifyGroupedActivation(*this, "input", resolvedType(getInput()))))
      return failure();
    return verifyUnquantizedResult(*this, getInput(), getResult(), Value());
  }
  auto result = cast<QTensorType>(getResult().getType());
  if (!resolvedType(getInput())) {
    // The result fixes the 1xG E4M3 type the input will resolve to.
    if (failed(verifyGroupedActivation(*this, "result", result)))
      return failure();
    if (!shapesCompatible(result.getShape(),
                          getInput().getType().getShape()))
      return emitOpError("result shape ")
             << shapeString(result.getShape())
             << " does not match the input shape "
             << shapeString(getInput().getType().getShape());
    return success();
  }
  if (failed(verifyGroupedActivation(*this, "input", resolvedType(getInput()))))
    return failure();
  if (getResult().getType() != getInput().getType())
    return emitOpError("result must have the input type ")
           << getInput().getType() << ", got " << getResult().getType();
  return success();
}

LogicalResult SiluGradOp::verify() {
  ShapedType x = getInput().getType();
  if (failed(verifyGroupedActivation(*this, "input", resolvedType(getInput()))))
    return failure();
  return verifyGradOutputs(*this, "dx", x.getShape(), getGrad(), getDx(),
                           getDxQ(), getDxQt());
}

/// GELU's forms, as torch names them (`approximate`).
static LogicalResult verifyGeluApproximation(Operation *op,
                                             StringRef approximate) {
  if (approximate != "none" && approximate != "tanh")
    return op->emitOpError("approximate must be \"none\" (exact erf) or "
                           "\"tanh\", got \"")
           << approximate << "\"";
  return success();
}

LogicalResult GeluOp::verify() {
  if (failed(verifyGeluApproximation(*this, getApproximate())))
    return failure();
  if (failed(verifyGroupedActivation(*this, "input", resolvedType(getInput()))))
    return failure();
  return verifyPerTensorForwardResult(*this, getInput(), getResult(),
                                      getResultT());
}

LogicalResult GeluGradOp::verify() {
  if (failed(verifyGeluApproximation(*this, getApproximate())))
    return failure();
  ShapedType x = getInput().getType();
  if (failed(verifyGroupedActivation(*this, "input", resolvedType(getInput()))))
    return failure();
  return verifyGradOutputs(*this, "dx", x.getShape(), getGrad(), getDx(),
                           getDxQ(), getDxQt());
}

static LogicalResult verifySwigluInputs(Operation *op, Value lhs, Value rhs) {
  ShapedType a = cast<ShapedType>(lhs.getType());
  ShapedType b = cast<ShapedType>(rhs.getType());
  if (failed(verifyGroupedActivation(op, "lhs", resolvedType(lhs))) ||
      failed(verifyGroupedActivation(op, "rhs", resolvedType(rhs))))
    return failure();
  if (!shapesCompatible(a.getShape(), b.getShape()))
    return op->emitOpError("operand shapes differ: ")
           << shapeString(a.getShape()) << " vs " << shapeString(b.getShape());
  return success();
}

LogicalResult SwigluMulOp::verify() {
  if (failed(verifySwigluInputs(*this, getLhs(), getRhs())))
    return failure();
  return verifyPerTensorForwardResult(*this, getRhs(), getResult(),
                                      getResultT());
}

LogicalResult SwigluMulGradOp::verify() {
  ShapedType a = getLhs().getType();
  if (failed(verifySwigluInputs(*this, getLhs(), getRhs())))
    return failure();
  if (getDlhs().getType() != getGrad().getType())
    return emitOpError("dlhs must have the gradient's type ")
           << getGrad().getType() << ", got " << getDlhs().getType();
  return verifyGradOutputs(*this, "drhs", a.getShape(), getGrad(), getDrhs(),
                           getDrhsQ(), getDrhsQt());
}

/// Both inputs and the high-precision sum share one type.
static LogicalResult verifySumOperands(Operation *op, Value a, Value b,
                                       Value sum) {
  if (a.getType() != b.getType())
    return op->emitOpError("operand types differ: ")
           << a.getType() << " vs " << b.getType();
  if (sum.getType() != a.getType())
    return op->emitOpError("sum must have the operand type ")
           << a.getType() << ", got " << sum.getType();
  return success();
}

LogicalResult ResidualAddOp::verify() {
  if (failed(verifySumOperands(*this, getResidual(), getBranch(), getSum())))
    return failure();
  if (!getSumQ())
    return success();
  auto q = cast<QTensorType>(getSumQ().getType());
  auto shape = cast<ShapedType>(getSum().getType()).getShape();
  if (!shapesCompatible(q.getShape(), shape))
    return emitOpError("quantized sum shape ")
           << shapeString(q.getShape()) << " does not match "
           << shapeString(shape);
  return verifyGroupedActivation(*this, "quantized sum", q);
}

LogicalResult ResidualAddGradOp::verify() {
  if (failed(verifySumOperands(*this, getLhs(), getRhs(), getSum())))
    return failure();
  if (!getSumQ())
    return success();
  return verifyPerTensorCopy(*this, "quantized sum",
                             cast<QTensorType>(getSumQ().getType()),
                             cast<ShapedType>(getSum().getType()).getShape(),
                             ::coat::Fp8Format::E5M2,
                             "backward gradient copies are E5M2");
}

//===----------------------------------------------------------------------===//
// RopeOp, RopeGradOp
//===----------------------------------------------------------------------===//

/// d: the row length of the tables (static in a verified op).
static int64_t ropeHeadDim(Value cos) {
  return cast<ShapedType>(cos.getType()).getShape().back();
}

/// The rules of coat.rope and coat.rope_grad: a [T, N] input of heads of d
/// columns, [T, d] tables of one type with d static and even, the first
/// `rotatedHeads` heads inside the row, the result of the input's type.
static LogicalResult verifyRope(Operation *op, Value input, Value cos,
                                Value sin, int64_t rotatedHeads,
                                Value result) {
  auto x = cast<ShapedType>(input.getType());
  auto c = cast<ShapedType>(cos.getType());
  if (x.getRank() != 2)
    return op->emitOpError("input must be a [tokens, columns] matrix, got rank ")
           << x.getRank();
  if (c.getRank() != 2)
    return op->emitOpError("tables must be [tokens, head_dim] matrices, got "
                           "rank ")
           << c.getRank();
  if (sin.getType() != cos.getType())
    return op->emitOpError("cos and sin must have one type: ")
           << cos.getType() << " vs " << sin.getType();
  if (result.getType() != input.getType())
    return op->emitOpError("result must have the input type ")
           << input.getType() << ", got " << result.getType();
  int64_t d = c.getShape()[1];
  if (ShapedType::isDynamic(d))
    return op->emitOpError("the tables' row length (head_dim) must be static");
  if (d <= 0 || d % 2 != 0)
    return op->emitOpError("head_dim (the tables' row length) must be positive "
                           "and even: a head rotates its two halves, got ")
           << d;
  int64_t n = x.getShape()[1];
  if (ShapedType::isDynamic(n))
    return op->emitOpError("the input's row length must be static");
  if (n % d != 0)
    return op->emitOpError("input rows of ")
           << n << " columns are not whole heads of head_dim " << d;
  if (rotatedHeads <= 0 || rotatedHeads > n / d)
    return op->emitOpError("rotated_heads must be in [1, ")
           << n / d << "] (the input's heads of " << d << " columns), got "
           << rotatedHeads;
  if (!dimsCompatible(x.getShape()[0], c.getShape()[0]))
    return op->emitOpError("tables have ")
           << c.getShape()[0] << " rows, the input " << x.getShape()[0]
           << ": one table row per token";
  return success();
}

int64_t RopeOp::getHeadDim() { return ropeHeadDim(getCos()); }

LinearOp RopeOp::getFusedProducer() {
  return getEpilogue() ? getInput().getDefiningOp<LinearOp>() : LinearOp();
}

LogicalResult RopeOp::verify() {
  if (failed(verifyRope(*this, getInput(), getCos(), getSin(),
                        static_cast<int64_t>(getRotatedHeads()), getResult())))
    return failure();
  if (!getEpilogue())
    return success();
  // The GEMM's kernel writes the rotated values instead of its own.
  auto linear = getInput().getDefiningOp<LinearOp>();
  if (!linear || !getInput().hasOneUse() ||
      !isa<RankedTensorType>(linear.getResult().getType()))
    return emitOpError("epilogue: the input must be the bf16/f32 result of a "
                       "coat.linear that nothing else reads");
  return success();
}

int64_t RopeGradOp::getHeadDim() { return ropeHeadDim(getCos()); }

LogicalResult RopeGradOp::verify() {
  return verifyRope(*this, getGrad(), getCos(), getSin(),
                    static_cast<int64_t>(getRotatedHeads()), getDx());
}

LogicalResult RMSNormOp::verify() {
  ShapedType x = getInput().getType();
  if (failed(verifyGroupedActivation(*this, "input", resolvedType(getInput()))) ||
      failed(verifyEps(*this, getEps())) ||
      failed(verifyChannelVector(*this, "weight", getWeight().getType(),
                                 x.getShape())) ||
      failed(verifyRowStat(*this, "rstd", getRstd().getType(), x.getShape())))
    return failure();
  return verifyPerTensorForwardResult(*this, getInput(), getResult(),
                                      getResultT());
}

LogicalResult RMSNormGradOp::verify() {
  ShapedType x = getInput().getType();
  if (failed(verifyGroupedActivation(*this, "input", resolvedType(getInput()))) ||
      failed(verifyChannelVector(*this, "weight", getWeight().getType(),
                                 x.getShape())) ||
      failed(verifyRowStat(*this, "rstd", getRstd().getType(), x.getShape())) ||
      failed(verifyGradOutputs(*this, "dx", x.getShape(), getGrad(), getDx(),
                               Value(), Value())))
    return failure();
  if (getDweight().getType() != getWeight().getType())
    return emitOpError("dweight must have the weight's type ")
           << getWeight().getType() << ", got " << getDweight().getType();
  return success();
}

LogicalResult LayerNormOp::verify() {
  ShapedType x = getInput().getType();
  if (failed(verifyGroupedActivation(*this, "input", resolvedType(getInput()))) ||
      failed(verifyEps(*this, getEps())))
    return failure();
  if (getBias() && !getWeight())
    return emitOpError("a bias needs a weight (affine LayerNorm)");
  if (getWeight() &&
      failed(verifyChannelVector(*this, "weight", getWeight().getType(),
                                 x.getShape())))
    return failure();
  if (getBias() && failed(verifyChannelVector(*this, "bias",
                                              getBias().getType(),
                                              x.getShape())))
    return failure();
  if (failed(verifyRowStat(*this, "mean", getMean().getType(), x.getShape())) ||
      failed(verifyRowStat(*this, "rstd", getRstd().getType(), x.getShape())))
    return failure();
  return verifyPerTensorForwardResult(*this, getInput(), getResult(),
                                      getResultT());
}

LogicalResult LayerNormGradOp::verify() {
  ShapedType x = getInput().getType();
  if (failed(verifyGroupedActivation(*this, "input", resolvedType(getInput()))) ||
      failed(verifyRowStat(*this, "mean", getMean().getType(), x.getShape())) ||
      failed(verifyRowStat(*this, "rstd", getRstd().getType(), x.getShape())) ||
      failed(verifyGradOutputs(*this, "dx", x.getShape(), getGrad(), getDx(),
                               Value(), Value())))
    return failure();
  if (Value w = getWeight()) {
    if (failed(verifyChannelVector(*this, "weight",
                                   cast<ShapedType>(w.getType()),
                                   x.getShape())))
      return failure();
    if (!getDweight())
      return emitOpError("an affine LayerNorm backward must return dweight");
    if (getDweight().getType() != w.getType())
      return emitOpError("dweight must have the weight's type ")
             << w.getType() << ", got " << getDweight().getType();
    if (getDbias() && getDbias().getType() != w.getType())
      return emitOpError("dbias must have the weight's type ")
             << w.getType() << ", got " << getDbias().getType();
  } else if (getDweight() || getDbias()) {
    return emitOpError("dweight and dbias need a weight operand");
  }
  return success();
}

#define GET_OP_CLASSES
#include "coat/Dialect/CoatOps.cpp.inc"
