//===- Passes.h - coat transformation passes --------------------*- C++ -*-===//

#ifndef COAT_TRANSFORMS_PASSES_H
#define COAT_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::coat {
#define GEN_PASS_DECL
#include "coat/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "coat/Transforms/Passes.h.inc"
} // namespace mlir::coat

#endif // COAT_TRANSFORMS_PASSES_H
