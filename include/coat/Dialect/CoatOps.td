//===- CoatOps.td - coat operations -----------------------------*- tablegen -*-===//

#ifndef COAT_OPS_TD
#define COAT_OPS_TD

include "coat/Dialect/CoatTypes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def Coat_QTensor : Type<CPred<"::llvm::isa<::mlir::coat::QTensorType>($_self)">,
    "quantized tensor", "::mlir::coat::QTensorType">;
def Coat_Unresolved : Type<CPred<"::llvm::isa<::mlir::coat::UnresolvedType>($_self)">,
    "unresolved FP8 copy", "::mlir::coat::UnresolvedType">;
/// An FP8 operand: a quantized tensor, or before coat-mixed-granularity an
/// unresolved one whose format and granularity are still to be chosen.
def Coat_Fp8Operand : Type<Or<[
    CPred<"::llvm::isa<::mlir::coat::QTensorType>($_self)">,
    CPred<"::llvm::isa<::mlir::coat::UnresolvedType>($_self)">]>,
    "quantized tensor or unresolved FP8 copy", "::mlir::ShapedType">;
def Coat_HighPrecisionTensor : RankedTensorOf<[F32, BF16, F16]>;
def Coat_F32Scalar : TypeConstraint<F32.predicate, "f32">;
def Coat_ScaleTensor : RankedTensorOf<[F32, BF16]>;
def Coat_StatTensor : RankedTensorOf<[F32]>;
// The result of a forward precision-flow op: FP8 with its scales, or the
// unquantized values (coat-group-scaling splits a per-tensor FP8 result into
// these plus a separate coat.quantize, COAT.md §3.1).
def Coat_FlowResult : AnyTypeOf<[Coat_QTensor, Coat_HighPrecisionTensor]>;
// A memory-bound op, deterministic and cheap enough to run twice:
// coat-recompute-activations may run it again in the backward (alone or in a
// chain of such ops) rather than keep its result.
def Coat_Recomputable : NativeOpTrait<"coat::Recomputable">;
// An op whose kernel can write its result (of its first operand's type) into
// the buffer of its first operand, where the caller gives that buffer up: the
// kernel-spec argument is marked `coat.writable` (coat-outline-kernels does so
// when the program reads the operand nowhere else).
def Coat_InPlace : NativeOpTrait<"coat::InPlace">;

//===----------------------------------------------------------------------===//
// Entering and leaving the quantized representation
//===----------------------------------------------------------------------===//

def Coat_QuantizeOp : Coat_Op<"quantize", [Pure, Coat_Recomputable]> {
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
}

def Coat_QuantizeAutoOp : Coat_Op<"quantize_auto", [Pure]> {
  let summary = "Quantizes to FP8 with format and granularity chosen from the consumers";
  let description = [{
    Marks the point where a high-precision tensor enters FP8 without fixing
    how: the result is an `!coat.unresolved` value that FP8 consumers accept.
    `coat-mixed-granularity` replaces the op by `coat.quantize` (and, when
    consumers need two granularities, `coat.requantize`) following COAT's
    mixed-granularity rules (COAT.md §3.1, §3.8): per-tensor for linear-layer
    operands, per-group 1xG for non-linear layers; E4M3 in the forward and
    E5M2 for gradients. The consumers decide the direction unless
    `direction` states it.

    ```mlir
    %u = coat.quantize_auto %x : tensor<4096x11008xbf16> -> !coat.unresolved<4096x11008xbf16>
    %s = coat.silu %u : !coat.unresolved<4096x11008xbf16>
        -> !coat.qtensor<4096x11008xf8E4M3FN, per_group<16>, scale = bf16>
    %g = coat.quantize_auto %dy {direction = #coat.direction<backward>}
        : tensor<4096x4096xbf16> -> !coat.unresolved<4096x4096xbf16>
    ```
  }];
  let arguments = (ins Coat_HighPrecisionTensor:$input,
                       OptionalAttr<Coat_FlowDirectionAttr>:$direction);
  let results = (outs Coat_Unresolved:$result);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` qualified(type($result))
  }];
  let hasVerifier = 1;
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

    With `grad_scale` (a rank-0 f32 tensor, e.g. global gradient-norm
    clipping's `min(1, max_norm / (norm + 1e-6))`), `g` is the gradient
    times that scale, formed in f32 and not rounded to the gradient's type.

    `coat-fuse-adamw` folds the chain `dequantize -> adamw_update ->
    quantize` of both moments into one `coat.adamw_step` (which takes the
    gradient scale along).

    ```mlir
    %p2, %m2, %v2 = coat.adamw_update %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
        : tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>
    %p3, %m3, %v3 = coat.adamw_update %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
        grad_scale %s : tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>, tensor<f32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32, BF16]>:$param,
                       RankedTensorOf<[F32, BF16]>:$grad,
                       RankedTensorOf<[F32]>:$m, RankedTensorOf<[F32]>:$v,
                       F32:$step, F32:$lr, F32:$beta1, F32:$beta2, F32:$eps,
                       F32:$weight_decay,
                       Optional<RankedTensorOf<[F32]>>:$grad_scale);
  let results = (outs RankedTensorOf<[F32, BF16]>:$new_param,
                      RankedTensorOf<[F32]>:$new_m, RankedTensorOf<[F32]>:$new_v);
  let assemblyFormat = [{
    $param `,` $grad `,` $m `,` $v `,` $step `,` $lr `,` $beta1 `,` $beta2 `,`
    $eps `,` $weight_decay (`grad_scale` $grad_scale^)? attr-dict `:`
    type($param) `,` type($grad) `,` type($m) (`,` type($grad_scale)^)?
  }];
  let hasVerifier = 1;
}

def Coat_AdamWStepOp : Coat_Op<"adamw_step", [Pure, AttrSizedOperandSegments,
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

    Results round to nearest even unless `stochastic_param` (bf16
    parameters) or `stochastic_moments` (the FP8 codes of m and v) asks for
    stochastic rounding, in `mode = fixed` only: each element's random bits
    are a function of `seed`, the step, the element's index and the result
    alone (docs/optimizer-numerics.md §5), so a step is reproducible and
    reads no random state. The seed operand is present exactly when one of
    the two is set.

    `grad_scale` (a rank-0 f32 tensor, read once) multiplies the gradient in
    f32 as it is loaded, before the moments: global gradient-norm clipping's
    `min(1, max_norm / (norm + 1e-6))` is applied without a pass that
    rewrites the gradient. The scaled gradient is not rounded to the
    gradient's type. Its kernel takes the argument `grad_scale` (a buffer of
    one f32), so a device scalar reaches it without a host synchronisation
    and a CUDA graph replays it.

    `master` (an f32 tensor of the parameter's shape, with bf16 parameters)
    is the parameter's f32 master copy: the update reads and writes it, and
    the new bf16 parameter is the new master rounded to nearest even, so the
    model trains on bf16 parameters and gradients with the numerics of f32
    parameters cast to bf16 for every use. The kernel writes both copies in
    the pass that updates them (no cast of the parameters before a forward,
    no f32 gradient). The result `new_master` is present exactly when
    `master` is.

    ```mlir
    %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
        : tensor<?xf32>, tensor<?xf32>,
          !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
          !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
    %q2, %n2, %w2 = coat.adamw_step %q, %h, %n, %w, %t, %lr, %b1, %b2, %eps, %wd
        seed %seed {stochastic_param, stochastic_moments}
        : tensor<?xbf16>, tensor<?xbf16>,
          !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
          !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
    %p3, %m3, %v3 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
        grad_scale %s
        : tensor<?xf32>, tensor<?xf32>,
          !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
          !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, tensor<f32>
    %q4, %m4, %v4, %w4 = coat.adamw_step %q, %h, %m, %v, %t, %lr, %b1, %b2, %eps,
        %wd master %w
        : tensor<?xbf16>, tensor<?xbf16>,
          !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
          !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
          master tensor<?xf32> -> tensor<?xf32>
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
                         "::mlir::coat::OptimizerMode::fixed">:$mode,
                       UnitAttr:$stochastic_param,
                       UnitAttr:$stochastic_moments,
                       Optional<I64>:$seed,
                       Optional<RankedTensorOf<[F32]>>:$grad_scale,
                       Optional<RankedTensorOf<[F32]>>:$master);
  let results = (outs RankedTensorOf<[F32, BF16]>:$new_param,
                      Coat_QTensor:$new_m, Coat_QTensor:$new_v,
                      Optional<RankedTensorOf<[F32]>>:$new_master);
  let assemblyFormat = [{
    $param `,` $grad `,` $m `,` $v `,` $step `,` $lr `,` $beta1 `,` $beta2 `,`
    $eps `,` $weight_decay (`seed` $seed^)? (`grad_scale` $grad_scale^)?
    (`master` $master^)?
    attr-dict `:` type($param) `,` type($grad) `,`
    qualified(type($m)) `,` qualified(type($v)) (`,` type($grad_scale)^)?
    (`master` type($master)^ `->` type($new_master))?
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Changing the representation of a quantized tensor
//===----------------------------------------------------------------------===//

def Coat_RequantizeOp : Coat_Op<"requantize", [Pure]> {
  let summary = "Re-quantizes an FP8 tensor to another format or granularity";
  let description = [{
    Semantically `quantize(dequantize(input))` through f32: the input is
    dequantized (and un-expanded) and quantized to the result type, which has
    the same shape but may differ in format, scaling granularity, scale type
    and expansion. Scales of the result are derived from its own groups as in
    `coat.quantize` (with `eps` and `expand_min`), with one exception: from
    `per_group` codes to a `per_tensor` result of the same format and scale
    type (neither expanded), the scale is the largest of the input's group
    scales. That is COAT's group scaling (COAT.md §3.1), the scale a
    per-tensor quantization of the original values gets; it equals the scale
    derived from the dequantized values whenever the tensor's maximum is
    above about `eps * 2^24` (the largest group's largest code is fp8max).

    When the result type equals the input type the op is defined to be the
    identity (codes and scales are kept), and it folds away.

    This is the way to change a `per_group` tensor into something that can be
    transposed (`per_tensor` or `per_block`).

    ```mlir
    %r = coat.requantize %q : !coat.qtensor<128x256xf8E4M3FN, per_group<16>, scale = bf16>
           -> !coat.qtensor<128x256xf8E4M3FN, per_tensor>
    ```
  }];
  let arguments = (ins Coat_QTensor:$input,
                       DefaultValuedAttr<F32Attr, "1.0e-10">:$eps,
                       DefaultValuedAttr<I64Attr, "16">:$expand_min);
  let results = (outs Coat_QTensor:$result);
  let assemblyFormat = [{
    $input attr-dict `:` qualified(type($input)) `->` qualified(type($result))
  }];
  let extraClassDeclaration = [{
    /// Whether the result's scale is the largest of the input's group
    /// scales (the exception the description names).
    bool takesMaxOfGroupScales();
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Coat_TransposeOp : Coat_Op<"transpose", [Pure, Coat_Recomputable]> {
  let summary = "Transposes a 2-D quantized tensor without re-quantizing it";
  let description = [{
    Moves the FP8 codes of a 2-D tensor `[M, N]` to `[N, M]`; no value
    changes. The scales follow the data:

    - `per_tensor`: the scale is kept.
    - `per_block<RxC>`: the block grid is transposed, giving
      `per_block<CxR>` with the transposed scale matrix.
    - `per_group` / `flat_group`: the groups would run along the other axis,
      so the tensor cannot be transposed without re-quantization; use
      `coat.requantize` to `per_tensor` or `per_block` first.

    Format, scale type and expansion are unchanged. Linear layers need the
    transposed copies because FP8 tensor cores read both operands K-major
    (COAT.md §3.2). `transpose(transpose(x))` folds to `x`.

    Before `coat-mixed-granularity`, the input may be `!coat.unresolved`; the
    result is then the unresolved `[N, M]` copy, and it resolves to the
    transpose of the per-tensor copy.

    ```mlir
    %t = coat.transpose %g : !coat.qtensor<128x256xf8E5M2, per_tensor>
           -> !coat.qtensor<256x128xf8E5M2, per_tensor>
    %w = coat.transpose %b : !coat.qtensor<512x256xf8E4M3FN, per_block<128x64>>
           -> !coat.qtensor<256x512xf8E4M3FN, per_block<64x128>>
    ```
  }];
  let arguments = (ins Coat_Fp8Operand:$input);
  let results = (outs Coat_Fp8Operand:$result);
  let assemblyFormat = [{
    $input attr-dict `:` qualified(type($input)) `->` qualified(type($result))
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Scale computation
//===----------------------------------------------------------------------===//

def Coat_AbsMaxOp : Coat_Op<"absmax", [Pure, Coat_Recomputable]> {
  let summary = "Absolute maxima of a high-precision tensor per group, block or tensor";
  let description = [{
    Computes `max |x|` over every group of `scaling`, in f32. The result is
    shaped like the scale tensor of a `!coat.qtensor` with that scaling
    (`coat::scaleShape`): rank 0 for `per_tensor`, the innermost dimension
    divided by G for `per_group<G>`, `ceil(numel / G)` for `flat_group<G>`,
    the two innermost dimensions divided (rounded up) by R and C for
    `per_block<RxC>`. Partial groups and blocks take the maximum over their
    valid elements. No epsilon is added; that is part of deriving a scale
    (`s = (absmax + eps) / fp8max`).

    The first stage of COAT's "group scaling" (COAT.md §3.1) is an `absmax`
    with a grouped scaling; the second stage is `coat.reduce_scales`.

    `epilogue` says that the maxima are computed by the op that produces
    `input`, in its epilogue while the values are still in registers, so no
    kernel reads `input` again just to find its maxima. The input must then
    be an op result; `coat-group-scaling` creates such ops and a lowering
    must fuse them into the producer.

    ```mlir
    %g = coat.absmax %x, per_group<16> : tensor<128x256xbf16> -> tensor<128x16xf32>
    %y = coat.linear forward %a, %w : !coat.qtensor<128x64xf8E4M3FN, per_tensor>,
           !coat.qtensor<256x64xf8E4M3FN, per_tensor> -> tensor<128x256xbf16>
    %p = coat.absmax %y, per_group<16> epilogue : tensor<128x256xbf16> -> tensor<128x16xf32>
    %t = coat.absmax %x, per_tensor : tensor<128x256xbf16> -> tensor<f32>
    ```
  }];
  let arguments = (ins Coat_HighPrecisionTensor:$input, Coat_ScalingAttr:$scaling,
                       UnitAttr:$epilogue);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $input `,` custom<ScalingBody>($scaling) (`epilogue` $epilogue^)? attr-dict
    `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Coat_ReduceScalesOp : Coat_Op<"reduce_scales", [Pure, Coat_Recomputable]> {
  let summary = "Maximum of partial maxima or scales: the second stage of group scaling";
  let description = [{
    Returns the maximum over all entries of `input`, as a rank-0 tensor of
    the same element type. The entries are non-negative partial maxima (from
    `coat.absmax`) or group scales (from `coat.disassemble`). Because
    `s = (absmax + eps) / fp8max` is monotone, the maximum of the group scales
    is the per-tensor scale: this is COAT's just-in-time per-tensor scaling,
    which reads the small scale tensor instead of the whole activation
    (COAT.md §3.1, Fig. 4b). A rank-0 input folds to itself.

    ```mlir
    %g = coat.absmax %x, per_group<16> : tensor<128x256xbf16> -> tensor<128x16xf32>
    %m = coat.reduce_scales %g : tensor<128x16xf32> -> tensor<f32>
    ```
  }];
  let arguments = (ins Coat_ScaleTensor:$input);
  let results = (outs Coat_ScaleTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Linear layers
//===----------------------------------------------------------------------===//

def Coat_LinearOp : Coat_Op<"linear", [Pure, AttrSizedOperandSegments]> {
  let summary = "FP8 GEMM of a linear layer (forward, dgrad or wgrad)";
  let description = [{
    Computes `C[M, P] = (A[M, R] · B[P, R]^T) · s_A · s_B (+ bias) (+ addend)` with both
    operands K-major (contiguous along the reduction dimension R), as FP8
    tensor cores need (COAT.md §3.2). The accumulator is f32. `kind` names
    which GEMM of a linear layer `Y = X · W^T` (X: T×K, W: N×K) this is:

    | kind | lhs | rhs | result |
    |---|---|---|---|
    | `forward` | X `[T, K]` | W `[N, K]` | Y `[T, N]` |
    | `dgrad` | dY `[T, N]` | W^T stored `[K, N]` | dX `[T, K]` |
    | `wgrad` | dY^T stored `[N, T]` | X^T stored `[K, T]` | dW `[N, K]` |

    Scaling: both operands `per_tensor` (COAT's Triton GEMM, §4.1), or lhs
    `per_group<128>` (1x128) and rhs `per_block<128x128>` with f32 scales
    (DeepSeek-style, §4.4; scales applied per 128-wide K block). Operands
    are never range-expanded.

    Formats: `forward` is E4M3 x E4M3. In the backward kinds a gradient may
    be E5M2: `dgrad` needs an E4M3 rhs (the weight), `wgrad` allows at most
    one E5M2 operand.

    `bias` (1-D, length P, added in f32) is allowed only for `forward`. The
    result is a bf16/f32 tensor, or, for `forward` with per-tensor operands,
    a `per_group<16>` qtensor in the lhs format whose group scales are
    derived in the epilogue (COAT's quantized GEMM output feeding SiLU).

    `addend` (a tensor of the result's type, added in f32 before the result
    is rounded, after the bias) sums another GEMM's result into this one in
    the epilogue: `coat-fuse-linear-sum` makes it from a
    `coat.residual_add_grad` of two GEMM results (a SwiGLU MLP's gate and up
    dgrads). The sum is rounded once instead of twice.

    ```mlir
    %y = coat.linear forward %x, %w bias %b
           : !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
             !coat.qtensor<512x256xf8E4M3FN, per_tensor>, tensor<512xbf16>
           -> tensor<128x512xbf16>
    %dx = coat.linear dgrad %dy, %wt
           : !coat.qtensor<128x512xf8E5M2, per_tensor>,
             !coat.qtensor<256x512xf8E4M3FN, per_tensor> -> tensor<128x256xbf16>
    %dw = coat.linear wgrad %dyt, %xt
           : !coat.qtensor<512x128xf8E4M3FN, per_group<128>>,
             !coat.qtensor<256x128xf8E4M3FN, per_block<128x128>> -> tensor<512x256xf32>
    ```
  }];
  let arguments = (ins Coat_LinearKindAttr:$kind, Coat_Fp8Operand:$lhs,
                       Coat_Fp8Operand:$rhs,
                       Optional<RankedTensorOf<[F32, BF16]>>:$bias,
                       Optional<RankedTensorOf<[F32, BF16]>>:$addend);
  let results = (outs AnyTypeOf<[RankedTensorOf<[F32, BF16]>, Coat_QTensor],
                                "bf16/f32 tensor or quantized tensor">:$result);
  let assemblyFormat = [{
    custom<LinearKind>($kind) $lhs `,` $rhs (`bias` $bias^)?
    (`addend` `(` $addend^ `:` type($addend) `)`)? attr-dict `:`
    qualified(type($lhs)) `,` qualified(type($rhs)) (`,` type($bias)^)? `->`
    qualified(type($result))
  }];
  let hasVerifier = 1;
}

def Coat_BiasGradOp : Coat_Op<"bias_grad", [Pure]> {
  let summary = "Gradient of a linear layer's bias: dy summed over tokens";
  let description = [{
    `db[o] = Σ_t dy[t, o]` for the output gradient `dy` `[T, O]` of a
    `coat.linear forward` with a bias, accumulated in f32 from the
    high-precision `dy` (not its FP8 copy) and rounded once to the result
    type (f32 or bf16, usually the bias's).

    The sum is deterministic: it adds in a fixed order that depends on the
    shape alone (`coat/Numerics/ColumnSums.h`: partials of strided rows,
    then strided runs over the partials), so a GPU kernel, its CPU twin and
    the reference library agree bit for bit on any GPU. It takes two
    launches (`coat-lower-bias-grad`): a bandwidth-bound kernel where each
    thread adds one 16-byte column vector over the rows of its partial into
    an f32 workspace, then a small one that adds the workspace rows.

    The first kernel reads all of `dy`, so it also takes the one other read
    of `dy` that has the same shape: the 1xG maxima (`coat.absmax`, not
    `epilogue`) that `coat-outline-kernels` gives a gradient entering the
    program, for the per-tensor scale of its E5M2 copy. The outliner puts
    both ops in one kernel where `canFuseMaxima` holds, so an incoming
    gradient is read once for both. A `dy` that a coat op produces has its
    maxima in that producer's epilogue instead (`coat-group-scaling`); the
    producers' kernels are element-wise or row-wise and hold no column
    accumulators, so there the bias gradient is one more read of `dy`.

    ```mlir
    %db = coat.bias_grad %dy : tensor<?x512xbf16> -> tensor<512xbf16>
    ```
  }];
  let arguments = (ins Coat_HighPrecisionTensor:$grad);
  let results = (outs RankedTensorOf<[F32, BF16]>:$dbias);
  let assemblyFormat = "$grad attr-dict `:` type($grad) `->` type($dbias)";
  let extraClassDeclaration = [{
    /// Whether the bias-gradient kernel can also write `maxima`, a
    /// `coat.absmax` of this op's input that no producer computes: a
    /// per_group<G> whose groups the kernel's lanes can combine
    /// (coat::columnSumFusesMaxima). coat-outline-kernels fuses exactly
    /// these, and coat-lower-bias-grad lowers them.
    bool canFuseMaxima(AbsMaxOp maxima);
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

def Coat_CrossEntropyOp : Coat_Op<"cross_entropy", [Pure, Coat_InPlace]> {
  let summary = "Per-row softmax cross-entropy of bf16 logits and its gradient";
  let description = [{
    For each row `x` (a token's `V` logits) of `logits` `[T, V]` and its
    class `t = targets[row]`:

    ```
    loss[row]   = logsumexp(x) - x[t]              (0.0 where t = ignore_index)
    dlogits[row] = softmax(x) - onehot(t)          (zeros where t = ignore_index)
    ```

    The gradient is that of the row's loss, not scaled: the caller applies
    the mean's `1/n` and the incoming gradient to what it makes of it (a
    linear layer's two GEMMs, coat.nn.linear_cross_entropy). Forward and
    backward are one op, so the caller never keeps the logits: the
    gradient is ready when the loss is.

    Evaluation (f32 throughout, `coat-lower-cross-entropy`): with
    `E(d) = soft_exp2(d * log2(e))` (coat/Numerics/SoftExp2.h, the
    FMA-unit 2^x that the GPU and the CPU compute alike) each row is read
    in aligned chunks of 8 elements (`V` need not be a multiple of 8; the
    first and last chunk of a row may be partial) that the `threads` of the
    row's team take round-robin, each keeping an online maximum `m` and sum
    `s`: per chunk `m' = max(m, max chunk)`, `s = s * E(m - m')`, then
    `s += E(x_i - m')` in element order (`m` starts at `-FLT_MAX`, so a
    `-inf` logit adds exactly 0). The teams' pairs combine by a butterfly
    within each warp, then across warps in warp order; `loss = (m - x[t]) +
    soft_log(s)` (coat/Numerics/SoftLog.h) and `dlogits = E(x - m) * (1 /
    s)`, minus 1 at `t`, rounded once to bf16. The order depends on `V` and
    the row's offset modulo 8 only, so the GPU kernel, its CPU twin and the
    reference library (`coat_ref_cross_entropy`) agree bit for bit.

    Special rows. A NaN logit, or a `+inf` one, makes the row's loss and
    every gradient element NaN (as for torch's `cross_entropy`); a row of
    only `-inf` has a NaN loss and gradient; a `-inf` target logit in an
    otherwise finite row gives `+inf`. A target that is neither
    `ignore_index` nor in `[0, V)` is never read: that row's loss and
    gradient are NaN, which the finiteness flags of a program report
    (`coat.finite_flag`); coat.nn checks its targets before it calls the
    program.

    `targets` is i64 (torch's class-index dtype, passed without a copy; the
    executor and runtime move i32 and i64 buffers alike). `dlogits` has the
    type of `logits`; in a kernel spec whose `logits` is a `coat.writable`
    argument the kernel writes it over the logits (one buffer of `[T, V]`
    in all), which a program asks for by marking its logits argument
    `coat.writable`.

    ```mlir
    %loss, %dlogits = coat.cross_entropy %logits, %targets ignore_index = -100
        : tensor<?x32000xbf16>, tensor<?xi64> -> tensor<?xf32>, tensor<?x32000xbf16>
    ```
  }];
  let arguments = (ins RankedTensorOf<[BF16]>:$logits,
                       RankedTensorOf<[I64]>:$targets,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs RankedTensorOf<[F32]>:$loss,
                      RankedTensorOf<[BF16]>:$dlogits);
  let assemblyFormat = [{
    $logits `,` $targets (`ignore_index` `=` $ignore_index^)? attr-dict `:`
    type($logits) `,` type($targets) `->` type($loss) `,` type($dlogits)
  }];
  let extraClassDeclaration = [{
    /// V: the row length (static).
    int64_t getVocab();
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Rotary position embedding
//===----------------------------------------------------------------------===//

def Coat_RopeOp : Coat_Op<"rope", [Pure, Coat_Recomputable, Coat_InPlace]> {
  let summary = "Rotary position embedding of the leading heads of a token matrix";
  let description = [{
    Rotates the first `rotated_heads` heads of each row (token) of `input`,
    a `[T, N]` matrix of heads of `d` columns (q, k and v side by side, as
    one GEMM over the stacked projections writes them), by the angles of
    that token. `d` (`head_dim`) is the row length of the tables `cos` and
    `sin` (`[T, d]`, one row per token of `input`), which must be static and
    even. In Hugging Face's layout (the two halves of a head rotate together)
    a head `x = [x1, x2]` becomes, with the token's table rows split the same
    way,

    ```
    y = x * cos + rotate_half(x) * sin,   rotate_half(x) = [-x2, x1]
    y1 = x1 * cos1 - x2 * sin1
    y2 = x2 * cos2 + x1 * sin2
    ```

    Heads past the first `rotated_heads` (v) are unchanged. Each product
    and the sum are f32 operations (no fused multiply-add) on the f32 values
    of the operands, and the sum is rounded once to the result type. That is
    more accurate than Hugging Face's bf16 modules, which round `x * cos`,
    `rotate_half(x) * sin` and their sum to bf16 each.

    The result has the type of `input`. In a kernel spec whose `input` is a
    `coat.writable` argument the kernel writes the rotated heads into
    `input`'s buffer and leaves the other columns alone: they already hold
    the result.

    `epilogue` (set by `coat-fuse-rope`) makes the rotation part of the
    kernel of the `coat.linear` that produces `input`, its only reader: the
    GEMM's epilogue rotates its result in registers and writes `result`, so
    `input` is never stored. The values are the same bits: the epilogue
    rounds the GEMM's values to `input`'s type before rotating them.

    ```mlir
    %qkv_r = coat.rope %qkv, %cos, %sin rotated_heads = 32
        : tensor<?x3072xbf16>, tensor<?x64xf32>, tensor<?x64xf32>
        -> tensor<?x3072xbf16>
    ```
  }];
  let arguments = (ins Coat_HighPrecisionTensor:$input,
                       Coat_HighPrecisionTensor:$cos,
                       Coat_HighPrecisionTensor:$sin,
                       I64Attr:$rotated_heads,
                       UnitAttr:$epilogue);
  let results = (outs Coat_HighPrecisionTensor:$result);
  let assemblyFormat = [{
    $input `,` $cos `,` $sin `rotated_heads` `=` $rotated_heads
    (`epilogue` $epilogue^)? attr-dict `:`
    type($input) `,` type($cos) `,` type($sin) `->` type($result)
  }];
  let extraClassDeclaration = [{
    /// d: the row length of the tables.
    int64_t getHeadDim();
    /// The GEMM whose epilogue rotates `input` (`epilogue`), or null.
    LinearOp getFusedProducer();
  }];
  let hasVerifier = 1;
}

def Coat_RopeGradOp : Coat_Op<"rope_grad", [Pure, Coat_InPlace]> {
  let summary = "Backward of coat.rope";
  let description = [{
    The gradient of `coat.rope` with respect to its input, from the gradient
    `grad` of its result: the transpose of the rotation, head by head,

    ```
    dx = dy * cos - rotate_half(dy * sin)
    dx1 = dy1 * cos1 + dy2 * sin2
    dx2 = dy2 * cos2 - dy1 * sin1
    ```

    with the same tables, `rotated_heads` and evaluation (f32 products and
    sum, one rounding to the result type) as the forward; the other heads'
    gradient passes through. Where the halves of the tables are equal, as
    in Hugging Face's, this is the rotation by the opposite angle.
    The result has the type of `grad`; as for `coat.rope`, a `coat.writable`
    `grad` argument of a kernel spec lends it its buffer.

    ```mlir
    %dqkv = coat.rope_grad %dqkv_r, %cos, %sin rotated_heads = 32
        : tensor<?x3072xbf16>, tensor<?x64xf32>, tensor<?x64xf32>
        -> tensor<?x3072xbf16>
    ```
  }];
  let arguments = (ins Coat_HighPrecisionTensor:$grad,
                       Coat_HighPrecisionTensor:$cos,
                       Coat_HighPrecisionTensor:$sin,
                       I64Attr:$rotated_heads);
  let results = (outs Coat_HighPrecisionTensor:$dx);
  let assemblyFormat = [{
    $grad `,` $cos `,` $sin `rotated_heads` `=` $rotated_heads attr-dict `:`
    type($grad) `,` type($cos) `,` type($sin) `->` type($dx)
  }];
  let extraClassDeclaration = [{
    /// d: the row length of the tables.
    int64_t getHeadDim();
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// FP8 precision flow: non-linear layers (COAT.md §3.4)
//===----------------------------------------------------------------------===//

def Coat_SiluOp : Coat_Op<"silu", [Pure, Coat_Recomputable]> {
  let summary = "SiLU on a 1xG-quantized FP8 activation";
  let description = [{
    `y = x · sigmoid(x)` computed in f32 from the dequantized input and
    re-quantized with fresh group scales. Input and result are 1xG
    (`per_group<G>`) E4M3 and have the same type (COAT's `silu_fwd`).

    The result may instead be a bf16/f16/f32 tensor of the input shape (no
    transposed copy): the unquantized values, which is how
    `coat-group-scaling` leaves an op whose per-tensor scale it takes from
    partial maxima.

    ```mlir
    %y = coat.silu %x : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>
                     -> !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>
    ```
  }];
  let arguments = (ins Coat_Fp8Operand:$input);
  let results = (outs Coat_FlowResult:$result);
  let assemblyFormat = [{
    $input attr-dict `:` qualified(type($input)) `->` qualified(type($result))
  }];
  let hasVerifier = 1;
}

def Coat_SiluGradOp : Coat_Op<"silu_grad", [Pure, AttrSizedResultSegments]> {
  let summary = "Backward of coat.silu";
  let description = [{
    `dx = dy · (σ + x·σ·(1 − σ))`, `σ = sigmoid(x)`, from the saved 1xG E4M3
    input `x` and the high-precision output gradient `dy`. Results: `dx` in
    the type of `dy`, optionally a `per_tensor` E5M2 copy of `dx` (scaled by
    group scaling) for the linear backward, and optionally the transposed
    copy of that (for wgrad; 2-D `[N, M]` of `dx` viewed as `[M, N]`).

    ```mlir
    %dx, %dxq, %dxt = coat.silu_grad %x, %dy
        : !coat.qtensor<128x512xf8E4M3FN, per_group<16>>, tensor<128x512xbf16>
        -> tensor<128x512xbf16>, !coat.qtensor<128x512xf8E5M2, per_tensor>,
           !coat.qtensor<512x128xf8E5M2, per_tensor>
    ```
  }];
  let arguments = (ins Coat_Fp8Operand:$input, Coat_HighPrecisionTensor:$grad);
  let results = (outs Coat_HighPrecisionTensor:$dx,
                      Optional<Coat_QTensor>:$dx_q,
                      Optional<Coat_QTensor>:$dx_qt);
  let assemblyFormat = [{
    $input `,` $grad attr-dict `:` qualified(type($input)) `,` type($grad)
    `->` type($dx) (`,` qualified(type($dx_q))^)? (`,` qualified(type($dx_qt))^)?
  }];
  let hasVerifier = 1;
}

def Coat_GeluOp : Coat_Op<"gelu", [Pure, Coat_Recomputable]> {
  let summary = "GELU (exact erf, or its tanh form) on a 1xG-quantized FP8 "
                "activation";
  let description = [{
    `y = x · (1 + erf(x / sqrt(2))) / 2` in f32. The input is 1xG E4M3; the
    result is a `per_tensor` FP8 tensor of the input format (scaled by group
    scaling), optionally with its 2-D transposed copy (COAT's `gelu_fwd`).

    `approximate` names the form as torch does: `"none"` (the default,
    elided) is the exact function above; `"tanh"` is
    `y = x · (1 + tanh(sqrt(2/π) · (x + 0.044715 x³))) / 2`, torch's
    `gelu(approximate="tanh")` and GPT-2's `gelu_new`.

    The result may instead be a bf16/f16/f32 tensor of the input shape (no
    transposed copy): the unquantized values, which is how
    `coat-group-scaling` leaves an op whose per-tensor scale it takes from
    partial maxima.

    ```mlir
    %y, %yt = coat.gelu %x : !coat.qtensor<128x512xf8E4M3FN, per_group<16>>
        -> !coat.qtensor<128x512xf8E4M3FN, per_tensor>,
           !coat.qtensor<512x128xf8E4M3FN, per_tensor>
    %z = coat.gelu %x {approximate = "tanh"}
        : !coat.qtensor<128x512xf8E4M3FN, per_group<16>> -> tensor<128x512xbf16>
    ```
  }];
  let arguments = (ins Coat_Fp8Operand:$input,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let results = (outs Coat_FlowResult:$result, Optional<Coat_QTensor>:$result_t);
  let assemblyFormat = [{
    $input attr-dict `:` qualified(type($input)) `->` qualified(type($result))
    (`,` qualified(type($result_t))^)?
  }];
  let extraClassDeclaration = [{
    /// Whether the op computes GELU's tanh form.
    bool isTanh() { return getApproximate() == "tanh"; }
  }];
  let hasVerifier = 1;
}

def Coat_GeluGradOp : Coat_Op<"gelu_grad", [Pure, AttrSizedResultSegments]> {
  let summary = "Backward of coat.gelu";
  let description = [{
    `dx = dy · (Φ(x) + x · exp(−x²/2) / sqrt(2π))` from the saved 1xG E4M3
    input. Results as for `coat.silu_grad`: `dx` in the type of `dy`, an
    optional `per_tensor` E5M2 copy and its optional transposed copy.

    With `approximate = "tanh"` it is the derivative of the tanh form,
    `dx = dy · ((1 + t)/2 + x/2 · (1 − t²) · sqrt(2/π) · (1 + 3 · 0.044715 x²))`,
    `t = tanh(sqrt(2/π) · (x + 0.044715 x³))`; the forward op and its
    gradient must name the same form.

    ```mlir
    %dx, %dxq = coat.gelu_grad %x, %dy
        : !coat.qtensor<128x512xf8E4M3FN, per_group<16>>, tensor<128x512xbf16>
        -> tensor<128x512xbf16>, !coat.qtensor<128x512xf8E5M2, per_tensor>
    ```
  }];
  let arguments = (ins Coat_Fp8Operand:$input, Coat_HighPrecisionTensor:$grad,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let results = (outs Coat_HighPrecisionTensor:$dx,
                      Optional<Coat_QTensor>:$dx_q,
                      Optional<Coat_QTensor>:$dx_qt);
  let assemblyFormat = [{
    $input `,` $grad attr-dict `:` qualified(type($input)) `,` type($grad)
    `->` type($dx) (`,` qualified(type($dx_q))^)? (`,` qualified(type($dx_qt))^)?
  }];
  let extraClassDeclaration = [{
    /// Whether the op is the derivative of GELU's tanh form.
    bool isTanh() { return getApproximate() == "tanh"; }
  }];
  let hasVerifier = 1;
}

def Coat_SwigluMulOp : Coat_Op<"swiglu_mul", [Pure, Coat_Recomputable]> {
  let summary = "The SwiGLU product of two 1xG FP8 activations";
  let description = [{
    `y = x1 · x2` in f32, where `x1 = silu(gate)` and `x2 = up`, both 1xG
    E4M3 of one shape. The product is quantized `per_tensor` in the format of
    `x2` (scaled by group scaling) because it feeds the down projection,
    optionally together with its 2-D transposed copy for that layer's wgrad
    (COAT's `mul_fwd`).

    The result may instead be a bf16/f16/f32 tensor of the input shape (no
    transposed copy): the unquantized values, which is how
    `coat-group-scaling` leaves an op whose per-tensor scale it takes from
    partial maxima.

    `silu_gate`: `lhs` is the gate itself, and `x1` is what `coat.silu`
    would make of it: `silu(lhs)` quantized 1xG in the type of `lhs` (fresh
    group scales), then dequantized. The kernel keeps that copy in
    registers instead of writing and reading it (`coat-fuse-silu`).

    ```mlir
    %y, %yt = coat.swiglu_mul %a, %b
        : !coat.qtensor<128x512xf8E4M3FN, per_group<16>>,
          !coat.qtensor<128x512xf8E4M3FN, per_group<16>>
        -> !coat.qtensor<128x512xf8E4M3FN, per_tensor>,
           !coat.qtensor<512x128xf8E4M3FN, per_tensor>
    ```
  }];
  let arguments = (ins Coat_Fp8Operand:$lhs, Coat_Fp8Operand:$rhs,
                       UnitAttr:$silu_gate);
  let results = (outs Coat_FlowResult:$result, Optional<Coat_QTensor>:$result_t);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` qualified(type($lhs)) `,` qualified(type($rhs))
    `->` qualified(type($result)) (`,` qualified(type($result_t))^)?
  }];
  let hasVerifier = 1;
}

def Coat_SwigluMulGradOp : Coat_Op<"swiglu_mul_grad", [Pure,
    AttrSizedResultSegments]> {
  let summary = "Backward of coat.swiglu_mul";
  let description = [{
    From the saved 1xG inputs and the high-precision gradient `dy` of the
    product: `dlhs = dy · x2` (in the type of `dy`, fed to `coat.silu_grad`)
    and `drhs = dy · x1` (in the type of `dy`), plus an optional
    `per_tensor` E5M2 copy of `drhs` for the up projection's backward and
    its optional transposed copy (COAT's `mul_bwd`).

    `silu_gate`: `lhs` is the gate itself; `x1` is derived from it as
    `coat.swiglu_mul {silu_gate}` derives it, and `dlhs` is the gate's
    gradient, what `coat.silu_grad` gives for `lhs` and the product's
    `dy · x2` rounded to the type of `dy` (`coat-fuse-silu`).

    ```mlir
    %d1, %d2, %d2q, %d2t = coat.swiglu_mul_grad %a, %b, %dy
        : !coat.qtensor<128x512xf8E4M3FN, per_group<16>>,
          !coat.qtensor<128x512xf8E4M3FN, per_group<16>>, tensor<128x512xbf16>
        -> tensor<128x512xbf16>, tensor<128x512xbf16>,
           !coat.qtensor<128x512xf8E5M2, per_tensor>,
           !coat.qtensor<512x128xf8E5M2, per_tensor>
    ```
  }];
  let arguments = (ins Coat_Fp8Operand:$lhs, Coat_Fp8Operand:$rhs,
                       Coat_HighPrecisionTensor:$grad, UnitAttr:$silu_gate);
  let results = (outs Coat_HighPrecisionTensor:$dlhs,
                      Coat_HighPrecisionTensor:$drhs,
                      Optional<Coat_QTensor>:$drhs_q,
                      Optional<Coat_QTensor>:$drhs_qt);
  let assemblyFormat = [{
    $lhs `,` $rhs `,` $grad attr-dict `:` qualified(type($lhs)) `,`
    qualified(type($rhs)) `,` type($grad) `->` type($dlhs) `,` type($drhs)
    (`,` qualified(type($drhs_q))^)? (`,` qualified(type($drhs_qt))^)?
  }];
  let hasVerifier = 1;
}

def Coat_ResidualAddOp : Coat_Op<"residual_add", [Pure]> {
  let summary = "Residual add producing the dual (high-precision, 1xG FP8) stream";
  let description = [{
    `sum = residual + branch` in f32. Returns the new residual stream in the
    input type and, optionally, a 1xG E4M3 copy of the same sum, the input
    of the next norm (COAT's `add_fwd`; the residual stream travels as this
    pair, COAT.md §3.5). Without `sum_q` it is the plain sum (a program
    whose caller quantizes the stream itself writes no copy).

    ```mlir
    %h, %hq = coat.residual_add %r, %o : tensor<128x512xbf16>, tensor<128x512xbf16>
        -> tensor<128x512xbf16>, !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>
    ```
  }];
  let arguments = (ins Coat_HighPrecisionTensor:$residual,
                       Coat_HighPrecisionTensor:$branch);
  let results = (outs Coat_HighPrecisionTensor:$sum, Optional<Coat_QTensor>:$sum_q);
  let assemblyFormat = [{
    $residual `,` $branch attr-dict `:` type($residual) `,` type($branch)
    `->` type($sum) (`,` qualified(type($sum_q))^)?
  }];
  let hasVerifier = 1;
}

def Coat_ResidualAddGradOp : Coat_Op<"residual_add_grad", [Pure]> {
  let summary = "Sum of residual-stream gradients with its per-tensor E5M2 copy";
  let description = [{
    `sum = a + b` in f32. Returns the total gradient of the residual stream
    in the input type and a `per_tensor` E5M2 copy of the same sum (scaled by
    group scaling) that feeds the next linear layer's backward (COAT's
    `add_bwd`, COAT.md §3.6). Without `sum_q` it is the plain sum.

    ```mlir
    %g, %gq = coat.residual_add_grad %a, %b : tensor<128x512xbf16>, tensor<128x512xbf16>
        -> tensor<128x512xbf16>, !coat.qtensor<128x512xf8E5M2, per_tensor>
    ```
  }];
  let arguments = (ins Coat_HighPrecisionTensor:$lhs,
                       Coat_HighPrecisionTensor:$rhs);
  let results = (outs Coat_HighPrecisionTensor:$sum, Optional<Coat_QTensor>:$sum_q);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)
    `->` type($sum) (`,` qualified(type($sum_q))^)?
  }];
  let hasVerifier = 1;
}

def Coat_RMSNormOp : Coat_Op<"rmsnorm", [Pure, Coat_Recomputable]> {
  let summary = "RMSNorm of a 1xG FP8 activation to a per-tensor FP8 output";
  let description = [{
    Per row (the innermost dimension H): `rstd = 1 / sqrt(mean(x²) + eps)`,
    `y = x · rstd · weight`, in f32 from the 1xG E4M3 input. `y` is quantized
    `per_tensor` in the input format (scaled by group scaling over per-row
    maxima) because it feeds linear layers; the optional transposed copy
    serves their wgrad. `rstd` (f32, the input shape without H) is saved for
    the backward. `eps` must be positive; COAT uses 1e-5.

    The result may instead be a bf16/f16/f32 tensor of the input shape (no
    transposed copy): the unquantized values, which is how
    `coat-group-scaling` leaves an op whose per-tensor scale it takes from
    partial maxima.

    ```mlir
    %y, %rstd, %yt = coat.rmsnorm %x, %w eps = 1.000000e-05
        : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<512xbf16>
        -> !coat.qtensor<128x512xf8E4M3FN, per_tensor>, tensor<128xf32>,
           !coat.qtensor<512x128xf8E4M3FN, per_tensor>
    ```
  }];
  let arguments = (ins Coat_Fp8Operand:$input, RankedTensorOf<[F32, BF16]>:$weight,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$eps);
  let results = (outs Coat_FlowResult:$result, Coat_StatTensor:$rstd,
                      Optional<Coat_QTensor>:$result_t);
  let assemblyFormat = [{
    $input `,` $weight `eps` `=` $eps attr-dict `:` qualified(type($input)) `,`
    type($weight) `->` qualified(type($result)) `,` type($rstd)
    (`,` qualified(type($result_t))^)?
  }];
  let hasVerifier = 1;
}

def Coat_RMSNormGradOp : Coat_Op<"rmsnorm_grad", [Pure]> {
  let summary = "Backward of coat.rmsnorm";
  let description = [{
    With `x̂ = x · rstd`: `dx = (w·dy − x̂ · mean(x̂·w·dy)) · rstd` in the type
    of `dy`, and `dw = Σ_rows dy · x̂` in the type of the weight. `x` is the
    saved 1xG E4M3 input and `rstd` the forward's per-row statistic.

    ```mlir
    %dx, %dw = coat.rmsnorm_grad %x, %w, %rstd, %dy
        : !coat.qtensor<128x512xf8E4M3FN, per_group<16>>, tensor<512xbf16>,
          tensor<128xf32>, tensor<128x512xbf16>
        -> tensor<128x512xbf16>, tensor<512xbf16>
    ```
  }];
  let arguments = (ins Coat_Fp8Operand:$input, RankedTensorOf<[F32, BF16]>:$weight,
                       Coat_StatTensor:$rstd, Coat_HighPrecisionTensor:$grad);
  let results = (outs Coat_HighPrecisionTensor:$dx,
                      RankedTensorOf<[F32, BF16]>:$dweight);
  let assemblyFormat = [{
    $input `,` $weight `,` $rstd `,` $grad attr-dict `:` qualified(type($input))
    `,` type($weight) `,` type($rstd) `,` type($grad) `->` type($dx) `,`
    type($dweight)
  }];
  let hasVerifier = 1;
}

def Coat_LayerNormOp : Coat_Op<"layernorm", [Pure, AttrSizedOperandSegments,
                                             Coat_Recomputable]> {
  let summary = "LayerNorm (optionally affine) of a 1xG FP8 activation";
  let description = [{
    Per row: `mean`, `rstd = 1 / sqrt(mean((x − mean)²) + eps)`,
    `x̂ = (x − mean) · rstd`, `y = x̂ [· weight] [+ bias]` in f32 from the 1xG
    E4M3 input. Without `weight` this is OLMo's non-affine LayerNorm; `bias`
    needs `weight`. `y` is `per_tensor` in the input format with an optional
    transposed copy, as for `coat.rmsnorm`; `mean` and `rstd` (f32, the input
    shape without H) are saved for the backward. `eps` must be positive.

    The result may instead be a bf16/f16/f32 tensor of the input shape (no
    transposed copy): the unquantized values, which is how
    `coat-group-scaling` leaves an op whose per-tensor scale it takes from
    partial maxima.

    ```mlir
    %y, %mean, %rstd = coat.layernorm %x eps = 1.000000e-05
        : !coat.qtensor<128x512xf8E4M3FN, per_group<16>>
        -> !coat.qtensor<128x512xf8E4M3FN, per_tensor>, tensor<128xf32>, tensor<128xf32>
    %y2, %mean2, %rstd2 = coat.layernorm %x weight %w bias %b eps = 1.000000e-05
        : !coat.qtensor<128x512xf8E4M3FN, per_group<16>>, tensor<512xbf16>, tensor<512xbf16>
        -> !coat.qtensor<128x512xf8E4M3FN, per_tensor>, tensor<128xf32>, tensor<128xf32>
    ```
  }];
  let arguments = (ins Coat_Fp8Operand:$input,
                       Optional<RankedTensorOf<[F32, BF16]>>:$weight,
                       Optional<RankedTensorOf<[F32, BF16]>>:$bias,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$eps);
  let results = (outs Coat_FlowResult:$result, Coat_StatTensor:$mean,
                      Coat_StatTensor:$rstd, Optional<Coat_QTensor>:$result_t);
  let assemblyFormat = [{
    $input (`weight` $weight^)? (`bias` $bias^)? `eps` `=` $eps attr-dict `:`
    qualified(type($input)) (`,` type($weight)^)? (`,` type($bias)^)? `->`
    qualified(type($result)) `,` type($mean) `,` type($rstd)
    (`,` qualified(type($result_t))^)?
  }];
  let hasVerifier = 1;
}

def Coat_LayerNormGradOp : Coat_Op<"layernorm_grad", [Pure,
    AttrSizedResultSegments]> {
  let summary = "Backward of coat.layernorm";
  let description = [{
    Non-affine: `dx = (dy − (x̂ · mean(x̂·dy) + mean(dy))) · rstd`. Affine
    (with `weight`): `dx = (w·dy − (x̂ · mean(x̂·w·dy) + mean(w·dy))) · rstd`,
    `dw = Σ_rows dy · x̂` and, if requested, `db = Σ_rows dy`; `dw` and `db`
    have the weight's type. `dx` has the type of `dy`.

    ```mlir
    %dx, %dw, %db = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
        : !coat.qtensor<128x512xf8E4M3FN, per_group<16>>, tensor<128xf32>,
          tensor<128xf32>, tensor<128x512xbf16>, tensor<512xbf16>
        -> tensor<128x512xbf16>, tensor<512xbf16>, tensor<512xbf16>
    ```
  }];
  let arguments = (ins Coat_Fp8Operand:$input, Coat_StatTensor:$mean,
                       Coat_StatTensor:$rstd, Coat_HighPrecisionTensor:$grad,
                       Optional<RankedTensorOf<[F32, BF16]>>:$weight);
  let results = (outs Coat_HighPrecisionTensor:$dx,
                      Optional<RankedTensorOf<[F32, BF16]>>:$dweight,
                      Optional<RankedTensorOf<[F32, BF16]>>:$dbias);
  let assemblyFormat = [{
    $input `,` $mean `,` $rstd `,` $grad (`weight` $weight^)? attr-dict `:`
    qualified(type($input)) `,` type($mean) `,` type($rstd) `,` type($grad)
    (`,` type($weight)^)? `->` type($dx) (`,` type($dweight)^)?
    (`,` type($dbias)^)?
  }];
  let hasVerifier = 1;
}

#endif // COAT_OPS_TD
