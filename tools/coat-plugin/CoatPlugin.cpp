//===- CoatPlugin.cpp - coat as a plugin of stock mlir-opt ----------------===//

#include "coat/Dialect/CoatDialect.h"
#include "coat/InitAll.h"

#include "mlir/Tools/Plugins/DialectPlugin.h"
#include "mlir/Tools/Plugins/PassPlugin.h"
#include "llvm/Config/llvm-config.h"

/// Registers the coat dialect and, so that one flag suffices, every coat pass.
extern "C" LLVM_ATTRIBUTE_WEAK mlir::DialectPluginLibraryInfo
mlirGetDialectPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "coat", LLVM_VERSION_STRING,
          [](mlir::DialectRegistry *registry) {
            mlir::coat::registerCoatDialects(*registry);
            mlir::coat::registerCoatPasses();
          }};
}

/// Registers every coat pass (the dialect needs --load-dialect-plugin).
extern "C" LLVM_ATTRIBUTE_WEAK mlir::PassPluginLibraryInfo
mlirGetPassPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "coat", LLVM_VERSION_STRING,
          []() { mlir::coat::registerCoatPasses(); }};
}
