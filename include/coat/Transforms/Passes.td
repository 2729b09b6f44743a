//===- Passes.td - coat transformation passes -------------------*- tablegen -*-===//

#ifndef COAT_TRANSFORMS_PASSES_TD
#define COAT_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def CoatFuseAdamW : Pass<"coat-fuse-adamw"> {
  let summary = "Fuses a decomposed FP8 AdamW chain into one coat.adamw_step";
  let description = [{
    Recognises the optimizer step written as separate ops,

    ```mlir
    %m = coat.dequantize %qm : !coat.qtensor<...> -> tensor<...xf32>
    %v = coat.dequantize %qv : ...
    %p2, %m2, %v2 = coat.adamw_update %p, %g, %m, %v, ...
    %qm2 = coat.quantize %m2 : tensor<...xf32> -> !coat.qtensor<...>
    %qv2 = coat.quantize %v2 : ...
    ```

    and replaces it with one `coat.adamw_step`, whose lowering reads every
    byte of p, g, m, v and the group metadata once and writes it once. The
    chain fuses only when the re-quantized moments have the types of the
    dequantized ones, the f32 moments have no other users, and both
    quantizations use the default derived scales.
  }];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"fixed\"",
           "Numerics of the fused step: 'fixed' or 'reference'">,
  ];
  let dependentDialects = ["::mlir::coat::CoatDialect"];
}

#endif // COAT_TRANSFORMS_PASSES_TD
