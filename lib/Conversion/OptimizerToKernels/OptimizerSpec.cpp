//===- OptimizerSpec.cpp - what an adamw_step kernel spec means -----------===//
//
// The checks of a kernel-spec function around coat.adamw_step, the launch
// shape of its kernel, the argument ABI of docs/manifest.md and the
// manifest record.
//
//===----------------------------------------------------------------------===//

#include "Optimizer.h"

#include "coat/Numerics/StochasticRounding.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace mlir::coat;

namespace {

/// Argument types, names and manifest records in ABI order.
SmallVector<AbiArg> buildAbi(MLIRContext *ctx, const AdamWKernelSpec &spec) {
  Type f32 = Float32Type::get(ctx);
  SmallVector<AbiArg> abi;
  abi.push_back({"param", abiBuffer(spec.paramType),
                 manifestDtype(spec.paramType), "n"});
  abi.push_back({"grad", abiBuffer(spec.gradType),
                 manifestDtype(spec.gradType), "n"});
  if (spec.master)
    abi.push_back({"master", abiBuffer(f32), "f32", "n"});
  if (spec.gradScale)
    abi.push_back({"grad_scale", abiBuffer(f32), "f32", "1"});
  for (const MomentSpec *mom : {&spec.m, &spec.v}) {
    std::string p = mom->name.str();
    abi.push_back({p + "_codes", abiBuffer(getFp8Type(ctx, mom->format)),
                   ::coat::getFp8Traits(mom->format).name, "n"});
    abi.push_back({p + "_scale", abiBuffer(f32), "f32", "groups"});
    if (mom->expanded) {
      abi.push_back({p + "_k", abiBuffer(f32), "f32", "groups"});
      abi.push_back({p + "_c", abiBuffer(f32), "f32", "groups"});
    }
  }
  abi.push_back({"n", IntegerType::get(ctx, 64), "i64", ""});
  for (const char *s :
       {"step", "lr", "beta1", "beta2", "eps", "weight_decay"})
    abi.push_back({s, f32, "f32", ""});
  if (spec.stochastic())
    abi.push_back({"seed", IntegerType::get(ctx, 64), "i64", ""});
  return abi;
}

DictionaryAttr buildManifestRecord(MLIRContext *ctx, StringRef name,
                                   const AdamWKernelSpec &spec,
                                   ArrayRef<AbiArg> abi, bool gpu) {
  Builder b(ctx);
  auto str = [&](StringRef s) { return b.getStringAttr(s); };
  auto moment = [&](const MomentSpec &mom) {
    return b.getDictionaryAttr(
        {b.getNamedAttr("format", str(::coat::getFp8Traits(mom.format).name)),
         b.getNamedAttr("expand", b.getBoolAttr(mom.expanded)),
         b.getNamedAttr("fp8max",
                        b.getF64FloatAttr(
                            ::coat::getFp8Traits(mom.format).maxFinite))});
  };
  SmallVector<NamedAttribute> config = {
      b.getNamedAttr("param", str(manifestDtype(spec.paramType))),
      b.getNamedAttr("grad", str(manifestDtype(spec.gradType))),
      b.getNamedAttr("master", b.getBoolAttr(spec.master)),
      b.getNamedAttr("m", moment(spec.m)),
      b.getNamedAttr("v", moment(spec.v)),
      b.getNamedAttr("group_size", b.getI64IntegerAttr(spec.groupSize)),
      b.getNamedAttr("mode", str(stringifyOptimizerMode(spec.mode))),
      b.getNamedAttr("expand_min", b.getI64IntegerAttr(spec.expandMin)),
      b.getNamedAttr("max_k", b.getF64FloatAttr(spec.maxK)),
      b.getNamedAttr("stochastic_param",
                     b.getBoolAttr(spec.stochasticParam)),
      b.getNamedAttr("stochastic_moments",
                     b.getBoolAttr(spec.stochasticMoments)),
      b.getNamedAttr("grad_scale", b.getBoolAttr(spec.gradScale)),
      b.getNamedAttr("soft_exp2",
                     str(spec.softExp2M && spec.softExp2V ? "both"
                         : spec.softExp2M                 ? "m"
                         : spec.softExp2V                 ? "v"
                                                          : "none"))};
  std::optional<LaunchRule> launch;
  if (gpu)
    launch = LaunchRule{spec.blockSize, spec.blockSize /
                                            spec.lanesPerGroup *
                                            spec.groupSize *
                                            spec.lanesPerThread};
  return buildKernelRecord(ctx, name, "adamw_step", config, abi, launch);
}

/// Checks that `fn` is a kernel-spec function around `op`.
LogicalResult verifyKernelSpec(func::FuncOp fn, AdamWStepOp op) {
  Block &body = fn.getBody().front();
  auto ret = dyn_cast<func::ReturnOp>(body.getTerminator());
  if (body.getOperations().size() != 2 || !ret ||
      ret.getOperands() != op.getResults())
    return fn.emitError("kernel-spec function @")
           << fn.getSymName()
           << " must hold exactly one coat.adamw_step and return its "
              "results";
  return success();
}

} // namespace

FailureOr<AdamWKernelSpec> OptimizerLowering::analyze(func::FuncOp fn) const {
  AdamWStepOp op;
  fn.walk([&](AdamWStepOp found) {
    op = found;
    return WalkResult::interrupt();
  });
  if (failed(verifyKernelSpec(fn, op)))
    return failure();
  QTensorType mType = op.getM().getType(), vType = op.getV().getType();
  AdamWKernelSpec spec{
      cast<ShapedType>(op.getParam().getType()).getElementType(),
      cast<ShapedType>(op.getGrad().getType()).getElementType(),
      {mType.getFormat(), mType.getExpanded(), /*isSigned=*/true, "m"},
      {vType.getFormat(), vType.getExpanded(), /*isSigned=*/false, "v"},
      mType.getScalingValue().groupSize,
      static_cast<int64_t>(op.getExpandMin()),
      op.getMaxK().convertToFloat(),
      op.getMode(),
      /*elementsPerLane=*/0,
      /*lanesPerGroup=*/1,
      /*blockSize=*/1,
      /*lanesPerThread=*/1};
  spec.stochasticParam = op.getStochasticParam();
  spec.stochasticMoments = op.getStochasticMoments();
  spec.gradScale = bool(op.getGradScale());
  spec.master = bool(op.getMaster());
  spec.elementsPerLane = spec.groupSize;
  if (!onGpu())
    return spec;
  // Unset: 16 elements per thread, or more where a group needs it (<= 32
  // lanes). Against 8, it halves the per-lane share of the step (the
  // dequantization constants, the group butterflies, the new metadata):
  // on the H200 14% less time for the bf16 step and 12-19% for the
  // stochastic-rounding steps, 1-5% more for the f32 round-to-nearest steps
  // (docs/benchmarks.md).
  int64_t e = elementsPerThread > 0
                  ? elementsPerThread
                  : std::min<int64_t>(spec.groupSize,
                                      std::max<int64_t>(16, spec.groupSize / 32));
  if (!llvm::isPowerOf2_64(e) || e > spec.groupSize || spec.groupSize / e > 32)
    return op.emitError("elements-per-thread=")
           << e << " does not fit group size " << spec.groupSize
           << " (need a power of two with group_size/E <= 32)";
  // A lane draws whole blocks of random words (StochasticRounding.h).
  if (spec.stochastic() && e % ::coat::kRandomBlockElements != 0)
    return op.emitError("elements-per-thread=")
           << e << " is below the " << ::coat::kRandomBlockElements
           << " elements that share a random word; stochastic rounding "
              "needs a multiple of them";
  if (blockSize <= 0 || blockSize % 32 != 0 || blockSize > 1024)
    return op.emitError("block-size must be a multiple of 32 in "
                        "[32, 1024], got ")
           << blockSize;
  // The cap keeps the launch rule's elements_per_block far from overflow.
  if (lanesPerThread < 1 || lanesPerThread > 1024)
    return op.emitError("lanes-per-thread must be in [1, 1024], got ")
           << lanesPerThread;
  if (failed(checkMinCtasOption(op, "min-ctas", minCtas)) ||
      failed(checkMinCtasOption(op, "bf16-min-ctas", bf16MinCtas)))
    return failure();
  spec.minCtas =
      spec.paramType.isBF16() && bf16MinCtas != 0 ? bf16MinCtas : minCtas;
  spec.elementsPerLane = e;
  spec.lanesPerGroup = spec.groupSize / e;
  // Elsewhere the option has nothing to split: the two moments' metadata
  // differ in kind, or a lane is alone in its group.
  spec.splitMetadata = splitMetadata && spec.mode == OptimizerMode::fixed &&
                       spec.m.expanded && spec.v.expanded &&
                       spec.lanesPerGroup >= 2;
  if (softExp2 != "none" && softExp2 != "m" && softExp2 != "v" &&
      softExp2 != "both")
    return op.emitError("soft-exp2 must be none, m, v or both, got '")
           << softExp2 << "'";
  // Only the GPU's fixed-mode requantization of an expanded moment has an
  // ex2 to move; elsewhere the option asks nothing.
  bool soft = onGpu() && spec.mode == OptimizerMode::fixed;
  spec.softExp2M = soft && spec.m.expanded &&
                   (softExp2 == "m" || softExp2 == "both");
  spec.softExp2V = soft && spec.v.expanded &&
                   (softExp2 == "v" || softExp2 == "both");
  spec.blockSize = blockSize;
  spec.lanesPerThread = lanesPerThread;
  return spec;
}

SmallVector<KernelDecl>
OptimizerLowering::declare(func::FuncOp fn,
                           const AdamWKernelSpec &spec) const {
  KernelDecl decl;
  decl.name = fn.getSymName().str();
  decl.abi = buildAbi(fn.getContext(), spec);
  decl.blockSize = spec.blockSize;
  return {decl};
}

DictionaryAttr OptimizerLowering::record(const AdamWKernelSpec &spec,
                                         const KernelDecl &decl,
                                         unsigned) const {
  return buildManifestRecord(spec.paramType.getContext(), decl.name,
                             spec, decl.abi, onGpu());
}
