//===- LinearToNVGPU.cpp - coat.linear to a Hopper TMA + wgmma kernel -----===//
//
// Turns a kernel-spec function holding one per-tensor E4M3 `coat.linear
// forward` into a gpu.func: TMA (cp.async.bulk.tensor) loads of 128-byte-wide
// K slices into 128B-swizzled shared memory completing on mbarriers, an
// S-stage ring over K, one or more warpgroups issuing wgmma e4m3 x e4m3 into
// f32 accumulators, and an epilogue that scales by s_A * s_B, converts to bf16
// and stores with bounds checks.
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

#include "coat/Conversion/Passes.h"
#include "coat/Dialect/CoatDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATLOWERLINEAR
#define GEN_PASS_DEF_COATMARKGRIDCONSTANTS
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

/// Name of the gpu.func attribute listing the parameters that hold a
/// CUtensorMap by value (indices into the lowered parameter list; they come
/// first, so memref expansion does not move them).
constexpr StringLiteral kGridConstantAttr = "coat.grid_constant";
constexpr int64_t kTileK = 128; // 128 e4m3 bytes: the 128B swizzle span
constexpr int64_t kTensorMapBytes = 128;

struct GemmShape {
  int64_t tileM, tileN, stages, warpgroups;
  int64_t mPerWarpgroup() const { return tileM / warpgroups; }
  int64_t mBlocks() const { return mPerWarpgroup() / 64; }
  int64_t aBytes() const { return tileM * kTileK; }
  int64_t bBytes() const { return tileN * kTileK; }
  int64_t stageBytes() const { return aBytes() + bBytes(); }
  int64_t barrierOffset() const { return stages * stageBytes(); }
  /// Dynamic shared memory: the ring, full and empty mbarriers, and 1 KiB of
  /// slack to round the base up to the 1024-byte swizzle atom.
  int64_t sharedBytes() const { return barrierOffset() + 16 * stages + 1024; }
  int64_t threads() const { return 128 * warpgroups; }
};

DictionaryAttr buildManifestRecord(MLIRContext *ctx, StringRef name,
                                   const GemmShape &g, bool hasBias,
                                   StringRef biasDtype) {
  Builder b(ctx);
  auto str = [&](StringRef s) { return b.getStringAttr(s); };
  auto named = [&](StringRef k, Attribute v) { return b.getNamedAttr(k, v); };
  auto memref = [&](StringRef n, StringRef dtype, Attribute extent) {
    return b.getDictionaryAttr({named("name", str(n)), named("kind", str("memref")),
                                named("dtype", str(dtype)),
                                named("extent", extent)});
  };
  auto scalar = [&](StringRef n) {
    return b.getDictionaryAttr({named("name", str(n)), named("kind", str("scalar")),
                                named("dtype", str("i64"))});
  };
  auto tensormap = [&](StringRef n, StringRef rows, int64_t boxRows) {
    return b.getDictionaryAttr(
        {named("name", str(n)), named("kind", str("tensormap")),
         named("dtype", str("e4m3")),
         named("dims", b.getArrayAttr({str("k"), str(rows)})),
         named("box", b.getI64ArrayAttr({kTileK, boxRows})),
         named("swizzle", str("128b"))});
  };
  SmallVector<Attribute> args = {
      tensormap("a", "m", g.tileM), tensormap("b", "n", g.tileN),
      memref("out", "bf16", str("m*n")), memref("a_scale", "f32", b.getI64IntegerAttr(1)),
      memref("b_scale", "f32", b.getI64IntegerAttr(1))};
  if (hasBias)
    args.push_back(memref("bias", biasDtype, str("n")));
  args.append({scalar("m"), scalar("n"), scalar("k")});
  SmallVector<NamedAttribute> config = {
      named("kind", str("forward")), named("a", str("e4m3")),
      named("b", str("e4m3")), named("out", str("bf16")),
      named("scaling", str("per_tensor")),
      named("tile", b.getI64ArrayAttr({g.tileM, g.tileN, kTileK})),
      named("stages", b.getI64IntegerAttr(g.stages)),
      named("warpgroups", b.getI64IntegerAttr(g.warpgroups))};
  SmallVector<NamedAttribute> launch = {
      named("block", b.getI64ArrayAttr({g.threads(), 1, 1})),
      named("grid_tiles",
            b.getArrayAttr({b.getArrayAttr({str("n"), b.getI64IntegerAttr(g.tileN)}),
                            b.getArrayAttr({str("m"), b.getI64IntegerAttr(g.tileM)})})),
      named("shared_bytes", b.getI64IntegerAttr(g.sharedBytes()))};
  return b.getDictionaryAttr(
      {named("name", str(name)), named("op", str("linear")),
       named("config", b.getDictionaryAttr(config)),
       named("launch", b.getDictionaryAttr(launch)),
       named("args", b.getArrayAttr(args))});
}

/// Builds the body of one GEMM kernel.
class GemmKernelBuilder {
public:
  GemmKernelBuilder(ImplicitLocOpBuilder &b, const GemmShape &g, gpu::GPUFuncOp fn,
                    bool hasBias)
      : b(b), g(g), fn(fn), hasBias(hasBias) {}

  void build();

private:
  ImplicitLocOpBuilder &b;
  const GemmShape &g;
  gpu::GPUFuncOp fn;
  bool hasBias;

  Type i32() { return b.getI32Type(); }
  Type i64() { return b.getI64Type(); }
  Value cIdx(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value cI32(int64_t v) { return arith::ConstantIntOp::create(b, i32(), v); }
  Value cI64(int64_t v) { return arith::ConstantIntOp::create(b, i64(), v); }
  Value toI32(Value idx) { return arith::IndexCastOp::create(b, i32(), idx); }
  Value toI64(Value idx) { return arith::IndexCastOp::create(b, i64(), idx); }
  Value toIdx(Value v) { return arith::IndexCastOp::create(b, b.getIndexType(), v); }
  Value shared(Value byteAddr) {
    return LLVM::IntToPtrOp::create(b, LLVM::LLVMPointerType::get(b.getContext(), 3),
                                    Value(byteAddr));
  }
  Value sharedAt(int64_t offset) { return shared(arith::AddIOp::create(b, base, cI64(offset))); }
  Value sharedAt(Value offset) { return shared(arith::AddIOp::create(b, base, offset)); }
  Value fullBarrier(Value stage) {
    return sharedAt(arith::AddIOp::create(
        b, cI64(g.barrierOffset()), arith::MulIOp::create(b, toI64(stage), cI64(8))));
  }
  Value emptyBarrier(Value stage) {
    return sharedAt(arith::AddIOp::create(
        b, cI64(g.barrierOffset() + 8 * g.stages),
        arith::MulIOp::create(b, toI64(stage), cI64(8))));
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
  void issueLoads(Value stage, Value kTile);

  Value tid, m0, n0, M, N, kTiles, base, isLeader;
  Value tensorMapA, tensorMapB;
  SmallVector<Value> accs_;
};

void GemmKernelBuilder::issueLoads(Value stage, Value kTile) {
  Value stageOff = arith::MulIOp::create(b, toI64(stage), cI64(g.stageBytes()));
  Value full = fullBarrier(stage);
  NVVM::MBarrierArriveExpectTxOp::create(b, Type(), full, cI32(g.stageBytes()),
                                         NVVM::MemScopeKind::CTA, false, Value());
  Value kCoord = toI32(arith::MulIOp::create(b, kTile, cIdx(kTileK)));
  auto cluster = LLVM::LLVMPointerType::get(b.getContext(), 7);
  auto load = [&](Value dstOff, Value map, Value row) {
    Value dst = LLVM::AddrSpaceCastOp::create(b, cluster, sharedAt(dstOff));
    NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
        b, dst, map, ValueRange{kCoord, toI32(row)}, full, ValueRange{}, Value(),
        Value(), NVVM::TMALoadMode::TILE, false, NVVM::CTAGroupKindAttr(), Value());
  };
  load(stageOff, tensorMapA, m0);
  load(arith::AddIOp::create(b, stageOff, cI64(g.aBytes())), tensorMapB, n0);
}

void GemmKernelBuilder::build() {
  MLIRContext *ctx = b.getContext();
  Block &entry = fn.getBody().front();
  tensorMapA = entry.getArgument(0);
  tensorMapB = entry.getArgument(1);
  Value out = entry.getArgument(2), aScale = entry.getArgument(3),
        bScale = entry.getArgument(4);
  Value bias = hasBias ? entry.getArgument(5) : Value();
  unsigned s0 = hasBias ? 6 : 5;
  M = toIdx(entry.getArgument(s0));
  N = toIdx(entry.getArgument(s0 + 1));
  Value K = toIdx(entry.getArgument(s0 + 2));

  tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  m0 = arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::y),
                             cIdx(g.tileM));
  n0 = arith::MulIOp::create(b, gpu::BlockIdOp::create(b, gpu::Dimension::x),
                             cIdx(g.tileN));
  kTiles = arith::CeilDivUIOp::create(b, K, cIdx(kTileK));

  // Dynamic shared memory, rounded up to the 1024-byte swizzle atom.
  auto smemType = MemRefType::get(
      {ShapedType::kDynamic}, b.getI8Type(), nullptr,
      gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup));
  Value dyn = gpu::DynamicSharedMemoryOp::create(b, smemType);
  Value raw = toI64(memref::ExtractAlignedPointerAsIndexOp::create(b, dyn));
  base = arith::AndIOp::create(b, arith::AddIOp::create(b, raw, cI64(1023)),
                               cI64(~int64_t(1023)));

  isLeader = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, tid, cIdx(0));
  Value wgThread = arith::RemUIOp::create(b, tid, cIdx(128));
  Value wg = arith::DivUIOp::create(b, tid, cIdx(128));
  Value isWgLeader =
      arith::CmpIOp::create(b, arith::CmpIPredicate::eq, wgThread, cIdx(0));

  // mbarriers: full[s] completes when stage s's bytes landed; empty[s] when
  // every warpgroup's wgmma reading stage s finished.
  scf::IfOp::create(b, isLeader, [&](OpBuilder &, Location) {
    for (int64_t s = 0; s < g.stages; ++s) {
      NVVM::MBarrierInitOp::create(b, fullBarrier(cIdx(s)), cI32(1), Value());
      NVVM::MBarrierInitOp::create(b, emptyBarrier(cIdx(s)), cI32(g.warpgroups),
                                   Value());
    }
    NVVM::FenceMbarrierInitOp::create(b);
    scf::YieldOp::create(b);
  });
  gpu::BarrierOp::create(b);

  // Prologue: fill the ring.
  scf::IfOp::create(b, isLeader, [&](OpBuilder &, Location) {
    for (int64_t s = 0; s < g.stages; ++s) {
      Value in = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, cIdx(s), kTiles);
      scf::IfOp::create(b, in, [&](OpBuilder &, Location) {
        issueLoads(cIdx(s), cIdx(s));
        scf::YieldOp::create(b);
      });
    }
    scf::YieldOp::create(b);
  });

  int64_t accLen = g.tileN / 2; // f32 per thread per m64 block
  auto accType = LLVM::LLVMStructType::getLiteral(
      ctx, SmallVector<Type>(accLen, b.getF32Type()));
  SmallVector<Value> init;
  for (int64_t i = 0; i < g.mBlocks(); ++i)
    init.push_back(LLVM::ZeroOp::create(b, accType));

  Value aRow0 = arith::MulIOp::create(b, toI64(wg), cI64(g.mPerWarpgroup() * kTileK));
  auto loop = scf::ForOp::create(b, cIdx(0), kTiles, cIdx(1), init);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value kt = loop.getInductionVar();
    Value stage = arith::RemUIOp::create(b, kt, cIdx(g.stages));
    Value phase = toI32(arith::AndIOp::create(
        b, arith::DivUIOp::create(b, kt, cIdx(g.stages)), cIdx(1)));
    NVVM::MBarrierTryWaitParityOp::create(b, fullBarrier(stage), phase,
                                          cI32(0x989680));
    Value stageAddr = arith::AddIOp::create(
        b, base, arith::MulIOp::create(b, toI64(stage), cI64(g.stageBytes())));
    Value aAddr = arith::AddIOp::create(b, stageAddr, aRow0);
    Value bAddr = arith::AddIOp::create(b, stageAddr, cI64(g.aBytes()));
    NVVM::WgmmaFenceAlignedOp::create(b);
    SmallVector<Value> accs(loop.getRegionIterArgs());
    auto e4m3 = NVVM::WGMMATypesAttr::get(ctx, NVVM::WGMMATypes::e4m3);
    auto f32t = NVVM::WGMMATypesAttr::get(ctx, NVVM::WGMMATypes::f32);
    auto shape = NVVM::MMAShapeAttr::get(ctx, 64, g.tileN, 32);
    auto one = NVVM::WGMMAScaleInAttr::get(ctx, NVVM::WGMMAScaleIn::one);
    auto outOne = NVVM::WGMMAScaleOutAttr::get(ctx, NVVM::WGMMAScaleOut::one);
    auto row = NVVM::MMALayoutAttr::get(ctx, NVVM::MMALayout::row);
    auto col = NVVM::MMALayoutAttr::get(ctx, NVVM::MMALayout::col);
    for (int64_t kk = 0; kk < kTileK / 32; ++kk) {
      Value descB = descriptor(arith::AddIOp::create(b, bAddr, cI64(32 * kk)));
      for (int64_t i = 0; i < g.mBlocks(); ++i) {
        Value descA = descriptor(
            arith::AddIOp::create(b, aAddr, cI64(i * 64 * kTileK + 32 * kk)));
        accs[i] = NVVM::WgmmaMmaAsyncOp::create(
            b, accType, accs[i], descA, descB, shape, e4m3, e4m3, f32t, outOne,
            one, one, row, col, NVVM::MMAIntOverflowAttr());
      }
    }
    NVVM::WgmmaGroupSyncAlignedOp::create(b);
    // At most this tile's group in flight: the previous stage is free.
    NVVM::WgmmaWaitGroupSyncOp::create(b, 1);
    Value hasPrev = arith::CmpIOp::create(b, arith::CmpIPredicate::uge, kt, cIdx(1));
    scf::IfOp::create(b, hasPrev, [&](OpBuilder &, Location) {
      Value prev = arith::SubIOp::create(b, kt, cIdx(1));
      Value prevStage = arith::RemUIOp::create(b, prev, cIdx(g.stages));
      scf::IfOp::create(b, isWgLeader, [&](OpBuilder &, Location) {
        NVVM::MBarrierArriveOp::create(b, Type(), emptyBarrier(prevStage), Value());
        scf::YieldOp::create(b);
      });
      Value next = arith::AddIOp::create(b, prev, cIdx(g.stages));
      Value refill = arith::AndIOp::create(
          b, isLeader,
          arith::CmpIOp::create(b, arith::CmpIPredicate::ult, next, kTiles));
      scf::IfOp::create(b, refill, [&](OpBuilder &, Location) {
        Value prevPhase = toI32(arith::AndIOp::create(
            b, arith::DivUIOp::create(b, prev, cIdx(g.stages)), cIdx(1)));
        NVVM::MBarrierTryWaitParityOp::create(b, emptyBarrier(prevStage), prevPhase,
                                              cI32(0x989680));
        issueLoads(prevStage, next);
        scf::YieldOp::create(b);
      });
      scf::YieldOp::create(b);
    });
    scf::YieldOp::create(b, accs);
  }
  NVVM::WgmmaWaitGroupSyncOp::create(b, 0);

  // Epilogue: thread t of a warpgroup holds, for n8 chunk j of an m64 block,
  // rows r = 16*warp + t%32/4 (+8) and columns 8j + 2*(t%4) (+1).
  Value scale = arith::MulFOp::create(
      b, memref::LoadOp::create(b, aScale, ValueRange{cIdx(0)}),
      memref::LoadOp::create(b, bScale, ValueRange{cIdx(0)}));
  Value lane = arith::RemUIOp::create(b, wgThread, cIdx(32));
  Value warp = arith::DivUIOp::create(b, wgThread, cIdx(32));
  Value rowInBlock = arith::AddIOp::create(
      b, arith::MulIOp::create(b, warp, cIdx(16)),
      arith::DivUIOp::create(b, lane, cIdx(4)));
  Value colInChunk =
      arith::MulIOp::create(b, arith::RemUIOp::create(b, lane, cIdx(4)), cIdx(2));
  Value outBase = toI64(memref::ExtractAlignedPointerAsIndexOp::create(b, out));
  auto global = LLVM::LLVMPointerType::get(ctx, 1);
  Value nI64 = toI64(N);
  Value interior = arith::AndIOp::create(
      b,
      arith::AndIOp::create(
          b,
          arith::CmpIOp::create(b, arith::CmpIPredicate::ule,
                                arith::AddIOp::create(b, m0, cIdx(g.tileM)), M),
          arith::CmpIOp::create(b, arith::CmpIPredicate::ule,
                                arith::AddIOp::create(b, n0, cIdx(g.tileN)), N)),
      arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                            arith::AndIOp::create(b, N, cIdx(1)), cIdx(0)));
  auto finish = [&](Value acc, Value colIdx) -> Value {
    Value v = arith::MulFOp::create(b, acc, scale);
    if (bias) {
      Value bv = memref::LoadOp::create(b, bias, ValueRange{colIdx});
      if (!bv.getType().isF32())
        bv = arith::ExtFOp::create(b, b.getF32Type(), bv);
      v = arith::AddFOp::create(b, v, bv);
    }
    return arith::TruncFOp::create(b, b.getBF16Type(), v);
  };
  auto emitStores = [&](bool checked) {
    for (int64_t i = 0; i < g.mBlocks(); ++i) {
      Value rowBase = arith::AddIOp::create(
          b,
          arith::AddIOp::create(
              b, m0,
              arith::MulIOp::create(
                  b, arith::AddIOp::create(b, arith::MulIOp::create(b, wg, cIdx(g.mBlocks())),
                                           cIdx(i)),
                  cIdx(64))),
          rowInBlock);
      for (int64_t h = 0; h < 2; ++h) {
        Value rowIdx = arith::AddIOp::create(b, rowBase, cIdx(8 * h));
        Value rowOff = arith::MulIOp::create(b, toI64(rowIdx), nI64);
        auto body = [&]() {
          for (int64_t j = 0; j < g.tileN / 8; ++j) {
            Value colIdx = arith::AddIOp::create(
                b, arith::AddIOp::create(b, n0, cIdx(8 * j)), colInChunk);
            Value colIdx1 = arith::AddIOp::create(b, colIdx, cIdx(1));
            int64_t e = 4 * j + 2 * h;
            Value v0 = LLVM::ExtractValueOp::create(b, accs_[i], e);
            Value v1 = LLVM::ExtractValueOp::create(b, accs_[i], e + 1);
            Value off = arith::MulIOp::create(
                b, arith::AddIOp::create(b, rowOff, toI64(colIdx)), cI64(2));
            Value ptr = LLVM::IntToPtrOp::create(
                b, global, Value(arith::AddIOp::create(b, outBase, off)));
            Value q0 = finish(v0, colIdx);
            if (!checked) {
              Value q1 = finish(v1, colIdx1);
              auto pairType = VectorType::get({2}, b.getBF16Type());
              Value pair = vector::FromElementsOp::create(b, pairType, ValueRange{q0, q1});
              Value word = LLVM::BitcastOp::create(b, i32(), pair);
              LLVM::StoreOp::create(b, word, ptr, 4);
              continue;
            }
            Value in0 = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, colIdx, N);
            scf::IfOp::create(b, in0, [&](OpBuilder &, Location) {
              LLVM::StoreOp::create(b, q0, ptr, 2);
              scf::YieldOp::create(b);
            });
            Value in1 = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, colIdx1, N);
            scf::IfOp::create(b, in1, [&](OpBuilder &, Location) {
              Value q1 = finish(v1, colIdx1);
              Value ptr1 = LLVM::GEPOp::create(b, global, b.getBF16Type(), ptr,
                                               ArrayRef<LLVM::GEPArg>{1});
              LLVM::StoreOp::create(b, q1, ptr1, 2);
              scf::YieldOp::create(b);
            });
          }
        };
        if (!checked) {
          body();
          continue;
        }
        Value rowIn = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, rowIdx, M);
        scf::IfOp::create(b, rowIn, [&](OpBuilder &, Location) {
          body();
          scf::YieldOp::create(b);
        });
      }
    }
  };
  accs_.assign(loop.getResults().begin(), loop.getResults().end());
  scf::IfOp::create(
      b, interior,
      [&](OpBuilder &, Location) {
        emitStores(false);
        scf::YieldOp::create(b);
      },
      [&](OpBuilder &, Location) {
        emitStores(true);
        scf::YieldOp::create(b);
      });
  gpu::ReturnOp::create(b);
}

struct CoatLowerLinearPass
    : mlir::coat::impl::CoatLowerLinearBase<CoatLowerLinearPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<std::pair<func::FuncOp, LinearOp>> specs;
    module.walk([&](func::FuncOp fn) {
      if (fn.isExternal() || fn.isPrivate())
        return;
      auto ops = fn.getBody().getOps<LinearOp>();
      if (!llvm::hasSingleElement(ops))
        return;
      specs.push_back({fn, *ops.begin()});
    });
    if (specs.empty())
      return;
    GemmShape g{tileM, tileN, stages, warpgroups};
    if (g.tileM % (64 * g.warpgroups) != 0 || g.tileM > 256)
      return emitError(module.getLoc())
                 << "coat-lower-linear: tile-m (" << tileM
                 << ") must be a multiple of 64 * warpgroups and at most 256",
             signalPassFailure();
    if (g.tileN % 8 != 0 || g.tileN < 8 || g.tileN > 256)
      return emitError(module.getLoc())
                 << "coat-lower-linear: tile-n (" << tileN
                 << ") must be a multiple of 8 in [8, 256] (wgmma N)",
             signalPassFailure();
    if (g.stages < 2)
      return emitError(module.getLoc()) << "coat-lower-linear: stages must be >= 2",
             signalPassFailure();
    if (g.sharedBytes() > 227 * 1024)
      return emitError(module.getLoc())
                 << "coat-lower-linear: " << g.sharedBytes()
                 << " bytes of shared memory exceed Hopper's 227 KiB per block",
             signalPassFailure();

    gpu::GPUModuleOp gpuModule;
    for (auto [fn, op] : specs) {
      if (failed(lowerSpec(fn, op, g, gpuModule)))
        return signalPassFailure();
    }
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    UnitAttr::get(module.getContext()));
  }

  LogicalResult lowerSpec(func::FuncOp fn, LinearOp op, const GemmShape &g,
                          gpu::GPUModuleOp &gpuModule) {
    auto lhs = cast<QTensorType>(op.getLhs().getType());
    auto rhs = cast<QTensorType>(op.getRhs().getType());
    if (op.getKind() != LinearKind::forward)
      return op.emitOpError("coat-lower-linear handles only `forward` so far");
    if (!lhs.getScaling().isPerTensor() || !rhs.getScaling().isPerTensor())
      return op.emitOpError("coat-lower-linear handles only per_tensor operands so far");
    if (!isa<Float8E4M3FNType>(lhs.getElementType()) ||
        !isa<Float8E4M3FNType>(rhs.getElementType()))
      return op.emitOpError("coat-lower-linear handles only E4M3 x E4M3 so far");
    auto resultType = dyn_cast<RankedTensorType>(op.getResult().getType());
    if (!resultType || !resultType.getElementType().isBF16())
      return op.emitOpError("coat-lower-linear handles only a bf16 result so far");
    bool hasBias = static_cast<bool>(op.getBias());
    Type biasElem = hasBias
                        ? cast<RankedTensorType>(op.getBias().getType()).getElementType()
                        : Type();

    MLIRContext *ctx = &getContext();
    OpBuilder mb(ctx);
    Location loc = fn.getLoc();
    if (!gpuModule) {
      mb.setInsertionPointToEnd(getOperation().getBody());
      gpuModule = gpu::GPUModuleOp::create(mb, loc, "coat_linear");
    }
    auto dynMemref = [&](Type elem) {
      return MemRefType::get({ShapedType::kDynamic}, elem);
    };
    auto ptr = LLVM::LLVMPointerType::get(ctx);
    SmallVector<Type> params = {ptr, ptr, dynMemref(mb.getBF16Type()),
                                dynMemref(mb.getF32Type()), dynMemref(mb.getF32Type())};
    if (hasBias)
      params.push_back(dynMemref(biasElem));
    params.append(3, mb.getI64Type());
    mb.setInsertionPointToEnd(gpuModule.getBody());
    std::string name = fn.getSymName().str();
    auto kernel = gpu::GPUFuncOp::create(mb, loc, name, mb.getFunctionType(params, {}));
    kernel->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), mb.getUnitAttr());
    kernel.setKnownBlockSizeAttr(
        mb.getDenseI32ArrayAttr({static_cast<int32_t>(g.threads()), 1, 1}));
    kernel->setAttr(kGridConstantAttr, mb.getDenseI32ArrayAttr({0, 1}));
    for (unsigned i = 0; i < 2; ++i)
      kernel.setArgAttr(i, LLVM::LLVMDialect::getAlignAttrName(),
                        mb.getI32IntegerAttr(64));
    StringRef biasDtype = !hasBias ? "" : biasElem.isF32() ? "f32" : "bf16";
    kernel->setAttr("coat.kernel",
                    buildManifestRecord(ctx, name, g, hasBias, biasDtype));
    ImplicitLocOpBuilder b(loc, ctx);
    b.setInsertionPointToStart(&kernel.getBody().front());
    GemmKernelBuilder(b, g, kernel, hasBias).build();
    fn.erase();
    return success();
  }
};

/// After convert-gpu-to-nvvm: parameters listed in `coat.grid_constant`
/// become `.param .align 64 .b8 p[128]` grid constants (a CUtensorMap passed
/// by value, addressed in param space by cp.async.bulk.tensor).
struct CoatMarkGridConstantsPass
    : mlir::coat::impl::CoatMarkGridConstantsBase<CoatMarkGridConstantsPass> {
  void runOnOperation() override {
    getOperation()->walk([&](LLVM::LLVMFuncOp fn) {
      auto indices = fn->getAttrOfType<DenseI32ArrayAttr>(kGridConstantAttr);
      if (!indices)
        return;
      MLIRContext *ctx = fn.getContext();
      Builder b(ctx);
      auto bytes = LLVM::LLVMArrayType::get(b.getI8Type(), kTensorMapBytes);
      for (int32_t i : indices.asArrayRef()) {
        if (i < 0 || unsigned(i) >= fn.getNumArguments() ||
            !isa<LLVM::LLVMPointerType>(fn.getArgumentTypes()[i])) {
          fn.emitError() << "coat.grid_constant index " << i
                         << " is not a pointer parameter";
          return signalPassFailure();
        }
        fn.setArgAttr(i, LLVM::LLVMDialect::getByValAttrName(), TypeAttr::get(bytes));
        fn.setArgAttr(i, NVVM::NVVMDialect::getGridConstantAttrName(), b.getUnitAttr());
        fn.setArgAttr(i, LLVM::LLVMDialect::getAlignAttrName(), b.getI32IntegerAttr(64));
      }
      fn->removeAttr(kGridConstantAttr);
    });
  }
};

} // namespace
