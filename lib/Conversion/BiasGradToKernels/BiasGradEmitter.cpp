//===- BiasGradEmitter.cpp - bias-gradient kernels and their CPU twins ----===//
//
// The partial-sum kernel: thread (partial p, lane l) holds the f32 sums of
// columns [V*l, V*l + V) over rows p, p + partials, ... (V = one 16-byte
// load), with `rows-in-flight` rows' loads issued before their sums; where
// the spec also asks for 1xG maxima, the G/V lanes of a group combine each
// row's maximum with shuffles. `<name>_reduce`: 32 columns per CTA, warp w
// adds partials w, w + 8, ..., then warp 0 adds the eight runs in order. The
// CPU twins add in the same order (coat/Numerics/ColumnSums.h).
//
//===----------------------------------------------------------------------===//

#include "BiasGrad.h"

#include "coat/Conversion/EmitHelpers.h"
#include "coat/Conversion/GroupKernel.h"
#include "coat/Numerics/ColumnSums.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::coat;

namespace {

/// Index arithmetic and the vector accesses both targets share.
struct Emitter {
  ImplicitLocOpBuilder &b;
  const BiasGradPlan &plan;
  const KernelArgs &args;
  bool onGpu;

  /// A vector access's alignment: 16 bytes at most on the GPU (buffers are
  /// 16-byte aligned, docs/manifest.md); the CPU twins take any buffer.
  llvm::Align alignment(int64_t bytes, Type elem) {
    return llvm::Align(onGpu ? std::min<int64_t>(bytes, 16)
                             : elem.getIntOrFloatBitWidth() / 8);
  }

  Value cidx(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, x, y); }
  Value mul(Value x, Value y) { return arith::MulIOp::create(b, x, y); }
  Value ult(Value x, Value y) {
    return arith::CmpIOp::create(b, arith::CmpIPredicate::ult, x, y);
  }
  Value andI(Value x, Value y) { return arith::AndIOp::create(b, x, y); }
  Value scalar(StringRef name) {
    return arith::IndexCastOp::create(b, b.getIndexType(), args.lookup(name));
  }

  /// buffer[at, at + n) of `logical` values, widened to f32: one vector
  /// load (16-byte aligned: `at` is a multiple of n and the launch checks
  /// that cols is).
  SmallVector<Value> load(Value buffer, Type logical, Value at, int64_t n) {
    Type storage = cast<MemRefType>(buffer.getType()).getElementType();
    int64_t bytes = n * logical.getIntOrFloatBitWidth() / 8;
    Value v = vector::LoadOp::create(b, VectorType::get({n}, storage), buffer,
                                     ValueRange{at}, /*nontemporal=*/false,
                                     alignment(bytes, logical));
    if (storage != logical)
      v = arith::BitcastOp::create(b, VectorType::get({n}, logical), v);
    if (!logical.isF32())
      v = arith::ExtFOp::create(b, VectorType::get({n}, b.getF32Type()), v);
    SmallVector<Value> out;
    for (int64_t i = 0; i < n; ++i)
      out.push_back(vector::ExtractOp::create(b, v, ArrayRef<int64_t>{i}));
    return out;
  }

  /// The f32 `sums` to dbias_partial[at, at + n).
  void storePartial(Value at, ArrayRef<Value> sums) {
    auto n = static_cast<int64_t>(sums.size());
    Value v = vector::FromElementsOp::create(
        b, VectorType::get({n}, b.getF32Type()), sums);
    vector::StoreOp::create(b, v, args.lookup("dbias_partial"), ValueRange{at},
                            /*nontemporal=*/false,
                            alignment(4 * n, b.getF32Type()));
  }

  /// Adds `xs` to `sums` element-wise, or nothing where `valid` is false.
  SmallVector<Value> accumulate(F32Emitter &f, ValueRange sums,
                                ArrayRef<Value> xs, Value valid) {
    SmallVector<Value> out;
    for (auto [s, x] : llvm::zip(sums, xs))
      out.push_back(f.add(s, valid ? f.select(valid, x, f.c(0.0)) : x));
    return out;
  }

  /// Stores the maximum `m` of row `row`'s group `group` to absmax.
  void storeMaximum(Value row, Value group, Value m) {
    Value groups = arith::DivUIOp::create(b, scalar("cols"),
                                          cidx(plan.groupSize));
    storeScalarF32(b, b.getLoc(), args.lookup("absmax"), b.getF32Type(), m,
                   add(mul(row, groups), group));
  }

  /// run w of column `column`: partials w, w + kColumnSumStrides, ... added
  /// to +0 in order (`inRange` false: +0 without reading).
  Value run(Value column, Value w, Value inRange) {
    Value cols = scalar("cols"), partials = scalar("partials");
    Value ws = args.lookup("dbias_partial");
    Value zero = arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f));
    return emitFor(b, w, partials, cidx(::coat::kColumnSumStrides), zero,
                   [&](Value p, ValueRange acc) -> SmallVector<Value> {
                     Value v = emitIf(
                         b, inRange, b.getF32Type(),
                         [&] {
                           return SmallVector<Value>{memref::LoadOp::create(
                               b, ws, ValueRange{add(mul(p, cols), column)})};
                         },
                         [&] { return SmallVector<Value>{zero}; })[0];
                     return {arith::AddFOp::create(b, acc[0], v)};
                   })[0];
  }

  void storeDbias(Value column, Value total) {
    storeScalarF32(b, b.getLoc(), args.lookup("dbias"), plan.dbiasType, total,
                   column);
    if (plan.flagDbias) {
      F32Emitter f{b};
      raiseFiniteFlag(b, storesNonFinite(f, {total}, plan.dbiasType),
                      args.lookup(finiteFlagArgName("dbias")));
    }
  }
};

} // namespace

void BiasGradLowering::emitGpu(ImplicitLocOpBuilder &b,
                               const BiasGradPlan &plan, unsigned index,
                               gpu::GPUFuncOp kernel,
                               const KernelArgs &args) const {
  Emitter e{b, plan, args, /*onGpu=*/true};
  F32Emitter f{b};
  Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  if (index == 1) {
    // `<name>_reduce`: warp w takes run w of the CTA's 32 columns; its sums
    // go through workgroup memory to warp 0, which adds them in run order.
    Value smem = kernel.getWorkgroupAttributions()[0];
    Value lane = arith::RemUIOp::create(b, tid, e.cidx(32));
    Value warp = arith::DivUIOp::create(b, tid, e.cidx(32));
    Value column = e.add(
        e.mul(gpu::BlockIdOp::create(b, gpu::Dimension::x),
              e.cidx(kBiasGradReduceColumns)),
        lane);
    Value inRange = e.ult(column, e.scalar("cols"));
    Value sum = e.run(column, warp, inRange);
    memref::StoreOp::create(b, sum, smem,
                            ValueRange{e.add(e.mul(warp, e.cidx(32)), lane)});
    gpu::BarrierOp::create(b);
    Value warp0 = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, warp,
                                        e.cidx(0));
    emitIfThen(b, e.andI(warp0, inRange), [&] {
      Value total;
      for (int64_t w = 0; w < ::coat::kColumnSumStrides; ++w) {
        Value s = memref::LoadOp::create(
            b, smem, ValueRange{e.add(e.cidx(32 * w), lane)});
        total = total ? f.add(total, s) : s;
      }
      e.storeDbias(column, total);
    });
    return;
  }

  const int64_t V = plan.laneElements;
  Value partial = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  Value lane = e.add(e.mul(gpu::BlockIdOp::create(b, gpu::Dimension::y),
                           e.cidx(blockSize)),
                     tid);
  Value rows = e.scalar("rows"), cols = e.scalar("cols");
  Value partials = e.scalar("partials");
  Value lanes = arith::DivUIOp::create(b, cols, e.cidx(V));
  Value laneValid = e.ult(lane, lanes);
  // Every thread of a warp runs the loop (the maxima's shuffles need the
  // whole warp): lanes past the row load its last vector and store nothing.
  emitIfThen(b, e.ult(e.cidx(0), lanes), [&] {
    Value lastLane = arith::SubIOp::create(b, lanes, e.cidx(1));
    Value col0 = e.mul(arith::MinUIOp::create(b, lane, lastLane), e.cidx(V));
    Value lastRow = arith::SubIOp::create(b, rows, e.cidx(1));
    GroupLane group;
    group.elementsPerLane = V;
    group.lanesPerGroup = plan.lanesPerGroup();
    group.groupSize = plan.groupSize;
    group.onGpu = true;
    Value groupIdx = arith::DivUIOp::create(b, lane, e.cidx(plan.lanesPerGroup()));
    Value leader = arith::CmpIOp::create(
        b, arith::CmpIPredicate::eq,
        arith::RemUIOp::create(b, lane, e.cidx(plan.lanesPerGroup())),
        e.cidx(0));
    SmallVector<Value> zeros(V, f.c(0.0));
    Value step = e.mul(partials, e.cidx(rowsInFlight));
    SmallVector<Value> sums = emitFor(
        b, partial, rows, step, zeros,
        [&](Value r0, ValueRange acc) -> SmallVector<Value> {
          // rows r0, r0 + partials, ...: all loads first, then the sums in
          // row order. Rows past the end load the last row and add nothing.
          SmallVector<Value> row, valid;
          SmallVector<SmallVector<Value>> xs;
          for (int64_t j = 0; j < rowsInFlight; ++j) {
            Value r = e.add(r0, e.mul(partials, e.cidx(j)));
            row.push_back(r);
            valid.push_back(j == 0 ? Value() : e.ult(r, rows));
            Value at = e.add(
                e.mul(j == 0 ? r : arith::MinUIOp::create(b, r, lastRow), cols),
                col0);
            xs.push_back(e.load(args.lookup("dy"), plan.gradType, at, V));
          }
          SmallVector<Value> next(acc);
          for (int64_t j = 0; j < rowsInFlight; ++j) {
            if (plan.maxima) {
              Value m = groupMaxAbs(f, group, xs[j]);
              Value store = e.andI(laneValid, leader);
              if (valid[j])
                store = e.andI(store, valid[j]);
              emitIfThen(b, store, [&] { e.storeMaximum(row[j], groupIdx, m); });
            }
            next = e.accumulate(f, next, xs[j], valid[j]);
          }
          return next;
        });
    emitIfThen(b, laneValid, [&] {
      e.storePartial(e.add(e.mul(partial, cols), col0), sums);
    });
  });
}

void BiasGradLowering::emitCpu(ImplicitLocOpBuilder &b,
                               const BiasGradPlan &plan, unsigned index,
                               func::FuncOp, const KernelArgs &args) const {
  Emitter e{b, plan, args, /*onGpu=*/false};
  F32Emitter f{b};
  Value cols = e.scalar("cols"), partials = e.scalar("partials");
  if (index == 1) {
    emitFor(b, e.cidx(0), cols, e.cidx(1), {},
            [&](Value c, ValueRange) -> SmallVector<Value> {
              Value yes = arith::ConstantOp::create(b, b.getBoolAttr(true));
              Value total;
              for (int64_t w = 0; w < ::coat::kColumnSumStrides; ++w) {
                Value s = e.run(c, e.cidx(w), yes);
                total = total ? f.add(total, s) : s;
              }
              e.storeDbias(c, total);
              return {};
            });
    return;
  }
  // A whole group (G columns) per iteration; each column sees the rows of a
  // partial in the GPU's order.
  const int64_t G = plan.groupSize;
  Value rows = e.scalar("rows");
  Value groups = arith::DivUIOp::create(b, cols, e.cidx(G));
  GroupLane whole;
  whole.elementsPerLane = G;
  whole.groupSize = G;
  emitFor(b, e.cidx(0), partials, e.cidx(1), {},
          [&](Value p, ValueRange) -> SmallVector<Value> {
    emitFor(b, e.cidx(0), groups, e.cidx(1), {},
            [&](Value g, ValueRange) -> SmallVector<Value> {
      Value col0 = e.mul(g, e.cidx(G));
      SmallVector<Value> zeros(G, f.c(0.0));
      SmallVector<Value> sums = emitFor(
          b, p, rows, partials, zeros,
          [&](Value r, ValueRange acc) -> SmallVector<Value> {
            SmallVector<Value> x = e.load(args.lookup("dy"), plan.gradType,
                                          e.add(e.mul(r, cols), col0), G);
            if (plan.maxima)
              e.storeMaximum(r, g, groupMaxAbs(f, whole, x));
            return e.accumulate(f, acc, x, Value());
          });
      e.storePartial(e.add(e.mul(p, cols), col0), sums);
      return {};
    });
    return {};
  });
}
