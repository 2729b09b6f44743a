//===- BiasGradSpec.cpp - what a bias-gradient kernel spec means ----------===//
//
// Checks a kernel-spec function holding one coat.bias_grad (and perhaps the
// 1xG maxima of its input) and declares its two kernels: ABI, bindings and
// manifest records.
//
//===----------------------------------------------------------------------===//

#include "BiasGrad.h"

#include "coat/Conversion/GroupKernel.h"
#include "coat/Numerics/ColumnSums.h"

using namespace mlir;
using namespace mlir::coat;

namespace {

constexpr StringLiteral kReduceSuffix = "_reduce";

AbiArg buf(StringRef name, Type logical, StringRef extent) {
  return AbiArg{name.str(), abiBuffer(logical), manifestDtype(logical),
                extent.str()};
}

AbiArg i64Scalar(MLIRContext *ctx, StringRef name) {
  return AbiArg{name.str(), IntegerType::get(ctx, 64), "i64", ""};
}

} // namespace

LogicalResult BiasGradLowering::checkOptions(Operation *anchor) const {
  if (blockSize < 32 || blockSize > 1024 || blockSize % 32 != 0)
    return anchor->emitError("coat-lower-bias-grad: block-size must be a "
                              "multiple of 32 in [32, 1024], got ")
           << blockSize;
  if (rowsPerPartial < 1)
    return anchor->emitError("coat-lower-bias-grad: rows-per-partial must be "
                              "positive, got ")
           << rowsPerPartial;
  if (rowsInFlight < 1 || rowsInFlight > 32)
    return anchor->emitError("coat-lower-bias-grad: rows-in-flight must be in "
                              "[1, 32], got ")
           << rowsInFlight;
  return success();
}

FailureOr<BiasGradPlan> BiasGradLowering::analyze(func::FuncOp fn) const {
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  BiasGradPlan plan{};
  for (Operation &op : body.without_terminator()) {
    if (auto g = dyn_cast<BiasGradOp>(op); g && !plan.op) {
      plan.op = g;
      continue;
    }
    if (auto a = dyn_cast<AbsMaxOp>(op); a && !plan.maxima) {
      plan.maxima = a;
      continue;
    }
    return op.emitError("a bias-gradient kernel holds one coat.bias_grad and "
                        "at most the 1xG maxima of its input, not another '")
           << op.getName() << "'";
  }
  if (!plan.op)
    return fn.emitError("kernel-spec function @")
           << fn.getSymName() << " holds no coat.bias_grad at its top level";
  Value dy = plan.op.getGrad();
  if (!isa<BlockArgument>(dy))
    return plan.op.emitError("the input of a bias-gradient kernel must be an "
                             "argument of its kernel-spec function");
  auto type = cast<RankedTensorType>(dy.getType());
  plan.gradType = type.getElementType();
  plan.dbiasType =
      cast<ShapedType>(plan.op.getDbias().getType()).getElementType();
  plan.laneElements =
      ::coat::columnSumLaneElements(plan.gradType.getIntOrFloatBitWidth() / 8);
  plan.groupSize = plan.laneElements;
  if (AbsMaxOp m = plan.maxima) {
    if (!plan.op.canFuseMaxima(m))
      return m.emitError("these maxima cannot share the bias-gradient kernel: "
                         "it takes per_group<G> maxima of its own input (not "
                         "epilogue ones) whose groups are 1, 2, 4, ... or 32 "
                         "of its 16-byte loads (")
             << plan.laneElements << " elements)";
    plan.groupSize = m.getScaling().getValue().groupSize;
  }
  // (Fused maxima groups are whole loads and divide the row.)
  int64_t cols = type.getDimSize(1);
  if (!ShapedType::isDynamic(cols) && cols % plan.laneElements != 0)
    return plan.op.emitError("the bias-gradient kernel reads whole 16-byte "
                             "loads of ")
           << plan.laneElements << " elements a row: the column count "
           << cols << " is not a multiple of " << plan.laneElements;
  for (auto [i, r] : llvm::enumerate(ret.getOperands()))
    if (r == plan.op.getDbias() && fn.getResultAttr(i, kFiniteFlagAttr))
      plan.flagDbias = true;
  SmallVector<Value> results = {plan.op.getDbias()};
  if (plan.maxima)
    results.push_back(plan.maxima.getResult());
  for (Value r : results)
    if (!llvm::is_contained(ret.getOperands(), r))
      return r.getDefiningOp()->emitError(
          "a bias-gradient kernel writes every result of its ops: the "
          "kernel-spec function must return this one");
  return plan;
}

SmallVector<KernelDecl> BiasGradLowering::declare(func::FuncOp fn,
                                                  const BiasGradPlan &plan) const {
  MLIRContext *ctx = fn.getContext();
  Type f32 = Float32Type::get(ctx);
  SmallVector<AbiArg> partial = {buf("dy", plan.gradType, "n")};
  if (plan.maxima)
    partial.push_back(buf("absmax", f32, "groups"));
  partial.push_back(buf("dbias_partial", f32, "partials*cols"));
  for (StringRef name : {"rows", "cols", "partials"})
    partial.push_back(i64Scalar(ctx, name));
  SmallVector<AbiArg> reduce = {buf("dbias_partial", f32, "partials*cols"),
                                buf("dbias", plan.dbiasType, "cols")};
  if (plan.flagDbias)
    reduce.push_back(buf(finiteFlagArgName("dbias"), IntegerType::get(ctx, 32), "1"));
  reduce.push_back(i64Scalar(ctx, "cols"));
  reduce.push_back(i64Scalar(ctx, "partials"));
  int64_t reduceThreads = kBiasGradReduceColumns * ::coat::kColumnSumStrides;
  std::string name = fn.getSymName().str();
  return {KernelDecl{name, partial, blockSize, {}},
          KernelDecl{name + kReduceSuffix.str(),
                     reduce,
                     reduceThreads,
                     {workgroupBuffer({reduceThreads}, f32)}}};
}

SpecBindings BiasGradLowering::bindings(func::FuncOp fn,
                                        const BiasGradPlan &plan) const {
  SpecRefs s(fn);
  Value dy = BiasGradOp(plan.op).getGrad();
  SpecBindings binds;
  binds["dy"] = {s.ref(dy)};
  binds["dbias"] = {s.ref(BiasGradOp(plan.op).getDbias())};
  binds[finiteFlagArgName("dbias")] = {
      "finite(" + s.ref(BiasGradOp(plan.op).getDbias()) + ")"};
  if (AbsMaxOp m = plan.maxima)
    binds["absmax"] = {s.ref(m.getResult())};
  binds["dbias_partial"] = {kBindScratch};
  binds["rows"] = {s.rows(dy)};
  binds["cols"] = {s.cols(dy)};
  // The order of the sums depends on the token count alone
  // (coat/Numerics/ColumnSums.h), so every GPU and the CPU twins agree.
  binds["partials"] = {"ceildiv(" + s.rows(dy) + "," +
                       std::to_string(rowsPerPartial) + ")"};
  return binds;
}

DictionaryAttr BiasGradLowering::record(const BiasGradPlan &plan,
                                        const KernelDecl &decl,
                                        unsigned index) const {
  MLIRContext *ctx = plan.gradType.getContext();
  Builder b(ctx);
  auto str = [&](StringRef v) { return b.getStringAttr(v); };
  auto named = [&](StringRef k, Attribute v) { return b.getNamedAttr(k, v); };
  std::optional<LaunchRule> launch;
  if (index == 0) {
    SmallVector<NamedAttribute> config = {
        named("grad", str(manifestDtype(plan.gradType))),
        named("dbias", str(manifestDtype(plan.dbiasType))),
        named("absmax", b.getBoolAttr(static_cast<bool>(plan.maxima))),
        named("group_size", b.getI64IntegerAttr(plan.groupSize)),
        named("lane_elements", b.getI64IntegerAttr(plan.laneElements)),
        named("rows_per_partial", b.getI64IntegerAttr(rowsPerPartial)),
        named("strides", b.getI64IntegerAttr(::coat::kColumnSumStrides))};
    // x over the partials (none for an empty batch: no launch), y over
    // the columns, a 16-byte load of a row per thread.
    if (onGpu()) {
      config.push_back(named("rows_in_flight", b.getI64IntegerAttr(rowsInFlight)));
      launch = LaunchRule{decl.blockSize,
                          0,
                          0,
                          {{"partials", 1},
                           {"cols", decl.blockSize * plan.laneElements}}};
    }
    return buildKernelRecord(ctx, decl.name, "bias_grad", config, decl.abi,
                             launch);
  }
  StringRef of = StringRef(decl.name).drop_back(kReduceSuffix.size());
  SmallVector<NamedAttribute> config = {
      named("of", str(of)), named("dbias", str(manifestDtype(plan.dbiasType))),
      named("strides", b.getI64IntegerAttr(::coat::kColumnSumStrides))};
  if (onGpu())
    launch = LaunchRule{decl.blockSize, 0, 0,
                        {{"cols", kBiasGradReduceColumns}}};
  return buildKernelRecord(ctx, decl.name, "bias_grad_reduce", config,
                           decl.abi, launch);
}
