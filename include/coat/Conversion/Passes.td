//===- Passes.td - coat conversion passes -----------------------*- tablegen -*-===//

#ifndef COAT_CONVERSION_PASSES_TD
#define COAT_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

#endif // COAT_CONVERSION_PASSES_TD
