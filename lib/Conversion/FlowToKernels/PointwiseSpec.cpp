//===- PointwiseSpec.cpp - what a pointwise kernel spec means -------------===//
//
// Checks a kernel-spec function holding one pointwise flow op (and epilogue
// maxima of its results) and lays out its kernel's ABI: operands, results,
// maxima, rows, cols. Groups are the flat groups of GroupLane
// (GroupKernel.h): G consecutive elements of the row-major tensor, which are
// its per_group<G> groups because G divides cols.
//
//===----------------------------------------------------------------------===//

#include "Pointwise.h"

#include "coat/Dialect/CoatDialect.h"

#include "llvm/ADT/DenseMap.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::coat;

namespace {

LogicalResult checkMatrix(Operation *op, Type t, StringRef what) {
  auto shaped = dyn_cast<ShapedType>(t);
  if (!shaped || !shaped.hasRank() || shaped.getRank() != 2)
    return op->emitError("pointwise kernels take 2-D [rows, cols] operands "
                         "and results; ")
           << what << " has type " << t;
  return success();
}

/// Records G of one grouped argument; all must agree.
LogicalResult useGroup(Operation *op, int64_t &groupSize, int64_t g,
                       StringRef what) {
  if (!llvm::isPowerOf2_64(g) || g > 512)
    return op->emitError("group size ")
           << g << " of " << what
           << " has no pointwise kernel: need a power of two <= 512";
  if (groupSize && groupSize != g)
    return op->emitError("all grouped operands, results and maxima of a "
                         "pointwise kernel must share one group size; ")
           << what << " has " << g << ", another has " << groupSize;
  groupSize = g;
  return success();
}

} // namespace

FailureOr<PointwiseSpec> PointwiseLowering::analyze(func::FuncOp fn) const {
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  Operation *op = body.empty() ? nullptr : &body.front();
  std::optional<PointwiseOpInfo> info =
      op && op != ret ? describePointwiseOp(op) : std::nullopt;
  if (!info)
    return fn.emitError("kernel-spec function @")
           << fn.getSymName() << " must start with a pointwise precision-flow "
           << "op (" << listPointwiseOps() << ")";
  PointwiseSpec spec;
  spec.info = *info;
  for (Value operand : op->getOperands())
    if (!isa<BlockArgument>(operand))
      return op->emitError("operands of a kernel-spec op must be function "
                           "arguments");
  if (!info->transposed.empty())
    return op->emitError("transposed FP8 copies need the per-tensor scale of "
                         "the whole result: run coat-group-scaling, then "
                         "lower its coat.quantize + coat.transpose with "
                         "coat-lower-activations");

  for (const NamedValue &in : info->operands) {
    KernelInput k;
    k.name = in.name.str();
    Type t = in.value.getType();
    if (isa<UnresolvedType>(t))
      return op->emitError("operand '")
             << in.name << "' is unresolved: run coat-mixed-granularity first";
    if (failed(checkMatrix(op, t, "operand '" + in.name.str() + "'")))
      return failure();
    if (auto q = dyn_cast<QTensorType>(t)) {
      if (q.getExpanded())
        return op->emitError("range-expanded operands have no pointwise "
                             "kernel");
      ::coat::Scaling s = q.getScalingValue();
      k.fp8 = true;
      k.type = q.getElementType();
      k.format = q.getFormat();
      k.scaleType = q.getScaleType();
      if (s.kind != ::coat::ScalingKind::PerGroup)
        return op->emitError("operand '")
               << in.name << "': pointwise kernels read per_group<G> FP8, got "
               << t;
      if (failed(useGroup(op, spec.groupSize, s.groupSize,
                          "operand '" + in.name.str() + "'")))
        return failure();
    } else {
      k.type = cast<ShapedType>(t).getElementType();
    }
    k.table = in.table;
    spec.inputs.push_back(std::move(k));
  }
  // A rotary op writes over its input where the caller gives that buffer
  // up: the rotated heads only, the others already hold the result.
  if (info->rotary)
    if (auto arg = dyn_cast<BlockArgument>(info->operands.front().value))
      spec.inPlace = static_cast<bool>(
          fn.getArgAttr(arg.getArgNumber(), kWritableAttr));

  DenseMap<Value, unsigned> outputOf;
  for (auto [i, res] : llvm::enumerate(info->results)) {
    KernelOutput k;
    // In place, the result is the first operand's argument.
    k.name = i == 0 && spec.inPlace ? spec.inputs.front().name : res.name.str();
    k.mathIndex = i;
    Type t = res.value.getType();
    if (failed(checkMatrix(op, t, "result '" + res.name.str() + "'")))
      return failure();
    if (auto q = dyn_cast<QTensorType>(t)) {
      ::coat::Scaling s = q.getScalingValue();
      if (s.kind != ::coat::ScalingKind::PerGroup || q.getExpanded())
        return op->emitError("result '")
               << res.name
               << "': a pointwise kernel writes per_group<G> FP8 results "
                  "only; a per-tensor result needs the maximum of the whole "
                  "tensor: run coat-group-scaling, which returns the "
                  "unquantized values with coat.absmax ... epilogue maxima";
      if (failed(useGroup(op, spec.groupSize, s.groupSize,
                          "result '" + res.name.str() + "'")))
        return failure();
      k.fp8 = true;
      k.type = q.getElementType();
      k.format = q.getFormat();
      k.scaleType = q.getScaleType();
    } else {
      k.type = cast<ShapedType>(t).getElementType();
    }
    outputOf[res.value] = spec.outputs.size();
    spec.outputs.push_back(std::move(k));
  }

  // The epilogue maxima, then the return.
  SmallVector<Value> expectedReturn;
  for (const NamedValue &res : info->results)
    expectedReturn.push_back(res.value);
  SmallVector<std::pair<AbsMaxOp, unsigned>> maxima;
  for (Operation &other : llvm::make_range(std::next(op->getIterator()),
                                           ret->getIterator())) {
    auto a = dyn_cast<AbsMaxOp>(&other);
    if (!a)
      return other.emitError("a pointwise kernel spec holds one flow op and "
                             "coat.absmax ... epilogue ops on its results, "
                             "nothing else");
    auto it = outputOf.find(a.getInput());
    if (!a.getEpilogue() || it == outputOf.end())
      return a.emitError("only `coat.absmax ... epilogue` of a result of the "
                         "flow op fuses into a pointwise kernel");
    const KernelOutput &src = spec.outputs[it->second];
    if (src.fp8)
      return a.emitError("epilogue maxima are of high-precision results");
    ::coat::Scaling s = a.getScaling().getValue();
    if (s.kind != ::coat::ScalingKind::PerGroup)
      return a.emitError("epilogue maxima of a pointwise kernel are "
                         "per_group<G>");
    if (failed(useGroup(a, spec.groupSize, s.groupSize, "the maxima")))
      return failure();
    maxima.push_back({a, it->second});
    expectedReturn.push_back(a.getResult());
  }
  if (!llvm::equal(ret.getOperands(), expectedReturn))
    return ret.emitError("a pointwise kernel spec returns the flow op's "
                         "results, then its epilogue maxima, in order");
  if (info->rotary && spec.groupSize) {
    // A lane holds elements of both halves of a head: each half's run must
    // lie in one group, and a group's lanes in one warp.
    int64_t half = info->rotary->headDim / 2;
    if (half % spec.groupSize != 0)
      return maxima.front().first.emitError("epilogue maxima of a rotary "
                                            "kernel need groups inside a "
                                            "half head: group size ")
             << spec.groupSize << " does not divide head_dim / 2 = " << half;
    if (spec.groupSize / rotaryTiling(spec).lane.elementsPerLane > 32)
      return maxima.front().first.emitError("group size ")
             << spec.groupSize << " spans more than a warp of rotary lanes";
  }

  // The ABI: operands, results, maxima, rows, cols.
  MLIRContext *ctx = fn.getContext();
  SpecRefs refs(fn);
  auto add = [&](std::string name, Type logical, std::string extent,
                 std::vector<std::string> bind) {
    spec.abi.push_back({std::move(name), abiBuffer(logical),
                        manifestDtype(logical), std::move(extent),
                        std::move(bind)});
  };
  for (auto [i, k, in] : llvm::enumerate(spec.inputs, info->operands)) {
    std::vector<std::string> bind = {refs.ref(in.value, k.fp8 ? "codes" : "")};
    // In place, the first operand's buffer is also the result.
    if (i == 0 && spec.inPlace)
      bind.push_back(refs.ref(info->results.front().value));
    add(k.name, k.type,
        k.table ? "rows*" + std::to_string(info->rotary->headDim) : "n",
        std::move(bind));
    if (k.fp8)
      add(k.name + "_scale", k.scaleType, "groups",
          {refs.ref(in.value, "scale")});
  }
  for (auto [i, k, res] : llvm::enumerate(spec.outputs, info->results)) {
    if (i == 0 && spec.inPlace)
      continue;
    add(k.name, k.type, "n", {refs.ref(res.value, k.fp8 ? "codes" : "")});
    if (k.fp8)
      add(k.name + "_scale", k.scaleType, "groups",
          {refs.ref(res.value, "scale")});
  }
  for (auto [a, out] : maxima) {
    KernelOutput &k = spec.outputs[out];
    std::string name = k.name + "_absmax";
    if (!k.absmaxArgs.empty())
      name += std::to_string(k.absmaxArgs.size());
    k.absmaxArgs.push_back(name);
    add(name, Float32Type::get(ctx), "groups", {refs.ref(a.getResult())});
  }
  // Finiteness flags of the high-precision results the program returns
  // (the spec returns the op's results first, in order).
  Type i32 = IntegerType::get(ctx, 32);
  for (auto [i, k, res] : llvm::enumerate(spec.outputs, info->results)) {
    if (k.fp8 || !fn.getResultAttr(i, kFiniteFlagAttr))
      continue;
    k.finiteFlagArg = finiteFlagArgName(k.name);
    add(k.finiteFlagArg, i32, "1", {"finite(" + refs.ref(res.value) + ")"});
  }
  Type i64 = IntegerType::get(ctx, 64);
  Value matrix = info->operands.front().value;
  spec.abi.push_back({"rows", i64, "i64", "", {refs.rows(matrix)}});
  spec.abi.push_back({"cols", i64, "i64", "", {refs.cols(matrix)}});
  return spec;
}

RotaryTiling
PointwiseLowering::rotaryTiling(const PointwiseSpec &spec) const {
  const RotaryHeads &r = *spec.info.rotary;
  int64_t half = r.headDim / 2;
  int64_t g = spec.groupSize;
  int64_t bytes =
      std::max<int64_t>(1, spec.inputs.front().type.getIntOrFloatBitWidth() / 8);
  int64_t cap = onGpu() ? std::max<int64_t>(1, 16 / bytes) : 16;
  if (g)
    cap = onGpu() ? std::min(cap, g) : g;
  // The largest power of two up to `cap` that divides the half head (and
  // so, as G does, lies inside one group).
  int64_t e = 1;
  while (e * 2 <= cap && half % (e * 2) == 0)
    e *= 2;
  RotaryTiling t;
  t.lane = {e, g && onGpu() ? g / e : 1};
  t.chunks = half / e;
  t.lanesPerRow = spec.visitedHeads() * t.chunks;
  t.rowsPerBlock = 1;
  t.steps = 1;
  if (!onGpu())
    return t;
  // Whole rows a block: of the counts that fill `lanes-per-thread` sweeps
  // of the block at least, up to four times that, the one leaving the
  // fewest threads idle in its last sweep (at most 8 sweeps).
  int64_t first = std::max<int64_t>(1, blockSize * lanesPerThread /
                                           t.lanesPerRow);
  double best = 2;
  for (int64_t rows = first; rows <= 4 * first; ++rows) {
    int64_t lanes = rows * t.lanesPerRow;
    int64_t steps = llvm::divideCeil(lanes, blockSize);
    if (steps > 8 && rows > first)
      break;
    double idle = 1.0 - double(lanes) / double(steps * blockSize);
    if (idle < best - 1e-9) {
      best = idle;
      t.rowsPerBlock = rows;
      t.steps = steps;
    }
  }
  return t;
}

LaneShape PointwiseLowering::laneShape(const PointwiseSpec &spec) const {
  int64_t g = spec.groupSize;
  if (!onGpu())
    return {g ? g : 16, 1};
  LaneShape shape{g ? std::min<int64_t>(16, g) : 16, 1};
  if (g)
    shape.lanesPerGroup = g / shape.elementsPerLane;
  return shape;
}

SmallVector<KernelDecl>
PointwiseLowering::declare(func::FuncOp fn, const PointwiseSpec &spec) const {
  return {KernelDecl{fn.getSymName().str(), spec.abi, blockSize, {}}};
}

DictionaryAttr PointwiseLowering::record(const PointwiseSpec &spec,
                                         const KernelDecl &decl,
                                         unsigned) const {
  MLIRContext *ctx = spec.abi.front().type.getContext();
  Builder b(ctx);
  SmallVector<NamedAttribute> config;
  auto names = [&](auto &&range) {
    SmallVector<Attribute> out;
    for (const auto &k : range)
      out.push_back(b.getStringAttr(k.name));
    return b.getArrayAttr(out);
  };
  config.push_back(b.getNamedAttr("operands", names(spec.inputs)));
  config.push_back(b.getNamedAttr("results", names(spec.outputs)));
  if (spec.groupSize)
    config.push_back(
        b.getNamedAttr("group_size", b.getI64IntegerAttr(spec.groupSize)));
  // Scales the kernel derives: of its FP8 results, or of a value it
  // requantizes in registers.
  bool derivesScales = spec.hasFp8Output() || spec.info.requantized;
  if (derivesScales)
    config.push_back(b.getNamedAttr(
        "eps", b.getF64FloatAttr(::coat::kActivationScaleEps)));
  for (auto [key, value] : spec.info.configEntries)
    config.push_back(b.getNamedAttr(key, b.getStringAttr(value)));
  // Which formulas the special functions use (the tests' tolerances differ).
  if (spec.info.special)
    config.push_back(
        b.getNamedAttr("math", b.getStringAttr(exactMath ? "exact" : "fast")));
  if (spec.info.special && softExp2)
    config.push_back(b.getNamedAttr("ex2", b.getStringAttr("fma")));
  if (const std::optional<RotaryHeads> &r = spec.info.rotary) {
    config.push_back(
        b.getNamedAttr("head_dim", b.getI64IntegerAttr(r->headDim)));
    config.push_back(b.getNamedAttr("rotated_heads",
                                    b.getI64IntegerAttr(r->rotatedHeads)));
    // The row length is compiled in: launches with another are refused.
    config.push_back(
        b.getNamedAttr("cols", b.getI64IntegerAttr(r->heads * r->headDim)));
    config.push_back(b.getNamedAttr("in_place", b.getBoolAttr(spec.inPlace)));
  }
  if (derivesScales && scaleDivision(spec) == ScaleDivision::Reciprocal)
    config.push_back(
        b.getNamedAttr("division", b.getStringAttr("reciprocal")));
  std::optional<LaunchRule> launch;
  if (onGpu() && spec.info.rotary)
    launch = LaunchRule{blockSize, 0, 0,
                        {{"rows", rotaryTiling(spec).rowsPerBlock}}};
  else if (onGpu())
    launch = LaunchRule{blockSize, blockSize * lanesPerThread *
                                       laneShape(spec).elementsPerLane};
  return buildKernelRecord(ctx, decl.name, spec.info.opName, config, decl.abi,
                           launch);
}
