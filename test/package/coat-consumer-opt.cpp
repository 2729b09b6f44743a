//===- coat-consumer-opt.cpp - an mlir-opt built on the installed COAT ----===//
//
// The smallest tool an embedder writes against the COAT package: the coat
// dialect, the dialects its input uses, and every coat pass and pipeline,
// through the public registration API (coat/InitAll.h).
//
//===----------------------------------------------------------------------===//

#include "coat/Dialect/CoatDialect.h"
#include "coat/InitAll.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

int main(int argc, char **argv) {
  llvm::cl::AddExtraVersionPrinter([](llvm::raw_ostream &os) {
    os << "coat-consumer-opt (COAT " << COAT_PACKAGE_VERSION << ", dialect "
       << mlir::coat::CoatDialect::getDialectNamespace() << ")\n";
  });

  mlir::coat::registerCoatPasses();

  mlir::DialectRegistry registry;
  registry.insert<mlir::func::FuncDialect, mlir::arith::ArithDialect,
                  mlir::tensor::TensorDialect>();
  mlir::coat::registerCoatDialects(registry);

  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "mlir-opt with the coat dialect, from the COAT package\n",
      registry));
}
