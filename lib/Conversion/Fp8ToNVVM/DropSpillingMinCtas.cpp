//===- DropSpillingMinCtas.cpp - keep occupancy hints that fit -------------===//
//
// A kernel lowering can ask for `.minnctapersm N` (`nvvm.minctasm`), which
// makes ptxas fit the registers of N blocks per multiprocessor. That is
// faster only when the kernel fits without spilling: the 1x16 bf16 quantizer
// at 6 blocks ran at 95.6% of its byte ideal instead of 86.5%, while the
// kernels that spilled under the same cap lost a third (docs/benchmarks.md).
// Whether a kernel spills is ptxas's verdict, so this pass asks it: it emits
// the module's PTX, runs `ptxas -v` on it and drops the hint from the kernels
// that spill under it. Only hints marked as such requests
// (kMinCtasUnlessSpillingAttr) are decided; others are part of a kernel's
// design and stay.
//
//===----------------------------------------------------------------------===//

#include "coat/Conversion/Passes.h"

#include "mlir/Dialect/GPU/IR/CompilationInterfaces.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Target/LLVM/NVVM/Utils.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Regex.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATDROPSPILLINGMINCTAS
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

/// ptxas from the toolkit option, else from $PATH, else from the toolkit
/// MLIR's NVVM target finds ($CUDA_ROOT, $CUDA_HOME, $CUDA_PATH): the
/// order coat-gpu-to-binary's serializer uses.
std::string findPtxas(StringRef toolkit) {
  auto inToolkit = [](StringRef root) -> std::string {
    if (root.empty())
      return "";
    SmallString<256> path(root);
    llvm::sys::path::append(path, "bin", "ptxas");
    return llvm::sys::fs::can_execute(path) ? std::string(path) : "";
  };
  if (!toolkit.empty())
    return inToolkit(toolkit);
  if (llvm::ErrorOr<std::string> onPath = llvm::sys::findProgramByName("ptxas"))
    return *onPath;
  return inToolkit(NVVM::getCUDAToolkitPath());
}

/// Per entry function of `ptxas -v` output: whether it spills.
llvm::StringMap<bool> parseSpills(StringRef log) {
  llvm::StringMap<bool> spills;
  llvm::Regex entry("Compiling entry function '([A-Za-z0-9_$.]+)'");
  llvm::Regex spill("([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads");
  StringRef current;
  SmallVector<StringRef, 3> m;
  while (!log.empty()) {
    auto [line, rest] = log.split('\n');
    log = rest;
    if (entry.match(line, &m))
      current = m[1];
    else if (!current.empty() && spill.match(line, &m))
      spills[current] = m[1] != "0" || m[2] != "0";
  }
  return spills;
}

struct CoatDropSpillingMinCtasPass
    : mlir::coat::impl::CoatDropSpillingMinCtasBase<
          CoatDropSpillingMinCtasPass> {
  using Base::Base;

  void runOnOperation() override {
    gpu::GPUModuleOp module = getOperation();
    StringRef hint = NVVM::NVVMDialect::getMinctasmAttrName();
    SmallVector<LLVM::LLVMFuncOp> hinted;
    module.walk([&](LLVM::LLVMFuncOp fn) {
      if (fn->removeAttr(kMinCtasUnlessSpillingAttr) && fn->hasAttr(hint))
        hinted.push_back(fn);
    });
    if (hinted.empty())
      return;
    NVVM::NVVMTargetAttr target;
    if (ArrayAttr targets = module.getTargetsAttr())
      for (Attribute t : targets)
        if ((target = dyn_cast<NVVM::NVVMTargetAttr>(t)))
          break;
    if (!target) {
      module.emitError("coat-drop-spilling-min-ctas: the module needs an "
                       "#nvvm.target (run it inside coat-gpu-to-binary)");
      return signalPassFailure();
    }
    std::string ptxas = findPtxas(toolkit);
    if (ptxas.empty()) {
      module.emitError("coat-drop-spilling-min-ctas: ptxas not found (")
          << (toolkit.empty() ? std::string("$PATH, $CUDA_ROOT, $CUDA_HOME, "
                                            "$CUDA_PATH")
                              : toolkit + "/bin")
          << "); it decides which kernels keep nvvm.minctasm";
      return signalPassFailure();
    }

    auto serializer = cast<gpu::TargetAttrInterface>(target);
    gpu::TargetOptions options(toolkit, {}, "", "",
                               gpu::CompilationTarget::Assembly);
    std::optional<SmallVector<char, 0>> ptx =
        serializer.serializeToObject(module, options);
    if (!ptx) {
      module.emitError("coat-drop-spilling-min-ctas: could not emit PTX");
      return signalPassFailure();
    }

    SmallString<128> ptxPath, logPath;
    if (llvm::sys::fs::createTemporaryFile("coat-caps", "ptx", ptxPath) ||
        llvm::sys::fs::createTemporaryFile("coat-caps", "log", logPath)) {
      module.emitError("coat-drop-spilling-min-ctas: cannot create "
                       "temporary files");
      return signalPassFailure();
    }
    llvm::FileRemover removePtx(ptxPath), removeLog(logPath);
    {
      std::error_code ec;
      llvm::raw_fd_ostream os(ptxPath, ec);
      if (ec) {
        module.emitError("coat-drop-spilling-min-ctas: ") << ec.message();
        return signalPassFailure();
      }
      // The PTX may carry a terminating NUL.
      StringRef text(ptx->data(), ptx->size());
      os << text.take_until([](char c) { return c == '\0'; });
    }
    std::string arch = ("-arch=" + target.getChip()).str();
    SmallVector<StringRef> args = {ptxas, arch, "-v", ptxPath, "-o",
                                   "/dev/null"};
    std::optional<StringRef> redirects[] = {std::nullopt, logPath, logPath};
    std::string error;
    int rc = llvm::sys::ExecuteAndWait(ptxas, args, std::nullopt, redirects,
                                       /*SecondsToWait=*/0, /*MemoryLimit=*/0,
                                       &error);
    auto log = llvm::MemoryBuffer::getFile(logPath);
    if (rc != 0 || !log) {
      InFlightDiagnostic diag = module.emitError(
          "coat-drop-spilling-min-ctas: ptxas failed");
      if (!error.empty())
        diag << ": " << error;
      if (log)
        diag << "\n" << (*log)->getBuffer();
      return signalPassFailure();
    }
    llvm::StringMap<bool> spills = parseSpills((*log)->getBuffer());
    for (LLVM::LLVMFuncOp fn : hinted) {
      auto it = spills.find(fn.getSymName());
      if (it == spills.end()) {
        fn.emitError("coat-drop-spilling-min-ctas: ptxas -v reported "
                     "nothing for this kernel");
        return signalPassFailure();
      }
      if (it->second)
        fn->removeAttr(hint);
    }
  }
};

} // namespace
