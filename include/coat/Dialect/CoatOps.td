//===- CoatOps.td - coat operations -----------------------------*- tablegen -*-===//

#ifndef COAT_OPS_TD
#define COAT_OPS_TD

include "coat/Dialect/CoatTypes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def Coat_QTensor : Type<CPred<"::llvm::isa<::mlir::coat::QTensorType>($_self)">,
    "quantized tensor", "::mlir::coat::QTensorType">;
def Coat_HighPrecisionTensor : RankedTensorOf<[F32, BF16, F16]>;
def Coat_F32Scalar : TypeConstraint<F32.predicate, "f32">;

//===----------------------------------------------------------------------===//
// Entering and leaving the quantized representation
//===----------------------------------------------------------------------===//

def Coat_QuantizeOp : Coat_Op<"quantize", [Pure]> {
  let summary = "Quantizes a high-precision tensor to FP8";
  let description = [{
    Quantizes `input` to the result type. Without `scale`, each scale is
    derived from the absolute maximum of its group (or block, or tensor):
    `s = (absmax + eps) / fp8max`, then `q = fp8_rne_satfinite(x / s)`.
    With `scale` (only for `per_tensor` results, a rank-0 tensor), that scale
    is used as given (COAT's `fp8_division`).

    For an `expand` result the per-group exponent `k` (a multiple of
    `1/expand_min`) and centre `c` are derived from the group's maximum and
    minimum non-zero magnitude as in Dynamic Range Expansion.

    ```mlir
    %q = coat.quantize %x : tensor<4096x4096xbf16> -> !coat.qtensor<4096x4096xf8E4M3FN, per_group<16>, scale = bf16>
    %t = coat.quantize %x scale %s : tensor<64x64xf32> -> !coat.qtensor<64x64xf8E4M3FN, per_tensor>
    ```
  }];
  let arguments = (ins Coat_HighPrecisionTensor:$input,
                       Optional<RankedTensorOf<[F32, BF16]>>:$scale,
                       DefaultValuedAttr<F32Attr, "1.0e-10">:$eps,
                       DefaultValuedAttr<I64Attr, "16">:$expand_min);
  let results = (outs Coat_QTensor:$result);
  let assemblyFormat = [{
    $input (`scale` $scale^)? attr-dict `:` type($input) (`,` type($scale)^)?
    `->` qualified(type($result))
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Coat_DequantizeOp : Coat_Op<"dequantize", [Pure]> {
  let summary = "Dequantizes an FP8 tensor to a high-precision tensor";
  let description = [{
    `x = f32(q) * s`, un-expanded for `expand` inputs
    (`x = sign(y) * |y|^(1/k) * c`, `y = f32(q) * s`), then converted to the
    result element type.

    ```mlir
    %x = coat.dequantize %q : !coat.qtensor<16x64xf8E4M3FN, per_group<16>> -> tensor<16x64xbf16>
    ```
  }];
  let arguments = (ins Coat_QTensor:$input);
  let results = (outs Coat_HighPrecisionTensor:$result);
  let assemblyFormat = [{
    $input attr-dict `:` qualified(type($input)) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Coat_AssembleOp : Coat_Op<"assemble", [Pure, AttrSizedOperandSegments]> {
  let summary = "Builds a quantized tensor from its data and metadata tensors";
  let description = [{
    Makes a `!coat.qtensor` from FP8 codes, scales and, for expanded types,
    the `k` and `c` tensors. Buffers from outside the IR (function arguments,
    optimizer state) enter the quantized representation here. The operand
    types must be exactly those the result type derives.

    ```mlir
    %q = coat.assemble %data, %scale : tensor<256xf8E4M3FN>, tensor<2xf32>
           -> !coat.qtensor<256xf8E4M3FN, flat_group<128>>
    %e = coat.assemble %data, %scale, %k, %c
           : tensor<256xf8E4M3FN>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
           -> !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F8E4M3FN, F8E5M2]>:$data,
                       RankedTensorOf<[F32, BF16]>:$scale,
                       Optional<RankedTensorOf<[F32]>>:$k,
                       Optional<RankedTensorOf<[F32]>>:$c);
  let results = (outs Coat_QTensor:$result);
  let assemblyFormat = [{
    $data `,` $scale (`,` $k^ `,` $c)? attr-dict `:` type($data) `,` type($scale)
    (`,` type($k)^ `,` type($c))? `->` qualified(type($result))
  }];
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

def Coat_DisassembleOp : Coat_Op<"disassemble", [Pure,
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Takes a quantized tensor apart into data and metadata tensors";
  let description = [{
    The inverse of `coat.assemble`: returns the FP8 codes, the scales and, for
    expanded inputs, `k` and `c`. Result types follow from the input type.

    ```mlir
    %d, %s = coat.disassemble %q : !coat.qtensor<256xf8E4M3FN, flat_group<128>>
    ```
  }];
  let arguments = (ins Coat_QTensor:$input);
  let results = (outs RankedTensorOf<[F8E4M3FN, F8E5M2]>:$data,
                      RankedTensorOf<[F32, BF16]>:$scale,
                      Variadic<RankedTensorOf<[F32]>>:$expansion);
  let assemblyFormat = "$input attr-dict `:` qualified(type($input))";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

def Coat_AdamWUpdateOp : Coat_Op<"adamw_update", [Pure,
    AllTypesMatch<["m", "v", "new_m", "new_v"]>,
    AllTypesMatch<["param", "new_param"]>]> {
  let summary = "One decoupled AdamW update on high-precision moments";
  let description = [{
    The arithmetic of one AdamW step (COAT.md §2.4), all in f32, on
    unquantized moments; `step` is the already incremented step count t:

    ```
    m' = b1*m + (1-b1)*g
    v' = b2*v + ((1-b2)*g)*g
    denom = (sqrt(v') / sqrt(1 - b2^t) + eps) * (1 - b1^t)
    p' = p - lr * (m' / denom + wd * p)
    ```

    `coat-fuse-adamw` folds the chain `dequantize -> adamw_update ->
    quantize` of both moments into one `coat.adamw_step`.

    ```mlir
    %p2, %m2, %v2 = coat.adamw_update %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
        : tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32, BF16]>:$param,
                       RankedTensorOf<[F32, BF16]>:$grad,
                       RankedTensorOf<[F32]>:$m, RankedTensorOf<[F32]>:$v,
                       F32:$step, F32:$lr, F32:$beta1, F32:$beta2, F32:$eps,
                       F32:$weight_decay);
  let results = (outs RankedTensorOf<[F32, BF16]>:$new_param,
                      RankedTensorOf<[F32]>:$new_m, RankedTensorOf<[F32]>:$new_v);
  let assemblyFormat = [{
    $param `,` $grad `,` $m `,` $v `,` $step `,` $lr `,` $beta1 `,` $beta2 `,`
    $eps `,` $weight_decay attr-dict `:` type($param) `,` type($grad) `,` type($m)
  }];
  let hasVerifier = 1;
}

def Coat_AdamWStepOp : Coat_Op<"adamw_step", [Pure,
    AllTypesMatch<["param", "new_param"]>,
    AllTypesMatch<["m", "new_m"]>, AllTypesMatch<["v", "new_v"]>]> {
  let summary = "The fused FP8 AdamW step over quantized moments";
  let description = [{
    Dequantizes (and un-expands) the moments with their previous scales,
    performs the AdamW update of `coat.adamw_update`, then re-derives each
    group's scale (and, for `expand` moments, `k` and `c`) from the new f32
    moments and re-quantizes them (COAT.md §2.4-2.5).

    The moments' types choose format (E4M3/E5M2), group size and expansion per
    moment; both must use `flat_group<G>` over the parameter's shape.
    `mode = reference` reproduces the official kernel including its quirks
    (COAT.md §2.6); `mode = fixed` (default) uses a true zero-skipping
    minimum, keeps k in [1/expand_min, max_k], and never writes NaN codes for
    finite inputs.

    ```mlir
    %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
        : tensor<?xf32>, tensor<?xf32>,
          !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
          !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32, BF16]>:$param,
                       RankedTensorOf<[F32, BF16]>:$grad,
                       Coat_QTensor:$m, Coat_QTensor:$v,
                       F32:$step, F32:$lr, F32:$beta1, F32:$beta2, F32:$eps,
                       F32:$weight_decay,
                       DefaultValuedAttr<I64Attr, "16">:$expand_min,
                       DefaultValuedAttr<F32Attr, "16.0">:$max_k,
                       DefaultValuedAttr<Coat_OptimizerModeAttr,
                         "::mlir::coat::OptimizerMode::fixed">:$mode);
  let results = (outs RankedTensorOf<[F32, BF16]>:$new_param,
                      Coat_QTensor:$new_m, Coat_QTensor:$new_v);
  let assemblyFormat = [{
    $param `,` $grad `,` $m `,` $v `,` $step `,` $lr `,` $beta1 `,` $beta2 `,`
    $eps `,` $weight_decay attr-dict `:` type($param) `,` type($grad) `,`
    qualified(type($m)) `,` qualified(type($v))
  }];
  let hasVerifier = 1;
}

#endif // COAT_OPS_TD
