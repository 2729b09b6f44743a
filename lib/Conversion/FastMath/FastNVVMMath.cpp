//===- FastNVVMMath.cpp - afn special functions to SFU intrinsics ---------===//

#include "coat/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATFASTNVVMMATH
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;

namespace {

bool isApproxF32(Operation *op, arith::FastMathFlags flags) {
  return op->getResult(0).getType().isF32() &&
         bitEnumContainsAll(flags, arith::FastMathFlags::afn);
}

Value callSfu(PatternRewriter &rewriter, Location loc, StringRef intrinsic,
              Value x) {
  return LLVM::CallIntrinsicOp::create(rewriter, loc, rewriter.getF32Type(),
                                       rewriter.getStringAttr(intrinsic),
                                       ValueRange{x})
      .getResult(0);
}

/// Ops marked `coat.keep_subnormals` get the non-flushing instruction.
bool keepsSubnormals(Operation *op) {
  return op->hasAttr("coat.keep_subnormals");
}

/// math.{exp2,log2,sqrt} with afn -> the SFU intrinsic of the same function.
template <typename MathOp>
struct UnarySfuLowering : OpRewritePattern<MathOp> {
  UnarySfuLowering(MLIRContext *ctx, StringRef name)
      : OpRewritePattern<MathOp>(ctx), name(name) {}
  LogicalResult matchAndRewrite(MathOp op,
                                PatternRewriter &rewriter) const override {
    if (!isApproxF32(op, op.getFastmath()))
      return failure();
    // ex2 is overloaded on its type in LLVM 22; lg2 and sqrt are not.
    StringRef keep = name == "ex2" ? ".f32" : ".f";
    std::string intrinsic = ("llvm.nvvm." + name + ".approx" +
                             (keepsSubnormals(op) ? keep : StringRef(".ftz.f")))
                                .str();
    rewriter.replaceOp(op, callSfu(rewriter, op.getLoc(), intrinsic,
                                   op.getOperand()));
    return success();
  }
  StringRef name;
};

/// arith.divf with afn -> x * rcp(y) (just rcp(y) when x is 1).
struct DivFSfuLowering : OpRewritePattern<arith::DivFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::DivFOp op,
                                PatternRewriter &rewriter) const override {
    if (!isApproxF32(op, op.getFastmath()))
      return failure();
    if (keepsSubnormals(op)) {
      rewriter.replaceOp(
          op, LLVM::CallIntrinsicOp::create(
                  rewriter, op.getLoc(), rewriter.getF32Type(),
                  rewriter.getStringAttr("llvm.nvvm.div.approx.f"),
                  ValueRange{op.getLhs(), op.getRhs()})
                  .getResult(0));
      return success();
    }
    Value rcp = callSfu(rewriter, op.getLoc(), "llvm.nvvm.rcp.approx.ftz.f",
                        op.getRhs());
    FloatAttr one;
    if (matchPattern(op.getLhs(), m_Constant(&one)) &&
        one.getValue().isExactlyValue(1.0)) {
      rewriter.replaceOp(op, rcp);
      return success();
    }
    rewriter.replaceOpWithNewOp<arith::MulFOp>(op, op.getLhs(), rcp);
    return success();
  }
};

struct CoatFastNVVMMathPass
    : mlir::coat::impl::CoatFastNVVMMathBase<CoatFastNVVMMathPass> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    RewritePatternSet patterns(ctx);
    patterns.add<UnarySfuLowering<math::Exp2Op>>(ctx, "ex2");
    patterns.add<UnarySfuLowering<math::Log2Op>>(ctx, "lg2");
    patterns.add<UnarySfuLowering<math::SqrtOp>>(ctx, "sqrt");
    patterns.add<DivFSfuLowering>(ctx);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
