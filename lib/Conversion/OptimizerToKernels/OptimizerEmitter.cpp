//===- OptimizerEmitter.cpp - the fused AdamW kernel and its CPU twin ------===//
//
// One lane's element math (load, dequantize, update, re-derive the group
// metadata, quantize, store), emitted once against GroupLane: on the GPU a
// thread takes a lane in each tile it walks, and the lanes of a group share
// statistics by warp shuffles; on the CPU one loop iteration holds a whole
// group. The step's constants come first, once per thread (or function).
//
//===----------------------------------------------------------------------===//

#include "Optimizer.h"

#include "coat/Conversion/GroupKernel.h"
#include "coat/Conversion/Passes.h"
#include "coat/Numerics/StochasticRounding.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::coat;

namespace {

/// The buffers of one moment inside the kernel.
struct MomentBuffers {
  Value codes, scale, k, c;
};

/// The kernel arguments of docs/manifest.md, as the element math uses them.
struct AdamWArgs {
  Value param, grad;
  Value master; ///< f32; only with a master copy
  MomentBuffers m, v;
  Value n, step, lr, beta1, beta2, eps, weightDecay;
  Value seed;      ///< i64; only with stochastic rounding
  Value gradScale; ///< memref of one f32; only with a gradient scale
};

AdamWArgs adamwArgs(const KernelArgs &args) {
  auto moment = [&](StringRef name) {
    std::string p = name.str();
    return MomentBuffers{args.lookup(p + "_codes"), args.lookup(p + "_scale"),
                         args.lookup(p + "_k"), args.lookup(p + "_c")};
  };
  return AdamWArgs{args.lookup("param"),  args.lookup("grad"),
                   args.lookup("master"),
                   moment("m"),           moment("v"),
                   args.lookup("n"),      args.lookup("step"),
                   args.lookup("lr"),     args.lookup("beta1"),
                   args.lookup("beta2"),  args.lookup("eps"),
                   args.lookup("weight_decay"), args.lookup("seed"),
                   args.lookup("grad_scale")};
}

/// The counter-based random bits and roundings of
/// coat/Numerics/StochasticRounding.h as integer and f32 operations, equal
/// bit for bit on both targets (no operation here flushes or approximates).
class StochasticRounder {
public:
  /// Derives the step's key from the seed and the step's f32 bits.
  StochasticRounder(ImplicitLocOpBuilder &b, Value seed, Value step) : b(b) {
    Type i32 = b.getI32Type();
    Value lo = arith::TruncIOp::create(b, i32, seed);
    Value hi = arith::TruncIOp::create(
        b, i32, arith::ShRUIOp::create(b, seed, i64c(32)));
    Value k = mix32(arith::XOrIOp::create(b, mix32(lo), hi));
    key = mix32(
        arith::XOrIOp::create(b, k, arith::BitcastOp::create(b, i32, step)));
  }

  /// The bits of `stream` for `count` consecutive elements from `first`
  /// (an index that is a multiple of the block size); each block's word is
  /// hashed once and shared by the streams.
  SmallVector<Value> bits(Value first, int64_t count,
                          ::coat::RandomStream stream) {
    const int64_t blockElems = ::coat::kRandomBlockElements;
    if (words.empty() || wordsFirst != first) {
      words.clear();
      wordsFirst = first;
      Value block = arith::ShRUIOp::create(
          b, arith::IndexCastUIOp::create(b, b.getI64Type(), first),
          i64c(llvm::Log2_64(blockElems)));
      for (int64_t w = 0; w < count / blockElems; ++w)
        words.push_back(
            blockWord(arith::AddIOp::create(b, block, i64c(w))));
    }
    SmallVector<Value> out;
    for (int64_t i = 0; i < count; ++i)
      out.push_back(arith::MulIOp::create(
          b, words[i / blockElems],
          i32c(::coat::kStreamMultipliers[static_cast<unsigned>(stream)]
                                         [i % blockElems])));
    return out;
  }

  /// stochasticRoundToFp8: an f32 that the RNE conversion keeps.
  Value toFp8(F32Emitter &f, Value x, ::coat::Fp8Format format, Value r) {
    const int drop = ::coat::fp8DroppedBits(format);
    const float minNormal = ::coat::getFp8Traits(format).minNormal;
    Type i32 = b.getI32Type();
    Value a = f.abs(x);
    Value lift = f.select(f.lt(a, f.c(minNormal)), f.c(minNormal), f.c(0.0));
    Value u = arith::BitcastOp::create(b, i32, f.add(a, lift));
    u = arith::AddIOp::create(b, u,
                              arith::ShRUIOp::create(b, r, i32c(32 - drop)));
    u = arith::AndIOp::create(b, u, i32c(~((int64_t(1) << drop) - 1)));
    Value z = f.sub(arith::BitcastOp::create(b, f.b.getF32Type(), u), lift);
    return f.select(f.isFinite(x), f.copysign(z, x), x);
  }

  /// stochasticRoundToBf16: an f32 exact in bf16.
  Value toBf16(F32Emitter &f, Value x, Value r) {
    Type i32 = b.getI32Type();
    Value u = arith::BitcastOp::create(b, i32, x);
    u = arith::AddIOp::create(b, u, arith::ShRUIOp::create(b, r, i32c(16)));
    u = arith::AndIOp::create(b, u, i32c(0xffff0000));
    return f.select(f.isFinite(x),
                    arith::BitcastOp::create(b, b.getF32Type(), u), x);
  }

private:
  Value i32c(int64_t v) {
    return arith::ConstantIntOp::create(b, b.getI32Type(),
                                        static_cast<int32_t>(v));
  }
  Value i64c(int64_t v) {
    return arith::ConstantIntOp::create(b, b.getI64Type(), v);
  }
  Value mix32(Value x) {
    auto xorShift = [&](Value v, int shift) {
      return arith::XOrIOp::create(b, v,
                                   arith::ShRUIOp::create(b, v, i32c(shift)));
    };
    x = xorShift(x, ::coat::kMixShift1);
    x = arith::MulIOp::create(b, x, i32c(::coat::kMixMultiplier1));
    x = xorShift(x, ::coat::kMixShift2);
    x = arith::MulIOp::create(b, x, i32c(::coat::kMixMultiplier2));
    return xorShift(x, ::coat::kMixShift3);
  }
  /// stochasticBlockWord of a block index (i64).
  Value blockWord(Value block) {
    Type i32 = b.getI32Type();
    Value hi = arith::TruncIOp::create(
        b, i32, arith::ShRUIOp::create(b, block, i64c(32)));
    Value lo = arith::TruncIOp::create(b, i32, block);
    return mix32(
        arith::XOrIOp::create(b, mix32(arith::XOrIOp::create(b, key, hi)), lo));
  }

  ImplicitLocOpBuilder &b;
  Value key;
  /// The words of the lane last asked for.
  Value wordsFirst;
  SmallVector<Value> words;
};

/// Groups whose maximum (plain moments) or centre (expanded ones) is below
/// this bound are quantized through values scaled by kTinyGroupShift, so
/// that no reciprocal overflows f32 (docs/optimizer-numerics.md).
constexpr double kTinyGroupBound = 0x1p-100;
constexpr double kTinyGroupShift = 0x1p32;

/// Per-group and per-step constants can involve subnormal extremes (tiny
/// minima), so they are never flushed; approximate on the GPU in fixed mode,
/// accurate in reference mode.
F32Emitter accurateEmitter(ImplicitLocOpBuilder &b,
                           const AdamWKernelSpec &spec, bool onGpu) {
  return F32Emitter{b, /*approx=*/onGpu && spec.mode == OptimizerMode::fixed,
                    /*flushSubnormals=*/false};
}

/// What the update needs from the step's scalars alone. A thread derives
/// them once for all the lanes it updates: the two accurate powers alone
/// cost about as many instructions as the element math of a lane.
struct StepConstants {
  Value bc1;         ///< 1 - beta1^t
  Value invBc2s;     ///< 1 / sqrt(1 - beta2^t)
  Value bc2s;        ///< sqrt(1 - beta2^t) (reference mode)
  Value negStepSize; ///< -lr / bc1
  Value negDecay;    ///< -lr wd
  Value oneMinusB1, oneMinusB2;
  /// The factor of every gradient (null: none).
  Value gradScale;
  /// The step's random key (stochastic rounding only).
  std::optional<StochasticRounder> rounder;
};

StepConstants emitStepConstants(ImplicitLocOpBuilder &b,
                                const AdamWKernelSpec &spec,
                                const AdamWArgs &args, bool onGpu) {
  // The bias corrections stay accurate (1 - b^t cancels, so an approximate
  // power would be amplified); both targets fold them into the step sizes:
  //   p' = p - lr wd p - (lr/bc1) m' / (sqrt(v') / bc2s + eps)
  // which is the specified update with its constants reassociated. (The
  // reference mode keeps the official order of operations.)
  F32Emitter f{b, /*approx=*/onGpu};
  F32Emitter acc = accurateEmitter(b, spec, onGpu);
  Value one = f.c(1.0);
  StepConstants k;
  k.bc1 = f.sub(one, f.pow(args.beta1, args.step));
  Value bc2 = f.sub(one, f.pow(args.beta2, args.step));
  if (spec.mode == OptimizerMode::reference)
    k.bc2s = acc.sqrt(bc2);
  else
    k.invBc2s = acc.div(one, acc.sqrt(bc2));
  k.negStepSize = f.sub(f.c(0.0), acc.div(args.lr, k.bc1));
  k.negDecay = f.sub(f.c(0.0), f.mul(args.lr, args.weightDecay));
  k.oneMinusB1 = f.sub(one, args.beta1);
  k.oneMinusB2 = f.sub(one, args.beta2);
  // A device scalar, so a captured step replays whatever the clipping
  // wrote; one load for every lane the thread updates.
  if (spec.gradScale)
    k.gradScale = memref::LoadOp::create(
        b, args.gradScale, ValueRange{arith::ConstantIndexOp::create(b, 0)});
  if (spec.stochastic())
    k.rounder.emplace(b, args.seed, args.step);
  return k;
}

/// Emits the body of one lane: load, dequantize, update, re-derive the group
/// metadata, quantize, store.
class AdamWLaneEmitter {
public:
  AdamWLaneEmitter(ImplicitLocOpBuilder &b, const AdamWKernelSpec &spec,
                   const GroupLane &lane, const AdamWArgs &args,
                   const StepConstants &step)
      : b(b), f(F32Emitter{b, /*approx=*/lane.onGpu}),
        acc(accurateEmitter(b, spec, lane.onGpu)), spec(spec), lane(lane),
        args(args), step(step) {}

  void emit();

private:
  Value idx(int64_t v) { return arith::ConstantIndexOp::create(b, v); }

  /// This lane's E elements of a buffer holding `logical` values, as f32.
  SmallVector<Value> loadLane(Value buffer, Type logical) {
    return access().loadF32(buffer, logical, laneAlignment(buffer));
  }
  void storeLane(Value buffer, ArrayRef<Value> values, Type logical) {
    access().storeF32(buffer, values, logical, laneAlignment(buffer));
  }
  LaneAccess access() {
    return LaneAccess{b, lane.firstElement, lane.elementsPerLane, fullLane,
                      args.n};
  }

  /// The per-group part of a moment's dequantization: its stored metadata
  /// and, for expanded moments, 1/k (and the log2 offset in fixed mode).
  struct DequantGroup {
    Value s, k, c, invK, offset;
  };
  DequantGroup dequantizeGroup(const MomentSpec &mom,
                               const MomentBuffers &bufs);
  /// Dequantizes the E codes of a moment with its group part.
  SmallVector<Value> dequantize(const MomentSpec &mom, const DequantGroup &g,
                                ArrayRef<Value> codes);
  /// Derives each group's metadata of m and of v from their new f32 values,
  /// stores it, and returns the values to hand to the FP8 conversions.
  std::pair<SmallVector<Value>, SmallVector<Value>>
  requantize(ArrayRef<Value> mValues, ArrayRef<Value> vValues);
  /// Unexpanded moments: s = M / fp8max, codes x fp8max / M.
  SmallVector<Value> requantizePlain(const MomentSpec &mom,
                                     const MomentBuffers &bufs,
                                     const struct MomentStatistics &stats,
                                     ArrayRef<Value> values);
  /// An expanded moment's new group metadata.
  struct ExpandedMetadata {
    Value s, k, c;       ///< stored
    Value invC, negLogS; ///< 1/c and -log2 s, for the elements
  };
  /// What the expansion takes from the FP8 format (f32 values).
  struct ExpansionBounds {
    Value log2Ub;     ///< log2 of UB = fp8max^2 / 2, the widest code ratio
    Value log2Fp8Max; ///< log2 fp8max
  };
  ExpansionBounds expansionBounds(const MomentSpec &mom);
  /// k, c and s of the group from M and mn.
  ExpandedMetadata expandedMetadata(const ExpansionBounds &bounds,
                                    const struct MomentStatistics &stats);
  /// The metadata of m and v, each derived on one lane of a pair and
  /// swapped (AdamWKernelSpec::splitMetadata); stores it.
  std::pair<ExpandedMetadata, ExpandedMetadata>
  splitExpandedMetadata(const struct MomentStatistics &mStats,
                        const struct MomentStatistics &vStats);
  void storeMetadata(const MomentBuffers &bufs, const ExpandedMetadata &meta,
                     Value storingLane = {});
  /// The values to convert.
  SmallVector<Value> requantizeExpanded(const MomentSpec &mom,
                                        const ExpandedMetadata &meta,
                                        const struct MomentStatistics &stats,
                                        ArrayRef<Value> values);
  /// mode = reference: the official kernel's statistics and formulas.
  SmallVector<Value> requantizeReference(const MomentSpec &mom,
                                         const MomentBuffers &bufs,
                                         ArrayRef<Value> values);
  /// The official kernel's partly zero-skipping group minimum of `w` (|x|,
  /// FLT_MAX for tail elements), in closed form (docs/optimizer-numerics.md
  /// §4).
  Value referenceMinimum(ArrayRef<Value> w);
  /// i1: element `i` of this lane lies below n.
  Value isValid(int64_t i);
  Value loadGroupScalar(Value buffer);
  /// A lane's chunk starts at a multiple of E elements of a 16-byte aligned
  /// buffer, so its accesses are aligned to E * sizeof(elt), capped at 16.
  llvm::MaybeAlign laneAlignment(Value buffer) const {
    Type elt = cast<MemRefType>(buffer.getType()).getElementType();
    int64_t bytes = lane.elementsPerLane * elt.getIntOrFloatBitWidth() / 8;
    return llvm::MaybeAlign(std::min<int64_t>(std::max<int64_t>(bytes, 1), 16));
  }
  /// Stores a group's value from the group's leader (or `storingLane`).
  void storeGroupScalar(Value buffer, Value v, Value storingLane = {});

  ImplicitLocOpBuilder &b;
  /// Per-element math: approximate (SFU, flush-to-zero) on the GPU.
  F32Emitter f;
  /// Per-group constants (accurateEmitter).
  F32Emitter acc;
  const AdamWKernelSpec &spec;
  const GroupLane &lane;
  const AdamWArgs &args;
  const StepConstants &step;
  Value nIndex, fullLane, groupClamped, groupInRange, isGroupLeader;
  /// (warp index, warp result) pairs of referenceMinimum's second stage.
  SmallVector<std::pair<Value, Value>> stage2;
};

Value AdamWLaneEmitter::loadGroupScalar(Value buffer) {
  return memref::LoadOp::create(b, buffer, ValueRange{groupClamped});
}

void AdamWLaneEmitter::storeGroupScalar(Value buffer, Value v,
                                        Value storingLane) {
  scf::IfOp::create(b, storingLane ? storingLane : isGroupLeader,
                    [&](OpBuilder &nb, Location loc) {
                      memref::StoreOp::create(nb, loc, v, buffer,
                                              ValueRange{lane.group});
                      scf::YieldOp::create(nb, loc);
                    });
}

void AdamWLaneEmitter::storeMetadata(const MomentBuffers &bufs,
                                     const ExpandedMetadata &meta,
                                     Value storingLane) {
  storeGroupScalar(bufs.scale, meta.s, storingLane);
  storeGroupScalar(bufs.k, meta.k, storingLane);
  storeGroupScalar(bufs.c, meta.c, storingLane);
}

AdamWLaneEmitter::DequantGroup
AdamWLaneEmitter::dequantizeGroup(const MomentSpec &mom,
                                  const MomentBuffers &bufs) {
  DequantGroup g;
  g.s = loadGroupScalar(bufs.scale);
  if (!mom.expanded)
    return g;
  g.k = loadGroupScalar(bufs.k);
  g.c = loadGroupScalar(bufs.c);
  if (spec.mode == OptimizerMode::reference) {
    g.invK = acc.div(acc.c(1.0), g.k);
    return g;
  }
  // x = sgn(y) |y|^(1/k) c with y = q s, in the log domain:
  // log2|x| = (log2|q| + log2 s)/k + log2 c; the per-group part is hoisted.
  g.invK = acc.div(f.c(1.0), g.k);
  g.offset = acc.fma(acc.log2(g.s), g.invK, acc.log2(g.c));
  return g;
}

SmallVector<Value> AdamWLaneEmitter::dequantize(const MomentSpec &mom,
                                                const DequantGroup &g,
                                                ArrayRef<Value> codes) {
  SmallVector<Value> out;
  if (!mom.expanded) {
    for (Value q : codes)
      out.push_back(f.mul(q, g.s));
    return out;
  }
  if (spec.mode == OptimizerMode::reference) {
    // As the official kernel: y = q s, x = sgn(y) powf(|y|, 1/k) c with
    // sgn = 1 - 2 signbit(y) (so -0 and -NaN give -1); v takes no sign.
    for (Value q : codes) {
      Value y = acc.mul(q, g.s);
      Value mag = acc.mul(acc.pow(acc.abs(y), g.invK), g.c);
      out.push_back(mom.isSigned ? acc.copysign(mag, y)
                                 : acc.mul(acc.pow(y, g.invK), g.c));
    }
    return out;
  }
  for (Value q : codes) {
    // The result may be subnormal (tiny moments): no flush on this exp2.
    Value mag = acc.exp2(f.fma(f.log2(f.abs(q)), g.invK, g.offset));
    out.push_back(mom.isSigned ? f.copysign(mag, q) : mag);
  }
  return out;
}

/// A moment's new values as its requantization sees them.
struct MomentStatistics {
  /// Per element: 0 for finite values, NaN otherwise.
  SmallVector<Value> poison;
  /// Per element: |x| + poison.
  SmallVector<Value> mags;
  /// Group maximum and zero-skipping minimum of the finite magnitudes.
  Value maxAbs, minAbs;
  /// i1: the group's finite values are all zero.
  Value allZero;
};

SmallVector<Value> AdamWLaneEmitter::requantizePlain(
    const MomentSpec &mom, const MomentBuffers &bufs,
    const MomentStatistics &stats, ArrayRef<Value> values) {
  const ::coat::Fp8Traits traits = ::coat::getFp8Traits(mom.format);
  Value s = acc.div(stats.maxAbs, f.c(traits.maxFinite));
  // fp8max / M overflows f32 for M < fp8max 2^-128: a group of tiny values
  // is scaled by kTinyGroupShift first, exactly (a power of two), and
  // divided by s so scaled. A scale that underflows to zero leaves the group
  // all-zero, as the library has it (0/0 would make NaN codes).
  Value tiny = f.lt(stats.maxAbs, f.c(kTinyGroupBound));
  Value zero = arith::OrIOp::create(b, stats.allZero, f.eq(s, f.c(0.0)));
  Value inv = f.select(
      zero, f.c(0.0),
      f.select(tiny, acc.div(f.c(1.0), f.mul(s, f.c(kTinyGroupShift))),
               acc.div(f.c(traits.maxFinite), stats.maxAbs)));
  Value pre = f.select(tiny, f.c(kTinyGroupShift), f.c(1.0));
  storeGroupScalar(bufs.scale, s);
  SmallVector<Value> out;
  for (auto [x, nanIfNonFinite] : llvm::zip(values, stats.poison))
    out.push_back(f.add(f.mul(f.mul(x, pre), inv), nanIfNonFinite));
  return out;
}

AdamWLaneEmitter::ExpansionBounds
AdamWLaneEmitter::expansionBounds(const MomentSpec &mom) {
  const ::coat::Fp8Traits traits = ::coat::getFp8Traits(mom.format);
  const double ub = 0.5 * double(traits.maxFinite) * traits.maxFinite;
  return {f.c(std::log2(ub)), f.c(std::log2(double(traits.maxFinite)))};
}

AdamWLaneEmitter::ExpandedMetadata
AdamWLaneEmitter::expandedMetadata(const ExpansionBounds &bounds,
                                   const MomentStatistics &stats) {
  const double inf = std::numeric_limits<double>::infinity();
  Value maxAbs = stats.maxAbs, minAbs = stats.minAbs;
  Value allZero = stats.allZero;
  // k = floor(log2(UB)/log2(M/mn) * expand_min)/expand_min, clamped; one
  // distinct magnitude (M == mn) needs no expansion. As specified, log2 of
  // the ratio (which may overflow to +inf, giving the smallest k).
  double emin = double(spec.expandMin);
  auto perExpandMin = [&](Value x) {
    // Dividing by a power of two is multiplying by its exact reciprocal.
    return llvm::isPowerOf2_64(spec.expandMin) ? f.mul(x, f.c(1.0 / emin))
                                               : acc.div(x, f.c(emin));
  };
  auto clampK = [&](Value kRaw, Value oneMagnitude) {
    Value k = perExpandMin(acc.floor(f.mul(kRaw, f.c(emin))));
    k = f.minnum(f.maxnum(k, f.c(1.0 / emin)), f.c(spec.maxK));
    return f.select(arith::OrIOp::create(b, allZero, oneMagnitude), f.c(1.0),
                    k);
  };
  // s = (M/c)^k / fp8max and the codes are (|x|/c)^k / s, both through the
  // centre c: |x|/c stays within sqrt(M/mn) of 1, where |x|/M could
  // underflow. An all-zero group keeps log2 s = 0 so its codes come out 0.
  // 1/c overflows f32 for c < 2^-128: below kTinyGroupBound the elements
  // get invC = 1/(c 2^shift) and the scale's exponent k shift more, so
  // |x| invC = |x|/c 2^-shift stays a normal f32 (|x|/c is within 2^49 of 1
  // in such a group) and the log2 of the element path needs no subnormals.
  Value k, c, invC, logS, shift;
  if (lane.onGpu) {
    // In the log domain from log2 M and log2 mn: the ratio, the centre and
    // the scale cost two lg2, one rcp and three ex2 per group instead of
    // three divisions, two square roots, two lg2 and an ex2. Where the
    // approximate logs are too coarse, exact tests decide as the division
    // M/mn would: M == mn needs no expansion; distinct magnitudes are at
    // least an ulp apart (the largest k); and a ratio that rounds to +inf in
    // f32 (M/mn >= 2^128 (1 - 2^-25), so mn < 1) gives the smallest k. The
    // test M 2^-64 - mn 2^64 >= -mn 2^39 is exact near its boundary: the
    // terms are power-of-two scalings, and their difference is exact when
    // they are within a factor of two (Sterbenz).
    Value logMax = acc.log2(maxAbs), logMin = acc.log2(minAbs);
    Value logRatio = f.maxnum(acc.sub(logMax, logMin), f.c(0x1p-24));
    Value margin = acc.sub(acc.mul(maxAbs, f.c(0x1p-64)),
                           acc.mul(minAbs, f.c(0x1p64)));
    Value overflows = arith::AndIOp::create(
        b, f.lt(minAbs, f.c(1.0)),
        f.le(f.sub(f.c(0.0), acc.mul(minAbs, f.c(0x1p39))), margin));
    logRatio = f.select(overflows, f.c(inf), logRatio);
    k = clampK(acc.div(bounds.log2Ub, logRatio), f.eq(maxAbs, minAbs));
    Value logC = f.select(allZero, f.c(0.0),
                          f.mul(f.add(logMax, logMin), f.c(0.5)));
    c = acc.exp2(logC);
    shift = f.select(f.lt(logC, f.c(std::log2(kTinyGroupBound))),
                     f.c(std::log2(kTinyGroupShift)), f.c(0.0));
    invC = acc.exp2(f.sub(f.c(0.0), f.add(logC, shift)));
    logS = f.sub(f.mul(k, f.mul(f.sub(logMax, logMin), f.c(0.5))),
                 bounds.log2Fp8Max);
  } else {
    Value logRatio = acc.log2(acc.div(maxAbs, minAbs));
    k = clampK(acc.div(bounds.log2Ub, logRatio), f.le(logRatio, f.c(0.0)));
    c = acc.mul(acc.sqrt(maxAbs), acc.sqrt(minAbs));
    c = f.select(allZero, f.c(1.0), c);
    Value tiny = f.lt(c, f.c(kTinyGroupBound));
    shift = f.select(tiny, f.c(std::log2(kTinyGroupShift)), f.c(0.0));
    invC = acc.div(f.c(1.0), f.mul(c, f.select(tiny, f.c(kTinyGroupShift),
                                               f.c(1.0))));
    logS = acc.sub(acc.mul(k, f.add(acc.log2(acc.mul(maxAbs, invC)), shift)),
                   bounds.log2Fp8Max);
  }
  logS = f.select(allZero, f.c(0.0), logS);
  Value s = f.select(allZero, f.c(0.0), acc.exp2(logS));
  // The elements take log2(|x| invC) = log2(|x|/c) - shift: k shift more.
  return {s, k, c, invC, f.add(f.sub(f.c(0.0), logS), f.mul(k, shift))};
}

SmallVector<Value> AdamWLaneEmitter::requantizeExpanded(
    const MomentSpec &mom, const ExpandedMetadata &meta,
    const MomentStatistics &stats, ArrayRef<Value> values) {
  SmallVector<Value> out;
  for (auto [x, a] : llvm::zip(values, stats.mags)) {
    Value mag =
        f.exp2(f.fma(meta.k, f.log2(f.mul(a, meta.invC)), meta.negLogS));
    // On the FMA units where asked: its range stops at 2^-126, which is
    // far below the smallest FP8 code this value is rounded to.
    if (mom.name == spec.m.name ? spec.softExp2M : spec.softExp2V)
      mag.getDefiningOp()->setAttr(kSoftExp2Attr, b.getUnitAttr());
    out.push_back(mom.isSigned ? f.copysign(mag, x) : mag);
  }
  return out;
}

std::pair<AdamWLaneEmitter::ExpandedMetadata,
          AdamWLaneEmitter::ExpandedMetadata>
AdamWLaneEmitter::splitExpandedMetadata(const MomentStatistics &mStats,
                                        const MomentStatistics &vStats) {
  // Every lane holds both moments' statistics after the butterflies, but
  // the metadata math (about fifty instructions a moment, three of them
  // SFU chains) is per group: even lanes derive m's, odd lanes v's, from the
  // same operands as an unsplit lane would, and a shuffle hands each lane
  // its partner's. Lane 0 stores m's metadata and lane 1 v's.
  Value laneIndex =
      arith::IndexCastOp::create(b, b.getI32Type(), lane.laneInGroup);
  Value one = arith::ConstantIntOp::create(b, b.getI32Type(), 1);
  Value parity = arith::AndIOp::create(b, laneIndex, one);
  Value isV = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, parity, one);
  auto pick = [&](Value forV, Value forM) {
    return forV == forM ? forV : f.select(isV, forV, forM);
  };
  MomentStatistics own;
  own.maxAbs = pick(vStats.maxAbs, mStats.maxAbs);
  own.minAbs = pick(vStats.minAbs, mStats.minAbs);
  own.allZero = arith::SelectOp::create(b, isV, vStats.allZero, mStats.allZero);
  // Equal formats give equal constants, which need no selection.
  ExpansionBounds mBounds = expansionBounds(spec.m);
  ExpansionBounds vBounds = spec.m.format == spec.v.format
                                ? mBounds
                                : expansionBounds(spec.v);
  ExpandedMetadata mine = expandedMetadata(
      {pick(vBounds.log2Ub, mBounds.log2Ub),
       pick(vBounds.log2Fp8Max, mBounds.log2Fp8Max)},
      own);
  storeMetadata(args.m, mine, isGroupLeader);
  storeMetadata(args.v, mine,
                arith::AndIOp::create(
                    b, groupInRange,
                    arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                          lane.laneInGroup, idx(1))));
  auto partners = [&](Value v) {
    Value theirs = gpu::ShuffleOp::create(b, v, /*offset=*/1, /*width=*/32,
                                          gpu::ShuffleMode::XOR)
                       .getShuffleResult();
    return std::pair{f.select(isV, theirs, v), f.select(isV, v, theirs)};
  };
  ExpandedMetadata mMeta, vMeta;
  std::tie(mMeta.k, vMeta.k) = partners(mine.k);
  std::tie(mMeta.invC, vMeta.invC) = partners(mine.invC);
  std::tie(mMeta.negLogS, vMeta.negLogS) = partners(mine.negLogS);
  return {mMeta, vMeta};
}

std::pair<SmallVector<Value>, SmallVector<Value>>
AdamWLaneEmitter::requantize(ArrayRef<Value> mValues,
                             ArrayRef<Value> vValues) {
  if (spec.mode == OptimizerMode::reference)
    return {requantizeReference(spec.m, args.m, mValues),
            requantizeReference(spec.v, args.v, vValues)};
  // `x - x` is 0 for finite x and NaN for +-inf and NaN (no nnan/ninf flags,
  // so it is not folded). Adding it poisons exactly the non-finite elements:
  // max.f32 skips NaN, so they leave the maximum, and the NaN reaches the FP8
  // conversion as the NaN code.
  auto statistics = [&](const MomentSpec &mom, ArrayRef<Value> values) {
    MomentStatistics st;
    Type i32 = b.getI32Type();
    auto i32c = [&](int64_t v) {
      return arith::ConstantIntOp::create(b, i32, v);
    };
    // The zero-skipping minimum on bit patterns: magnitudes order as their
    // bits, and bits - 1 wraps +0 to the largest unsigned value, so an
    // unsigned minimum of bits - 1 skips zeros in one instruction less than
    // a test and a select. Tail elements load as zeros. NaN patterns lie
    // above the start value (that of +inf, less one), so they are skipped
    // too, and a group without a finite non-zero magnitude gets +inf.
    const int64_t infBits = 0x7f800000;
    Value localMax = f.c(0.0), localMinBits = i32c(infBits - 1);
    for (Value x : values) {
      Value nanIfNonFinite = f.sub(x, x);
      Value a = f.add(f.abs(x), nanIfNonFinite);
      st.poison.push_back(nanIfNonFinite);
      st.mags.push_back(a);
      localMax = f.maxnum(localMax, a);
      Value bits = arith::BitcastOp::create(b, i32, a);
      localMinBits = arith::MinUIOp::create(
          b, localMinBits, arith::SubIOp::create(b, bits, i32c(1)));
    }
    st.maxAbs = lane.allReduce(b, localMax, GroupReduceKind::MaxNum);
    st.allZero = f.eq(st.maxAbs, f.c(0.0));
    if (!mom.expanded)
      return st; // the minimum is for the expansion only
    Value minBits =
        lane.allReduce(b, localMinBits, GroupReduceKind::MinUnsigned);
    st.minAbs = arith::BitcastOp::create(
        b, b.getF32Type(), arith::AddIOp::create(b, minBits, i32c(1)));
    return st;
  };
  MomentStatistics mStats = statistics(spec.m, mValues);
  MomentStatistics vStats = statistics(spec.v, vValues);
  // As in dequantization, both moments' group math comes first.
  ExpandedMetadata mMeta, vMeta;
  if (spec.splitMetadata) {
    std::tie(mMeta, vMeta) = splitExpandedMetadata(mStats, vStats);
  } else {
    auto metadata = [&](const MomentSpec &mom, const MomentStatistics &st) {
      return mom.expanded ? expandedMetadata(expansionBounds(mom), st)
                          : ExpandedMetadata{};
    };
    mMeta = metadata(spec.m, mStats);
    vMeta = metadata(spec.v, vStats);
  }
  auto finish = [&](const MomentSpec &mom, const MomentBuffers &bufs,
                    const ExpandedMetadata &meta, const MomentStatistics &st,
                    ArrayRef<Value> values) {
    if (!mom.expanded)
      return requantizePlain(mom, bufs, st, values);
    if (!spec.splitMetadata) // (the split stores its own)
      storeMetadata(bufs, meta);
    return requantizeExpanded(mom, meta, st, values);
  };
  return {finish(spec.m, args.m, mMeta, mStats, mValues),
          finish(spec.v, args.v, vMeta, vStats, vValues)};
}

Value AdamWLaneEmitter::isValid(int64_t i) {
  Value at = arith::AddIOp::create(b, lane.firstElement, idx(i));
  return arith::CmpIOp::create(b, arith::CmpIPredicate::ult, at, nIndex);
}

Value AdamWLaneEmitter::referenceMinimum(ArrayRef<Value> w) {
  // The official kernel reduces a group as G/32 warps with a shfl_down tree
  // (offsets 16..1) in which a lane folds in an incoming partial only if it
  // is non-zero and never tests its own start value, then reduces the warp
  // results the same way in warp 0 (lanes >= G/32 hold 1e9). Position j of a
  // warp reaches lane 0 through the lanes j & (2^b - 1), b = 0..5; a zero
  // start value anywhere on that chain drops it, and a zero at position 0
  // makes the result 0. So: result = w_0 == 0 ? 0 : min of w_j over the
  // positions whose chain holds no zero.
  auto i32c = [&](int64_t v) {
    return arith::ConstantIntOp::create(b, b.getI32Type(), v);
  };
  auto bit = [&](Value mask, Value pos) {
    Value shifted = arith::ShRUIOp::create(b, mask, pos);
    Value one = arith::AndIOp::create(b, shifted, i32c(1));
    return arith::CmpIOp::create(b, arith::CmpIPredicate::ne, one, i32c(0));
  };
  /// i1: every position on the chain of `pos` (an i32 in [0, 32)) is set.
  auto chainClear = [&](Value mask, Value pos) {
    Value ok = bit(mask, pos);
    for (int64_t bits = 0; bits < 5; ++bits) {
      Value low = arith::AndIOp::create(b, pos, i32c((int64_t(1) << bits) - 1));
      ok = arith::AndIOp::create(b, ok, bit(mask, low));
    }
    return ok;
  };
  const double inf = std::numeric_limits<double>::infinity();
  int64_t e = lane.elementsPerLane;
  int64_t numWarps = spec.groupSize / 32;
  // Position of this lane's first element inside its warp and which warp.
  Value laneOffset = arith::MulIOp::create(b, lane.laneInGroup, idx(e));
  Value warpOfLane = arith::DivUIOp::create(b, laneOffset, idx(32));
  Value posOfLane = arith::IndexCastOp::create(
      b, b.getI32Type(), arith::RemUIOp::create(b, laneOffset, idx(32)));
  Value warpOfLaneI32 =
      arith::IndexCastOp::create(b, b.getI32Type(), warpOfLane);

  // A lane holds elements of one warp (E <= 32) or whole warps (E = G, CPU).
  int64_t segments = std::max<int64_t>(1, e / 32);
  int64_t perSegment = std::min<int64_t>(e, 32);
  int64_t lanesPerWarp = std::max<int64_t>(1, 32 / e);
  Value warpMask2 = i32c(0);
  for (int64_t seg = 0; seg < segments; ++seg) {
    ArrayRef<Value> ws = w.slice(seg * perSegment, perSegment);
    Value base = seg == 0 && segments == 1 ? posOfLane : i32c(0);
    // Stage 1: the warp's non-zero mask, then the chain test per element.
    Value mask = i32c(0);
    for (auto [i, wi] : llvm::enumerate(ws)) {
      Value nz = arith::ExtUIOp::create(
          b, b.getI32Type(), acc.gt(acc.abs(wi), acc.c(0.0)));
      Value pos = arith::AddIOp::create(b, base, i32c(i));
      mask = arith::OrIOp::create(b, mask,
                                  arith::ShLIOp::create(b, nz, pos));
    }
    mask = lane.allReduce(b, mask, GroupReduceKind::BitOr, lanesPerWarp);
    Value localMin = f.c(inf);
    for (auto [i, wi] : llvm::enumerate(ws)) {
      Value pos = arith::AddIOp::create(b, base, i32c(i));
      localMin = acc.minnum(localMin,
                            acc.select(chainClear(mask, pos), wi, acc.c(inf)));
    }
    Value warpResult =
        lane.allReduce(b, localMin, GroupReduceKind::MinNum, lanesPerWarp);
    warpResult = acc.select(bit(mask, i32c(0)), warpResult, acc.c(0.0));
    // Stage 2 inputs: this warp's slot in warp 0.
    Value warpIndex = arith::AddIOp::create(b, warpOfLaneI32, i32c(seg));
    Value nz = arith::ExtUIOp::create(b, b.getI32Type(),
                                      acc.gt(warpResult, acc.c(0.0)));
    warpMask2 = arith::OrIOp::create(
        b, warpMask2, arith::ShLIOp::create(b, nz, warpIndex));
    // Remember per-warp results for the chain test of stage 2.
    stage2.push_back({warpIndex, warpResult});
  }
  // Stage 2: lanes >= G/32 hold 1e9 (non-zero, on every chain from 0).
  if (numWarps < 32)
    warpMask2 = arith::OrIOp::create(
        b, warpMask2, i32c(~((int64_t(1) << numWarps) - 1) & 0xffffffff));
  warpMask2 = lane.allReduce(b, warpMask2, GroupReduceKind::BitOr);
  Value candidate = f.c(inf);
  for (auto [warpIndex, warpResult] : stage2)
    candidate = acc.minnum(candidate,
                           acc.select(chainClear(warpMask2, warpIndex),
                                      warpResult, acc.c(inf)));
  stage2.clear();
  candidate = lane.allReduce(b, candidate, GroupReduceKind::MinNum);
  if (numWarps < 32)
    candidate = acc.minnum(candidate, acc.c(1e9));
  return acc.select(bit(warpMask2, i32c(0)), candidate, acc.c(0.0));
}

SmallVector<Value> AdamWLaneEmitter::requantizeReference(
    const MomentSpec &mom, const MomentBuffers &bufs,
    ArrayRef<Value> values) {
  const ::coat::Fp8Traits traits = ::coat::getFp8Traits(mom.format);
  const double fltMax = std::numeric_limits<float>::max();
  SmallVector<Value> maxStart, minStart;
  for (auto [i, x] : llvm::enumerate(values)) {
    Value a = acc.abs(x);
    Value valid = isValid(i);
    maxStart.push_back(acc.select(valid, a, acc.c(0.0)));
    minStart.push_back(acc.select(valid, a, acc.c(fltMax)));
  }
  Value localMax = acc.c(0.0);
  for (Value a : maxStart)
    localMax = acc.maxnum(localMax, a);
  Value absMax = lane.allReduce(b, localMax, GroupReduceKind::MaxNum);
  SmallVector<Value> out;
  if (!mom.expanded) {
    Value s = acc.div(acc.add(absMax, acc.c(::coat::kOptimizerScaleEps)),
                      acc.c(traits.maxFinite));
    storeGroupScalar(bufs.scale, s);
    for (Value x : values)
      out.push_back(acc.div(x, s));
    return out;
  }
  Value top = acc.add(absMax, acc.c(::coat::kExpansionEps));
  Value bottom =
      acc.add(referenceMinimum(minStart), acc.c(::coat::kExpansionEps));
  Value c = acc.mul(acc.sqrt(top), acc.sqrt(bottom));
  const double ub = 0.5 * double(traits.maxFinite) * traits.maxFinite;
  double emin = double(spec.expandMin);
  Value kRaw = acc.div(acc.log2(acc.c(ub)), acc.log2(acc.div(top, bottom)));
  Value k = acc.div(acc.floor(acc.mul(kRaw, acc.c(emin))), acc.c(emin));
  Value s = acc.div(acc.pow(acc.div(top, c), k), acc.c(traits.maxFinite));
  storeGroupScalar(bufs.scale, s);
  storeGroupScalar(bufs.k, k);
  storeGroupScalar(bufs.c, c);
  for (Value x : values) {
    Value e = mom.isSigned
                  ? acc.copysign(acc.pow(acc.div(acc.abs(x), c), k), x)
                  : acc.pow(acc.div(x, c), k);
    out.push_back(acc.div(e, s));
  }
  return out;
}

void AdamWLaneEmitter::emit() {
  int64_t e = lane.elementsPerLane;
  nIndex = arith::IndexCastOp::create(b, b.getIndexType(), args.n);
  Value laneEnd = arith::AddIOp::create(b, lane.firstElement, idx(e));
  fullLane = arith::CmpIOp::create(b, arith::CmpIPredicate::ule, laneEnd,
                                   nIndex);
  Value groups = arith::CeilDivUIOp::create(b, nIndex, idx(spec.groupSize));
  Value lastGroup = arith::SubIOp::create(b, groups, idx(1));
  groupClamped = arith::MinUIOp::create(b, lane.group, lastGroup);
  groupInRange = arith::CmpIOp::create(b, arith::CmpIPredicate::ult,
                                       lane.group, groups);
  Value leaderLane = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                           lane.laneInGroup, idx(0));
  isGroupLeader = arith::AndIOp::create(b, groupInRange, leaderLane);

  // With a master copy the update is the f32 one, on the master; the bf16
  // parameter is only written.
  SmallVector<Value> p = spec.master
                             ? loadLane(args.master, b.getF32Type())
                             : loadLane(args.param, spec.paramType);
  SmallVector<Value> g = loadLane(args.grad, spec.gradType);
  // In f32, not rounded back to the gradient's type. Tail elements become
  // 0 * scale, which a NaN scale makes NaN; they are never stored, and the
  // statistics skip them (fixed mode: as non-finite; reference mode: as
  // invalid).
  if (step.gradScale)
    for (Value &gi : g)
      gi = f.mul(gi, step.gradScale);
  MLIRContext *ctx = b.getContext();
  Type mFp8 = getFp8Type(ctx, spec.m.format);
  Type vFp8 = getFp8Type(ctx, spec.v.format);
  SmallVector<Value> mCodes = loadLane(args.m.codes, mFp8);
  SmallVector<Value> vCodes = loadLane(args.v.codes, vFp8);
  // Both moments' group parts before the element math of either: their
  // loads and SFU chains then overlap (in the order m, then v, the expanded
  // step took 11% longer on the H200).
  DequantGroup mGroup = dequantizeGroup(spec.m, args.m);
  DequantGroup vGroup = dequantizeGroup(spec.v, args.v);
  SmallVector<Value> m = dequantize(spec.m, mGroup, mCodes);
  SmallVector<Value> v = dequantize(spec.v, vGroup, vCodes);

  // Tail elements load as zeros (p, g, codes), so m' = v' = 0 there and they
  // drop out of the statistics by themselves.
  SmallVector<Value> newP, newM, newV;
  bool reference = spec.mode == OptimizerMode::reference;
  for (int64_t i = 0; i < e; ++i) {
    if (reference) {
      // The official kernel's order of operations (COAT §2.4).
      Value mi = acc.add(acc.mul(args.beta1, m[i]),
                         acc.mul(step.oneMinusB1, g[i]));
      Value vi = acc.add(acc.mul(args.beta2, v[i]),
                         acc.mul(acc.mul(step.oneMinusB2, g[i]), g[i]));
      Value denom = acc.mul(
          acc.add(acc.div(acc.sqrt(vi), step.bc2s), args.eps), step.bc1);
      Value update = acc.add(acc.div(mi, denom),
                             acc.mul(args.weightDecay, p[i]));
      newP.push_back(acc.sub(p[i], acc.mul(args.lr, update)));
      newM.push_back(mi);
      newV.push_back(vi);
      continue;
    }
    Value mi = f.fma(args.beta1, m[i], f.mul(step.oneMinusB1, g[i]));
    Value vi = f.fma(args.beta2, v[i],
                     f.mul(f.mul(step.oneMinusB2, g[i]), g[i]));
    Value denom = f.fma(f.sqrt(vi), step.invBc2s, args.eps);
    // p - lr wd p - step m'/denom as two fused multiply-adds.
    Value pDecayed = f.fma(step.negDecay, p[i], p[i]);
    newP.push_back(f.fma(step.negStepSize, f.div(mi, denom), pDecayed));
    newM.push_back(mi);
    newV.push_back(vi);
  }
  // Stochastic rounding replaces each value by the neighbour in the stored
  // type it draws; the stores' round-to-nearest then keeps it.
  std::optional<StochasticRounder> rounder = step.rounder;
  auto roundStochastically = [&](SmallVector<Value> &values,
                                 ::coat::RandomStream stream,
                                 std::optional<::coat::Fp8Format> format) {
    SmallVector<Value> bits = rounder->bits(lane.firstElement, e, stream);
    for (auto [x, r] : llvm::zip(values, bits))
      x = format ? rounder->toFp8(f, x, *format, r) : rounder->toBf16(f, x, r);
  };
  if (spec.stochasticParam)
    roundStochastically(newP, ::coat::RandomStream::Param, std::nullopt);
  if (spec.master)
    storeLane(args.master, newP, b.getF32Type());
  storeLane(args.param, newP, spec.paramType);
  auto [mOut, vOut] = requantize(newM, newV);
  if (spec.stochasticMoments) {
    roundStochastically(mOut, ::coat::RandomStream::M, spec.m.format);
    roundStochastically(vOut, ::coat::RandomStream::V, spec.v.format);
  }
  storeLane(args.m.codes, mOut, mFp8);
  storeLane(args.v.codes, vOut, vFp8);
}

} // namespace

void OptimizerLowering::emitGpu(ImplicitLocOpBuilder &b,
                                const AdamWKernelSpec &spec, unsigned,
                                gpu::GPUFuncOp kernel,
                                const KernelArgs &args) const {
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  requestMinCtasUnlessSpilling(kernel, spec.minCtas);
  AdamWArgs a = adamwArgs(args);
  StepConstants step = emitStepConstants(b, spec, a, /*onGpu=*/true);
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  // A tile is what one pass of the block covers: a lane per thread. Blocks
  // stride over the tiles by the grid size, so the blocks resident at a time
  // stream through neighbouring memory (the launch rule sizes the grid for U
  // passes; any grid is correct). The bounds are uniform over the block, so
  // every lane of a group takes each pass.
  int64_t groupsPerTile = spec.blockSize / spec.lanesPerGroup;
  Value n = arith::IndexCastOp::create(b, b.getIndexType(), a.n);
  Value tiles = arith::CeilDivUIOp::create(
      b, n, cidx(groupsPerTile * spec.groupSize));
  Value blocks = gpu::GridDimOp::create(b, gpu::Dimension::x);
  auto loop = scf::ForOp::create(b, bid, tiles, blocks);
  b.setInsertionPointToStart(loop.getBody());
  GroupLane lane;
  lane.onGpu = true;
  lane.elementsPerLane = spec.elementsPerLane;
  lane.lanesPerGroup = spec.lanesPerGroup;
  lane.groupSize = spec.groupSize;
  lane.laneInGroup = arith::RemUIOp::create(b, tid, cidx(spec.lanesPerGroup));
  Value groupInTile =
      arith::DivUIOp::create(b, tid, cidx(spec.lanesPerGroup));
  lane.group = arith::AddIOp::create(
      b, arith::MulIOp::create(b, loop.getInductionVar(),
                               cidx(groupsPerTile)),
      groupInTile);
  lane.firstElement = arith::AddIOp::create(
      b, arith::MulIOp::create(b, lane.group, cidx(spec.groupSize)),
      arith::MulIOp::create(b, lane.laneInGroup,
                            cidx(spec.elementsPerLane)));
  AdamWLaneEmitter(b, spec, lane, a, step).emit();
}

void OptimizerLowering::emitCpu(ImplicitLocOpBuilder &b,
                                const AdamWKernelSpec &spec, unsigned,
                                func::FuncOp, const KernelArgs &args) const {
  AdamWArgs a = adamwArgs(args);
  StepConstants step = emitStepConstants(b, spec, a, /*onGpu=*/false);
  Value nIndex = arith::IndexCastOp::create(b, b.getIndexType(), a.n);
  Value groups = arith::CeilDivUIOp::create(
      b, nIndex, arith::ConstantIndexOp::create(b, spec.groupSize));
  auto loop = scf::ForOp::create(b, arith::ConstantIndexOp::create(b, 0),
                                 groups, arith::ConstantIndexOp::create(b, 1));
  b.setInsertionPointToStart(loop.getBody());
  GroupLane lane;
  lane.elementsPerLane = spec.groupSize;
  lane.lanesPerGroup = 1;
  lane.groupSize = spec.groupSize;
  lane.group = loop.getInductionVar();
  lane.laneInGroup = arith::ConstantIndexOp::create(b, 0);
  lane.firstElement = arith::MulIOp::create(
      b, lane.group, arith::ConstantIndexOp::create(b, spec.groupSize));
  AdamWLaneEmitter(b, spec, lane, a, step).emit();
}
