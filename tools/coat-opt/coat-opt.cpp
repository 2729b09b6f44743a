//===- coat-opt.cpp - mlir-opt with the coat dialect and passes -----------===//

#include "../SanitizerOptions.h"
#include "coat/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

int main(int argc, char **argv) {
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

  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "COAT-MLIR optimizer driver\n", registry));
}
