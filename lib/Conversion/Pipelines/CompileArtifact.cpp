//===- CompileArtifact.cpp - one pass writes the whole artifact -----------===//
//
// The kernel specs of a module are lowered once per target, each in a clone
// nested in the module for the time of its pipeline (a dynamic pipeline runs
// only on the operation of its pass or below), and everything the artifact
// holds is taken from those lowerings in memory: the records, the PTX and
// the cubin ptxas assembled from that PTX, the CPU twins' LLVM IR and the
// programs' launch plans. manifest.json is written once, last, so a folder
// with a manifest holds a finished artifact.
//
//===----------------------------------------------------------------------===//

#include "coat/Conversion/ManifestBuilder.h"
#include "coat/Conversion/Passes.h"
#include "coat/Conversion/Pipelines.h"
#include "coat/Dialect/CoatDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/CompilationInterfaces.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATCOMPILEARTIFACT
#include "coat/Conversion/PipelinePasses.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

// Occupancy hints measured fastest on the GPU (docs/benchmarks.md). Each is
// kept only where ptxas fits it without spilling
// (coat-drop-spilling-min-ctas), which needs ptxas: the hints come with the
// cubins, not as defaults of the lowerings that PTX-only users run.
constexpr llvm::StringLiteral kOptimizerHints = "min-ctas=5 bf16-min-ctas=6";
constexpr llvm::StringLiteral kPointwiseHints = "min-ctas=6";
constexpr llvm::StringLiteral kActivationHints = "flat-min-ctas=6";

/// Pass options `given` ("key=value ...") over `defaults`, key by key, each
/// key where it first appears.
std::string mergeOptions(StringRef defaults, StringRef given) {
  llvm::MapVector<StringRef, StringRef> merged;
  for (StringRef list : {defaults, given}) {
    SmallVector<StringRef> options;
    list.split(options, ' ', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
    for (StringRef option : options)
      merged[option.split('=').first] = option;
  }
  std::string out;
  for (auto &[key, option] : merged)
    out += (out.empty() ? "" : " ") + option.str();
  return out;
}

/// `pass{options}`, or `pass` when there are none.
std::string withOptions(StringRef pass, ArrayRef<std::string> options) {
  std::string joined;
  for (const std::string &o : options)
    if (!o.empty())
      joined += (joined.empty() ? "" : " ") + o;
  return joined.empty() ? pass.str() : (pass + "{" + joined + "}").str();
}

/// Writes `bytes` to `dir`/`name`, or reports why not at `op`.
LogicalResult writeFile(Operation *op, StringRef dir, StringRef name,
                        StringRef bytes) {
  SmallString<256> path(dir);
  llvm::sys::path::append(path, name);
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return op->emitError("coat-compile-artifact: cannot write '")
           << path << "': " << ec.message();
  os << bytes;
  return success();
}

/// Everything in `module` but its programs (the kernel specs, and whatever
/// else the lowerings take), cloned into a module nested at its end, where a
/// dynamic pipeline may lower them.
ModuleOp cloneSpecs(ModuleOp module) {
  SmallVector<Operation *> specs;
  for (Operation &op : module.getBody()->getOperations())
    if (!op.hasAttr(kProgramAttr))
      specs.push_back(&op);
  OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
  auto nested = ModuleOp::create(builder, module.getLoc());
  builder.setInsertionPointToStart(nested.getBody());
  for (Operation *op : specs)
    builder.clone(*op);
  return nested;
}

/// A coat op still in a lowered module is a kernel spec no lowering took,
/// which would otherwise fail later without a word about why.
LogicalResult checkAllLowered(ModuleOp lowered) {
  WalkResult leftover = lowered.walk([&](Operation *op) {
    if (!isa_and_nonnull<CoatDialect>(op->getDialect()))
      return WalkResult::advance();
    auto fn = op->getParentOfType<func::FuncOp>();
    op->emitError("no lowering takes this op")
        << (fn ? " in kernel-spec function @" + fn.getSymName().str() : "")
        << ": it has no kernel in this build or this form";
    return WalkResult::interrupt();
  });
  return failure(leftover.wasInterrupted());
}

struct CoatCompileArtifactPass
    : mlir::coat::impl::CoatCompileArtifactBase<CoatCompileArtifactPass> {
  using Base::Base;

  /// The lowerings of the kernel specs for `target` ("gpu" or "cpu"), as
  /// the pass list of a module pass manager.
  std::string loweringPipeline(StringRef target) const {
    bool gpuTarget = target == "gpu";
    std::string t = ("target=" + target).str();
    auto hinted = [&](StringRef hints, StringRef given) {
      return gpuTarget && cubin ? mergeOptions(hints, given) : given.str();
    };
    SmallVector<std::string> passes = {
        "coat-fuse-adamw",
        withOptions("coat-lower-optimizer",
                    {t, gpuTarget ? hinted(kOptimizerHints, optimizerOptions)
                                  : ""}),
        withOptions("coat-lower-pointwise",
                    {t, hinted(kPointwiseHints, pointwiseOptions)}),
        withOptions("coat-lower-norms", {t, normOptions}),
        withOptions("coat-lower-activations",
                    {t, gpuTarget ? hinted(kActivationHints, activationOptions)
                                  : ""}),
        withOptions("coat-lower-reduce-scales", {t}),
        withOptions("coat-lower-bias-grad", {t}),
        withOptions("coat-lower-cross-entropy", {t}),
        withOptions("coat-lower-linear", {t, linearOptions})};
    // What coat-gpu-to-binary does first on the GPU, before the LLVM
    // conversions that drop the records.
    if (!gpuTarget)
      passes.append({"coat-expand-shared-divisions", "coat-expand-soft-exp2"});
    return llvm::join(passes, ",");
  }

  /// The CPU twins' lowering to the LLVM dialect.
  static StringRef cpuToLLVMPipeline() {
    return "coat-expand-fp8-conversions,arith-expand{include-bf16=true},"
           "canonicalize,cse,convert-vector-to-scf,convert-scf-to-cf,"
           "expand-strided-metadata,lower-affine,convert-to-llvm,"
           "reconcile-unrealized-casts";
  }

  void buildDevicePipeline(OpPassManager &pm) const {
    GpuToBinaryOptions device;
    device.chip = chip;
    device.features = features;
    device.optLevel = optLevel;
    device.toolkit = toolkit;
    buildGpuToNVVMPipeline(pm, device);
  }

  void getDependentDialects(DialectRegistry &registry) const override {
    // The dynamic pipelines' dialects are loaded before the pass runs.
    for (std::string text : {loweringPipeline("gpu"), loweringPipeline("cpu"),
                             cpuToLLVMPipeline().str()}) {
      OpPassManager pm(ModuleOp::getOperationName());
      if (succeeded(parsePassPipeline(text, pm, llvm::nulls())))
        pm.getDependentDialects(registry);
    }
    OpPassManager device(ModuleOp::getOperationName());
    buildDevicePipeline(device);
    device.getDependentDialects(registry);
    registerBuiltinDialectTranslation(registry);
    registerLLVMDialectTranslation(registry);
  }

  /// Runs `text` on `lowered`, reporting a bad pipeline at the module.
  LogicalResult runText(StringRef text, ModuleOp lowered) {
    OpPassManager pm(ModuleOp::getOperationName());
    std::string error;
    llvm::raw_string_ostream os(error);
    if (failed(parsePassPipeline(text, pm, os)))
      return getOperation().emitError("coat-compile-artifact: ")
             << "bad lowering options: " << error;
    return runPipeline(pm, lowered);
  }

  LogicalResult compileGpu(ModuleOp lowered, ManifestBuilder &manifest);
  LogicalResult compileCpu(ModuleOp lowered, ManifestBuilder &manifest);

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (llvm::none_of(module.getOps<func::FuncOp>(), [](func::FuncOp fn) {
          return !fn->hasAttr(kProgramAttr);
        })) {
      module.emitError("coat-compile-artifact: the module holds no "
                       "kernel-spec function to compile");
      return signalPassFailure();
    }
    if (std::error_code ec = llvm::sys::fs::create_directories(dir)) {
      module.emitError("coat-compile-artifact: cannot create '")
          << dir << "': " << ec.message();
      return signalPassFailure();
    }
    ManifestBuilder manifest;
    for (auto [enabled, compile] :
         {std::pair{bool(gpu), &CoatCompileArtifactPass::compileGpu},
          std::pair{bool(cpu), &CoatCompileArtifactPass::compileCpu}}) {
      if (!enabled)
        continue;
      ModuleOp lowered = cloneSpecs(module);
      LogicalResult compiled = (this->*compile)(lowered, manifest);
      lowered.erase();
      if (failed(compiled))
        return signalPassFailure();
    }
    if (manifest.empty()) {
      module.emitError("coat-compile-artifact: no lowering produced a "
                       "kernel (gpu and cpu both off?)");
      return signalPassFailure();
    }
    for (auto fn : module.getOps<func::FuncOp>())
      if (fn->hasAttr(kProgramAttr) && failed(manifest.addProgram(fn)))
        return signalPassFailure();
    // Written whole, then renamed: a reader never sees half a manifest.
    std::string text = manifest.text(sourceKey);
    if (failed(writeFile(module, dir, "manifest.json.tmp", text)))
      return signalPassFailure();
    SmallString<256> from(dir), to(dir);
    llvm::sys::path::append(from, "manifest.json.tmp");
    llvm::sys::path::append(to, "manifest.json");
    if (std::error_code ec = llvm::sys::fs::rename(from, to)) {
      module.emitError("coat-compile-artifact: cannot write '")
          << to << "': " << ec.message();
      return signalPassFailure();
    }
  }
};

LogicalResult CoatCompileArtifactPass::compileGpu(ModuleOp lowered,
                                                  ManifestBuilder &manifest) {
  if (failed(runText(loweringPipeline("gpu"), lowered)) ||
      failed(checkAllLowered(lowered)))
    return failure();
  manifest.setTarget(chip, features);
  for (auto gm : lowered.getOps<gpu::GPUModuleOp>()) {
    llvm::json::Object where{{"module", gm.getName()},
                             {"ptx", (gm.getName() + ".ptx").str()}};
    if (cubin)
      where["cubin"] = (gm.getName() + ".cubin").str();
    for (auto fn : gm.getOps<gpu::GPUFuncOp>())
      if (auto record = fn->getAttrOfType<DictionaryAttr>("coat.kernel"))
        manifest.addKernel(record, "gpu", llvm::json::Object(where));
  }

  OpPassManager device(ModuleOp::getOperationName());
  buildDevicePipeline(device);
  if (failed(runPipeline(device, lowered)))
    return failure();
  SymbolTable symbols(lowered);
  for (auto gm : lowered.getOps<gpu::GPUModuleOp>()) {
    NVVM::NVVMTargetAttr target;
    if (ArrayAttr targets = gm.getTargetsAttr())
      for (Attribute t : targets)
        if ((target = dyn_cast<NVVM::NVVMTargetAttr>(t)))
          break;
    if (!target)
      return gm.emitError("coat-compile-artifact: no #nvvm.target attached");
    // The PTX is the text the serializer hands ptxas: one lowering, one
    // LLVM code generation for both files.
    std::string ptx;
    // TargetOptions keeps function_refs: the callables must outlive it.
    auto symbolTable = [&]() { return &symbols; };
    auto keepPtx = [&](StringRef isa) { ptx = isa.str(); };
    gpu::TargetOptions options(toolkit, {}, "", "",
                               cubin ? gpu::CompilationTarget::Binary
                                     : gpu::CompilationTarget::Assembly,
                               symbolTable, {}, {}, {}, keepPtx);
    std::optional<SmallVector<char, 0>> object =
        cast<gpu::TargetAttrInterface>(target).serializeToObject(gm, options);
    if (!object)
      return gm.emitError("coat-compile-artifact: could not compile ")
             << gm.getName() << " for " << target.getChip();
    if (!cubin)
      ptx.assign(object->begin(), object->end());
    // The serializer's PTX may end in a NUL, which no PTX file has.
    StringRef ptxText = StringRef(ptx).take_until([](char c) { return !c; });
    if (failed(writeFile(gm, dir, (gm.getName() + ".ptx").str(), ptxText)))
      return failure();
    if (cubin && failed(writeFile(gm, dir, (gm.getName() + ".cubin").str(),
                                  StringRef(object->data(), object->size()))))
      return failure();
  }
  return success();
}

LogicalResult CoatCompileArtifactPass::compileCpu(ModuleOp lowered,
                                                  ManifestBuilder &manifest) {
  if (failed(runText(loweringPipeline("cpu"), lowered)) ||
      failed(checkAllLowered(lowered)))
    return failure();
  for (auto fn : llvm::make_early_inc_range(lowered.getOps<func::FuncOp>())) {
    if (auto record = fn->getAttrOfType<DictionaryAttr>("coat.kernel"))
      manifest.addKernel(record, "cpu",
                         llvm::json::Object{{"symbol", fn.getSymName()},
                                            {"object", "coat_cpu.o"},
                                            {"library", "coat_cpu.so"}});
    // A spec with no coat op has no kernel (a program calling it is refused
    // with its plan) and nothing the LLVM conversions could take.
    else if (fn.symbolKnownUseEmpty(lowered))
      fn.erase();
  }
  if (failed(runText(cpuToLLVMPipeline(), lowered)))
    return failure();
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> ir = translateModuleToLLVMIR(lowered, context);
  if (!ir)
    return lowered.emitError("coat-compile-artifact: the CPU twins did not "
                             "translate to LLVM IR");
  std::string text;
  llvm::raw_string_ostream os(text);
  ir->print(os, nullptr);
  return writeFile(lowered, dir, "coat_cpu.ll", text);
}

} // namespace
