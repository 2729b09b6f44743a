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
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdlib>
#include <string>

using namespace mlir;

namespace {

// The pipelines the fuzzer drives: what python/coat/toolchain.py runs on a
// model program, and the CPU halves of its kernel lowerings (the GPU halves
// end in NVVM and ptxas, outside the compiler under test). The manifest
// export is left out: it writes files.
constexpr const char *kModelPipeline =
    "builtin.module(coat-mixed-granularity,coat-group-scaling,"
    "func.func(coat-recompute-activations),coat-outline-kernels)";
constexpr const char *kCpuPipeline =
    "builtin.module(coat-fuse-adamw,coat-lower-optimizer{target=cpu},"
    "coat-lower-pointwise{target=cpu},coat-lower-norms{target=cpu},"
    "coat-lower-activations{target=cpu},coat-lower-reduce-scales{target=cpu},"
    "coat-lower-linear{target=cpu},coat-expand-shared-divisions,"
    "coat-expand-soft-exp2,coat-expand-fp8-conversions)";

struct Fuzzer {
  DialectRegistry registry;
  MLIRContext context;

  Fuzzer() : context(MLIRContext::Threading::DISABLED) {
    registerAllPasses();
    coat::registerCoatPasses();
    registerAllDialects(registry);
    registerAllExtensions(registry);
    coat::registerCoatDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
  }

  void run(OwningOpRef<Operation *> &module, const char *pipeline) {
    PassManager pm(&context, module.get()->getName().getStringRef());
    if (failed(parsePassPipeline(pipeline, pm, llvm::errs()))) {
      llvm::errs() << "coat-fuzz: bad built-in pipeline " << pipeline << "\n";
      std::abort();
    }
    (void)pm.run(module.get());
  }

  void one(llvm::StringRef text) {
    ScopedDiagnosticHandler quiet(&context, [](Diagnostic &) { return success(); });
    ParserConfig config(&context);
    OwningOpRef<Operation *> parsed =
        parseSourceString(text, config, /*sourceName=*/"fuzz-input");
    if (!parsed || failed(verify(parsed.get())))
      return;
    OwningOpRef<Operation *> copy(parsed.get()->clone());
    run(parsed, kModelPipeline);
    run(copy, kCpuPipeline);
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
