//===- Passes.h - coat conversion passes ------------------------*- C++ -*-===//

#ifndef COAT_CONVERSION_PASSES_H
#define COAT_CONVERSION_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::coat {
#define GEN_PASS_DECL
#include "coat/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

#endif // COAT_CONVERSION_PASSES_H
