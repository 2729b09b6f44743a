// Pointwise precision-flow kernels (COAT.md §3.4): one kernel-spec function
// per op and format combination of COAT's Llama/OLMo flow (§3.5, §3.6, §3.8)
// as `coat-group-scaling` leaves it. `coat-lower-pointwise` turns each into
// a GPU kernel (and a CPU twin) of the same name over [rows, cols] tensors;
// the ABI is in docs/manifest.md.
//
//   - FP8 operands are 1x16 E4M3 with bf16 scales (the saved activations).
//   - silu and residual_add produce 1x16 E4M3 themselves (scales from the
//     group maxima, in the kernel).
//   - Results that COAT quantizes per tensor (gelu, swiglu_mul: E4M3 for the
//     next GEMM; the gradients: E5M2) are written in bf16 together with their
//     1x16 maxima; coat.reduce_scales + the quantize(+transpose) kernels of
//     examples/activations finish them.
//   - GELU in both forms: exact (erf, GPT-NeoX) and tanh (approximate =
//     "tanh": GPT-2's gelu_new).
//   - The SwiGLU product and its backward with the SiLU folded in
//     (`silu_gate`, as coat-fuse-silu leaves a Llama MLP): they read the
//     gate, and the backward returns the gate's gradient.

// Forward.

func.func @coat_silu_e4m3_g16(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (!coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>) {
  %y = coat.silu %x : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  return %y : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
}

func.func @coat_gelu_e4m3_g16(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %y = coat.gelu %x : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xbf16>
  %y_max = coat.absmax %y, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %y, %y_max : tensor<?x?xbf16>, tensor<?x?xf32>
}

func.func @coat_gelu_tanh_e4m3_g16(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %y = coat.gelu %x {approximate = "tanh"} : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xbf16>
  %y_max = coat.absmax %y, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %y, %y_max : tensor<?x?xbf16>, tensor<?x?xf32>
}

func.func @coat_swiglu_mul_e4m3_g16(%x1: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %x2: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %y = coat.swiglu_mul %x1, %x2 : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xbf16>
  %y_max = coat.absmax %y, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %y, %y_max : tensor<?x?xbf16>, tensor<?x?xf32>
}

func.func @coat_residual_add_bf16_g16(%r: tensor<?x?xbf16>, %b: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>) {
  %s, %sq = coat.residual_add %r, %b : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?x?xbf16>, !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  return %s, %sq : tensor<?x?xbf16>, !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
}

// Backward: bf16 gradients, maxima for their per-tensor E5M2 copies.

func.func @coat_silu_grad_e4m3_g16(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %dx = coat.silu_grad %x, %dy : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?x?xbf16> -> tensor<?x?xbf16>
  %dx_max = coat.absmax %dx, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %dx, %dx_max : tensor<?x?xbf16>, tensor<?x?xf32>
}

func.func @coat_gelu_grad_e4m3_g16(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %dx = coat.gelu_grad %x, %dy : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?x?xbf16> -> tensor<?x?xbf16>
  %dx_max = coat.absmax %dx, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %dx, %dx_max : tensor<?x?xbf16>, tensor<?x?xf32>
}

func.func @coat_gelu_tanh_grad_e4m3_g16(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %dx = coat.gelu_grad %x, %dy {approximate = "tanh"} : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?x?xbf16> -> tensor<?x?xbf16>
  %dx_max = coat.absmax %dx, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %dx, %dx_max : tensor<?x?xbf16>, tensor<?x?xf32>
}

func.func @coat_swiglu_e4m3_g16(%gate: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %x2: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %y = coat.swiglu_mul %gate, %x2 {silu_gate} : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xbf16>
  %y_max = coat.absmax %y, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %y, %y_max : tensor<?x?xbf16>, tensor<?x?xf32>
}

// Both gradients go to E5M2 (the gate's and up's projections' backward).
func.func @coat_swiglu_grad_e4m3_g16(%gate: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %x2: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xf32>, tensor<?x?xf32>) {
  %dg, %d2 = coat.swiglu_mul_grad %gate, %x2, %dy {silu_gate} : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?x?xbf16> -> tensor<?x?xbf16>, tensor<?x?xbf16>
  %dg_max = coat.absmax %dg, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  %d2_max = coat.absmax %d2, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %dg, %d2, %dg_max, %d2_max : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xf32>, tensor<?x?xf32>
}

// The gate gradient feeds silu_grad (bf16); the up gradient goes to E5M2.
func.func @coat_swiglu_mul_grad_e4m3_g16(%x1: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %x2: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xf32>) {
  %d1, %d2 = coat.swiglu_mul_grad %x1, %x2, %dy : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?x?xbf16> -> tensor<?x?xbf16>, tensor<?x?xbf16>
  %d2_max = coat.absmax %d2, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %d1, %d2, %d2_max : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xf32>
}

func.func @coat_residual_add_grad_bf16_g16(%a: tensor<?x?xbf16>, %b: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %s = coat.residual_add_grad %a, %b : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?x?xbf16>
  %s_max = coat.absmax %s, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %s, %s_max : tensor<?x?xbf16>, tensor<?x?xf32>
}
