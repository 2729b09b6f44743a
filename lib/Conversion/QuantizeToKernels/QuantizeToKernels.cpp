//===- QuantizeToKernels.cpp - activation quantization to GPU/CPU kernels -===//
//
// Lowers kernel-spec functions holding one activation op (coat.quantize,
// coat.dequantize, coat.absmax; coat.quantize + coat.transpose) on a 2-D
// [rows, cols] tensor into a GPU kernel and a CPU twin with the same ABI.
// Grouped kernels are flat: a per_group<G> group (G divides cols) is G
// consecutive elements of the row-major tensor, so the lanes of GroupLane
// cover rows*cols elements with one masked tail. Tile kernels (quantize +
// transpose, and per_block<BxB> quantize) take one T x T tile per CTA
// iteration and move the transposed copy through workgroup memory.
//
//===----------------------------------------------------------------------===//

#include "coat/Conversion/GroupKernel.h"
#include "coat/Conversion/KernelRecord.h"
#include "coat/Conversion/KernelSpec.h"
#include "coat/Conversion/Passes.h"
#include "coat/Dialect/CoatDialect.h"
#include "coat/Numerics/Fp8.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATLOWERACTIVATIONS
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

enum class ActKind { QuantizeGroup, QuantizeScaled, QuantizeBlock,
                     QuantizeTranspose, Dequantize, AbsMax };

/// Everything the element math needs, fixed per kernel.
struct ActSpec {
  ActKind kind;
  Type hpType;              ///< the bf16/f16/f32 side (input or output)
  ::coat::Fp8Format format = ::coat::Fp8Format::E4M3;
  bool perTensor = false;   ///< one scale (given, or of a per_tensor input)
  int64_t groupSize = 0;    ///< G of grouped kinds
  int64_t blockEdge = 0;    ///< B of per_block<BxB> kinds
  Type scaleType;           ///< f32 or bf16
  float eps = ::coat::kActivationScaleEps;

  bool grouped() const { return groupSize > 0; }
  bool blocked() const { return blockEdge > 0; }
  /// Kinds that run as T x T tiles (emitTileGpu).
  bool tiled() const {
    return kind == ActKind::QuantizeTranspose || kind == ActKind::QuantizeBlock;
  }
  StringRef opName() const {
    switch (kind) {
    case ActKind::QuantizeGroup:
    case ActKind::QuantizeScaled:
    case ActKind::QuantizeBlock:
      return "quantize";
    case ActKind::QuantizeTranspose:
      return "quantize_transpose";
    case ActKind::Dequantize:
      return "dequantize";
    case ActKind::AbsMax:
      return "absmax";
    }
    return "";
  }
  float fp8Max() const { return ::coat::getFp8Traits(format).maxFinite; }
};

SmallVector<AbiArg> buildAbi(MLIRContext *ctx, const ActSpec &spec) {
  auto buf = [&](Type logical) {
    return MemRefType::get({ShapedType::kDynamic}, laneStorageType(logical));
  };
  Type fp8 = getFp8Type(ctx, spec.format);
  Type f32 = Float32Type::get(ctx);
  std::string scaleExtent = spec.perTensor ? "1" : "groups";
  if (spec.blocked()) {
    std::string b = std::to_string(spec.blockEdge);
    scaleExtent = "rows/" + b + "*cols/" + b;
  }
  AbiArg hp{"", buf(spec.hpType), manifestDtype(spec.hpType), "n"};
  AbiArg codes{"codes", buf(fp8), manifestDtype(fp8), "n"};
  AbiArg scale{"scale", buf(spec.scaleType), manifestDtype(spec.scaleType),
               scaleExtent};
  SmallVector<AbiArg> abi;
  switch (spec.kind) {
  case ActKind::QuantizeGroup:
    hp.name = "input";
    abi = {hp, codes, scale};
    break;
  case ActKind::QuantizeScaled:
    hp.name = "input";
    abi = {hp, scale, codes};
    break;
  case ActKind::QuantizeBlock:
    hp.name = "input";
    abi = {hp, codes, scale};
    break;
  case ActKind::QuantizeTranspose: {
    hp.name = "input";
    AbiArg codesT = codes;
    codesT.name = "codes_t";
    if (!spec.blocked()) {
      abi = {hp, scale, codes, codesT};
      break;
    }
    // The transposed copy's block scales: the same matrix, transposed.
    AbiArg scaleT = scale;
    scaleT.name = "scale_t";
    std::string b = std::to_string(spec.blockEdge);
    scaleT.extent = "cols/" + b + "*rows/" + b;
    abi = {hp, codes, scale, codesT, scaleT};
    break;
  }
  case ActKind::Dequantize:
    hp.name = "output";
    abi = {codes, scale, hp};
    break;
  case ActKind::AbsMax:
    hp.name = "input";
    abi = {hp, {"absmax", buf(f32), "f32", "groups"}};
    break;
  }
  Type i64 = IntegerType::get(ctx, 64);
  abi.push_back({"rows", i64, "i64", ""});
  abi.push_back({"cols", i64, "i64", ""});
  return abi;
}

/// Records what each ABI argument is in terms of the spec `fn` (whose op
/// analyze() accepted): the input, the result's parts, the shape scalars.
void bindToSpec(func::FuncOp fn, SmallVectorImpl<AbiArg> &abi) {
  SpecRefs s(fn);
  auto ops = fn.getBody().front().without_terminator();
  Operation *op = &*ops.begin();
  llvm::StringMap<std::vector<std::string>> binds;
  Value matrix; // the 2-D tensor whose shape gives rows and cols
  if (auto q = dyn_cast<QuantizeOp>(op)) {
    matrix = q.getInput();
    binds["input"] = {s.ref(q.getInput())};
    binds["codes"] = {s.ref(q.getResult(), "codes")};
    binds["scale"] = {s.ref(q.getResult(), "scale")};
    if (Value given = q.getScale())
      binds["scale"].insert(binds["scale"].begin(), s.ref(given));
    if (std::next(ops.begin()) != ops.end()) {
      auto t = cast<TransposeOp>(*std::next(ops.begin()));
      binds["codes_t"] = {s.ref(t.getResult(), "codes")};
      if (q.getScale())
        binds["scale"].push_back(s.ref(t.getResult(), "scale"));
      else
        binds["scale_t"] = {s.ref(t.getResult(), "scale")};
    }
  } else if (auto d = dyn_cast<DequantizeOp>(op)) {
    matrix = d.getResult();
    binds["codes"] = {s.ref(d.getInput(), "codes")};
    binds["scale"] = {s.ref(d.getInput(), "scale")};
    binds["output"] = {s.ref(d.getResult())};
  } else {
    auto a = cast<AbsMaxOp>(op);
    matrix = a.getInput();
    binds["input"] = {s.ref(a.getInput())};
    binds["absmax"] = {s.ref(a.getResult())};
  }
  binds["rows"] = {s.rows(matrix)};
  binds["cols"] = {s.cols(matrix)};
  for (AbiArg &a : abi)
    a.bind = binds.lookup(a.name);
}

/// The kernel's arguments by role.
struct ActArgs {
  Value input, codes, codesT, scale, scaleT, output, absmax, rows, cols;
};

ActArgs bindArgs(ValueRange args, ArrayRef<AbiArg> abi) {
  ActArgs a;
  for (auto [v, arg] : llvm::zip(args, abi)) {
    Value *slot = llvm::StringSwitch<Value *>(arg.name)
                      .Case("input", &a.input)
                      .Case("codes", &a.codes)
                      .Case("codes_t", &a.codesT)
                      .Case("scale", &a.scale)
                      .Case("scale_t", &a.scaleT)
                      .Case("output", &a.output)
                      .Case("absmax", &a.absmax)
                      .Case("rows", &a.rows)
                      .Case("cols", &a.cols)
                      .Default(nullptr);
    *slot = v;
  }
  return a;
}

/// `x / s`, as an IEEE division, or as `x * rcp(s)` with `inv` given.
Value divideByScale(F32Emitter &f, Value x, Value s, Value inv) {
  return inv ? f.mul(x, inv) : f.div(x, s);
}

//===----------------------------------------------------------------------===//
// Flat (grouped or element-wise) kernels
//===----------------------------------------------------------------------===//

/// Emits the body of one lane of a flat kernel.
class FlatLaneEmitter {
public:
  FlatLaneEmitter(ImplicitLocOpBuilder &b, const ActSpec &spec,
                  const GroupLane &lane, const ActArgs &args,
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

  ImplicitLocOpBuilder &b;
  F32Emitter f;
  const ActSpec &spec;
  const GroupLane &lane;
  const ActArgs &args;
  bool approxDivision;
  Value isGroupLeader;
};

void FlatLaneEmitter::emit() {
  int64_t e = lane.elementsPerLane;
  Value n = arith::MulIOp::create(b, args.rows, args.cols);
  Value nIndex = arith::IndexCastOp::create(b, b.getIndexType(), n);
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
    SmallVector<Value> x = access.loadF32(args.input, spec.hpType,
                                          alignment(args.input));
    QuantizedLane q = quantizeGroup(
        f, lane, x,
        {spec.eps, spec.fp8Max(), spec.scaleType, approxDivision});
    access.storeF32(args.codes, q.scaled, fp8, alignment(args.codes));
    storeFromLeader(args.scale, spec.scaleType, q.scale);
    return;
  }
  case ActKind::QuantizeScaled: {
    SmallVector<Value> x = access.loadF32(args.input, spec.hpType,
                                          alignment(args.input));
    Value s = loadScalarF32(b, args.scale, spec.scaleType, idx(0));
    Value inv = approxDivision ? f.div(f.c(1.0), s) : Value();
    SmallVector<Value> q;
    for (Value xi : x)
      q.push_back(divideByScale(f, xi, s, inv));
    access.storeF32(args.codes, q, fp8, alignment(args.codes));
    return;
  }
  case ActKind::Dequantize: {
    SmallVector<Value> q = access.loadF32(args.codes, fp8,
                                          alignment(args.codes));
    Value sIdx = spec.perTensor ? idx(0) : lane.group;
    if (!spec.perTensor) {
      // Lanes past the end read the last group's scale (never stored).
      Value groups =
          arith::CeilDivUIOp::create(b, arith::IndexCastOp::create(
                                            b, b.getIndexType(), n),
                                     idx(spec.groupSize));
      Value last = arith::SubIOp::create(
          b, arith::MaxUIOp::create(b, groups, idx(1)), idx(1));
      sIdx = arith::MinUIOp::create(b, lane.group, last);
    }
    Value s = loadScalarF32(b, args.scale, spec.scaleType, sIdx);
    SmallVector<Value> x;
    for (Value qi : q)
      x.push_back(f.mul(qi, s));
    access.storeF32(args.output, x, spec.hpType, alignment(args.output));
    return;
  }
  case ActKind::AbsMax: {
    SmallVector<Value> x = access.loadF32(args.input, spec.hpType,
                                          alignment(args.input));
    storeFromLeader(args.absmax, b.getF32Type(), groupMaxAbs(f, lane, x));
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

struct TileShape {
  int64_t tile;       ///< T
  int64_t blockSize;  ///< threads
  int64_t inVector;   ///< input elements per row-major access (16 bytes)
};

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
/// quantizes, stores the row-major codes and keeps them in the tile buffer.
/// Pass 2 (transposed) gives each thread one 32-bit column word of 16 rows:
/// 16 conflict-free 32-bit shared loads, 4x4 byte transposes with `prmt`,
/// and four 16-byte rows of q^T. Tiles narrower than 32 words swap the rows
/// of each pair in every other 16-row strip, so the two strips a warp reads
/// at once sit in different banks.
void emitTileGpu(ImplicitLocOpBuilder &b, const ActSpec &spec,
                 const ActArgs &args, Value tileMem, Value redMem,
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
  Value rows = toIndex(args.rows), cols = toIndex(args.cols);
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
    s = loadScalarF32(b, args.scale, spec.scaleType, cidx(0));
    inv = approxDivision ? f.div(f.c(1.0), s) : Value();
  }

  auto loop = scf::ForOp::create(b, bid, numTiles, nBlocks);
  b.setInsertionPointToStart(loop.getBody());
  Value t = loop.getInductionVar();
  Value tileR = arith::DivUIOp::create(b, t, tilesC);
  Value tileC = arith::RemUIOp::create(b, t, tilesC);
  Value r0 = arith::MulIOp::create(b, tileR, cidx(T));
  Value c0 = arith::MulIOp::create(b, tileC, cidx(T));
  Value full = arith::AndIOp::create(
      b, aligned,
      arith::AndIOp::create(
          b,
          arith::CmpIOp::create(b, arith::CmpIPredicate::ule,
                                arith::AddIOp::create(b, r0, cidx(T)), rows),
          arith::CmpIOp::create(b, arith::CmpIPredicate::ule,
                                arith::AddIOp::create(b, c0, cidx(T)),
                                cols)));
  // Runs `body` under `cond` (unconditionally when null).
  auto guarded = [&](Value cond, function_ref<void()> body) {
    if (!cond)
      return body();
    auto op = scf::IfOp::create(b, cond, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(op.thenBlock());
    body();
  };
  auto ifElse = [&](Value cond, function_ref<void()> fast,
                    function_ref<void()> slow) {
    auto op = scf::IfOp::create(b, cond, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(op.thenBlock());
    fast();
    b.setInsertionPointToStart(op.elseBlock());
    slow();
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
  SmallVector<Item> items;
  for (int64_t k = 0; k * B < items1; ++k) {
    Item it;
    Value item = arith::AddIOp::create(b, tid, cidx(k * B));
    if ((k + 1) * B > items1)
      it.ok = ult(item, cidx(items1));
    it.lr = arith::DivUIOp::create(b, item, cidx(T / v1));
    it.lc = arith::MulIOp::create(
        b, arith::RemUIOp::create(b, item, cidx(T / v1)), cidx(v1));
    it.gr = arith::AddIOp::create(b, r0, it.lr);
    it.gc = arith::AddIOp::create(b, c0, it.lc);
    it.at = arith::AddIOp::create(b, arith::MulIOp::create(b, it.gr, cols),
                                  it.gc);
    Value inside = andI(ult(it.gr, rows), it.ok);
    it.mask = arith::AndIOp::create(
        b, rangeMask(b, it.gc, v1, cols),
        vector::BroadcastOp::create(b, i1Vec, inside));
    auto ld = scf::IfOp::create(
        b, andI(full, it.ok),
        [&](OpBuilder &nb, Location loc) {
          Value v = vector::LoadOp::create(
              nb, loc, inVec, args.input, ValueRange{it.at},
              /*nontemporal=*/false, llvm::MaybeAlign(16));
          scf::YieldOp::create(nb, loc, v);
        },
        [&](OpBuilder &nb, Location loc) {
          ImplicitLocOpBuilder ib(loc, nb);
          Value zero = arith::ConstantOp::create(ib, ib.getZeroAttr(inVec));
          Value v = vector::MaskedLoadOp::create(ib, inVec, args.input,
                                                 ValueRange{it.at}, it.mask,
                                                 zero);
          scf::YieldOp::create(nb, loc, v);
        });
    it.raw = ld.getResult(0);
    items.push_back(it);
  }

  // Pass 1b (per block): the block maximum and its scale. Masked-off
  // elements load as 0 and leave the maximum alone; NaN is skipped (fmax).
  // |x| of non-NaN floats orders like its bits, so the thread's maximum is
  // an unsigned maximum of the bits with the sign cleared and NaN set to 0.
  if (blocked) {
    unsigned width = spec.hpType.getIntOrFloatBitWidth();
    auto bitsType = b.getIntegerType(width);
    auto bitsVec = VectorType::get({v1}, bitsType);
    APInt inf = APFloat::getInf(cast<FloatType>(spec.hpType).getFloatSemantics())
                    .bitcastToAPInt();
    auto splat = [&](const APInt &v) {
      return arith::ConstantOp::create(
          b, DenseElementsAttr::get(bitsVec, ArrayRef<APInt>(v)));
    };
    Value signOff = splat(APInt::getSignedMaxValue(width));
    Value infBits = splat(inf), zeroBits = splat(APInt(width, 0));
    Value acc = zeroBits;
    for (const Item &it : items) {
      Value bits = it.raw;
      if (storage != bitsType)
        bits = arith::BitcastOp::create(b, bitsVec, bits);
      Value mag = arith::AndIOp::create(b, bits, signOff);
      Value nan = arith::CmpIOp::create(b, arith::CmpIPredicate::ugt, mag,
                                        infBits);
      acc = arith::MaxUIOp::create(
          b, acc, arith::SelectOp::create(b, nan, zeroBits, mag));
    }
    Value mBits = vector::ReductionOp::create(b, vector::CombiningKind::MAXUI,
                                              acc);
    Value m = arith::BitcastOp::create(b, spec.hpType, mBits);
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
                  b, b.getLoc(), args.scale, spec.scaleType, s,
                  arith::AddIOp::create(
                      b, arith::MulIOp::create(b, tileR, tilesC), tileC));
              if (transposed)
                storeScalarF32(
                    b, b.getLoc(), args.scaleT, spec.scaleType, s,
                    arith::AddIOp::create(
                        b, arith::MulIOp::create(b, tileC, tilesR), tileR));
            });
  }

  // Pass 1c: quantize, store q, keep the codes in the tile buffer.
  auto codeVec1 = VectorType::get({v1}, i8);
  Value sv = vector::BroadcastOp::create(b, f32Vec, inv ? inv : s);
  for (const Item &it : items) {
    // Per block, always the IEEE division (the reference library's).
    Value x = widen(it.raw);
    Value scaled = inv ? f.mul(x, sv) : arith::DivFOp::create(b, x, sv);
    Value q = arith::TruncFOp::create(b, VectorType::get({v1}, fp8), scaled);
    q = arith::BitcastOp::create(b, codeVec1, q);
    guarded(it.ok, [&] {
      ifElse(
          full,
          [&] {
            vector::StoreOp::create(b, q, args.codes, ValueRange{it.at},
                                    /*nontemporal=*/false,
                                    llvm::MaybeAlign(v1));
          },
          [&] {
            vector::MaskedStoreOp::create(b, args.codes, ValueRange{it.at},
                                          it.mask, q);
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
          ifElse(
              full,
              [&] {
                vector::StoreOp::create(b, q, args.codesT, ValueRange{at},
                                        /*nontemporal=*/false,
                                        llvm::MaybeAlign(16));
              },
              [&] {
                Value mask = arith::AndIOp::create(
                    b, rangeMask(b, gr, 16, rows),
                    vector::BroadcastOp::create(
                        b, VectorType::get({16}, b.getI1Type()),
                        ult(gc, cols)));
                vector::MaskedStoreOp::create(b, args.codesT, ValueRange{at},
                                              mask, q);
              });
        }
      });
    }
  }
  // The next tile reuses the workgroup buffers.
  gpu::BarrierOp::create(b);
  b.setInsertionPointAfter(loop);
}

/// CPU, per tensor: a plain loop over the elements, writing both layouts.
void emitTransposeCpu(ImplicitLocOpBuilder &b, const ActSpec &spec,
                      const ActArgs &args) {
  F32Emitter f{b, /*approx=*/false};
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  Value rows = arith::IndexCastOp::create(b, b.getIndexType(), args.rows);
  Value cols = arith::IndexCastOp::create(b, b.getIndexType(), args.cols);
  Value s = loadScalarF32(b, args.scale, spec.scaleType, cidx(0));
  Type fp8 = getFp8Type(b.getContext(), spec.format);
  auto outer = scf::ForOp::create(b, cidx(0), rows, cidx(1));
  b.setInsertionPointToStart(outer.getBody());
  Value i = outer.getInductionVar();
  auto inner = scf::ForOp::create(b, cidx(0), cols, cidx(1));
  b.setInsertionPointToStart(inner.getBody());
  Value j = inner.getInductionVar();
  Value at = arith::AddIOp::create(b, arith::MulIOp::create(b, i, cols), j);
  Value x = memref::LoadOp::create(b, args.input, ValueRange{at});
  if (!spec.hpType.isF32()) {
    x = arith::BitcastOp::create(b, spec.hpType, x);
    x = arith::ExtFOp::create(b, b.getF32Type(), x);
  }
  Value q = arith::TruncFOp::create(b, fp8, f.div(x, s));
  q = arith::BitcastOp::create(b, b.getI8Type(), q);
  memref::StoreOp::create(b, q, args.codes, ValueRange{at});
  Value atT = arith::AddIOp::create(b, arith::MulIOp::create(b, j, rows), i);
  memref::StoreOp::create(b, q, args.codesT, ValueRange{atT});
  b.setInsertionPointAfter(outer);
}

/// CPU, per block: for each block, its maximum, its scale, then its codes
/// (and the transposed codes and scale).
void emitBlockCpu(ImplicitLocOpBuilder &b, const ActSpec &spec,
                  const ActArgs &args) {
  F32Emitter f{b, /*approx=*/false};
  auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
  const int64_t B = spec.blockEdge;
  const bool transposed = spec.kind == ActKind::QuantizeTranspose;
  Value rows = arith::IndexCastOp::create(b, b.getIndexType(), args.rows);
  Value cols = arith::IndexCastOp::create(b, b.getIndexType(), args.cols);
  Value nbr = arith::CeilDivUIOp::create(b, rows, cidx(B));
  Value nbc = arith::CeilDivUIOp::create(b, cols, cidx(B));
  Type fp8 = getFp8Type(b.getContext(), spec.format);
  auto loadX = [&](Value at) {
    Value x = memref::LoadOp::create(b, args.input, ValueRange{at});
    if (!spec.hpType.isF32()) {
      x = arith::BitcastOp::create(b, spec.hpType, x);
      x = arith::ExtFOp::create(b, b.getF32Type(), x);
    }
    return x;
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
  storeScalarF32(b, b.getLoc(), args.scale, spec.scaleType, s,
                 arith::AddIOp::create(b, arith::MulIOp::create(b, br, nbc),
                                       bc));
  if (transposed)
    storeScalarF32(b, b.getLoc(), args.scaleT, spec.scaleType, s,
                   arith::AddIOp::create(b, arith::MulIOp::create(b, bc, nbr),
                                         br));
  auto qRows = scf::ForOp::create(b, i0, i1, cidx(1));
  b.setInsertionPointToStart(qRows.getBody());
  Value i = qRows.getInductionVar();
  auto qCols = scf::ForOp::create(b, j0, j1, cidx(1));
  b.setInsertionPointToStart(qCols.getBody());
  Value j = qCols.getInductionVar();
  Value at = arith::AddIOp::create(b, arith::MulIOp::create(b, i, cols), j);
  Value q = arith::TruncFOp::create(b, fp8, arith::DivFOp::create(b, loadX(at), s));
  q = arith::BitcastOp::create(b, b.getI8Type(), q);
  memref::StoreOp::create(b, q, args.codes, ValueRange{at});
  if (transposed)
    memref::StoreOp::create(
        b, q, args.codesT,
        ValueRange{arith::AddIOp::create(b, arith::MulIOp::create(b, j, rows),
                                         i)});
  b.setInsertionPointAfter(blockRows);
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

struct FlatShape {
  int64_t elementsPerLane;
  int64_t lanesPerGroup;
  int64_t groupSize; ///< G, or E for element-wise kernels
};

DictionaryAttr buildManifestRecord(MLIRContext *ctx, StringRef name,
                                   const ActSpec &spec, ArrayRef<AbiArg> abi,
                                   std::optional<int64_t> blockSize,
                                   int64_t elementsPerBlock, int64_t tile) {
  Builder b(ctx);
  auto str = [&](StringRef s) { return b.getStringAttr(s); };
  Type fp8 = getFp8Type(ctx, spec.format);
  SmallVector<NamedAttribute> config;
  bool toFp8 = spec.kind != ActKind::Dequantize;
  config.push_back(b.getNamedAttr(toFp8 ? "input" : "output",
                                  str(manifestDtype(spec.hpType))));
  if (spec.kind != ActKind::AbsMax) {
    config.push_back(b.getNamedAttr("format", str(manifestDtype(fp8))));
    config.push_back(
        b.getNamedAttr("fp8max", b.getF64FloatAttr(spec.fp8Max())));
    config.push_back(b.getNamedAttr("scale", str(manifestDtype(spec.scaleType))));
  }
  config.push_back(b.getNamedAttr(
      "scaling", str(spec.perTensor  ? "per_tensor"
                     : spec.blocked() ? "per_block"
                                      : "per_group")));
  if (spec.grouped())
    config.push_back(
        b.getNamedAttr("group_size", b.getI64IntegerAttr(spec.groupSize)));
  if (spec.blocked())
    config.push_back(
        b.getNamedAttr("block", b.getI64IntegerAttr(spec.blockEdge)));
  if (spec.kind == ActKind::QuantizeGroup || spec.blocked())
    config.push_back(b.getNamedAttr("eps", b.getF64FloatAttr(spec.eps)));
  if (spec.kind == ActKind::QuantizeScaled ||
      (spec.kind == ActKind::QuantizeTranspose && !spec.blocked()))
    config.push_back(b.getNamedAttr("given_scale", b.getBoolAttr(true)));
  if (spec.tiled())
    config.push_back(b.getNamedAttr("tile", b.getI64IntegerAttr(tile)));

  std::optional<LaunchRule> launch;
  if (blockSize)
    launch = LaunchRule{*blockSize, elementsPerBlock};
  return buildKernelRecord(ctx, name, spec.opName(), config, abi, launch);
}

struct CoatLowerActivationsPass
    : mlir::coat::impl::CoatLowerActivationsBase<CoatLowerActivationsPass> {
  using Base::Base;

  void runOnOperation() override;

private:
  FailureOr<ActSpec> analyze(func::FuncOp fn);
  LogicalResult lowerSpec(func::FuncOp fn, const ActSpec &spec, bool gpu,
                          KernelContainer &kernels);
};

LogicalResult checkMatrix(Operation *op, Type t) {
  auto shaped = dyn_cast<ShapedType>(t);
  if (!shaped || shaped.getRank() != 2)
    return op->emitError("activation kernels take 2-D [rows, cols] tensors, "
                         "got ")
           << t;
  return success();
}

LogicalResult checkGroup(Operation *op, const ::coat::Scaling &scaling) {
  if (scaling.kind != ::coat::ScalingKind::PerGroup)
    return op->emitError("activation kernels support per_group<G> and "
                         "per_tensor scaling (and per_block<BxB> for "
                         "coat.quantize) only");
  if (!llvm::isPowerOf2_64(scaling.groupSize) || scaling.groupSize > 1024)
    return op->emitError("group size ")
           << scaling.groupSize << " has no kernel: need a power of two "
                                   "<= 1024";
  return success();
}

/// per_block<BxB> quantization runs one B x B tile per block.
LogicalResult checkBlock(Operation *op, const ::coat::Scaling &scaling) {
  if (scaling.blockRows != scaling.blockCols ||
      (scaling.blockRows != 32 && scaling.blockRows != 64 &&
       scaling.blockRows != 128))
    return op->emitError("per_block<")
           << scaling.blockRows << "x" << scaling.blockCols
           << "> has no kernel: need square blocks of 32, 64 or 128";
  return success();
}

FailureOr<ActSpec> CoatLowerActivationsPass::analyze(func::FuncOp fn) {
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);
  auto shapeError = [&]() {
    return fn.emitError("kernel-spec function @")
           << fn.getSymName()
           << " must hold one coat.quantize, coat.dequantize or coat.absmax "
              "(or a coat.quantize with a scale and a coat.transpose of it) "
              "and return its results";
  };
  for (Operation *op : ops)
    for (Value operand : op->getOperands())
      if (!isa<BlockArgument>(operand) &&
          !(isa<TransposeOp>(op) && operand.getDefiningOp() == ops.front()))
        return op->emitError("operands of a kernel-spec op must be function "
                             "arguments");

  ActSpec spec;
  if (ops.size() == 1 && ret.getOperands() == ops[0]->getResults()) {
    Operation *op = ops[0];
    if (auto q = dyn_cast<QuantizeOp>(op)) {
      auto rt = dyn_cast<QTensorType>(q.getResult().getType());
      if (!rt)
        return op->emitError("the result must be a !coat.qtensor");
      if (failed(checkMatrix(op, q.getInput().getType())))
        return failure();
      if (rt.getExpanded())
        return op->emitError("range-expanded activations have no kernel");
      spec.hpType = cast<ShapedType>(q.getInput().getType()).getElementType();
      spec.format = rt.getFormat();
      spec.scaleType = rt.getScaleType();
      spec.eps = q.getEps().convertToFloat();
      if (q.getScale()) {
        spec.kind = ActKind::QuantizeScaled;
        spec.perTensor = true;
        spec.scaleType =
            cast<ShapedType>(q.getScale().getType()).getElementType();
        return spec;
      }
      if (rt.getScaling().isPerTensor())
        return op->emitError("a per_tensor coat.quantize kernel needs its "
                             "scale as an operand: derive it from "
                             "coat.absmax per_group<G> + coat.reduce_scales");
      if (rt.getScalingValue().kind == ::coat::ScalingKind::PerBlock) {
        if (failed(checkBlock(op, rt.getScalingValue())))
          return failure();
        spec.kind = ActKind::QuantizeBlock;
        spec.blockEdge = rt.getScalingValue().blockRows;
        return spec;
      }
      if (failed(checkGroup(op, rt.getScalingValue())))
        return failure();
      spec.kind = ActKind::QuantizeGroup;
      spec.groupSize = rt.getScalingValue().groupSize;
      return spec;
    }
    if (auto d = dyn_cast<DequantizeOp>(op)) {
      auto it = dyn_cast<QTensorType>(d.getInput().getType());
      if (!it)
        return op->emitError("the input must be a !coat.qtensor");
      if (failed(checkMatrix(op, it)))
        return failure();
      if (it.getExpanded())
        return op->emitError("range-expanded activations have no kernel");
      spec.kind = ActKind::Dequantize;
      spec.hpType = cast<ShapedType>(d.getResult().getType()).getElementType();
      spec.format = it.getFormat();
      spec.scaleType = it.getScaleType();
      if (it.getScaling().isPerTensor()) {
        spec.perTensor = true;
        return spec;
      }
      if (failed(checkGroup(op, it.getScalingValue())))
        return failure();
      spec.groupSize = it.getScalingValue().groupSize;
      return spec;
    }
    if (auto a = dyn_cast<AbsMaxOp>(op)) {
      if (failed(checkMatrix(op, a.getInput().getType())))
        return failure();
      if (failed(checkGroup(op, a.getScaling().getValue())))
        return failure();
      spec.kind = ActKind::AbsMax;
      spec.hpType = cast<ShapedType>(a.getInput().getType()).getElementType();
      spec.scaleType = Float32Type::get(fn.getContext());
      spec.groupSize = a.getScaling().getValue().groupSize;
      return spec;
    }
    return shapeError();
  }
  if (ops.size() == 2) {
    auto q = dyn_cast<QuantizeOp>(ops[0]);
    auto t = dyn_cast<TransposeOp>(ops[1]);
    if (!q || !t || t.getInput() != q.getResult() ||
        ret.getNumOperands() != 2 || ret.getOperand(0) != q.getResult() ||
        ret.getOperand(1) != t.getResult())
      return shapeError();
    auto rt = dyn_cast<QTensorType>(q.getResult().getType());
    if (!rt)
      return q.emitError("the result must be a !coat.qtensor");
    if (failed(checkMatrix(q, q.getInput().getType())))
      return failure();
    if (rt.getExpanded())
      return q.emitError("range-expanded activations have no kernel");
    spec.kind = ActKind::QuantizeTranspose;
    spec.hpType = cast<ShapedType>(q.getInput().getType()).getElementType();
    spec.format = rt.getFormat();
    if (!q.getScale()) {
      if (rt.getScalingValue().kind != ::coat::ScalingKind::PerBlock)
        return q.emitError("quantize+transpose kernels take a given "
                           "per-tensor scale (coat.quantize ... scale %s) "
                           "or quantize per_block<BxB>");
      if (failed(checkBlock(q, rt.getScalingValue())))
        return failure();
      spec.blockEdge = rt.getScalingValue().blockRows;
      spec.scaleType = rt.getScaleType();
      spec.eps = q.getEps().convertToFloat();
      return spec;
    }
    spec.perTensor = true;
    spec.scaleType = cast<ShapedType>(q.getScale().getType()).getElementType();
    return spec;
  }
  return shapeError();
}

LogicalResult CoatLowerActivationsPass::lowerSpec(func::FuncOp fn,
                                                  const ActSpec &spec,
                                                  bool gpu,
                                                  KernelContainer &kernels) {
  MLIRContext *ctx = &getContext();
  Operation *anchor = &fn.getBody().front().front();
  int64_t hpBytes = spec.hpType.getIntOrFloatBitWidth() / 8;

  // Flat kernels: E elements per lane, L lanes per group.
  FlatShape flat{1, 1, 1};
  int64_t tileEdge = tile != 0 ? int64_t(tile) : 64;
  TileShape tiles{spec.blocked() ? spec.blockEdge : tileEdge, blockSize,
                  16 / hpBytes};
  int64_t elementsPerBlock = 0;
  if (blockSize <= 0 || blockSize % 32 != 0 || blockSize > 1024)
    return anchor->emitError("block-size must be a multiple of 32 in "
                             "[32, 1024], got ")
           << static_cast<int64_t>(blockSize);
  if (spec.tiled()) {
    if (tileEdge != 32 && tileEdge != 64 && tileEdge != 128)
      return anchor->emitError("tile must be 32, 64 or 128, got ")
             << tileEdge;
    elementsPerBlock = tiles.tile * tiles.tile;
  } else {
    int64_t e = elementsPerThread > 0 ? elementsPerThread
                                      : (hpBytes >= 4 ? 8 : 16);
    if (spec.grouped())
      e = std::min(e, spec.groupSize);
    if (!llvm::isPowerOf2_64(e) ||
        (spec.grouped() && spec.groupSize / e > 32))
      return anchor->emitError("elements-per-thread=")
             << e << " does not fit group size " << spec.groupSize
             << " (need a power of two with group_size/E <= 32)";
    int64_t g = spec.grouped() ? spec.groupSize : e;
    if (!gpu) {
      // The CPU twin holds a whole group (or 16 elements) per iteration.
      e = spec.grouped() ? spec.groupSize : 16;
      g = e;
    }
    flat = {e, g / e, g};
    elementsPerBlock = blockSize * e;
  }

  SmallVector<AbiArg> abi = buildAbi(ctx, spec);
  bindToSpec(fn, abi);
  SmallVector<Type> argTypes;
  for (const AbiArg &a : abi)
    argTypes.push_back(a.type);
  auto fnType = FunctionType::get(ctx, argTypes, {});
  std::string name = fn.getSymName().str();
  DictionaryAttr record = buildManifestRecord(
      ctx, name, spec, abi,
      gpu ? std::optional<int64_t>(blockSize) : std::nullopt,
      elementsPerBlock, tiles.tile);
  Location loc = fn.getLoc();

  auto makeLane = [&](ImplicitLocOpBuilder &b, Value laneIndex,
                      bool onGpu) {
    auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
    GroupLane lane;
    lane.onGpu = onGpu;
    lane.elementsPerLane = flat.elementsPerLane;
    lane.lanesPerGroup = flat.lanesPerGroup;
    lane.groupSize = flat.groupSize;
    lane.laneInGroup =
        arith::RemUIOp::create(b, laneIndex, cidx(flat.lanesPerGroup));
    lane.group = arith::DivUIOp::create(b, laneIndex, cidx(flat.lanesPerGroup));
    lane.firstElement =
        arith::MulIOp::create(b, laneIndex, cidx(flat.elementsPerLane));
    return lane;
  };

  if (gpu) {
    OpBuilder mb(ctx);
    // Tile kernels: the codes tile as 32-bit words (transposed kinds), the
    // per-warp block maxima (per_block kinds).
    SmallVector<Type> workgroup;
    auto wgSpace =
        gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
    int64_t tileArg = -1, redArg = -1;
    if (spec.kind == ActKind::QuantizeTranspose) {
      tileArg = workgroup.size();
      workgroup.push_back(MemRefType::get({tiles.tile, tiles.tile / 4},
                                          IntegerType::get(ctx, 32),
                                          AffineMap(), wgSpace));
    }
    if (spec.tiled() && spec.blocked()) {
      redArg = workgroup.size();
      workgroup.push_back(MemRefType::get({blockSize / 32},
                                          Float32Type::get(ctx), AffineMap(),
                                          wgSpace));
    }
    gpu::GPUFuncOp kernel = kernels.createGpuKernel(loc, name, fnType, blockSize,
                                                    record, workgroup);
    if (spec.tiled() && tileMinCtas > 0)
      kernel->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
                      mb.getI32IntegerAttr(static_cast<int32_t>(tileMinCtas)));
    // The tile is written with vector stores: align it like one.
    for (int64_t i = 0, e = workgroup.size(); i < e; ++i)
      kernel.setWorkgroupAttributionAttr(i, "llvm.align",
                                         mb.getI64IntegerAttr(16));
    ImplicitLocOpBuilder b(loc, ctx);
    b.setInsertionPointToStart(&kernel.getBody().front());
    ActArgs args = bindArgs(kernel.getArguments(), abi);
    if (spec.tiled()) {
      auto wg = kernel.getWorkgroupAttributions();
      emitTileGpu(b, spec, args, tileArg >= 0 ? Value(wg[tileArg]) : Value(),
                  redArg >= 0 ? Value(wg[redArg]) : Value(), tiles,
                  approxDivision);
    } else {
      Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
      Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
      Value laneIndex = arith::AddIOp::create(
          b,
          arith::MulIOp::create(b, bid,
                                arith::ConstantIndexOp::create(b, blockSize)),
          tid);
      GroupLane lane = makeLane(b, laneIndex, /*onGpu=*/true);
      FlatLaneEmitter(b, spec, lane, args, approxDivision).emit();
    }
    gpu::ReturnOp::create(b);
  } else {
    func::FuncOp cpuFn = kernels.createCpuTwin(fn, name, fnType, record);
    Block *entry = cpuFn.addEntryBlock();
    ImplicitLocOpBuilder b(loc, ctx);
    b.setInsertionPointToStart(entry);
    ActArgs args = bindArgs(cpuFn.getArguments(), abi);
    if (spec.blocked()) {
      emitBlockCpu(b, spec, args);
    } else if (spec.kind == ActKind::QuantizeTranspose) {
      emitTransposeCpu(b, spec, args);
    } else {
      Value n = arith::IndexCastOp::create(
          b, b.getIndexType(), arith::MulIOp::create(b, args.rows, args.cols));
      Value lanes = arith::CeilDivUIOp::create(
          b, n, arith::ConstantIndexOp::create(b, flat.elementsPerLane));
      auto loop = scf::ForOp::create(b, arith::ConstantIndexOp::create(b, 0),
                                     lanes,
                                     arith::ConstantIndexOp::create(b, 1));
      b.setInsertionPointToStart(loop.getBody());
      GroupLane lane = makeLane(b, loop.getInductionVar(), /*onGpu=*/false);
      FlatLaneEmitter(b, spec, lane, args, /*approxDivision=*/false).emit();
    }
    b.setInsertionPointToEnd(entry);
    func::ReturnOp::create(b);
  }
  return success();
}

void CoatLowerActivationsPass::runOnOperation() {
  ModuleOp module = getOperation();
  FailureOr<bool> onGpu =
      parseKernelTarget(module, "coat-lower-activations", target);
  if (failed(onGpu))
    return signalPassFailure();
  bool gpu = *onGpu;
  // Kernel-spec functions are those holding one of our ops and no other
  // coat op: maxima in a producer's epilogue (`coat.absmax ... epilogue`)
  // belong to the producer's kernel, which other lowerings own.
  auto foreign = [](Operation *op) {
    return !isa<QuantizeOp, DequantizeOp, AbsMaxOp, TransposeOp>(op) &&
           isa_and_nonnull<CoatDialect>(op->getDialect());
  };
  FailureOr<SmallVector<func::FuncOp>> collected = collectKernelSpecs(
      module, "coat-lower-activations", [](Operation *op) {
        return isa<QuantizeOp, DequantizeOp, AbsMaxOp>(op);
      });
  if (failed(collected))
    return signalPassFailure();
  SmallVector<func::FuncOp> specs = std::move(*collected);
  llvm::erase_if(specs, [&](func::FuncOp fn) {
    return fn.walk([&](Operation *op) {
               return foreign(op) ? WalkResult::interrupt()
                                  : WalkResult::advance();
             }).wasInterrupted();
  });
  KernelContainer kernels(module, "coat-lower-activations",
                          "coat_activation_kernels", gpu);
  bool failedAny = false;
  for (func::FuncOp fn : specs) {
    FailureOr<ActSpec> spec = analyze(fn);
    if (failed(spec) || failed(lowerSpec(fn, *spec, gpu, kernels))) {
      failedAny = true;
      continue;
    }
    fn.erase();
  }
  if (failedAny)
    return signalPassFailure();
  if (failed(kernels.finish()))
    return signalPassFailure();
}

} // namespace
