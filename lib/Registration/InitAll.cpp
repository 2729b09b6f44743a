//===- InitAll.cpp - register every coat dialect and pass -----------------===//

#include "coat/InitAll.h"

#include "coat/Conversion/Passes.h"
#include "coat/Conversion/Pipelines.h"
#include "coat/Dialect/CoatDialect.h"
#include "coat/Transforms/Passes.h"

#include "mlir/IR/DialectRegistry.h"

void mlir::coat::registerCoatDialects(DialectRegistry &registry) {
  registry.insert<CoatDialect>();
}

void mlir::coat::registerCoatPasses() {
  // Both plugin entry points call this; the pass registry rejects duplicates.
  static bool registered = [] {
    registerCoatTransformsPasses();
    registerCoatConversionPasses();
    registerCoatPipelines();
    return true;
  }();
  (void)registered;
}
