//===- ExpandFp8Conversions.cpp - f8 truncf/extf as integer arithmetic ----===//
//
// Targets without FP8 conversion instructions (the CPU through LLVM) get the
// conversions as bit manipulation that computes exactly what PTX
// `cvt.rn.satfinite.{e4m3,e5m2}x2.f32` computes: round to nearest even,
// finite overflow and infinities saturate to the largest finite code, NaN
// stays NaN, subnormals are kept.
//
//===----------------------------------------------------------------------===//

#include "coat/Conversion/Passes.h"
#include "coat/Dialect/CoatDialect.h"
#include "coat/Numerics/Fp8.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace mlir::coat {
#define GEN_PASS_DEF_COATEXPANDFP8CONVERSIONS
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

/// `t` with its element type replaced (keeps vector shapes).
Type withElementType(Type t, Type elt) {
  if (auto vt = dyn_cast<VectorType>(t))
    return vt.clone(elt);
  return elt;
}

/// Integer/float constants splatted to the shape of `like`.
struct BitEmitter {
  ImplicitLocOpBuilder &b;
  Type i32, f32;

  Value i(int64_t v) {
    Attribute a = b.getI32IntegerAttr(static_cast<int32_t>(v));
    if (auto vt = dyn_cast<VectorType>(i32))
      a = SplatElementsAttr::get(vt, a);
    return arith::ConstantOp::create(b, cast<TypedAttr>(a));
  }
  Value f(double v) {
    Attribute a = b.getF32FloatAttr(static_cast<float>(v));
    if (auto vt = dyn_cast<VectorType>(f32))
      a = SplatElementsAttr::get(vt, a);
    return arith::ConstantOp::create(b, cast<TypedAttr>(a));
  }
  Value cmp(arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, p, x, y);
  }
  Value sel(Value c, Value x, Value y) {
    return arith::SelectOp::create(b, c, x, y);
  }
  Value shl(Value x, int64_t s) { return arith::ShLIOp::create(b, x, i(s)); }
  Value shr(Value x, int64_t s) { return arith::ShRUIOp::create(b, x, i(s)); }
  Value band(Value x, int64_t m) { return arith::AndIOp::create(b, x, i(m)); }
  Value bor(Value x, Value y) { return arith::OrIOp::create(b, x, y); }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, x, y); }
  Value sub(Value x, Value y) { return arith::SubIOp::create(b, x, y); }
};

/// arith.truncf {f32,f16,bf16} -> f8.
struct TruncFToFp8Lowering : OpRewritePattern<arith::TruncFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::TruncFOp op,
                                PatternRewriter &rewriter) const override {
    Type dstElt = getElementTypeOrSelf(op.getType());
    std::optional<::coat::Fp8Format> fmt = getFp8Format(dstElt);
    if (!fmt)
      return failure();
    const ::coat::Fp8Traits tr = ::coat::getFp8Traits(*fmt);
    Type srcType = op.getIn().getType();
    if (!getElementTypeOrSelf(srcType).isF32() &&
        !getElementTypeOrSelf(srcType).isF16() &&
        !getElementTypeOrSelf(srcType).isBF16())
      return rewriter.notifyMatchFailure(op, "source is not f32/f16/bf16");
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    Type f32T = withElementType(srcType, b.getF32Type());
    Type i32T = withElementType(srcType, b.getI32Type());
    BitEmitter e{b, i32T, f32T};
    Value x = op.getIn();
    if (!getElementTypeOrSelf(srcType).isF32())
      x = arith::ExtFOp::create(b, f32T, x);

    const int mant = tr.mantissaBits, bias = tr.exponentBias;
    Value u = arith::BitcastOp::create(b, i32T, x);
    Value sign = e.band(e.shr(u, 24), 0x80);
    Value a = e.band(u, 0x7fffffff);
    Value isNan = e.cmp(arith::CmpIPredicate::ugt, a, e.i(0x7f800000));

    // Normal results: round the f32 mantissa to `mant` bits (ties to even)
    // and re-bias the exponent. Overflow lands above the max code.
    int shift = 23 - mant;
    Value lsb = e.band(e.shr(a, shift), 1);
    Value rounded = e.add(e.add(a, e.i((int64_t(1) << (shift - 1)) - 1)), lsb);
    Value normal = e.sub(e.shr(rounded, shift),
                         e.i(int64_t(127 - bias) << mant));

    // Subnormal results: |x| * 2^(bias-1+mant) < 2^mant is exact; rounding
    // it to an integer gives the code (rolling over into the min normal).
    Value absX = arith::BitcastOp::create(b, f32T, a);
    Value scaled = arith::MulFOp::create(
        b, absX, e.f(std::ldexp(1.0, bias - 1 + mant)));
    Value sub = arith::FPToUIOp::create(
        b, i32T, math::RoundEvenOp::create(b, scaled));
    Value isSub = e.cmp(arith::CmpIPredicate::ult, a,
                        e.i(int64_t(127 + 1 - bias) << 23));
    Value mag = e.sel(isSub, sub, normal);
    mag = arith::MinUIOp::create(b, mag, e.i(::coat::fp8MaxFiniteCode(*fmt)));
    mag = e.sel(isNan, e.i(::coat::kFp8CanonicalNaN), mag);
    Value code = e.bor(sign, mag);
    Type i8T = withElementType(srcType, b.getI8Type());
    Value byte = arith::TruncIOp::create(b, i8T, code);
    rewriter.replaceOpWithNewOp<arith::BitcastOp>(op, op.getType(), byte);
    return success();
  }
};

/// arith.extf f8 -> {f32,f16,bf16}.
struct ExtFFromFp8Lowering : OpRewritePattern<arith::ExtFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::ExtFOp op,
                                PatternRewriter &rewriter) const override {
    Type srcElt = getElementTypeOrSelf(op.getIn().getType());
    std::optional<::coat::Fp8Format> fmt = getFp8Format(srcElt);
    if (!fmt)
      return failure();
    const ::coat::Fp8Traits tr = ::coat::getFp8Traits(*fmt);
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    Type srcType = op.getIn().getType();
    Type f32T = withElementType(srcType, b.getF32Type());
    Type i32T = withElementType(srcType, b.getI32Type());
    Type i8T = withElementType(srcType, b.getI8Type());
    BitEmitter e{b, i32T, f32T};
    const int mant = tr.mantissaBits, bias = tr.exponentBias;
    const int64_t expMask = (int64_t(1) << tr.exponentBits) - 1;

    Value byte = arith::BitcastOp::create(b, i8T, op.getIn());
    Value c = arith::ExtUIOp::create(b, i32T, byte);
    Value sign = e.shl(e.band(c, 0x80), 24);
    Value expo = e.band(e.shr(c, mant), expMask);
    Value man = e.band(c, (int64_t(1) << mant) - 1);
    Value normal = e.bor(e.shl(e.add(expo, e.i(127 - bias)), 23),
                         e.shl(man, 23 - mant));
    Value subValue = arith::MulFOp::create(
        b, arith::UIToFPOp::create(b, f32T, man),
        e.f(std::ldexp(1.0, 1 - bias - mant)));
    Value sub = arith::BitcastOp::create(b, i32T, subValue);
    Value isSub = e.cmp(arith::CmpIPredicate::eq, expo, e.i(0));
    Value mag = e.sel(isSub, sub, normal);
    if (tr.hasInfinity) {
      Value special = e.cmp(arith::CmpIPredicate::eq, expo, e.i(expMask));
      Value isInf = e.cmp(arith::CmpIPredicate::eq, man, e.i(0));
      Value specialBits = e.sel(isInf, e.i(0x7f800000), e.i(0x7fc00000));
      mag = e.sel(special, specialBits, mag);
    } else {
      Value isNan = e.cmp(arith::CmpIPredicate::eq, e.band(c, 0x7F), e.i(0x7F));
      mag = e.sel(isNan, e.i(0x7fc00000), mag);
    }
    Value f = arith::BitcastOp::create(b, f32T, e.bor(sign, mag));
    if (!getElementTypeOrSelf(op.getType()).isF32())
      f = arith::TruncFOp::create(b, op.getType(), f);
    rewriter.replaceOp(op, f);
    return success();
  }
};

struct CoatExpandFp8ConversionsPass
    : mlir::coat::impl::CoatExpandFp8ConversionsBase<
          CoatExpandFp8ConversionsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<TruncFToFp8Lowering, ExtFFromFp8Lowering>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
