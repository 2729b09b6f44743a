//===- CoatBase.td - The coat dialect ---------------------------*- tablegen -*-===//

#ifndef COAT_BASE_TD
#define COAT_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Coat_Dialect : Dialect {
  let name = "coat";
  let cppNamespace = "::mlir::coat";
  let summary = "FP8 training with scale-carrying quantized tensors (COAT)";
  let description = [{
    The `coat` dialect models FP8 training as in COAT (Xi et al., 2024):
    optimizer states stored in FP8 with per-group scales and Dynamic Range
    Expansion, and activations kept in FP8 with mixed granularity (per-tensor
    for linear-layer operands, per-group 1xG for non-linear layers).

    Its central type, `!coat.qtensor`, carries everything needed to interpret
    the bytes: the logical shape, the FP8 format, the scaling granularity, the
    scale element type and whether the data is range-expanded. The shapes of
    the data, scale, `k` and `c` tensors follow from the type alone.

    Ops have value semantics on tensors; lowerings bufferize at the edge.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = ["::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect"];
}

class Coat_Op<string mnemonic, list<Trait> traits = []>
    : Op<Coat_Dialect, mnemonic, traits>;

#endif // COAT_BASE_TD
