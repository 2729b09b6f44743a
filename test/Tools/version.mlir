// coat-opt identifies itself and the LLVM/MLIR it was built against.
// RUN: coat-opt --version | FileCheck %s
// CHECK: LLVM version {{[0-9]+\.[0-9]+}}
// CHECK: COAT-MLIR {{[0-9]+\.[0-9]+\.[0-9]+}} (built against LLVM/MLIR {{[0-9]+\.[0-9]+\.[0-9]+}})
