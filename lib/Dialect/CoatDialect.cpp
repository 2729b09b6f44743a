//===- CoatDialect.cpp - coat dialect, attributes and types ---------------===//

#include "coat/Dialect/CoatDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::coat;

#include "coat/Dialect/CoatDialect.cpp.inc"
#include "coat/Dialect/CoatEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "coat/Dialect/CoatAttrs.cpp.inc"
#define GET_TYPEDEF_CLASSES
#include "coat/Dialect/CoatTypes.cpp.inc"

void CoatDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "coat/Dialect/CoatAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "coat/Dialect/CoatTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "coat/Dialect/CoatOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

std::optional<::coat::Fp8Format> mlir::coat::getFp8Format(Type t) {
  if (isa<Float8E4M3FNType>(t))
    return ::coat::Fp8Format::E4M3;
  if (isa<Float8E5M2Type>(t))
    return ::coat::Fp8Format::E5M2;
  return std::nullopt;
}

FloatType mlir::coat::getFp8Type(MLIRContext *ctx, ::coat::Fp8Format f) {
  if (f == ::coat::Fp8Format::E4M3)
    return Float8E4M3FNType::get(ctx);
  return Float8E5M2Type::get(ctx);
}

std::vector<int64_t> mlir::coat::toLayoutShape(ArrayRef<int64_t> shape) {
  static_assert(::coat::kDynamicExtent == ShapedType::kDynamic,
                "layout and MLIR must agree on the dynamic marker");
  return std::vector<int64_t>(shape.begin(), shape.end());
}

std::optional<int64_t>
mlir::coat::storageBytes(Type type, std::optional<int64_t> dynamicExtent) {
  auto shaped = dyn_cast<ShapedType>(type);
  if (!shaped || !shaped.hasRank() ||
      (!shaped.hasStaticShape() && !dynamicExtent))
    return std::nullopt;
  SmallVector<int64_t> shape(shaped.getShape());
  for (int64_t &d : shape)
    if (ShapedType::isDynamic(d))
      d = *dynamicExtent;
  int64_t elements = ShapedType::getNumElements(shape);
  if (auto q = dyn_cast<QTensorType>(type)) {
    int64_t scales =
        ::coat::numScales(toLayoutShape(shape), q.getScalingValue());
    int64_t perScale = q.getScaleType().getIntOrFloatBitWidth() / 8;
    if (q.getExpanded())
      perScale += 8; // k and c, f32 each
    return elements + scales * perScale;
  }
  return elements * (shaped.getElementTypeBitWidth() / 8);
}

std::optional<std::string>
mlir::coat::verifyLayoutLimits(ArrayRef<int64_t> shape,
                               const ::coat::Scaling &s) {
  constexpr int64_t kMaxElements = int64_t(1) << 48;
  constexpr int64_t kMaxGroup = int64_t(1) << 32;
  if (s.groupSize > kMaxGroup || s.blockRows > kMaxGroup ||
      s.blockCols > kMaxGroup)
    return std::string("group and block sizes must be at most 2^32");
  int64_t n = 1;
  for (int64_t d : shape) {
    if (ShapedType::isDynamic(d) || d <= 0)
      continue;
    if (d > kMaxElements || n > kMaxElements / d)
      return std::string("a quantized tensor has at most 2^48 elements");
    n *= d;
  }
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Program attributes
//===----------------------------------------------------------------------===//
//
// Which result is the gradient of which argument is a fact of the whole
// signature (at most one gradient per argument, one for every trained
// weight). The function interface calls these hooks for each argument and
// result attribute with the function at hand, so every rule is checked
// wherever a function is verified, and its error names the attribute that
// is wrong. Checks in the passes that read programs would let a wrong
// pairing through every pipeline that does not run them.

namespace {

/// The argument and result attributes of a function. The interface checks
/// that each array holds one dictionary per value only as it goes, after
/// the hooks for earlier values ran, so out-of-range and non-dictionary
/// entries read as no attributes here.
struct Signature {
  FunctionOpInterface fn;

  DictionaryAttr attrsOf(bool argument, unsigned i) {
    ArrayAttr all = argument ? fn.getAllArgAttrs() : fn.getAllResultAttrs();
    return all && i < all.size() ? dyn_cast<DictionaryAttr>(all[i])
                                 : DictionaryAttr();
  }
  bool has(bool argument, unsigned i, StringRef name) {
    DictionaryAttr attrs = attrsOf(argument, i);
    return attrs && attrs.get(name);
  }
  /// The index named by `coat.grad_of` on an argument or result, if any.
  std::optional<int64_t> gradOf(bool argument, unsigned i) {
    DictionaryAttr attrs = attrsOf(argument, i);
    if (auto g = attrs ? attrs.getAs<IntegerAttr>(kGradOfAttr) : nullptr)
      return g.getInt();
    return std::nullopt;
  }
  unsigned count(bool argument) {
    return argument ? fn.getNumArguments() : fn.getNumResults();
  }
  Type typeOf(bool argument, unsigned i) {
    return argument ? fn.getArgumentTypes()[i] : fn.getResultTypes()[i];
  }
  /// The first result that is the gradient of argument `arg`.
  std::optional<unsigned> gradientResult(unsigned arg) {
    for (unsigned r = 0, e = fn.getNumResults(); r < e; ++r)
      if (gradOf(/*argument=*/false, r) == int64_t(arg))
        return r;
    return std::nullopt;
  }
  /// Whether the function holds a backward: an incoming gradient.
  bool hasBackward() {
    return llvm::any_of(llvm::seq(fn.getNumArguments()), [&](unsigned i) {
      return has(/*argument=*/true, i, kGradientAttr);
    });
  }
};

/// Whether `a` and `b` have one shape: a gradient's element type differs
/// from its value's (bf16 for an FP8 `!coat.qtensor`), its shape does not.
bool sameShape(Type a, Type b) {
  auto sa = dyn_cast<ShapedType>(a), sb = dyn_cast<ShapedType>(b);
  if (!sa || !sb || !sa.hasRank() || !sb.hasRank())
    return a == b;
  return sa.getShape() == sb.getShape();
}

/// Checks `coat.grad_of` on argument or result `index`: it names a result
/// or argument in range that is not a gradient itself, of the same shape,
/// and that no earlier argument or result names.
LogicalResult verifyGradOf(Signature sig, Attribute value, bool onArgument,
                           unsigned index) {
  Operation *op = sig.fn;
  auto g = dyn_cast<IntegerAttr>(value);
  if (!g)
    return op->emitError() << "'" << kGradOfAttr
                           << "' must be an integer attribute";
  StringRef self = onArgument ? "argument" : "result";
  StringRef other = onArgument ? "result" : "argument";
  auto emit = [&]() {
    return op->emitError() << "'" << kGradOfAttr << "' of " << self << " "
                           << index << " ";
  };
  if (onArgument && !sig.has(/*argument=*/true, index, kGradientAttr))
    return emit() << "needs '" << kGradientAttr
                  << "': an argument can only be the incoming gradient of a "
                     "result";
  int64_t named = g.getInt();
  unsigned count = sig.count(!onArgument);
  if (named < 0 || named >= int64_t(count))
    return emit() << "names " << other << " " << named << ", but the function "
                  << "has " << count << " " << other << (count == 1 ? "" : "s");
  auto target = unsigned(named);
  // A gradient result names a forward input, an incoming gradient a forward
  // output.
  if (onArgument ? sig.gradOf(/*argument=*/false, target).has_value()
                 : sig.has(/*argument=*/true, target, kGradientAttr))
    return emit() << "names " << other << " " << target
                  << ", which is a gradient itself";
  Type selfType = sig.typeOf(onArgument, index);
  Type otherType = sig.typeOf(!onArgument, target);
  if (!sameShape(selfType, otherType))
    return emit() << "names " << other << " " << target << " of type "
                  << otherType << ", whose shape differs from the gradient's "
                  << selfType;
  for (unsigned i = 0; i < index; ++i)
    if (sig.gradOf(onArgument, i) == named)
      return emit() << "names " << other << " " << target << ", as " << self
                    << " " << i << " does: " << other
                    << "s have at most one gradient";
  return success();
}

/// Checks `coat.recompute` (a forward tensor result the caller may drop
/// and ask for again) and `coat.recompute_of` (the copy of such a result)
/// on result `index`.
LogicalResult verifyRecompute(Operation *op, unsigned index,
                              NamedAttribute attr) {
  StringRef name = attr.getName().strref();
  auto fn = dyn_cast<FunctionOpInterface>(op);
  if (!fn)
    return op->emitError() << "'" << name
                           << "' is an attribute of function results";
  Signature sig{fn};
  auto emit = [&]() {
    return op->emitError() << "'" << name << "' result " << index << " ";
  };
  if (sig.gradOf(/*argument=*/false, index))
    return emit() << "is a gradient ('" << kGradOfAttr
                  << "'): only forward outputs are recomputed";
  Type type = sig.typeOf(/*argument=*/false, index);
  if (name == kRecomputeAttr) {
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitError() << "'" << name << "' must be a unit attribute";
    if (!isa<RankedTensorType>(type))
      return emit() << "must be a ranked tensor the caller holds, got "
                    << type;
    if (sig.has(/*argument=*/false, index, kRecomputeOfAttr))
      return emit() << "is itself a recomputed copy ('" << kRecomputeOfAttr
                    << "')";
    return success();
  }
  auto of = dyn_cast<IntegerAttr>(attr.getValue());
  if (!of)
    return op->emitError() << "'" << name << "' must be an integer attribute";
  int64_t named = of.getInt();
  unsigned count = sig.count(/*argument=*/false);
  if (named < 0 || named >= int64_t(count) || named == int64_t(index))
    return emit() << "names result " << named << ", which is not another "
                  << "of the function's " << count << " results";
  auto target = unsigned(named);
  if (!sig.has(/*argument=*/false, target, kRecomputeAttr))
    return emit() << "names result " << target << ", which is not marked '"
                  << kRecomputeAttr << "'";
  if (sig.typeOf(/*argument=*/false, target) != type)
    return emit() << "has type " << type << ", result " << target
                  << " has type " << sig.typeOf(/*argument=*/false, target);
  for (unsigned i = 0; i < index; ++i) {
    DictionaryAttr attrs = sig.attrsOf(/*argument=*/false, i);
    auto other = attrs ? attrs.getAs<IntegerAttr>(kRecomputeOfAttr) : nullptr;
    if (other && other.getInt() == named)
      return emit() << "names result " << target << ", as result " << i
                    << " does: a result has at most one recomputed copy";
  }
  return success();
}

} // namespace

LogicalResult CoatDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  StringRef name = attr.getName().strref();
  if (name != kKeepGemmOperandsAttr)
    return success();
  auto fn = dyn_cast<FunctionOpInterface>(op);
  if (!fn)
    return op->emitError() << "'" << name
                           << "' is an attribute of program functions, not of '"
                           << op->getName() << "'";
  if (!isa<BoolAttr>(attr.getValue()))
    return op->emitError() << "'" << name
                           << "' must be a boolean attribute (true or false), "
                           << "got " << attr.getValue();
  // Only a backward reads forward values: elsewhere the choice is void,
  // likely set on the wrong function.
  if (!Signature{fn}.hasBackward())
    return op->emitError() << "'" << name << "' on a function without a "
                           << "backward (no '" << kGradientAttr
                           << "' argument): it keeps nothing";
  return success();
}

LogicalResult CoatDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                    unsigned argIndex,
                                                    NamedAttribute attr) {
  StringRef name = attr.getName().strref();
  if (name == kFiniteFlagAttr || name == kRecomputeOfAttr ||
      (name == kRecomputeAttr && isa<FunctionOpInterface>(op)))
    return op->emitError() << "'" << name
                           << "' is an attribute of function results";
  if (name != kWeightAttr && name != kFrozenAttr && name != kGradientAttr &&
      name != kGradOfAttr && name != kWritableAttr && name != kKeptByCallerAttr)
    return success();
  auto fn = dyn_cast<FunctionOpInterface>(op);
  if (!fn)
    return op->emitError() << "'" << name
                           << "' is an attribute of function arguments";
  Signature sig{fn};
  if (name == kGradOfAttr)
    return verifyGradOf(sig, attr.getValue(), /*onArgument=*/true, argIndex);
  if (!isa<UnitAttr>(attr.getValue()))
    return op->emitError() << "'" << name << "' must be a unit attribute";

  if (name == kWritableAttr) {
    // Weights and incoming gradients belong to the caller, which reads them
    // again (the optimizer, autograd).
    if (sig.has(/*argument=*/true, argIndex, kWeightAttr) ||
        sig.has(/*argument=*/true, argIndex, kGradientAttr))
      return op->emitError()
             << "argument " << argIndex << " is '" << kWritableAttr
             << "', but a weight or incoming gradient is the caller's to keep";
    if (!isa<RankedTensorType>(sig.typeOf(/*argument=*/true, argIndex)))
      return op->emitError() << "'" << kWritableAttr << "' argument "
                             << argIndex << " must be a ranked tensor";
    // One reader, which may then write its result where it reads.
    Region &body = fn.getFunctionBody();
    if (!body.empty() && argIndex < body.getNumArguments() &&
        !body.getArgument(argIndex).hasOneUse())
      return op->emitError()
             << "'" << kWritableAttr << "' argument " << argIndex
             << " must have exactly one use, the op that may overwrite it";
    return success();
  }

  if (name == kKeptByCallerAttr) {
    // Weights are there in the backward anyway; incoming gradients are the
    // backward's own.
    if (sig.has(/*argument=*/true, argIndex, kWeightAttr) ||
        sig.has(/*argument=*/true, argIndex, kGradientAttr))
      return op->emitError()
             << "argument " << argIndex << " is '" << kKeptByCallerAttr
             << "', which marks an activation, not a weight or an incoming "
                "gradient";
    if (!isa<RankedTensorType>(sig.typeOf(/*argument=*/true, argIndex)))
      return op->emitError() << "'" << kKeptByCallerAttr << "' argument "
                             << argIndex << " must be a ranked tensor";
    return success();
  }

  if (name == kWeightAttr) {
    if (sig.has(/*argument=*/true, argIndex, kGradientAttr))
      return op->emitError()
             << "argument " << argIndex << " is both a weight ('" << kWeightAttr
             << "') and an incoming gradient ('" << kGradientAttr << "')";
    // A forward alone has no gradients to give.
    if (sig.hasBackward() &&
        !sig.has(/*argument=*/true, argIndex, kFrozenAttr) &&
        !sig.gradientResult(argIndex))
      return op->emitError()
             << "weight argument " << argIndex << " has no gradient result ('"
             << kGradOfAttr << " = " << argIndex << "'); mark it '"
             << kFrozenAttr << "' if it is not trained";
  } else if (name == kFrozenAttr) {
    if (!sig.has(/*argument=*/true, argIndex, kWeightAttr))
      return op->emitError()
             << "'" << kFrozenAttr << "' on argument " << argIndex
             << ", which is not a weight ('" << kWeightAttr << "')";
    if (std::optional<unsigned> r = sig.gradientResult(argIndex))
      return op->emitError()
             << "frozen weight argument " << argIndex << " has a gradient: "
             << "result " << *r << " ('" << kGradOfAttr << " = " << argIndex
             << "')";
  }
  return success();
}

LogicalResult CoatDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                       unsigned resultIndex,
                                                       NamedAttribute attr) {
  StringRef name = attr.getName().strref();
  if (name == kWeightAttr || name == kFrozenAttr || name == kGradientAttr ||
      name == kWritableAttr || name == kKeptByCallerAttr)
    return op->emitError() << "'" << name
                           << "' is an attribute of function arguments, "
                              "not results";
  if (name == kFiniteFlagAttr) {
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitError() << "'" << name << "' must be a unit attribute";
    auto fn = dyn_cast<FunctionOpInterface>(op);
    if (!fn)
      return op->emitError() << "'" << name
                             << "' is an attribute of function results";
    auto t = dyn_cast<RankedTensorType>(fn.getResultTypes()[resultIndex]);
    if (!t || !(t.getElementType().isF32() || t.getElementType().isBF16() ||
                t.getElementType().isF16()))
      return op->emitError() << "'" << name << "' result " << resultIndex
                             << " must be an f32, bf16 or f16 tensor, got "
                             << fn.getResultTypes()[resultIndex];
    return success();
  }
  if (name == kRecomputeAttr || name == kRecomputeOfAttr)
    return verifyRecompute(op, resultIndex, attr);
  if (name != kGradOfAttr)
    return success();
  auto fn = dyn_cast<FunctionOpInterface>(op);
  if (!fn)
    return op->emitError() << "'" << name
                           << "' is an attribute of function results";
  return verifyGradOf(Signature{fn}, attr.getValue(), /*onArgument=*/false,
                      resultIndex);
}

//===----------------------------------------------------------------------===//
// ScalingAttr
//===----------------------------------------------------------------------===//

FailureOr<::coat::Scaling> ScalingAttr::parseBody(AsmParser &parser) {
  StringRef kw;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseKeyword(&kw))
    return failure();
  ::coat::Scaling s;
  if (kw == "per_tensor")
    return s;
  if (kw == "per_group" || kw == "flat_group") {
    s.kind = kw == "per_group" ? ::coat::ScalingKind::PerGroup
                               : ::coat::ScalingKind::FlatGroup;
    if (parser.parseLess() || parser.parseInteger(s.groupSize) ||
        parser.parseGreater())
      return failure();
    return s;
  }
  if (kw == "per_block") {
    s.kind = ::coat::ScalingKind::PerBlock;
    SmallVector<int64_t, 2> dims;
    if (parser.parseLess() ||
        parser.parseDimensionList(dims, /*allowDynamic=*/false,
                                  /*withTrailingX=*/false) ||
        parser.parseGreater())
      return failure();
    if (dims.size() != 2)
      return parser.emitError(loc, "per_block expects RxC, got ")
             << dims.size() << " extents";
    s.blockRows = dims[0];
    s.blockCols = dims[1];
    return s;
  }
  return parser.emitError(loc, "expected per_tensor, per_group<G>, "
                               "flat_group<G> or per_block<RxC>, got '")
         << kw << "'";
}

void ScalingAttr::printBody(AsmPrinter &printer, const ::coat::Scaling &s) {
  printer << ::coat::toString(s);
}

Attribute ScalingAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess())
    return {};
  FailureOr<::coat::Scaling> s = parseBody(parser);
  if (failed(s) || parser.parseGreater())
    return {};
  return parser.getChecked<ScalingAttr>(loc, parser.getContext(), *s);
}

void ScalingAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printBody(printer, getValue());
  printer << ">";
}

LogicalResult ScalingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                  ::coat::Scaling value) {
  if (auto err = ::coat::verifyScaling(value))
    return emitError() << *err;
  if (auto err = verifyLayoutLimits({}, value))
    return emitError() << *err;
  return success();
}

//===----------------------------------------------------------------------===//
// QTensorType
//===----------------------------------------------------------------------===//

QTensorType QTensorType::get(ArrayRef<int64_t> shape, FloatType elementType,
                             ScalingAttr scaling, FloatType scaleType,
                             bool expanded) {
  if (!scaleType)
    scaleType = Float32Type::get(elementType.getContext());
  return Base::get(elementType.getContext(), shape, elementType, scaling,
                   scaleType, expanded);
}

LogicalResult QTensorType::verify(function_ref<InFlightDiagnostic()> emitError,
                                  ArrayRef<int64_t> shape, FloatType elementType,
                                  ScalingAttr scaling, FloatType scaleType,
                                  bool expanded) {
  if (!getFp8Format(elementType))
    return emitError() << "element type must be f8E4M3FN or f8E5M2, got "
                       << elementType;
  if (!scaling)
    return emitError() << "missing scaling granularity";
  if (!isa<Float32Type, BFloat16Type>(scaleType))
    return emitError() << "scale type must be f32 or bf16, got " << scaleType;
  if (auto err = ::coat::verifyScalingForShape(toLayoutShape(shape),
                                               scaling.getValue()))
    return emitError() << *err;
  if (auto err = verifyLayoutLimits(shape, scaling.getValue()))
    return emitError() << *err;
  if (expanded && !scaling.isGrouped())
    return emitError() << "range expansion needs a grouped scaling "
                          "(per_group or flat_group), got "
                       << ::coat::toString(scaling.getValue());
  if (expanded && !isa<Float32Type>(scaleType))
    return emitError() << "an expanded tensor needs f32 scales";
  return success();
}

Type QTensorType::parse(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  SmallVector<int64_t> shape;
  Type elementType;
  if (parser.parseLess() ||
      parser.parseDimensionList(shape, /*allowDynamic=*/true,
                                /*withTrailingX=*/true) ||
      parser.parseType(elementType) || parser.parseComma())
    return {};
  auto floatType = dyn_cast<FloatType>(elementType);
  if (!floatType) {
    parser.emitError(loc, "element type must be f8E4M3FN or f8E5M2, got ")
        << elementType;
    return {};
  }
  FailureOr<::coat::Scaling> scaling = ScalingAttr::parseBody(parser);
  if (failed(scaling))
    return {};
  FloatType scaleType = Float32Type::get(parser.getContext());
  bool expanded = false, scaleSeen = false;
  while (succeeded(parser.parseOptionalComma())) {
    SMLoc kwLoc = parser.getCurrentLocation();
    StringRef kw;
    if (parser.parseKeyword(&kw))
      return {};
    if (kw == "per_tensor" || kw == "per_group" || kw == "flat_group" ||
        kw == "per_block") {
      parser.emitError(kwLoc, "duplicate scaling '")
          << kw << "': a !coat.qtensor has one scaling granularity, given "
                   "right after the element type";
      return {};
    }
    if ((kw == "expand" && expanded) || (kw == "scale" && scaleSeen)) {
      parser.emitError(kwLoc, "duplicate '")
          << kw << "' option in !coat.qtensor";
      return {};
    }
    if (kw == "expand") {
      expanded = true;
    } else if (kw == "scale") {
      scaleSeen = true;
      Type t;
      if (parser.parseEqual() || parser.parseType(t))
        return {};
      scaleType = dyn_cast<FloatType>(t);
      if (!scaleType) {
        parser.emitError(kwLoc, "scale type must be f32 or bf16, got ") << t;
        return {};
      }
    } else {
      parser.emitError(kwLoc, "expected 'scale = T' or 'expand', got '")
          << kw << "'";
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  auto scalingAttr = ScalingAttr::getChecked(
      [&] { return parser.emitError(loc); }, parser.getContext(), *scaling);
  if (!scalingAttr)
    return {};
  return parser.getChecked<QTensorType>(loc, parser.getContext(), shape,
                                        floatType, scalingAttr, scaleType,
                                        expanded);
}

void QTensorType::print(AsmPrinter &printer) const {
  printer << "<";
  // A rank-0 tensor has no dimension list and no trailing 'x'.
  if (!getShape().empty()) {
    printer.printDimensionList(getShape());
    printer << "x";
  }
  printer << getElementType() << ", ";
  ScalingAttr::printBody(printer, getScalingValue());
  if (!isa<Float32Type>(getScaleType()))
    printer << ", scale = " << getScaleType();
  if (getExpanded())
    printer << ", expand";
  printer << ">";
}

::coat::Fp8Format QTensorType::getFormat() const {
  return *getFp8Format(getElementType());
}

RankedTensorType QTensorType::getDataType() const {
  return RankedTensorType::get(getShape(), getElementType());
}

RankedTensorType QTensorType::getScaleTensorType() const {
  return RankedTensorType::get(
      ::coat::scaleShape(toLayoutShape(getShape()), getScalingValue()),
      getScaleType());
}

RankedTensorType QTensorType::getExpansionTensorType() const {
  return RankedTensorType::get(
      ::coat::scaleShape(toLayoutShape(getShape()), getScalingValue()),
      Float32Type::get(getContext()));
}

QTensorType QTensorType::cloneWithShape(ArrayRef<int64_t> shape) const {
  return QTensorType::get(shape, getElementType(), getScaling(), getScaleType(),
                          getExpanded());
}

ShapedType QTensorType::cloneWith(std::optional<ArrayRef<int64_t>> shape,
                                  Type elementType) const {
  // Only an FP8 element type keeps the result a valid qtensor.
  auto fp8 = getFp8Format(elementType) ? cast<FloatType>(elementType)
                                       : getElementType();
  return QTensorType::get(shape ? *shape : getShape(), fp8, getScaling(),
                          getScaleType(), getExpanded());
}

bool QTensorType::hasRank() const { return true; }

//===----------------------------------------------------------------------===//
// UnresolvedType
//===----------------------------------------------------------------------===//

LogicalResult
UnresolvedType::verify(function_ref<InFlightDiagnostic()> emitError,
                       ArrayRef<int64_t> shape, Type elementType) {
  if (!isa<Float32Type, BFloat16Type, Float16Type>(elementType))
    return emitError() << "element type must be f32, bf16 or f16 (the "
                          "high-precision source), got "
                       << elementType;
  for (int64_t d : shape)
    if (!ShapedType::isDynamic(d) && d < 0)
      return emitError() << "extents must be non-negative";
  return success();
}

Type UnresolvedType::parse(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  SmallVector<int64_t> shape;
  Type elementType;
  if (parser.parseLess() ||
      parser.parseDimensionList(shape, /*allowDynamic=*/true,
                                /*withTrailingX=*/true) ||
      parser.parseType(elementType) || parser.parseGreater())
    return {};
  return parser.getChecked<UnresolvedType>(loc, parser.getContext(), shape,
                                           elementType);
}

void UnresolvedType::print(AsmPrinter &printer) const {
  printer << "<";
  if (!getShape().empty()) {
    printer.printDimensionList(getShape());
    printer << "x";
  }
  printer << getElementType() << ">";
}

ShapedType UnresolvedType::cloneWith(std::optional<ArrayRef<int64_t>> shape,
                                     Type elementType) const {
  return UnresolvedType::get(getContext(), shape ? *shape : getShape(),
                             elementType ? elementType : getElementType());
}

bool UnresolvedType::hasRank() const { return true; }
