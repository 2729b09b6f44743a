//===- GroupKernel.cpp - shared scaffolding of grouped kernels ------------===//

#include "coat/Conversion/GroupKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"

using namespace mlir;
using namespace mlir::coat;

Value GroupLane::allReduce(ImplicitLocOpBuilder &b, Value v,
                           GroupReduceKind kind) const {
  if (!onGpu || lanesPerGroup == 1)
    return v;
  // Lanes of a group are adjacent and groups are aligned inside the warp, so
  // xor offsets below L never leave the group.
  for (int64_t offset = lanesPerGroup / 2; offset >= 1; offset /= 2) {
    auto shuffle = gpu::ShuffleOp::create(b, v, static_cast<int32_t>(offset),
                                          /*width=*/32, gpu::ShuffleMode::XOR);
    Value other = shuffle.getShuffleResult();
    switch (kind) {
    case GroupReduceKind::MaxNum:
      v = arith::MaxNumFOp::create(b, v, other);
      break;
    case GroupReduceKind::MinNum:
      v = arith::MinNumFOp::create(b, v, other);
      break;
    case GroupReduceKind::BitOr:
      v = arith::OrIOp::create(b, v, other);
      break;
    }
  }
  return v;
}

Value F32Emitter::c(double v) {
  return arith::ConstantOp::create(b, b.getF32FloatAttr(static_cast<float>(v)));
}
Value F32Emitter::add(Value x, Value y) { return arith::AddFOp::create(b, x, y); }
Value F32Emitter::sub(Value x, Value y) { return arith::SubFOp::create(b, x, y); }
Value F32Emitter::mul(Value x, Value y) { return arith::MulFOp::create(b, x, y); }
static arith::FastMathFlags fastFlags(bool approx) {
  return approx ? arith::FastMathFlags::afn : arith::FastMathFlags::none;
}
Value F32Emitter::div(Value x, Value y) {
  return arith::DivFOp::create(b, x, y, fastFlags(approx));
}
Value F32Emitter::fma(Value x, Value y, Value z) {
  return math::FmaOp::create(b, x, y, z);
}
Value F32Emitter::abs(Value x) { return math::AbsFOp::create(b, x); }
Value F32Emitter::sqrt(Value x) {
  return math::SqrtOp::create(b, x, fastFlags(approx));
}
Value F32Emitter::exp2(Value x) {
  return math::Exp2Op::create(b, x, fastFlags(approx));
}
Value F32Emitter::log2(Value x) {
  return math::Log2Op::create(b, x, fastFlags(approx));
}
Value F32Emitter::floor(Value x) { return math::FloorOp::create(b, x); }
Value F32Emitter::pow(Value x, Value y) { return math::PowFOp::create(b, x, y); }
Value F32Emitter::copysign(Value mag, Value sign) {
  return math::CopySignOp::create(b, mag, sign);
}
Value F32Emitter::maxnum(Value x, Value y) {
  return arith::MaxNumFOp::create(b, x, y);
}
Value F32Emitter::minnum(Value x, Value y) {
  return arith::MinNumFOp::create(b, x, y);
}
Value F32Emitter::select(Value cond, Value x, Value y) {
  return arith::SelectOp::create(b, cond, x, y);
}
Value F32Emitter::lt(Value x, Value y) {
  return arith::CmpFOp::create(b, arith::CmpFPredicate::OLT, x, y);
}
Value F32Emitter::le(Value x, Value y) {
  return arith::CmpFOp::create(b, arith::CmpFPredicate::OLE, x, y);
}
Value F32Emitter::gt(Value x, Value y) {
  return arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, x, y);
}
Value F32Emitter::eq(Value x, Value y) {
  return arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, x, y);
}
Value F32Emitter::isFinite(Value x) {
  // |x| < inf is false for NaN and for +-inf.
  return lt(abs(x), c(std::numeric_limits<float>::infinity()));
}
