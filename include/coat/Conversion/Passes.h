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

/// Kernel attribute marking its `nvvm.minctasm` as a request to keep only if
/// ptxas fits it without spilling: set by coat-lower-activations for
/// tile-min-ctas / flat-min-ctas, decided (and removed) by
/// coat-drop-spilling-min-ctas. Hints without it (the norms' forward
/// register budget, the GEMM's one CTA per multiprocessor) are kept as set.
/// Marks an f32 `math.exp2` to be evaluated on the FMA units instead of the
/// SFU (coat-expand-soft-exp2; set by coat-lower-pointwise{soft-exp2}).
constexpr llvm::StringLiteral kSoftExp2Attr = "coat.soft_exp2";

constexpr llvm::StringLiteral kMinCtasUnlessSpillingAttr =
    "coat.min_ctas_unless_spilling";
} // namespace mlir::coat

#endif // COAT_CONVERSION_PASSES_H
