//===- Passes.td - coat transformation passes -------------------*- tablegen -*-===//

#ifndef COAT_TRANSFORMS_PASSES_TD
#define COAT_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

// `group-size`: G of 1xG groups along the innermost dimension, declared once
// for every pass that takes it; each pass says what its groups are for.
class GroupSizeOption<string description>
    : Option<"groupSize", "group-size", "int64_t", /*default=*/"16",
             description>;

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
    quantizations use the default derived scales. The update's
    `grad_scale`, if any, becomes the step's.
  }];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"fixed\"",
           "Numerics of the fused step: 'fixed' or 'reference'">,
  ];
  let dependentDialects = ["::mlir::coat::CoatDialect"];
}

def CoatMixedGranularity : Pass<"coat-mixed-granularity"> {
  let summary = "Chooses FP8 format and granularity of every coat.quantize_auto";
  let description = [{
    COAT's mixed-granularity activation quantization (COAT.md §3.1, §3.8).
    The input marks each point where a high-precision tensor enters FP8 with
    `coat.quantize_auto`, whose `!coat.unresolved` result FP8 consumers
    accept. From the consumers the pass chooses, for each such value:

    - **Granularity.** Operands of `coat.linear` (directly, or through
      `coat.transpose` for the wgrad copies) are quantized `per_tensor`, as
      the FP8 GEMM needs one scalar scale per operand. Inputs of the
      non-linear precision-flow ops (`silu`, `gelu`, `swiglu_mul`,
      `rmsnorm`, `layernorm` and the saved inputs of their `_grad` ops) are
      quantized `per_group<G>` (1xG along the innermost dimension).
    - **Format.** Forward tensors (activations, weights, saved inputs) get
      `forward-format`, gradients get `backward-format`. A `linear dgrad`
      lhs and a `linear wgrad` lhs are gradients (dY, dY^T); every other
      consumer reads a forward tensor. `direction` on the op overrides this.
    - **Scales** are bf16, as in COAT.

    A value with both kinds of consumers is read once: it is quantized 1xG
    and the per-tensor copy is re-quantized from that FP8 copy (the per-tensor
    scale is the maximum of the group scales), so the high-precision tensor
    is not read a second time. A value needed only as 1xG E4M3 that a
    forward `coat.linear` with per-tensor operands produces is quantized in
    the GEMM epilogue (the linear returns `per_group<16>` directly) when G is
    16. Transposes of an unresolved value become transposes of its
    per-tensor copy, and `coat.silu` results take the input's type.

    ```mlir
    %u = coat.quantize_auto %x : tensor<128x256xbf16> -> !coat.unresolved<128x256xbf16>
    %y, %r = coat.rmsnorm %u, %w eps = 1.000000e-05 : !coat.unresolved<128x256xbf16>, tensor<256xbf16>
        -> !coat.qtensor<128x256xf8E4M3FN, per_tensor, scale = bf16>, tensor<128xf32>
    %o = coat.linear forward %u, %wq : !coat.unresolved<128x256xbf16>, ... -> tensor<128x64xbf16>
    ```

    becomes

    ```mlir
    %g = coat.quantize %x : tensor<128x256xbf16> -> !coat.qtensor<128x256xf8E4M3FN, per_group<16>, scale = bf16>
    %t = coat.requantize %g : !coat.qtensor<128x256xf8E4M3FN, per_group<16>, scale = bf16>
           -> !coat.qtensor<128x256xf8E4M3FN, per_tensor, scale = bf16>
    ```

    with the rmsnorm reading `%g` and the linear reading `%t`. Each choice
    is reported as a remark on the `coat.quantize_auto`. It is an error
    (with the value's location) when a value has no FP8 consumer, a consumer
    the pass does not know, consumers that need different formats (or
    differ from `direction`), or a 1xG consumer whose innermost extent G
    does not divide.
  }];
  let options = [
    GroupSizeOption<"G of the 1xG groups of non-linear-layer inputs">,
    Option<"forwardFormat", "forward-format", "std::string",
           /*default=*/"\"e4m3\"",
           "FP8 format of forward tensors: 'e4m3' or 'e5m2'">,
    Option<"backwardFormat", "backward-format", "std::string",
           /*default=*/"\"e5m2\"",
           "FP8 format of gradients: 'e4m3' or 'e5m2'">,
  ];
  let dependentDialects = ["::mlir::coat::CoatDialect"];
}

def CoatGroupScaling : Pass<"coat-group-scaling"> {
  let summary = "Takes per-tensor scales from partial maxima computed by the producer";
  let description = [{
    COAT's "group scaling" (COAT.md §3.1, Fig. 4b): instead of reading a
    whole tensor to find its maximum before quantizing it per-tensor, the op
    that produces the tensor also writes its per-group (1xG) or per-row
    maxima, and the per-tensor scale is the maximum of that small tensor.

    A per-tensor `coat.quantize` without a given scale, whose input is
    produced by a coat op (not a block argument or a foreign op, which have
    no kernel epilogue to compute maxima in), is rewritten to

    ```mlir
    %y = coat.linear forward %a, %w : ... -> tensor<128x256xbf16>
    %p = coat.absmax %y, per_group<16> epilogue : tensor<128x256xbf16> -> tensor<128x16xf32>
    %m = coat.reduce_scales %p : tensor<128x16xf32> -> tensor<f32>
    %s = arith.mulf ...   // (max + eps) / fp8max, in f32
    %q = coat.quantize %y scale %s : tensor<128x256xbf16>, tensor<f32>
           -> !coat.qtensor<128x256xf8E4M3FN, per_tensor>
    ```

    Precision-flow ops that would compute a per-tensor FP8 copy themselves
    (the per-tensor result and transposed copy of `coat.gelu`,
    `coat.swiglu_mul`, `coat.rmsnorm`, `coat.layernorm`; the optional E5M2
    copies of the `_grad` ops and of `coat.residual_add_grad`) are first
    split: the op returns its unquantized values (bf16; f32 for LayerNorm, as
    COAT keeps them) and the copy becomes a per-tensor `coat.quantize` (and
    `coat.transpose`) of them, rewritten as above. Every kernel then does one
    job, and the lowering sees one form.

    `epilogue` marks the `coat.absmax` as part of the producer's kernel:
    the maxima come out of its epilogue while the values are in registers,
    and the only full read of `%y` left is the quantization itself. Groups
    are 1xG along the innermost dimension when G divides it, whole rows
    (`per_group<H>`) otherwise; rank-0 tensors and tensors with a dynamic
    innermost extent are left alone. The scale is derived exactly as
    `coat.quantize` derives it: `(max + eps) / fp8max` in f32, rounded to
    the result's scale type.
  }];
  let options = [
    GroupSizeOption<"G of the partial maxima (per row when G does not divide)">,
  ];
  let dependentDialects = ["::mlir::coat::CoatDialect",
                           "::mlir::arith::ArithDialect"];
}

def CoatOutlineKernels : Pass<"coat-outline-kernels", "::mlir::ModuleOp"> {
  let summary = "Cuts model programs into kernel-spec functions";
  let description = [{
    The lowerings compile kernel-spec functions: one kernel's worth of coat
    ops on function arguments. A model program, such as a Llama MLP block
    after `coat-mixed-granularity` and `coat-group-scaling`, holds many. This
    pass partitions each function with more than one coat op into kernels
    and outlines each into a public kernel-spec function; the program becomes
    a sequence of `func.call`s to them:

    - a coat op, together with the `coat.absmax ... epilogue` maxima of its
      results (computed in its epilogue);
    - a `coat.quantize` together with the `coat.transpose`s of its result
      (both layouts from one read). A layout nobody reads is not written: a
      `coat.transpose` without users (its readers moved to a copy that
      `coat-recompute-activations` made in the backward) is dropped first,
      and a per-tensor quantize read only through its transposes returns
      only those (`..._quantize_per_tensor_transposed_only`);
    - a `coat.reduce_scales` together with the scalar arithmetic on rank-0
      tensors that turns the maximum into a scale (one small kernel, so the
      scale never travels through the host);
    - a per-tensor `coat.quantize` of a tensor from outside the program
      (a weight, an incoming gradient) that still derives its scale is first
      split like group scaling does, with a maxima kernel of its own
      (`coat.absmax` without `epilogue`).

    A `coat.requantize` that changes the type is first cut into what it
    means. The per-tensor copy `coat-mixed-granularity` makes from a 1xG
    tensor for a value with both kinds of consumers becomes two kernels: a
    scale kernel over the group scales (`coat.disassemble` +
    `coat.reduce_scales`, reading the scales in place) and one kernel that
    dequantizes to f32 and quantizes with that scale, the values staying in
    registers (2 bytes an element moved, not 14). Any other change of type
    goes through f32: a dequantize kernel, then a quantize whose scale comes
    from a maxima kernel.

    An op that can update its input in place (`coat.rope`,
    `coat.rope_grad`) whose input the program computes and reads nowhere
    else gets that input as a `coat.writable` argument: its kernel writes
    the result into the input's buffer (the launch plan binds both to one
    buffer), and leaves what it does not change untouched.

    Kernel-spec functions keep the program's static shapes (the kernels take
    their extents at run time); identical ones (the same ops, types and
    argument attributes) are outlined once and called from every site; a
    forward quantize and its copy in the backward that are read in different
    layouts call different kernels. Ops that are not coat ops (other than constants and
    the scalar scale arithmetic) are rejected: a program's tensor work must
    be expressed in coat ops to be compiled.

    ```mlir
    %0 = call @block_k3_rmsnorm(%q, %w) : (...) -> (tensor<4096x4096xbf16>, tensor<4096xf32>, tensor<4096x256xf32>)
    %1 = call @block_k4_scale_from_maxima(%0#2) : (tensor<4096x256xf32>) -> tensor<bf16>
    %2:2 = call @block_k5_quantize_per_tensor_transpose(%0#0, %1) : ...
    ```
  }];
  let options = [
    GroupSizeOption<
        "G of the partial maxima of entry tensors' per-tensor scales">,
    Option<"dropPrograms", "drop-programs", "bool", /*default=*/"false",
           "Erase the programs after outlining, leaving only the kernel specs "
           "(for compiling them)">,
    Option<"finiteFlags", "finite-flags", "bool", /*default=*/"false",
           "Mark each float tensor a program returns (forward outputs, "
           "gradients) `coat.finite_flag` on the kernel spec that writes it, "
           "so its kernel flags NaN and infinities in its epilogue">,
  ];
  let dependentDialects = ["::mlir::coat::CoatDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect"];
}

def CoatFuseSilu : Pass<"coat-fuse-silu", "::mlir::func::FuncOp"> {
  let summary = "Folds coat.silu into the SwiGLU product, and coat.silu_grad "
                "into the product's backward";
  let description = [{
    In a SwiGLU MLP, `silu(gate)` (1xG FP8) exists only for the product: the
    forward's `coat.swiglu_mul` reads it, and so does its backward's
    `coat.swiglu_mul_grad` (kept, or derived again by
    `coat-recompute-activations`), whose `dlhs` only `coat.silu_grad` of the
    same gate reads. Each is a tensor one kernel writes and the next reads
    once. Where every use of a `coat.silu` result is the `lhs` of such a
    product, this pass gives each product the gate itself with `silu_gate`:
    its kernel derives the 1xG copy of `silu(gate)` in registers, as
    `coat.silu` computes it, and a backward product then returns the gate's
    gradient as `dlhs`, replacing the `coat.silu_grad` (which must not carry
    FP8 copies of its own). The values are those of the unfused ops, bit for
    bit; a SiLU whose result has any other use stays as it is.

    Run it after `coat-recompute-activations` (which derives the SiLU again
    for the backward) and before `coat-outline-kernels`.

    ```mlir
    %s = coat.silu %gate : !coat.qtensor<...> -> !coat.qtensor<...>
    %y = coat.swiglu_mul %s, %up : ... -> tensor<...xbf16>
    ```
    becomes
    ```mlir
    %y = coat.swiglu_mul %gate, %up {silu_gate} : ... -> tensor<...xbf16>
    ```
  }];
  let dependentDialects = ["::mlir::coat::CoatDialect"];
}

def CoatFuseLinearSum : Pass<"coat-fuse-linear-sum", "::mlir::func::FuncOp"> {
  let summary = "Adds a sum of GEMM results in the epilogue of the last GEMM";
  let description = [{
    A SwiGLU MLP's input gradient is the sum of its gate and up
    projections' dgrads: each GEMM writes its result and a third kernel
    (`coat.residual_add_grad`) reads both to add them. Where one operand of
    such a sum is the bf16/f32 result of a `coat.linear` that nothing else
    reads, and the other is computed before that GEMM, this pass gives the
    GEMM the other operand as its `addend` and drops the sum: the GEMM's
    epilogue adds it in f32 and writes the sum once. A sum whose maxima a
    producer's epilogue would write (`coat-group-scaling`) stays as it is.

    The sum is rounded once, after the addition, instead of once for the
    GEMM's result and once for the sum (more accurate by one rounding; not
    bit for bit the unfused ops). Run it after `coat-group-scaling` and
    `coat-recompute-activations`, before `coat-outline-kernels`.

    ```mlir
    %a = coat.linear dgrad %dg, %wg : ... -> tensor<?x2048xbf16>
    %b = coat.linear dgrad %du, %wu : ... -> tensor<?x2048xbf16>
    %s = coat.residual_add_grad %a, %b : ... -> tensor<?x2048xbf16>
    ```
    becomes
    ```mlir
    %a = coat.linear dgrad %dg, %wg : ... -> tensor<?x2048xbf16>
    %s = coat.linear dgrad %du, %wu addend(%a : tensor<?x2048xbf16>)
           : ... -> tensor<?x2048xbf16>
    ```
  }];
  let dependentDialects = ["::mlir::coat::CoatDialect"];
}

def CoatFuseRope : Pass<"coat-fuse-rope", "::mlir::func::FuncOp"> {
  let summary = "Folds coat.rope into the epilogue of the GEMM that produces "
                "its input";
  let description = [{
    An attention-input program projects q, k and v with one GEMM and
    rotates q and k with `coat.rope`: the GEMM writes its result, and the
    rope kernel reads the rotated heads back and writes them again. Where a
    `coat.rope`'s input is the bf16/f32 result of a `coat.linear` that
    nothing else reads, this pass marks the rope `epilogue`:
    `coat-outline-kernels` puts it in the GEMM's kernel, whose epilogue
    rotates the values in registers (each thread holds both halves of a
    head's columns in its fragment) and stores the rotated result once.
    The values are those of the unfused ops, bit for bit.

    Only heads whose width divides 128 and is a multiple of 16 are fused:
    every tile width `coat-lower-linear` gives such a GEMM (128 or 256
    columns) then holds whole heads, and a thread that holds a column holds
    its partner in the other half of the head. Run it after `coat-recompute-activations` (a recomputed
    projection is fused too) and before `coat-outline-kernels`.

    ```mlir
    %y = coat.linear forward %x, %w : ... -> tensor<?x2560xbf16>
    %r = coat.rope %y, %cos, %sin rotated_heads = 36 : ...
    ```
    becomes
    ```mlir
    %r = coat.rope %y, %cos, %sin rotated_heads = 36 epilogue : ...
    ```
  }];
  let dependentDialects = ["::mlir::coat::CoatDialect"];
}

def CoatRecomputeActivations : Pass<"coat-recompute-activations",
                                    "::mlir::func::FuncOp"> {
  let summary = "Derives activations again in the backward instead of "
                "keeping them";
  let description = [{
    In a program that holds a forward and its backward (incoming gradients
    marked `{coat.gradient}`), the forward values that backward ops read are
    kept between the two. A kept activation (a value of rank 2 or more) is
    derived again in the backward, and no longer kept, when the ops that
    compute it from constants, weights (`{coat.weight}` arguments, there in
    the backward whether it reads them or not, such as a LayerNorm's bias)
    and values that stay kept may all run again:

    - ops with the `Coat_Recomputable` trait, memory-bound and deterministic
      (`coat.silu`, `coat.gelu`, `coat.swiglu_mul`, `coat.rmsnorm`,
      `coat.layernorm`, `coat.quantize`, `coat.transpose`, `coat.absmax`,
      `coat.reduce_scales`), and the scale arithmetic on rank-0 tensors
      between a `coat.reduce_scales` and the quantize it scales;
    - a per-tensor FP8 result only from a `coat.quantize` with a `scale`
      operand (derived again with it) or a transpose of one: an op that
      scaled per tensor by itself could not reproduce its result alone.

    Values are decided in program order, so a value that stays kept anchors
    the later ones. Every op is copied once, right before the first backward
    reader of the first value that needs it, and marked `coat.recompute`;
    backward readers after a copy read the copy, including readers of its
    other results (a norm's rstd next to its output). Each copy computes the
    bits of the original. `coat-outline-kernels` moves the mark to the kernel
    call, which calls the forward's kernel (or, for a quantize whose copy is
    read only transposed, its sibling writing only the transposed copy),
    and `coat-export-programs` puts such a call in the backward phase. The
    forward's `coat.transpose` whose readers all moved to the copy is left
    without users; `coat-outline-kernels` drops it. Run the pass after
    `coat-mixed-granularity` and `coat-group-scaling` (types resolved),
    before `coat-outline-kernels`.

    A Llama MLP block keeps its input's 1x16 copy, the gate and up (read by
    the backward of the norm, SiLU and SwiGLU). Its silu(gate), the norm's
    output and the SwiGLU product, with their per-tensor scales and
    transposed copies, are then derived again from them (seven kernel
    calls):

    ```mlir
    %act = coat.silu %gate : ...                 // forward
    ...
    %act_again = coat.silu %gate {coat.recompute} : ...
    %dact, %dup = coat.swiglu_mul_grad %act_again, %up, %dm : ...
    %dgate = coat.silu_grad %gate, %dact : ...
    ```

    That keeps the least, at the price of the recomputation in every
    backward. A program may choose the other side of the trade with
    `coat.keep_gemm_operands = true` on its function (the pass's
    `keep-gemm-operands` option gives the default for programs that do not
    say): a per-tensor FP8 value that a backward `coat.linear` reads
    (a dgrad's or wgrad's operand, directly or through `coat.transpose`s)
    then stays kept, one byte an element (and its scale), and anchors the
    values derived from it. The forward computes these operands anyway, so
    keeping them costs no compute; everything else is decided as without
    the attribute. The Llama MLP block then keeps the norm output's and the
    SwiGLU product's transposed copies, and the norm's rstd, and derives
    only silu(gate) again (one kernel call); a norm followed by a projection
    keeps the norm output's transposed copy and rstd and derives no
    activation again. A weight's FP8 copy (computed from weights alone) is
    not such a value: it follows `weight-copies-min-bytes`.

    ```mlir
    func.func @mlp(...) -> (...) attributes {coat.keep_gemm_operands = true} {
      ...
      %dw_down = coat.linear wgrad %dout_t, %m_t : ...   // %m_t kept
      %act_again = coat.silu %gate {coat.recompute} : ...
      ...
    }
    ```

    The FP8 copy of a weight (a `coat.quantize` of a `{coat.weight}`
    argument, which derives its per-tensor scale from the whole weight) is
    derived again too when it is large: the weight is the same in the
    backward, so the copy is the same bits. That trades one quantization of
    the weight per step (about five bytes of traffic per byte of copy: the
    weight read for its maximum and again for the codes, the codes written)
    for the copy's bytes between the forward and the backward. The pass
    decides from the copy's static size against `weight-copies-min-bytes`
    (default 8 MiB): below it the kernels of the recomputation last a few
    microseconds, about the cost of launching them, and the memory saved is
    small; above it the pass is bandwidth-bound and a small share of a
    step's GEMMs over the same weight. At the Llama-2-7B shape every copy
    is above it (16 to 48 MiB; 6 GiB over 32 layers); at hidden 1024 none
    is. 0 recomputes every weight copy, a negative value none.

    An activation argument marked `{coat.kept_by_caller}` is there in the
    backward too, kept by the caller for its own backward (attention's
    output, which PyTorch's attention saves): it anchors like a weight, and
    its per-tensor FP8 copy (scaled from the whole argument, the same bits
    again) is derived from it whatever its size, unless
    `coat.keep_gemm_operands` keeps it. The attention block's output
    projection then keeps nothing of its input (one byte an element less
    between the forward and the backward) for one more quantization of it
    in the backward.

    A forward result marked `coat.recompute` is one the caller may drop
    after the forward and ask the program for again in the backward (the
    q/k/v projection that PyTorch's attention would otherwise keep). The
    pass clones the ops that compute it from what the backward has anyway
    (weights, constants, values the program keeps), here including a
    `coat.linear forward`, which is cloned for this alone; the clones are
    marked `coat.recompute = "output"`, placed between the forward and the
    backward, and their value becomes a new result `coat.recompute_of = i`.
    `coat-outline-kernels` moves the mark to the call (the forward's
    kernels) and `coat-export-programs` puts it in the `recompute` phase,
    which the caller runs on demand. Nothing more is kept for it: where the
    result needs a value the program does not keep (or depends on a
    gradient, or the backward reads it itself), it is left alone. Each
    decision is a remark at the result's producer, with the bytes dropping
    it frees (per token for a dynamic shape):

    ```mlir
    func.func @qkv(...) -> (tensor<?x256xbf16> {coat.recompute}, ...,
                            tensor<?x256xbf16> {coat.recompute_of = 0 : i64}) {
      ...
      %y = coat.linear forward %ln, %wq : ...
      %y_rot = coat.rope %y, %cos, %sin rotated_heads = 6 : ...
      %n, %rstd = coat.rmsnorm %h_q, %w_norm ... {coat.recompute = "output"}
      ...
      %y2 = coat.linear forward %ln2, %wq2 {coat.recompute = "output"} : ...
      %y_rot2 = coat.rope %y2, %cos, %sin rotated_heads = 6 {coat.recompute = "output"} : ...
      %dy_unrot = coat.rope_grad %dy, %cos, %sin rotated_heads = 6 : ...
      ...
      return %y_rot, ..., %y_rot2 : ...
    }
    ```
  }];
  let options = [
    Option<"weightCopiesMinBytes", "weight-copies-min-bytes", "int64_t",
           /*default=*/"8 << 20",
           "Derive the FP8 copy of a weight again in the backward when it "
           "has at least this many bytes (0: always, negative: never)">,
    Option<"keepGemmOperands", "keep-gemm-operands", "bool",
           /*default=*/"false",
           "Keep the per-tensor FP8 operands of backward GEMMs from the "
           "forward in programs without 'coat.keep_gemm_operands'">,
  ];
}

def CoatReportSavedActivations : Pass<"coat-report-saved-activations",
                                      "::mlir::func::FuncOp"> {
  let summary = "Reports the bytes a forward keeps for its backward";
  let description = [{
    For a function that holds a forward and its backward, with the incoming
    gradients marked `{coat.gradient}` and the parameters `{coat.weight}`:
    the values computed before the gradient arrives (they do not depend on a
    `coat.gradient` argument) and used after (by an op that does) are the
    saved tensors. Each gets a remark with its bytes (FP8 codes plus scales,
    plus k and c when range-expanded; elements times width otherwise), and
    the function a summary:

    - saved activations, in bytes and in COAT's unit U (one BF16 tensor of
      the first activation argument's shape, COAT.md §3.5 Table 2);
    - the same tensors kept in BF16 (each logical tensor once: an FP8 copy,
      its transposed copy and the value they quantize count as one), and
      those recomputed for the backward (`coat.recompute`), which a BF16
      program keeps;
    - weight copies kept for the backward (values derived from weights
      alone, which a memory-efficient program recomputes instead).

    Values of dynamic shape are counted with `tokens=N` (every dynamic
    dimension N long: the programs' token count), otherwise not (with a
    warning). A function without `coat.gradient` arguments is left alone.
    The IR is not changed.
  }];
  let options = [
    Option<"tokens", "tokens", "int64_t", /*default=*/"0",
           "The extent of every dynamic dimension (the token count) for "
           "counting values of dynamic shape; 0 leaves them uncounted">,
  ];
}

#endif // COAT_TRANSFORMS_PASSES_TD
