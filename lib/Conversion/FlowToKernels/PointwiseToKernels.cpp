//===- PointwiseToKernels.cpp - pointwise flow ops to GPU/CPU kernels -----===//
//
// One parameterized lowering for COAT's pointwise non-linear operators
// (COAT.md §3.4). An op contributes only its f32 element math and the roles
// of its operands and results; reading 1xG / per-tensor FP8 and
// high-precision operands, writing high-precision and 1xG FP8 results, and
// the epilogue maxima of group scaling are shared by all of them. Groups are
// the flat groups of GroupLane (GroupKernel.h): G consecutive elements of the
// row-major tensor, which are its per_group<G> groups because G divides cols.
//
//===----------------------------------------------------------------------===//

#include "coat/Conversion/GroupKernel.h"
#include "coat/Conversion/KernelRecord.h"
#include "coat/Conversion/KernelSpec.h"
#include "coat/Conversion/Passes.h"
#include "coat/Dialect/CoatDialect.h"
#include "coat/Numerics/Fp8.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace mlir::coat {
#define GEN_PASS_DEF_COATLOWERPOINTWISE
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

//===----------------------------------------------------------------------===//
// What each op contributes
//===----------------------------------------------------------------------===//

/// The formulas of the special functions, in one of two forms (the pass's
/// `exact-math` option):
///
/// - exact: the reference library's (lib/Numerics/Activations.cpp) formulas
///   in its evaluation order, IEEE divisions, expf/erff (libm on the CPU, so
///   the CPU twin agrees with the library bit for bit; libdevice on the GPU);
/// - fast: no IEEE division and no libdevice call. sigmoid(x) =
///   rcp(1 + ex2(-x log2 e)); Phi(x) = erfc(-x/sqrt 2)/2 with erfc(z) =
///   t exp(-z^2 + P(t)), t = 1/(1 + z/2): Numerical Recipes' erfcc (Press
///   et al., Numerical Recipes in C, 2nd ed., §6.2: degree-9 P, relative
///   error < 1.2e-7) in gelu_grad, a degree-5 P in gelu. ex2 and rcp are
///   the SFU approximations on the GPU (afn, coat-fast-nvvm-math) and libm
///   exp2f / IEEE division on the CPU. The pass description has the error
///   bounds.
struct ActivationMath {
  F32Emitter &f;
  bool exact;

  Value neg(Value x) { return arith::NegFOp::create(f.b, x); }

  Value sigmoid(Value x) {
    if (exact)
      return f.div(f.c(1.0), f.add(f.c(1.0), f.exp(neg(x))));
    F32Emitter sfu{f.b, /*approx=*/true};
    Value e = sfu.exp2(f.mul(x, f.c(-kLog2e)));
    return sfu.div(f.c(1.0), f.add(f.c(1.0), e));
  }

  /// Phi(x) = (1 + erf(x / sqrt 2)) / 2; with `gauss`, also exp(-x^2 / 2).
  /// `refine` (fast form) adds one Newton step to the SFU reciprocal, for
  /// the cancellation of the GELU derivative.
  Value geluCdf(Value x, Value *gauss = nullptr, bool refine = false) {
    if (exact) {
      if (gauss)
        *gauss = f.exp(f.div(neg(f.mul(x, x)), f.c(2.0)));
      return f.div(f.add(f.c(1.0), f.erf(f.div(x, f.c(std::sqrt(2.0f))))),
                   f.c(2.0));
    }
    F32Emitter sfu{f.b, /*approx=*/true};
    // Phi(x) = h for x <= 0 and 1 - h for x > 0, h = erfc(|x| / sqrt 2) / 2,
    // from erfc(z) = t exp(P(t) - z^2), t = 1 / (1 + z / 2), evaluated in
    // base 2 with the halving folded in: h = t ex2(P'(t) - x^2 log2(e) / 2),
    // P' = P log2 e - 1. x^2 is formed from x, as exact as the library's
    // x * x. The derivative (gauss) cancels near x = -0.75 and takes
    // Numerical Recipes' erfcc (degree 9, relative error < 1.2e-7) with a
    // Newton step on t; there |x| is clamped so that the step stays finite
    // for x = +-inf (erfc(1e4) is 0 in f32 either way). The forward value
    // takes a degree-5 P (a least-squares fit, reweighted towards minimax,
    // of log(erfc(z) / t) + z^2 on t in [1/6.2, 1]: erfc within 7.7e-6
    // relative), which suffices for a bf16 result; t = rcp(inf) = 0 makes
    // h = 0 for x = +-inf.
    static const double kErfcc[] = {-1.26551223, 1.00002368, 0.37409196,
                                    0.09678418,  -0.18628806, 0.27886807,
                                    -1.13520398, 1.48851587,  -0.82215223,
                                    0.17087277};
    static const double kErfc5[] = {-1.2665419661270167, 1.0180158566927036,
                                    0.254434074790592,   0.4745096567517458,
                                    -0.7092047502700171, 0.22879474388919815};
    ArrayRef<double> poly = gauss ? ArrayRef<double>(kErfcc)
                                  : ArrayRef<double>(kErfc5);
    Value a = f.abs(x);
    if (refine)
      a = f.minnum(a, f.c(1e4));
    Value d = f.fma(a, f.c(0.5 / std::sqrt(2.0)), f.c(1.0));
    Value t = sfu.div(f.c(1.0), d);
    if (refine)
      t = f.fma(t, f.fma(neg(d), t, f.c(1.0)), t);
    auto coeff = [&](size_t k) {
      return f.c(poly[k] * kLog2e - (k == 0 ? 1.0 : 0.0));
    };
    Value p = coeff(poly.size() - 1);
    for (size_t k = poly.size() - 1; k-- > 0;)
      p = f.fma(p, t, coeff(k));
    Value x2 = f.mul(x, x);
    Value h;
    if (gauss) {
      *gauss = sfu.exp2(f.mul(x2, f.c(-0.5 * kLog2e)));
      h = f.mul(f.mul(t, *gauss), sfu.exp2(p));
    } else {
      h = f.mul(t, sfu.exp2(f.fma(x2, f.c(-0.5 * kLog2e), p)));
    }
    return f.select(f.le(x, f.c(0.0)), h, f.sub(f.c(1.0), h));
  }

  static constexpr double kLog2e = 1.44269504088896340736;
};

/// The f32 element math of an op: operand values -> one value per entry of
/// `PointwiseOpInfo::results` (a quantized copy repeats its source value).
using ElementMath =
    std::function<SmallVector<Value>(ActivationMath &, ArrayRef<Value>)>;

struct NamedValue {
  Value value;
  StringRef name; ///< the ABI name
};

/// An op's kernel-facing description: operand and result roles in order,
/// and its math. Results include the optional ones that are present; those
/// that are transposed copies are listed in `transposed`.
struct PointwiseOpInfo {
  StringRef opName; ///< the manifest's `op`
  SmallVector<NamedValue> operands;
  SmallVector<NamedValue> results;
  SmallVector<Value> transposed;
  ElementMath math;
  /// Whether the math calls a special function (exp, erf).
  bool special = false;
};

const double kSqrt2Pi = std::sqrt(2.0 * 3.14159265358979323846);

/// Appends `v` under `name` when the optional result is present.
void addIfPresent(SmallVector<NamedValue> &out, Value v, StringRef name) {
  if (v)
    out.push_back({v, name});
}

std::optional<PointwiseOpInfo> describe(Operation *op) {
  return TypeSwitch<Operation *, std::optional<PointwiseOpInfo>>(op)
      .Case([](SiluOp op) {
        return PointwiseOpInfo{
            "silu", {{op.getInput(), "x"}}, {{op.getResult(), "y"}}, {},
            [](ActivationMath &m, ArrayRef<Value> in) -> SmallVector<Value> {
              return {m.f.mul(in[0], m.sigmoid(in[0]))};
            },
            /*special=*/true};
      })
      .Case([](SiluGradOp op) {
        PointwiseOpInfo info{
            "silu_grad", {{op.getInput(), "x"}, {op.getGrad(), "dy"}},
            {{op.getDx(), "dx"}}, {},
            [](ActivationMath &m, ArrayRef<Value> in) -> SmallVector<Value> {
              F32Emitter &f = m.f;
              Value x = in[0], s = m.sigmoid(x);
              Value d = f.add(s, f.mul(f.mul(x, s), f.sub(f.c(1.0), s)));
              Value dx = f.mul(in[1], d);
              return {dx, dx};
            },
            /*special=*/true};
        addIfPresent(info.results, op.getDxQ(), "dx_q");
        if (op.getDxQt())
          info.transposed.push_back(op.getDxQt());
        return info;
      })
      .Case([](GeluOp op) {
        PointwiseOpInfo info{
            "gelu", {{op.getInput(), "x"}}, {{op.getResult(), "y"}}, {},
            [](ActivationMath &m, ArrayRef<Value> in) -> SmallVector<Value> {
              return {m.f.mul(in[0], m.geluCdf(in[0]))};
            },
            /*special=*/true};
        if (op.getResultT())
          info.transposed.push_back(op.getResultT());
        return info;
      })
      .Case([](GeluGradOp op) {
        PointwiseOpInfo info{
            "gelu_grad", {{op.getInput(), "x"}, {op.getGrad(), "dy"}},
            {{op.getDx(), "dx"}}, {},
            [](ActivationMath &m, ArrayRef<Value> in) -> SmallVector<Value> {
              F32Emitter &f = m.f;
              Value x = in[0], e;
              Value cdf = m.geluCdf(x, &e, /*refine=*/true);
              Value pdfTerm = m.exact
                                  ? f.div(f.mul(x, e), f.c(kSqrt2Pi))
                                  : f.mul(f.mul(x, e), f.c(1.0 / kSqrt2Pi));
              Value dx = f.mul(in[1], f.add(cdf, pdfTerm));
              return {dx, dx};
            },
            /*special=*/true};
        addIfPresent(info.results, op.getDxQ(), "dx_q");
        if (op.getDxQt())
          info.transposed.push_back(op.getDxQt());
        return info;
      })
      .Case([](SwigluMulOp op) {
        PointwiseOpInfo info{
            "swiglu_mul", {{op.getLhs(), "x1"}, {op.getRhs(), "x2"}},
            {{op.getResult(), "y"}}, {},
            [](ActivationMath &m, ArrayRef<Value> in) -> SmallVector<Value> {
              F32Emitter &f = m.f;
              return {f.mul(in[0], in[1])};
            }};
        if (op.getResultT())
          info.transposed.push_back(op.getResultT());
        return info;
      })
      .Case([](SwigluMulGradOp op) {
        PointwiseOpInfo info{
            "swiglu_mul_grad",
            {{op.getLhs(), "x1"}, {op.getRhs(), "x2"}, {op.getGrad(), "dy"}},
            {{op.getDlhs(), "dx1"}, {op.getDrhs(), "dx2"}}, {},
            [](ActivationMath &m, ArrayRef<Value> in) -> SmallVector<Value> {
              F32Emitter &f = m.f;
              Value g1 = f.mul(in[2], in[1]), g2 = f.mul(in[2], in[0]);
              return {g1, g2, g2};
            }};
        addIfPresent(info.results, op.getDrhsQ(), "dx2_q");
        if (op.getDrhsQt())
          info.transposed.push_back(op.getDrhsQt());
        return info;
      })
      .Case([](ResidualAddOp op) {
        return PointwiseOpInfo{
            "residual_add",
            {{op.getResidual(), "residual"}, {op.getBranch(), "branch"}},
            {{op.getSum(), "sum"}, {op.getSumQ(), "sum_q"}}, {},
            [](ActivationMath &m, ArrayRef<Value> in) -> SmallVector<Value> {
              F32Emitter &f = m.f;
              Value s = f.add(in[0], in[1]);
              return {s, s};
            }};
      })
      .Case([](ResidualAddGradOp op) {
        PointwiseOpInfo info{
            "residual_add_grad", {{op.getLhs(), "a"}, {op.getRhs(), "b"}},
            {{op.getSum(), "sum"}}, {},
            [](ActivationMath &m, ArrayRef<Value> in) -> SmallVector<Value> {
              F32Emitter &f = m.f;
              Value s = f.add(in[0], in[1]);
              return {s, s};
            }};
        addIfPresent(info.results, op.getSumQ(), "sum_q");
        return info;
      })
      .Default([](Operation *) { return std::nullopt; });
}

//===----------------------------------------------------------------------===//
// The kernel spec
//===----------------------------------------------------------------------===//

/// An operand as the kernel reads it: 1xG FP8 codes + scales, or values.
struct KernelInput {
  std::string name;
  Type type;                    ///< the element type in memory (fp8 or hp)
  bool fp8 = false;
  Type scaleType;
  int valuesArg = -1, scaleArg = -1;
};

/// A result as the kernel writes it: values, or 1xG codes + scales.
struct KernelOutput {
  std::string name;
  Type type; ///< the element type in memory (fp8 or hp)
  bool fp8 = false;
  ::coat::Fp8Format format = ::coat::Fp8Format::E4M3;
  Type scaleType;
  unsigned mathIndex = 0;
  int valuesArg = -1, scaleArg = -1;
  SmallVector<int> absmaxArgs; ///< epilogue maxima of this result
};

struct PointwiseSpec {
  PointwiseOpInfo info;
  SmallVector<KernelInput> inputs;
  SmallVector<KernelOutput> outputs;
  int64_t groupSize = 0; ///< G shared by all grouped arguments; 0: none
  SmallVector<AbiArg> abi;
  int rowsArg = -1, colsArg = -1;

  bool hasFp8Output() const {
    return llvm::any_of(outputs, [](const KernelOutput &o) { return o.fp8; });
  }
};

LogicalResult checkMatrix(Operation *op, Type t, StringRef what) {
  auto shaped = dyn_cast<ShapedType>(t);
  if (!shaped || !shaped.hasRank() || shaped.getRank() != 2)
    return op->emitError("pointwise kernels take 2-D [rows, cols] operands "
                         "and results; ")
           << what << " has type " << t;
  return success();
}

/// Records G of one grouped argument; all must agree.
LogicalResult useGroup(Operation *op, int64_t &groupSize, int64_t g,
                       StringRef what) {
  if (!llvm::isPowerOf2_64(g) || g > 512)
    return op->emitError("group size ")
           << g << " of " << what
           << " has no pointwise kernel: need a power of two <= 512";
  if (groupSize && groupSize != g)
    return op->emitError("all grouped operands, results and maxima of a "
                         "pointwise kernel must share one group size; ")
           << what << " has " << g << ", another has " << groupSize;
  groupSize = g;
  return success();
}

FailureOr<PointwiseSpec> analyze(func::FuncOp fn) {
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  Operation *op = body.empty() ? nullptr : &body.front();
  std::optional<PointwiseOpInfo> info =
      op && op != ret ? describe(op) : std::nullopt;
  if (!info)
    return fn.emitError("kernel-spec function @")
           << fn.getSymName()
           << " must start with a pointwise precision-flow op (coat.silu, "
              "silu_grad, gelu, gelu_grad, swiglu_mul, swiglu_mul_grad, "
              "residual_add, residual_add_grad)";
  PointwiseSpec spec;
  spec.info = *info;
  for (Value operand : op->getOperands())
    if (!isa<BlockArgument>(operand))
      return op->emitError("operands of a kernel-spec op must be function "
                           "arguments");
  if (!info->transposed.empty())
    return op->emitError("transposed FP8 copies need the per-tensor scale of "
                         "the whole result: run coat-group-scaling, then "
                         "lower its coat.quantize + coat.transpose with "
                         "coat-lower-activations");

  for (const NamedValue &in : info->operands) {
    KernelInput k;
    k.name = in.name.str();
    Type t = in.value.getType();
    if (isa<UnresolvedType>(t))
      return op->emitError("operand '")
             << in.name << "' is unresolved: run coat-mixed-granularity first";
    if (failed(checkMatrix(op, t, "operand '" + in.name.str() + "'")))
      return failure();
    if (auto q = dyn_cast<QTensorType>(t)) {
      if (q.getExpanded())
        return op->emitError("range-expanded operands have no pointwise "
                             "kernel");
      ::coat::Scaling s = q.getScalingValue();
      k.fp8 = true;
      k.type = q.getElementType();
      k.scaleType = q.getScaleType();
      if (s.kind != ::coat::ScalingKind::PerGroup)
        return op->emitError("operand '")
               << in.name << "': pointwise kernels read per_group<G> FP8, got "
               << t;
      if (failed(useGroup(op, spec.groupSize, s.groupSize,
                          "operand '" + in.name.str() + "'")))
        return failure();
    } else {
      k.type = cast<ShapedType>(t).getElementType();
    }
    spec.inputs.push_back(std::move(k));
  }

  DenseMap<Value, unsigned> outputOf;
  for (auto [i, res] : llvm::enumerate(info->results)) {
    KernelOutput k;
    k.name = res.name.str();
    k.mathIndex = i;
    Type t = res.value.getType();
    if (failed(checkMatrix(op, t, "result '" + res.name.str() + "'")))
      return failure();
    if (auto q = dyn_cast<QTensorType>(t)) {
      ::coat::Scaling s = q.getScalingValue();
      if (s.kind != ::coat::ScalingKind::PerGroup || q.getExpanded())
        return op->emitError("result '")
               << res.name
               << "': a pointwise kernel writes per_group<G> FP8 results "
                  "only; a per-tensor result needs the maximum of the whole "
                  "tensor: run coat-group-scaling, which returns the "
                  "unquantized values with coat.absmax ... epilogue maxima";
      if (failed(useGroup(op, spec.groupSize, s.groupSize,
                          "result '" + res.name.str() + "'")))
        return failure();
      k.fp8 = true;
      k.type = q.getElementType();
      k.format = q.getFormat();
      k.scaleType = q.getScaleType();
    } else {
      k.type = cast<ShapedType>(t).getElementType();
    }
    outputOf[res.value] = spec.outputs.size();
    spec.outputs.push_back(std::move(k));
  }

  // The epilogue maxima, then the return.
  SmallVector<Value> expectedReturn;
  for (const NamedValue &res : info->results)
    expectedReturn.push_back(res.value);
  SmallVector<std::pair<AbsMaxOp, unsigned>> maxima;
  for (Operation &other : llvm::make_range(std::next(op->getIterator()),
                                           ret->getIterator())) {
    auto a = dyn_cast<AbsMaxOp>(&other);
    if (!a)
      return other.emitError("a pointwise kernel spec holds one flow op and "
                             "coat.absmax ... epilogue ops on its results, "
                             "nothing else");
    auto it = outputOf.find(a.getInput());
    if (!a.getEpilogue() || it == outputOf.end())
      return a.emitError("only `coat.absmax ... epilogue` of a result of the "
                         "flow op fuses into a pointwise kernel");
    const KernelOutput &src = spec.outputs[it->second];
    if (src.fp8)
      return a.emitError("epilogue maxima are of high-precision results");
    ::coat::Scaling s = a.getScaling().getValue();
    if (s.kind != ::coat::ScalingKind::PerGroup)
      return a.emitError("epilogue maxima of a pointwise kernel are "
                         "per_group<G>");
    if (failed(useGroup(a, spec.groupSize, s.groupSize, "the maxima")))
      return failure();
    maxima.push_back({a, it->second});
    expectedReturn.push_back(a.getResult());
  }
  if (!llvm::equal(ret.getOperands(), expectedReturn))
    return ret.emitError("a pointwise kernel spec returns the flow op's "
                         "results, then its epilogue maxima, in order");

  // The ABI: operands, results, maxima, rows, cols.
  MLIRContext *ctx = fn.getContext();
  auto buf = [&](Type logical) {
    return MemRefType::get({ShapedType::kDynamic}, laneStorageType(logical));
  };
  SpecRefs refs(fn);
  auto add = [&](std::string name, Type logical, std::string extent,
                 std::string bind) {
    spec.abi.push_back({std::move(name), buf(logical), manifestDtype(logical),
                        std::move(extent), {std::move(bind)}});
    return static_cast<int>(spec.abi.size()) - 1;
  };
  for (auto [k, in] : llvm::zip(spec.inputs, info->operands)) {
    k.valuesArg =
        add(k.name, k.type, "n", refs.ref(in.value, k.fp8 ? "codes" : ""));
    if (k.fp8)
      k.scaleArg = add(k.name + "_scale", k.scaleType, "groups",
                       refs.ref(in.value, "scale"));
  }
  for (auto [k, res] : llvm::zip(spec.outputs, info->results)) {
    k.valuesArg =
        add(k.name, k.type, "n", refs.ref(res.value, k.fp8 ? "codes" : ""));
    if (k.fp8)
      k.scaleArg = add(k.name + "_scale", k.scaleType, "groups",
                       refs.ref(res.value, "scale"));
  }
  for (auto [a, out] : maxima) {
    KernelOutput &k = spec.outputs[out];
    std::string name = k.name + "_absmax";
    if (!k.absmaxArgs.empty())
      name += std::to_string(k.absmaxArgs.size());
    k.absmaxArgs.push_back(add(name, Float32Type::get(ctx), "groups",
                               refs.ref(a.getResult())));
  }
  Type i64 = IntegerType::get(ctx, 64);
  Value matrix = info->operands.front().value;
  spec.rowsArg = spec.abi.size();
  spec.abi.push_back({"rows", i64, "i64", "", {refs.rows(matrix)}});
  spec.colsArg = spec.abi.size();
  spec.abi.push_back({"cols", i64, "i64", "", {refs.cols(matrix)}});
  return spec;
}

DictionaryAttr buildRecord(MLIRContext *ctx, StringRef name,
                           const PointwiseSpec &spec, bool exactMath,
                           std::optional<LaunchRule> launch) {
  Builder b(ctx);
  SmallVector<NamedAttribute> config;
  auto names = [&](auto &&range) {
    SmallVector<Attribute> out;
    for (const auto &k : range)
      out.push_back(b.getStringAttr(k.name));
    return b.getArrayAttr(out);
  };
  config.push_back(b.getNamedAttr("operands", names(spec.inputs)));
  config.push_back(b.getNamedAttr("results", names(spec.outputs)));
  if (spec.groupSize)
    config.push_back(
        b.getNamedAttr("group_size", b.getI64IntegerAttr(spec.groupSize)));
  if (spec.hasFp8Output())
    config.push_back(b.getNamedAttr(
        "eps", b.getF64FloatAttr(::coat::kActivationScaleEps)));
  // Which formulas the special functions use (the tests' tolerances differ).
  if (spec.info.special)
    config.push_back(
        b.getNamedAttr("math", b.getStringAttr(exactMath ? "exact" : "fast")));
  return buildKernelRecord(ctx, name, spec.info.opName, config, spec.abi,
                           launch);
}

//===----------------------------------------------------------------------===//
// Emitting lanes
//===----------------------------------------------------------------------===//

/// Emits the work of one or more lanes of a pointwise kernel.
class PointwiseEmitter {
public:
  PointwiseEmitter(ImplicitLocOpBuilder &b, const PointwiseSpec &spec,
                   ValueRange args, bool exactMath)
      : b(b), f(F32Emitter{b}), spec(spec), args(args), exactMath(exactMath) {
    Value n = arith::MulIOp::create(b, args[spec.rowsArg], args[spec.colsArg]);
    nI64 = n;
    nIndex = arith::IndexCastOp::create(b, b.getIndexType(), n);
    if (spec.groupSize)
      groups = arith::CeilDivUIOp::create(b, nIndex, idx(spec.groupSize));
  }

  Value numElements() const { return nIndex; }

  /// Loads (all lanes first, so their loads are in flight together), then
  /// computes and stores. Without `tail` every lane is known to be full.
  void emitLanes(ArrayRef<GroupLane> lanes, bool tail) {
    SmallVector<SmallVector<SmallVector<Value>>> loaded;
    SmallVector<LaneAccess> accesses;
    for (const GroupLane &lane : lanes) {
      accesses.push_back(access(lane, tail));
      loaded.push_back(load(lane, accesses.back(), tail));
    }
    for (auto [lane, acc, in] : llvm::zip(lanes, accesses, loaded))
      computeAndStore(lane, acc, in, tail);
  }

private:
  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, v); }

  LaneAccess access(const GroupLane &lane, bool tail) {
    int64_t e = lane.elementsPerLane;
    Value full;
    if (tail) {
      Value end = arith::AddIOp::create(b, lane.firstElement, idx(e));
      full = arith::CmpIOp::create(b, arith::CmpIPredicate::ule, end, nIndex);
    } else {
      full = arith::ConstantIntOp::create(b, 1, 1);
    }
    return LaneAccess{b, lane.firstElement, e, full, nI64};
  }

  /// A lane's chunk starts at a multiple of E elements of a 16-byte aligned
  /// buffer (docs/manifest.md), so it is aligned to min(E * size, 16).
  llvm::MaybeAlign alignment(const GroupLane &lane, int arg) const {
    Type elt = cast<MemRefType>(args[arg].getType()).getElementType();
    int64_t bytes = lane.elementsPerLane * elt.getIntOrFloatBitWidth() / 8;
    return llvm::MaybeAlign(std::clamp<int64_t>(bytes, 1, 16));
  }

  /// The lane's group index for a scale/maxima buffer; lanes past the end
  /// (tail only) read the last group's entry.
  Value groupIndex(const GroupLane &lane, bool tail) {
    if (!tail)
      return lane.group;
    Value last = arith::SubIOp::create(
        b, arith::MaxUIOp::create(b, groups, idx(1)), idx(1));
    return arith::MinUIOp::create(b, lane.group, last);
  }

  SmallVector<SmallVector<Value>> load(const GroupLane &lane,
                                       const LaneAccess &acc, bool tail) {
    SmallVector<SmallVector<Value>> out;
    for (const KernelInput &in : spec.inputs) {
      SmallVector<Value> x =
          acc.loadF32(args[in.valuesArg], in.type, alignment(lane, in.valuesArg));
      if (in.fp8) {
        Value s = loadScalarF32(b, args[in.scaleArg], in.scaleType,
                                groupIndex(lane, tail));
        for (Value &xi : x)
          xi = f.mul(xi, s);
      }
      out.push_back(std::move(x));
    }
    return out;
  }

  /// Stores `v` to buffer[group] from the group's first lane.
  void storeFromLeader(const GroupLane &lane, int arg, Type logical, Value v,
                       bool tail) {
    Value leader = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                         lane.laneInGroup, idx(0));
    if (tail)
      leader = arith::AndIOp::create(
          b, leader,
          arith::CmpIOp::create(b, arith::CmpIPredicate::ult, lane.group,
                                groups));
    scf::IfOp::create(b, leader, [&](OpBuilder &nb, Location loc) {
      storeScalarF32(nb, loc, args[arg], logical, v, lane.group);
      scf::YieldOp::create(nb, loc);
    });
  }

  void computeAndStore(const GroupLane &lane, const LaneAccess &acc,
                       ArrayRef<SmallVector<Value>> in, bool tail) {
    int64_t e = lane.elementsPerLane;
    // The math, element by element.
    SmallVector<SmallVector<Value>> results(spec.outputs.size());
    for (int64_t i = 0; i < e; ++i) {
      SmallVector<Value> operands;
      for (const SmallVector<Value> &x : in)
        operands.push_back(x[i]);
      ActivationMath m{f, exactMath};
      SmallVector<Value> ys = spec.info.math(m, operands);
      for (auto [k, out] : llvm::enumerate(spec.outputs))
        results[k].push_back(ys[out.mathIndex]);
    }
    for (auto [out, ys] : llvm::zip(spec.outputs, results)) {
      if (out.fp8) {
        QuantizedLane q = quantizeGroup(
            f, lane, ys,
            {::coat::kActivationScaleEps,
             ::coat::getFp8Traits(out.format).maxFinite, out.scaleType});
        acc.storeF32(args[out.valuesArg], q.scaled, out.type,
                     alignment(lane, out.valuesArg));
        storeFromLeader(lane, out.scaleArg, out.scaleType, q.scale, tail);
        continue;
      }
      acc.storeF32(args[out.valuesArg], ys, out.type,
                   alignment(lane, out.valuesArg));
      if (out.absmaxArgs.empty())
        continue;
      // The maxima are of the stored (rounded) values, which the quantize
      // that consumes them reads. Rounding to nearest is monotonic and odd,
      // so max |round(y)| = round(max |y|): one rounding per group.
      Value m = f.roundTo(groupMaxAbs(f, lane, ys), out.type);
      for (int arg : out.absmaxArgs)
        storeFromLeader(lane, arg, b.getF32Type(), m, tail);
    }
  }

  ImplicitLocOpBuilder &b;
  F32Emitter f;
  const PointwiseSpec &spec;
  ValueRange args;
  bool exactMath;
  Value nI64, nIndex, groups;
};

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

/// E elements per lane and L lanes per group.
struct LaneShape {
  int64_t elementsPerLane;
  int64_t lanesPerGroup;
};

GroupLane makeLane(ImplicitLocOpBuilder &b, const LaneShape &shape,
                   Value laneIndex, bool onGpu) {
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  GroupLane lane;
  lane.onGpu = onGpu;
  lane.elementsPerLane = shape.elementsPerLane;
  lane.lanesPerGroup = shape.lanesPerGroup;
  lane.groupSize = shape.elementsPerLane * shape.lanesPerGroup;
  lane.laneInGroup =
      arith::RemUIOp::create(b, laneIndex, cidx(shape.lanesPerGroup));
  lane.group = arith::DivUIOp::create(b, laneIndex, cidx(shape.lanesPerGroup));
  lane.firstElement =
      arith::MulIOp::create(b, laneIndex, cidx(shape.elementsPerLane));
  return lane;
}

/// The CPU twin calls libm's erff, as the reference library does (the LLVM
/// lowering has no erf).
void callLibmErf(func::FuncOp fn, ModuleOp module) {
  SmallVector<math::ErfOp> erfs;
  fn.walk([&](math::ErfOp op) { erfs.push_back(op); });
  if (erfs.empty())
    return;
  MLIRContext *ctx = module.getContext();
  Type f32 = Float32Type::get(ctx);
  auto type = FunctionType::get(ctx, {f32}, {f32});
  auto decl = module.lookupSymbol<func::FuncOp>("erff");
  if (!decl) {
    OpBuilder mb(ctx);
    mb.setInsertionPointToStart(module.getBody());
    decl = func::FuncOp::create(mb, module.getLoc(), "erff", type);
    decl.setPrivate();
  }
  for (math::ErfOp op : erfs) {
    OpBuilder b(op);
    auto call = func::CallOp::create(b, op.getLoc(), decl, op.getOperand());
    op.replaceAllUsesWith(call.getResult(0));
    op.erase();
  }
}

struct CoatLowerPointwisePass
    : mlir::coat::impl::CoatLowerPointwiseBase<CoatLowerPointwisePass> {
  using Base::Base;

  void runOnOperation() override;

private:
  void lowerGpu(func::FuncOp fn, const PointwiseSpec &spec, LaneShape shape,
                KernelContainer &kernels);
  void lowerCpu(func::FuncOp fn, const PointwiseSpec &spec, LaneShape shape,
                KernelContainer &kernels);
};

void CoatLowerPointwisePass::lowerGpu(func::FuncOp fn,
                                      const PointwiseSpec &spec,
                                      LaneShape shape,
                                      KernelContainer &kernels) {
  MLIRContext *ctx = &getContext();
  Location loc = fn.getLoc();
  SmallVector<Type> argTypes;
  for (const AbiArg &a : spec.abi)
    argTypes.push_back(a.type);
  int64_t lanesPerBlock = blockSize * lanesPerThread;
  gpu::GPUFuncOp kernel = kernels.createGpuKernel(
      loc, fn.getSymName(), FunctionType::get(ctx, argTypes, {}), blockSize,
      buildRecord(ctx, fn.getSymName(), spec, exactMath,
                  LaunchRule{blockSize, lanesPerBlock * shape.elementsPerLane}));

  ImplicitLocOpBuilder b(loc, ctx);
  b.setInsertionPointToStart(&kernel.getBody().front());
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  PointwiseEmitter emitter(b, spec, kernel.getArguments(), exactMath);
  // Lane u of a thread is lane base + u * blockSize + tid: every unrolled
  // step is a coalesced sweep of the block, and a group's lanes stay
  // adjacent threads of one warp.
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value base = arith::MulIOp::create(b, bid, cidx(lanesPerBlock));
  Value blockEnd = arith::MulIOp::create(
      b, arith::AddIOp::create(b, base, cidx(lanesPerBlock)),
      cidx(shape.elementsPerLane));
  // Block-uniform, so the shuffles of either branch see the whole warp.
  Value wholeBlock = arith::CmpIOp::create(b, arith::CmpIPredicate::ule,
                                           blockEnd, emitter.numElements());
  auto lanes = [&]() {
    SmallVector<GroupLane> out;
    for (int64_t u = 0; u < lanesPerThread; ++u) {
      Value laneIndex = arith::AddIOp::create(
          b, arith::AddIOp::create(b, base, cidx(u * blockSize)), tid);
      out.push_back(makeLane(b, shape, laneIndex, /*onGpu=*/true));
    }
    return out;
  };
  auto branch = scf::IfOp::create(b, wholeBlock, /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(branch.thenBlock());
    emitter.emitLanes(lanes(), /*tail=*/false);
    b.setInsertionPointToStart(branch.elseBlock());
    emitter.emitLanes(lanes(), /*tail=*/true);
  }
  gpu::ReturnOp::create(b);
}

void CoatLowerPointwisePass::lowerCpu(func::FuncOp fn,
                                      const PointwiseSpec &spec,
                                      LaneShape shape,
                                      KernelContainer &kernels) {
  MLIRContext *ctx = &getContext();
  Location loc = fn.getLoc();
  SmallVector<Type> argTypes;
  for (const AbiArg &a : spec.abi)
    argTypes.push_back(a.type);
  func::FuncOp cpuFn = kernels.createCpuTwin(
      fn, fn.getSymName(), FunctionType::get(ctx, argTypes, {}),
      buildRecord(ctx, fn.getSymName(), spec, exactMath, std::nullopt));
  Block *entry = cpuFn.addEntryBlock();
  ImplicitLocOpBuilder b(loc, ctx);
  b.setInsertionPointToStart(entry);
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  PointwiseEmitter emitter(b, spec, cpuFn.getArguments(), exactMath);
  Value lanes = arith::CeilDivUIOp::create(b, emitter.numElements(),
                                           cidx(shape.elementsPerLane));
  auto loop = scf::ForOp::create(b, cidx(0), lanes, cidx(1));
  b.setInsertionPointToStart(loop.getBody());
  GroupLane lane = makeLane(b, shape, loop.getInductionVar(), /*onGpu=*/false);
  emitter.emitLanes(lane, /*tail=*/true);
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b);
  callLibmErf(cpuFn, getOperation());
}

void CoatLowerPointwisePass::runOnOperation() {
  ModuleOp module = getOperation();
  FailureOr<bool> onGpu =
      parseKernelTarget(module, "coat-lower-pointwise", target);
  if (failed(onGpu))
    return signalPassFailure();
  if (blockSize <= 0 || blockSize % 32 != 0 || blockSize > 1024) {
    module.emitError("coat-lower-pointwise: block-size must be a multiple of "
                     "32 in [32, 1024], got ")
        << static_cast<int64_t>(blockSize);
    return signalPassFailure();
  }
  if (lanesPerThread < 1 || lanesPerThread > 8) {
    module.emitError("coat-lower-pointwise: lanes-per-thread must be in "
                     "[1, 8], got ")
        << static_cast<int64_t>(lanesPerThread);
    return signalPassFailure();
  }
  bool gpu = *onGpu;
  // Kernel-spec functions are those holding a pointwise flow op.
  FailureOr<SmallVector<func::FuncOp>> specs =
      collectKernelSpecs(module, "coat-lower-pointwise", [](Operation *op) {
        return describe(op).has_value();
      });
  if (failed(specs))
    return signalPassFailure();
  KernelContainer kernels(module, "coat-lower-pointwise", "coat_flow_kernels",
                          gpu);
  bool failedAny = false;
  for (func::FuncOp fn : *specs) {
    FailureOr<PointwiseSpec> spec = analyze(fn);
    if (failed(spec)) {
      failedAny = true;
      continue;
    }
    // A lane moves 16 FP8 codes (16 bytes) or a group, if smaller; the CPU
    // twin holds a whole group per iteration.
    int64_t g = spec->groupSize;
    LaneShape shape{g ? std::min<int64_t>(16, g) : 16, 1};
    if (g)
      shape.lanesPerGroup = g / shape.elementsPerLane;
    if (!gpu)
      shape = {g ? g : 16, 1};
    if (gpu)
      lowerGpu(fn, *spec, shape, kernels);
    else
      lowerCpu(fn, *spec, shape, kernels);
    fn.erase();
  }
  if (failedAny)
    return signalPassFailure();
  if (failed(kernels.finish()))
    return signalPassFailure();
}

} // namespace
