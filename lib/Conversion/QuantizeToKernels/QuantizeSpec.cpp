//===- QuantizeSpec.cpp - what an activation kernel spec means ------------===//
//
// Checks a kernel-spec function holding one activation op (or a quantize
// and its transpose), picks the flat or tile shape of its kernel under the
// pass options, and declares it: ABI, bindings to the spec, record.
//
//===----------------------------------------------------------------------===//

#include "Quantize.h"

#include "coat/Conversion/GroupKernel.h"
#include "coat/Dialect/CoatDialect.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::coat;

namespace {

SmallVector<AbiArg> buildAbi(MLIRContext *ctx, const ActSpec &spec) {
  auto buf = [](Type logical) { return abiBuffer(logical); };
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
      abi = spec.rowMajorCodes ? SmallVector<AbiArg>{hp, scale, codes, codesT}
                               : SmallVector<AbiArg>{hp, scale, codesT};
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
  case ActKind::Requantize: {
    Type source = getFp8Type(ctx, spec.sourceFormat);
    abi = {{"input", buf(source), manifestDtype(source), "n"},
           {"input_scale", buf(spec.sourceScaleType),
            manifestDtype(spec.sourceScaleType), "groups"},
           scale, codes};
    break;
  }
  }
  Type i64 = IntegerType::get(ctx, 64);
  abi.push_back({"rows", i64, "i64", ""});
  abi.push_back({"cols", i64, "i64", ""});
  return abi;
}

/// Records what each ABI argument is in terms of the spec `fn` (whose op

DictionaryAttr buildManifestRecord(MLIRContext *ctx, StringRef name,
                                   const ActSpec &spec, ArrayRef<AbiArg> abi,
                                   std::optional<int64_t> blockSize,
                                   int64_t elementsPerBlock, int64_t tile) {
  Builder b(ctx);
  auto str = [&](StringRef s) { return b.getStringAttr(s); };
  Type fp8 = getFp8Type(ctx, spec.format);
  SmallVector<NamedAttribute> config;
  bool toFp8 = spec.kind != ActKind::Dequantize;
  Type input = spec.kind == ActKind::Requantize
                   ? getFp8Type(ctx, spec.sourceFormat)
                   : spec.hpType;
  config.push_back(b.getNamedAttr(toFp8 ? "input" : "output",
                                  str(manifestDtype(input))));
  if (spec.kind == ActKind::Requantize)
    config.push_back(b.getNamedAttr(
        "input_scale", str(manifestDtype(spec.sourceScaleType))));
  if (spec.kind != ActKind::AbsMax) {
    config.push_back(b.getNamedAttr("format", str(manifestDtype(fp8))));
    config.push_back(
        b.getNamedAttr("fp8max", b.getF64FloatAttr(spec.fp8Max())));
    config.push_back(
        b.getNamedAttr("scale", str(manifestDtype(spec.scaleType))));
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
      spec.kind == ActKind::Requantize ||
      (spec.kind == ActKind::QuantizeTranspose && !spec.blocked()))
    config.push_back(b.getNamedAttr("given_scale", b.getBoolAttr(true)));
  if (spec.tiled())
    config.push_back(b.getNamedAttr("tile", b.getI64IntegerAttr(tile)));

  std::optional<LaunchRule> launch;
  if (blockSize)
    launch = LaunchRule{*blockSize, elementsPerBlock};
  return buildKernelRecord(ctx, name, spec.opName(), config, abi, launch);
}

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

/// A requantize: 1xG codes dequantized to f32 and quantized per tensor with
/// a given scale, the values never leaving registers.
FailureOr<ActSpec> analyzeRequantize(func::FuncOp fn, DequantizeOp d,
                                     Operation *second, func::ReturnOp ret) {
  auto q = dyn_cast<QuantizeOp>(second);
  if (!q || q.getInput() != d.getResult() || !d->hasOneUse() ||
      ret.getOperands() != q->getResults())
    return fn.emitError("kernel-spec function @")
           << fn.getSymName()
           << " must dequantize, quantize the values with a given scale and "
              "return only the quantized tensor";
  auto in = cast<QTensorType>(d.getInput().getType());
  auto out = dyn_cast<QTensorType>(q.getResult().getType());
  if (failed(checkMatrix(d, in)))
    return failure();
  if (!d.getResult().getType().getElementType().isF32())
    return d.emitError("a requantize kernel dequantizes to f32");
  if (in.getScalingValue().kind != ::coat::ScalingKind::PerGroup ||
      in.getExpanded())
    return d.emitError("a requantize kernel reads per_group<G> codes");
  if (failed(checkGroup(d, in.getScalingValue())))
    return failure();
  if (!out || !q.getScale() || out.getExpanded())
    return q.emitError("a requantize kernel quantizes per tensor with a "
                       "given scale");
  ActSpec spec;
  spec.kind = ActKind::Requantize;
  spec.hpType = d.getResult().getType().getElementType();
  spec.sourceFormat = in.getFormat();
  spec.sourceScaleType = in.getScaleType();
  spec.groupSize = in.getScalingValue().groupSize;
  spec.format = out.getFormat();
  spec.perTensor = true;
  spec.scaleType = cast<ShapedType>(q.getScale().getType()).getElementType();
  return spec;
}

/// What the spec's op (or quantize + transpose, or a requantize) asks of
/// the kernel.
FailureOr<ActSpec> analyzeSpec(func::FuncOp fn) {
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);
  auto shapeError = [&]() {
    return fn.emitError("kernel-spec function @")
           << fn.getSymName()
           << " must hold one coat.quantize, coat.dequantize or coat.absmax "
              "(or a coat.quantize with a scale and a coat.transpose of it, "
              "or a coat.dequantize and a coat.quantize of it) and return "
              "its results (or only the transposed copy)";
  };
  // The second op of a pair reads the first's result.
  for (Operation *op : ops)
    for (Value operand : op->getOperands())
      if (!isa<BlockArgument>(operand) &&
          !(op != ops.front() && operand.getDefiningOp() == ops.front()))
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
  if (ops.size() == 2 && isa<DequantizeOp>(ops[0]))
    return analyzeRequantize(fn, cast<DequantizeOp>(ops[0]), ops[1], ret);
  if (ops.size() == 2) {
    auto q = dyn_cast<QuantizeOp>(ops[0]);
    auto t = dyn_cast<TransposeOp>(ops[1]);
    if (!q || !t || t.getInput() != q.getResult())
      return shapeError();
    bool both = ret.getNumOperands() == 2 &&
                ret.getOperand(0) == q.getResult() &&
                ret.getOperand(1) == t.getResult();
    bool transposedOnly =
        ret.getNumOperands() == 1 && ret.getOperand(0) == t.getResult();
    if (!both && !transposedOnly)
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
    spec.rowMajorCodes = both;
    if (!q.getScale()) {
      if (rt.getScalingValue().kind != ::coat::ScalingKind::PerBlock)
        return q.emitError("quantize+transpose kernels take a given "
                           "per-tensor scale (coat.quantize ... scale %s) "
                           "or quantize per_block<BxB>");
      if (transposedOnly)
        return fn.emitError("kernel-spec function @")
               << fn.getSymName()
               << ": a per_block<BxB> quantize + transpose kernel writes "
                  "both layouts; return the quantized tensor too";
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

} // namespace

bool QuantizeLowering::isSpecOp(Operation *op) const {
  return isa<QuantizeOp, DequantizeOp, AbsMaxOp>(op);
}

/// Kernel-spec functions are those holding one of our ops and no other
/// coat op: maxima in a producer's epilogue (`coat.absmax ... epilogue`)
/// belong to the producer's kernel, which other lowerings own.
bool QuantizeLowering::takesSpec(func::FuncOp fn) const {
  auto foreign = [](Operation *op) {
    return !isa<QuantizeOp, DequantizeOp, AbsMaxOp, TransposeOp>(op) &&
           isa_and_nonnull<CoatDialect>(op->getDialect());
  };
  return !fn.walk([&](Operation *op) {
              return foreign(op) ? WalkResult::interrupt()
                                 : WalkResult::advance();
            }).wasInterrupted();
}

LogicalResult QuantizeLowering::checkOptions(Operation *anchor) const {
  if (failed(checkMinCtasOption(anchor, "tile-min-ctas", tileMinCtas,
                                "coat-lower-activations: ")) ||
      failed(checkMinCtasOption(anchor, "flat-min-ctas", flatMinCtas,
                                "coat-lower-activations: ")))
    return failure();
  if (tilesPerBlock < 0 || tilesPerBlock > 64)
    return anchor->emitError("coat-lower-activations: tiles-per-block must "
                              "be 0 (by tile size) or in [1, 64], got ")
           << tilesPerBlock;
  return success();
}

FailureOr<ActPlan> QuantizeLowering::analyze(func::FuncOp fn) const {
  FailureOr<ActSpec> analyzed = analyzeSpec(fn);
  if (failed(analyzed))
    return failure();
  const ActSpec &spec = *analyzed;
  Operation *anchor = &fn.getBody().front().front();
  // The widest element a flat lane moves (a requantize moves only codes).
  int64_t hpBytes = spec.kind == ActKind::Requantize
                        ? 1
                        : spec.hpType.getIntOrFloatBitWidth() / 8;

  // Flat kernels: E elements per lane, L lanes per group.
  FlatShape flat{1, 1, 1};
  // The default tile edge: 128 for f32 inputs (quantize+transpose 1.03-1.06x
  // over 64 on the H100), 64 for 16-bit ones (128 ran at 0.88-0.92x).
  int64_t tileEdge = tile != 0 ? int64_t(tile) : (hpBytes >= 4 ? 128 : 64);
  auto checkThreads = [&](StringRef name, int64_t v) -> LogicalResult {
    if (v > 0 && v % 32 == 0 && v <= 1024)
      return success();
    return anchor->emitError()
           << name << " must be a multiple of 32 in [32, 1024], got " << v;
  };
  if (failed(checkThreads("block-size", blockSize)) ||
      (tileBlockSize != 0 &&
       failed(checkThreads("tile-block-size", tileBlockSize))))
    return failure();
  int64_t edge = spec.blocked() ? spec.blockEdge : tileEdge;
  // A tile kernel holds its tile in registers and synchronizes the block
  // between loading and storing it. By default (0) tiles of 16 KiB or more
  // are taken two at a time with the second's loads in flight during the
  // first's barrier, by at least one thread per 128 bytes of a tile (f32
  // 128x128 tiles: 512 threads, not ~190 registers at 256). Smaller tiles
  // are taken one at a time by one thread per 64 bytes (bf16 64x64: 128
  // threads, four 16-byte loads each), so that more blocks, each a tile in
  // flight, fit a multiprocessor (docs/benchmarks.md, activation tile A/B
  // and "Transposing quantizers: a thread per 64 bytes").
  int64_t tileBytes = edge * edge * hpBytes;
  bool largeTile = tileBytes >= 16 * 1024;
  int64_t threads = blockSize;
  if (spec.tiled())
    threads = tileBlockSize != 0 ? int64_t(tileBlockSize)
              : largeTile ? std::clamp<int64_t>(tileBytes / 128, blockSize, 1024)
                          : std::clamp<int64_t>(tileBytes / 64, 32, 1024);
  int64_t tileShare = tilesPerBlock != 0 ? int64_t(tilesPerBlock)
                                          : (largeTile ? 2 : 1);
  TileShape tiles{edge, threads, 16 / hpBytes, tileShare};
  int64_t elementsPerBlock = 0;
  if (spec.tiled()) {
    if (tileEdge != 32 && tileEdge != 64 && tileEdge != 128)
      return anchor->emitError("tile must be 32, 64 or 128, got ")
             << tileEdge;
    elementsPerBlock = tiles.tile * tiles.tile * tiles.tilesPerBlock;
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
    if (!onGpu()) {
      // The CPU twin holds a whole group (or 16 elements) per iteration.
      e = spec.grouped() ? spec.groupSize : 16;
      g = e;
    }
    flat = {e, g / e, g};
    elementsPerBlock = blockSize * e;
  }
  return ActPlan{spec, flat, tiles, elementsPerBlock, threads};
}

SmallVector<KernelDecl> QuantizeLowering::declare(func::FuncOp fn,
                                                  const ActPlan &plan) const {
  MLIRContext *ctx = fn.getContext();
  const ActSpec &spec = plan.spec;
  KernelDecl kernel{fn.getSymName().str(), buildAbi(ctx, spec), plan.threads,
                    {}};
  // Tile kernels: the codes tile as 32-bit words (transposed kinds), the
  // per-warp block maxima (per_block kinds).
  if (spec.kind == ActKind::QuantizeTranspose)
    kernel.workgroup.push_back(workgroupBuffer(
        {plan.tiles.tile, plan.tiles.tile / 4}, IntegerType::get(ctx, 32)));
  if (spec.tiled() && spec.blocked())
    kernel.workgroup.push_back(
        workgroupBuffer({plan.threads / 32}, Float32Type::get(ctx)));
  return {kernel};
}

/// analyze() accepted): the input, the result's parts, the shape scalars.
SpecBindings QuantizeLowering::bindings(func::FuncOp fn,
                                        const ActPlan &) const {
  SpecRefs s(fn);
  auto ops = fn.getBody().front().without_terminator();
  Operation *op = &*ops.begin();
  SpecBindings binds;
  Value matrix; // the 2-D tensor whose shape gives rows and cols
  if (auto q = dyn_cast<QuantizeOp>(op)) {
    matrix = q.getInput();
    binds["input"] = {s.ref(q.getInput())};
    // A transposed-only spec does not return the row-major codes.
    if (!s.ref(q.getResult()).empty()) {
      binds["codes"] = {s.ref(q.getResult(), "codes")};
      binds["scale"] = {s.ref(q.getResult(), "scale")};
    }
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
  } else if (auto d = dyn_cast<DequantizeOp>(op);
             d && std::next(ops.begin()) != ops.end()) {
    auto q = cast<QuantizeOp>(*std::next(ops.begin()));
    matrix = d.getInput();
    binds["input"] = {s.ref(d.getInput(), "codes")};
    binds["input_scale"] = {s.ref(d.getInput(), "scale")};
    binds["scale"] = {s.ref(q.getScale()), s.ref(q.getResult(), "scale")};
    binds["codes"] = {s.ref(q.getResult(), "codes")};
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
  return binds;
}

DictionaryAttr QuantizeLowering::record(const ActPlan &plan,
                                        const KernelDecl &decl,
                                        unsigned) const {
  return buildManifestRecord(
      plan.spec.hpType.getContext(), decl.name, plan.spec, decl.abi,
      onGpu() ? std::optional<int64_t>(plan.threads) : std::nullopt,
      plan.elementsPerBlock, plan.tiles.tile);
}
