//===- CrossEntropyEmitter.cpp - cross-entropy kernel and its CPU twin ----===//
//
// GPU: CTA `row` of `threads` threads. Thread j takes chunks j, j + threads,
// ... of the row (8 elements at 16-byte boundaries of the buffer, so a row
// that does not start at one has a partial first chunk; the missing lanes of
// a partial chunk load as -inf) and folds each into an online (max, sum);
// the pairs combine by a warp butterfly, then over the warps in order
// through workgroup memory. Pass 2 reads the thread's chunks again and
// stores the gradient. The CPU twin folds the same chunks per thread and
// combines the pairs in the same tree, with loops.
//
//===----------------------------------------------------------------------===//

#include "CrossEntropy.h"

#include "coat/Conversion/EmitHelpers.h"
#include "coat/Conversion/GroupKernel.h"
#include "coat/Conversion/Passes.h"
#include "coat/Numerics/SoftLog.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cfloat>
#include <cmath>

using namespace mlir;
using namespace mlir::coat;

namespace {

/// Elements of a chunk: one 16-byte load of bf16.
constexpr int64_t kChunk = 8;
constexpr double kLog2e = 1.44269504088896340736;
/// bf16 -inf: what the missing lanes of a partial chunk load as.
constexpr int64_t kBf16NegInf = 0xFF80;

/// A running maximum and the sum of e^(x - maximum).
struct Online {
  Value max, sum;
};

/// Where a row's chunks lie: chunk c starts at element base + 8c of the
/// buffer and holds row positions [8c - head, 8c - head + 8) clipped to
/// [0, V).
struct Row {
  Value index;    ///< the row
  Value start;    ///< its first element in the buffer
  Value base;     ///< start rounded down to a chunk boundary
  Value head;     ///< start - base
  Value chunks;   ///< chunks touching the row
  Value target;   ///< i64 target
  Value ignored;  ///< i1: target == ignore_index
  Value inRange;  ///< i1: 0 <= target < V
  Value targetAt; ///< head + target (index; meaningful where inRange)
};

class Emitter {
public:
  Emitter(ImplicitLocOpBuilder &b, const CrossEntropyPlan &plan,
          const KernelArgs &args, bool onGpu)
      : b(b), plan(plan), args(args), onGpu(onGpu), f{b} {}

  Value cidx(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value addI(Value x, Value y) { return arith::AddIOp::create(b, x, y); }
  Value subI(Value x, Value y) { return arith::SubIOp::create(b, x, y); }
  Value mulI(Value x, Value y) { return arith::MulIOp::create(b, x, y); }
  Value andI(Value x, Value y) { return arith::AndIOp::create(b, x, y); }
  Value cmpI(arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b, p, x, y);
  }
  Value scalar(StringRef name) {
    return arith::IndexCastOp::create(b, b.getIndexType(), args.lookup(name));
  }

  /// e^d as 2^(d log2 e) on the FMA units (coat-expand-soft-exp2).
  Value expOf(Value d) {
    Value y = f.exp2(f.mul(d, f.c(kLog2e)));
    y.getDefiningOp()->setAttr(kSoftExp2Attr, b.getUnitAttr());
    return y;
  }

  /// ln x, the sequence of coat/Numerics/SoftLog.h.
  Value softLog(Value x) {
    Type i32 = b.getI32Type();
    auto ci = [&](int64_t v) { return arith::ConstantIntOp::create(b, i32, v); };
    Value bits = arith::BitcastOp::create(b, i32, x);
    Value e = arith::SubIOp::create(
        b, arith::ShRUIOp::create(b, bits, ci(23)), ci(127));
    Value m = arith::BitcastOp::create(
        b, b.getF32Type(),
        arith::OrIOp::create(b, arith::AndIOp::create(b, bits, ci(0x007FFFFF)),
                             ci(0x3F800000)));
    Value halve = f.gt(m, f.c(::coat::kSoftLogSqrt2));
    m = f.select(halve, f.mul(m, f.c(0.5)), m);
    e = arith::SelectOp::create(b, halve, arith::AddIOp::create(b, e, ci(1)),
                                e);
    Value z = f.div(f.sub(m, f.c(1.0)), f.add(m, f.c(1.0)));
    Value z2 = f.mul(z, z);
    Value q = f.c(::coat::kSoftLogCoefficients[::coat::kSoftLogTerms - 1]);
    for (int k = ::coat::kSoftLogTerms - 2; k >= 0; --k)
      q = f.fma(q, z2, f.c(::coat::kSoftLogCoefficients[k]));
    Value t = f.add(z, z);
    Value lnm = f.fma(f.mul(t, z2), q, t);
    Value r = f.fma(arith::SIToFPOp::create(b, b.getF32Type(), e),
                    f.c(::coat::kSoftLogLn2), lnm);
    r = f.select(f.eq(x, f.c(0.0)), f.c(-INFINITY), r);
    r = f.select(f.eq(x, f.c(INFINITY)), x, r);
    Value nan = arith::CmpFOp::create(b, arith::CmpFPredicate::UNO, x, x);
    return f.select(nan, x, r);
  }

  /// The identity of the fold: max -FLT_MAX (a -inf logit then adds
  /// e^-inf = 0 rather than e^(-inf - -inf)), sum 0.
  Online empty() { return {f.c(-FLT_MAX), f.c(0.0)}; }

  /// Two pairs as one; the same bits in either order.
  Online combine(Online a, Online c) {
    Value m = f.maxnum(a.max, c.max);
    return {m, f.add(f.mul(a.sum, expOf(f.sub(a.max, m))),
                     f.mul(c.sum, expOf(f.sub(c.max, m))))};
  }

  Row row(Value r) {
    Row w;
    w.index = r;
    w.start = mulI(r, cidx(plan.vocab));
    w.head = arith::RemUIOp::create(b, w.start, cidx(kChunk));
    w.base = subI(w.start, w.head);
    w.chunks = arith::DivUIOp::create(
        b, addI(w.head, cidx(plan.vocab + kChunk - 1)), cidx(kChunk));
    w.target = memref::LoadOp::create(b, args.lookup("targets"), ValueRange{r});
    Type i64 = b.getI64Type();
    auto c64 = [&](int64_t v) { return arith::ConstantIntOp::create(b, i64, v); };
    w.ignored = cmpI(arith::CmpIPredicate::eq, w.target, c64(plan.ignoreIndex));
    w.inRange = andI(cmpI(arith::CmpIPredicate::sge, w.target, c64(0)),
                     cmpI(arith::CmpIPredicate::slt, w.target, c64(plan.vocab)));
    Value t = arith::IndexCastOp::create(
        b, b.getIndexType(),
        arith::SelectOp::create(b, w.inRange, w.target, c64(0)));
    w.targetAt = addI(w.head, t);
    return w;
  }

  /// The row's target logit (row position 0 where the target is out of
  /// range: it is read, never used).
  Value targetLogit(const Row &w) {
    return loadScalarF32(b, args.lookup("logits"), b.getBF16Type(),
                         addI(w.base, w.targetAt));
  }

  /// Lane i of chunk c holds a row element: 8c + i in [head, head + V).
  SmallVector<Value> laneValid(const Row &w, Value c) {
    Value first = mulI(c, cidx(kChunk));
    Value end = addI(w.head, cidx(plan.vocab));
    SmallVector<Value> valid;
    for (int64_t i = 0; i < kChunk; ++i) {
      Value at = addI(first, cidx(i));
      valid.push_back(andI(cmpI(arith::CmpIPredicate::uge, at, w.head),
                           cmpI(arith::CmpIPredicate::ult, at, end)));
    }
    return valid;
  }
  /// Whether chunk c lies inside the row.
  Value whole(const Row &w, Value c) {
    Value first = mulI(c, cidx(kChunk));
    return andI(cmpI(arith::CmpIPredicate::uge, first, w.head),
                cmpI(arith::CmpIPredicate::ule, addI(first, cidx(kChunk)),
                     addI(w.head, cidx(plan.vocab))));
  }

  llvm::Align alignment() const { return llvm::Align(onGpu ? 16 : 2); }
  VectorType chunkType(Type t) { return VectorType::get({kChunk}, t); }

  /// Chunk c of the row's logits as f32 (missing lanes -inf).
  SmallVector<Value> loadChunk(const Row &w, Value c,
                               ArrayRef<Value> valid) {
    Value buffer = args.lookup("logits");
    Value at = addI(w.base, mulI(c, cidx(kChunk)));
    VectorType bits = chunkType(b.getI16Type());
    Value v = emitIf(
        b, whole(w, c), bits,
        [&] {
          return SmallVector<Value>{vector::LoadOp::create(
              b, bits, buffer, ValueRange{at}, /*nontemporal=*/false,
              alignment())};
        },
        [&] {
          Value mask = vector::FromElementsOp::create(
              b, chunkType(b.getI1Type()), valid);
          Value pass = arith::ConstantOp::create(
              b, DenseElementsAttr::get(
                     bits, b.getIntegerAttr(b.getI16Type(), kBf16NegInf)));
          return SmallVector<Value>{vector::MaskedLoadOp::create(
              b, bits, buffer, ValueRange{at}, mask, pass)};
        })[0];
    v = arith::BitcastOp::create(b, chunkType(b.getBF16Type()), v);
    v = arith::ExtFOp::create(b, chunkType(b.getF32Type()), v);
    SmallVector<Value> xs;
    for (int64_t i = 0; i < kChunk; ++i)
      xs.push_back(vector::ExtractOp::create(b, v, ArrayRef<int64_t>{i}));
    return xs;
  }

  /// Stores the f32 gradient of chunk c, rounded to bf16.
  void storeChunk(const Row &w, Value c, ArrayRef<Value> valid,
                  ArrayRef<Value> g) {
    Value buffer = args.lookup(plan.gradArg());
    Value at = addI(w.base, mulI(c, cidx(kChunk)));
    Value v = vector::FromElementsOp::create(b, chunkType(b.getF32Type()), g);
    v = arith::TruncFOp::create(b, chunkType(b.getBF16Type()), v);
    v = arith::BitcastOp::create(b, chunkType(b.getI16Type()), v);
    emitIfElse(
        b, whole(w, c),
        [&] {
          vector::StoreOp::create(b, v, buffer, ValueRange{at},
                                  /*nontemporal=*/false, alignment());
        },
        [&] {
          Value mask = vector::FromElementsOp::create(
              b, chunkType(b.getI1Type()), valid);
          vector::MaskedStoreOp::create(b, buffer, ValueRange{at}, mask, v);
        });
  }

  /// Folds chunk c into `s`: the new maximum, the sum rescaled to it, then
  /// each element's term in order.
  Online fold(const Row &w, Value c, Online s) {
    SmallVector<Value> xs = loadChunk(w, c, laneValid(w, c));
    Value chunkMax = xs[0];
    for (int64_t i = 1; i < kChunk; ++i)
      chunkMax = f.maxnum(chunkMax, xs[i]);
    Value m = f.maxnum(s.max, chunkMax);
    Value sum = f.mul(s.sum, expOf(f.sub(s.max, m)));
    for (Value x : xs)
      sum = f.add(sum, expOf(f.sub(x, m)));
    return {m, sum};
  }

  /// Folds chunks first, first + step, ... of the row.
  Online foldChunks(const Row &w, Value first, Value step) {
    Online e = empty();
    SmallVector<Value> out = emitFor(
        b, first, w.chunks, step, {e.max, e.sum},
        [&](Value c, ValueRange acc) -> SmallVector<Value> {
          Online s = fold(w, c, {acc[0], acc[1]});
          return {s.max, s.sum};
        });
    return {out[0], out[1]};
  }

  /// Writes the row's loss (and its flag).
  void storeLoss(const Row &w, Online all, Value xt) {
    Value loss = f.add(f.sub(all.max, xt), softLog(all.sum));
    loss = f.select(w.inRange, loss, f.c(NAN));
    loss = f.select(w.ignored, f.c(0.0), loss);
    memref::StoreOp::create(b, loss, args.lookup("loss"),
                            ValueRange{w.index});
    if (plan.flagLoss)
      raiseFiniteFlag(b, storesNonFinite(f, {loss}, b.getF32Type()),
                      args.lookup(finiteFlagArgName("loss")));
  }

  /// 1/sum, or NaN where the target is out of range (the row is ignored
  /// elsewhere).
  Value gradScale(const Row &w, Online all) {
    return f.select(w.inRange, f.div(f.c(1.0), all.sum), f.c(NAN));
  }

  /// Pass 2 on chunk c: softmax - onehot, zeros for an ignored row.
  void gradChunk(const Row &w, Value c, Online all, Value scale) {
    SmallVector<Value> valid = laneValid(w, c);
    SmallVector<Value> xs = loadChunk(w, c, valid);
    Value first = mulI(c, cidx(kChunk));
    SmallVector<Value> g;
    for (auto [i, x] : llvm::enumerate(xs)) {
      Value p = f.mul(expOf(f.sub(x, all.max)), scale);
      Value hit = andI(w.inRange, cmpI(arith::CmpIPredicate::eq,
                                       addI(first, cidx(i)), w.targetAt));
      p = f.select(hit, f.sub(p, f.c(1.0)), p);
      g.push_back(f.select(w.ignored, f.c(0.0), p));
    }
    storeChunk(w, c, valid, g);
    if (plan.flagGrad)
      raiseFiniteFlag(b, storesNonFinite(f, g, b.getBF16Type(), valid),
                      args.lookup(finiteFlagArgName(plan.gradArg())));
  }

  ImplicitLocOpBuilder &b;
  const CrossEntropyPlan &plan;
  const KernelArgs &args;
  bool onGpu;
  F32Emitter f;
};

} // namespace

void CrossEntropyLowering::emitGpu(ImplicitLocOpBuilder &b,
                                   const CrossEntropyPlan &plan, unsigned,
                                   gpu::GPUFuncOp kernel,
                                   const KernelArgs &args) const {
  Emitter e(b, plan, args, /*onGpu=*/true);
  const int64_t T = plan.threads, W = T / 32;
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Row w = e.row(gpu::BlockIdOp::create(b, gpu::Dimension::x));
  // Read before any thread may write the gradient over it (barrier below).
  Value xt = e.targetLogit(w);
  Online s = e.foldChunks(w, tid, e.cidx(T));
  for (int64_t offset = 16; offset >= 1; offset /= 2) {
    auto other = [&](Value v) {
      return gpu::ShuffleOp::create(b, v, static_cast<int32_t>(offset),
                                    /*width=*/32, gpu::ShuffleMode::XOR)
          .getShuffleResult();
    };
    s = e.combine(s, {other(s.max), other(s.sum)});
  }
  if (W > 1) {
    // Each warp's pair to workgroup memory, then every thread combines
    // them in warp order.
    Value smem = kernel.getWorkgroupAttributions()[0];
    Value lane = arith::RemUIOp::create(b, tid, e.cidx(32));
    Value warp = arith::DivUIOp::create(b, tid, e.cidx(32));
    emitIfThen(b, e.cmpI(arith::CmpIPredicate::eq, lane, e.cidx(0)), [&] {
      memref::StoreOp::create(b, s.max, smem, ValueRange{warp});
      memref::StoreOp::create(b, s.sum, smem,
                              ValueRange{e.addI(warp, e.cidx(W))});
    });
    gpu::BarrierOp::create(b);
    auto pair = [&](int64_t i) -> Online {
      return {memref::LoadOp::create(b, smem, ValueRange{e.cidx(i)}),
              memref::LoadOp::create(b, smem, ValueRange{e.cidx(W + i)})};
    };
    s = pair(0);
    for (int64_t i = 1; i < W; ++i)
      s = e.combine(s, pair(i));
  } else {
    gpu::BarrierOp::create(b);
  }
  emitIfThen(b, e.cmpI(arith::CmpIPredicate::eq, tid, e.cidx(0)),
             [&] { e.storeLoss(w, s, xt); });
  Value scale = e.gradScale(w, s);
  emitFor(b, tid, w.chunks, e.cidx(T), {},
          [&](Value c, ValueRange) -> SmallVector<Value> {
            e.gradChunk(w, c, s, scale);
            return {};
          });
}

void CrossEntropyLowering::emitCpu(ImplicitLocOpBuilder &b,
                                   const CrossEntropyPlan &plan, unsigned,
                                   func::FuncOp,
                                   const KernelArgs &args) const {
  Emitter e(b, plan, args, /*onGpu=*/false);
  const int64_t T = plan.threads, W = T / 32;
  auto teamType = MemRefType::get({T}, b.getF32Type());
  Value maxes = memref::AllocaOp::create(b, teamType);
  Value sums = memref::AllocaOp::create(b, teamType);
  auto at = [&](int64_t i, Value base) {
    return base ? e.addI(base, e.cidx(i)) : e.cidx(i);
  };
  auto loadPair = [&](Value i) -> Online {
    return {memref::LoadOp::create(b, maxes, ValueRange{i}),
            memref::LoadOp::create(b, sums, ValueRange{i})};
  };
  auto storePair = [&](Value i, Online s) {
    memref::StoreOp::create(b, s.max, maxes, ValueRange{i});
    memref::StoreOp::create(b, s.sum, sums, ValueRange{i});
  };
  emitFor(b, e.cidx(0), e.scalar("rows"), e.cidx(1), {},
          [&](Value r, ValueRange) -> SmallVector<Value> {
    Row w = e.row(r);
    Value xt = e.targetLogit(w);
    // Each thread's fold, as the GPU's threads take the chunks.
    emitFor(b, e.cidx(0), e.cidx(T), e.cidx(1), {},
            [&](Value j, ValueRange) -> SmallVector<Value> {
              storePair(j, e.foldChunks(w, j, e.cidx(T)));
              return {};
            });
    // The butterfly of each warp (lanes i and i + offset hold the same
    // pair afterwards, so the lower half carries on).
    emitFor(b, e.cidx(0), e.cidx(T), e.cidx(32), {},
            [&](Value lane0, ValueRange) -> SmallVector<Value> {
              for (int64_t offset = 16; offset >= 1; offset /= 2)
                emitFor(b, e.cidx(0), e.cidx(offset), e.cidx(1), {},
                        [&](Value i, ValueRange) -> SmallVector<Value> {
                          Value a = e.addI(lane0, i);
                          storePair(a, e.combine(loadPair(a),
                                                 loadPair(at(offset, a))));
                          return {};
                        });
              return {};
            });
    Online s = loadPair(e.cidx(0));
    for (int64_t i = 1; i < W; ++i)
      s = e.combine(s, loadPair(e.cidx(32 * i)));
    e.storeLoss(w, s, xt);
    Value scale = e.gradScale(w, s);
    emitFor(b, e.cidx(0), w.chunks, e.cidx(1), {},
            [&](Value c, ValueRange) -> SmallVector<Value> {
              e.gradChunk(w, c, s, scale);
              return {};
            });
    return {};
  });
}
