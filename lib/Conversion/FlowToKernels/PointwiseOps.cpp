//===- PointwiseOps.cpp - the pointwise ops and their element math --------===//
//
// An op contributes only its f32 element math and the roles of its operands
// and results; reading and writing FP8 and high-precision tensors, group
// scales and epilogue maxima are shared by all of them (PointwiseEmitter).
// Adding a pointwise op is one entry of the table below.
//
//===----------------------------------------------------------------------===//

#include "Pointwise.h"

#include "coat/Conversion/Passes.h"
#include "coat/Dialect/CoatDialect.h"
#include "coat/Numerics/Reference.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#include <cmath>

using namespace mlir;
using namespace mlir::coat;

//===----------------------------------------------------------------------===//
// Special functions
//===----------------------------------------------------------------------===//

Value ActivationMath::neg(Value x) { return arith::NegFOp::create(f.b, x); }

Value ActivationMath::ex2(Value x) {
  F32Emitter sfu{f.b, /*approx=*/true};
  Value y = sfu.exp2(x);
  if (softExp2)
    y.getDefiningOp()->setAttr(kSoftExp2Attr, f.b.getUnitAttr());
  return y;
}

Value ActivationMath::sigmoid(Value x) {
  if (exact)
    return f.div(f.c(1.0), f.add(f.c(1.0), f.exp(neg(x))));
  F32Emitter sfu{f.b, /*approx=*/true};
  Value e = ex2(f.mul(x, f.c(-kLog2e)));
  return sfu.div(f.c(1.0), f.add(f.c(1.0), e));
}

Value ActivationMath::silu(Value x) { return f.mul(x, sigmoid(x)); }

Value ActivationMath::siluDerivative(Value x) {
  Value s = sigmoid(x);
  return f.add(s, f.mul(f.mul(x, s), f.sub(f.c(1.0), s)));
}

Value ActivationMath::geluCdf(Value x, Value *gauss, bool refine) {
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
  ArrayRef<double> poly =
      gauss ? ArrayRef<double>(kErfcc) : ArrayRef<double>(kErfc5);
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
    *gauss = ex2(f.mul(x2, f.c(-0.5 * kLog2e)));
    h = f.mul(f.mul(t, *gauss), ex2(p));
  } else {
    h = f.mul(t, ex2(f.fma(x2, f.c(-0.5 * kLog2e), p)));
  }
  return f.select(f.le(x, f.c(0.0)), h, f.sub(f.c(1.0), h));
}

Value ActivationMath::geluTanh(Value x) {
  // u = sqrt(2/pi) * (x + 0.044715 * ((x * x) * x)), as the library forms it.
  Value cube = f.mul(f.mul(x, x), x);
  Value u = f.mul(f.c(::coat::ref::kGeluTanhScale),
                  f.add(x, f.mul(f.c(::coat::ref::kGeluTanhCubic), cube)));
  if (exact)
    return f.tanh(u);
  // |t| = 1 - 2 / (1 + exp(2|u|)): the quotient is small and accurate, and
  // the difference rounds to 1 where tanhf's result does (|u| > 9.01), so
  // 1 + t and 1 - t^2 vanish where the library's do. ex2(inf) = inf gives
  // rcp = 0 and t = +-1 for u = +-inf; NaN stays NaN.
  F32Emitter sfu{f.b, /*approx=*/true};
  Value e = ex2(f.mul(f.abs(u), f.c(2.0 * kLog2e)));
  Value r = sfu.div(f.c(1.0), f.add(f.c(1.0), e));
  Value magnitude = f.sub(f.c(1.0), f.mul(f.c(2.0), r));
  return f.copysign(magnitude, u);
}

//===----------------------------------------------------------------------===//
// The op table
//===----------------------------------------------------------------------===//

namespace {

/// One pointwise op: its manifest name and its description.
struct PointwiseOpDef {
  StringRef name;
  TypeID type;
  std::function<PointwiseOpInfo(Operation *)> describe;
};

template <typename OpT>
PointwiseOpDef def(StringRef name, PointwiseOpInfo (*describe)(OpT)) {
  return {name, TypeID::get<OpT>(),
          [describe](Operation *op) { return describe(cast<OpT>(op)); }};
}

const double kSqrt2Pi = std::sqrt(2.0 * 3.14159265358979323846);

/// Adds the optional results of an op to `info`: a 1xG FP8 copy `q` of the
/// last result (under `name`) and a transposed FP8 copy `qt`, when present.
PointwiseOpInfo withCopies(PointwiseOpInfo info, Value q, StringRef name,
                           Value qt) {
  if (q)
    info.results.push_back({q, name});
  if (qt)
    info.transposed.push_back(qt);
  return info;
}

/// GELU's tanh form: recorded in the manifest (`approximate = "tanh"`), as
/// the op names it; the exact form records nothing (the records of kernels
/// compiled before the option).
PointwiseOpInfo withForm(PointwiseOpInfo info, bool tanh) {
  if (tanh)
    info.configEntries.push_back({"approximate", "tanh"});
  return info;
}

/// A product under `silu_gate`: x1 = silu(gate), 1xG-requantized in the
/// gate's type in registers; recorded as `name` (the whole SwiGLU).
PointwiseOpInfo withSiluGate(PointwiseOpInfo info, StringRef name) {
  info.requantized = RequantizedValue{
      0, [](ActivationMath &m, ArrayRef<Value> in) -> SmallVector<Value> {
        return {m.silu(in[0])};
      }};
  info.special = true;
  info.opName = name;
  return info;
}

/// A rotary op's heads: d from its tables, the heads of its input's rows
/// (static, as its verifier requires).
template <typename OpT>
PointwiseOpInfo withHeads(PointwiseOpInfo info, OpT op, Value input) {
  int64_t d = op.getHeadDim();
  int64_t cols = cast<ShapedType>(input.getType()).getShape().back();
  info.rotary = RotaryHeads{d, cols / d,
                            static_cast<int64_t>(op.getRotatedHeads())};
  return info;
}

/// Every pointwise op, in the order diagnostics list them: its operands and
/// results by ABI name, then its math.
ArrayRef<PointwiseOpDef> pointwiseOps() {
  using Ys = SmallVector<Value>;
  static const PointwiseOpDef ops[] = {
      def<SiluOp>("silu",
                  [](SiluOp op) {
                    return PointwiseOpInfo{
                        {{op.getInput(), "x"}},
                        {{op.getResult(), "y"}},
                        [](ActivationMath &m, ArrayRef<Value> in) -> Ys {
                          return {m.silu(in[0])};
                        },
                        /*special=*/true};
                  }),
      def<SiluGradOp>(
          "silu_grad",
          [](SiluGradOp op) {
            return withCopies(
                {{{op.getInput(), "x"}, {op.getGrad(), "dy"}},
                 {{op.getDx(), "dx"}},
                 [](ActivationMath &m, ArrayRef<Value> in) -> Ys {
                   Value dx = m.f.mul(in[1], m.siluDerivative(in[0]));
                   return {dx, dx};
                 },
                 /*special=*/true},
                op.getDxQ(), "dx_q", op.getDxQt());
          }),
      def<GeluOp>("gelu",
                  [](GeluOp op) {
                    ElementMath erfForm = [](ActivationMath &m,
                                             ArrayRef<Value> in) -> Ys {
                      return {m.f.mul(in[0], m.geluCdf(in[0]))};
                    };
                    // (x / 2) (1 + t), in the library's order.
                    ElementMath tanhForm = [](ActivationMath &m,
                                              ArrayRef<Value> in) -> Ys {
                      F32Emitter &f = m.f;
                      Value t = m.geluTanh(in[0]);
                      return {f.mul(f.mul(f.c(0.5), in[0]),
                                    f.add(f.c(1.0), t))};
                    };
                    return withForm(
                        withCopies({{{op.getInput(), "x"}},
                                    {{op.getResult(), "y"}},
                                    op.isTanh() ? tanhForm : erfForm,
                                    /*special=*/true},
                                   Value(), "", op.getResultT()),
                        op.isTanh());
                  }),
      def<GeluGradOp>(
          "gelu_grad",
          [](GeluGradOp op) {
            ElementMath erfForm = [](ActivationMath &m,
                                     ArrayRef<Value> in) -> Ys {
              F32Emitter &f = m.f;
              Value x = in[0], e;
              Value cdf = m.geluCdf(x, &e, /*refine=*/true);
              Value pdfTerm = m.exact ? f.div(f.mul(x, e), f.c(kSqrt2Pi))
                                      : f.mul(f.mul(x, e), f.c(1.0 / kSqrt2Pi));
              Value dx = f.mul(in[1], f.add(cdf, pdfTerm));
              return {dx, dx};
            };
            // (1 + t) / 2 + (x / 2) (1 - t^2) sqrt(2/pi) (1 + 3c x^2), in
            // the library's order (3c is its f32 product).
            ElementMath tanhForm = [](ActivationMath &m,
                                      ArrayRef<Value> in) -> Ys {
              F32Emitter &f = m.f;
              Value x = in[0], t = m.geluTanh(x);
              Value cdf = f.mul(f.c(0.5), f.add(f.c(1.0), t));
              const float cubic3 = 3.0f * ::coat::ref::kGeluTanhCubic;
              Value slope =
                  f.mul(f.c(::coat::ref::kGeluTanhScale),
                        f.add(f.c(1.0), f.mul(f.c(cubic3), f.mul(x, x))));
              Value pdfTerm =
                  f.mul(f.mul(f.mul(f.c(0.5), x), f.sub(f.c(1.0), f.mul(t, t))),
                        slope);
              Value dx = f.mul(in[1], f.add(cdf, pdfTerm));
              return {dx, dx};
            };
            return withForm(
                withCopies({{{op.getInput(), "x"}, {op.getGrad(), "dy"}},
                            {{op.getDx(), "dx"}},
                            op.isTanh() ? tanhForm : erfForm,
                            /*special=*/true},
                           op.getDxQ(), "dx_q", op.getDxQt()),
                op.isTanh());
          }),
      def<SwigluMulOp>(
          "swiglu_mul",
          [](SwigluMulOp op) {
            if (op.getSiluGate())
              return withSiluGate(
                  withCopies({{{op.getLhs(), "gate"}, {op.getRhs(), "x2"}},
                              {{op.getResult(), "y"}},
                              [](ActivationMath &m, ArrayRef<Value> in) -> Ys {
                                return {m.f.mul(in[2], in[1])};
                              }},
                             Value(), "", op.getResultT()),
                  "swiglu");
            return withCopies({{{op.getLhs(), "x1"}, {op.getRhs(), "x2"}},
                               {{op.getResult(), "y"}},
                               [](ActivationMath &m, ArrayRef<Value> in) -> Ys {
                                 return {m.f.mul(in[0], in[1])};
                               }},
                              Value(), "", op.getResultT());
          }),
      def<SwigluMulGradOp>(
          "swiglu_mul_grad",
          [](SwigluMulGradOp op) {
            if (op.getSiluGate()) {
              // dgate = silu'(gate) (dy x2 rounded as dlhs was stored);
              // dx2 = dy x1.
              Type stored = getElementTypeOrSelf(op.getGrad().getType());
              return withSiluGate(
                  withCopies(
                      {{{op.getLhs(), "gate"},
                        {op.getRhs(), "x2"},
                        {op.getGrad(), "dy"}},
                       {{op.getDlhs(), "dgate"}, {op.getDrhs(), "dx2"}},
                       [stored](ActivationMath &m, ArrayRef<Value> in) -> Ys {
                         F32Emitter &f = m.f;
                         Value g1 = f.roundTo(f.mul(in[2], in[1]), stored);
                         Value dgate = f.mul(g1, m.siluDerivative(in[0]));
                         Value g2 = f.mul(in[2], in[3]);
                         return {dgate, g2, g2};
                       }},
                      op.getDrhsQ(), "dx2_q", op.getDrhsQt()),
                  "swiglu_grad");
            }
            return withCopies({{{op.getLhs(), "x1"},
                                {op.getRhs(), "x2"},
                                {op.getGrad(), "dy"}},
                               {{op.getDlhs(), "dx1"}, {op.getDrhs(), "dx2"}},
                               [](ActivationMath &m, ArrayRef<Value> in) -> Ys {
                                 Value g1 = m.f.mul(in[2], in[1]),
                                       g2 = m.f.mul(in[2], in[0]);
                                 return {g1, g2, g2};
                               }},
                              op.getDrhsQ(), "dx2_q", op.getDrhsQt());
          }),
      def<ResidualAddOp>(
          "residual_add",
          [](ResidualAddOp op) {
            return withCopies(
                {{{op.getResidual(), "residual"}, {op.getBranch(), "branch"}},
                 {{op.getSum(), "sum"}},
                 [](ActivationMath &m, ArrayRef<Value> in) -> Ys {
                   Value s = m.f.add(in[0], in[1]);
                   return {s, s};
                 }},
                op.getSumQ(), "sum_q", Value());
          }),
      def<ResidualAddGradOp>(
          "residual_add_grad",
          [](ResidualAddGradOp op) {
            return withCopies(
                {{{op.getLhs(), "a"}, {op.getRhs(), "b"}},
                 {{op.getSum(), "sum"}},
                 [](ActivationMath &m, ArrayRef<Value> in) -> Ys {
                   Value s = m.f.add(in[0], in[1]);
                   return {s, s};
                 }},
                op.getSumQ(), "sum_q", Value());
          }),
      // Rotary ops take (x1, x2, cos1, cos2, sin1, sin2) and give (y1, y2);
      // products and sums are separate f32 operations, as the library's.
      def<RopeOp>("rope",
                  [](RopeOp op) {
                    return withHeads(
                        {{{op.getInput(), "x"},
                          {op.getCos(), "cos", /*table=*/true},
                          {op.getSin(), "sin", /*table=*/true}},
                         {{op.getResult(), "y"}},
                         [](ActivationMath &m, ArrayRef<Value> in) -> Ys {
                           F32Emitter &f = m.f;
                           Value p1 = f.mul(in[0], in[2]);
                           Value q1 = f.mul(in[1], in[4]);
                           Value p2 = f.mul(in[1], in[3]);
                           Value q2 = f.mul(in[0], in[5]);
                           Value y1 = f.sub(p1, q1);
                           Value y2 = f.add(p2, q2);
                           return {y1, y2};
                         }},
                        op, op.getInput());
                  }),
      def<RopeGradOp>("rope_grad",
                      [](RopeGradOp op) {
                        return withHeads(
                            {{{op.getGrad(), "dy"},
                              {op.getCos(), "cos", /*table=*/true},
                              {op.getSin(), "sin", /*table=*/true}},
                             {{op.getDx(), "dx"}},
                             [](ActivationMath &m, ArrayRef<Value> in) -> Ys {
                               F32Emitter &f = m.f;
                               Value p1 = f.mul(in[0], in[2]);
                               Value q1 = f.mul(in[1], in[5]);
                               Value p2 = f.mul(in[1], in[3]);
                               Value q2 = f.mul(in[0], in[4]);
                               Value dx1 = f.add(p1, q1);
                               Value dx2 = f.sub(p2, q2);
                               return {dx1, dx2};
                             }},
                            op, op.getGrad());
                      }),
  };
  return ops;
}

} // namespace

std::optional<PointwiseOpInfo> mlir::coat::describePointwiseOp(Operation *op) {
  for (const PointwiseOpDef &d : pointwiseOps())
    if (op->getName().getTypeID() == d.type) {
      PointwiseOpInfo info = d.describe(op);
      if (info.opName.empty()) // a fused form names itself
        info.opName = d.name;
      return info;
    }
  return std::nullopt;
}

std::string mlir::coat::listPointwiseOps() {
  std::string out = "coat.";
  llvm::interleave(
      pointwiseOps(), [&](const PointwiseOpDef &d) { out += d.name.str(); },
      [&] { out += ", "; });
  return out;
}
