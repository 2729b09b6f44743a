//===- ExpandSoftExp2.cpp - 2^x on the FMA units ---------------------------===//
//
// Replaces each f32 `math.exp2` marked `coat.soft_exp2` with the sequence of
// coat/Numerics/SoftExp2.h: a range reduction by the 1.5 * 2^23 shifter, a
// degree-6 polynomial in fused multiply-adds and the power of two built in
// the exponent bits. Kernels whose special functions saturate the SFU mark
// their ex2 this way (coat-lower-pointwise{soft-exp2}).
//
//===----------------------------------------------------------------------===//

#include "coat/Conversion/GroupKernel.h"
#include "coat/Conversion/Passes.h"
#include "coat/Numerics/SoftExp2.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATEXPANDSOFTEXP2
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

/// The sequence for one f32 value (no fast-math flags: the shifter's
/// rounding must survive).
Value softExp2(ImplicitLocOpBuilder &b, Value x) {
  F32Emitter f{b};
  Type i32 = b.getI32Type();
  auto i32c = [&](int64_t v) {
    return arith::ConstantIntOp::create(b, i32, v);
  };
  Value xc = arith::MaximumFOp::create(
      b, arith::MinimumFOp::create(b, x, f.c(::coat::kSoftExp2Max)),
      f.c(::coat::kSoftExp2Min));
  Value shifter = f.c(::coat::kSoftExp2Shifter);
  Value t = f.add(f.sub(xc, f.c(0.5)), shifter);
  Value frac = f.sub(xc, f.sub(t, shifter));
  Value p = f.c(::coat::kSoftExp2Coefficients[::coat::kSoftExp2Degree]);
  for (int k = ::coat::kSoftExp2Degree - 1; k >= 0; --k)
    p = f.fma(p, frac, f.c(::coat::kSoftExp2Coefficients[k]));
  Value bits = arith::ShLIOp::create(b, arith::BitcastOp::create(b, i32, t),
                                     i32c(23));
  Value scale = arith::BitcastOp::create(
      b, b.getF32Type(), arith::AddIOp::create(b, bits, i32c(127 << 23)));
  return f.mul(p, scale);
}

struct CoatExpandSoftExp2Pass
    : mlir::coat::impl::CoatExpandSoftExp2Base<CoatExpandSoftExp2Pass> {
  void runOnOperation() override {
    SmallVector<math::Exp2Op> marked;
    bool failed = false;
    getOperation()->walk([&](Operation *op) {
      if (!op->hasAttr(kSoftExp2Attr))
        return;
      auto exp2 = dyn_cast<math::Exp2Op>(op);
      if (!exp2 || !exp2.getType().isF32()) {
        op->emitOpError() << "carries " << kSoftExp2Attr
                          << ", which only an f32 math.exp2 may";
        failed = true;
        return;
      }
      marked.push_back(exp2);
    });
    if (failed)
      return signalPassFailure();
    for (math::Exp2Op op : marked) {
      ImplicitLocOpBuilder b(op.getLoc(), op);
      op.getResult().replaceAllUsesWith(softExp2(b, op.getOperand()));
      op.erase();
    }
  }
};

} // namespace
