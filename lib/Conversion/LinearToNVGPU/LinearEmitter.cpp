//===- LinearEmitter.cpp - the Hopper TMA + wgmma GEMM kernel -------------===//
//
// Turns a kernel-spec function holding one per-tensor `coat.linear` into a
// gpu.func. Every kind (forward, dgrad, wgrad) is the same NT GEMM once its
// operands are K-major (COAT.md §3.2), so one parameterized kernel serves
// them all: TMA (cp.async.bulk.tensor) loads of 128-byte-wide K slices into
// 128B-swizzled shared memory completing on mbarriers, an S-stage ring over
// K, warpgroups issuing wgmma with any E4M3/E5M2 operand pair into f32
// accumulators, and an epilogue that scales by s_A * s_B, adds the bias and
// writes bf16, f32, or FP8 codes with 1x16 bf16 group scales.
//
// Two schedules share the mainloop and the epilogue:
//  - plain: one CTA per output tile; thread 0 of the first consumer refills
//    the ring between its own wgmma groups;
//  - warp-specialized (default): a producer warpgroup (one thread issuing
//    TMA, registers given away with setmaxnreg) and consumer warpgroups,
//    persistent over a grouped (L2-friendly) tile order, so the loads of the
//    next tile overlap the epilogue of the current one.
//
// The wgmma ops are emitted at the NVVM level with descriptors computed here:
// upstream nvgpu.warpgroup.mma steps its descriptors for 64-wide f16 tiles
// (the M-block step is K*K*bytes and B's K step assumes an MN-major B), which
// is wrong for K-major 128-byte FP8 tiles. The TMA descriptors are kernel
// parameters passed by value (128-byte grid constants), built by the runtime
// (docs/manifest.md, kind "tensormap"); coat-mark-grid-constants turns the
// marked parameters into byval nvvm.grid_constant ones after gpu-to-nvvm.
//
//===----------------------------------------------------------------------===//

#include "Gemm.h"

#include "coat/Conversion/EmitHelpers.h"
#include "coat/Conversion/GroupKernel.h"
#include "coat/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include "llvm/ADT/ScopeExit.h"

#include <numeric>

using namespace mlir;
using namespace mlir::coat;

namespace {

NVVM::WGMMATypes wgmmaType(::coat::Fp8Format f) {
  return f == ::coat::Fp8Format::E4M3 ? NVVM::WGMMATypes::e4m3
                                      : NVVM::WGMMATypes::e5m2;
}

/// Builds the body of one GEMM kernel.
class GemmKernelBuilder {
public:
  GemmKernelBuilder(ImplicitLocOpBuilder &b, const GemmProblem &p,
                    const GemmShape &g, const KernelArgs &args)
      : b(b), p(p), g(g), args(args) {}

  void build();

private:
  ImplicitLocOpBuilder &b;
  const GemmProblem &p;
  const GemmShape &g;
  const KernelArgs &args;

  // Kernel arguments.
  Value tensorMapA, tensorMapB, out, outScale, aScale, bScale, bias;
  Value ropeCos, ropeSin; ///< a fused rope's tables
  Value addend;           ///< summed into the result (coat-fuse-linear-sum)
  Value finiteFlag; ///< null unless the problem asks for it
  /// Set while an epilogue stores values that finalValues already formed
  /// (scaled() passes them through).
  bool prescaled = false;
  Value M, N, K;
  Value nBlocks, kBlocks; ///< block-scaled: scale matrix extents
  // Per-thread values.
  Value tid, base, kTiles;
  LLVM::LLVMStructType accType;

  Type i32() { return b.getI32Type(); }
  Type i64() { return b.getI64Type(); }
  Value cIdx(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value cI32(int64_t v) { return arith::ConstantIntOp::create(b, i32(), v); }
  Value cI64(int64_t v) { return arith::ConstantIntOp::create(b, i64(), v); }
  Value toI32(Value idx) { return arith::IndexCastOp::create(b, i32(), idx); }
  Value toI64(Value idx) { return arith::IndexCastOp::create(b, i64(), idx); }
  Value toIdx(Value v) { return arith::IndexCastOp::create(b, b.getIndexType(), v); }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, x, y); }
  Value sub(Value x, Value y) { return arith::SubIOp::create(b, x, y); }
  /// extent - 1, or 0 for an empty extent: where an index past the edge of
  /// an edge tile (whose value is not stored) is clamped to.
  Value lastIndex(Value extent) {
    return sub(arith::MaxUIOp::create(b, extent, cIdx(1)), cIdx(1));
  }
  /// buffer[idx] of a bf16/f32 epilogue input (bias, addend, rotary tables)
  /// as f32.
  Value loadAsF32(Value buffer, Value idx) {
    Value x = memref::LoadOp::create(b, buffer, ValueRange{idx});
    return x.getType().isF32() ? x : arith::ExtFOp::create(b, b.getF32Type(), x);
  }
  Value mul(Value x, Value y) { return arith::MulIOp::create(b, x, y); }
  Value cmp(arith::CmpIPredicate pred, Value x, Value y) {
    return arith::CmpIOp::create(b, pred, x, y);
  }
  void ifThen(Value cond, llvm::function_ref<void()> body) {
    emitIfThen(b, cond, body);
  }
  Value shared(Value byteAddr) {
    return LLVM::IntToPtrOp::create(b, LLVM::LLVMPointerType::get(b.getContext(), 3),
                                    Value(byteAddr));
  }
  Value sharedAt(int64_t offset) { return shared(add(base, cI64(offset))); }
  Value sharedAt(Value offset) { return shared(add(base, offset)); }
  Value fullBarrier(Value stage) {
    return sharedAt(add(cI64(g.barrierOffset()), mul(toI64(stage), cI64(8))));
  }
  Value emptyBarrier(Value stage) {
    return sharedAt(
        add(cI64(g.barrierOffset() + 8 * g.stages), mul(toI64(stage), cI64(8))));
  }
  /// Parity bit of ring round `kIter / stages`.
  Value roundParity(Value kIter) {
    return toI32(arith::AndIOp::create(
        b, arith::DivUIOp::create(b, kIter, cIdx(g.stages)), cIdx(1)));
  }
  void wait(Value barrier, Value parity) {
    NVVM::MBarrierTryWaitParityOp::create(b, barrier, parity, cI32(0x989680));
  }
  /// wgmma matrix descriptor of a K-major, 128B-swizzled tile at shared byte
  /// address `addr`: start >> 4, LBO 16 B (unused), SBO 1024 B (8 rows of
  /// 128 B), swizzle mode 1 (128B) in bits 62-63.
  Value descriptor(Value addr) {
    Value start = arith::ShRUIOp::create(
        b, arith::AndIOp::create(b, addr, cI64(0x3FFFF)), cI64(4));
    int64_t fixed = (int64_t(1) << 16) | (int64_t(1024 >> 4) << 32) |
                    (int64_t(1) << 62);
    return arith::OrIOp::create(b, start, cI64(fixed));
  }

  void initBarriers(int64_t emptyArrivals);
  void issueLoads(Value stage, Value kTile, Value m0, Value n0);
  /// Issues one K slice's wgmma group from ring stage `stage` for the rows
  /// of consumer warpgroup `consumer`, m-blocks `firstBlock` on, one per
  /// accumulator in `accs`; returns the new accumulators.
  /// With `fresh`, the first wgmma ignores `accs` (scale-d = 0): the group
  /// computes this slice's product alone.
  SmallVector<Value> issueWgmmas(Value stage, Value consumer, ValueRange accs,
                                 bool fresh = false, int64_t firstBlock = 0);
  /// Block-scaled: this thread's A-row scales (2 per 64-row block) and the
  /// tile's B-block scale for K slice `kt`, loaded from global memory with
  /// clamped indices (rows past M and slices past k_blocks read a valid
  /// entry; their products are zero or not stored).
  /// With `second`, also the scale of the next weight block (a tile that
  /// crosses a block boundary).
  SmallVector<Value> loadBlockScales(Value kt, Value rowBase, Value n0,
                                     bool second);
  /// acc += partial * s_A[row, kb] * s_B[n-block, kb], per fragment element
  /// of m-blocks `firstBlock` on (one per partial); n8 chunks from
  /// `boundary` on lie in the tile's second weight block.
  SmallVector<Value> promote(ValueRange accs, ValueRange partials,
                             ArrayRef<Value> scales, int64_t boundary,
                             int64_t firstBlock = 0);
  /// Block-scaled: K slice `stage`'s products for consumer `consumer`, each
  /// in a fresh fragment, waited for and promoted into `accs`: all m-blocks
  /// at once, or one at a time (GemmShape::promotePerMBlock). `released`
  /// runs once the slice's last wgmma completed, before its promotion.
  SmallVector<Value> multiplyAndPromote(Value stage, Value consumer,
                                        ValueRange accs, ArrayRef<Value> scales,
                                        int64_t boundary,
                                        llvm::function_ref<void()> released);
  /// Block-scaled: builds the mainloop once per column offset the tile can
  /// have inside its 128-column weight block (one case when tile-n divides
  /// 128), so the block boundary is a constant in each; `mainloop(boundary)`
  /// returns the accumulators.
  SmallVector<Value>
  perColumnOffset(Value n0,
                  llvm::function_ref<SmallVector<Value>(int64_t)> mainloop);
  Value undefAccumulator() { return LLVM::UndefOp::create(b, accType); }
  SmallVector<Value> zeroAccumulators();
  /// (m tile, n tile) of linear tile `t` in grouped order: `groupM` M tiles
  /// sweep every N tile before the next group, so the CTAs running at once
  /// share operand panels in L2.
  std::pair<Value, Value> tileCoords(Value t, Value tilesM, Value tilesN);

  void buildPlain();
  void buildWarpSpecialized();

  /// Writes the accumulators of consumer warpgroup `consumer` of the tile at
  /// (m0, n0).
  void emitEpilogue(ArrayRef<Value> accs, Value m0, Value n0, Value consumer);
  /// The global column and row of fragment element `e` of m-block `i`: n8
  /// chunk e / 4, row half (e % 4) / 2, column e % 2 of the pair.
  Value fragmentCol(Value n0, int64_t e) {
    return add(add(n0, cIdx(8 * (e / 4) + e % 2)), colInChunk);
  }
  Value fragmentRow(Value rowBase, int64_t i, int64_t e) {
    return add(rowBase, cIdx(64 * i + 8 * ((e % 4) / 2)));
  }
  /// An accumulator as the epilogue stores it: times the scale, plus the
  /// bias (clamped to the last column where `colIn`), plus the addend's
  /// element at global (`row`, `col`) (clamped to the result's extents) where
  /// the problem has one; `row` is required then.
  Value scaled(Value acc, Value scale, Value col, Value colIn, Value row = {});
  /// The consumer's fragments as the values to store under a fused rope
  /// (coat-fuse-rope), which needs each value's partner before any is
  /// stored: scaled() (bias, addend) for every value, rounded to the result
  /// type as the unfused GEMM stores them, the rotated heads rotated as
  /// coat.rope computes them. Each thread holds both halves of every head
  /// its columns touch (head_dim / 2 is a multiple of 8: n8 chunk j's
  /// partner is chunk j +- head_dim / 16, in the same registers' rows).
  SmallVector<Value> finalValues(ArrayRef<Value> accs, Value scale,
                                 Value rowBase, Value n0);
  /// m-block `i`'s values (f32, per fragment element) with the fused rope
  /// applied; `stored` is the result type, `lastRow` the last valid row.
  SmallVector<Value> rotateHeads(ArrayRef<Value> values, int64_t i,
                                 Value rowBase, Value n0, Type stored,
                                 Value lastRow);
  /// Sets the finiteness flag where a value of the fragment (as stored)
  /// is NaN or infinite.
  void flagNonFinite(ArrayRef<Value> accs, Value scale, Value rowBase,
                     Value n0);
  void storeRows(ArrayRef<Value> accs, Value scale, Value rowBase, Value n0,
                 bool checked);
  /// A thread's share of 1x16 output group `grp` in row half `h` of m-block
  /// `i`: two adjacent columns in each of the group's two n8 chunks.
  struct GroupCodes {
    Value row, rowIn;                ///< global row, row < M
    SmallVector<Value, 4> cols, ins; ///< global columns, column < N
    SmallVector<Value, 4> codes;     ///< i8 FP8 codes
    Value scale;                     ///< the group's f32 scale
  };
  /// The share's row (of m-block `i`, half `h`).
  GroupCodes groupRow(Value rowBase, int64_t i, int64_t h);
  /// Group `grp` of row half `h` of m-block `i`.
  struct GroupRef {
    int64_t i, h, grp;
  };
  /// Quantizes the thread's shares of groups `refs`, each with its group's
  /// scale (the maximum over the quad that holds it).
  SmallVector<GroupCodes> quantizeGroups(ArrayRef<Value> accs, Value scale,
                                         Value rowBase, Value n0,
                                         ArrayRef<GroupRef> refs);
  /// The quad's first lane (`quadLeader`) stores group `grp`'s scale as
  /// bf16 into a row of `groupsPerRow`.
  void storeGroupScale(const GroupCodes &q, Value n0, int64_t grp,
                       Value groupsPerRow, Value quadLeader);
  void storeFp8Groups(ArrayRef<Value> accs, Value scale, Value rowBase, Value n0);
  /// `epilogue=staged` / `tma`: the consumer's rows through its
  /// shared-memory rows, a 128-byte column block at a time, stored as
  /// contiguous 16-byte chunks or by TMA (FP8 codes: always by the
  /// threads).
  void storeStaged(ArrayRef<Value> accs, Value scale, Value m0, Value n0,
                   Value consumer);
  /// Before a consumer warpgroup exits: its TMA stores have completed.
  void finishStores();

  // Fragment coordinates of this thread in its warpgroup's m64nN wgmma
  // result: for n8 chunk j, rows rowInBlock (+8) and columns 8j + colInChunk
  // (+1), in registers 4j (+1) and 4j+2 (+3).
  Value lane, rowInBlock, colInChunk;
};

void GemmKernelBuilder::initBarriers(int64_t emptyArrivals) {
  // full[s] completes when stage s's bytes landed; empty[s] when every
  // consumer warpgroup's wgmma reading stage s finished.
  ifThen(cmp(arith::CmpIPredicate::eq, tid, cIdx(0)), [&] {
    for (int64_t s = 0; s < g.stages; ++s) {
      NVVM::MBarrierInitOp::create(b, fullBarrier(cIdx(s)), cI32(1), Value());
      NVVM::MBarrierInitOp::create(b, emptyBarrier(cIdx(s)), cI32(emptyArrivals),
                                   Value());
    }
    NVVM::FenceMbarrierInitOp::create(b);
  });
  gpu::BarrierOp::create(b);
}

void GemmKernelBuilder::issueLoads(Value stage, Value kTile, Value m0, Value n0) {
  Value stageOff = mul(toI64(stage), cI64(g.stageBytes()));
  Value full = fullBarrier(stage);
  NVVM::MBarrierArriveExpectTxOp::create(b, Type(), full, cI32(g.stageBytes()),
                                         NVVM::MemScopeKind::CTA, false, Value());
  Value kCoord = toI32(mul(kTile, cIdx(kTileK)));
  auto cluster = LLVM::LLVMPointerType::get(b.getContext(), 7);
  auto load = [&](Value dstOff, Value map, Value row) {
    Value dst = LLVM::AddrSpaceCastOp::create(b, cluster, sharedAt(dstOff));
    NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
        b, dst, map, ValueRange{kCoord, toI32(row)}, full, ValueRange{}, Value(),
        Value(), NVVM::TMALoadMode::TILE, false, NVVM::CTAGroupKindAttr(), Value());
  };
  load(stageOff, tensorMapA, m0);
  load(add(stageOff, cI64(g.aBytes())), tensorMapB, n0);
}

SmallVector<Value> GemmKernelBuilder::zeroAccumulators() {
  SmallVector<Value> init;
  for (int64_t i = 0; i < g.mBlocks(); ++i)
    init.push_back(LLVM::ZeroOp::create(b, accType));
  return init;
}

SmallVector<Value> GemmKernelBuilder::issueWgmmas(Value stage, Value consumer,
                                                  ValueRange accsIn, bool fresh,
                                                  int64_t firstBlock) {
  MLIRContext *ctx = b.getContext();
  Value stageAddr = add(base, mul(toI64(stage), cI64(g.stageBytes())));
  Value aAddr = add(stageAddr, mul(toI64(consumer), cI64(g.mPerWarpgroup() * kTileK)));
  Value bAddr = add(stageAddr, cI64(g.aBytes()));
  NVVM::WgmmaFenceAlignedOp::create(b);
  SmallVector<Value> accs(accsIn);
  auto typeA = NVVM::WGMMATypesAttr::get(ctx, wgmmaType(p.lhs));
  auto typeB = NVVM::WGMMATypesAttr::get(ctx, wgmmaType(p.rhs));
  auto f32t = NVVM::WGMMATypesAttr::get(ctx, NVVM::WGMMATypes::f32);
  auto shape = NVVM::MMAShapeAttr::get(ctx, 64, g.tileN, kWgmmaK);
  auto one = NVVM::WGMMAScaleInAttr::get(ctx, NVVM::WGMMAScaleIn::one);
  auto outOne = NVVM::WGMMAScaleOutAttr::get(ctx, NVVM::WGMMAScaleOut::one);
  auto outZero = NVVM::WGMMAScaleOutAttr::get(ctx, NVVM::WGMMAScaleOut::zero);
  auto row = NVVM::MMALayoutAttr::get(ctx, NVVM::MMALayout::row);
  auto col = NVVM::MMALayoutAttr::get(ctx, NVVM::MMALayout::col);
  for (int64_t kk = 0; kk < kTileK / kWgmmaK; ++kk) {
    Value descB = descriptor(add(bAddr, cI64(kWgmmaK * kk)));
    for (int64_t i = 0, e = accs.size(); i < e; ++i) {
      Value descA = descriptor(
          add(aAddr, cI64((firstBlock + i) * 64 * kTileK + kWgmmaK * kk)));
      accs[i] = NVVM::WgmmaMmaAsyncOp::create(
          b, accType, accs[i], descA, descB, shape, typeA, typeB, f32t,
          fresh && kk == 0 ? outZero : outOne, one, one, row, col,
          NVVM::MMAIntOverflowAttr());
    }
  }
  NVVM::WgmmaGroupSyncAlignedOp::create(b);
  return accs;
}

SmallVector<Value> GemmKernelBuilder::loadBlockScales(Value kt, Value rowBase,
                                                      Value n0, bool second) {
  Value lastRow = arith::SubIOp::create(b, M, cIdx(1));
  Value kb = arith::MinUIOp::create(
      b, kt, arith::SubIOp::create(b, arith::MaxUIOp::create(b, kBlocks, cIdx(1)),
                                   cIdx(1)));
  SmallVector<Value> scales;
  for (int64_t i = 0; i < g.mBlocks(); ++i)
    for (int64_t h = 0; h < 2; ++h) {
      Value row = arith::MinUIOp::create(b, add(rowBase, cIdx(64 * i + 8 * h)), lastRow);
      scales.push_back(
          memref::LoadOp::create(b, aScale, ValueRange{add(mul(row, kBlocks), kb)}));
    }
  // The tile's first weight block and, when it crosses into it, the next
  // (clamped: past N it only scales columns that are not stored).
  Value lastBlock =
      arith::SubIOp::create(b, arith::MaxUIOp::create(b, nBlocks, cIdx(1)), cIdx(1));
  Value nb0 = arith::DivUIOp::create(b, n0, cIdx(kScaleBlock));
  for (int64_t blk = 0; blk < (second ? 2 : 1); ++blk) {
    Value nb = arith::MinUIOp::create(b, add(nb0, cIdx(blk)), lastBlock);
    scales.push_back(
        memref::LoadOp::create(b, bScale, ValueRange{add(mul(nb, kBlocks), kb)}));
  }
  return scales;
}

SmallVector<Value> GemmKernelBuilder::promote(ValueRange accsIn, ValueRange partials,
                                              ArrayRef<Value> scales,
                                              int64_t boundary,
                                              int64_t firstBlock) {
  SmallVector<Value> accs(accsIn);
  int64_t rowScales = 2 * g.mBlocks();
  bool crosses = boundary < g.tileN / 8;
  for (int64_t i = firstBlock, e = firstBlock + partials.size(); i < e; ++i) {
    // [weight block][row half]
    Value rowScale[2][2];
    for (int64_t blk = 0; blk < (crosses ? 2 : 1); ++blk)
      for (int64_t h = 0; h < 2; ++h)
        rowScale[blk][h] =
            arith::MulFOp::create(b, scales[2 * i + h], scales[rowScales + blk]);
    for (int64_t e = 0; e < g.tileN / 2; ++e) {
      // Register e holds row rowInBlock + 8 * ((e / 2) % 2) of block i, in
      // n8 chunk e / 4.
      int64_t blk = e / 4 >= boundary ? 1 : 0;
      Value part = LLVM::ExtractValueOp::create(b, partials[i - firstBlock], e);
      Value acc = LLVM::ExtractValueOp::create(b, accs[i], e);
      Value sum = math::FmaOp::create(b, part, rowScale[blk][(e / 2) % 2], acc);
      accs[i] = LLVM::InsertValueOp::create(b, accs[i], sum, e);
    }
  }
  return accs;
}

SmallVector<Value> GemmKernelBuilder::multiplyAndPromote(
    Value stage, Value consumer, ValueRange accsIn, ArrayRef<Value> scales,
    int64_t boundary, llvm::function_ref<void()> released) {
  SmallVector<Value> accs(accsIn);
  int64_t chunk = g.promotePerMBlock ? 1 : g.mBlocks();
  for (int64_t first = 0; first < g.mBlocks(); first += chunk) {
    SmallVector<Value> fresh(chunk, undefAccumulator());
    SmallVector<Value> partials =
        issueWgmmas(stage, consumer, fresh, /*fresh=*/true, first);
    // The other consumers' wgmma keeps the tensor cores busy while this one
    // promotes.
    NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
    if (first + chunk == g.mBlocks())
      released();
    accs = promote(accs, partials, scales, boundary, first);
  }
  return accs;
}

SmallVector<Value> GemmKernelBuilder::perColumnOffset(
    Value n0, llvm::function_ref<SmallVector<Value>(int64_t)> mainloop) {
  int64_t chunks = g.tileN / 8;
  // Tile starts n0 = t * tile-n sit at multiples of gcd(tile-n, 128) inside
  // their weight block.
  int64_t step = std::gcd(g.tileN, kScaleBlock);
  auto boundary = [&](int64_t offset) {
    return offset + g.tileN > kScaleBlock ? (kScaleBlock - offset) / 8 : chunks;
  };
  if (kScaleBlock % g.tileN == 0 || step == kScaleBlock)
    return mainloop(chunks);
  SmallVector<int64_t> offsets;
  for (int64_t o = step; o < kScaleBlock; o += step)
    offsets.push_back(o);
  Value offset = arith::RemUIOp::create(b, n0, cIdx(kScaleBlock));
  auto sw = scf::IndexSwitchOp::create(
      b, SmallVector<Type>(g.mBlocks(), accType), offset, offsets, offsets.size());
  auto fill = [&](Region &region, int64_t o) {
    OpBuilder::InsertionGuard guard(b);
    b.createBlock(&region);
    scf::YieldOp::create(b, mainloop(boundary(o)));
  };
  fill(sw.getDefaultRegion(), 0);
  for (auto [region, o] : llvm::zip(sw.getCaseRegions(), offsets))
    fill(region, o);
  return SmallVector<Value>(sw.getResults());
}

std::pair<Value, Value> GemmKernelBuilder::tileCoords(Value t, Value tilesM,
                                                      Value tilesN) {
  Value width = mul(cIdx(g.groupM), tilesN);
  Value group = arith::DivUIOp::create(b, t, width);
  Value firstM = mul(group, cIdx(g.groupM));
  Value groupRows = arith::MinUIOp::create(
      b, arith::SubIOp::create(b, tilesM, firstM), cIdx(g.groupM));
  Value inGroup = arith::RemUIOp::create(b, t, width);
  Value mt = add(firstM, arith::RemUIOp::create(b, inGroup, groupRows));
  Value nt = arith::DivUIOp::create(b, inGroup, groupRows);
  return {mt, nt};
}

void GemmKernelBuilder::build() {
  MLIRContext *ctx = b.getContext();
  tensorMapA = args.lookup("a");
  tensorMapB = args.lookup("b");
  out = args.lookup("out");
  outScale = args.lookup("out_scale"); // Fp8Groups only
  aScale = args.lookup("a_scale");
  bScale = args.lookup("b_scale");
  bias = args.lookup("bias");
  addend = args.lookup("addend");
  ropeCos = args.lookup("cos");
  ropeSin = args.lookup("sin");
  if (p.finiteFlag)
    finiteFlag = args.lookup(finiteFlagArgName("out"));
  M = toIdx(args.lookup("m"));
  N = toIdx(args.lookup("n"));
  K = toIdx(args.lookup("k"));
  if (p.blockScaled) {
    nBlocks = toIdx(args.lookup("n_blocks"));
    kBlocks = toIdx(args.lookup("k_blocks"));
  }

  tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  kTiles = arith::CeilDivUIOp::create(b, K, cIdx(kTileK));
  accType = LLVM::LLVMStructType::getLiteral(
      ctx, SmallVector<Type>(g.tileN / 2, b.getF32Type()));

  Value wgThread = arith::RemUIOp::create(b, tid, cIdx(128));
  lane = arith::RemUIOp::create(b, wgThread, cIdx(32));
  rowInBlock = add(mul(arith::DivUIOp::create(b, wgThread, cIdx(32)), cIdx(16)),
                   arith::DivUIOp::create(b, lane, cIdx(4)));
  colInChunk = mul(arith::RemUIOp::create(b, lane, cIdx(4)), cIdx(2));

  // Dynamic shared memory, rounded up to the 1024-byte swizzle atom.
  auto smemType = MemRefType::get(
      {ShapedType::kDynamic}, b.getI8Type(), nullptr,
      gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup));
  Value dyn = gpu::DynamicSharedMemoryOp::create(b, smemType);
  Value raw = toI64(memref::ExtractAlignedPointerAsIndexOp::create(b, dyn));
  base = arith::AndIOp::create(b, add(raw, cI64(1023)), cI64(~int64_t(1023)));

  if (g.warpSpecialized)
    buildWarpSpecialized();
  else
    buildPlain();
}

void GemmKernelBuilder::buildPlain() {
  Value m0 = mul(gpu::BlockIdOp::create(b, gpu::Dimension::y), cIdx(g.tileM));
  Value n0 = mul(gpu::BlockIdOp::create(b, gpu::Dimension::x), cIdx(g.tileN));
  Value isLeader = cmp(arith::CmpIPredicate::eq, tid, cIdx(0));
  Value wg = arith::DivUIOp::create(b, tid, cIdx(128));
  Value isWgLeader =
      cmp(arith::CmpIPredicate::eq, arith::RemUIOp::create(b, tid, cIdx(128)), cIdx(0));
  initBarriers(g.warpgroups);
  Value rowBase = add(add(m0, mul(wg, cIdx(g.mPerWarpgroup()))), rowInBlock);

  // Prologue: fill the ring.
  ifThen(isLeader, [&] {
    for (int64_t s = 0; s < g.stages; ++s)
      ifThen(cmp(arith::CmpIPredicate::ult, cIdx(s), kTiles),
             [&] { issueLoads(cIdx(s), cIdx(s), m0, n0); });
  });

  if (p.blockScaled) {
    SmallVector<Value> accs = perColumnOffset(n0, [&](int64_t boundary) {
      auto loop = scf::ForOp::create(b, cIdx(0), kTiles, cIdx(1), zeroAccumulators());
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value kt = loop.getInductionVar();
      Value stage = arith::RemUIOp::create(b, kt, cIdx(g.stages));
      // Promotion per 128-wide K slice: the slice's product in a fresh
      // fragment, waited for, then scaled into the f32 accumulators.
      SmallVector<Value> scales =
          loadBlockScales(kt, rowBase, n0, boundary < g.tileN / 8);
      wait(fullBarrier(stage), roundParity(kt));
      auto refill = [&] {
        ifThen(isWgLeader, [&] {
          NVVM::MBarrierArriveOp::create(b, Type(), emptyBarrier(stage), Value());
        });
        Value next = add(kt, cIdx(g.stages));
        ifThen(arith::AndIOp::create(b, isLeader,
                                     cmp(arith::CmpIPredicate::ult, next, kTiles)),
               [&] {
                 wait(emptyBarrier(stage), roundParity(kt));
                 issueLoads(stage, next, m0, n0);
               });
      };
      scf::YieldOp::create(b, multiplyAndPromote(stage, wg, loop.getRegionIterArgs(),
                                                 scales, boundary, refill));
      return SmallVector<Value>(loop.getResults());
    });
    emitEpilogue(accs, m0, n0, wg);
    finishStores();
    return;
  }

  auto loop = scf::ForOp::create(b, cIdx(0), kTiles, cIdx(1), zeroAccumulators());
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value kt = loop.getInductionVar();
    Value stage = arith::RemUIOp::create(b, kt, cIdx(g.stages));
    wait(fullBarrier(stage), roundParity(kt));
    SmallVector<Value> accs = issueWgmmas(stage, wg, loop.getRegionIterArgs());
    // At most this slice's group in flight: the previous stage is free.
    NVVM::WgmmaWaitGroupSyncOp::create(b, 1);
    ifThen(cmp(arith::CmpIPredicate::uge, kt, cIdx(1)), [&] {
      Value prev = arith::SubIOp::create(b, kt, cIdx(1));
      Value prevStage = arith::RemUIOp::create(b, prev, cIdx(g.stages));
      ifThen(isWgLeader, [&] {
        NVVM::MBarrierArriveOp::create(b, Type(), emptyBarrier(prevStage), Value());
      });
      Value next = add(prev, cIdx(g.stages));
      Value refill = arith::AndIOp::create(
          b, isLeader, cmp(arith::CmpIPredicate::ult, next, kTiles));
      ifThen(refill, [&] {
        wait(emptyBarrier(prevStage), roundParity(prev));
        issueLoads(prevStage, next, m0, n0);
      });
    });
    scf::YieldOp::create(b, accs);
  }
  NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
  SmallVector<Value> accs(loop.getResults());
  emitEpilogue(accs, m0, n0, wg);
  finishStores();
}

void GemmKernelBuilder::buildWarpSpecialized() {
  Value tilesM = arith::CeilDivUIOp::create(b, M, cIdx(g.tileM));
  Value tilesN = arith::CeilDivUIOp::create(b, N, cIdx(g.tileN));
  Value tiles = mul(tilesM, tilesN);
  Value firstTile = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value tileStride = gpu::GridDimOp::create(b, gpu::Dimension::x);
  Value wg = arith::DivUIOp::create(b, tid, cIdx(128));
  initBarriers(g.warpgroups);

  // Producer and consumers walk the same tile sequence and count K slices
  // across tiles (`kIter`), so ring stage and phase carry over.
  auto tileLoop = [&](llvm::function_ref<void(Value m0, Value n0, Value kIter)> body) {
    auto loop = scf::ForOp::create(b, firstTile, tiles, tileStride, ValueRange{cIdx(0)});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    auto [mt, nt] = tileCoords(loop.getInductionVar(), tilesM, tilesN);
    Value kIter = loop.getRegionIterArgs()[0];
    body(mul(mt, cIdx(g.tileM)), mul(nt, cIdx(g.tileN)), kIter);
    scf::YieldOp::create(b, ValueRange{add(kIter, kTiles)});
  };
  int64_t consumerRegs = g.consumerRegisters();

  auto isProducer = cmp(arith::CmpIPredicate::eq, wg, cIdx(0));
  scf::IfOp::create(
      b, isProducer,
      [&](OpBuilder &, Location) {
        if (consumerRegs)
          NVVM::SetMaxRegisterOp::create(b, kProducerRegisters,
                                         NVVM::SetMaxRegisterAction::decrease);
        ifThen(cmp(arith::CmpIPredicate::eq, tid, cIdx(0)), [&] {
          tileLoop([&](Value m0, Value n0, Value kIter) {
            auto kLoop = scf::ForOp::create(b, cIdx(0), kTiles, cIdx(1));
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPointToStart(kLoop.getBody());
            Value kt = kLoop.getInductionVar();
            Value it = add(kIter, kt);
            Value stage = arith::RemUIOp::create(b, it, cIdx(g.stages));
            // A fresh barrier counts as having completed the phase before
            // its first, so round r waits for the consumers' release of
            // round r - 1 (parity of r, flipped).
            Value parity = arith::XOrIOp::create(b, roundParity(it), cI32(1));
            wait(emptyBarrier(stage), parity);
            issueLoads(stage, kt, m0, n0);
          });
        });
        scf::YieldOp::create(b);
      },
      [&](OpBuilder &, Location) {
        if (consumerRegs)
          NVVM::SetMaxRegisterOp::create(b, consumerRegs,
                                         NVVM::SetMaxRegisterAction::increase);
        Value consumer = arith::SubIOp::create(b, wg, cIdx(1));
        Value isWgLeader = cmp(arith::CmpIPredicate::eq,
                               arith::RemUIOp::create(b, tid, cIdx(128)), cIdx(0));
        auto release = [&](Value it) {
          ifThen(isWgLeader, [&] {
            NVVM::MBarrierArriveOp::create(
                b, Type(), emptyBarrier(arith::RemUIOp::create(b, it, cIdx(g.stages))),
                Value());
          });
        };
        tileLoop([&](Value m0, Value n0, Value kIter) {
          if (p.blockScaled) {
            Value rowBase =
                add(add(m0, mul(consumer, cIdx(g.mPerWarpgroup()))), rowInBlock);
            SmallVector<Value> accs =
                perColumnOffset(n0, [&](int64_t boundary) {
                  auto kLoop = scf::ForOp::create(b, cIdx(0), kTiles, cIdx(1),
                                                  zeroAccumulators());
                  OpBuilder::InsertionGuard guard(b);
                  b.setInsertionPointToStart(kLoop.getBody());
                  Value kt = kLoop.getInductionVar();
                  Value it = add(kIter, kt);
                  Value stage = arith::RemUIOp::create(b, it, cIdx(g.stages));
                  // Scales first: their loads overlap the barrier wait and
                  // wgmma.
                  SmallVector<Value> scales =
                      loadBlockScales(kt, rowBase, n0, boundary < g.tileN / 8);
                  wait(fullBarrier(stage), roundParity(it));
                  scf::YieldOp::create(
                      b, multiplyAndPromote(stage, consumer,
                                            kLoop.getRegionIterArgs(), scales,
                                            boundary, [&] { release(it); }));
                  return SmallVector<Value>(kLoop.getResults());
                });
            emitEpilogue(accs, m0, n0, consumer);
            return;
          }
          auto kLoop = scf::ForOp::create(b, cIdx(0), kTiles, cIdx(1), zeroAccumulators());
          {
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPointToStart(kLoop.getBody());
            Value kt = kLoop.getInductionVar();
            Value it = add(kIter, kt);
            Value stage = arith::RemUIOp::create(b, it, cIdx(g.stages));
            wait(fullBarrier(stage), roundParity(it));
            SmallVector<Value> accs =
                issueWgmmas(stage, consumer, kLoop.getRegionIterArgs());
            NVVM::WgmmaWaitGroupSyncOp::create(b, 1);
            ifThen(cmp(arith::CmpIPredicate::uge, kt, cIdx(1)),
                   [&] { release(arith::SubIOp::create(b, it, cIdx(1))); });
            scf::YieldOp::create(b, accs);
          }
          NVVM::WgmmaWaitGroupSyncOp::create(b, 0);
          ifThen(cmp(arith::CmpIPredicate::ugt, kTiles, cIdx(0)), [&] {
            release(arith::SubIOp::create(b, add(kIter, kTiles), cIdx(1)));
          });
          SmallVector<Value> accs(kLoop.getResults());
          emitEpilogue(accs, m0, n0, consumer);
        });
        finishStores();
        scf::YieldOp::create(b);
      });
}

Value GemmKernelBuilder::scaled(Value acc, Value scale, Value col, Value colIn,
                                Value row) {
  if (prescaled)
    return acc;
  Value v = arith::MulFOp::create(b, acc, scale);
  // Columns past N read the last bias element (their result is not stored
  // or, for group scales, masked out by the caller).
  if (bias)
    v = arith::AddFOp::create(
        b, v,
        loadAsF32(bias, colIn ? arith::MinUIOp::create(b, col, lastIndex(N)) : col));
  if (addend) {
    assert(row && "the addend's element needs the row");
    // Rows past M and columns past N (not stored) read an entry inside.
    Value r = arith::MinUIOp::create(b, row, lastIndex(M));
    Value c = arith::MinUIOp::create(b, col, lastIndex(N));
    v = arith::AddFOp::create(b, v, loadAsF32(addend, add(mul(r, N), c)));
  }
  return v;
}

void GemmKernelBuilder::emitEpilogue(ArrayRef<Value> accs, Value m0, Value n0,
                                     Value consumer) {
  // Block scales were applied per K slice.
  Value scale =
      p.blockScaled
          ? Value(arith::ConstantOp::create(b, b.getF32FloatAttr(1.0f)))
          : Value(arith::MulFOp::create(
                b, loadScalarF32(b, aScale, p.lhsScale, cIdx(0)),
                loadScalarF32(b, bScale, p.rhsScale, cIdx(0))));
  Value rowBase = add(add(m0, mul(consumer, cIdx(g.mPerWarpgroup()))), rowInBlock);
  SmallVector<Value> formed;
  if (p.rope) {
    formed = finalValues(accs, scale, rowBase, n0);
    accs = formed;
    prescaled = true;
  }
  // The paths below return; the next epilogue (another build) starts clear.
  llvm::scope_exit clearPrescaled([&] { prescaled = false; });
  if (finiteFlag)
    flagNonFinite(accs, scale, rowBase, n0);
  if (g.stagesEpilogue())
    return storeStaged(accs, scale, m0, n0, consumer);
  if (p.out == OutputKind::Fp8Groups)
    return storeFp8Groups(accs, scale, rowBase, n0);
  // Full tiles with an even N store element pairs without checks.
  Value interior = arith::AndIOp::create(
      b,
      arith::AndIOp::create(
          b, cmp(arith::CmpIPredicate::ule, add(m0, cIdx(g.tileM)), M),
          cmp(arith::CmpIPredicate::ule, add(n0, cIdx(g.tileN)), N)),
      cmp(arith::CmpIPredicate::eq, arith::AndIOp::create(b, N, cIdx(1)), cIdx(0)));
  scf::IfOp::create(
      b, interior,
      [&](OpBuilder &, Location) {
        storeRows(accs, scale, rowBase, n0, /*checked=*/false);
        scf::YieldOp::create(b);
      },
      [&](OpBuilder &, Location) {
        storeRows(accs, scale, rowBase, n0, /*checked=*/true);
        scf::YieldOp::create(b);
      });
}

SmallVector<Value> GemmKernelBuilder::finalValues(ArrayRef<Value> accs,
                                                  Value scale, Value rowBase,
                                                  Value n0) {
  Type stored = p.out == OutputKind::F32 ? Type(b.getF32Type()) : b.getBF16Type();
  // Rows past M (not stored) read the last row's table entries.
  Value lastRow = lastIndex(M);
  SmallVector<Value> out;
  for (int64_t i = 0; i < g.mBlocks(); ++i) {
    SmallVector<Value> xs;
    for (int64_t e = 0; e < g.tileN / 2; ++e) {
      Value col = fragmentCol(n0, e);
      Value acc = LLVM::ExtractValueOp::create(b, accs[i], e);
      xs.push_back(scaled(acc, scale, col, col, fragmentRow(rowBase, i, e)));
    }
    xs = rotateHeads(xs, i, rowBase, n0, stored, lastRow);
    Value acc = undefAccumulator();
    for (auto [e, y] : llvm::enumerate(xs))
      acc = LLVM::InsertValueOp::create(b, acc, y, e);
    out.push_back(acc);
  }
  return out;
}

SmallVector<Value> GemmKernelBuilder::rotateHeads(ArrayRef<Value> values,
                                                  int64_t i, Value rowBase,
                                                  Value n0, Type stored,
                                                  Value lastRow) {
  const FusedRope &rope = *p.rope;
  F32Emitter f{b};
  int64_t d = rope.headDim, halfChunks = d / 16;
  // The values as the unfused GEMM stores them.
  SmallVector<Value> xs;
  for (Value v : values)
    xs.push_back(f.roundTo(v, stored));
  SmallVector<Value> ys(xs);
  Value rotatedCols = cIdx(rope.rotatedHeads * d);
  for (int64_t h = 0; h < 2; ++h) {
    Value row = arith::MinUIOp::create(b, add(rowBase, cIdx(64 * i + 8 * h)), lastRow);
    Value rowStart = mul(row, cIdx(d));
    // The table entries at a head column, shared by the tile's heads.
    DenseMap<int64_t, std::pair<Value, Value>> entries;
    auto entry = [&](int64_t inHead, int64_t k) {
      auto [it, fresh] = entries.try_emplace(2 * inHead + k);
      if (fresh) {
        Value idx = add(add(rowStart, cIdx(inHead + k)), colInChunk);
        it->second = {loadAsF32(ropeCos, idx), loadAsF32(ropeSin, idx)};
      }
      return it->second;
    };
    for (int64_t j = 0; j < g.tileN / 8; ++j) {
      int64_t inHead = (8 * j) % d;
      bool firstHalf = inHead < d / 2;
      int64_t partner = firstHalf ? j + halfChunks : j - halfChunks;
      Value rotates = cmp(arith::CmpIPredicate::ult, add(n0, cIdx(8 * j)), rotatedCols);
      for (int64_t k = 0; k < 2; ++k) {
        int64_t e = 4 * j + 2 * h + k;
        Value x = xs[e], xp = xs[4 * partner + 2 * h + k];
        auto [c, sn] = entry(inHead, k);
        // y1 = x1 c1 - x2 s1, y2 = x2 c2 + x1 s2 (coat.rope's products
        // and sum, each an f32 operation).
        Value p1 = f.mul(x, c), p2 = f.mul(xp, sn);
        Value y = firstHalf ? f.sub(p1, p2) : f.add(p1, p2);
        ys[e] = f.select(rotates, y, x);
      }
    }
  }
  return ys;
}

void GemmKernelBuilder::flagNonFinite(ArrayRef<Value> accs, Value scale,
                                      Value rowBase, Value n0) {
  // Every value of the fragment counts, stored or not: rows and columns
  // past the edge accumulate TMA's zero fill, so they are finite unless a
  // non-finite operand or bias element makes stored ones non-finite too.
  F32Emitter f{b};
  SmallVector<Value> values;
  for (int64_t i = 0; i < g.mBlocks(); ++i)
    for (int64_t e = 0; e < g.tileN / 2; ++e) {
      Value col = fragmentCol(n0, e), row = fragmentRow(rowBase, i, e);
      values.push_back(scaled(LLVM::ExtractValueOp::create(b, accs[i], e),
                              scale, col, col, row));
    }
  Type stored = p.out == OutputKind::F32 ? Type(b.getF32Type()) : b.getBF16Type();
  raiseFiniteFlag(b, storesNonFinite(f, values, stored), finiteFlag);
}

void GemmKernelBuilder::storeRows(ArrayRef<Value> accs, Value scale, Value rowBase,
                                  Value n0, bool checked) {
  MLIRContext *ctx = b.getContext();
  Type elem = p.out == OutputKind::F32 ? Type(b.getF32Type()) : b.getBF16Type();
  int64_t elemBytes = elem.getIntOrFloatBitWidth() / 8;
  Value outBase = toI64(memref::ExtractAlignedPointerAsIndexOp::create(b, out));
  auto global = LLVM::LLVMPointerType::get(ctx, 1);
  Value nI64 = toI64(N);
  auto narrow = [&](Value v) -> Value {
    return elem.isF32() ? v : arith::TruncFOp::create(b, elem, v);
  };
  for (int64_t i = 0; i < g.mBlocks(); ++i) {
    for (int64_t h = 0; h < 2; ++h) {
      Value rowIdx = add(rowBase, cIdx(64 * i + 8 * h));
      Value rowOff = mul(toI64(rowIdx), nI64);
      auto body = [&]() {
        for (int64_t j = 0; j < g.tileN / 8; ++j) {
          Value col = add(add(n0, cIdx(8 * j)), colInChunk);
          Value col1 = add(col, cIdx(1));
          int64_t e = 4 * j + 2 * h;
          Value v0 = LLVM::ExtractValueOp::create(b, accs[i], e);
          Value v1 = LLVM::ExtractValueOp::create(b, accs[i], e + 1);
          Value off = mul(add(rowOff, toI64(col)), cI64(elemBytes));
          Value ptr = LLVM::IntToPtrOp::create(b, global, Value(add(outBase, off)));
          if (!checked) {
            Value pair = vector::FromElementsOp::create(
                b, VectorType::get({2}, elem),
                ValueRange{narrow(scaled(v0, scale, col, Value(), rowIdx)),
                           narrow(scaled(v1, scale, col1, Value(), rowIdx))});
            LLVM::StoreOp::create(b, pair, ptr, 2 * elemBytes);
            continue;
          }
          ifThen(cmp(arith::CmpIPredicate::ult, col, N), [&] {
            LLVM::StoreOp::create(b, narrow(scaled(v0, scale, col, Value(), rowIdx)), ptr,
                                  elemBytes);
          });
          ifThen(cmp(arith::CmpIPredicate::ult, col1, N), [&] {
            Value ptr1 =
                LLVM::GEPOp::create(b, global, elem, ptr, ArrayRef<LLVM::GEPArg>{1});
            LLVM::StoreOp::create(b, narrow(scaled(v1, scale, col1, Value(), rowIdx)), ptr1,
                                  elemBytes);
          });
        }
      };
      if (checked)
        ifThen(cmp(arith::CmpIPredicate::ult, rowIdx, M), body);
      else
        body();
    }
  }
}

void GemmKernelBuilder::storeStaged(ArrayRef<Value> accs, Value scale, Value m0,
                                    Value n0, Value consumer) {
  // A warp's direct stores write 16 bytes into each of 8 rows. Here the
  // warpgroup first writes a 128-byte-wide column block of its rows to
  // shared memory, then every thread stores 16-byte chunks of it, 8 threads
  // a row: 128 contiguous bytes each (Staged), or one thread has TMA store
  // the block and the warpgroup goes on (Tma). Chunk q of row R sits at
  // chunk q ^ (R % 8) of the row's 128 bytes, so the fragment writes (8
  // rows, one chunk each) and the chunk reads (one row) hit distinct banks;
  // in the 1024-byte-aligned region that is TMA's 128-byte swizzle.
  MLIRContext *ctx = b.getContext();
  bool codes = p.out == OutputKind::Fp8Groups;
  Type elem = p.out == OutputKind::F32 ? Type(b.getF32Type())
              : codes                  ? Type(b.getI8Type())
                                       : b.getBF16Type();
  int64_t elemBytes = outputElementBytes(p.out);
  int64_t blockCols = epilogueBlockCols(p.out), chunkElems = 16 / elemBytes;
  int64_t rows = g.mPerWarpgroup(), stageRowBytes = kEpilogueBlockBytes;
  auto global = LLVM::LLVMPointerType::get(ctx, 1);
  auto v16i8 = VectorType::get({16}, b.getI8Type());
  Value stageBase = add(add(base, cI64(g.epilogueOffset())),
                        mul(toI64(consumer), cI64(rows * stageRowBytes)));
  auto slot = [&](Value row, Value chunk) { // byte offset in the rows
    Value swizzled = arith::XOrIOp::create(
        b, chunk, arith::RemUIOp::create(b, row, cIdx(8)));
    return add(mul(toI64(row), cI64(stageRowBytes)), mul(toI64(swizzled), cI64(16)));
  };
  // Named barrier 1 + consumer: this warpgroup's 128 threads.
  auto syncWarpgroup = [&] {
    NVVM::BarrierOp::create(b, Type(), toI32(add(consumer, cIdx(1))), cI32(128),
                            NVVM::BarrierReductionAttr(), Value());
  };
  auto narrow = [&](Value v) -> Value {
    return elem.isF32() ? v : arith::TruncFOp::create(b, elem, v);
  };
  // tile-n is a multiple of 16, so the last block may be narrower: 32 or
  // more bytes a row, 2 or more chunks (TMA: tile-n is checked to be a
  // multiple of the block).
  auto blockWidth = [&](int64_t blk) {
    return std::min(blockCols, g.tileN - blk * blockCols);
  };
  // A thread's pair of adjacent elements of n8 chunk `j` (of the tile) in
  // row `row` (of the warpgroup) into column block `blk`'s rows.
  auto stagePair = [&](Value row, int64_t blk, int64_t j, Value pair) {
    Value byte = mul(add(cIdx(8 * j - blk * blockCols), colInChunk),
                     cIdx(elemBytes));
    Value at = add(add(stageBase,
                       slot(row, arith::DivUIOp::create(b, byte, cIdx(16)))),
                   toI64(arith::RemUIOp::create(b, byte, cIdx(16))));
    LLVM::StoreOp::create(b, pair, shared(at), 2 * elemBytes);
  };
  Value rowBase, groupsPerRow, quadLeader;
  if (codes) {
    rowBase = add(add(m0, mul(consumer, cIdx(g.mPerWarpgroup()))), rowInBlock);
    groupsPerRow = arith::CeilDivUIOp::create(b, N, cIdx(kOutputGroup));
    quadLeader = cmp(arith::CmpIPredicate::eq, colInChunk, cIdx(0));
  }
  // The fragment's values of column block `blk` into the rows.
  auto stageBlock = [&](int64_t blk) {
    int64_t firstChunk = blk * blockCols / 8; // n8 chunks of the block
    if (codes) {
      // Whole 1x16 groups: their scales go straight to out_scale.
      SmallVector<GroupRef> refs;
      for (int64_t i = 0; i < g.mBlocks(); ++i)
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t grp = firstChunk / 2;
               grp < (firstChunk + blockWidth(blk) / 8) / 2; ++grp)
            refs.push_back({i, h, grp});
      SmallVector<GroupCodes> qs = quantizeGroups(accs, scale, rowBase, n0, refs);
      for (auto [ref, q] : llvm::zip_equal(refs, qs)) {
        Value row = add(rowInBlock, cIdx(64 * ref.i + 8 * ref.h));
        for (int64_t half = 0; half < 2; ++half)
          stagePair(row, blk, 2 * ref.grp + half,
                    vector::FromElementsOp::create(
                        b, VectorType::get({2}, elem),
                        ValueRange{q.codes[2 * half], q.codes[2 * half + 1]}));
      }
      for (auto [ref, q] : llvm::zip_equal(refs, qs))
        storeGroupScale(q, n0, ref.grp, groupsPerRow, quadLeader);
      return;
    }
    for (int64_t i = 0; i < g.mBlocks(); ++i) {
      for (int64_t h = 0; h < 2; ++h) {
        Value row = add(rowInBlock, cIdx(64 * i + 8 * h));
        for (int64_t j = firstChunk; j < firstChunk + blockWidth(blk) / 8; ++j) {
          Value col = add(add(n0, cIdx(8 * j)), colInChunk);
          Value col1 = add(col, cIdx(1));
          int64_t e = 4 * j + 2 * h;
          Value v0 = LLVM::ExtractValueOp::create(b, accs[i], e);
          Value v1 = LLVM::ExtractValueOp::create(b, accs[i], e + 1);
          // Columns past N are staged but never stored; their bias (and
          // addend) index is clamped.
          Value gRow = add(add(m0, mul(consumer, cIdx(rows))), row);
          stagePair(row, blk, j,
                    vector::FromElementsOp::create(
                        b, VectorType::get({2}, elem),
                        ValueRange{narrow(scaled(v0, scale, col, col, gRow)),
                                   narrow(scaled(v1, scale, col1, col1, gRow))}));
        }
      }
    }
  };
  Value wgThread = arith::RemUIOp::create(b, tid, cIdx(128));
  Value wgRow0 = add(m0, mul(consumer, cIdx(rows)));

  if (g.epilogue == EpilogueKind::Tma) {
    Value storer = cmp(arith::CmpIPredicate::eq, wgThread, cIdx(0));
    for (int64_t blk = 0; blk * blockCols < g.tileN; ++blk) {
      // The rows are free once the previous block's store has read them.
      ifThen(storer, [&] {
        NVVM::CpAsyncBulkWaitGroupOp::create(b, 0, b.getUnitAttr());
      });
      syncWarpgroup();
      stageBlock(blk);
      // Every writer makes its generic-proxy writes visible to the TMA unit.
      NVVM::FenceProxyOp::create(b, NVVM::ProxyKind::async_shared,
                                 NVVM::SharedSpaceAttr::get(
                                     ctx, NVVM::SharedSpace::shared_cta));
      syncWarpgroup();
      // Out-of-range rows and columns of the box are not written.
      ifThen(storer, [&] {
        Value col0 = toI32(add(n0, cIdx(blk * blockCols)));
        NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp::create(
            b, out, shared(stageBase), ValueRange{col0, toI32(wgRow0)},
            Value(), NVVM::TMAStoreMode::TILE, Value());
        NVVM::CpAsyncBulkCommitGroupOp::create(b);
      });
    }
    return;
  }

  Value outBase = toI64(memref::ExtractAlignedPointerAsIndexOp::create(b, out));
  Value rowBytes = mul(toI64(N), cI64(elemBytes));
  // Whole 16-byte chunks need rows that start 16-byte aligned: N a
  // multiple of a chunk and `out` aligned (a view may be offset).
  Value alignedRows = arith::AndIOp::create(
      b,
      cmp(arith::CmpIPredicate::eq, arith::RemUIOp::create(b, N, cIdx(chunkElems)),
          cIdx(0)),
      arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                            arith::AndIOp::create(b, outBase, cI64(15)), cI64(0)));
  for (int64_t blk = 0; blk * blockCols < g.tileN; ++blk) {
    stageBlock(blk);
    syncWarpgroup();
    // rows x chunksPerRow chunks of 16 bytes (a multiple of 128), 128
    // threads.
    int64_t chunksPerRow = blockWidth(blk) * elemBytes / 16;
    for (int64_t it = 0; it < rows * chunksPerRow / 128; ++it) {
      Value c = add(wgThread, cIdx(128 * it));
      Value row = arith::DivUIOp::create(b, c, cIdx(chunksPerRow));
      Value chunk = arith::RemUIOp::create(b, c, cIdx(chunksPerRow));
      Value bytes = LLVM::LoadOp::create(b, v16i8, shared(add(stageBase, slot(row, chunk))),
                                         /*alignment=*/16);
      Value gRow = add(wgRow0, row);
      Value col0 = add(add(n0, cIdx(blk * blockCols)), mul(chunk, cIdx(chunkElems)));
      Value rowIn = cmp(arith::CmpIPredicate::ult, gRow, M);
      Value whole = arith::AndIOp::create(
          b, arith::AndIOp::create(b, rowIn, alignedRows),
          cmp(arith::CmpIPredicate::ule, add(col0, cIdx(chunkElems)), N));
      Value at = add(add(outBase, mul(toI64(gRow), rowBytes)),
                     mul(toI64(col0), cI64(elemBytes)));
      emitIfElse(
          b, whole,
          [&] {
            LLVM::StoreOp::create(
                b, bytes, LLVM::IntToPtrOp::create(b, global, at), /*alignment=*/16);
          },
          [&] {
            // The row's last chunk, or rows not 16-byte aligned: element by
            // element where inside.
            Value vals = vector::BitCastOp::create(
                b, VectorType::get({chunkElems}, elem), bytes);
            for (int64_t e = 0; e < chunkElems; ++e) {
              Value inside = arith::AndIOp::create(
                  b, rowIn, cmp(arith::CmpIPredicate::ult, add(col0, cIdx(e)), N));
              ifThen(inside, [&] {
                Value ptr = LLVM::IntToPtrOp::create(
                    b, global, add(at, cI64(e * elemBytes)));
                LLVM::StoreOp::create(
                    b, vector::ExtractOp::create(b, vals, e), ptr, elemBytes);
              });
            }
          });
    }
    // The next block rewrites these rows.
    syncWarpgroup();
  }
}

void GemmKernelBuilder::finishStores() {
  if (g.epilogue != EpilogueKind::Tma)
    return;
  // Shared memory must outlive the reads of the last stores, and the kernel
  // the writes.
  ifThen(cmp(arith::CmpIPredicate::eq, arith::RemUIOp::create(b, tid, cIdx(128)),
             cIdx(0)),
         [&] { NVVM::CpAsyncBulkWaitGroupOp::create(b, 0, UnitAttr()); });
}

/// 1x16 groups of a row span two n8 chunks, i.e. the 4 lanes of a quad
/// (4 values each): the group maximum is a 2-step shuffle inside the quad,
/// done by every lane (shuffles need the whole warp), stores are masked.
/// Numerics follow COAT's quantized GEMM epilogue (COAT.md §4.1): with
/// acc = A.B * s_A * s_B (+ bias) in f32, s = (max|acc| + 1e-10) / fp8max,
/// codes = cvt.rn.satfinite(acc / s) and the stored scale is bf16(s).
/// Columns past N count as 0 in the group maximum. The direct epilogue
/// (storeFp8Groups) stores each lane's code pairs; the staged one
/// (storeStaged) stages them.
GemmKernelBuilder::GroupCodes
GemmKernelBuilder::groupRow(Value rowBase, int64_t i, int64_t h) {
  GroupCodes q;
  q.row = add(rowBase, cIdx(64 * i + 8 * h));
  q.rowIn = cmp(arith::CmpIPredicate::ult, q.row, M);
  return q;
}

SmallVector<GemmKernelBuilder::GroupCodes>
GemmKernelBuilder::quantizeGroups(ArrayRef<Value> accs, Value scale,
                                  Value rowBase, Value n0,
                                  ArrayRef<GroupRef> refs) {
  MLIRContext *ctx = b.getContext();
  F32Emitter f{b};
  GroupLane quad;
  quad.elementsPerLane = 4;
  quad.lanesPerGroup = 4;
  quad.groupSize = kOutputGroup;
  quad.onGpu = true;
  Type fp8 = getFp8Type(ctx, p.outFormat);
  float fp8Max = ::coat::getFp8Traits(p.outFormat).maxFinite;
  SmallVector<GroupCodes> qs;
  for (const GroupRef &ref : refs) {
    GroupCodes q = groupRow(rowBase, ref.i, ref.h);
    for (int64_t half = 0; half < 2; ++half)
      for (int64_t e = 0; e < 2; ++e) {
        Value col = add(add(n0, cIdx(8 * (2 * ref.grp + half) + e)), colInChunk);
        q.cols.push_back(col);
        q.ins.push_back(cmp(arith::CmpIPredicate::ult, col, N));
      }
    qs.push_back(q);
  }
  // Phase by phase over all the groups, in one basic block: each group is a
  // chain of dependent latencies (maximum, quad shuffles, scale, reciprocal,
  // quotients), and one group at a time, each behind a division branch,
  // left the epilogue waiting on them. Tiles inside N skip the column
  // checks (a select per value).
  auto quantize = [&](bool checked) {
    SmallVector<SmallVector<Value, 4>> vals;
    SmallVector<Value> padded;
    for (auto [ref, q] : llvm::zip_equal(refs, qs)) {
      SmallVector<Value, 4> v;
      for (int64_t k = 0; k < 4; ++k) {
        int64_t j = 2 * ref.grp + k / 2, e = k % 2;
        Value acc =
            LLVM::ExtractValueOp::create(b, accs[ref.i], 4 * j + 2 * ref.h + e);
        Value colIn = checked ? q.ins[k] : Value();
        Value x = scaled(acc, scale, q.cols[k], colIn);
        v.push_back(checked ? f.select(colIn, x, f.c(0.0)) : x);
      }
      Value amax = f.abs(v[0]);
      for (Value x : ArrayRef<Value>(v).drop_front())
        amax = f.maxnum(amax, f.abs(x));
      vals.push_back(v);
      padded.push_back(amax);
    }
    for (Value &m : padded)
      m = f.add(quad.allReduce(b, m, GroupReduceKind::MaxNum),
                f.c(::coat::kActivationScaleEps));
    // s = (max + eps) / fp8max, the IEEE quotient: max + eps >= 1e-10 keeps
    // it normal (or +inf, or NaN), inside the branch-free division's range,
    // and so is every s as a divisor (>= 2^-43, <= 2^120). An infinite max
    // needs the codes' contract (an overflowing first product kept); the
    // values' quotients do not (|x / s| < 449, or s = +inf).
    SmallVector<Value> results =
        divideByDivisorInRange(f, padded, f.c(fp8Max), DivisionUse::Fp8Codes);
    for (auto [v, sc] : llvm::zip_equal(vals, SmallVector<Value>(results)))
      for (Value x : divideByDivisorInRange(f, v, sc, DivisionUse::Exact))
        results.push_back(arith::BitcastOp::create(
            b, b.getI8Type(), arith::TruncFOp::create(b, fp8, x)));
    return results; // the scales, then each group's four codes
  };
  Value interior = cmp(arith::CmpIPredicate::ule, add(n0, cIdx(g.tileN)), N);
  SmallVector<Type> types(qs.size(), b.getF32Type());
  types.append(4 * qs.size(), b.getI8Type());
  auto branch = scf::IfOp::create(b, types, interior, /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(branch.thenBlock());
    scf::YieldOp::create(b, quantize(/*checked=*/false));
    b.setInsertionPointToStart(branch.elseBlock());
    scf::YieldOp::create(b, quantize(/*checked=*/true));
  }
  for (auto [k, q] : llvm::enumerate(qs)) {
    q.scale = branch.getResult(k);
    for (int64_t c = 0; c < 4; ++c)
      q.codes.push_back(branch.getResult(qs.size() + 4 * k + c));
  }
  return qs;
}

void GemmKernelBuilder::storeGroupScale(const GroupCodes &q, Value n0,
                                        int64_t grp, Value groupsPerRow,
                                        Value quadLeader) {
  Value groupIdx =
      add(arith::DivUIOp::create(b, n0, cIdx(kOutputGroup)), cIdx(grp));
  Value storeScale = arith::AndIOp::create(
      b, arith::AndIOp::create(b, q.rowIn, quadLeader),
      cmp(arith::CmpIPredicate::ult, groupIdx, groupsPerRow));
  ifThen(storeScale, [&] {
    Value bits = arith::BitcastOp::create(
        b, b.getI16Type(), arith::TruncFOp::create(b, b.getBF16Type(), q.scale));
    memref::StoreOp::create(b, bits, outScale,
                            ValueRange{add(mul(q.row, groupsPerRow), groupIdx)});
  });
}

void GemmKernelBuilder::storeFp8Groups(ArrayRef<Value> accs, Value scale,
                                       Value rowBase, Value n0) {
  Value groupsPerRow = arith::CeilDivUIOp::create(b, N, cIdx(kOutputGroup));
  Value codesBase = toI64(memref::ExtractAlignedPointerAsIndexOp::create(b, out));
  auto global = LLVM::LLVMPointerType::get(b.getContext(), 1);
  Value nI64 = toI64(N);
  Value quadLeader = cmp(arith::CmpIPredicate::eq, colInChunk, cIdx(0));
  for (int64_t i = 0; i < g.mBlocks(); ++i) {
    SmallVector<GroupRef> refs;
    for (int64_t grp = 0; grp < g.tileN / kOutputGroup; ++grp)
      for (int64_t h = 0; h < 2; ++h)
        refs.push_back({i, h, grp});
    SmallVector<GroupCodes> qs = quantizeGroups(accs, scale, rowBase, n0, refs);
    for (size_t k = 0; k < qs.size(); ++k) {
      const GroupCodes &q = qs[k];
      Value rowOff = mul(toI64(q.row), nI64);
      // Each lane writes two byte pairs (one per n8 chunk).
      for (int64_t half = 0; half < 2; ++half) {
        Value col = q.cols[2 * half];
        Value ptr = LLVM::IntToPtrOp::create(
            b, global, Value(add(codesBase, add(rowOff, toI64(col)))));
        Value pairIn = arith::AndIOp::create(
            b, q.ins[2 * half + 1],
            cmp(arith::CmpIPredicate::eq, arith::AndIOp::create(b, N, cIdx(1)),
                cIdx(0)));
        scf::IfOp::create(
            b, arith::AndIOp::create(b, q.rowIn, pairIn),
            [&](OpBuilder &, Location) {
              Value pair = vector::FromElementsOp::create(
                  b, VectorType::get({2}, b.getI8Type()),
                  ValueRange{q.codes[2 * half], q.codes[2 * half + 1]});
              LLVM::StoreOp::create(b, pair, ptr, 2);
              scf::YieldOp::create(b);
            },
            [&](OpBuilder &, Location) {
              ifThen(arith::AndIOp::create(b, q.rowIn, q.ins[2 * half]), [&] {
                LLVM::StoreOp::create(b, q.codes[2 * half], ptr, 1);
              });
              ifThen(arith::AndIOp::create(b, q.rowIn, q.ins[2 * half + 1]), [&] {
                Value ptr1 = LLVM::GEPOp::create(b, global, b.getI8Type(), ptr,
                                                 ArrayRef<LLVM::GEPArg>{1});
                LLVM::StoreOp::create(b, q.codes[2 * half + 1], ptr1, 1);
              });
              scf::YieldOp::create(b);
            });
      }
      storeGroupScale(q, n0, refs[k].grp, groupsPerRow, quadLeader);
    }
  }
}

} // namespace

void LinearLowering::emitGpu(ImplicitLocOpBuilder &b, const LinearPlan &plan,
                             unsigned, gpu::GPUFuncOp kernel,
                             const KernelArgs &args) const {
  // One CTA per multiprocessor: the register cap setmaxnreg needs at entry.
  kernel->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
                  b.getI32IntegerAttr(1));
  // The tensormaps (a, b, and out for the TMA epilogue) are passed by value.
  SmallVector<int32_t> maps;
  for (auto [i, param] : llvm::enumerate(plan.params))
    if (cast<DictionaryAttr>(param.record).getAs<StringAttr>("kind") ==
        "tensormap")
      maps.push_back(static_cast<int32_t>(i));
  kernel->setAttr(kGridConstantAttr, b.getDenseI32ArrayAttr(maps));
  for (int32_t i : maps)
    kernel.setArgAttr(i, LLVM::LLVMDialect::getAlignAttrName(),
                      b.getI32IntegerAttr(64));
  GemmKernelBuilder(b, plan.problem, plan.shape, args).build();
}

void LinearLowering::emitCpu(ImplicitLocOpBuilder &b, const LinearPlan &plan,
                             unsigned, func::FuncOp,
                             const KernelArgs &args) const {
  emitGemmCpuTwin(b, args, plan.problem);
}
