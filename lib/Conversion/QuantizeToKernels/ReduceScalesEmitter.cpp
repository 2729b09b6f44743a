//===- ReduceScalesEmitter.cpp - the scale kernel and its CPU twin --------===//
//
// GPU: every CTA reduces a slice of the maxima, combines its result into a
// two-word workspace with atomics, and the last CTA to finish runs the
// spec's scalar arithmetic, stores the scale and clears the workspace. CPU:
// a loop, then the same arithmetic.
//
//===----------------------------------------------------------------------===//

#include "ReduceScales.h"

#include "coat/Conversion/EmitHelpers.h"
#include "coat/Conversion/GroupKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace mlir::coat;

namespace {

/// The bit pattern of a NaN that orders above every other non-negative f32
/// when compared as unsigned integers (partial maxima are non-negative, so
/// their bits order like their values; a NaN anywhere makes the scale NaN,
/// as torch.max does in COAT).
constexpr uint32_t kNaNBits = 0x7fc00000u;

/// Runs the spec's rank-0 arithmetic on the scalar `max` (f32 or bf16, the
/// element type of the reduction) and returns the scalar the spec returns.
Value emitScalarOps(OpBuilder &b, const ScaleSpec &spec, Value max) {
  IRMapping map;
  map.map(ReduceScalesOp(spec.reduce).getResult(), max);
  for (Operation *op : spec.scalarOps) {
    Type elt = cast<ShapedType>(op->getResult(0).getType()).getElementType();
    if (auto c = dyn_cast<arith::ConstantOp>(op)) {
      auto dense = cast<DenseElementsAttr>(c.getValue());
      map.map(c.getResult(),
              arith::ConstantOp::create(b, op->getLoc(), elt,
                                        cast<TypedAttr>(
                                            dense.getSplatValue<Attribute>())));
      continue;
    }
    SmallVector<Value> operands;
    for (Value v : op->getOperands())
      operands.push_back(map.lookup(v));
    OperationState state(op->getLoc(), op->getName(), operands, {elt},
                         llvm::to_vector(op->getDiscardableAttrs()));
    state.propertiesAttr = op->getPropertiesAsAttribute();
    map.map(op->getResult(0), b.create(state)->getResult(0));
  }
  return map.lookup(spec.returned);
}

/// Stores the scale kernel's result, already in its element type (f32, or
/// bf16 kept as i16), at index 0. (storeScalarF32 narrows an f32 value; this
/// one arrives narrowed by the spec's own arithmetic.)
void storeResult(ImplicitLocOpBuilder &b, Value buffer, Value v) {
  if (!v.getType().isF32())
    v = arith::BitcastOp::create(b, laneStorageType(v.getType()), v);
  memref::StoreOp::create(b, v, buffer,
                          ValueRange{arith::ConstantIndexOp::create(b, 0)});
}

/// f32 `max` back to the reduction's element type (exact: it is one of the
/// inputs, or NaN).
Value fromF32(ImplicitLocOpBuilder &b, Value v, Type t) {
  if (t.isF32())
    return v;
  return arith::TruncFOp::create(b, t, v);
}

} // namespace

/// One CTA: max over its slice, then the last CTA finishes.
void ReduceScalesLowering::emitGpu(ImplicitLocOpBuilder &b,
                                   const ScaleSpec &spec, unsigned,
                                   gpu::GPUFuncOp kernel,
                                   const KernelArgs &args) const {
  Value maxima = args.lookup("maxima"), scale = args.lookup("scale"),
        workspace = args.lookup("workspace"), n = args.lookup("n");
  Type f32 = b.getF32Type(), i32 = b.getI32Type();
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  auto ci32 = [&](int64_t v) {
    return arith::ConstantIntOp::create(b, i32, v);
  };
  F32Emitter f{b};

  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  int64_t vector = scaleVector(spec.inputType);
  Value blockBase =
      arith::MulIOp::create(b, bid, cidx(blockSize * vector * kScaleSteps));
  // All loads are issued before any use, so each thread keeps kScaleSteps
  // 16-byte requests in flight.
  SmallVector<Value> values;
  int64_t bytes = kScaleAccessBytes;
  for (int64_t step = 0; step < kScaleSteps; ++step) {
    Value first = arith::AddIOp::create(
        b, blockBase,
        arith::MulIOp::create(
            b, arith::AddIOp::create(b, tid, cidx(step * blockSize)),
            cidx(vector)));
    Value firstI64 = arith::IndexCastOp::create(b, b.getI64Type(), first);
    Value end = arith::AddIOp::create(
        b, firstI64,
        arith::ConstantIntOp::create(b, b.getI64Type(), vector));
    Value full = arith::CmpIOp::create(b, arith::CmpIPredicate::sle, end, n);
    LaneAccess access{b, first, vector, full, n};
    llvm::append_range(
        values, access.loadF32(maxima, spec.inputType, llvm::Align(bytes)));
  }
  // Per thread: maxnum of the values and an "any NaN" flag. Masked-off
  // elements load as zero, the identity of a max of non-negative values.
  // A tensor's values count by their magnitude (its maxima's maximum).
  Value best = f.c(0.0);
  Value sawNaN = ci32(0);
  for (Value v : values) {
    if (spec.maximaOf)
      v = f.abs(v);
    best = f.maxnum(best, v);
    Value nan = arith::CmpFOp::create(b, arith::CmpFPredicate::UNO, v, v);
    sawNaN =
        arith::OrIOp::create(b, sawNaN, arith::ExtUIOp::create(b, i32, nan));
  }
  // Warp, then CTA (through workgroup memory), then across CTAs.
  GroupLane warp;
  warp.onGpu = true;
  warp.lanesPerGroup = 32;
  best = warp.allReduce(b, best, GroupReduceKind::MaxNum);
  sawNaN = warp.allReduce(b, sawNaN, GroupReduceKind::BitOr);
  Value bits = arith::SelectOp::create(
      b, arith::CmpIOp::create(b, arith::CmpIPredicate::ne, sawNaN, ci32(0)),
      ci32(kNaNBits), arith::BitcastOp::create(b, i32, best));

  Value perWarp = kernel.getWorkgroupAttributions()[0];
  Value laneId = arith::RemUIOp::create(b, tid, cidx(32));
  Value warpId = arith::DivUIOp::create(b, tid, cidx(32));
  Value isLane0 =
      arith::CmpIOp::create(b, arith::CmpIPredicate::eq, laneId, cidx(0));
  emitIfThen(b, isLane0, [&] {
    memref::StoreOp::create(b, bits, perWarp, ValueRange{warpId});
  });
  gpu::BarrierOp::create(b);
  Value isThread0 =
      arith::CmpIOp::create(b, arith::CmpIPredicate::eq, tid, cidx(0));
  auto ifThread0 = scf::IfOp::create(b, isThread0, /*withElse=*/false);
  b.setInsertionPointToStart(ifThread0.thenBlock());
  Value blockBits = ci32(0);
  for (int64_t w = 0; w < blockSize / 32; ++w)
    blockBits = arith::MaxUIOp::create(
        b, blockBits, memref::LoadOp::create(b, perWarp, ValueRange{cidx(w)}));
  // Unsigned max of the bit patterns is the max of non-negative values,
  // with the NaN pattern above all of them. The atomics are relaxed: a
  // GPU-scope fence orders this CTA's max before its count (and, in the
  // last CTA, the count before the read of the max), as __threadfence does
  // in CUDA's last-block reductions.
  memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::maxu, blockBits,
                              workspace, ValueRange{cidx(0)});
  NVVM::MembarOp::create(b, NVVM::MemScopeKind::GPU);
  Value done = memref::AtomicRMWOp::create(
      b, arith::AtomicRMWKind::addi, ci32(1), workspace, ValueRange{cidx(1)});
  Value grid = arith::IndexCastOp::create(
      b, i32, gpu::GridDimOp::create(b, gpu::Dimension::x));
  Value last = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, done,
                                     arith::SubIOp::create(b, grid, ci32(1)));
  auto ifLast = scf::IfOp::create(b, last, /*withElse=*/false);
  b.setInsertionPointToStart(ifLast.thenBlock());
  NVVM::MembarOp::create(b, NVVM::MemScopeKind::GPU);
  Value allBits = memref::AtomicRMWOp::create(
      b, arith::AtomicRMWKind::maxu, ci32(0), workspace, ValueRange{cidx(0)});
  // Leave the workspace as the next launch expects it: zero.
  memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::assign, ci32(0),
                              workspace, ValueRange{cidx(0)});
  memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::assign, ci32(0),
                              workspace, ValueRange{cidx(1)});
  Value max =
      fromF32(b, arith::BitcastOp::create(b, f32, allBits), spec.maximumType);
  storeResult(b, scale, emitScalarOps(b, spec, max));
}

void ReduceScalesLowering::emitCpu(ImplicitLocOpBuilder &b,
                                   const ScaleSpec &spec, unsigned,
                                   func::FuncOp, const KernelArgs &args) const {
  Value maxima = args.lookup("maxima"), scale = args.lookup("scale"),
        n = args.lookup("n");
  F32Emitter f{b};
  Value count = arith::IndexCastOp::create(b, b.getIndexType(), n);
  SmallVector<Value> max = emitFor(
      b, arith::ConstantIndexOp::create(b, 0), count,
      arith::ConstantIndexOp::create(b, 1), ValueRange{f.c(0.0)},
      [&](Value i, ValueRange acc) -> SmallVector<Value> {
        Value x = loadScalarF32(b, maxima, spec.inputType, i);
        if (spec.maximaOf)
          x = f.abs(x);
        // maximumf propagates NaN, like the GPU's NaN flag.
        return {arith::MaximumFOp::create(b, acc[0], x)};
      });
  storeResult(b, scale,
              emitScalarOps(b, spec, fromF32(b, max[0], spec.maximumType)));
}
