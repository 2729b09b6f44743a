//===- CrossEntropySpec.cpp - what a cross-entropy kernel spec means ------===//
//
// Checks a kernel-spec function holding one coat.cross_entropy and declares
// its kernel: ABI, bindings and manifest record.
//
//===----------------------------------------------------------------------===//

#include "CrossEntropy.h"

#include "coat/Conversion/GroupKernel.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::coat;

int64_t mlir::coat::crossEntropyThreads(int64_t vocab) {
  int64_t perThread = llvm::divideCeil(llvm::divideCeil(vocab, 8), 8);
  return std::clamp<int64_t>(llvm::PowerOf2Ceil(perThread), 32, 1024);
}

LogicalResult CrossEntropyLowering::checkOptions(Operation *anchor) const {
  if (threads != 0 &&
      (threads < 32 || threads > 1024 || !llvm::isPowerOf2_64(threads)))
    return anchor->emitError("coat-lower-cross-entropy: threads must be 0 "
                             "(chosen from the vocabulary) or a power of two "
                             "in [32, 1024], got ")
           << threads;
  return success();
}

FailureOr<CrossEntropyPlan>
CrossEntropyLowering::analyze(func::FuncOp fn) const {
  Block &body = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  CrossEntropyPlan plan;
  for (Operation &op : body.without_terminator()) {
    if (auto ce = dyn_cast<CrossEntropyOp>(op); ce && !plan.op) {
      plan.op = ce;
      continue;
    }
    return op.emitError("a cross-entropy kernel holds one "
                        "coat.cross_entropy, not another '")
           << op.getName() << "'";
  }
  if (!plan.op)
    return fn.emitError("kernel-spec function @")
           << fn.getSymName()
           << " holds no coat.cross_entropy at its top level";
  for (Value v : {plan.op.getLogits(), plan.op.getTargets()})
    if (!isa<BlockArgument>(v))
      return plan.op.emitError("the logits and targets of a cross-entropy "
                               "kernel must be arguments of its kernel-spec "
                               "function");
  for (Value r : plan.op.getResults())
    if (!llvm::is_contained(ret.getOperands(), r))
      return plan.op.emitError("a cross-entropy kernel writes the loss and "
                               "the gradient: the kernel-spec function must "
                               "return both");
  plan.vocab = plan.op.getVocab();
  plan.ignoreIndex = plan.op.getIgnoreIndex();
  plan.threads = threads ? threads : crossEntropyThreads(plan.vocab);
  auto logits = cast<BlockArgument>(plan.op.getLogits());
  plan.inPlace =
      static_cast<bool>(fn.getArgAttr(logits.getArgNumber(), kWritableAttr));
  for (auto [i, r] : llvm::enumerate(ret.getOperands())) {
    if (!fn.getResultAttr(i, kFiniteFlagAttr))
      continue;
    plan.flagLoss |= r == plan.op.getLoss();
    plan.flagGrad |= r == plan.op.getDlogits();
  }
  return plan;
}

namespace {

AbiArg buf(StringRef name, Type logical, StringRef extent) {
  return AbiArg{name.str(), abiBuffer(logical), manifestDtype(logical),
                extent.str()};
}

} // namespace

SmallVector<KernelDecl>
CrossEntropyLowering::declare(func::FuncOp fn,
                              const CrossEntropyPlan &plan) const {
  MLIRContext *ctx = fn.getContext();
  Type bf16 = BFloat16Type::get(ctx), f32 = Float32Type::get(ctx);
  Type i32 = IntegerType::get(ctx, 32), i64 = IntegerType::get(ctx, 64);
  SmallVector<AbiArg> abi = {buf("logits", bf16, "n"),
                             buf("targets", i64, "rows"),
                             buf("loss", f32, "rows")};
  if (!plan.inPlace)
    abi.push_back(buf("dlogits", bf16, "n"));
  if (plan.flagLoss)
    abi.push_back(buf(finiteFlagArgName("loss"), i32, "1"));
  if (plan.flagGrad)
    abi.push_back(buf(finiteFlagArgName(plan.gradArg()), i32, "1"));
  for (StringRef name : {"rows", "cols"})
    abi.push_back(AbiArg{name.str(), i64, "i64", ""});
  // Workgroup memory: each warp's maximum and sum.
  return {KernelDecl{fn.getSymName().str(),
                     abi,
                     plan.threads,
                     {workgroupBuffer({2 * (plan.threads / 32)}, f32)}}};
}

SpecBindings CrossEntropyLowering::bindings(func::FuncOp fn,
                                            const CrossEntropyPlan &plan) const {
  SpecRefs s(fn);
  CrossEntropyOp op = CrossEntropyOp(plan.op);
  SpecBindings binds;
  binds["logits"] = {s.ref(op.getLogits())};
  if (plan.inPlace)
    binds["logits"].push_back(s.ref(op.getDlogits()));
  else
    binds["dlogits"] = {s.ref(op.getDlogits())};
  binds["targets"] = {s.ref(op.getTargets())};
  binds["loss"] = {s.ref(op.getLoss())};
  binds[finiteFlagArgName("loss")] = {"finite(" + s.ref(op.getLoss()) + ")"};
  binds[finiteFlagArgName(plan.gradArg())] = {"finite(" +
                                              s.ref(op.getDlogits()) + ")"};
  binds["rows"] = {s.rows(op.getLogits())};
  binds["cols"] = {s.cols(op.getLogits())};
  return binds;
}

DictionaryAttr CrossEntropyLowering::record(const CrossEntropyPlan &plan,
                                            const KernelDecl &decl,
                                            unsigned) const {
  MLIRContext *ctx = CrossEntropyOp(plan.op).getContext();
  Builder b(ctx);
  auto named = [&](StringRef k, Attribute v) { return b.getNamedAttr(k, v); };
  // `cols` is compiled in: the runtime refuses a launch with another.
  SmallVector<NamedAttribute> config = {
      named("cols", b.getI64IntegerAttr(plan.vocab)),
      named("ignore_index", b.getI64IntegerAttr(plan.ignoreIndex)),
      named("threads", b.getI64IntegerAttr(plan.threads)),
      named("chunk", b.getI64IntegerAttr(8)),
      named("in_place", b.getBoolAttr(plan.inPlace))};
  std::optional<LaunchRule> launch;
  if (onGpu())
    launch = LaunchRule{decl.blockSize, 0, 0, {{"rows", 1}}};
  return buildKernelRecord(ctx, decl.name, "cross_entropy", config, decl.abi,
                           launch);
}
