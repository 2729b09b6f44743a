//===- PointwiseEmitter.cpp - pointwise kernels and their CPU twins -------===//
//
// Reading 1xG / per-tensor FP8 and high-precision operands, running an op's
// element math, writing high-precision and 1xG FP8 results, and the
// epilogue maxima of group scaling, shared by every pointwise op. On the GPU
// a thread runs `lanes-per-thread` lanes, each a coalesced sweep of the
// block; the CPU twin loops over lanes that each hold a whole group.
//
// Rotary ops (coat.rope, coat.rope_grad) pair elements across a head, so
// their lanes hold two runs, an element of the first half of a head and its
// partner d/2 columns on, plus the token's table entries at both; a GPU
// block takes whole rows. Reading, the math, storing and the maxima are the
// same as for the flat lanes.
//
//===----------------------------------------------------------------------===//

#include "Pointwise.h"

#include "coat/Conversion/EmitHelpers.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <algorithm>
#include <array>

using namespace mlir;
using namespace mlir::coat;

namespace {

/// One lane of a rotary kernel: E elements of the first half of head `head`
/// of a row (`lo`, indices of the first operand and the results) and their
/// partners (`hi`), and the same positions of the row's tables.
struct RotaryLane {
  GroupLane lo, hi;
  Value tableLo, tableHi;
  Value head;
  /// i1: the lane is inside the tensor and its block's rows; null when
  /// known to be.
  Value valid;
};

/// Emits the work of one or more lanes of a pointwise kernel.
class PointwiseEmitter {
public:
  PointwiseEmitter(ImplicitLocOpBuilder &b, const PointwiseSpec &spec,
                   const KernelArgs &args, bool exactMath, bool softExp2,
                   ScaleDivision division)
      : b(b), f(F32Emitter{b}), spec(spec), args(args), exactMath(exactMath),
        softExp2(softExp2), division(division) {
    Value n = arith::MulIOp::create(b, args.lookup("rows"),
                                    args.lookup("cols"));
    nI64 = n;
    nIndex = arith::IndexCastOp::create(b, b.getIndexType(), n);
    if (spec.groupSize)
      groups = arith::CeilDivUIOp::create(b, nIndex, idx(spec.groupSize));
  }

  Value numElements() const { return nIndex; }

  /// Loads (all lanes first, so their loads are in flight together), then
  /// computes and stores. Without `tail` every lane is known to be full.
  void emitLanes(ArrayRef<GroupLane> lanes, bool tail) {
    SmallVector<SmallVector<SmallVector<Value>>> loaded;
    SmallVector<LaneAccess> accesses;
    for (const GroupLane &lane : lanes) {
      accesses.push_back(access(lane, tail));
      loaded.push_back(load(lane, accesses.back(), tail));
    }
    for (auto [lane, acc, in] : llvm::zip(lanes, accesses, loaded))
      computeAndStore(lane, acc, in, tail);
  }

  /// The lane of a rotary kernel at chunk `chunk` of head `head` of `row`
  /// (known valid until its caller says otherwise).
  RotaryLane rotaryLane(const RotaryTiling &t, Value row, Value head,
                        Value chunk, bool onGpu) {
    const RotaryHeads &r = *spec.info.rotary;
    int64_t e = t.lane.elementsPerLane, half = r.headDim / 2;
    Value inRow = arith::AddIOp::create(
        b, arith::MulIOp::create(b, head, idx(r.headDim)),
        arith::MulIOp::create(b, chunk, idx(e)));
    Value first = arith::AddIOp::create(
        b, arith::MulIOp::create(b, row, idx(r.heads * r.headDim)), inRow);
    Value table = arith::AddIOp::create(
        b, arith::MulIOp::create(b, row, idx(r.headDim)),
        arith::MulIOp::create(b, chunk, idx(e)));
    auto part = [&](Value firstElement) {
      GroupLane lane;
      lane.onGpu = onGpu;
      lane.elementsPerLane = e;
      lane.lanesPerGroup = t.lane.lanesPerGroup;
      lane.groupSize = e * t.lane.lanesPerGroup;
      lane.firstElement = firstElement;
      // Chunks of a half are consecutive lanes, and a group's lie in one
      // half (G divides d/2), so its lanes are adjacent.
      lane.laneInGroup =
          arith::RemUIOp::create(b, chunk, idx(t.lane.lanesPerGroup));
      lane.group = spec.groupSize
                       ? arith::DivUIOp::create(b, firstElement,
                                                idx(spec.groupSize))
                             .getResult()
                       : firstElement;
      return lane;
    };
    return {part(first), part(arith::AddIOp::create(b, first, idx(half))),
            table, arith::AddIOp::create(b, table, idx(half)), head, Value()};
  }

  /// The lanes' loads first, then their math, stores and maxima.
  void emitRotaryLanes(ArrayRef<RotaryLane> lanes) {
    SmallVector<SmallVector<SmallVector<Value>>> loaded;
    for (const RotaryLane &lane : lanes)
      loaded.push_back(loadRotary(lane));
    for (auto [lane, in] : llvm::zip(lanes, loaded))
      computeAndStoreRotary(lane, in);
  }

private:
  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value arg(StringRef name) const { return args.lookup(name); }

  /// Access to the `elements` values at `first`: one vector access where
  /// `valid` holds (or is null), none otherwise (rotary lanes are whole).
  LaneAccess rotaryAccess(Value first, int64_t elements, Value valid) {
    return LaneAccess{b, first, elements,
                      valid ? valid : arith::ConstantIntOp::create(b, 1, 1),
                      Value()};
  }

  /// Per operand, its values at the lane's run and at the partner run.
  SmallVector<SmallVector<Value>> loadRotary(const RotaryLane &lane) {
    int64_t e = lane.lo.elementsPerLane;
    SmallVector<SmallVector<Value>> out;
    for (const KernelInput &in : spec.inputs) {
      Value values = arg(in.name);
      Value lo = in.table ? lane.tableLo : lane.lo.firstElement;
      Value hi = in.table ? lane.tableHi : lane.hi.firstElement;
      auto align = alignment(lane.lo, values);
      out.push_back(
          rotaryAccess(lo, e, lane.valid).loadF32(values, in.type, align));
      out.push_back(
          rotaryAccess(hi, e, lane.valid).loadF32(values, in.type, align));
    }
    return out;
  }

  void computeAndStoreRotary(const RotaryLane &lane,
                             ArrayRef<SmallVector<Value>> in) {
    const RotaryHeads &r = *spec.info.rotary;
    int64_t e = lane.lo.elementsPerLane;
    // Heads past the rotated ones: the result is the first operand.
    Value rotated;
    if (spec.visitedHeads() > r.rotatedHeads)
      rotated = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, lane.head,
                                      idx(r.rotatedHeads));
    // results[k][0 or 1]: result k at the lane's run or the partner run.
    SmallVector<std::array<SmallVector<Value>, 2>> results(
        spec.outputs.size());
    for (int64_t i = 0; i < e; ++i) {
      SmallVector<Value> operands;
      for (const SmallVector<Value> &x : in)
        operands.push_back(x[i]);
      ActivationMath m{f, exactMath, softExp2};
      SmallVector<Value> ys = spec.info.math(m, operands);
      for (auto [k, out] : llvm::enumerate(spec.outputs))
        for (int h = 0; h < 2; ++h) {
          Value y = ys[2 * out.mathIndex + h];
          if (rotated)
            y = f.select(rotated, y, in[h][i]);
          results[k][h].push_back(y);
        }
    }
    // In place, the heads that are not rotated already hold their values.
    Value storeValid = lane.valid;
    if (rotated && spec.inPlace)
      storeValid = lane.valid ? arith::AndIOp::create(b, lane.valid, rotated)
                                    .getResult()
                              : rotated;
    for (auto [out, ys] : llvm::zip(spec.outputs, results)) {
      Value values = arg(out.name);
      auto align = alignment(lane.lo, values);
      for (int h = 0; h < 2; ++h) {
        const GroupLane &part = h ? lane.hi : lane.lo;
        rotaryAccess(part.firstElement, e, storeValid)
            .storeF32(values, ys[h], out.type, align);
      }
      if (!out.finiteFlagArg.empty()) {
        // The heads an in-place kernel leaves as they are count too: they
        // are part of the result.
        SmallVector<Value> all(ys[0]), valid;
        all.append(ys[1]);
        if (lane.valid)
          valid.assign(all.size(), lane.valid);
        raiseFiniteFlag(b, storesNonFinite(f, all, out.type, valid),
                        arg(out.finiteFlagArg));
      }
      if (out.absmaxArgs.empty())
        continue;
      // Each run lies in one group; its lanes combine the maxima.
      for (int h = 0; h < 2; ++h) {
        const GroupLane &part = h ? lane.hi : lane.lo;
        Value m = f.roundTo(groupMaxAbs(f, part, ys[h]), out.type);
        Value leader = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                             part.laneInGroup, idx(0));
        if (lane.valid)
          leader = arith::AndIOp::create(b, leader, lane.valid);
        for (const std::string &name : out.absmaxArgs)
          emitIfThen(b, leader, [&] {
            storeScalarF32(b, b.getLoc(), arg(name), b.getF32Type(), m,
                           part.group);
          });
      }
    }
  }

  LaneAccess access(const GroupLane &lane, bool tail) {
    int64_t e = lane.elementsPerLane;
    Value full;
    if (tail) {
      Value end = arith::AddIOp::create(b, lane.firstElement, idx(e));
      full = arith::CmpIOp::create(b, arith::CmpIPredicate::ule, end, nIndex);
    } else {
      full = arith::ConstantIntOp::create(b, 1, 1);
    }
    return LaneAccess{b, lane.firstElement, e, full, nI64};
  }

  /// A lane's chunk starts at a multiple of E elements of a 16-byte aligned
  /// buffer (docs/manifest.md), so it is aligned to min(E * size, 16).
  llvm::MaybeAlign alignment(const GroupLane &lane, Value buffer) const {
    Type elt = cast<MemRefType>(buffer.getType()).getElementType();
    int64_t bytes = lane.elementsPerLane * elt.getIntOrFloatBitWidth() / 8;
    return llvm::MaybeAlign(std::clamp<int64_t>(bytes, 1, 16));
  }

  /// The lane's group index for a scale/maxima buffer; lanes past the end
  /// (tail only) read the last group's entry.
  Value groupIndex(const GroupLane &lane, bool tail) {
    if (!tail)
      return lane.group;
    Value last = arith::SubIOp::create(
        b, arith::MaxUIOp::create(b, groups, idx(1)), idx(1));
    return arith::MinUIOp::create(b, lane.group, last);
  }

  SmallVector<SmallVector<Value>> load(const GroupLane &lane,
                                       const LaneAccess &acc, bool tail) {
    SmallVector<SmallVector<Value>> out;
    for (const KernelInput &in : spec.inputs) {
      Value values = arg(in.name);
      SmallVector<Value> x =
          acc.loadF32(values, in.type, alignment(lane, values));
      if (in.fp8) {
        Value s = loadScalarF32(b, arg(in.name + "_scale"), in.scaleType,
                                groupIndex(lane, tail));
        for (Value &xi : x)
          xi = f.mul(xi, s);
      }
      out.push_back(std::move(x));
    }
    return out;
  }

  /// Stores `v` to buffer[group] from the group's first lane.
  void storeFromLeader(const GroupLane &lane, Value buffer, Type logical,
                       Value v, bool tail) {
    Value leader = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                         lane.laneInGroup, idx(0));
    if (tail)
      leader = arith::AndIOp::create(
          b, leader,
          arith::CmpIOp::create(b, arith::CmpIPredicate::ult, lane.group,
                                groups));
    emitIfThen(b, leader, [&] {
      storeScalarF32(b, b.getLoc(), buffer, logical, v, lane.group);
    });
  }

  /// COAT's 1xG activation scales in `format` (COAT.md §3.1), divided as
  /// this kernel divides.
  GroupQuantization activationGroups(::coat::Fp8Format format,
                                     Type scaleType) const {
    return {::coat::kActivationScaleEps,
            ::coat::getFp8Traits(format).maxFinite, scaleType, division};
  }

  /// `x` (a lane's values) as a kernel writing them 1xG in `in`'s FP8 type
  /// stores them and a kernel reading them back loads them: the group's
  /// scale, the codes, then code * scale.
  SmallVector<Value> requantize(const GroupLane &lane, ArrayRef<Value> x,
                                const KernelInput &in) {
    QuantizedLane q =
        quantizeGroup(f, lane, x, activationGroups(in.format, in.scaleType));
    auto vec = [&](Type t) {
      return VectorType::get({static_cast<int64_t>(x.size())}, t);
    };
    Value v = vector::FromElementsOp::create(b, vec(b.getF32Type()), q.scaled);
    v = arith::TruncFOp::create(b, vec(in.type), v);
    v = arith::ExtFOp::create(b, vec(b.getF32Type()), v);
    SmallVector<Value> out;
    for (int64_t i = 0, e = x.size(); i < e; ++i)
      out.push_back(
          f.mul(vector::ExtractOp::create(b, v, ArrayRef<int64_t>{i}), q.scale));
    return out;
  }

  void computeAndStore(const GroupLane &lane, const LaneAccess &acc,
                       ArrayRef<SmallVector<Value>> in, bool tail) {
    int64_t e = lane.elementsPerLane;
    // A value derived and requantized in registers joins the operands.
    SmallVector<Value> derived;
    if (const std::optional<RequantizedValue> &r = spec.info.requantized) {
      SmallVector<Value> raw;
      for (int64_t i = 0; i < e; ++i) {
        ActivationMath m{f, exactMath, softExp2};
        raw.push_back(r->math(m, {in[r->operand][i]}).front());
      }
      derived = requantize(lane, raw, spec.inputs[r->operand]);
    }
    // The math, element by element.
    SmallVector<SmallVector<Value>> results(spec.outputs.size());
    for (int64_t i = 0; i < e; ++i) {
      SmallVector<Value> operands;
      for (const SmallVector<Value> &x : in)
        operands.push_back(x[i]);
      if (!derived.empty())
        operands.push_back(derived[i]);
      ActivationMath m{f, exactMath, softExp2};
      SmallVector<Value> ys = spec.info.math(m, operands);
      for (auto [k, out] : llvm::enumerate(spec.outputs))
        results[k].push_back(ys[out.mathIndex]);
    }
    for (auto [out, ys] : llvm::zip(spec.outputs, results)) {
      Value values = arg(out.name);
      if (out.fp8) {
        QuantizedLane q = quantizeGroup(
            f, lane, ys, activationGroups(out.format, out.scaleType));
        acc.storeF32(values, q.scaled, out.type, alignment(lane, values));
        storeFromLeader(lane, arg(out.name + "_scale"), out.scaleType,
                        q.scale, tail);
        continue;
      }
      acc.storeF32(values, ys, out.type, alignment(lane, values));
      if (!out.finiteFlagArg.empty()) {
        SmallVector<Value> stored; // a tail lane stores its first elements
        if (tail)
          for (int64_t i = 0; i < e; ++i)
            stored.push_back(arith::CmpIOp::create(
                b, arith::CmpIPredicate::ult,
                arith::AddIOp::create(b, lane.firstElement, idx(i)), nIndex));
        raiseFiniteFlag(b, storesNonFinite(f, ys, out.type, stored),
                        arg(out.finiteFlagArg));
      }
      if (out.absmaxArgs.empty())
        continue;
      // The maxima are of the stored (rounded) values, which the quantize
      // that consumes them reads. Rounding to nearest is monotonic and odd,
      // so max |round(y)| = round(max |y|): one rounding per group.
      Value m = f.roundTo(groupMaxAbs(f, lane, ys), out.type);
      for (const std::string &name : out.absmaxArgs)
        storeFromLeader(lane, arg(name), b.getF32Type(), m, tail);
    }
  }

  ImplicitLocOpBuilder &b;
  F32Emitter f;
  const PointwiseSpec &spec;
  const KernelArgs &args;
  bool exactMath;
  bool softExp2;
  ScaleDivision division;
  Value nI64, nIndex, groups;
};

/// The CPU twin calls libm's erff and tanhf, as the reference library does
/// (the LLVM lowering has no erf, and the library's tanh is libm's).
void callLibm(func::FuncOp fn, ModuleOp module) {
  SmallVector<Operation *> calls;
  fn.walk([&](Operation *op) {
    if (isa<math::ErfOp, math::TanhOp>(op))
      calls.push_back(op);
  });
  MLIRContext *ctx = module.getContext();
  Type f32 = Float32Type::get(ctx);
  auto type = FunctionType::get(ctx, {f32}, {f32});
  for (Operation *op : calls) {
    StringRef name = isa<math::ErfOp>(op) ? "erff" : "tanhf";
    auto decl = module.lookupSymbol<func::FuncOp>(name);
    if (!decl) {
      OpBuilder mb(ctx);
      mb.setInsertionPointToStart(module.getBody());
      decl = func::FuncOp::create(mb, module.getLoc(), name, type);
      decl.setPrivate();
    }
    OpBuilder b(op);
    auto call =
        func::CallOp::create(b, op->getLoc(), decl, op->getOperand(0));
    op->replaceAllUsesWith(call.getResults());
    op->erase();
  }
}

} // namespace

namespace {

/// Lane `l` (index) of a rotary kernel's rows from row `firstRow` on (its
/// row in `row`): lanes run over the chunks of a head, the heads of a row,
/// then rows.
RotaryLane rotaryLaneAt(ImplicitLocOpBuilder &b, PointwiseEmitter &emitter,
                        const RotaryTiling &t, Value firstRow, Value l,
                        bool onGpu, Value &row) {
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  row = arith::AddIOp::create(
      b, firstRow, arith::DivUIOp::create(b, l, cidx(t.lanesPerRow)));
  Value inRow = arith::RemUIOp::create(b, l, cidx(t.lanesPerRow));
  Value head = arith::DivUIOp::create(b, inRow, cidx(t.chunks));
  Value chunk = arith::RemUIOp::create(b, inRow, cidx(t.chunks));
  return emitter.rotaryLane(t, row, head, chunk, onGpu);
}

} // namespace

/// A block takes `rowsPerBlock` rows in `steps` sweeps of its threads,
/// `lanes-per-thread` sweeps' loads in flight together. Blocks whose rows
/// all exist skip the row checks (the condition is block-uniform, so the
/// shuffles of either branch see whole warps); a last sweep that the rows'
/// lanes do not fill masks its idle threads.
static void emitRotaryGpu(ImplicitLocOpBuilder &b, PointwiseEmitter &emitter,
                          const RotaryTiling &t, int64_t blockSize,
                          int64_t lanesPerThread, const KernelArgs &args) {
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value rows =
      arith::IndexCastOp::create(b, b.getIndexType(), args.lookup("rows"));
  Value firstRow = arith::MulIOp::create(b, bid, cidx(t.rowsPerBlock));
  Value wholeBlock = arith::CmpIOp::create(
      b, arith::CmpIPredicate::ule,
      arith::AddIOp::create(b, firstRow, cidx(t.rowsPerBlock)), rows);
  int64_t blockLanes = t.rowsPerBlock * t.lanesPerRow;
  auto sweeps = [&](bool tail) {
    for (int64_t s0 = 0; s0 < t.steps; s0 += lanesPerThread) {
      SmallVector<RotaryLane> lanes;
      for (int64_t s = s0; s < std::min(t.steps, s0 + lanesPerThread); ++s) {
        Value l = arith::AddIOp::create(b, cidx(s * blockSize), tid);
        Value row;
        RotaryLane lane =
            rotaryLaneAt(b, emitter, t, firstRow, l, /*onGpu=*/true, row);
        auto both = [&](Value c) {
          lane.valid = lane.valid
                           ? arith::AndIOp::create(b, lane.valid, c).getResult()
                           : c;
        };
        if ((s + 1) * blockSize > blockLanes)
          both(arith::CmpIOp::create(b, arith::CmpIPredicate::ult, l,
                                     cidx(blockLanes)));
        if (tail)
          both(arith::CmpIOp::create(b, arith::CmpIPredicate::ult, row, rows));
        lanes.push_back(lane);
      }
      emitter.emitRotaryLanes(lanes);
    }
  };
  emitIfElse(b, wholeBlock, [&] { sweeps(/*tail=*/false); },
             [&] { sweeps(/*tail=*/true); });
}

void PointwiseLowering::emitGpu(ImplicitLocOpBuilder &b,
                                const PointwiseSpec &spec, unsigned,
                                gpu::GPUFuncOp kernel,
                                const KernelArgs &args) const {
  requestMinCtasUnlessSpilling(kernel, minCtas);
  if (spec.info.rotary) {
    PointwiseEmitter emitter(b, spec, args, exactMath, softExp2,
                             scaleDivision(spec));
    emitRotaryGpu(b, emitter, rotaryTiling(spec), blockSize, lanesPerThread,
                  args);
    return;
  }
  LaneShape shape = laneShape(spec);
  int64_t lanesPerBlock = blockSize * lanesPerThread;
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  PointwiseEmitter emitter(b, spec, args, exactMath, softExp2,
                           scaleDivision(spec));
  // Lane u of a thread is lane base + u * blockSize + tid: every unrolled
  // step is a coalesced sweep of the block, and a group's lanes stay
  // adjacent threads of one warp.
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value base = arith::MulIOp::create(b, bid, cidx(lanesPerBlock));
  Value blockEnd = arith::MulIOp::create(
      b, arith::AddIOp::create(b, base, cidx(lanesPerBlock)),
      cidx(shape.elementsPerLane));
  // Block-uniform, so the shuffles of either branch see the whole warp.
  Value wholeBlock = arith::CmpIOp::create(b, arith::CmpIPredicate::ule,
                                           blockEnd, emitter.numElements());
  auto lanes = [&]() {
    SmallVector<GroupLane> out;
    for (int64_t u = 0; u < lanesPerThread; ++u) {
      Value laneIndex = arith::AddIOp::create(
          b, arith::AddIOp::create(b, base, cidx(u * blockSize)), tid);
      out.push_back(makeFlatLane(b, shape.elementsPerLane,
                                 shape.lanesPerGroup, laneIndex,
                                 /*onGpu=*/true));
    }
    return out;
  };
  emitIfElse(
      b, wholeBlock, [&] { emitter.emitLanes(lanes(), /*tail=*/false); },
      [&] { emitter.emitLanes(lanes(), /*tail=*/true); });
}

void PointwiseLowering::emitCpu(ImplicitLocOpBuilder &b,
                                const PointwiseSpec &spec, unsigned,
                                func::FuncOp twin,
                                const KernelArgs &args) const {
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  PointwiseEmitter emitter(b, spec, args, exactMath, softExp2,
                           scaleDivision(spec));
  if (spec.info.rotary) {
    RotaryTiling t = rotaryTiling(spec);
    Value rows =
        arith::IndexCastOp::create(b, b.getIndexType(), args.lookup("rows"));
    Value lanes = arith::MulIOp::create(b, rows, cidx(t.lanesPerRow));
    emitFor(b, cidx(0), lanes, cidx(1), {}, [&](Value l, ValueRange) {
      Value row;
      emitter.emitRotaryLanes(
          rotaryLaneAt(b, emitter, t, cidx(0), l, /*onGpu=*/false, row));
      return SmallVector<Value>{};
    });
    return;
  }
  LaneShape shape = laneShape(spec);
  Value lanes = arith::CeilDivUIOp::create(b, emitter.numElements(),
                                           cidx(shape.elementsPerLane));
  emitFor(b, cidx(0), lanes, cidx(1), {}, [&](Value i, ValueRange) {
    GroupLane lane = makeFlatLane(b, shape.elementsPerLane,
                                  shape.lanesPerGroup, i, /*onGpu=*/false);
    emitter.emitLanes(lane, /*tail=*/true);
    return SmallVector<Value>{};
  });
  callLibm(twin, twin->getParentOfType<ModuleOp>());
}
