//===- coat-fuzz.cpp - libFuzzer target for the coat compiler --------------===//
//
// Each input is MLIR text. It is parsed and verified with every dialect
// registered; a module that verifies goes through the model pipeline
// (granularity, group scaling, outlining) and, separately, through the CPU
// kernel lowerings. Diagnostics are expected and discarded: only crashes,
// sanitizer reports and failed assertions count.
//
//===----------------------------------------------------------------------===//

#include "../InputNesting.h"
#include "../SanitizerOptions.h"
#include "coat/InitAll.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/IR/Verifier.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <string>

using namespace mlir;

namespace {

// The pipelines the fuzzer drives, on the parsed module: what
// python/coat/toolchain.py runs on a model program, the CPU halves of its
// kernel lowerings, and the GPU halves up to the NVVM-side passes that are
// ours (the upstream conversions and ptxas after them are outside the
// compiler under test). The manifest export is left out: it writes files.
// They are not anchored: parsePassPipeline nests an anchored
// `builtin.module(...)` under the module's pass manager, where it would run
// on modules inside the module, that is, on nothing.
constexpr const char *kModelPipeline =
    "coat-mixed-granularity,coat-group-scaling,"
    "func.func(coat-recompute-activations,coat-fuse-silu,coat-fuse-linear-sum,"
    "coat-fuse-rope),"
    "coat-outline-kernels";
constexpr const char *kCpuPipeline =
    "coat-fuse-adamw,coat-lower-optimizer{target=cpu},"
    "coat-lower-pointwise{target=cpu},coat-lower-norms{target=cpu},"
    "coat-lower-activations{target=cpu},coat-lower-reduce-scales{target=cpu},"
    "coat-lower-bias-grad{target=cpu},"
    "coat-lower-linear{target=cpu},coat-expand-shared-divisions,"
    "coat-expand-soft-exp2,coat-expand-fp8-conversions";
/// The GPU lowerings under one of three option sets, picked by the input's
/// length: the defaults, and the norms' row prefetch with fused or shared
/// column sums.
constexpr const char *kGpuPipelines[] = {
    "coat-fuse-adamw,coat-lower-optimizer{target=gpu},"
    "coat-lower-pointwise{target=gpu},coat-lower-norms{target=gpu},"
    "coat-lower-activations{target=gpu},coat-lower-reduce-scales{target=gpu},"
    "coat-lower-bias-grad{target=gpu},"
    "coat-lower-linear{target=gpu},nvvm-attach-target{chip=sm_90a},"
    "coat-verify-nvvm-target,gpu.module(coat-expand-shared-divisions,"
    "coat-expand-soft-exp2,coat-fast-nvvm-math,coat-lower-fp8-to-nvvm)",
    "coat-lower-norms{target=gpu row-prefetch=true},"
    "nvvm-attach-target{chip=sm_90a},gpu.module(coat-lower-fp8-to-nvvm)",
    "coat-lower-norms{target=gpu row-prefetch=true column-sums=shared},"
    "nvvm-attach-target{chip=sm_90a},gpu.module(coat-lower-fp8-to-nvvm)"};

/// The folder the artifact stage writes into, one per process; each run
/// removes what it wrote.
std::string artifactDir() {
  llvm::SmallString<128> path;
  llvm::sys::path::system_temp_directory(/*ErasedOnReboot=*/true, path);
  llvm::sys::path::append(path, "coat-fuzz-artifact-" +
                                    std::to_string(llvm::sys::Process::getProcessId()));
  return std::string(path);
}

struct Fuzzer {
  DialectRegistry registry;
  MLIRContext context;
  /// An outlined program's artifact: its specs lowered for the CPU in
  /// clones, the launch plans described against their records, the LLVM IR
  /// translated and everything written (coat-compile-artifact).
  const std::string artifactFolder = artifactDir();
  const std::string artifactPipeline =
      "coat-compile-artifact{gpu=false dir={" + artifactFolder + "}}";

  Fuzzer() : context(MLIRContext::Threading::DISABLED) {
    registerAllPasses();
    coat::registerCoatPasses();
    registerAllDialects(registry);
    registerAllExtensions(registry);
    coat::registerCoatDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
  }

  /// With COAT_FUZZ_VERBOSE set, each run says how many ops the module had
  /// before and after (scripts/fuzz.sh checks that the pipelines do work).
  const bool verbose = std::getenv("COAT_FUZZ_VERBOSE") != nullptr;

  bool run(ModuleOp module, llvm::StringRef name, llvm::StringRef pipeline) {
    PassManager pm(&context);
    if (failed(parsePassPipeline(pipeline, pm, llvm::errs()))) {
      llvm::errs() << "coat-fuzz: bad built-in pipeline " << pipeline << "\n";
      std::abort();
    }
    int64_t before = verbose ? countOps(module) : 0;
    bool ok = succeeded(pm.run(module));
    if (verbose)
      llvm::errs() << "coat-fuzz: " << name << (ok ? "" : " (failed)") << ": "
                   << before << " -> " << countOps(module) << " ops\n";
    return ok;
  }

  static bool holdsProgram(ModuleOp module) {
    for (Operation &op : module.getBody()->getOperations())
      if (op.hasAttr("coat.program"))
        return true;
    return false;
  }

  static int64_t countOps(ModuleOp module) {
    int64_t n = 0;
    module->walk([&](Operation *) { ++n; });
    return n;
  }

  void one(llvm::StringRef text) {
    ScopedDiagnosticHandler quiet(&context, [](Diagnostic &) { return success(); });
    ParserConfig config(&context);
    // As a module, as coat-opt parses: several top-level functions go into
    // an implicit one (parsed as a bare Operation *, such an input fails
    // to parse and a lone function does not match the pipelines' anchor).
    OwningOpRef<ModuleOp> parsed =
        parseSourceString<ModuleOp>(text, config, /*sourceName=*/"fuzz-input");
    if (!parsed || failed(verify(*parsed)))
      return;
    OwningOpRef<ModuleOp> copy = parsed->clone();
    OwningOpRef<ModuleOp> gpuCopy = parsed->clone();
    if (run(*parsed, "model", kModelPipeline) && holdsProgram(*parsed)) {
      run(*parsed, "artifact", artifactPipeline);
      llvm::sys::fs::remove_directories(artifactFolder);
    }
    run(*copy, "cpu", kCpuPipeline);
    run(*gpuCopy, "gpu", kGpuPipelines[text.size() % std::size(kGpuPipelines)]);
  }
};

/// Inputs nested deeper than real IR ever is are skipped (InputNesting.h):
/// MLIR's own parser would overflow the stack on them.
constexpr int kMaxNesting = 256;

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static Fuzzer *fuzzer = new Fuzzer();
  // MLIR's lexer reads up to a terminating NUL, which libFuzzer's buffer
  // lacks: hand it a copy that has one.
  std::string text(reinterpret_cast<const char *>(data), size);
  if (coat::findNestingBeyond(text, kMaxNesting))
    return 0;
  fuzzer->one(text);
  return 0;
}
