//===- Passes.h - coat conversion passes ------------------------*- C++ -*-===//

#ifndef COAT_CONVERSION_PASSES_H
#define COAT_CONVERSION_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::coat {
#define GEN_PASS_DECL
#include "coat/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "coat/Conversion/Passes.h.inc"

/// Kernel attribute listing the parameters that hold a CUtensorMap by value
/// (indices into the lowered parameter list; they come first, so memref
/// expansion does not move them): set by coat-lower-linear, turned into byval
/// grid constants by coat-mark-grid-constants after gpu-to-nvvm.
constexpr llvm::StringLiteral kGridConstantAttr = "coat.grid_constant";
} // namespace mlir::coat

#endif // COAT_CONVERSION_PASSES_H
