//===- coat-opt.cpp - mlir-opt with the coat dialect and passes -----------===//

#include "../InputNesting.h"
#include "../SanitizerOptions.h"
#include "coat/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

namespace {

/// Far beyond any real IR (a few dozen levels), far below where the parser
/// overflows the stack (about 7,000 levels in a sanitized build).
constexpr int kMaxInputNesting = 1024;

/// Reports where `buffer` nests too deep for MLIR's parser, if it does.
bool nestsTooDeep(const llvm::MemoryBuffer &buffer) {
  std::optional<size_t> at = mlir::coat::findNestingBeyond(
      buffer.getBuffer(), kMaxInputNesting);
  if (!at)
    return false;
  llvm::SourceMgr sources;
  sources.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBuffer(buffer.getMemBufferRef(),
                                       /*RequiresNullTerminator=*/false),
      llvm::SMLoc());
  sources.PrintMessage(
      llvm::SMLoc::getFromPointer(buffer.getBufferStart() + *at),
      llvm::SourceMgr::DK_Error,
      "brackets nest deeper than " + llvm::Twine(kMaxInputNesting) +
          " levels here; coat-opt refuses such input because MLIR's parser "
          "recurses once per level and would overflow the stack");
  return true;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  llvm::cl::AddExtraVersionPrinter([](llvm::raw_ostream &os) {
    os << "COAT-MLIR " << COAT_VERSION_STRING << " (built against LLVM/MLIR "
       << LLVM_VERSION_STRING << ")\n";
  });

  mlir::registerAllPasses();
  mlir::coat::registerCoatPasses();

  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::registerAllGPUToLLVMIRTranslations(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  mlir::coat::registerCoatDialects(registry);

  auto [inputFilename, outputFilename] = mlir::registerAndParseCLIOptions(
      argc, argv, "COAT-MLIR optimizer driver\n", registry);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  // Listings read no input.
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(mlir::MlirOptMain(
        argc, argv, inputFilename, outputFilename, registry));

  // The input is read here (once: it may be stdin) and measured before the
  // parser sees it.
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input =
      mlir::openInputFile(inputFilename, &error);
  if (!input) {
    llvm::errs() << error << "\n";
    return EXIT_FAILURE;
  }
  if (nestsTooDeep(*input))
    return EXIT_FAILURE;
  std::unique_ptr<llvm::ToolOutputFile> output =
      mlir::openOutputFile(outputFilename, &error);
  if (!output) {
    llvm::errs() << error << "\n";
    return EXIT_FAILURE;
  }
  if (mlir::failed(
          mlir::MlirOptMain(output->os(), std::move(input), registry, config)))
    return EXIT_FAILURE;
  output->keep();
  return EXIT_SUCCESS;
}
