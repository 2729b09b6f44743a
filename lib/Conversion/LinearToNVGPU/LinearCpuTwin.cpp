//===- LinearCpuTwin.cpp - coat.linear as a loop nest for the CPU ---------===//
//
// The CPU twin of a GEMM kernel: the same ABI (the tensormap parameters are
// plain memrefs of FP8 codes, K-major as the GPU reads them) and the same
// arithmetic in f32, written as loops. It exists so that the IR a model
// compiles to runs whole on the CPU (CI, and CPU tensors in Python). Its one
// concession to speed: both operands are decoded to f32 once per call (the
// FP8 decode is a dozen integer operations on the CPU) instead of once per
// product. The GPU's tensor cores add FP8 products in their own order and
// with their own internal precision, so the twin agrees with the kernel to
// f32 rounding of the sum, not bit for bit.
//
//===----------------------------------------------------------------------===//

#include "Gemm.h"

#include "coat/Conversion/GroupKernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::coat;

namespace {

/// The twin's arguments, by the names of the GPU kernel's parameters (an
/// absent one, such as `bias` without a bias, is null).
struct TwinArgs {
  Value a, b, out, outScale, aScale, bScale, bias, m, n, k, kBlocks;
  Value cos, sin; ///< a fused rope's tables
  Value addend;   ///< summed into the result
  Value finiteFlag;

  explicit TwinArgs(const KernelArgs &args)
      : a(args.lookup("a")), b(args.lookup("b")), out(args.lookup("out")),
        outScale(args.lookup("out_scale")), aScale(args.lookup("a_scale")),
        bScale(args.lookup("b_scale")), bias(args.lookup("bias")),
        m(args.lookup("m")), n(args.lookup("n")), k(args.lookup("k")),
        kBlocks(args.lookup("k_blocks")), cos(args.lookup("cos")),
        sin(args.lookup("sin")), addend(args.lookup("addend")),
        finiteFlag(args.lookup(finiteFlagArgName("out"))) {}
};

class GemmTwinBuilder {
public:
  GemmTwinBuilder(ImplicitLocOpBuilder &b, const KernelArgs &args,
                  const GemmProblem &p)
      : b(b), p(p), args(args), f{b} {}

  void build() {
    M = index(args.m);
    N = index(args.n);
    K = index(args.k);
    if (p.blockScaled) {
      KB = index(args.kBlocks);
    } else {
      scale = f.mul(load(args.aScale, p.lhsScale, c(0)),
                    load(args.bScale, p.rhsScale, c(0)));
    }
    aValues = decoded(args.a, getFp8Type(b.getContext(), p.lhs), mul(M, K));
    bValues = decoded(args.b, getFp8Type(b.getContext(), p.rhs), mul(N, K));
    Type fp8Out = getFp8Type(b.getContext(), p.outFormat);
    Value groups = arith::CeilDivUIOp::create(b, N, c(kOutputGroup));
    forLoop(c(0), M, [&](Value row) {
      forLoop(c(0), groups, [&](Value group) {
        // One 1x16 group of output columns at a time, so the FP8 epilogue
        // sees its whole group; columns past N are computed on the last
        // column and count as zero.
        Value lastCol = arith::SubIOp::create(b, N, c(1));
        SmallVector<Value> cols, inside, clamped, vals;
        for (int64_t e = 0; e < kOutputGroup; ++e) {
          Value col = add(mul(group, c(kOutputGroup)), c(e));
          cols.push_back(col);
          inside.push_back(
              arith::CmpIOp::create(b, arith::CmpIPredicate::ult, col, N));
          clamped.push_back(arith::MinUIOp::create(b, col, lastCol));
        }
        for (auto [in, v] : llvm::zip_equal(inside, elements(row, clamped)))
          vals.push_back(f.select(in, v, f.c(0.0)));
        if (p.out == OutputKind::Fp8Groups)
          return storeGroup(row, group, cols, inside, vals, fp8Out);
        Type elem = p.out == OutputKind::F32 ? Type(b.getF32Type())
                                             : Type(b.getBF16Type());
        if (p.rope) {
          // The partners' values: the other half of each column's head,
          // a group of its own (head_dim / 2 is a multiple of 16).
          SmallVector<Value> partners;
          for (Value col : clamped)
            partners.push_back(partnerColumn(col));
          for (auto [v, col, xp] :
               llvm::zip_equal(vals, clamped, elements(row, partners)))
            v = rotated(row, col, v, xp, elem);
        }
        for (int64_t e = 0; e < kOutputGroup; ++e)
          ifThen(inside[e], [&] {
            store(args.out, elem, vals[e],
                           add(mul(row, N), cols[e]));
          });
        if (p.finiteFlag)
          raiseFiniteFlag(b, storesNonFinite(f, vals, elem, inside),
                          args.finiteFlag);
      });
    });
    memref::DeallocOp::create(b, aValues);
    memref::DeallocOp::create(b, bValues);
  }

private:
  ImplicitLocOpBuilder &b;
  const GemmProblem &p;
  TwinArgs args;
  F32Emitter f;
  Value M, N, K, KB, scale;
  Value aValues, bValues; ///< the operands' codes decoded to f32

  Value c(int64_t v) { return arith::ConstantIndexOp::create(b, v); }
  Value index(Value i64) {
    return arith::IndexCastOp::create(b, b.getIndexType(), i64);
  }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, x, y); }
  Value mul(Value x, Value y) { return arith::MulIOp::create(b, x, y); }

  void forLoop(Value lo, Value hi, function_ref<void(Value)> body) {
    auto loop = scf::ForOp::create(b, lo, hi, c(1));
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    body(loop.getInductionVar());
  }
  /// buffer[idx] as f32, the buffer holding `logical` values as themselves
  /// or as same-width integers (the kernel's parameter types).
  Value load(Value buffer, Type logical, Value idx) {
    Value v = memref::LoadOp::create(b, buffer, ValueRange{idx});
    if (v.getType() != logical)
      v = arith::BitcastOp::create(b, logical, v);
    return logical.isF32() ? v : arith::ExtFOp::create(b, b.getF32Type(), v);
  }
  /// Rounds the f32 `v` to `logical` and stores it at buffer[idx].
  void store(Value buffer, Type logical, Value v, Value idx) {
    if (!logical.isF32())
      v = arith::TruncFOp::create(b, logical, v);
    Type elem = cast<MemRefType>(buffer.getType()).getElementType();
    if (elem != logical)
      v = arith::BitcastOp::create(b, elem, v);
    memref::StoreOp::create(b, v, buffer, ValueRange{idx});
  }
  void ifThen(Value cond, function_ref<void()> body) {
    auto op = scf::IfOp::create(b, cond, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(op.thenBlock());
    body();
  }

  /// A heap buffer of the first `count` codes of `codes` (FP8 of type
  /// `fp8`) as f32, freed at the end of the twin.
  Value decoded(Value codes, Type fp8, Value count) {
    Value values = memref::AllocOp::create(
        b, MemRefType::get({ShapedType::kDynamic}, b.getF32Type()),
        ValueRange{count});
    forLoop(c(0), count, [&](Value i) {
      memref::StoreOp::create(b, load(codes, fp8, i), values, ValueRange{i});
    });
    return values;
  }

  /// f32 sums carried over [lo, hi), one per value of `init`.
  SmallVector<Value>
  sumsLoop(Value lo, Value hi, ArrayRef<Value> init,
           function_ref<SmallVector<Value>(Value, ValueRange)> step) {
    auto loop = scf::ForOp::create(b, lo, hi, c(1), init);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(loop.getBody());
      scf::YieldOp::create(
          b, step(loop.getInductionVar(), loop.getRegionIterArgs()));
    }
    return SmallVector<Value>(loop.getResults());
  }

  /// For each column of `cols`, the sum over k in [lo, hi) of
  /// A[row, k] * B[col, k] in k order: one loop, whose independent sums
  /// share A's loads (each column's bits are those of its own loop).
  SmallVector<Value> dots(Value row, ArrayRef<Value> cols, Value lo,
                          Value hi) {
    Value aRow = mul(row, K);
    SmallVector<Value> bRows;
    for (Value col : cols)
      bRows.push_back(mul(col, K));
    SmallVector<Value> zeros(cols.size(), f.c(0.0));
    return sumsLoop(lo, hi, zeros, [&](Value kk, ValueRange accs) {
      Value x = memref::LoadOp::create(b, aValues, ValueRange{add(aRow, kk)});
      SmallVector<Value> next;
      for (auto [bRow, acc] : llvm::zip_equal(bRows, accs)) {
        Value y = memref::LoadOp::create(b, bValues, ValueRange{add(bRow, kk)});
        next.push_back(f.fma(x, y, acc));
      }
      return next;
    });
  }

  /// The scaled results C[row, col] (+ bias) (+ addend) in f32 of each
  /// column of `cols`, as the GPU epilogue forms them: per-tensor
  /// `acc * (s_A * s_B)`; block-scaled, each 128-wide K slice's partial
  /// added with one FMA by `s_A[row, kb] * s_B[col/128, kb]`.
  SmallVector<Value> elements(Value row, ArrayRef<Value> cols) {
    SmallVector<Value> vs;
    if (p.blockScaled) {
      SmallVector<Value> colBlocks;
      for (Value col : cols)
        colBlocks.push_back(arith::DivUIOp::create(b, col, c(kScaleBlock)));
      SmallVector<Value> zeros(cols.size(), f.c(0.0));
      vs = sumsLoop(c(0), KB, zeros, [&](Value kb, ValueRange accs) {
        Value lo = mul(kb, c(kScaleBlock));
        Value hi = arith::MinUIOp::create(b, add(lo, c(kScaleBlock)), K);
        Value sA = load(args.aScale, b.getF32Type(), add(mul(row, KB), kb));
        SmallVector<Value> next;
        for (auto [partial, colBlock, acc] :
             llvm::zip_equal(dots(row, cols, lo, hi), colBlocks, accs)) {
          Value s = f.mul(sA, load(args.bScale, b.getF32Type(),
                                   add(mul(colBlock, KB), kb)));
          next.push_back(f.fma(partial, s, acc));
        }
        return next;
      });
    } else {
      for (Value d : dots(row, cols, c(0), K))
        vs.push_back(f.mul(d, scale));
    }
    for (auto [v, col] : llvm::zip_equal(vs, cols)) {
      if (p.biasElem)
        v = f.add(v, load(args.bias, p.biasElem, col));
      if (p.addendElem)
        v = f.add(v, load(args.addend, p.addendElem, add(mul(row, N), col)));
    }
    return vs;
  }

  /// The column holding the other half of `col`'s rotary pair: d/2 on in
  /// the head's first half, d/2 back in its second.
  Value partnerColumn(Value col) {
    int64_t d = p.rope->headDim;
    Value firstHalf = arith::CmpIOp::create(
        b, arith::CmpIPredicate::ult, arith::RemUIOp::create(b, col, c(d)),
        c(d / 2));
    return arith::SelectOp::create(b, firstHalf, add(col, c(d / 2)),
                                   arith::SubIOp::create(b, col, c(d / 2)));
  }

  /// The fused rope's value of C[row, col] from `x` and its partner's `xp`
  /// (the other half of the head; both as elements() forms them), each
  /// rounded to the result type `elem` as the unfused GEMM stores them,
  /// rotated as coat.rope computes it where the head is among the rotated
  /// ones.
  Value rotated(Value row, Value col, Value x, Value xp, Type elem) {
    const FusedRope &r = *p.rope;
    int64_t d = r.headDim;
    Value inHead = arith::RemUIOp::create(b, col, c(d));
    Value firstHalf =
        arith::CmpIOp::create(b, arith::CmpIPredicate::ult, inHead, c(d / 2));
    x = f.roundTo(x, elem);
    xp = f.roundTo(xp, elem);
    Value idx = add(mul(row, c(d)), inHead);
    Value p1 = f.mul(x, load(args.cos, r.tableElem, idx));
    Value p2 = f.mul(xp, load(args.sin, r.tableElem, idx));
    Value y = f.select(firstHalf, f.sub(p1, p2), f.add(p1, p2));
    Value rotates = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, col,
                                          c(r.rotatedHeads * d));
    return f.select(rotates, y, x);
  }

  /// COAT's quantized GEMM output (COAT.md §4.1): s = (max|acc| + 1e-10) /
  /// fp8max (IEEE), codes = cvt(acc / s), scale stored as bf16(s).
  void storeGroup(Value row, Value group, ArrayRef<Value> cols,
                  ArrayRef<Value> inside, ArrayRef<Value> vals, Type fp8) {
    Value amax = f.abs(vals[0]);
    for (Value v : vals.drop_front())
      amax = f.maxnum(amax, f.abs(v));
    float fp8Max = ::coat::getFp8Traits(p.outFormat).maxFinite;
    Value s = f.div(f.add(amax, f.c(::coat::kActivationScaleEps)), f.c(fp8Max));
    for (size_t e = 0; e < vals.size(); ++e)
      ifThen(inside[e], [&] {
        store(args.out, fp8, f.div(vals[e], s),
                       add(mul(row, N), cols[e]));
      });
    Value groups = arith::CeilDivUIOp::create(b, N, c(kOutputGroup));
    store(args.outScale, b.getBF16Type(), s,
                   add(mul(row, groups), group));
  }
};

} // namespace

void mlir::coat::emitGemmCpuTwin(ImplicitLocOpBuilder &b,
                                 const KernelArgs &args,
                                 const GemmProblem &p) {
  GemmTwinBuilder(b, args, p).build();
}
