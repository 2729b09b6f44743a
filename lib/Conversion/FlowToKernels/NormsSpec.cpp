//===- NormsSpec.cpp - what a norm kernel spec means ----------------------===//
//
// Checks a kernel-spec function holding one coat.rmsnorm, coat.layernorm
// (perhaps with epilogue maxima) or their _grad ops, picks how the GPU
// kernel spreads a row over threads, and declares the row kernel and, for a
// backward with dweight, the column-sum kernel: ABI, bindings, records.
//
//===----------------------------------------------------------------------===//

#include "Norms.h"

#include "coat/Conversion/GroupKernel.h"
#include "coat/Dialect/CoatDialect.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::coat;

namespace {

/// The column-sum kernels are named after the row kernel.
constexpr StringLiteral kColumnsSuffix = "_columns";
constexpr StringLiteral kReduceSuffix = "_reduce";

/// The manifest's `config.column_sums` (docs/manifest.md).
StringRef columnSumsName(ColumnSums sums) {
  switch (sums) {
  case ColumnSums::Fused:
    return "fused";
  case ColumnSums::Shared:
    return "shared";
  case ColumnSums::Separate:
    return "separate";
  case ColumnSums::None:
    break;
  }
  llvm_unreachable("a backward without column sums records none");
}

//===----------------------------------------------------------------------===//
// ABI
//===----------------------------------------------------------------------===//

AbiArg buf(StringRef name, Type logical, StringRef extent) {
  return AbiArg{name.str(), abiBuffer(logical), manifestDtype(logical),
                extent.str()};
}

AbiArg i64Scalar(MLIRContext *ctx, StringRef name) {
  return AbiArg{name.str(), IntegerType::get(ctx, 64), "i64", ""};
}

/// The 1xG FP8 input every kernel that reads x takes first.
SmallVector<AbiArg> inputAbi(MLIRContext *ctx, const NormSpec &s) {
  return {buf("x_codes", getFp8Type(ctx, s.format), "n"),
          buf("x_scale", s.scaleType, "groups")};
}

/// The f32 workspace rows the column sums write (`_reduce` reads them).
void appendWorkspaces(MLIRContext *ctx, const NormSpec &s,
                      SmallVector<AbiArg> &abi) {
  Type f32 = Float32Type::get(ctx);
  abi.push_back(buf("dweight_partial", f32, "partials*cols"));
  if (s.hasBias)
    abi.push_back(buf("dbias_partial", f32, "partials*cols"));
}

SmallVector<AbiArg> buildRowAbi(MLIRContext *ctx, const NormPlan &plan) {
  const NormSpec &s = plan.spec;
  Type f32 = Float32Type::get(ctx);
  Type i32 = IntegerType::get(ctx, 32);
  SmallVector<AbiArg> abi = inputAbi(ctx, s);
  if (!s.backward) {
    if (s.hasWeight)
      abi.push_back(buf("weight", s.weightType, "cols"));
    if (s.hasBias)
      abi.push_back(buf("bias", s.weightType, "cols"));
    abi.push_back(buf("y", s.outType, "n"));
    if (s.flagOut)
      abi.push_back(buf(finiteFlagArgName("y"), i32, "1"));
    if (s.hasMean())
      abi.push_back(buf("mean", f32, "rows"));
    abi.push_back(buf("rstd", f32, "rows"));
    if (s.epilogueMax)
      abi.push_back(buf("absmax", f32, "groups"));
  } else {
    if (s.hasWeight)
      abi.push_back(buf("weight", s.weightType, "cols"));
    if (s.hasMean())
      abi.push_back(buf("mean", f32, "rows"));
    abi.push_back(buf("rstd", f32, "rows"));
    abi.push_back(buf("dy", s.gradType, "n"));
    abi.push_back(buf("dx", s.outType, "n"));
    if (s.flagOut)
      abi.push_back(buf(finiteFlagArgName("dx"), i32, "1"));
    if (s.epilogueMax)
      abi.push_back(buf("absmax", f32, "groups"));
    if (plan.sumsInRowKernel())
      appendWorkspaces(ctx, s, abi);
  }
  abi.push_back(i64Scalar(ctx, "rows"));
  abi.push_back(i64Scalar(ctx, "cols"));
  if (plan.sumsInRowKernel())
    abi.push_back(i64Scalar(ctx, "partials"));
  return abi;
}

/// `<name>_columns`: what x-hat needs, dy, and the workspace rows.
SmallVector<AbiArg> buildColumnsAbi(MLIRContext *ctx, const NormSpec &s) {
  Type f32 = Float32Type::get(ctx);
  SmallVector<AbiArg> abi = inputAbi(ctx, s);
  if (s.hasMean())
    abi.push_back(buf("mean", f32, "rows"));
  abi.push_back(buf("rstd", f32, "rows"));
  abi.push_back(buf("dy", s.gradType, "n"));
  appendWorkspaces(ctx, s, abi);
  for (StringRef name : {"rows", "cols", "partials"})
    abi.push_back(i64Scalar(ctx, name));
  return abi;
}

SmallVector<AbiArg> buildReduceAbi(MLIRContext *ctx, const NormSpec &s) {
  Type f32 = Float32Type::get(ctx);
  Type i32 = IntegerType::get(ctx, 32);
  SmallVector<AbiArg> abi = {buf("dweight_partial", f32, "partials*cols"),
                             buf("dweight", s.weightType, "cols")};
  if (s.flagDweight)
    abi.push_back(buf(finiteFlagArgName("dweight"), i32, "1"));
  if (s.hasBias) {
    abi.push_back(buf("dbias_partial", f32, "partials*cols"));
    abi.push_back(buf("dbias", s.weightType, "cols"));
    if (s.flagDbias)
      abi.push_back(buf(finiteFlagArgName("dbias"), i32, "1"));
  }
  abi.push_back(i64Scalar(ctx, "cols"));
  abi.push_back(i64Scalar(ctx, "partials"));
  return abi;
}

/// The manifest's `config` of the row kernel.
SmallVector<NamedAttribute> rowConfig(MLIRContext *ctx, const NormPlan &plan) {
  const NormSpec &spec = plan.spec;
  const TeamShape &team = plan.team;
  Builder b(ctx);
  auto str = [&](StringRef s) { return b.getStringAttr(s); };
  Type fp8 = getFp8Type(ctx, spec.format);
  SmallVector<NamedAttribute> c = {
      b.getNamedAttr("norm", str(spec.kind == NormKind::RMS ? "rms" : "layer")),
      b.getNamedAttr("input", str(manifestDtype(fp8))),
      b.getNamedAttr("scale", str(manifestDtype(spec.scaleType))),
      b.getNamedAttr("scaling", str("per_group")),
      b.getNamedAttr("group_size", b.getI64IntegerAttr(spec.groupSize)),
      b.getNamedAttr(spec.backward ? "dx" : "output",
                     str(manifestDtype(spec.outType))),
      b.getNamedAttr("eps", b.getF64FloatAttr(spec.eps)),
      b.getNamedAttr("max_cols", b.getI64IntegerAttr(team.maxCols)),
      b.getNamedAttr("threads_per_row",
                     b.getI64IntegerAttr(team.threadsPerRow)),
      b.getNamedAttr("lane_elements", b.getI64IntegerAttr(team.laneElements)),
      b.getNamedAttr("rows_per_block",
                     b.getI64IntegerAttr(team.teamsPerBlock()))};
  if (spec.hasWeight)
    c.push_back(b.getNamedAttr("weight", str(manifestDtype(spec.weightType))));
  c.push_back(b.getNamedAttr("bias", b.getBoolAttr(spec.hasBias)));
  if (spec.backward)
    c.push_back(b.getNamedAttr("grad", str(manifestDtype(spec.gradType))));
  if (plan.columnSums())
    c.push_back(b.getNamedAttr("column_sums", str(columnSumsName(plan.sums))));
  c.push_back(
      b.getNamedAttr("epilogue_absmax", b.getBoolAttr(spec.epilogueMax)));
  return c;
}

/// The input of every norm kernel: 1xG FP8 with power-of-two G.
LogicalResult checkInput(Operation *op, Value input, NormSpec &spec) {
  auto qt = dyn_cast<QTensorType>(input.getType());
  if (!qt)
    return op->emitError("norm kernels take a resolved !coat.qtensor input "
                         "(run coat-mixed-granularity first), got ")
           << input.getType();
  if (qt.getShape().size() != 2)
    return op->emitError("norm kernels take 2-D [rows, cols] tensors, got ")
           << input.getType();
  ::coat::Scaling scaling = qt.getScalingValue();
  if (scaling.kind != ::coat::ScalingKind::PerGroup || qt.getExpanded())
    return op->emitError("norm kernels need a per_group<G> input (1xG FP8 "
                         "groups along cols), got ")
           << input.getType();
  if (!llvm::isPowerOf2_64(scaling.groupSize) || scaling.groupSize < 16 ||
      scaling.groupSize > 128)
    return op->emitError("group size ")
           << scaling.groupSize
           << " has no norm kernel: need a power of two in [16, 128]";
  spec.format = qt.getFormat();
  spec.scaleType = qt.getScaleType();
  spec.groupSize = scaling.groupSize;
  return success();
}

Type elementType(Value v) {
  return cast<ShapedType>(v.getType()).getElementType();
}

} // namespace

bool NormsLowering::isSpecOp(Operation *op) const {
  return isa<RMSNormOp, LayerNormOp, RMSNormGradOp, LayerNormGradOp>(op);
}

FailureOr<NormSpec> NormsLowering::analyzeNorm(func::FuncOp fn,
                                               int64_t &maxColsOut) const {
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);
  auto shapeError = [&] {
    return fn.emitError("kernel-spec function @")
           << fn.getSymName()
           << " must hold one coat.rmsnorm, coat.layernorm, "
              "coat.rmsnorm_grad or coat.layernorm_grad (optionally "
              "followed by a coat.absmax ... epilogue of its first result), "
              "and return all their results in order";
  };
  if (ops.empty() || ops.size() > 2)
    return shapeError();
  Operation *norm = ops[0];
  for (Value operand : norm->getOperands())
    if (!isa<BlockArgument>(operand))
      return norm->emitError("operands of a kernel-spec op must be function "
                             "arguments");
  SmallVector<Value> expected(norm->getResults());

  NormSpec spec;
  Value input;
  if (auto op = dyn_cast<RMSNormOp>(norm)) {
    if (op.getResultT() || isa<QTensorType>(op.getResult().getType()))
      return op.emitError("norm kernels write the unquantized values: the "
                          "result must be a bf16/f16/f32 tensor without a "
                          "transposed copy (run coat-group-scaling)");
    spec.kind = NormKind::RMS;
    spec.hasWeight = true;
    spec.weightType = elementType(op.getWeight());
    spec.eps = op.getEps().convertToFloat();
    input = op.getInput();
  } else if (auto op = dyn_cast<LayerNormOp>(norm)) {
    if (op.getResultT() || isa<QTensorType>(op.getResult().getType()))
      return op.emitError("norm kernels write the unquantized values: the "
                          "result must be a bf16/f16/f32 tensor without a "
                          "transposed copy (run coat-group-scaling)");
    spec.kind = NormKind::Layer;
    spec.hasWeight = static_cast<bool>(op.getWeight());
    spec.hasBias = static_cast<bool>(op.getBias());
    if (spec.hasBias && !spec.hasWeight)
      return op.emitError("a LayerNorm bias needs a weight");
    if (spec.hasWeight && spec.hasBias &&
        elementType(op.getWeight()) != elementType(op.getBias()))
      return op.emitError("weight and bias must have the same element type");
    if (spec.hasWeight)
      spec.weightType = elementType(op.getWeight());
    spec.eps = op.getEps().convertToFloat();
    input = op.getInput();
  } else if (auto op = dyn_cast<RMSNormGradOp>(norm)) {
    spec.kind = NormKind::RMS;
    spec.backward = true;
    spec.hasWeight = true;
    spec.weightType = elementType(op.getWeight());
    if (elementType(op.getDweight()) != spec.weightType)
      return op.emitError("dweight must have the weight's element type");
    spec.gradType = elementType(op.getGrad());
    input = op.getInput();
  } else if (auto op = dyn_cast<LayerNormGradOp>(norm)) {
    spec.kind = NormKind::Layer;
    spec.backward = true;
    spec.hasWeight = static_cast<bool>(op.getWeight());
    spec.hasBias = static_cast<bool>(op.getDbias());
    if (spec.hasWeight != static_cast<bool>(op.getDweight()))
      return op.emitError("an affine LayerNorm backward returns dweight (and "
                          "optionally dbias); a non-affine one neither");
    if (spec.hasWeight) {
      spec.weightType = elementType(op.getWeight());
      for (Value d : {op.getDweight(), op.getDbias()})
        if (d && elementType(d) != spec.weightType)
          return op.emitError("dweight/dbias must have the weight's element "
                              "type");
    }
    spec.gradType = elementType(op.getGrad());
    input = op.getInput();
  } else {
    return shapeError();
  }
  if (failed(checkInput(norm, input, spec)))
    return failure();
  Value out = norm->getResult(0);
  auto outType = dyn_cast<RankedTensorType>(out.getType());
  if (!outType)
    return norm->emitError("the first result must be a high-precision "
                           "tensor, got ")
           << out.getType();
  spec.outType = outType.getElementType();
  if (spec.backward && spec.outType != spec.gradType)
    return norm->emitError("dx must have the element type of dy");

  if (ops.size() == 2) {
    auto absmax = dyn_cast<AbsMaxOp>(ops[1]);
    if (!absmax || absmax.getInput() != out)
      return shapeError();
    if (!absmax.getEpilogue())
      return absmax.emitError("only a coat.absmax marked `epilogue` is fused "
                              "into the norm kernel");
    ::coat::Scaling s = absmax.getScaling().getValue();
    if (s.kind != ::coat::ScalingKind::PerGroup ||
        s.groupSize != spec.groupSize)
      return absmax.emitError("the fused partial maxima must use the input's "
                              "groups, per_group<")
             << spec.groupSize << ">";
    spec.epilogueMax = true;
    expected.push_back(absmax.getResult());
  }
  if (ValueRange(ret.getOperands()) != ValueRange(expected))
    return shapeError();
  // The norm's results come first, in order: y or dx, then dweight, dbias.
  auto flagged = [&](unsigned i) {
    return static_cast<bool>(fn.getResultAttr(i, kFiniteFlagAttr));
  };
  spec.flagOut = flagged(0);
  spec.flagDweight = spec.backward && spec.hasWeight && flagged(1);
  spec.flagDbias = spec.backward && spec.hasBias && flagged(2);

  // Columns a kernel must cover: a static cols extent, else the spec's
  // coat.max_cols attribute, else the pass option.
  int64_t staticCols = cast<ShapedType>(input.getType()).getShape()[1];
  maxColsOut = maxCols;
  if (auto attr = fn->getAttrOfType<IntegerAttr>("coat.max_cols"))
    maxColsOut = attr.getInt();
  if (!ShapedType::isDynamic(staticCols))
    maxColsOut = staticCols;
  if (maxColsOut <= 0 || maxColsOut % spec.groupSize != 0)
    return fn.emitError("max_cols must be a positive multiple of the group "
                        "size ")
           << spec.groupSize << ", got " << maxColsOut;
  return spec;
}


FailureOr<ColumnSums>
NormsLowering::chooseColumnSums(Operation *anchor, const NormSpec &spec,
                                int64_t maxColsValue) const {
  if (columnSums != "auto" && columnSums != "fused" && columnSums != "shared" &&
      columnSums != "separate")
    return anchor->emitError("column-sums must be auto, fused, shared or "
                             "separate, got '")
           << columnSums << "'";
  if (!spec.backward || !spec.hasWeight)
    return ColumnSums::None;
  if (columnSums == "fused")
    return ColumnSums::Fused;
  if (columnSums == "shared")
    return ColumnSums::Shared;
  if (columnSums == "separate")
    return ColumnSums::Separate;
  // Fused sums hold 16 f32 per slot and sum in registers, so a fused row
  // takes one slot per thread up to 512 threads, and more slots beyond.
  // Measured (H200, docs/benchmarks.md, norm backward): up to 256 threads
  // fused is faster (16384x4096: 57-62% of the copy bandwidth against
  // 48-53%); a 512-thread fused team has too few rows in flight and loses
  // to re-reading x and dy in `_columns` (8192x8192: 41-48% against
  // 49-54%), and both lose to sums in shared memory, which keep teams of
  // 256 (H100, 8192x8192: 71-82% against 55-58% separate); two slots hold
  // 32 accumulators, still faster fused, but with dbias 64 (128
  // registers, one CTA per multiprocessor: 23% against 42% separate at
  // 16384x11008), where shared sums would take 128 KiB a team.
  // Without dbias, shared sums with one group a thread in 8-element slots
  // (about 64 registers: four CTAs of 256 a multiprocessor, given a wave of
  // partials) beat fused ones from 4096 columns on (H100, 16384x4096:
  // 86% against 72-76%).
  int64_t groups = maxColsValue / spec.groupSize;
  int64_t half = kFusedColumnSumsThreads / 2;
  if (groups > half / 2 && groups <= kFusedColumnSumsThreads && !spec.hasBias)
    return ColumnSums::Shared;
  if (groups > half && groups <= kFusedColumnSumsThreads)
    return ColumnSums::Shared;
  if (groups > kFusedColumnSumsThreads && spec.hasBias)
    return ColumnSums::Separate;
  return ColumnSums::Fused;
}

FailureOr<bool> NormsLowering::choosePrefetch(Operation *anchor,
                                              const NormSpec &spec,
                                              ColumnSums sums) const {
  if (rowPrefetch != "auto" && rowPrefetch != "true" && rowPrefetch != "false")
    return anchor->emitError("row-prefetch must be auto, true or false, got '")
           << rowPrefetch << "'";
  // Only GPU teams that loop over rows have a next row to fetch (the CPU
  // twin has nothing to hide).
  bool loopsOverRows = sums == ColumnSums::Fused || sums == ColumnSums::Shared;
  if (rowPrefetch == "false" || !onGpu() || !spec.backward || !loopsOverRows)
    return false;
  if (rowPrefetch == "true")
    return true;
  // Measured (H100, docs/benchmarks.md, row prefetch): the LayerNorm
  // backward with a weight and shared sums gains 6-8% at 4096 and 8192
  // columns; RMSNorm's loses 4-7%, the fused teams at 11008 columns lose,
  // and with dbias it ranges from +2% (4096, fused) to -18% (8192, shared).
  return spec.kind == NormKind::Layer && sums == ColumnSums::Shared &&
         !spec.hasBias;
}

FailureOr<TeamShape> NormsLowering::chooseTeam(Operation *anchor,
                                               const NormSpec &spec,
                                               ColumnSums sums,
                                               int64_t maxColsValue) const {
  if (blockSize < 32 || blockSize > 1024 || !llvm::isPowerOf2_64(blockSize))
    return anchor->emitError("block-size must be a power of two in "
                             "[32, 1024], got ")
           << static_cast<int64_t>(blockSize);
  if (groupsPerThread < 0 || groupsPerThread > 16)
    return anchor->emitError("groups-per-thread must be in [0, 16], got ")
           << static_cast<int64_t>(groupsPerThread);
  // Shared sums without dbias: narrower slots over more threads, about 64
  // registers (docs/benchmarks.md, shared column sums).
  bool sharedLean = sums == ColumnSums::Shared && !spec.hasBias;
  if (failed(checkMinCtasOption(anchor, "backward-min-ctas", backwardMinCtas)))
    return failure();
  int64_t groups = maxColsValue / spec.groupSize;
  int64_t threads = threadsPerRow;
  if (threads == 0) {
    // Fewest threads (a warp at least) that hold the row in
    // groups-per-thread slots each. Fused column sums carry 16 f32
    // accumulators per slot and sum besides the row's x, dy and w*dy
    // (~60 registers a slot with dbias): one slot per thread keeps it near
    // 128 registers without spills, up to 512 threads (a 1024-thread CTA
    // would have to fit in 64 registers); wider rows take more slots.
    bool fused = sums == ColumnSums::Fused;
    int64_t perThread = groupsPerThread != 0 ? int64_t(groupsPerThread)
                        : sharedLean         ? 1
                                             : 2;
    if (fused)
      perThread = 1;
    int64_t most = fused ? kFusedColumnSumsThreads : 1024;
    threads = 32;
    while (threads < most && threads * perThread < groups)
      threads *= 2;
  }
  if (threads < 32 || threads > 1024 || !llvm::isPowerOf2_64(threads))
    return anchor->emitError("threads-per-row must be 0 (auto) or a power "
                             "of two in [32, 1024], got ")
           << threads;
  // 8-element slots also where a team of 256 threads or more reads a
  // weight, forward or with its column sums in registers: its warps read
  // the wide operands contiguously, and a dynamic row narrower than the
  // team's slots (11008 of 16384 columns) idles fewer lanes (H100: affine
  // LayerNorm forward 1.12-1.39x, backward with fused dweight 1.12-1.28x;
  // without a weight it lost up to 0.86x, with teams of 128 threads up to
  // 0.79x, with shared sums and dbias 0.96x).
  bool narrowSlots =
      sharedLean || (spec.hasWeight && threads >= 256 &&
                     (!spec.backward || sums == ColumnSums::Fused));
  int64_t lanes = laneElements != 0 ? int64_t(laneElements)
                  : narrowSlots     ? std::min<int64_t>(8, spec.groupSize)
                                    : spec.groupSize;
  if (lanes < 4 || lanes > spec.groupSize || !llvm::isPowerOf2_64(lanes))
    return anchor->emitError("lane-elements must be 0 (auto) or a "
                             "power of two in [4, ")
           << spec.groupSize << "] (the group size), got " << lanes;
  TeamShape t;
  t.threadsPerRow = threads;
  t.laneElements = lanes;
  // Slots of V-element chunks: a row of 688 groups in 8-element chunks
  // over 512 threads takes 3, not the 4 of two whole groups.
  t.slots = llvm::divideCeil(groups * (spec.groupSize / lanes), threads);
  t.blockSize = std::max<int64_t>(blockSize, threads);
  t.maxCols = t.slots * threads * lanes;
  // Forward outputs wider than 16 bytes a group go through workgroup
  // memory (block * G elements, at most 32 KiB) to be stored coalesced;
  // narrower slots store contiguously by themselves.
  int64_t outBytes =
      laneStorageType(spec.outType).getIntOrFloatBitWidth() / 8;
  t.stageStores = stageStores && !spec.backward && lanes == spec.groupSize &&
                  spec.groupSize * outBytes > 16 &&
                  t.blockSize * spec.groupSize * outBytes <= 32 * 1024;
  if (sums == ColumnSums::Shared) {
    // Each team keeps its f32 sums of the row's columns in shared memory.
    t.sumCols = maxColsValue;
    t.sharedSums = spec.columnSumCount();
    t.maxCols = t.sumCols;
  }
  // Row prefetch where GPU teams loop over rows: two stages of each
  // thread's slots of x codes and dy.
  FailureOr<bool> prefetch = choosePrefetch(anchor, spec, sums);
  if (failed(prefetch))
    return failure();
  if (*prefetch) {
    int64_t gradBytes =
        laneStorageType(spec.gradType).getIntOrFloatBitWidth() / 8;
    t.threadCodeBytes = t.slots * lanes;
    t.threadGradBytes = t.slots * lanes * gradBytes;
  }
  // A CTA that cannot hold the shared memory of all its teams takes one.
  // Wider rows than shared sums cover are refused at launch (max_cols).
  if (t.sharedBytes() > kSharedBytesPerBlock)
    t.blockSize = threads;
  if (t.sharedBytes() > kSharedBytesPerBlock) {
    InFlightDiagnostic d = anchor->emitError("a row of ")
                           << maxColsValue << " columns needs "
                           << t.sharedBytes()
                           << " bytes of shared memory in a CTA of one team "
                              "(at most "
                           << kSharedBytesPerBlock << "):";
    if (t.sharedSums > 0)
      d << " use fused or separate column sums,";
    if (t.prefetchesRows())
      d << " drop row-prefetch,";
    return d << " or lower max-cols";
  }
  // Registers: the row's values per slot, and per-column sums backward.
  if (t.slots * lanes > 256)
    return anchor->emitError("a row of ")
           << maxColsValue << " columns needs " << t.slots * lanes
           << " values per thread with " << threads
           << " threads per row (limit 256): raise threads-per-row or lower "
              "max-cols";
  return t;
}

FailureOr<NormPlan> NormsLowering::analyze(func::FuncOp fn) const {
  int64_t cols = 0;
  FailureOr<NormSpec> spec = analyzeNorm(fn, cols);
  if (failed(spec))
    return failure();
  Operation *anchor = &fn.getBody().front().front();
  FailureOr<ColumnSums> sums = chooseColumnSums(anchor, *spec, cols);
  if (failed(sums))
    return failure();
  FailureOr<TeamShape> team = chooseTeam(anchor, *spec, *sums, cols);
  if (failed(team))
    return failure();
  return NormPlan{*spec, *team, *sums};
}

SmallVector<KernelDecl> NormsLowering::declare(func::FuncOp fn,
                                               const NormPlan &plan) const {
  MLIRContext *ctx = fn.getContext();
  const NormSpec &spec = plan.spec;
  const TeamShape &team = plan.team;
  std::string name = fn.getSymName().str();
  Type f32 = Float32Type::get(ctx);
  // The team sums go through one f32 per warp and sum; forward outputs
  // wider than 16 bytes a group are staged in workgroup memory.
  KernelDecl row{name, buildRowAbi(ctx, plan), team.blockSize, {}};
  if (!team.dynamicShared())
    row.workgroup.push_back(workgroupBuffer({team.teamSumFloats()}, f32));
  if (team.stageStores)
    row.workgroup.push_back(workgroupBuffer(
        {team.blockSize * spec.groupSize}, laneStorageType(spec.outType)));
  if (!plan.columnSums())
    return {row};
  // Column sums of the workspace: 32 columns per CTA, kReduceWarps warps
  // splitting the partials, combined in warp order.
  int64_t threads = 32 * kReduceWarps;
  KernelDecl reduce{name + kReduceSuffix.str(),
                    buildReduceAbi(ctx, spec),
                    threads,
                    {workgroupBuffer({threads}, f32)}};
  if (plan.sumsInRowKernel())
    return {row, reduce};
  KernelDecl columns{name + kColumnsSuffix.str(), buildColumnsAbi(ctx, spec),
                     kColumnsBlock, {}};
  return {row, columns, reduce};
}

SpecBindings NormsLowering::bindings(func::FuncOp fn, const NormPlan &) const {
  SpecRefs s(fn);
  Operation *op = &fn.getBody().front().front();
  SpecBindings binds;
  auto set = [&](StringRef name, Value v, StringRef part = "") {
    if (v)
      binds[name] = {s.ref(v, part)};
  };
  Value input = op->getOperand(0);
  set("x_codes", input, "codes");
  set("x_scale", input, "scale");
  TypeSwitch<Operation *>(op)
      .Case([&](RMSNormOp n) {
        set("weight", n.getWeight());
        set("y", n.getResult());
        set("rstd", n.getRstd());
      })
      .Case([&](LayerNormOp n) {
        set("weight", n.getWeight());
        set("bias", n.getBias());
        set("y", n.getResult());
        set("mean", n.getMean());
        set("rstd", n.getRstd());
      })
      .Case([&](RMSNormGradOp n) {
        set("weight", n.getWeight());
        set("rstd", n.getRstd());
        set("dy", n.getGrad());
        set("dx", n.getDx());
        set("dweight", n.getDweight());
      })
      .Case([&](LayerNormGradOp n) {
        set("weight", n.getWeight());
        set("mean", n.getMean());
        set("rstd", n.getRstd());
        set("dy", n.getGrad());
        set("dx", n.getDx());
        set("dweight", n.getDweight());
        set("dbias", n.getDbias());
      });
  if (auto absmax = dyn_cast<AbsMaxOp>(op->getNextNode()))
    set("absmax", absmax.getResult());
  // Finiteness flags of the results (bound only where the ABI has them).
  static constexpr StringRef kBackwardResults[] = {"dx", "dweight", "dbias"};
  static constexpr StringRef kForwardResults[] = {"y"};
  ArrayRef<StringRef> results = isa<RMSNormGradOp, LayerNormGradOp>(op)
                                    ? ArrayRef<StringRef>(kBackwardResults)
                                    : ArrayRef<StringRef>(kForwardResults);
  for (auto [i, name] : llvm::enumerate(results))
    if (i < op->getNumResults())
      binds[finiteFlagArgName(name)] = {"finite(" + s.ref(op->getResult(i)) + ")"};
  binds["dweight_partial"] = {kBindScratch};
  binds["dbias_partial"] = {kBindScratch};
  binds["rows"] = {s.rows(input)};
  binds["cols"] = {s.cols(input)};
  binds["partials"] = {kBindFree};
  return binds;
}

DictionaryAttr NormsLowering::record(const NormPlan &plan,
                                     const KernelDecl &decl,
                                     unsigned index) const {
  const NormSpec &spec = plan.spec;
  const TeamShape &team = plan.team;
  MLIRContext *ctx = spec.scaleType.getContext();
  NormPlan::Kernel kernel = plan.kernelAt(index);
  if (kernel == NormPlan::Kernel::Row) {
    std::optional<LaunchRule> launch;
    SmallVector<NamedAttribute> config = rowConfig(ctx, plan);
    if (onGpu()) {
      launch = LaunchRule{team.blockSize,
                          0,
                          team.sharedBytes(),
                          {{plan.sumsInRowKernel() ? "partials" : "rows",
                            team.teamsPerBlock()}}};
      // A GPU schedule fact: the CPU twin, whose record shares the
      // manifest entry, says nothing of it.
      if (plan.sumsInRowKernel())
        config.push_back(
            NamedAttribute(StringAttr::get(ctx, "row_prefetch"),
                           BoolAttr::get(ctx, team.prefetchesRows())));
    }
    return buildKernelRecord(ctx, decl.name, spec.opName(), config, decl.abi,
                             launch);
  }
  Builder cb(ctx);
  bool columns = kernel == NormPlan::Kernel::Columns;
  StringRef rowName = StringRef(decl.name).drop_back(
      columns ? kColumnsSuffix.size() : kReduceSuffix.size());
  if (columns) {
    // A thread per group (G columns) and partial: grid x over the
    // columns, y over the partials.
    SmallVector<NamedAttribute> cconfig = {
        cb.getNamedAttr("of", cb.getStringAttr(rowName)),
        cb.getNamedAttr("group_size", cb.getI64IntegerAttr(spec.groupSize)),
        cb.getNamedAttr("bias", cb.getBoolAttr(spec.hasBias))};
    std::optional<LaunchRule> launch;
    if (onGpu())
      launch = LaunchRule{decl.blockSize,
                          0,
                          0,
                          {{"cols", decl.blockSize * spec.groupSize},
                           {"partials", 1}}};
    return buildKernelRecord(ctx, decl.name, "norm_grad_columns", cconfig,
                             decl.abi, launch);
  }
  SmallVector<NamedAttribute> rconfig = {
      cb.getNamedAttr("of", cb.getStringAttr(rowName)),
      cb.getNamedAttr("dweight",
                      cb.getStringAttr(manifestDtype(spec.weightType))),
      cb.getNamedAttr("bias", cb.getBoolAttr(spec.hasBias))};
  std::optional<LaunchRule> launch;
  if (onGpu())
    launch = LaunchRule{decl.blockSize, 0, 0, {{"cols", 32}}};
  return buildKernelRecord(ctx, decl.name, "norm_grad_reduce", rconfig,
                           decl.abi, launch);
}
