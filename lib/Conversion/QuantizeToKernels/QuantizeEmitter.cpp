//===- QuantizeEmitter.cpp - activation kernels and their CPU twins -------===//
//
// Flat kernels (grouped or element-wise quantize, dequantize, absmax): the
// lanes of GroupLane cover rows*cols elements with one masked tail. Tile
// kernels (quantize + transpose, per_block<BxB> quantize): one T x T tile
// per CTA iteration, the transposed copy through workgroup memory. The CPU
// twins are loops over the same math.
//
//===----------------------------------------------------------------------===//

#include "Quantize.h"

#include "coat/Conversion/EmitHelpers.h"
#include "coat/Conversion/GroupKernel.h"
#include "coat/Conversion/Passes.h"
#include "coat/Dialect/CoatDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::coat;

namespace {

//===----------------------------------------------------------------------===//
// Flat (grouped or element-wise) kernels
//===----------------------------------------------------------------------===//

/// Emits the body of one lane of a flat kernel.
class FlatLaneEmitter {
public:
  FlatLaneEmitter(ImplicitLocOpBuilder &b, const ActSpec &spec,
                  const GroupLane &lane, const KernelArgs &args,
                  bool approxDivision)
      : b(b), f(F32Emitter{b, /*approx=*/approxDivision}), spec(spec),
        lane(lane), args(args), approxDivision(approxDivision) {}

  void emit();

private:
  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  /// A lane's chunk starts at a multiple of E elements of a 16-byte aligned
  /// buffer (docs/manifest.md), so it is aligned to E * sizeof(elt) <= 16.
  llvm::MaybeAlign alignment(Value buffer) const {
    Type elt = cast<MemRefType>(buffer.getType()).getElementType();
    int64_t bytes = lane.elementsPerLane * elt.getIntOrFloatBitWidth() / 8;
    return llvm::MaybeAlign(
        std::min<int64_t>(std::max<int64_t>(bytes, 1), 16));
  }
  /// Stores `v` to buffer[group] from the group's first lane.
  void storeFromLeader(Value buffer, Type logical, Value v) {
    scf::IfOp::create(b, isGroupLeader, [&](OpBuilder &nb, Location loc) {
      storeScalarF32(nb, loc, buffer, logical, v, lane.group);
      scf::YieldOp::create(nb, loc);
    });
  }

  SmallVector<Value> dequantize(const LaneAccess &access, Value codes,
                                Type fp8, Value scale, Type scaleType,
                                bool perTensor);
  SmallVector<Value> divideByGivenScale(ArrayRef<Value> x);

  ImplicitLocOpBuilder &b;
  F32Emitter f;
  const ActSpec &spec;
  const GroupLane &lane;
  const KernelArgs &args;
  bool approxDivision;
  Value isGroupLeader;
  Value nIndex; ///< rows * cols
};

/// The lane's codes in `codes` times their scale in `scale` (the tensor's
/// one, or the lane's group's).
SmallVector<Value> FlatLaneEmitter::dequantize(const LaneAccess &access,
                                               Value codes, Type fp8,
                                               Value scale, Type scaleType,
                                               bool perTensor) {
  SmallVector<Value> q = access.loadF32(codes, fp8, alignment(codes));
  Value sIdx = idx(0);
  if (!perTensor) {
    // Lanes past the end read the last group's scale (never stored).
    Value groups = arith::CeilDivUIOp::create(b, nIndex, idx(spec.groupSize));
    Value last = arith::SubIOp::create(
        b, arith::MaxUIOp::create(b, groups, idx(1)), idx(1));
    sIdx = arith::MinUIOp::create(b, lane.group, last);
  }
  Value s = loadScalarF32(b, scale, scaleType, sIdx);
  SmallVector<Value> x;
  for (Value qi : q)
    x.push_back(f.mul(qi, s));
  return x;
}

/// `x / s` for the given per-tensor scale `s`, as FP8 codes will round it.
SmallVector<Value> FlatLaneEmitter::divideByGivenScale(ArrayRef<Value> x) {
  Value s = loadScalarF32(b, args.lookup("scale"), spec.scaleType, idx(0));
  if (!approxDivision)
    return emitSharedDivisions(f, x, s, DivisionUse::Fp8Codes);
  Value inv = f.div(f.c(1.0), s);
  SmallVector<Value> q;
  for (Value xi : x)
    q.push_back(f.mul(xi, inv));
  return q;
}

void FlatLaneEmitter::emit() {
  int64_t e = lane.elementsPerLane;
  Value n = arith::MulIOp::create(b, args.lookup("rows"), args.lookup("cols"));
  nIndex = arith::IndexCastOp::create(b, b.getIndexType(), n);
  Value laneEnd = arith::AddIOp::create(b, lane.firstElement, idx(e));
  Value full =
      arith::CmpIOp::create(b, arith::CmpIPredicate::ule, laneEnd, nIndex);
  LaneAccess access{b, lane.firstElement, e, full, n};
  if (spec.grouped()) {
    Value groups = arith::CeilDivUIOp::create(b, nIndex, idx(spec.groupSize));
    Value inRange = arith::CmpIOp::create(b, arith::CmpIPredicate::ult,
                                          lane.group, groups);
    Value leader = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                         lane.laneInGroup, idx(0));
    isGroupLeader = arith::AndIOp::create(b, inRange, leader);
  }
  MLIRContext *ctx = b.getContext();
  Type fp8 = getFp8Type(ctx, spec.format);

  switch (spec.kind) {
  case ActKind::QuantizeGroup: {
    SmallVector<Value> x = access.loadF32(args.lookup("input"), spec.hpType,
                                          alignment(args.lookup("input")));
    QuantizedLane q = quantizeGroup(
        f, lane, x,
        {spec.eps, spec.fp8Max(), spec.scaleType,
         approxDivision ? ScaleDivision::Approximate : ScaleDivision::Exact});
    access.storeF32(args.lookup("codes"), q.scaled, fp8,
                    alignment(args.lookup("codes")));
    storeFromLeader(args.lookup("scale"), spec.scaleType, q.scale);
    return;
  }
  case ActKind::QuantizeScaled: {
    SmallVector<Value> x = access.loadF32(args.lookup("input"), spec.hpType,
                                          alignment(args.lookup("input")));
    access.storeF32(args.lookup("codes"), divideByGivenScale(x), fp8,
                    alignment(args.lookup("codes")));
    return;
  }
  case ActKind::Dequantize: {
    SmallVector<Value> x = dequantize(access, args.lookup("codes"), fp8,
                                      args.lookup("scale"), spec.scaleType,
                                      spec.perTensor);
    access.storeF32(args.lookup("output"), x, spec.hpType,
                    alignment(args.lookup("output")));
    return;
  }
  case ActKind::Requantize: {
    // Exact in f32: a code (4 significant bits at most) times a scale.
    SmallVector<Value> x = dequantize(
        access, args.lookup("input"), getFp8Type(ctx, spec.sourceFormat),
        args.lookup("input_scale"), spec.sourceScaleType, /*perTensor=*/false);
    access.storeF32(args.lookup("codes"), divideByGivenScale(x), fp8,
                    alignment(args.lookup("codes")));
    return;
  }
  case ActKind::AbsMax: {
    SmallVector<Value> x = access.loadF32(args.lookup("input"), spec.hpType,
                                          alignment(args.lookup("input")));
    storeFromLeader(args.lookup("absmax"), b.getF32Type(),
                    groupMaxAbs(f, lane, x));
    return;
  }
  case ActKind::QuantizeBlock:
  case ActKind::QuantizeTranspose:
    break;
  }
  llvm_unreachable("not a flat kernel");
}


//===----------------------------------------------------------------------===//
// Quantize + transpose
//===----------------------------------------------------------------------===//


/// `mask[i] = base + i < limit` as vector<V x i1> (index operands).
Value rangeMask(ImplicitLocOpBuilder &b, Value base, int64_t v, Value limit) {
  auto idxVec = VectorType::get({v}, b.getIndexType());
  SmallVector<APInt> steps;
  for (int64_t i = 0; i < v; ++i)
    steps.push_back(APInt(64, i));
  Value iota = arith::ConstantOp::create(
      b, DenseElementsAttr::get(idxVec, ArrayRef<APInt>(steps)));
  Value at = arith::AddIOp::create(
      b, vector::BroadcastOp::create(b, idxVec, base), iota);
  return arith::CmpIOp::create(b, arith::CmpIPredicate::ult, at,
                               vector::BroadcastOp::create(b, idxVec, limit));
}

/// `prmt.b32 lo, hi, selector`: byte i of the result is byte (nibble i of
/// `selector`) of the 8-byte pool {hi, lo}.
Value permuteBytes(ImplicitLocOpBuilder &b, Value lo, Value hi,
                   uint32_t selector) {
  Value sel = arith::ConstantOp::create(
      b, b.getI32IntegerAttr(static_cast<int32_t>(selector)));
  return NVVM::PermuteOp::create(b, b.getI32Type(), lo, hi, sel,
                                 NVVM::PermuteMode::DEFAULT);
}

/// GPU: T x T tiles in a block-strided loop over tiles (quantize + transpose
/// per tensor; per_block<T x T> quantize, transposed or not).
///
/// Pass 1 issues all of a thread's 16-byte loads of the tile first (many
/// bytes in flight), then (per block) reduces the block maximum: warp
/// shuffles, one word per warp in workgroup memory, a barrier. It then
/// quantizes, stores the row-major codes (unless the spec returns only q^T)
/// and keeps them in the tile buffer.
/// Pass 2 (transposed) gives each thread one 32-bit column word of 16 rows:
/// 16 conflict-free 32-bit shared loads, 4x4 byte transposes with `prmt`,
/// and four 16-byte rows of q^T. Tiles narrower than 32 words swap the rows
/// of each pair in every other 16-row strip, so the two strips a warp reads
/// at once sit in different banks.
void emitTileGpu(ImplicitLocOpBuilder &b, const ActSpec &spec,
                 const KernelArgs &args, Value tileMem, Value redMem,
                 const TileShape &ts, bool approxDivision) {
  F32Emitter f{b, approxDivision};
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  auto toIndex = [&](Value v) {
    return arith::IndexCastOp::create(b, b.getIndexType(), v);
  };
  auto andI = [&](Value x, Value y) {
    return x ? (y ? arith::AndIOp::create(b, x, y).getResult() : x) : y;
  };
  auto ult = [&](Value x, Value y) {
    return arith::CmpIOp::create(b, arith::CmpIPredicate::ult, x, y);
  };
  MLIRContext *ctx = b.getContext();
  Type fp8 = getFp8Type(ctx, spec.format);
  Type i8 = b.getI8Type(), i32 = b.getI32Type(), f32 = b.getF32Type();
  Type storage = laneStorageType(spec.hpType);
  const int64_t T = ts.tile, B = ts.blockSize;
  const bool blocked = spec.blocked();
  const bool transposed = spec.kind == ActKind::QuantizeTranspose;
  // Rows of the tile buffer hold T / 4 words; below 32, swizzle the rows.
  const bool swizzle = T / 4 < 32;
  auto physRow = [&](Value r, Value strip) {
    if (!swizzle)
      return r;
    return arith::XOrIOp::create(
        b, r, arith::AndIOp::create(b, strip, cidx(1))).getResult();
  };

  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value nBlocks = gpu::GridDimOp::create(b, gpu::Dimension::x);
  Value rows = toIndex(args.lookup("rows")),
        cols = toIndex(args.lookup("cols"));
  Value tilesR = arith::CeilDivUIOp::create(b, rows, cidx(T));
  Value tilesC = arith::CeilDivUIOp::create(b, cols, cidx(T));
  Value numTiles = arith::MulIOp::create(b, tilesR, tilesC);
  // Vector accesses need aligned rows of q (and 16-byte rows of q^T).
  auto divisible = [&](Value v, int64_t by) {
    return arith::CmpIOp::create(
        b, arith::CmpIPredicate::eq,
        arith::RemUIOp::create(b, v, cidx(by)), cidx(0));
  };
  Value aligned = divisible(cols, 16);
  if (transposed)
    aligned = arith::AndIOp::create(b, aligned, divisible(rows, 16));
  Value s, inv;
  if (!blocked) {
    s = loadScalarF32(b, args.lookup("scale"), spec.scaleType, cidx(0));
    inv = approxDivision ? f.div(f.c(1.0), s) : Value();
  }

  // Runs `body` under `cond` (unconditionally when null).
  auto guarded = [&](Value cond, function_ref<void()> body) {
    if (!cond)
      return body();
    emitIfThen(b, cond, body);
  };

  // Pass 1a: every load of the thread's share of the tile.
  const int64_t v1 = ts.inVector;
  const int64_t items1 = T * T / v1;
  auto inVec = VectorType::get({v1}, storage);
  auto f32Vec = VectorType::get({v1}, f32);
  auto i1Vec = VectorType::get({v1}, b.getI1Type());
  struct Item {
    Value ok;           ///< i1, or null when every thread has this item
    Value lr, lc, gr, gc, at;
    Value mask;         ///< elements in the tensor (and the item in range)
    Value raw;          ///< vector<v1 x storage>, as loaded
  };
  // Widened where used, so that only the loaded bits stay live across the
  // block reduction.
  auto widen = [&](Value raw) {
    Value x = raw;
    if (storage != spec.hpType)
      x = arith::BitcastOp::create(b, VectorType::get({v1}, spec.hpType), x);
    if (!spec.hpType.isF32())
      x = arith::ExtFOp::create(b, f32Vec, x);
    return x;
  };
  struct Tile {
    Value tileR, tileC, r0, c0;
    Value full; ///< whole and aligned: vector accesses without masks
    SmallVector<Item> items;
  };
  // Tile `t`'s coordinates and items; their loads unless `raws` holds them.
  // A tile past the end has no row inside: its loads are masked off.
  auto tileAt = [&](Value t, ValueRange raws) {
    Tile tl;
    tl.tileR = arith::DivUIOp::create(b, t, tilesC);
    tl.tileC = arith::RemUIOp::create(b, t, tilesC);
    tl.r0 = arith::MulIOp::create(b, tl.tileR, cidx(T));
    tl.c0 = arith::MulIOp::create(b, tl.tileC, cidx(T));
    tl.full = arith::AndIOp::create(
        b, aligned,
        arith::AndIOp::create(
            b,
            arith::CmpIOp::create(b, arith::CmpIPredicate::ule,
                                  arith::AddIOp::create(b, tl.r0, cidx(T)), rows),
            arith::CmpIOp::create(b, arith::CmpIPredicate::ule,
                                  arith::AddIOp::create(b, tl.c0, cidx(T)),
                                  cols)));
    for (int64_t k = 0; k * B < items1; ++k) {
      Item it;
      Value item = arith::AddIOp::create(b, tid, cidx(k * B));
      if ((k + 1) * B > items1)
        it.ok = ult(item, cidx(items1));
      it.lr = arith::DivUIOp::create(b, item, cidx(T / v1));
      it.lc = arith::MulIOp::create(
          b, arith::RemUIOp::create(b, item, cidx(T / v1)), cidx(v1));
      it.gr = arith::AddIOp::create(b, tl.r0, it.lr);
      it.gc = arith::AddIOp::create(b, tl.c0, it.lc);
      it.at = arith::AddIOp::create(b, arith::MulIOp::create(b, it.gr, cols),
                                    it.gc);
      Value inside = andI(ult(it.gr, rows), it.ok);
      it.mask = arith::AndIOp::create(
          b, rangeMask(b, it.gc, v1, cols),
          vector::BroadcastOp::create(b, i1Vec, inside));
      if (!raws.empty()) {
        it.raw = raws[k];
        tl.items.push_back(it);
        continue;
      }
      auto ld = scf::IfOp::create(
          b, andI(tl.full, it.ok),
          [&](OpBuilder &nb, Location loc) {
            Value v = vector::LoadOp::create(
                nb, loc, inVec, args.lookup("input"), ValueRange{it.at},
                /*nontemporal=*/false, llvm::MaybeAlign(16));
            scf::YieldOp::create(nb, loc, v);
          },
          [&](OpBuilder &nb, Location loc) {
            ImplicitLocOpBuilder ib(loc, nb);
            Value zero = arith::ConstantOp::create(ib, ib.getZeroAttr(inVec));
            Value v =
                vector::MaskedLoadOp::create(ib, inVec, args.lookup("input"),
                                             ValueRange{it.at}, it.mask, zero);
            scf::YieldOp::create(nb, loc, v);
          });
      it.raw = ld.getResult(0);
      tl.items.push_back(it);
    }
    return tl;
  };
  auto rawsOf = [](const Tile &tl) {
    SmallVector<Value> raws;
    for (const Item &it : tl.items)
      raws.push_back(it.raw);
    return raws;
  };

  // A block takes tiles bid, bid + grid, ...; with several a block (the
  // launch rule's share), the next tile's loads are issued before this
  // tile is processed, so a block keeps a tile's bytes in flight while it
  // quantizes and transposes.
  bool prefetch = ts.tilesPerBlock > 1;
  scf::ForOp loop;
  Tile cur, next;
  if (!prefetch) {
    loop = scf::ForOp::create(b, bid, numTiles, nBlocks);
    b.setInsertionPointToStart(loop.getBody());
    cur = tileAt(loop.getInductionVar(), {});
  } else {
    SmallVector<Value> first = rawsOf(tileAt(bid, {}));
    loop = scf::ForOp::create(b, bid, numTiles, nBlocks, first);
    b.setInsertionPointToStart(loop.getBody());
    Value t = loop.getInductionVar();
    next = tileAt(arith::AddIOp::create(b, t, nBlocks), {});
    cur = tileAt(t, loop.getRegionIterArgs());
  }
  Value tileR = cur.tileR, tileC = cur.tileC, r0 = cur.r0, c0 = cur.c0;
  Value full = cur.full;
  SmallVector<Item> &items = cur.items;

  // Pass 1b (per block): the block maximum and its scale. Masked-off
  // elements load as 0 and leave the maximum alone; NaN is skipped: maxnum
  // returns its other operand (`max.bf16x2`, `max.f32`), and the running
  // maximum starts at 0, so it never is NaN. A 16-bit input takes two
  // elements an instruction (`and.b32`, `max.bf16x2`), in its own type:
  // the maximum of magnitudes is exact in any format.
  if (blocked) {
    // |x| clears the sign bit: `math.absf` of a 16-bit float would be
    // lowered through f32 and back.
    unsigned width = spec.hpType.getIntOrFloatBitWidth();
    auto bitsVec = VectorType::get({v1}, b.getIntegerType(width));
    auto hpVec = VectorType::get({v1}, spec.hpType);
    Value signOff = arith::ConstantOp::create(
        b, DenseElementsAttr::get(
               bitsVec, ArrayRef<APInt>(APInt::getSignedMaxValue(width))));
    Value acc = arith::ConstantOp::create(
        b, DenseElementsAttr::get(hpVec,
                                  b.getFloatAttr(spec.hpType, 0.0).getValue()));
    for (const Item &it : items) {
      Value bits = it.raw;
      if (storage != bitsVec.getElementType())
        bits = arith::BitcastOp::create(b, bitsVec, bits);
      Value mag = arith::BitcastOp::create(
          b, hpVec, arith::AndIOp::create(b, bits, signOff));
      acc = arith::MaxNumFOp::create(b, acc, mag);
    }
    Value m =
        vector::ReductionOp::create(b, vector::CombiningKind::MAXNUMF, acc);
    if (!spec.hpType.isF32())
      m = arith::ExtFOp::create(b, f32, m);
    GroupLane warp;
    warp.onGpu = true;
    warp.lanesPerGroup = 32;
    m = warp.allReduce(b, m, GroupReduceKind::MaxNum);
    Value laneId = arith::RemUIOp::create(b, tid, cidx(32));
    Value warpId = arith::DivUIOp::create(b, tid, cidx(32));
    guarded(arith::CmpIOp::create(b, arith::CmpIPredicate::eq, laneId,
                                  cidx(0)),
            [&] { memref::StoreOp::create(b, m, redMem, ValueRange{warpId}); });
    gpu::BarrierOp::create(b);
    Value amax = f.c(0.0);
    for (int64_t w = 0; w < B / 32; ++w)
      amax = f.maxnum(amax, memref::LoadOp::create(b, redMem,
                                                   ValueRange{cidx(w)}));
    s = arith::DivFOp::create(b, f.add(amax, f.c(spec.eps)),
                              f.c(spec.fp8Max()));
    s = f.roundTo(s, spec.scaleType);
    inv = Value();
    guarded(arith::CmpIOp::create(b, arith::CmpIPredicate::eq, tid, cidx(0)),
            [&] {
              storeScalarF32(
                  b, b.getLoc(), args.lookup("scale"), spec.scaleType, s,
                  arith::AddIOp::create(
                      b, arith::MulIOp::create(b, tileR, tilesC), tileC));
              if (transposed)
                storeScalarF32(
                    b, b.getLoc(), args.lookup("scale_t"), spec.scaleType, s,
                    arith::AddIOp::create(
                        b, arith::MulIOp::create(b, tileC, tilesR), tileR));
            });
  }

  // Pass 1c: quantize, store q, keep the codes in the tile buffer.
  auto codeVec1 = VectorType::get({v1}, i8);
  Value sv = inv ? vector::BroadcastOp::create(b, f32Vec, inv).getResult()
               : Value();
  for (const Item &it : items) {
    // The codes of the IEEE quotient (per block always: the reference
    // library's), one reciprocal per tile and a correction per element. A
    // block's scale is the quantizer's own, (max + eps) / fp8max, so every
    // quotient is within the exact contract (|x / s| < 450: none
    // overflows); a given scale can be anything, and its codes are the
    // saturated ones of any quotient.
    Value x = widen(it.raw);
    Value scaled;
    if (inv) {
      scaled = f.mul(x, sv);
    } else {
      SmallVector<Value> xs;
      for (int64_t e = 0; e < v1; ++e)
        xs.push_back(vector::ExtractOp::create(b, x, e));
      scaled = vector::FromElementsOp::create(
          b, f32Vec,
          emitSharedDivisions(
              f, xs, s, blocked ? DivisionUse::Exact : DivisionUse::Fp8Codes));
    }
    Value q = arith::TruncFOp::create(b, VectorType::get({v1}, fp8), scaled);
    q = arith::BitcastOp::create(b, codeVec1, q);
    guarded(it.ok, [&] {
      if (spec.rowMajorCodes)
        emitIfElse(
            b, full,
            [&] {
              vector::StoreOp::create(
                  b, q, args.lookup("codes"), ValueRange{it.at},
                  /*nontemporal=*/false, llvm::MaybeAlign(v1));
            },
            [&] {
              vector::MaskedStoreOp::create(b, args.lookup("codes"),
                                            ValueRange{it.at}, it.mask, q);
            });
      if (!transposed)
        return;
      Value words = vector::BitCastOp::create(
          b, VectorType::get({v1 / 4}, i32), q);
      Value strip = arith::DivUIOp::create(b, it.lr, cidx(16));
      vector::StoreOp::create(
          b, words, tileMem,
          ValueRange{physRow(it.lr, strip),
                     arith::DivUIOp::create(b, it.lc, cidx(4))},
          /*nontemporal=*/false, llvm::MaybeAlign(v1));
    });
  }

  if (transposed) {
    gpu::BarrierOp::create(b);
    // Pass 2: a column word of 16 rows per item, transposed in registers.
    const int64_t wordsPerRow = T / 4, units = wordsPerRow * (T / 16);
    auto v4i32 = VectorType::get({4}, i32);
    auto v16i8 = VectorType::get({16}, i8);
    for (int64_t k = 0; k * B < units; ++k) {
      Value item = arith::AddIOp::create(b, tid, cidx(k * B));
      Value ok = (k + 1) * B > units ? ult(item, cidx(units)).getResult()
                                     : Value();
      guarded(ok, [&] {
        Value w = arith::RemUIOp::create(b, item, cidx(wordsPerRow));
        Value strip = arith::DivUIOp::create(b, item, cidx(wordsPerRow));
        Value lr = arith::MulIOp::create(b, strip, cidx(16));
        SmallVector<Value> a;
        for (int64_t i = 0; i < 16; ++i) {
          Value r = physRow(arith::AddIOp::create(b, lr, cidx(i)), strip);
          a.push_back(memref::LoadOp::create(b, tileMem, ValueRange{r, w}));
        }
        // out[c][g]: column 4w + c of rows 4g .. 4g + 3, byte i = row 4g + i.
        Value out[4][4];
        for (int64_t g = 0; g < 4; ++g) {
          Value t0 = permuteBytes(b, a[4 * g], a[4 * g + 1], 0x5140);
          Value t1 = permuteBytes(b, a[4 * g], a[4 * g + 1], 0x7362);
          Value t2 = permuteBytes(b, a[4 * g + 2], a[4 * g + 3], 0x5140);
          Value t3 = permuteBytes(b, a[4 * g + 2], a[4 * g + 3], 0x7362);
          out[0][g] = permuteBytes(b, t0, t2, 0x5410);
          out[1][g] = permuteBytes(b, t0, t2, 0x7632);
          out[2][g] = permuteBytes(b, t1, t3, 0x5410);
          out[3][g] = permuteBytes(b, t1, t3, 0x7632);
        }
        Value gr = arith::AddIOp::create(b, r0, lr);
        for (int64_t c = 0; c < 4; ++c) {
          Value q = vector::BitCastOp::create(
              b, v16i8,
              vector::FromElementsOp::create(
                  b, v4i32, ValueRange{out[c][0], out[c][1], out[c][2],
                                       out[c][3]}));
          Value gc = arith::AddIOp::create(
              b, c0,
              arith::AddIOp::create(b, arith::MulIOp::create(b, w, cidx(4)),
                                    cidx(c)));
          Value at =
              arith::AddIOp::create(b, arith::MulIOp::create(b, gc, rows), gr);
          emitIfElse(
              b, full,
              [&] {
                vector::StoreOp::create(
                    b, q, args.lookup("codes_t"), ValueRange{at},
                    /*nontemporal=*/false, llvm::MaybeAlign(16));
              },
              [&] {
                Value mask = arith::AndIOp::create(
                    b, rangeMask(b, gr, 16, rows),
                    vector::BroadcastOp::create(
                        b, VectorType::get({16}, b.getI1Type()),
                        ult(gc, cols)));
                vector::MaskedStoreOp::create(b, args.lookup("codes_t"),
                                              ValueRange{at}, mask, q);
              });
        }
      });
    }
  }
  // The next tile reuses the workgroup buffers.
  gpu::BarrierOp::create(b);
  if (prefetch)
    scf::YieldOp::create(b, rawsOf(next));
  b.setInsertionPointAfter(loop);
}

/// CPU: stores the FP8 value `q` of element (i, j) as a code at `at` of
/// the row-major codes (unless the kernel writes only q^T) and, for the
/// transposed kinds, at (j, i) of q^T.
void storeCodes(ImplicitLocOpBuilder &b, const ActSpec &spec,
                const KernelArgs &args, Value q, Value at, Value i, Value j,
                Value rows) {
  q = arith::BitcastOp::create(b, b.getI8Type(), q);
  if (spec.rowMajorCodes)
    memref::StoreOp::create(b, q, args.lookup("codes"), ValueRange{at});
  if (spec.kind != ActKind::QuantizeTranspose)
    return;
  Value atT = arith::AddIOp::create(b, arith::MulIOp::create(b, j, rows), i);
  memref::StoreOp::create(b, q, args.lookup("codes_t"), ValueRange{atT});
}

/// CPU, per tensor: a plain loop over the elements, writing both layouts
/// (or q^T only).
void emitTransposeCpu(ImplicitLocOpBuilder &b, const ActSpec &spec,
                      const KernelArgs &args) {
  F32Emitter f{b, /*approx=*/false};
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  Value rows =
      arith::IndexCastOp::create(b, b.getIndexType(), args.lookup("rows"));
  Value cols =
      arith::IndexCastOp::create(b, b.getIndexType(), args.lookup("cols"));
  Value s = loadScalarF32(b, args.lookup("scale"), spec.scaleType, cidx(0));
  Type fp8 = getFp8Type(b.getContext(), spec.format);
  emitFor(b, cidx(0), rows, cidx(1), {}, [&](Value i, ValueRange) {
    emitFor(b, cidx(0), cols, cidx(1), {}, [&](Value j, ValueRange) {
      Value at = arith::AddIOp::create(b, arith::MulIOp::create(b, i, cols), j);
      Value x = loadScalarF32(b, args.lookup("input"), spec.hpType, at);
      Value q = arith::TruncFOp::create(b, fp8, f.div(x, s));
      storeCodes(b, spec, args, q, at, i, j, rows);
      return SmallVector<Value>{};
    });
    return SmallVector<Value>{};
  });
}

/// CPU, per block: for each block, its maximum, its scale, then its codes
/// (and the transposed codes and scale).
void emitBlockCpu(ImplicitLocOpBuilder &b, const ActSpec &spec,
                  const KernelArgs &args) {
  F32Emitter f{b, /*approx=*/false};
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  const int64_t B = spec.blockEdge;
  const bool transposed = spec.kind == ActKind::QuantizeTranspose;
  Value rows =
      arith::IndexCastOp::create(b, b.getIndexType(), args.lookup("rows"));
  Value cols =
      arith::IndexCastOp::create(b, b.getIndexType(), args.lookup("cols"));
  Value nbr = arith::CeilDivUIOp::create(b, rows, cidx(B));
  Value nbc = arith::CeilDivUIOp::create(b, cols, cidx(B));
  Type fp8 = getFp8Type(b.getContext(), spec.format);
  auto loadX = [&](Value at) {
    return loadScalarF32(b, args.lookup("input"), spec.hpType, at);
  };
  auto blockRows = scf::ForOp::create(b, cidx(0), nbr, cidx(1));
  b.setInsertionPointToStart(blockRows.getBody());
  Value br = blockRows.getInductionVar();
  auto blockCols = scf::ForOp::create(b, cidx(0), nbc, cidx(1));
  b.setInsertionPointToStart(blockCols.getBody());
  Value bc = blockCols.getInductionVar();
  Value i0 = arith::MulIOp::create(b, br, cidx(B));
  Value j0 = arith::MulIOp::create(b, bc, cidx(B));
  Value i1 = arith::MinUIOp::create(
      b, arith::AddIOp::create(b, i0, cidx(B)), rows);
  Value j1 = arith::MinUIOp::create(
      b, arith::AddIOp::create(b, j0, cidx(B)), cols);
  // The block maximum (fmax from 0: NaN skipped, as the reference does).
  auto maxRows = scf::ForOp::create(b, i0, i1, cidx(1), ValueRange{f.c(0.0)});
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(maxRows.getBody());
    Value i = maxRows.getInductionVar();
    auto maxCols = scf::ForOp::create(b, j0, j1, cidx(1),
                                      ValueRange{maxRows.getRegionIterArg(0)});
    b.setInsertionPointToStart(maxCols.getBody());
    Value j = maxCols.getInductionVar();
    Value x = loadX(
        arith::AddIOp::create(b, arith::MulIOp::create(b, i, cols), j));
    scf::YieldOp::create(
        b, ValueRange{f.maxnum(maxCols.getRegionIterArg(0), f.abs(x))});
    b.setInsertionPointToEnd(maxRows.getBody());
    scf::YieldOp::create(b, maxCols.getResults());
  }
  Value s = arith::DivFOp::create(
      b, f.add(maxRows.getResult(0), f.c(spec.eps)), f.c(spec.fp8Max()));
  s = f.roundTo(s, spec.scaleType);
  storeScalarF32(b, b.getLoc(), args.lookup("scale"), spec.scaleType, s,
                 arith::AddIOp::create(b, arith::MulIOp::create(b, br, nbc),
                                       bc));
  if (transposed)
    storeScalarF32(b, b.getLoc(), args.lookup("scale_t"), spec.scaleType, s,
                   arith::AddIOp::create(b, arith::MulIOp::create(b, bc, nbr),
                                         br));
  emitFor(b, i0, i1, cidx(1), {}, [&](Value i, ValueRange) {
    emitFor(b, j0, j1, cidx(1), {}, [&](Value j, ValueRange) {
      Value at = arith::AddIOp::create(b, arith::MulIOp::create(b, i, cols), j);
      Value q = arith::TruncFOp::create(
          b, fp8, arith::DivFOp::create(b, loadX(at), s));
      storeCodes(b, spec, args, q, at, i, j, rows);
      return SmallVector<Value>{};
    });
    return SmallVector<Value>{};
  });
  b.setInsertionPointAfter(blockRows);
}


} // namespace

void QuantizeLowering::emitGpu(ImplicitLocOpBuilder &b, const ActPlan &plan,
                               unsigned, gpu::GPUFuncOp kernel,
                               const KernelArgs &args) const {
  const ActSpec &spec = plan.spec;
  requestMinCtasUnlessSpilling(kernel,
                               spec.tiled() ? tileMinCtas : flatMinCtas);
  // The tile is written with vector stores: align it like one.
  auto wg = kernel.getWorkgroupAttributions();
  for (int64_t i = 0, e = wg.size(); i < e; ++i)
    kernel.setWorkgroupAttributionAttr(i, "llvm.align",
                                       b.getI64IntegerAttr(16));
  if (spec.tiled()) {
    // The transposed kinds' codes tile first, then the block maxima.
    bool transposed = spec.kind == ActKind::QuantizeTranspose;
    Value tileMem = transposed ? Value(wg[0]) : Value();
    Value redMem = spec.blocked() ? Value(wg[transposed ? 1 : 0]) : Value();
    emitTileGpu(b, spec, args, tileMem, redMem, plan.tiles, approxDivision);
    return;
  }
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value laneIndex = arith::AddIOp::create(
      b,
      arith::MulIOp::create(b, bid,
                            arith::ConstantIndexOp::create(b, blockSize)),
      tid);
  GroupLane lane = makeFlatLane(b, plan.flat.elementsPerLane,
                                plan.flat.lanesPerGroup, laneIndex,
                                /*onGpu=*/true);
  FlatLaneEmitter(b, spec, lane, args, approxDivision).emit();
}

void QuantizeLowering::emitCpu(ImplicitLocOpBuilder &b, const ActPlan &plan,
                               unsigned, func::FuncOp,
                               const KernelArgs &args) const {
  const ActSpec &spec = plan.spec;
  if (spec.blocked())
    return emitBlockCpu(b, spec, args);
  if (spec.kind == ActKind::QuantizeTranspose)
    return emitTransposeCpu(b, spec, args);
  Value n = arith::IndexCastOp::create(
      b, b.getIndexType(),
      arith::MulIOp::create(b, args.lookup("rows"), args.lookup("cols")));
  Value lanes = arith::CeilDivUIOp::create(
      b, n, arith::ConstantIndexOp::create(b, plan.flat.elementsPerLane));
  emitFor(b, arith::ConstantIndexOp::create(b, 0), lanes,
          arith::ConstantIndexOp::create(b, 1), {},
          [&](Value i, ValueRange) {
            GroupLane lane =
                makeFlatLane(b, plan.flat.elementsPerLane,
                             plan.flat.lanesPerGroup, i, /*onGpu=*/false);
            FlatLaneEmitter(b, spec, lane, args, /*approxDivision=*/false)
                .emit();
            return SmallVector<Value>{};
          });
}
