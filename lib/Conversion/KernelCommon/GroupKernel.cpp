//===- GroupKernel.cpp - shared scaffolding of grouped kernels ------------===//

#include "coat/Conversion/GroupKernel.h"
#include "coat/Conversion/EmitHelpers.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include "llvm/ADT/bit.h"

#include <limits>

using namespace mlir;
using namespace mlir::coat;

Value GroupLane::allReduce(ImplicitLocOpBuilder &b, Value v,
                           GroupReduceKind kind, int64_t clusterLanes) const {
  int64_t lanes = clusterLanes > 0 ? std::min(clusterLanes, lanesPerGroup)
                                   : lanesPerGroup;
  if (!onGpu || lanes <= 1)
    return v;
  // Lanes of a group are adjacent and groups are aligned inside the warp, so
  // xor offsets below L never leave the group (or the cluster).
  for (int64_t offset = lanes / 2; offset >= 1; offset /= 2) {
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
    case GroupReduceKind::MinUnsigned:
      v = arith::MinUIOp::create(b, v, other);
      break;
    case GroupReduceKind::BitOr:
      v = arith::OrIOp::create(b, v, other);
      break;
    }
  }
  return v;
}

GroupLane mlir::coat::makeFlatLane(ImplicitLocOpBuilder &b,
                                   int64_t elementsPerLane,
                                   int64_t lanesPerGroup, Value laneIndex,
                                   bool onGpu) {
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  GroupLane lane;
  lane.onGpu = onGpu;
  lane.elementsPerLane = elementsPerLane;
  lane.lanesPerGroup = lanesPerGroup;
  lane.groupSize = elementsPerLane * lanesPerGroup;
  lane.laneInGroup = arith::RemUIOp::create(b, laneIndex, cidx(lanesPerGroup));
  lane.group = arith::DivUIOp::create(b, laneIndex, cidx(lanesPerGroup));
  lane.firstElement =
      arith::MulIOp::create(b, laneIndex, cidx(elementsPerLane));
  return lane;
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
/// Marks an approximate op whose subnormals must survive (coat-fast-nvvm-math
/// then picks the non-flushing SFU variant).
static Value keepSubnormalsIf(bool mark, Value v) {
  if (mark)
    v.getDefiningOp()->setAttr("coat.keep_subnormals",
                               UnitAttr::get(v.getContext()));
  return v;
}
Value F32Emitter::div(Value x, Value y) {
  return keepSubnormalsIf(approx && !flushSubnormals,
                          arith::DivFOp::create(b, x, y, fastFlags(approx)));
}
Value F32Emitter::fma(Value x, Value y, Value z) {
  return math::FmaOp::create(b, x, y, z);
}
Value F32Emitter::abs(Value x) { return math::AbsFOp::create(b, x); }
Value F32Emitter::sqrt(Value x) {
  return keepSubnormalsIf(approx && !flushSubnormals,
                          math::SqrtOp::create(b, x, fastFlags(approx)));
}
Value F32Emitter::exp2(Value x) {
  return keepSubnormalsIf(approx && !flushSubnormals,
                          math::Exp2Op::create(b, x, fastFlags(approx)));
}
Value F32Emitter::log2(Value x) {
  return keepSubnormalsIf(approx && !flushSubnormals,
                          math::Log2Op::create(b, x, fastFlags(approx)));
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

Value F32Emitter::exp(Value x) { return math::ExpOp::create(b, x); }
Value F32Emitter::erf(Value x) { return math::ErfOp::create(b, x); }
Value F32Emitter::tanh(Value x) { return math::TanhOp::create(b, x); }
Value F32Emitter::roundTo(Value x, Type t) {
  if (t == x.getType())
    return x;
  Value narrow = arith::TruncFOp::create(b, t, x);
  return arith::ExtFOp::create(b, x.getType(), narrow);
}

Value mlir::coat::loadScalarF32(ImplicitLocOpBuilder &b, Value buffer,
                                Type logical, Value idx) {
  Value v = memref::LoadOp::create(b, buffer, ValueRange{idx});
  if (logical.isF32())
    return v;
  v = arith::BitcastOp::create(b, logical, v);
  return arith::ExtFOp::create(b, b.getF32Type(), v);
}

void mlir::coat::storeScalarF32(OpBuilder &b, Location loc, Value buffer,
                                Type logical, Value v, Value idx) {
  if (!logical.isF32()) {
    v = arith::TruncFOp::create(b, loc, logical, v);
    v = arith::BitcastOp::create(b, loc, laneStorageType(logical), v);
  }
  memref::StoreOp::create(b, loc, v, buffer, ValueRange{idx});
}

/// The least |x| that rounds (to nearest even) to infinity in `stored`:
/// half an ulp above the largest finite value, a tie that rounds up (its
/// last bit is odd). NaN compares unordered, so `uge` holds for it too.
static float overflowThreshold(Type stored) {
  if (stored.isBF16())
    return llvm::bit_cast<float>(uint32_t{0x7F7F8000});
  if (stored.isF16())
    return 65520.0f;
  return std::numeric_limits<float>::infinity();
}

Value mlir::coat::vectorStoresNonFinite(ImplicitLocOpBuilder &b, Value values,
                                        Type stored, Value valid) {
  auto type = cast<VectorType>(values.getType());
  Value limit = arith::ConstantOp::create(
      b, DenseElementsAttr::get(type, b.getF32FloatAttr(overflowThreshold(stored))));
  Value bad = arith::CmpFOp::create(b, arith::CmpFPredicate::UGE,
                                    math::AbsFOp::create(b, values), limit);
  Value any = vector::ReductionOp::create(b, vector::CombiningKind::OR, bad);
  return valid ? arith::AndIOp::create(b, any, valid).getResult() : any;
}

Value mlir::coat::storesNonFinite(F32Emitter &f, ArrayRef<Value> xs,
                                  Type stored, ArrayRef<Value> valid) {
  ImplicitLocOpBuilder &b = f.b;
  Value limit = f.c(overflowThreshold(stored));
  Value any;
  for (auto [i, x] : llvm::enumerate(xs)) {
    Value bad = arith::CmpFOp::create(b, arith::CmpFPredicate::UGE, f.abs(x),
                                      limit);
    if (!valid.empty())
      bad = arith::AndIOp::create(b, bad, valid[i]);
    any = any ? arith::OrIOp::create(b, any, bad).getResult() : bad;
  }
  return any ? any : arith::ConstantIntOp::create(b, 0, 1).getResult();
}

void mlir::coat::raiseFiniteFlag(ImplicitLocOpBuilder &b, Value bad,
                                 Value flag) {
  emitIfThen(b, bad, [&] {
    memref::StoreOp::create(
        b, arith::ConstantIntOp::create(b, 1, 32).getResult(), flag,
        ValueRange{arith::ConstantIndexOp::create(b, 0).getResult()});
  });
}

std::string mlir::coat::finiteFlagArgName(StringRef out) {
  return ("finite_" + out).str();
}

Value mlir::coat::groupMaxAbs(F32Emitter &f, const GroupLane &lane,
                              ArrayRef<Value> xs) {
  Value m = f.c(0.0);
  for (Value x : xs)
    m = f.maxnum(m, f.abs(x));
  return lane.allReduce(f.b, m, GroupReduceKind::MaxNum);
}

QuantizedLane mlir::coat::quantizeGroup(F32Emitter &f, const GroupLane &lane,
                                        ArrayRef<Value> x,
                                        const GroupQuantization &q) {
  ImplicitLocOpBuilder &b = f.b;
  Value amax = groupMaxAbs(f, lane, x);
  Value s = arith::DivFOp::create(b, f.add(amax, f.c(q.eps)), f.c(q.fp8Max));
  s = f.roundTo(s, q.scaleType);
  QuantizedLane out{s, {}};
  if (q.division == ScaleDivision::Exact) {
    out.scaled = emitSharedDivisions(f, x, s);
    return out;
  }
  F32Emitter inverter{b, /*approx=*/q.division == ScaleDivision::Approximate};
  Value inv = inverter.div(f.c(1.0), s);
  for (Value xi : x)
    out.scaled.push_back(f.mul(xi, inv));
  return out;
}

/// divideByDivisorInRange with `isInf` = (s == +inf) given.
static SmallVector<Value> divideInRange(F32Emitter &f, ArrayRef<Value> x,
                                        Value s, Value isInf,
                                        DivisionUse use) {
  ImplicitLocOpBuilder &b = f.b;
  const float inf = std::numeric_limits<float>::infinity();
  // IEEE 1/s: the correction needs the correctly rounded reciprocal.
  Value r = arith::DivFOp::create(b, f.c(1.0), s);
  // With s = +inf, q = x * 0 already is x / s; fma(-n, 0, q) keeps it.
  Value sFinite = f.select(isInf, f.c(0.0), s);
  // The residual is formed negated, q*s - x, so that x = -0 gives
  // -0 + -0 = -0 in the last step (x - q*s would give +0).
  SmallVector<Value> q;
  for (Value xi : x) {
    Value q0 = f.mul(xi, r);
    Value negE = f.fma(q0, sFinite, arith::NegFOp::create(b, xi));
    Value qi = f.fma(arith::NegFOp::create(b, negE), r, q0);
    if (use == DivisionUse::Fp8Codes)
      qi = f.select(f.eq(f.abs(q0), f.c(inf)), q0, qi);
    q.push_back(qi);
  }
  return q;
}

SmallVector<Value> mlir::coat::divideByDivisorInRange(F32Emitter &f,
                                                      ArrayRef<Value> x,
                                                      Value s,
                                                      DivisionUse use) {
  return divideInRange(
      f, x, s, f.eq(s, f.c(std::numeric_limits<float>::infinity())), use);
}

SmallVector<Value> mlir::coat::divideBySharedDivisor(F32Emitter &f,
                                                     ArrayRef<Value> x,
                                                     Value s,
                                                     DivisionUse use) {
  ImplicitLocOpBuilder &b = f.b;
  const float inf = std::numeric_limits<float>::infinity();
  bool codes = use == DivisionUse::Fp8Codes;
  // Positive divisors only: with s < 0, x = +0 would give +0 (scales are
  // positive; a negative s takes the IEEE branch).
  Value isInf = f.eq(s, f.c(inf));
  Value normalRange = arith::AndIOp::create(
      b, f.le(f.c(codes ? 0x1p-80 : 0x1p-126), s), f.le(s, f.c(0x1p126)));
  Value isNan = arith::CmpFOp::create(b, arith::CmpFPredicate::UNO, s, s);
  Value fast = arith::OrIOp::create(
      b, normalRange, arith::OrIOp::create(b, isInf, isNan));
  SmallVector<Type> types(x.size(), b.getF32Type());
  auto branch = scf::IfOp::create(b, types, fast, /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(branch.thenBlock());
    scf::YieldOp::create(b, divideInRange(f, x, s, isInf, use));
    b.setInsertionPointToStart(branch.elseBlock());
    SmallVector<Value> exact;
    for (Value xi : x)
      exact.push_back(arith::DivFOp::create(b, xi, s));
    scf::YieldOp::create(b, exact);
  }
  return SmallVector<Value>(branch.getResults());
}

StringRef mlir::coat::stringifyDivisionUse(DivisionUse use) {
  return use == DivisionUse::Fp8Codes ? "fp8_codes" : "exact";
}

std::optional<DivisionUse> mlir::coat::parseDivisionUse(StringRef spelling) {
  for (DivisionUse use : {DivisionUse::Exact, DivisionUse::Fp8Codes})
    if (spelling == stringifyDivisionUse(use))
      return use;
  return std::nullopt;
}

SmallVector<Value> mlir::coat::emitSharedDivisions(F32Emitter &f,
                                                   ArrayRef<Value> x, Value s,
                                                   DivisionUse use) {
  StringAttr contract = f.b.getStringAttr(stringifyDivisionUse(use));
  SmallVector<Value> q;
  for (Value xi : x) {
    auto div = arith::DivFOp::create(f.b, xi, s);
    div->setAttr(kSharedDivisorAttr, contract);
    q.push_back(div);
  }
  return q;
}

Type mlir::coat::laneStorageType(Type logical) {
  if (logical.isF32())
    return logical;
  return IntegerType::get(logical.getContext(),
                          logical.getIntOrFloatBitWidth());
}

Value LaneAccess::tailMask(OpBuilder &nb, Location loc) const {
  auto i64Vec = VectorType::get({elements}, nb.getI64Type());
  SmallVector<int64_t> iota(elements);
  for (int64_t i = 0; i < elements; ++i)
    iota[i] = i;
  Value steps = arith::ConstantOp::create(
      nb, loc, DenseElementsAttr::get(i64Vec, ArrayRef<int64_t>(iota)));
  Value firstI64 =
      arith::IndexCastOp::create(nb, loc, nb.getI64Type(), first);
  Value idx = arith::AddIOp::create(
      nb, loc, vector::BroadcastOp::create(nb, loc, i64Vec, firstI64), steps);
  Value lim = vector::BroadcastOp::create(nb, loc, i64Vec, limit);
  return arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::ult, idx, lim);
}

SmallVector<Value> LaneAccess::loadF32(Value buffer, Type logical,
                                       llvm::MaybeAlign align) const {
  Type elt = cast<MemRefType>(buffer.getType()).getElementType();
  auto vecType = VectorType::get({elements}, elt);
  Value zero = arith::ConstantOp::create(b, b.getZeroAttr(elt));
  auto ifOp = scf::IfOp::create(
      b, full,
      [&](OpBuilder &nb, Location loc) {
        Value v = vector::LoadOp::create(nb, loc, vecType, buffer,
                                         ValueRange{first},
                                         /*nontemporal=*/false, align);
        scf::YieldOp::create(nb, loc, v);
      },
      [&](OpBuilder &nb, Location loc) {
        Value pass = vector::BroadcastOp::create(nb, loc, vecType, zero);
        if (!limit) {
          scf::YieldOp::create(nb, loc, pass);
          return;
        }
        Value v = vector::MaskedLoadOp::create(nb, loc, vecType, buffer,
                                               ValueRange{first},
                                               tailMask(nb, loc), pass);
        scf::YieldOp::create(nb, loc, v);
      });
  Value vec = ifOp.getResult(0);
  if (elt != logical)
    vec = arith::BitcastOp::create(b, VectorType::get({elements}, logical),
                                   vec);
  if (!logical.isF32())
    vec = arith::ExtFOp::create(
        b, VectorType::get({elements}, b.getF32Type()), vec);
  SmallVector<Value> out;
  for (int64_t i = 0; i < elements; ++i)
    out.push_back(vector::ExtractOp::create(b, vec, ArrayRef<int64_t>{i}));
  return out;
}

void LaneAccess::storeF32(Value buffer, ArrayRef<Value> values, Type logical,
                          llvm::MaybeAlign align) const {
  Type elt = cast<MemRefType>(buffer.getType()).getElementType();
  Value vec = vector::FromElementsOp::create(
      b, VectorType::get({elements}, b.getF32Type()), values);
  if (!logical.isF32())
    vec = arith::TruncFOp::create(b, VectorType::get({elements}, logical),
                                  vec);
  if (elt != logical)
    vec = arith::BitcastOp::create(b, VectorType::get({elements}, elt), vec);
  auto whole = [&](OpBuilder &nb, Location loc) {
    vector::StoreOp::create(nb, loc, vec, buffer, ValueRange{first},
                            /*nontemporal=*/false, align);
    scf::YieldOp::create(nb, loc);
  };
  if (!limit) {
    scf::IfOp::create(b, full, whole);
    return;
  }
  scf::IfOp::create(
      b, full, whole,
      [&](OpBuilder &nb, Location loc) {
        vector::MaskedStoreOp::create(nb, loc, buffer, ValueRange{first},
                                      tailMask(nb, loc), vec);
        scf::YieldOp::create(nb, loc);
      });
}
