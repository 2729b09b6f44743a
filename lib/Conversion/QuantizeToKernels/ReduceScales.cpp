//===- ReduceScales.cpp - the second stage of group scaling as a kernel ---===//
//
// Lowers kernel-spec functions holding one `coat.reduce_scales` followed by
// scalar arithmetic on rank-0 tensors (the derivation of a per-tensor scale
// from the maximum, as coat-group-scaling writes it) into one kernel: every
// CTA reduces a slice of the partial maxima, combines its result into a
// two-word workspace with atomics, and the last CTA to finish runs the
// scalar arithmetic, stores the scale and clears the workspace. The scale
// never leaves the device, and the reduction uses the whole GPU.
//
//===----------------------------------------------------------------------===//

#include "coat/Conversion/GroupKernel.h"
#include "coat/Conversion/KernelRecord.h"
#include "coat/Conversion/KernelSpec.h"
#include "coat/Conversion/Passes.h"
#include "coat/Dialect/CoatDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATLOWERREDUCESCALES
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

/// Elements one thread reads per step (one 16-byte access) and steps per
/// CTA: a CTA covers blockSize * kVector * kSteps maxima.
constexpr int64_t kVector = 4;
constexpr int64_t kSteps = 8;

/// The bit pattern of a NaN that orders above every other non-negative f32
/// when compared as unsigned integers (partial maxima are non-negative, so
/// their bits order like their values; a NaN anywhere makes the scale NaN,
/// as torch.max does in COAT).
constexpr uint32_t kNaNBits = 0x7fc00000u;

struct ScaleSpec {
  ReduceScalesOp reduce;
  Type inputType;           ///< f32 or bf16 partial maxima / scales
  Type outputType;          ///< element type of the returned scalar
  SmallVector<Operation *> scalarOps; ///< the rank-0 arithmetic, in order
  Value returned;           ///< the returned rank-0 value
  /// When the arithmetic is the scale derivation coat-group-scaling writes,
  /// `(max + eps) / fp8max` (then rounded to the scale type): its constants,
  /// recorded in the manifest so callers and tests know what the scale is
  /// for without reading the IR.
  std::optional<std::pair<float, float>> epsAndFp8Max;
};

/// The splat f32 value of a rank-0 constant, if `v` is one.
std::optional<float> splatConstant(Value v) {
  auto c = v.getDefiningOp<arith::ConstantOp>();
  auto dense = c ? dyn_cast<DenseElementsAttr>(c.getValue()) : nullptr;
  if (!dense || !dense.isSplat() || !dense.getElementType().isF32())
    return std::nullopt;
  return dense.getSplatValue<APFloat>().convertToFloat();
}

/// Matches `returned = [truncf]((max + eps) / fp8max)`.
std::optional<std::pair<float, float>> matchScaleDerivation(Value max,
                                                            Value returned) {
  if (auto t = returned.getDefiningOp<arith::TruncFOp>())
    returned = t.getIn();
  auto div = returned.getDefiningOp<arith::DivFOp>();
  auto add = div ? div.getLhs().getDefiningOp<arith::AddFOp>() : nullptr;
  if (!add || add.getLhs() != max)
    return std::nullopt;
  std::optional<float> eps = splatConstant(add.getRhs());
  std::optional<float> fp8max = splatConstant(div.getRhs());
  if (!eps || !fp8max)
    return std::nullopt;
  return std::make_pair(*eps, *fp8max);
}

FailureOr<ScaleSpec> analyze(func::FuncOp fn) {
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  ScaleSpec spec;
  for (Operation &op : body.without_terminator()) {
    if (auto r = dyn_cast<ReduceScalesOp>(op)) {
      if (spec.reduce)
        return r.emitError("a scale kernel holds one coat.reduce_scales");
      if (!isa<BlockArgument>(r.getInput()))
        return r.emitError("the input of a scale kernel's coat.reduce_scales "
                           "must be a function argument");
      spec.reduce = r;
      continue;
    }
    auto t = op.getNumResults() == 1
                 ? dyn_cast<RankedTensorType>(op.getResult(0).getType())
                 : RankedTensorType();
    if (!isa_and_nonnull<arith::ArithDialect>(op.getDialect()) || !t ||
        t.getRank() != 0)
      return op.emitError("a scale kernel may only hold arith ops on rank-0 "
                          "tensors after its coat.reduce_scales");
    if (auto c = dyn_cast<arith::ConstantOp>(op)) {
      auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
      if (!dense || !dense.isSplat())
        return op.emitError("constants of a scale kernel must be splat");
    } else {
      for (Value v : op.getOperands())
        if (isa<BlockArgument>(v))
          return op.emitError("the scalar arithmetic of a scale kernel may "
                              "only use the maximum and constants");
    }
    spec.scalarOps.push_back(&op);
  }
  if (!spec.reduce)
    return fn.emitError("kernel-spec function @")
           << fn.getSymName() << " holds no coat.reduce_scales";
  if (ret.getNumOperands() != 1)
    return fn.emitError("a scale kernel returns one rank-0 value");
  spec.returned = ret.getOperand(0);
  if (spec.returned != spec.reduce.getResult() &&
      !llvm::is_contained(spec.scalarOps, spec.returned.getDefiningOp()))
    return ret.emitError("a scale kernel returns its maximum or the scalar "
                         "arithmetic on it");
  spec.epsAndFp8Max =
      matchScaleDerivation(spec.reduce.getResult(), spec.returned);
  spec.inputType =
      cast<ShapedType>(spec.reduce.getInput().getType()).getElementType();
  spec.outputType = cast<ShapedType>(spec.returned.getType()).getElementType();
  if (!spec.outputType.isF32() && !spec.outputType.isBF16())
    return fn.emitError("a scale kernel returns an f32 or bf16 scale, got ")
           << spec.outputType;
  return spec;
}

SmallVector<AbiArg> buildAbi(func::FuncOp fn, const ScaleSpec &spec) {
  MLIRContext *ctx = fn.getContext();
  auto buf = [&](Type t) {
    return MemRefType::get({ShapedType::kDynamic}, laneStorageType(t));
  };
  Type i32 = IntegerType::get(ctx, 32);
  Type i64 = IntegerType::get(ctx, 64);
  SpecRefs s(fn);
  Value input = ReduceScalesOp(spec.reduce).getInput();
  return {{"maxima", buf(spec.inputType), manifestDtype(spec.inputType), "n",
           {s.ref(input)}},
          {"scale", buf(spec.outputType), manifestDtype(spec.outputType), "1",
           {s.ref(spec.returned)}},
          {"workspace", buf(i32), "i32", "2", {kBindScratch}},
          {"n", i64, "i64", "", {s.numel(input)}}};
}

/// Runs the spec's rank-0 arithmetic on the scalar `max` (f32 or bf16, the
/// element type of the reduction) and returns the scalar the spec returns.
Value emitScalarOps(OpBuilder &b, const ScaleSpec &spec, Value max) {
  IRMapping map;
  map.map(ReduceScalesOp(spec.reduce).getResult(), max);
  for (Operation *op : spec.scalarOps) {
    Type elt = cast<ShapedType>(op->getResult(0).getType()).getElementType();
    if (auto c = dyn_cast<arith::ConstantOp>(op)) {
      auto dense = cast<DenseElementsAttr>(c.getValue());
      map.map(c.getResult(),
              arith::ConstantOp::create(b, op->getLoc(), elt,
                                        cast<TypedAttr>(
                                            dense.getSplatValue<Attribute>())));
      continue;
    }
    SmallVector<Value> operands;
    for (Value v : op->getOperands())
      operands.push_back(map.lookup(v));
    OperationState state(op->getLoc(), op->getName(), operands, {elt},
                         llvm::to_vector(op->getDiscardableAttrs()));
    state.propertiesAttr = op->getPropertiesAsAttribute();
    map.map(op->getResult(0), b.create(state)->getResult(0));
  }
  return map.lookup(spec.returned);
}

/// Stores the scale kernel's result, already in its element type (f32, or
/// bf16 kept as i16), at index 0. (storeScalarF32 narrows an f32 value; this
/// one arrives narrowed by the spec's own arithmetic.)
void storeResult(ImplicitLocOpBuilder &b, Value buffer, Value v) {
  if (!v.getType().isF32())
    v = arith::BitcastOp::create(b, laneStorageType(v.getType()), v);
  memref::StoreOp::create(b, v, buffer,
                          ValueRange{arith::ConstantIndexOp::create(b, 0)});
}

/// f32 `max` back to the reduction's element type (exact: it is one of the
/// inputs, or NaN).
Value fromF32(ImplicitLocOpBuilder &b, Value v, Type t) {
  if (t.isF32())
    return v;
  return arith::TruncFOp::create(b, t, v);
}

struct CoatLowerReduceScalesPass
    : mlir::coat::impl::CoatLowerReduceScalesBase<CoatLowerReduceScalesPass> {
  using Base::Base;

  DictionaryAttr record(StringRef name, const ScaleSpec &spec,
                        ArrayRef<AbiArg> abi, bool gpu) {
    MLIRContext *ctx = &getContext();
    Builder b(ctx);
    SmallVector<NamedAttribute> config = {
        b.getNamedAttr("input", b.getStringAttr(manifestDtype(spec.inputType))),
        b.getNamedAttr("scale",
                       b.getStringAttr(manifestDtype(spec.outputType)))};
    if (spec.epsAndFp8Max) {
      auto [eps, fp8max] = *spec.epsAndFp8Max;
      config.push_back(b.getNamedAttr("eps", b.getF32FloatAttr(eps)));
      config.push_back(b.getNamedAttr("fp8max", b.getF32FloatAttr(fp8max)));
      for (::coat::Fp8Format f : {::coat::Fp8Format::E4M3, ::coat::Fp8Format::E5M2})
        if (::coat::getFp8Traits(f).maxFinite == fp8max)
          config.push_back(b.getNamedAttr(
              "format", b.getStringAttr(::coat::getFp8Traits(f).name)));
    }
    std::optional<LaunchRule> launch;
    if (gpu)
      launch = LaunchRule{blockSize, blockSize * kVector * kSteps};
    return buildKernelRecord(ctx, name, "reduce_scales", config, abi, launch);
  }

  /// One CTA: max over its slice, then the last CTA finishes.
  void emitGpu(ImplicitLocOpBuilder &b, const ScaleSpec &spec,
               gpu::GPUFuncOp kernel) {
    auto args = kernel.getArguments();
    Value maxima = args[0], scale = args[1], workspace = args[2], n = args[3];
    Type f32 = b.getF32Type(), i32 = b.getI32Type();
    auto cidx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v); };
    auto ci32 = [&](int64_t v) {
      return arith::ConstantIntOp::create(b, i32, v);
    };
    F32Emitter f{b};

    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value blockBase = arith::MulIOp::create(
        b, bid, cidx(blockSize * kVector * kSteps));
    // All loads are issued before any use, so each thread keeps kSteps
    // 16-byte requests in flight.
    SmallVector<Value> values;
    int64_t bytes = kVector * (spec.inputType.getIntOrFloatBitWidth() / 8);
    for (int64_t step = 0; step < kSteps; ++step) {
      Value first = arith::AddIOp::create(
          b, blockBase,
          arith::MulIOp::create(
              b, arith::AddIOp::create(b, tid, cidx(step * blockSize)),
              cidx(kVector)));
      Value firstI64 = arith::IndexCastOp::create(b, b.getI64Type(), first);
      Value end = arith::AddIOp::create(
          b, firstI64, arith::ConstantIntOp::create(b, b.getI64Type(), kVector));
      Value full = arith::CmpIOp::create(b, arith::CmpIPredicate::sle, end, n);
      LaneAccess access{b, first, kVector, full, n};
      llvm::append_range(
          values, access.loadF32(maxima, spec.inputType, llvm::Align(bytes)));
    }
    // Per thread: maxnum of the values and an "any NaN" flag. Masked-off
    // elements load as zero, the identity of a max of non-negative values.
    Value best = f.c(0.0);
    Value sawNaN = ci32(0);
    for (Value v : values) {
      best = f.maxnum(best, v);
      Value nan = arith::CmpFOp::create(b, arith::CmpFPredicate::UNO, v, v);
      sawNaN =
          arith::OrIOp::create(b, sawNaN, arith::ExtUIOp::create(b, i32, nan));
    }
    // Warp, then CTA (through workgroup memory), then across CTAs.
    GroupLane warp;
    warp.onGpu = true;
    warp.lanesPerGroup = 32;
    best = warp.allReduce(b, best, GroupReduceKind::MaxNum);
    sawNaN = warp.allReduce(b, sawNaN, GroupReduceKind::BitOr);
    Value bits = arith::SelectOp::create(
        b, arith::CmpIOp::create(b, arith::CmpIPredicate::ne, sawNaN, ci32(0)),
        ci32(kNaNBits), arith::BitcastOp::create(b, i32, best));

    Value perWarp = kernel.getWorkgroupAttributions()[0];
    Value laneId = arith::RemUIOp::create(b, tid, cidx(32));
    Value warpId = arith::DivUIOp::create(b, tid, cidx(32));
    Value isLane0 = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, laneId,
                                          cidx(0));
    auto ifLane0 = scf::IfOp::create(b, isLane0, /*withElse=*/false);
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(ifLane0.thenBlock());
      memref::StoreOp::create(b, bits, perWarp, ValueRange{warpId});
    }
    gpu::BarrierOp::create(b);
    Value isThread0 =
        arith::CmpIOp::create(b, arith::CmpIPredicate::eq, tid, cidx(0));
    auto ifThread0 = scf::IfOp::create(b, isThread0, /*withElse=*/false);
    b.setInsertionPointToStart(ifThread0.thenBlock());
    Value blockBits = ci32(0);
    for (int64_t w = 0; w < blockSize / 32; ++w)
      blockBits = arith::MaxUIOp::create(
          b, blockBits,
          memref::LoadOp::create(b, perWarp, ValueRange{cidx(w)}));
    // Unsigned max of the bit patterns is the max of non-negative values,
    // with the NaN pattern above all of them. The atomics are relaxed: a
    // GPU-scope fence orders this CTA's max before its count (and, in the
    // last CTA, the count before the read of the max), as __threadfence does
    // in CUDA's last-block reductions.
    memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::maxu, blockBits,
                                workspace, ValueRange{cidx(0)});
    NVVM::MembarOp::create(b, NVVM::MemScopeKind::GPU);
    Value done = memref::AtomicRMWOp::create(
        b, arith::AtomicRMWKind::addi, ci32(1), workspace,
        ValueRange{cidx(1)});
    Value grid = arith::IndexCastOp::create(
        b, i32, gpu::GridDimOp::create(b, gpu::Dimension::x));
    Value last = arith::CmpIOp::create(
        b, arith::CmpIPredicate::eq, done,
        arith::SubIOp::create(b, grid, ci32(1)));
    auto ifLast = scf::IfOp::create(b, last, /*withElse=*/false);
    b.setInsertionPointToStart(ifLast.thenBlock());
    NVVM::MembarOp::create(b, NVVM::MemScopeKind::GPU);
    Value allBits = memref::AtomicRMWOp::create(
        b, arith::AtomicRMWKind::maxu, ci32(0), workspace,
        ValueRange{cidx(0)});
    // Leave the workspace as the next launch expects it: zero.
    memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::assign, ci32(0),
                                workspace, ValueRange{cidx(0)});
    memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::assign, ci32(0),
                                workspace, ValueRange{cidx(1)});
    Value max = fromF32(b, arith::BitcastOp::create(b, f32, allBits),
                        spec.inputType);
    storeResult(b, scale, emitScalarOps(b, spec, max));
  }

  void emitCpu(ImplicitLocOpBuilder &b, const ScaleSpec &spec,
               func::FuncOp fn) {
    auto args = fn.getArguments();
    Value maxima = args[0], scale = args[1], n = args[3];
    F32Emitter f{b};
    Value count = arith::IndexCastOp::create(b, b.getIndexType(), n);
    auto loop = scf::ForOp::create(
        b, arith::ConstantIndexOp::create(b, 0), count,
        arith::ConstantIndexOp::create(b, 1), ValueRange{f.c(0.0)});
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(loop.getBody());
      Value x = loadScalarF32(b, maxima, spec.inputType,
                              loop.getInductionVar());
      // maximumf propagates NaN, like the GPU's NaN flag.
      Value acc = arith::MaximumFOp::create(b, loop.getRegionIterArg(0), x);
      scf::YieldOp::create(b, acc);
    }
    Value max = fromF32(b, loop.getResult(0), spec.inputType);
    storeResult(b, scale, emitScalarOps(b, spec, max));
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    FailureOr<bool> gpu =
        parseKernelTarget(module, "coat-lower-reduce-scales", target);
    if (failed(gpu))
      return signalPassFailure();
    if (blockSize < 32 || blockSize > 1024 || blockSize % 32 != 0) {
      module.emitError("coat-lower-reduce-scales: block-size must be a "
                       "multiple of 32 in [32, 1024], got ")
          << static_cast<int64_t>(blockSize);
      return signalPassFailure();
    }
    FailureOr<SmallVector<func::FuncOp>> specs = collectKernelSpecs(
        module, "coat-lower-reduce-scales",
        [](Operation *op) { return isa<ReduceScalesOp>(op); });
    if (failed(specs))
      return signalPassFailure();

    KernelContainer kernels(module, "coat-lower-reduce-scales",
                            "coat_scale_kernels", *gpu);
    bool failedAny = false;
    for (func::FuncOp fn : *specs) {
      FailureOr<ScaleSpec> spec = analyze(fn);
      if (failed(spec)) {
        failedAny = true;
        continue;
      }
      SmallVector<AbiArg> abi = buildAbi(fn, *spec);
      SmallVector<Type> argTypes;
      for (const AbiArg &a : abi)
        argTypes.push_back(a.type);
      auto fnType = FunctionType::get(ctx, argTypes, {});
      StringRef name = fn.getSymName();
      DictionaryAttr rec = record(name, *spec, abi, *gpu);
      ImplicitLocOpBuilder b(fn.getLoc(), ctx);
      if (*gpu) {
        Type perWarp = MemRefType::get(
            {blockSize / 32}, IntegerType::get(ctx, 32), AffineMap(),
            gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup));
        gpu::GPUFuncOp kernel = kernels.createGpuKernel(
            fn.getLoc(), name, fnType, blockSize, rec, TypeRange{perWarp});
        b.setInsertionPointToStart(&kernel.getBody().front());
        emitGpu(b, *spec, kernel);
        b.setInsertionPointToEnd(&kernel.getBody().front());
        gpu::ReturnOp::create(b);
      } else {
        func::FuncOp twin = kernels.createCpuTwin(fn, name, fnType, rec);
        b.setInsertionPointToStart(twin.addEntryBlock());
        emitCpu(b, *spec, twin);
        func::ReturnOp::create(b);
      }
      fn.erase();
    }
    if (failedAny)
      return signalPassFailure();
    if (failed(kernels.finish()))
      return signalPassFailure();
  }
};

} // namespace
