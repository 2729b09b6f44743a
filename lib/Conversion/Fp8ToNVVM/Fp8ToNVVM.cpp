//===- Fp8ToNVVM.cpp - FP8 arith.truncf/extf to NVVM cvt ops --------------===//
//
// Upstream MLIR 22 cannot lower arith.truncf/extf to or from f8E4M3FN/f8E5M2
// for NVIDIA GPUs (convert-gpu-to-nvvm leaves them, serialization fails). The
// PTX instructions convert pairs, so vectors are processed two elements at a
// time and the results are reassembled with bitcasts and shuffles that LLVM
// folds into register moves.
//
// Byte order. PTX `cvt.rn.satfinite.e4m3x2.f32 d, a, b` puts a in the upper
// and b in the lower byte of d; the f16x2 forms map the lower half to the
// lower byte and back. LLVM keeps element 0 of a <2 x i8>/<2 x half> in the
// low bits and bitcasts little-endian, so element i of a vector always maps to
// byte i: vector element 2k goes to operand `b`, 2k+1 to operand `a`.
//
//===----------------------------------------------------------------------===//

#include "coat/Conversion/Fp8ToNVVM.h"
#include "coat/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATLOWERFP8TONVVM
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

bool isFp8(Type t) { return isa<Float8E4M3FNType, Float8E5M2Type>(t); }

/// Whether `t` is a scalar or a fixed-length vector (the shapes handled).
bool isScalarOrFixedVector(Type t) {
  auto vt = dyn_cast<VectorType>(t);
  return !vt || !vt.isScalable();
}

/// `t` with its element type replaced by `elem`.
Type withElementType(Type t, Type elem) {
  if (auto vt = dyn_cast<VectorType>(t))
    return vt.clone(elem);
  return elem;
}

SmallVector<int64_t> iota(int64_t begin, int64_t end) {
  SmallVector<int64_t> r;
  for (int64_t i = begin; i < end; ++i)
    r.push_back(i);
  return r;
}

/// Concatenates 1-D vectors with a balanced tree of shuffles.
Value concat(OpBuilder &b, Location loc, SmallVector<Value> parts) {
  while (parts.size() > 1) {
    SmallVector<Value> next;
    for (size_t i = 0; i + 1 < parts.size(); i += 2) {
      int64_t n = cast<VectorType>(parts[i].getType()).getNumElements() +
                  cast<VectorType>(parts[i + 1].getType()).getNumElements();
      next.push_back(vector::ShuffleOp::create(b, loc, parts[i], parts[i + 1],
                                               iota(0, n)));
    }
    if (parts.size() % 2)
      next.push_back(parts.back());
    parts = std::move(next);
  }
  return parts.front();
}

/// Applies `rowFn`, which maps a scalar or a 1-D vector to one of the same
/// length, to `src` of any fixed shape; n-D vectors are processed row by row.
/// The result has element type `resultElem` (an integer or f16 type, so that
/// the n-D accumulator can be a zero constant).
Value mapRows(OpBuilder &b, Location loc, Value src, Type resultElem,
              function_ref<Value(Value)> rowFn) {
  auto vt = dyn_cast<VectorType>(src.getType());
  if (!vt || vt.getRank() == 1)
    return rowFn(src);
  if (vt.getRank() == 0) {
    Value scalar = vector::ExtractOp::create(b, loc, src);
    return vector::BroadcastOp::create(b, loc, vt.clone(resultElem),
                                       rowFn(scalar));
  }
  auto resultType = vt.clone(resultElem);
  Value acc = arith::ConstantOp::create(
      b, loc, cast<TypedAttr>(b.getZeroAttr(resultType)));
  ArrayRef<int64_t> lead = vt.getShape().drop_back();
  SmallVector<int64_t> pos(lead.size(), 0);
  int64_t rows = 1;
  for (int64_t d : lead)
    rows *= d;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t d = lead.size() - 1, rem = r; d >= 0; --d) {
      pos[d] = rem % lead[d];
      rem /= lead[d];
    }
    Value row = vector::ExtractOp::create(b, loc, src, pos);
    acc = vector::InsertOp::create(b, loc, rowFn(row), acc, pos);
  }
  return acc;
}

/// Converts a pair to two FP8 bytes packed in an i16 (lo in the low byte).
/// `lo`/`hi` are f32 scalars, or `lo` is a vector<2xf16> and `hi` is null.
Value cvtPairToI16(OpBuilder &b, Location loc, Value lo, Value hi,
                   Type fp8) {
  Type i16 = b.getI16Type();
  if (!hi)
    return NVVM::ConvertF16x2ToF8x2Op::create(b, loc, i16, lo,
                                              /*relu=*/false, fp8);
  return NVVM::ConvertF32x2ToF8x2Op::create(
      b, loc, i16, /*a=*/hi, /*b=*/lo, NVVM::FPRoundingMode::RN,
      NVVM::SaturationMode::SATFINITE, /*relu=*/false, fp8);
}

/// f32/f16 scalar or 1-D vector -> i8 scalar or vector of FP8 codes.
Value truncRowToBytes(OpBuilder &b, Location loc, Value row, Type fp8) {
  Type srcElem = getElementTypeOrSelf(row.getType());
  bool isF16 = srcElem.isF16();
  auto vt = dyn_cast<VectorType>(row.getType());
  // The partner of an unpaired element; its byte is dropped.
  Value zero;
  if (!vt || vt.getNumElements() % 2)
    zero = arith::ConstantOp::create(
        b, loc, cast<TypedAttr>(b.getZeroAttr(srcElem)));
  if (!vt) {
    Value packed =
        isF16 ? cvtPairToI16(b, loc,
                             vector::FromElementsOp::create(
                                 b, loc, VectorType::get({2}, srcElem),
                                 ValueRange{row, zero}),
                             {}, fp8)
              : cvtPairToI16(b, loc, row, zero, fp8);
    return arith::TruncIOp::create(b, loc, b.getI8Type(), packed);
  }

  int64_t n = vt.getNumElements();
  int64_t pairs = (n + 1) / 2;
  SmallVector<Value> packed;
  for (int64_t p = 0; p < pairs; ++p) {
    bool full = 2 * p + 1 < n;
    if (isF16) {
      Value pair =
          full ? vector::ShuffleOp::create(b, loc, row, row,
                                           ArrayRef<int64_t>{2 * p, 2 * p + 1})
                     .getResult()
               : vector::FromElementsOp::create(
                     b, loc, VectorType::get({2}, srcElem),
                     ValueRange{vector::ExtractOp::create(b, loc, row, 2 * p),
                                zero})
                     .getResult();
      packed.push_back(cvtPairToI16(b, loc, pair, {}, fp8));
      continue;
    }
    Value lo = vector::ExtractOp::create(b, loc, row, 2 * p);
    Value hi = full ? vector::ExtractOp::create(b, loc, row, 2 * p + 1)
                          .getResult()
                    : zero;
    packed.push_back(cvtPairToI16(b, loc, lo, hi, fp8));
  }
  Value words = vector::FromElementsOp::create(
      b, loc, VectorType::get({pairs}, b.getI16Type()), packed);
  Value bytes = vector::BitCastOp::create(
      b, loc, VectorType::get({2 * pairs}, b.getI8Type()), words);
  if (2 * pairs != n)
    bytes = vector::ShuffleOp::create(b, loc, bytes, bytes, iota(0, n));
  return bytes;
}

/// i8 scalar or 1-D vector of FP8 codes -> f16 scalar or vector (exact).
Value extRowFromBytes(OpBuilder &b, Location loc, Value row, Type fp8) {
  auto pairType = VectorType::get({2}, b.getI8Type());
  auto halfPairType = VectorType::get({2}, b.getF16Type());
  auto cvt = [&](Value pair) -> Value {
    return NVVM::ConvertF8x2ToF16x2Op::create(b, loc, halfPairType, pair,
                                              /*relu=*/false, fp8);
  };
  auto vt = dyn_cast<VectorType>(row.getType());
  if (!vt) {
    Value pair = vector::BroadcastOp::create(b, loc, pairType, row);
    return vector::ExtractOp::create(b, loc, cvt(pair), 0);
  }

  int64_t n = vt.getNumElements();
  if (n == 2)
    return cvt(row);
  int64_t pairs = (n + 1) / 2;
  Value padded = row;
  if (n % 2) {
    SmallVector<int64_t> mask = iota(0, n);
    mask.push_back(0);
    padded = vector::ShuffleOp::create(b, loc, row, row, mask);
  }
  SmallVector<Value> halves;
  for (int64_t p = 0; p < pairs; ++p)
    halves.push_back(cvt(vector::ShuffleOp::create(
        b, loc, padded, padded, ArrayRef<int64_t>{2 * p, 2 * p + 1})));
  Value result = concat(b, loc, std::move(halves));
  if (2 * pairs != n)
    result = vector::ShuffleOp::create(b, loc, result, result, iota(0, n));
  return result;
}

/// arith.truncf f32/f16/bf16 -> f8E4M3FN/f8E5M2 => nvvm.convert.{f32x2,f16x2}.to.f8x2.
struct TruncFLowering : OpRewritePattern<arith::TruncFOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(arith::TruncFOp op,
                                PatternRewriter &rewriter) const override {
    Type dstElem = getElementTypeOrSelf(op.getType());
    Type srcElem = getElementTypeOrSelf(op.getIn().getType());
    if (!isFp8(dstElem))
      return rewriter.notifyMatchFailure(op, "not a truncation to FP8");
    if (!srcElem.isF32() && !srcElem.isF16() && !srcElem.isBF16())
      return rewriter.notifyMatchFailure(op, "source is not f32/f16/bf16");
    if (!isScalarOrFixedVector(op.getType()))
      return rewriter.notifyMatchFailure(op, "scalable vector");
    if (std::optional<arith::RoundingMode> mode = op.getRoundingmode();
        mode && *mode != arith::RoundingMode::to_nearest_even)
      return rewriter.notifyMatchFailure(op, "PTX rounds to nearest even");

    Location loc = op.getLoc();
    Value src = op.getIn();
    // bf16 -> f32 is exact; PTX converts bf16x2 only to ue8m0x2.
    if (srcElem.isBF16())
      src = arith::ExtFOp::create(
          rewriter, loc, withElementType(src.getType(), rewriter.getF32Type()),
          src);
    Value bytes = mapRows(rewriter, loc, src, rewriter.getI8Type(),
                          [&](Value row) {
                            return truncRowToBytes(rewriter, loc, row, dstElem);
                          });
    rewriter.replaceOpWithNewOp<arith::BitcastOp>(op, op.getType(), bytes);
    return success();
  }
};

/// arith.extf f8E4M3FN/f8E5M2 -> f16/f32/bf16 => nvvm.convert.f8x2.to.f16x2.
struct ExtFLowering : OpRewritePattern<arith::ExtFOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(arith::ExtFOp op,
                                PatternRewriter &rewriter) const override {
    Type srcElem = getElementTypeOrSelf(op.getIn().getType());
    Type dstElem = getElementTypeOrSelf(op.getType());
    if (!isFp8(srcElem))
      return rewriter.notifyMatchFailure(op, "not an extension from FP8");
    if (!dstElem.isF16() && !dstElem.isF32() && !dstElem.isBF16())
      return rewriter.notifyMatchFailure(op, "result is not f16/f32/bf16");
    if (!isScalarOrFixedVector(op.getType()))
      return rewriter.notifyMatchFailure(op, "scalable vector");

    Location loc = op.getLoc();
    Type srcType = op.getIn().getType();
    Value bytes = arith::BitcastOp::create(
        rewriter, loc, withElementType(srcType, rewriter.getI8Type()),
        op.getIn());
    Value result = mapRows(rewriter, loc, bytes, rewriter.getF16Type(),
                           [&](Value row) {
                             return extRowFromBytes(rewriter, loc, row,
                                                    srcElem);
                           });
    if (dstElem.isF16()) {
      rewriter.replaceOp(op, result);
      return success();
    }
    // f16 -> f32 is exact, and every FP8 value is a bf16, so the final
    // f32 -> bf16 truncation is exact as well.
    result = arith::ExtFOp::create(
        rewriter, loc, withElementType(srcType, rewriter.getF32Type()), result);
    if (dstElem.isBF16())
      result = arith::TruncFOp::create(rewriter, loc, op.getType(), result);
    rewriter.replaceOp(op, result);
    return success();
  }
};

struct CoatLowerFp8ToNVVMPass
    : mlir::coat::impl::CoatLowerFp8ToNVVMBase<CoatLowerFp8ToNVVMPass> {
  using Base::Base;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFp8ToNVVMPatterns(patterns);
    walkAndApplyPatterns(getOperation(), std::move(patterns));

    // convert-gpu-to-nvvm is a partial conversion: an FP8 conversion left
    // here would only fail at serialization, far from its source.
    WalkResult leftover = getOperation()->walk([](Operation *op) {
      if (!isa<arith::TruncFOp, arith::ExtFOp>(op))
        return WalkResult::advance();
      if (!isFp8(getElementTypeOrSelf(op->getOperand(0).getType())) &&
          !isFp8(getElementTypeOrSelf(op->getResult(0).getType())))
        return WalkResult::advance();
      op->emitOpError("has no NVVM lowering: FP8 conversions need an "
                      "f32/f16/bf16 <-> f8E4M3FN/f8E5M2 pair of fixed-length "
                      "types and round-to-nearest-even");
      return WalkResult::interrupt();
    });
    if (leftover.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace

void mlir::coat::populateFp8ToNVVMPatterns(RewritePatternSet &patterns) {
  patterns.add<TruncFLowering, ExtFLowering>(patterns.getContext());
}
