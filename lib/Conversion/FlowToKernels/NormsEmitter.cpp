//===- NormsEmitter.cpp - norm kernels and their CPU twins ----------------===//
//
// One parameterized emitter for the row kernels of every norm op (Norms.h
// says how a team of threads covers a row), the column-sum kernels of a
// backward with dweight, and the CPU twins, which run the same math with
// loops.
//
//===----------------------------------------------------------------------===//

#include "Norms.h"

#include "coat/Conversion/EmitHelpers.h"
#include "coat/Conversion/GroupKernel.h"
#include "coat/Dialect/CoatDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <map>

using namespace mlir;
using namespace mlir::coat;

namespace {

/// The workspace of each column sum: dweight's, then dbias's.
constexpr StringLiteral kWorkspaces[] = {"dweight_partial", "dbias_partial"};

/// One group's G values, widened to f32, as a vector<G x f32>.
using GroupVec = Value;

/// Emits the per-row math shared by the GPU kernel and the CPU twin.
class NormEmitter {
public:
  /// `width` is the elements of a slot: the team's lane elements in a GPU
  /// row kernel, a whole group elsewhere.
  NormEmitter(ImplicitLocOpBuilder &b, const NormPlan &plan,
              const KernelArgs &args, bool onGpu, int64_t width)
      : b(b), spec(plan.spec), args(args), onGpu(onGpu), team(plan.team),
        width(width), inRow(plan.sumsInRowKernel()),
        fused(plan.sums == ColumnSums::Fused),
        shared(plan.sums == ColumnSums::Shared), perSlot(plan.sumsPerColumn()) {
  }

  /// Where a GPU thread sits in its team. `teamThread` is the thread's
  /// index in its team, `warpSlot` the first workgroup-memory slot of its
  /// team, `warpInTeam`/`lane` its position for the reductions through
  /// `smem`; `sums`, from element `sumsBase`, holds its column sums
  /// (ColumnSums::Shared). With a row prefetch, `stagedCodes` and
  /// `stagedGrads` hold the prefetch stages and `blockThread` is the
  /// thread's index in its CTA.
  struct TeamPosition {
    Value teamThread, warpSlot, warpInTeam, lane, smem;
    Value sums = Value(), sumsBase = Value();
    Value stagedCodes = Value(), stagedGrads = Value(), blockThread = Value();
  };
  /// GPU: one team's row (forward) or rows (backward).
  void emitGpuForward(Value row, const TeamPosition &pos,
                      Value stage = Value());
  void emitGpuBackward(Value partial, const TeamPosition &pos);
  /// GPU `<name>_columns`: partial `partial`'s sums of group `group`.
  void emitGpuColumns(Value group, Value partial);
  /// CPU: all rows (forward) or all partials (backward, `<name>_columns`).
  void emitCpuForward();
  void emitCpuBackward();
  void emitCpuColumns();

private:
  void setTeam(const TeamPosition &pos);
  /// The row length as an index, in groups, and as f32 (for the means).
  void bindRowExtent() {
    cols = toIndex(args.lookup("cols"));
    groups = arith::DivUIOp::create(b, cols, cidx(spec.groupSize));
    colsF32 = arith::UIToFPOp::create(b, b.getF32Type(), args.lookup("cols"));
  }
  struct Slot {
    int64_t k;   ///< unrolled slot (GPU), -1 on the CPU
    Value group; ///< index of the slot's group in the row
    Value first; ///< index of the slot's first element in the row
    Value valid; ///< i1: the group exists (masked tail, rows past the end)
  };
  /// GPU: slot k of this thread (chunk teamThread + k*T of the row), valid
  /// where `inRange` holds and its group is in the row.
  Slot gpuSlot(int64_t k, Value inRange);
  /// A slot of a whole group (the CPU and `<name>_columns`).
  Slot groupSlot(Value group, Value valid) {
    return Slot{-1, group, mulI(group, cidx(spec.groupSize)), valid};
  }
  using SlotFn = function_ref<SmallVector<Value>(const Slot &, ValueRange)>;

  Value cidx(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value cf32(double v) {
    return arith::ConstantOp::create(b, b.getF32FloatAttr(float(v)));
  }
  VectorType groupVecType(Type elt) { return VectorType::get({width}, elt); }
  Value splat(Value scalar) {
    return vector::BroadcastOp::create(b, groupVecType(b.getF32Type()), scalar);
  }
  Value toIndex(Value v) {
    return arith::IndexCastOp::create(b, b.getIndexType(), v);
  }
  Value ult(Value x, Value y) {
    return arith::CmpIOp::create(b, arith::CmpIPredicate::ult, x, y);
  }
  Value andI(Value x, Value y) { return arith::AndIOp::create(b, x, y); }
  Value addI(Value x, Value y) { return arith::AddIOp::create(b, x, y); }
  Value mulI(Value x, Value y) { return arith::MulIOp::create(b, x, y); }

  /// Runs `body` over the groups this thread owns in the current row: the
  /// K unrolled slots on the GPU, a loop over all groups on the CPU.
  SmallVector<Value> forEachGroup(ValueRange inits, SlotFn body);
  /// Sums each value over the team (identity on the CPU).
  SmallVector<Value> teamSum(ValueRange values);

  /// `width` elements of `buffer` from element `first`, widened to f32; zeros
  /// when `valid` is false. Cached per (buffer, slot) on the GPU.
  GroupVec loadGroup(Value buffer, Type logical, Value first, Value valid,
                     int64_t k);
  void storeGroup(Value buffer, Type logical, Value first, Value valid,
                  GroupVec v);
  /// GPU: stores slot `s` of the row through the warp's region of `stage`
  /// so that each warp store writes 32 consecutive 16-byte chunks.
  void storeGroupStaged(Value buffer, Type logical, const Slot &s, GroupVec v);
  Value loadScalarF32(Value buffer, Type logical, Value idx, Value valid);
  llvm::MaybeAlign alignment(Type logical) const {
    int64_t bytes =
        width * laneStorageType(logical).getIntOrFloatBitWidth() / 8;
    return llvm::MaybeAlign(std::min<int64_t>(bytes, 16));
  }

  /// Row-level pieces.
  GroupVec loadX(const Slot &s);
  GroupVec loadRowOperand(StringRef name, Type logical, const Slot &s);
  GroupVec loadColOperand(StringRef name, const Slot &s);
  Value elementIndex(const Slot &s) { return addI(rowBase, s.first); }
  Value sumElements(GroupVec v);
  /// sum(u*v) over the slot, one fused multiply-add per element.
  Value dotElements(GroupVec u, GroupVec v);
  Value maxAbsElements(GroupVec v);
  /// GPU: the maximum of `v` over the lanes sharing this slot's group.
  Value groupMaxOverLanes(Value v);
  /// The fused coat.absmax epilogue: the group maximum of |y| (as stored,
  /// in the output type) written to `absmax`.
  void storeEpilogueMax(const Slot &s, Value y);
  /// Lanes sharing a group (1 unless slots are narrower than groups).
  int64_t lanesPerGroup() const { return spec.groupSize / width; }
  Value rowRstd(Value sumSquares);

  void emitForwardRow();
  /// Backward of the current row; returns the updated dweight/dbias
  /// accumulators (GPU: one vector per slot and sum; CPU: none, it
  /// accumulates into the workspace row `partialRow`).
  SmallVector<Value> emitBackwardRow(ValueRange accs, Value partialRow);
  /// x-hat of slot `s` of the current row: (x [- mean]) * rstd.
  GroupVec normalized(const Slot &s, Value mean, Value rstd);
  /// The column sums after the terms of one group of one row: dweight +=
  /// dy*xh (fused), dbias += dy.
  SmallVector<Value> addColumnTerms(ValueRange accs, GroupVec dy, GroupVec xh);
  /// GPU, ColumnSums::Shared: sum `i` of slot `k`'s columns in `sums`, as
  /// width/4 16-byte quads. A slot's quads are rotated by its chunk so
  /// that the 8 lanes of a 16-byte access phase reach all 32 banks (in
  /// column order, lanes a group apart would share 4 banks).
  Value sharedQuadIndex(int64_t i, int64_t k, int64_t q);
  GroupVec loadSharedSums(int64_t i, int64_t k);
  /// The parts, equal vectors, one after the other.
  Value concatVectors(SmallVector<Value> parts);
  void storeSharedSums(int64_t i, int64_t k, GroupVec v);
  /// Row prefetch. A staged operand (x codes, dy) lies in shared memory as
  /// [stage][slot][piece][thread] pieces of at most 16 bytes, so that a
  /// warp's copies and reads of one piece are contiguous.
  struct StagedOperand {
    Value buffer;       ///< the stages, in the operand's storage type
    int64_t pieceElems; ///< elements of a piece
    int64_t pieces;     ///< pieces of a slot
  };
  StagedOperand stagedOperand(Value stages, Type logical) const;
  /// The element of `op`'s stages where piece `piece` of slot `k` of this
  /// thread lies in stage `stage`.
  Value stagedIndex(const StagedOperand &op, Value stage, int64_t k,
                    int64_t piece);
  /// Starts copying this thread's slots of row `r`'s x codes and dy into
  /// stage `stage` (zeros where `valid` or the slot is not); the group
  /// token of the copies.
  Value prefetchRow(Value r, Value valid, Value stage);
  /// Row `r`'s scale of slot `s`'s group (zero where the slot is not valid).
  Value loadGroupScale(Value r, const Slot &s);
  /// Row `r`'s saved statistics (zeros where not `valid`; mean only for
  /// LayerNorm).
  struct RowStats {
    Value rstd, mean;
  };
  RowStats loadRowStats(Value r, Value valid);
  /// Loads what the team needs of row `r` besides the staged operands:
  /// each slot's group scale, then rstd [and mean].
  SmallVector<Value> loadRowScalars(Value r, Value valid);
  /// Slot k's `width` staged elements of `op` in the current stage.
  Value loadStaged(const StagedOperand &op, int64_t k);

  /// CPU: adds the terms of slot `s` into workspace row `partialRow`.
  void addColumnTermsToWorkspace(Value partialRow, const Slot &s, GroupVec dy,
                                 GroupVec xh);
  /// CPU: the per-partial loop of a backward: zeroes partial p's workspace
  /// row (column sums), then runs `rowBody(p)` on rows p, p + partials, ...
  void emitCpuPartials(Value partials, bool columnSums,
                       function_ref<void(Value)> rowBody);

  ImplicitLocOpBuilder &b;
  const NormSpec &spec;
  const KernelArgs &args;
  bool onGpu;
  TeamShape team;
  /// Elements of a slot (see the constructor).
  int64_t width;
  /// The row kernel takes the column sums: in registers (`fused`) or in
  /// dynamic shared memory (`shared`).
  bool inRow, fused, shared;
  /// Column sums per group: dweight [and dbias]; 0 without dweight.
  int64_t perSlot;
  /// Those the row kernel holds per slot (0 unless fused).
  int64_t fusedSums() const { return fused ? perSlot : 0; }

  // Current row.
  Value row, rowValid, rowBase, cols, groups, colsF32;
  // GPU reduction state.
  Value teamThread, warpSlot, warpInTeam, lane, smem, stage, sums, sumsBase;
  // Row prefetch: the staged operands, the stage of the current row (null
  // without a prefetch) and what loadRowScalars gave for it.
  Value blockThread, currentStage;
  std::optional<StagedOperand> stagedCodes, stagedGrads;
  SmallVector<Value> rowScalars;
  std::map<std::pair<void *, int64_t>, Value> cache;
};

GroupVec NormEmitter::loadGroup(Value buffer, Type logical, Value first,
                                Value valid, int64_t k) {
  auto key = std::make_pair(buffer.getAsOpaquePointer(), k);
  if (onGpu && k >= 0) {
    auto it = cache.find(key);
    if (it != cache.end())
      return it->second;
  }
  Type storage = laneStorageType(logical);
  VectorType raw = groupVecType(storage);
  const StagedOperand *staged = nullptr;
  if (currentStage && k >= 0 && buffer == args.lookup("x_codes"))
    staged = &*stagedCodes;
  if (currentStage && k >= 0 && buffer == args.lookup("dy"))
    staged = &*stagedGrads;
  // A staged slot is zero where it is not valid: no branch.
  Value vec =
      staged
          ? loadStaged(*staged, k)
          : emitIf(
                b, valid, raw,
                [&] {
                  return SmallVector<Value>{vector::LoadOp::create(
                      b, raw, buffer, ValueRange{first}, /*nontemporal=*/false,
                      alignment(logical))};
                },
                [&] {
                  return SmallVector<Value>{arith::ConstantOp::create(
                      b, DenseElementsAttr::get(raw, b.getZeroAttr(storage)))};
                })[0];
  if (storage != logical)
    vec = arith::BitcastOp::create(b, groupVecType(logical), vec);
  if (!logical.isF32())
    vec = arith::ExtFOp::create(b, groupVecType(b.getF32Type()), vec);
  if (onGpu && k >= 0)
    cache[key] = vec;
  return vec;
}

void NormEmitter::storeGroup(Value buffer, Type logical, Value first,
                             Value valid, GroupVec v) {
  if (!logical.isF32())
    v = arith::TruncFOp::create(b, groupVecType(logical), v);
  Type storage = laneStorageType(logical);
  if (storage != logical)
    v = arith::BitcastOp::create(b, groupVecType(storage), v);
  emitIfThen(b, valid, [&] {
    vector::StoreOp::create(b, v, buffer, ValueRange{first},
                            /*nontemporal=*/false, alignment(logical));
  });
}

void NormEmitter::storeGroupStaged(Value buffer, Type logical, const Slot &s,
                                   GroupVec v) {
  assert(width == spec.groupSize && "staged stores take whole groups");
  // A thread owns a whole group (G * 4 bytes for f32), so its own 16-byte
  // stores are G*bytes apart across the warp and fill half sectors. The
  // warp writes its 32 groups to workgroup memory, then each lane stores
  // the 16-byte chunks lane, lane + 32, ...: every store instruction covers
  // 512 contiguous bytes of the row.
  if (!logical.isF32())
    v = arith::TruncFOp::create(b, groupVecType(logical), v);
  Type storage = laneStorageType(logical);
  if (storage != logical)
    v = arith::BitcastOp::create(b, groupVecType(storage), v);
  int64_t bytes = storage.getIntOrFloatBitWidth() / 8;
  int64_t chunk = 16 / bytes;                  // elements per 16 bytes
  int64_t chunksPerGroup = spec.groupSize / chunk;
  Value warpBase =
      mulI(addI(warpSlot, warpInTeam), cidx(32 * spec.groupSize));
  vector::StoreOp::create(
      b, v, stage, ValueRange{addI(warpBase, mulI(lane, cidx(spec.groupSize)))},
      /*nontemporal=*/false, llvm::MaybeAlign(16));
  Value full = arith::ConstantOp::create(b, b.getI32IntegerAttr(-1));
  NVVM::SyncWarpOp::create(b, full);
  // The warp's first group in this slot.
  Value firstGroup = arith::SubIOp::create(b, s.group, lane);
  VectorType chunkType = VectorType::get({chunk}, storage);
  for (int64_t c = 0; c < chunksPerGroup; ++c) {
    Value q = addI(lane, cidx(c * 32));
    Value group = addI(firstGroup, arith::DivUIOp::create(
                                       b, q, cidx(chunksPerGroup)));
    Value valid = andI(rowValid, ult(group, groups));
    Value part = vector::LoadOp::create(
        b, chunkType, stage, ValueRange{addI(warpBase, mulI(q, cidx(chunk)))},
        /*nontemporal=*/false, llvm::MaybeAlign(16));
    Value at = addI(rowBase, addI(mulI(firstGroup, cidx(spec.groupSize)),
                                  mulI(q, cidx(chunk))));
    emitIfThen(b, valid, [&] {
      vector::StoreOp::create(b, part, buffer, ValueRange{at},
                              /*nontemporal=*/false, llvm::MaybeAlign(16));
    });
  }
  // The region is written again by the next slot.
  NVVM::SyncWarpOp::create(b, full);
}

Value NormEmitter::loadScalarF32(Value buffer, Type logical, Value idx,
                                 Value valid) {
  Type storage = laneStorageType(logical);
  Value v = emitIf(
      b, valid, storage,
      [&] {
        return SmallVector<Value>{
            memref::LoadOp::create(b, buffer, ValueRange{idx})};
      },
      [&] {
        return SmallVector<Value>{
            arith::ConstantOp::create(b, b.getZeroAttr(storage))};
      })[0];
  if (storage != logical)
    v = arith::BitcastOp::create(b, logical, v);
  if (!logical.isF32())
    v = arith::ExtFOp::create(b, b.getF32Type(), v);
  return v;
}

GroupVec NormEmitter::loadX(const Slot &s) {
  // Dequantize: x = f32(code) * s_g (COAT.md §3.4).
  Type fp8 = getFp8Type(b.getContext(), spec.format);
  GroupVec codes = loadGroup(args.lookup("x_codes"), fp8, elementIndex(s),
                             s.valid, s.k);
  auto key = std::make_pair(args.lookup("x_scale").getAsOpaquePointer(), s.k);
  Value scale;
  if (currentStage && s.k >= 0) {
    scale = rowScalars[s.k];
  } else if (onGpu && cache.count(key)) {
    scale = cache[key];
  } else {
    scale = loadGroupScale(row, s);
    if (onGpu)
      cache[key] = scale;
  }
  return arith::MulFOp::create(b, codes, splat(scale));
}

GroupVec NormEmitter::loadRowOperand(StringRef name, Type logical,
                                     const Slot &s) {
  return loadGroup(args.lookup(name), logical, elementIndex(s), s.valid, s.k);
}

GroupVec NormEmitter::loadColOperand(StringRef name, const Slot &s) {
  return loadGroup(args.lookup(name), spec.weightType, s.first, s.valid, s.k);
}

Value NormEmitter::sumElements(GroupVec v) {
  Value acc;
  for (int64_t i = 0; i < width; ++i) {
    Value e = vector::ExtractOp::create(b, v, ArrayRef<int64_t>{i});
    acc = acc ? arith::AddFOp::create(b, acc, e).getResult() : e;
  }
  return acc;
}

Value NormEmitter::dotElements(GroupVec u, GroupVec v) {
  Value acc;
  for (int64_t i = 0; i < width; ++i) {
    Value a = vector::ExtractOp::create(b, u, ArrayRef<int64_t>{i});
    Value c = vector::ExtractOp::create(b, v, ArrayRef<int64_t>{i});
    acc = acc ? math::FmaOp::create(b, a, c, acc).getResult()
              : arith::MulFOp::create(b, a, c).getResult();
  }
  return acc;
}

Value NormEmitter::maxAbsElements(GroupVec v) {
  Value acc = cf32(0.0);
  Value a = math::AbsFOp::create(b, v);
  for (int64_t i = 0; i < width; ++i) // NaN skipped, as fmax does
    acc = arith::MaxNumFOp::create(
        b, acc, vector::ExtractOp::create(b, a, ArrayRef<int64_t>{i}));
  return acc;
}

Value NormEmitter::groupMaxOverLanes(Value v) {
  // A group's lanes are adjacent (T is a multiple of 32, G/V at most 32),
  // so an xor butterfly within them leaves its maximum in each.
  for (int64_t offset = lanesPerGroup() / 2; offset >= 1; offset /= 2) {
    auto shuffle = gpu::ShuffleOp::create(b, v, int32_t(offset),
                                          /*width=*/32, gpu::ShuffleMode::XOR);
    v = arith::MaxNumFOp::create(b, v, shuffle.getShuffleResult());
  }
  return v;
}

NormEmitter::Slot NormEmitter::gpuSlot(int64_t k, Value inRange) {
  Value chunk = addI(teamThread, cidx(k * team.threadsPerRow));
  if (width == spec.groupSize) {
    Slot s = groupSlot(chunk, andI(inRange, ult(chunk, groups)));
    s.k = k;
    return s;
  }
  Value group = arith::DivUIOp::create(b, chunk, cidx(lanesPerGroup()));
  return Slot{k, group, mulI(chunk, cidx(width)),
              andI(inRange, ult(group, groups))};
}

Value NormEmitter::rowRstd(Value sumSquares) {
  // IEEE division and sqrt (sqrt.rn on the GPU): rstd is saved and must
  // match the reference for the same sum.
  Value var = arith::DivFOp::create(b, sumSquares, colsF32);
  Value root = math::SqrtOp::create(
      b, arith::AddFOp::create(b, var, cf32(spec.eps)));
  return arith::DivFOp::create(b, cf32(1.0), root);
}

SmallVector<Value> NormEmitter::forEachGroup(ValueRange inits, SlotFn body) {
  if (!onGpu)
    return emitFor(
        b, cidx(0), groups, cidx(1), inits, [&](Value g, ValueRange accs) {
          Value yes = arith::ConstantOp::create(b, b.getBoolAttr(true));
          return body(groupSlot(g, yes), accs);
        });
  SmallVector<Value> accs(inits);
  for (int64_t k = 0; k < team.slots; ++k) {
    Slot s = gpuSlot(k, rowValid);
    SmallVector<Value> next = body(s, accs);
    // Masked slots leave the accumulators as they were.
    for (auto [acc, n] : llvm::zip(accs, next))
      acc = acc == n ? acc : arith::SelectOp::create(b, s.valid, n, acc);
  }
  return accs;
}

SmallVector<Value> NormEmitter::teamSum(ValueRange values) {
  SmallVector<Value> out(values);
  if (!onGpu)
    return out;
  assert(values.size() <= kMaxSums && "workgroup buffer too small");
  // Butterfly: lane i and lane i^o add the same two values, so all lanes end
  // with bitwise the same warp sum.
  for (Value &v : out)
    for (int64_t offset = 16; offset >= 1; offset /= 2) {
      auto shuffle =
          gpu::ShuffleOp::create(b, v, int32_t(offset),
                                 /*width=*/32, gpu::ShuffleMode::XOR);
      v = arith::AddFOp::create(b, v, shuffle.getShuffleResult());
    }
  if (team.threadsPerRow <= 32)
    return out;
  // One value per warp through workgroup memory, summed in warp order.
  Value mySlot = mulI(addI(warpSlot, warpInTeam), cidx(kMaxSums));
  emitIfThen(b, arith::CmpIOp::create(b, arith::CmpIPredicate::eq, lane,
                                      cidx(0)),
             [&] {
               for (auto [i, v] : llvm::enumerate(out))
                 memref::StoreOp::create(b, v, smem,
                                         ValueRange{addI(mySlot, cidx(i))});
             });
  gpu::BarrierOp::create(b);
  for (auto [i, v] : llvm::enumerate(out)) {
    Value acc;
    for (int64_t w = 0; w < team.warpsPerTeam(); ++w) {
      Value at = addI(mulI(addI(warpSlot, cidx(w)), cidx(kMaxSums)), cidx(i));
      Value part = memref::LoadOp::create(b, smem, ValueRange{at});
      acc = acc ? arith::AddFOp::create(b, acc, part).getResult() : part;
    }
    v = acc;
  }
  // The buffer is reused by the next reduction.
  gpu::BarrierOp::create(b);
  return out;
}

void NormEmitter::storeEpilogueMax(const Slot &s, Value y) {
  // Rounding is monotonic, so the maximum of the stored values is the
  // rounded maximum: the partial maxima match what was written.
  Value m = maxAbsElements(y);
  Value storer = s.valid;
  if (onGpu && lanesPerGroup() > 1) {
    m = groupMaxOverLanes(m);
    storer = andI(storer, arith::CmpIOp::create(
                              b, arith::CmpIPredicate::eq,
                              arith::RemUIOp::create(
                                  b, teamThread, cidx(lanesPerGroup())),
                              cidx(0)));
  }
  if (!spec.outType.isF32())
    m = arith::ExtFOp::create(
        b, b.getF32Type(),
        arith::TruncFOp::create(b, spec.outType, m).getResult());
  emitIfThen(b, storer, [&] {
    memref::StoreOp::create(b, m, args.lookup("absmax"),
                            ValueRange{addI(mulI(row, groups), s.group)});
  });
}

void NormEmitter::emitForwardRow() {
  Value zero = cf32(0.0);
  Value mean;
  if (spec.hasMean()) {
    Value sum = forEachGroup(zero, [&](const Slot &s, ValueRange acc) {
      return SmallVector<Value>{
          arith::AddFOp::create(b, acc[0], sumElements(loadX(s)))};
    })[0];
    mean = arith::DivFOp::create(b, teamSum(sum)[0], colsF32);
  }
  Value sumSquares = forEachGroup(zero, [&](const Slot &s, ValueRange acc) {
    GroupVec x = loadX(s);
    if (mean)
      x = arith::SubFOp::create(b, x, splat(mean));
    return SmallVector<Value>{
        arith::AddFOp::create(b, acc[0], dotElements(x, x))};
  })[0];
  Value rstd = rowRstd(teamSum(sumSquares)[0]);

  forEachGroup({}, [&](const Slot &s, ValueRange) {
    GroupVec y = loadX(s);
    if (mean)
      y = arith::SubFOp::create(b, y, splat(mean));
    y = arith::MulFOp::create(b, y, splat(rstd));
    if (spec.hasWeight)
      y = arith::MulFOp::create(b, y, loadColOperand("weight", s));
    if (spec.hasBias)
      y = arith::AddFOp::create(b, y, loadColOperand("bias", s));
    if (stage)
      storeGroupStaged(args.lookup("y"), spec.outType, s, y);
    else
      storeGroup(args.lookup("y"), spec.outType, elementIndex(s), s.valid, y);
    if (spec.flagOut)
      raiseFiniteFlag(b, vectorStoresNonFinite(b, y, spec.outType, s.valid),
                      args.lookup(finiteFlagArgName("y")));
    if (spec.epilogueMax)
      storeEpilogueMax(s, y);
    return SmallVector<Value>{};
  });

  // Statistics: stored once per row.
  Value leader = rowValid;
  if (onGpu)
    leader = andI(leader, arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                                teamThread, cidx(0)));
  emitIfThen(b, leader, [&] {
    if (mean)
      memref::StoreOp::create(b, mean, args.lookup("mean"), ValueRange{row});
    memref::StoreOp::create(b, rstd, args.lookup("rstd"), ValueRange{row});
  });
}

SmallVector<Value> NormEmitter::emitBackwardRow(ValueRange accs,
                                                Value partialRow) {
  Value zero = cf32(0.0);
  // The statistics: carried from the previous row with a prefetch.
  RowStats stats =
      currentStage
          ? RowStats{rowScalars[team.slots],
                     spec.hasMean() ? rowScalars[team.slots + 1] : Value()}
          : loadRowStats(row, rowValid);
  Value rstd = stats.rstd, mean = stats.mean;
  auto centered = [&](const Slot &s) {
    GroupVec x = loadX(s);
    return mean ? arith::SubFOp::create(b, x, splat(mean)).getResult() : x;
  };
  auto weighted = [&](const Slot &s, GroupVec dy) {
    return spec.hasWeight
               ? arith::MulFOp::create(b, loadColOperand("weight", s), dy)
                     .getResult()
               : dy;
  };
  // dot = sum((x [- mean]) * w*dy), scaled by rstd once per row instead of
  // once per element; LayerNorm also sum(w*dy).
  bool withSum = spec.hasMean();
  SmallVector<Value> inits = {zero};
  if (withSum)
    inits.push_back(zero);
  SmallVector<Value> sums =
      forEachGroup(inits, [&](const Slot &s, ValueRange acc) {
        GroupVec wdy = weighted(s, loadRowOperand("dy", spec.gradType, s));
        SmallVector<Value> next = {
            arith::AddFOp::create(b, acc[0], dotElements(centered(s), wdy))};
        if (withSum)
          next.push_back(arith::AddFOp::create(b, acc[1], sumElements(wdy)));
        return next;
      });
  sums = teamSum(sums);
  // What the output pass reads again (an L1 hit: the team just read it)
  // instead of keeping it in registers across the team sum. Without fused
  // column sums, x and dy: 48 registers (5 CTAs of 256 per multiprocessor);
  // a 512-thread team also the weight (77 registers with it held: one CTA
  // per multiprocessor; 64 without: two; LayerNorm 16384x11008 37% -> 42%
  // of the copy bandwidth; 256-thread teams lose by it, 52% -> 46% at
  // 8192x8192). Fused (16 f32 accumulators per slot and sum) with one slot,
  // x and dy too: holding them besides w*dy took 107 registers (2 CTAs of
  // 256), too few rows in flight; re-reading was 61% of the copy bandwidth
  // instead of 54% (RMSNorm, 16384x4096). With several slots only the
  // weight: re-reading x and dy there was slower (42% instead of 46%,
  // LayerNorm, 11008 cols).
  // (Slots counted in whole groups: what a thread holds, whatever V.)
  // Staged x codes and dy are read again from shared memory, and their
  // scales are registers anyway.
  int64_t groupSlots = llvm::divideCeil(team.slots * width, spec.groupSize);
  SmallVector<StringRef> reread;
  if (!fused || groupSlots == 1)
    reread = {"x_codes", "x_scale", "dy"};
  else if (currentStage)
    reread = {"x_codes", "dy"};
  if (spec.hasWeight &&
      (fused ? groupSlots > 1 : team.threadsPerRow >= kFusedColumnSumsThreads))
    reread.push_back("weight");
  for (int64_t k = 0; k < team.slots; ++k)
    for (StringRef name : reread)
      cache.erase({args.lookup(name).getAsOpaquePointer(), k});
  Value meanDot = arith::DivFOp::create(
      b, arith::MulFOp::create(b, sums[0], rstd), colsF32);
  Value meanWeighted =
      withSum ? arith::DivFOp::create(b, sums[1], colsF32).getResult()
              : Value();

  SmallVector<Value> nextAccs(accs);
  int64_t held = fusedSums();
  forEachGroup({}, [&](const Slot &s, ValueRange) {
    GroupVec dy = loadRowOperand("dy", spec.gradType, s);
    GroupVec xh = normalized(s, mean, rstd);
    // dx = (w*dy - (xh*mean(xh*w*dy) [+ mean(w*dy)])) * rstd
    Value correction =
        meanWeighted
            ? math::FmaOp::create(b, xh, splat(meanDot), splat(meanWeighted))
                  .getResult()
            : arith::MulFOp::create(b, xh, splat(meanDot)).getResult();
    Value dx = arith::MulFOp::create(
        b, arith::SubFOp::create(b, weighted(s, dy), correction), splat(rstd));
    storeGroup(args.lookup("dx"), spec.outType, elementIndex(s), s.valid, dx);
    if (spec.flagOut)
      raiseFiniteFlag(b, vectorStoresNonFinite(b, dx, spec.outType, s.valid),
                      args.lookup(finiteFlagArgName("dx")));
    if (spec.epilogueMax)
      storeEpilogueMax(s, dx);
    if (!inRow)
      return SmallVector<Value>{};
    if (!onGpu) {
      addColumnTermsToWorkspace(partialRow, s, dy, xh);
      return SmallVector<Value>{};
    }
    if (shared) {
      // Only this thread touches its slots' sums: no barrier.
      emitIfThen(b, s.valid, [&] {
        SmallVector<Value> prev;
        for (int64_t i = 0; i < perSlot; ++i)
          prev.push_back(loadSharedSums(i, s.k));
        for (auto [i, v] : llvm::enumerate(addColumnTerms(prev, dy, xh)))
          storeSharedSums(i, s.k, v);
      });
      return SmallVector<Value>{};
    }
    // Rows past the end load zeros, so their terms are zero.
    MutableArrayRef<Value> mine(nextAccs.data() + s.k * held, held);
    llvm::copy(addColumnTerms(mine, dy, xh), mine.begin());
    return SmallVector<Value>{};
  });
  return nextAccs;
}

GroupVec NormEmitter::normalized(const Slot &s, Value mean, Value rstd) {
  GroupVec x = loadX(s);
  if (mean)
    x = arith::SubFOp::create(b, x, splat(mean));
  return arith::MulFOp::create(b, x, splat(rstd));
}

SmallVector<Value> NormEmitter::addColumnTerms(ValueRange accs, GroupVec dy,
                                               GroupVec xh) {
  SmallVector<Value> next = {math::FmaOp::create(b, dy, xh, accs[0])};
  if (accs.size() > 1)
    next.push_back(arith::AddFOp::create(b, accs[1], dy));
  return next;
}

void NormEmitter::addColumnTermsToWorkspace(Value partialRow, const Slot &s,
                                            GroupVec dy, GroupVec xh) {
  Type f32 = b.getF32Type();
  Value at = addI(mulI(partialRow, cols), s.first);
  SmallVector<Value> prev;
  for (int64_t i = 0; i < perSlot; ++i)
    prev.push_back(
        loadGroup(args.lookup(kWorkspaces[i]), f32, at, s.valid, -1));
  for (auto [i, v] : llvm::enumerate(addColumnTerms(prev, dy, xh)))
    storeGroup(args.lookup(kWorkspaces[i]), f32, at, s.valid, v);
}

Value NormEmitter::sharedQuadIndex(int64_t i, int64_t k, int64_t q) {
  int64_t quads = width / 4;
  int64_t rotated = std::min<int64_t>(quads, 8);
  int64_t shift = llvm::Log2_64(8 / rotated);
  Value chunk = addI(teamThread, cidx(k * team.threadsPerRow));
  Value turn = arith::AndIOp::create(
      b, arith::ShRUIOp::create(b, chunk, cidx(shift)), cidx(rotated - 1));
  Value quad =
      addI(mulI(chunk, cidx(quads)), arith::XOrIOp::create(b, turn, cidx(q)));
  return addI(addI(sumsBase, cidx(i * team.sumCols)), mulI(quad, cidx(4)));
}

GroupVec NormEmitter::loadSharedSums(int64_t i, int64_t k) {
  auto quadType = VectorType::get({4}, b.getF32Type());
  SmallVector<Value> parts;
  for (int64_t q = 0; q < width / 4; ++q)
    parts.push_back(vector::LoadOp::create(
        b, quadType, sums, ValueRange{sharedQuadIndex(i, k, q)},
        /*nontemporal=*/false, llvm::MaybeAlign(16)));
  return concatVectors(parts);
}

Value NormEmitter::concatVectors(SmallVector<Value> parts) {
  // Pairwise (vector.shuffle lowers to LLVM directly); a power-of-two
  // count of equal parts.
  while (parts.size() > 1) {
    SmallVector<Value> joined;
    for (size_t j = 0; j < parts.size(); j += 2) {
      int64_t n = cast<VectorType>(parts[j].getType()).getNumElements();
      joined.push_back(vector::ShuffleOp::create(
          b, parts[j], parts[j + 1],
          llvm::to_vector(llvm::seq<int64_t>(0, 2 * n))));
    }
    parts = std::move(joined);
  }
  return parts[0];
}

void NormEmitter::storeSharedSums(int64_t i, int64_t k, GroupVec v) {
  for (int64_t q = 0; q < width / 4; ++q) {
    Value quad = vector::ShuffleOp::create(
        b, v, v, llvm::to_vector(llvm::seq<int64_t>(4 * q, 4 * q + 4)));
    vector::StoreOp::create(b, quad, sums, ValueRange{sharedQuadIndex(i, k, q)},
                            /*nontemporal=*/false, llvm::MaybeAlign(16));
  }
}

void NormEmitter::setTeam(const TeamPosition &pos) {
  teamThread = pos.teamThread;
  warpSlot = pos.warpSlot;
  warpInTeam = pos.warpInTeam;
  lane = pos.lane;
  smem = pos.smem;
  sums = pos.sums;
  sumsBase = pos.sumsBase;
  blockThread = pos.blockThread;
  if (pos.stagedCodes) {
    stagedCodes =
        stagedOperand(pos.stagedCodes, getFp8Type(b.getContext(), spec.format));
    stagedGrads = stagedOperand(pos.stagedGrads, spec.gradType);
  }
}

NormEmitter::StagedOperand NormEmitter::stagedOperand(Value stages,
                                                      Type logical) const {
  int64_t bytes = laneStorageType(logical).getIntOrFloatBitWidth() / 8;
  int64_t pieceBytes = std::min<int64_t>(16, width * bytes);
  return StagedOperand{stages, pieceBytes / bytes, width * bytes / pieceBytes};
}

Value NormEmitter::stagedIndex(const StagedOperand &op, Value stage, int64_t k,
                               int64_t piece) {
  Value slot = addI(mulI(stage, cidx(team.slots)), cidx(k));
  Value at = addI(mulI(slot, cidx(op.pieces)), cidx(piece));
  return mulI(addI(mulI(at, cidx(team.blockSize)), blockThread),
              cidx(op.pieceElems));
}

Value NormEmitter::prefetchRow(Value r, Value valid, Value stage) {
  Value zero = cidx(0);
  SmallVector<Value> copies;
  for (int64_t k = 0; k < team.slots; ++k) {
    Slot s = gpuSlot(k, valid);
    Value first = addI(mulI(r, cols), s.first);
    for (auto [name, op] : {std::make_pair("x_codes", &*stagedCodes),
                            std::make_pair("dy", &*stagedGrads)})
      for (int64_t p = 0; p < op->pieces; ++p) {
        // A slot that is not valid reads nothing (its source index is
        // clamped to 0) and is filled with zeros.
        Value from = arith::SelectOp::create(
            b, s.valid, addI(first, cidx(p * op->pieceElems)), zero);
        Value count =
            arith::SelectOp::create(b, s.valid, cidx(op->pieceElems), zero);
        int64_t bits = op->pieceElems * cast<MemRefType>(op->buffer.getType())
                                            .getElementType()
                                            .getIntOrFloatBitWidth();
        copies.push_back(nvgpu::DeviceAsyncCopyOp::create(
            b, nvgpu::DeviceAsyncTokenType::get(b.getContext()), op->buffer,
            ValueRange{stagedIndex(*op, stage, k, p)}, args.lookup(name),
            ValueRange{from}, b.getIndexAttr(op->pieceElems), count,
            // 16-byte copies may skip L1: nothing else reads them.
            bits == 128 ? b.getUnitAttr() : UnitAttr()));
      }
  }
  return nvgpu::DeviceAsyncCreateGroupOp::create(
      b, nvgpu::DeviceAsyncTokenType::get(b.getContext()), copies);
}

Value NormEmitter::loadGroupScale(Value r, const Slot &s) {
  return loadScalarF32(args.lookup("x_scale"), spec.scaleType,
                       addI(mulI(r, groups), s.group), s.valid);
}

NormEmitter::RowStats NormEmitter::loadRowStats(Value r, Value valid) {
  auto load = [&](StringRef name) {
    return loadScalarF32(args.lookup(name), b.getF32Type(), r, valid);
  };
  return {load("rstd"), spec.hasMean() ? load("mean") : Value()};
}

SmallVector<Value> NormEmitter::loadRowScalars(Value r, Value valid) {
  SmallVector<Value> out;
  for (int64_t k = 0; k < team.slots; ++k)
    out.push_back(loadGroupScale(r, gpuSlot(k, valid)));
  RowStats stats = loadRowStats(r, valid);
  out.push_back(stats.rstd);
  if (stats.mean)
    out.push_back(stats.mean);
  return out;
}

Value NormEmitter::loadStaged(const StagedOperand &op, int64_t k) {
  auto bufferType = cast<MemRefType>(op.buffer.getType());
  auto pieceType =
      VectorType::get({op.pieceElems}, bufferType.getElementType());
  SmallVector<Value> parts;
  for (int64_t p = 0; p < op.pieces; ++p)
    parts.push_back(vector::LoadOp::create(
        b, pieceType, op.buffer,
        ValueRange{stagedIndex(op, currentStage, k, p)},
        /*nontemporal=*/false,
        llvm::MaybeAlign(op.pieceElems * bufferType.getElementTypeBitWidth() /
                         8)));
  return concatVectors(parts);
}

void NormEmitter::emitGpuForward(Value rowIdx, const TeamPosition &pos,
                                 Value stageBuf) {
  setTeam(pos);
  stage = stageBuf;
  bindRowExtent();
  row = rowIdx;
  rowValid = ult(row, toIndex(args.lookup("rows")));
  rowBase = mulI(row, cols);
  emitForwardRow();
}

void NormEmitter::emitGpuBackward(Value partial, const TeamPosition &pos) {
  setTeam(pos);
  bindRowExtent();
  Value rows = toIndex(args.lookup("rows"));
  // Without column sums in the row kernel every team takes one row, as in
  // the forward.
  Value partials = inRow ? toIndex(args.lookup("partials")) : rows;
  Value partialValid = ult(partial, partials);
  int64_t held = fusedSums();
  Value zeroVec = splat(cf32(0.0));
  SmallVector<Value> inits(team.slots * held, zeroVec);
  if (shared)
    for (int64_t k = 0; k < team.slots; ++k)
      emitIfThen(b, gpuSlot(k, partialValid).valid, [&] {
        for (int64_t i = 0; i < perSlot; ++i)
          storeSharedSums(i, k, zeroVec);
      });
  // Rows partial, partial + partials, ...; the trip count is the same for
  // every team of the CTA because the reductions synchronize the CTA.
  Value trips = inRow
                    ? arith::CeilDivUIOp::create(
                          b, rows, arith::MaxUIOp::create(b, partials, cidx(1)))
                          .getResult()
                    : cidx(1);
  // Row prefetch: row i's x codes and dy are copied into stage i % 2 and
  // its scalars carried in registers while the team works on row i - 1.
  // Each thread reads only what it copied, so the copies need no barrier:
  // waiting for its own group is enough.
  bool prefetch = inRow && stagedCodes.has_value();
  size_t accCount = inits.size();
  if (prefetch) {
    Value firstValid = andI(partialValid, ult(partial, rows));
    prefetchRow(partial, firstValid, cidx(0));
    llvm::append_range(inits, loadRowScalars(partial, firstValid));
  }
  SmallVector<Value> carried =
      emitFor(b, cidx(0), trips, cidx(1), inits, [&](Value i, ValueRange a) {
        cache.clear(); // operands of another row
        row = addI(partial, mulI(i, partials));
        rowValid = andI(partialValid, ult(row, rows));
        rowBase = mulI(row, cols);
        SmallVector<Value> nextScalars;
        if (prefetch) {
          Value next = addI(row, partials);
          Value nextValid = andI(partialValid, ult(next, rows));
          Value one = cidx(1);
          Value copies = prefetchRow(
              next, nextValid, arith::AndIOp::create(b, addI(i, one), one));
          nextScalars = loadRowScalars(next, nextValid);
          // Groups complete in order: with only the newest (the next
          // row's) left in flight, this row's copies have landed.
          nvgpu::DeviceAsyncWaitOp::create(b, copies, b.getI32IntegerAttr(1));
          currentStage = arith::AndIOp::create(b, i, one);
          rowScalars.assign(a.begin() + accCount, a.end());
        }
        SmallVector<Value> next =
            emitBackwardRow(a.take_front(accCount), Value());
        llvm::append_range(next, nextScalars);
        return next;
      });
  currentStage = Value();
  if (prefetch) {
    // The last copies (of no row: zeros) land before the CTA exits.
    Value none = nvgpu::DeviceAsyncCreateGroupOp::create(
        b, nvgpu::DeviceAsyncTokenType::get(b.getContext()), ValueRange{});
    nvgpu::DeviceAsyncWaitOp::create(b, none, b.getI32IntegerAttr(0));
  }
  SmallVector<Value> accs(carried.begin(), carried.begin() + accCount);
  if (!inRow)
    return;
  // One workspace row per team.
  for (int64_t k = 0; k < team.slots; ++k) {
    Slot s = gpuSlot(k, partialValid);
    Value at = addI(mulI(partial, cols), s.first);
    for (int64_t i = 0; i < perSlot; ++i) {
      GroupVec sum = shared ? Value() : accs[k * held + i];
      if (shared) // a slot past the row has no sums to read
        sum = emitIf(
            b, s.valid, zeroVec.getType(),
            [&] { return SmallVector<Value>{loadSharedSums(i, k)}; },
            [&] { return SmallVector<Value>{zeroVec}; })[0];
      storeGroup(args.lookup(kWorkspaces[i]), b.getF32Type(), at, s.valid, sum);
    }
  }
}

void NormEmitter::emitGpuColumns(Value group, Value partial) {
  bindRowExtent();
  Value rows = toIndex(args.lookup("rows"));
  Value partials = toIndex(args.lookup("partials"));
  Value valid = andI(ult(group, groups), ult(partial, partials));
  // Rows partial, partial + partials, ... in order, as a fused row team
  // takes them, so both give bitwise the same partial sums.
  SmallVector<Value> inits(perSlot, splat(cf32(0.0)));
  SmallVector<Value> accs = emitFor(
      b, partial, rows, partials, inits, [&](Value r, ValueRange a) {
        cache.clear(); // operands of another row
        row = r;
        rowValid = valid;
        rowBase = mulI(row, cols);
        Slot s = groupSlot(group, valid);
        RowStats stats = loadRowStats(row, valid);
        GroupVec dy = loadRowOperand("dy", spec.gradType, s);
        return addColumnTerms(a, dy, normalized(s, stats.mean, stats.rstd));
      });
  Value at = addI(mulI(partial, cols), mulI(group, cidx(spec.groupSize)));
  for (int64_t i = 0; i < perSlot; ++i)
    storeGroup(args.lookup(kWorkspaces[i]), b.getF32Type(), at, valid,
               accs[i]);
}

void NormEmitter::emitCpuForward() {
  bindRowExtent();
  Value rows = toIndex(args.lookup("rows"));
  emitFor(b, cidx(0), rows, cidx(1), {}, [&](Value r, ValueRange) {
    row = r;
    rowValid = arith::ConstantOp::create(b, b.getBoolAttr(true));
    rowBase = mulI(row, cols);
    emitForwardRow();
    return SmallVector<Value>{};
  });
}

void NormEmitter::emitCpuPartials(Value partials, bool columnSums,
                                  function_ref<void(Value)> rowBody) {
  Value rows = toIndex(args.lookup("rows"));
  emitFor(b, cidx(0), partials, cidx(1), {}, [&](Value p, ValueRange) {
    if (columnSums) {
      Value zero = splat(cf32(0.0));
      emitFor(b, cidx(0), groups, cidx(1), {}, [&](Value g, ValueRange) {
        Value at = addI(mulI(p, cols), mulI(g, cidx(spec.groupSize)));
        Value yes = arith::ConstantOp::create(b, b.getBoolAttr(true));
        for (int64_t i = 0; i < perSlot; ++i)
          storeGroup(args.lookup(kWorkspaces[i]), b.getF32Type(), at, yes, zero);
        return SmallVector<Value>{};
      });
    }
    emitFor(b, p, rows, partials, {}, [&](Value r, ValueRange) {
      row = r;
      rowValid = arith::ConstantOp::create(b, b.getBoolAttr(true));
      rowBase = mulI(row, cols);
      rowBody(p);
      return SmallVector<Value>{};
    });
    return SmallVector<Value>{};
  });
}

void NormEmitter::emitCpuBackward() {
  bindRowExtent();
  Value partials =
      toIndex(args.lookup(inRow ? StringRef("partials") : StringRef("rows")));
  emitCpuPartials(partials, inRow, [&](Value p) { emitBackwardRow({}, p); });
}

void NormEmitter::emitCpuColumns() {
  bindRowExtent();
  emitCpuPartials(toIndex(args.lookup("partials")), true, [&](Value p) {
    RowStats stats = loadRowStats(row, rowValid);
    Value rstd = stats.rstd, mean = stats.mean;
    forEachGroup({}, [&](const Slot &s, ValueRange) {
      GroupVec dy = loadRowOperand("dy", spec.gradType, s);
      addColumnTermsToWorkspace(p, s, dy, normalized(s, mean, rstd));
      return SmallVector<Value>{};
    });
  });
}

/// dweight[c] (and dbias[c]) = sum over p of partial[p, c], p ascending in
/// each of kReduceWarps strides, then the strides in order. This thread sums
/// the partials firstPartial, firstPartial + partialStep, ... of `column`;
/// `combine` turns that into the final sum (null: nothing to store yet),
/// stored where `storeGuard` holds.
void emitColumnSums(ImplicitLocOpBuilder &b, const NormSpec &spec,
                    const KernelArgs &args, Value column, Value firstPartial,
                    Value partialStep, Value storeGuard,
                    function_ref<Value(Value, int64_t)> combine) {
  Value cols = arith::IndexCastOp::create(b, b.getIndexType(),
                                          args.lookup("cols"));
  Value partials = arith::IndexCastOp::create(b, b.getIndexType(),
                                              args.lookup("partials"));
  Value inRange = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, column,
                                        cols);
  Value zero = arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f));
  SmallVector<std::pair<StringRef, StringRef>> sums = {
      {"dweight_partial", "dweight"}};
  if (spec.hasBias)
    sums.push_back({"dbias_partial", "dbias"});
  for (auto [i, names] : llvm::enumerate(sums)) {
    Value ws = args.lookup(names.first);
    Value out = args.lookup(names.second);
    Value acc = emitFor(b, firstPartial, partials, partialStep, zero,
                        [&](Value p, ValueRange a) {
                          Value at = arith::AddIOp::create(
                              b, arith::MulIOp::create(b, p, cols), column);
                          Value v = emitIf(
                              b, inRange, b.getF32Type(),
                              [&] {
                                return SmallVector<Value>{
                                    memref::LoadOp::create(b, ws,
                                                           ValueRange{at})};
                              },
                              [&] { return SmallVector<Value>{zero}; })[0];
                          return SmallVector<Value>{
                              arith::AddFOp::create(b, a[0], v)};
                        })[0];
    acc = combine(acc, i);
    if (!acc)
      continue;
    Value flag = args.lookup(finiteFlagArgName(names.second));
    emitIfThen(b, arith::AndIOp::create(b, inRange, storeGuard), [&] {
      Value v = acc;
      if (flag) {
        F32Emitter f{b};
        raiseFiniteFlag(b, storesNonFinite(f, {acc}, spec.weightType), flag);
      }
      if (!spec.weightType.isF32()) {
        v = arith::TruncFOp::create(b, spec.weightType, v);
        v = arith::BitcastOp::create(b, laneStorageType(spec.weightType), v);
      }
      memref::StoreOp::create(b, v, out, ValueRange{column});
    });
  }
}

} // namespace

void NormsLowering::emitGpu(ImplicitLocOpBuilder &b, const NormPlan &plan,
                            unsigned index, gpu::GPUFuncOp kernel,
                            const KernelArgs &args) const {
  const NormSpec &spec = plan.spec;
  const TeamShape &team = plan.team;
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  NormPlan::Kernel which = plan.kernelAt(index);
  if (which == NormPlan::Kernel::Columns) {
    // `<name>_columns`: x over groups, y over partials.
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value group = arith::AddIOp::create(
        b, arith::MulIOp::create(b, bid, cidx(kColumnsBlock)), tid);
    Value partial = gpu::BlockIdOp::create(b, gpu::Dimension::y);
    NormEmitter(b, plan, args, /*onGpu=*/true, spec.groupSize)
        .emitGpuColumns(group, partial);
    return;
  }
  if (which == NormPlan::Kernel::Row) {
    // Forward: at most 64 registers, so that 2048 threads (the row data in
    // flight) fit on a multiprocessor. The backward's registers are mostly
    // its fused column sums; its bound is an option, dropped where it
    // would spill.
    if (!spec.backward)
      kernel->setAttr(
          NVVM::NVVMDialect::getMinctasmAttrName(),
          b.getI32IntegerAttr(std::max<int64_t>(1, 1024 / team.blockSize)));
    else
      requestMinCtasUnlessSpilling(kernel, backwardMinCtas);
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    int64_t T = team.threadsPerRow;
    Value teamInBlock = arith::DivUIOp::create(b, tid, cidx(T));
    Value teamThread = arith::RemUIOp::create(b, tid, cidx(T));
    Value teamIdx = arith::AddIOp::create(
        b, arith::MulIOp::create(b, bid, cidx(team.teamsPerBlock())),
        teamInBlock);
    Value lane = arith::RemUIOp::create(b, tid, cidx(32));
    Value warpInTeam = arith::DivUIOp::create(b, teamThread, cidx(32));
    Value warpSlot =
        arith::MulIOp::create(b, teamInBlock, cidx(team.warpsPerTeam()));
    NormEmitter e(b, plan, args, /*onGpu=*/true, team.laneElements);
    NormEmitter::TeamPosition pos{teamThread, warpSlot, warpInTeam, lane,
                                  Value()};
    if (team.dynamicShared()) {
      // Dynamic shared memory: the team sums, the teams' column sums one
      // after the other, the prefetch stages (TeamShape).
      auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(),
                                                  gpu::AddressSpace::Workgroup);
      Value raw = gpu::DynamicSharedMemoryOp::create(
          b, MemRefType::get({ShapedType::kDynamic}, b.getI8Type(), nullptr,
                             workgroup));
      auto view = [&](int64_t offset, int64_t bytes, Type elt) -> Value {
        int64_t count = bytes * 8 / elt.getIntOrFloatBitWidth();
        return memref::ViewOp::create(
            b, MemRefType::get({count}, elt, nullptr, workgroup), raw,
            cidx(offset), ValueRange{});
      };
      Type f32 = b.getF32Type();
      pos.smem = view(0, team.teamSumFloats() * 4, f32);
      if (team.sharedSums > 0) {
        pos.sums = view(team.columnSumsOffset(), team.columnSumsBytes(), f32);
        pos.sumsBase = arith::MulIOp::create(
            b, teamInBlock, cidx(team.sharedSums * team.sumCols));
      }
      if (team.prefetchesRows()) {
        pos.stagedCodes =
            view(team.stagingOffset(), team.stagedCodesBytes(), b.getI8Type());
        pos.stagedGrads = view(team.stagedGradsOffset(),
                               team.sharedBytes() - team.stagedGradsOffset(),
                               laneStorageType(spec.gradType));
        pos.blockThread = tid;
      }
    } else {
      pos.smem = kernel.getWorkgroupAttributions()[0];
    }
    if (spec.backward)
      e.emitGpuBackward(teamIdx, pos);
    else
      e.emitGpuForward(teamIdx, pos,
                       team.stageStores
                           ? Value(kernel.getWorkgroupAttributions()[1])
                           : Value());
    return;
  }
  // The column sums: 32 columns per CTA, kReduceWarps warps splitting the
  // partials, combined in warp order.
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value lane = arith::RemUIOp::create(b, tid, cidx(32));
  Value warp = arith::DivUIOp::create(b, tid, cidx(32));
  Value column = arith::AddIOp::create(
      b, arith::MulIOp::create(b, bid, cidx(32)), lane);
  Value smem = kernel.getWorkgroupAttributions()[0];
  Value isWarp0 =
      arith::CmpIOp::create(b, arith::CmpIPredicate::eq, warp, cidx(0));
  emitColumnSums(b, spec, args, column, warp, cidx(kReduceWarps), isWarp0,
                 [&](Value acc, int64_t) -> Value {
                   // Warp w's sum at smem[w*32 + lane], added in warp order.
                   Value at = arith::AddIOp::create(
                       b, arith::MulIOp::create(b, warp, cidx(32)), lane);
                   memref::StoreOp::create(b, acc, smem, ValueRange{at});
                   gpu::BarrierOp::create(b);
                   Value total;
                   for (int64_t w = 0; w < kReduceWarps; ++w) {
                     Value part = memref::LoadOp::create(
                         b, smem, ValueRange{arith::AddIOp::create(
                                      b, cidx(w * 32), lane)});
                     total = total ? arith::AddFOp::create(b, total, part)
                                         .getResult()
                                   : part;
                   }
                   // smem is reused by the next sum.
                   gpu::BarrierOp::create(b);
                   return total;
                 });
}

void NormsLowering::emitCpu(ImplicitLocOpBuilder &b, const NormPlan &plan,
                            unsigned index, func::FuncOp,
                            const KernelArgs &args) const {
  const NormSpec &spec = plan.spec;
  NormPlan::Kernel which = plan.kernelAt(index);
  if (which != NormPlan::Kernel::Reduce) {
    NormEmitter e(b, plan, args, /*onGpu=*/false, spec.groupSize);
    if (which == NormPlan::Kernel::Columns)
      e.emitCpuColumns();
    else if (spec.backward)
      e.emitCpuBackward();
    else
      e.emitCpuForward();
    return;
  }
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  Value cols = arith::IndexCastOp::create(b, b.getIndexType(),
                                          args.lookup("cols"));
  // The same order as the GPU: kReduceWarps strided sums, then in order.
  emitFor(b, cidx(0), cols, cidx(1), {}, [&](Value c, ValueRange) {
    SmallVector<SmallVector<Value>> strideSums;
    for (int64_t w = 0; w < kReduceWarps; ++w) {
      strideSums.emplace_back();
      emitColumnSums(b, spec, args, c, cidx(w), cidx(kReduceWarps),
                     arith::ConstantOp::create(b, b.getBoolAttr(true)),
                     [&](Value acc, int64_t i) -> Value {
                       strideSums.back().push_back(acc);
                       if (w + 1 < kReduceWarps)
                         return Value(); // stored after the last stride
                       Value total;
                       for (auto &s : strideSums)
                         total = total ? arith::AddFOp::create(b, total, s[i])
                                             .getResult()
                                       : s[i];
                       return total;
                     });
    }
    return SmallVector<Value>{};
  });
}
