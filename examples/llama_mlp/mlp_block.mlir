// A Llama MLP block, forward and backward, in the coat dialect before
// granularity resolution (COAT.md §3.5 "MLPResidual", §3.6).
//
//   forward:  h'' = h' + W_d · (silu(W_g · rmsnorm(h')) * (W_u · rmsnorm(h')))
//   backward: from dL/dh'' (BF16) to dL/dh', dL/dw_norm, dL/dW_{g,u,d}
//
// Every place where a high-precision tensor enters FP8 is a
// `coat.quantize_auto`; its consumers read the `!coat.unresolved` result.
// `coat-mixed-granularity` chooses format and granularity for each
// (COAT.md §3.8), `coat-group-scaling` then takes the per-tensor scales of
// produced tensors from maxima computed by their producers:
//
//   coat-opt examples/llama_mlp/mlp_block.mlir \
//     -coat-mixed-granularity -coat-group-scaling
//
// Shapes: T = 4096 tokens (batch x sequence, flattened), hidden H = 4096,
// FFN width F = 11008 (Llama-2 7B). One function holds the forward and the
// backward, so the saved FP8 activations are plain SSA values.

func.func @llama_mlp_block(
    %h: tensor<4096x4096xbf16>,        // residual stream h' (BF16)
    %w_norm: tensor<4096xbf16> {coat.weight},        // RMSNorm weight
    %w_gate: tensor<11008x4096xbf16> {coat.weight},  // W_g [F, H]
    %w_up: tensor<11008x4096xbf16> {coat.weight},    // W_u [F, H]
    %w_down: tensor<4096x11008xbf16> {coat.weight},  // W_d [H, F]
    %dout: tensor<4096x4096xbf16> {coat.gradient, coat.grad_of = 0 : i64}) // dL/dh'' (BF16 total gradient)
    -> (tensor<4096x4096xbf16>,
        !coat.qtensor<4096x4096xf8E4M3FN, per_group<16>, scale = bf16>,
        tensor<4096x4096xbf16> {coat.grad_of = 0 : i64},
        !coat.qtensor<4096x4096xf8E5M2, per_tensor, scale = bf16>,
        tensor<4096xbf16> {coat.grad_of = 1 : i64},
        tensor<11008x4096xbf16> {coat.grad_of = 2 : i64},
        tensor<11008x4096xbf16> {coat.grad_of = 3 : i64},
        tensor<4096x11008xbf16> {coat.grad_of = 4 : i64}) {
  //===--------------------------------------------------------------------===//
  // Forward (COAT.md §3.5, MLPResidual)
  //===--------------------------------------------------------------------===//

  // The residual stream enters FP8 for the norm (and is saved for its
  // backward).
  %h_q = coat.quantize_auto %h : tensor<4096x4096xbf16> -> !coat.unresolved<4096x4096xbf16>

  // 1. RMSNorm: per-tensor E4M3 output for the gate/up GEMMs and its
  //    transpose for their wgrad.
  %ln, %rstd, %ln_t = coat.rmsnorm %h_q, %w_norm eps = 1.000000e-05
      : !coat.unresolved<4096x4096xbf16>, tensor<4096xbf16>
      -> !coat.qtensor<4096x4096xf8E4M3FN, per_tensor, scale = bf16>,
         tensor<4096xf32>,
         !coat.qtensor<4096x4096xf8E4M3FN, per_tensor, scale = bf16>

  // Weights, used in the forward and (transposed) in dgrad.
  %wg_q = coat.quantize_auto %w_gate : tensor<11008x4096xbf16> -> !coat.unresolved<11008x4096xbf16>
  %wu_q = coat.quantize_auto %w_up : tensor<11008x4096xbf16> -> !coat.unresolved<11008x4096xbf16>
  %wd_q = coat.quantize_auto %w_down : tensor<4096x11008xbf16> -> !coat.unresolved<4096x11008xbf16>

  // 2. gate and up projections.
  %gate = coat.linear forward %ln, %wg_q
      : !coat.qtensor<4096x4096xf8E4M3FN, per_tensor, scale = bf16>,
        !coat.unresolved<11008x4096xbf16> -> tensor<4096x11008xbf16>
  %up = coat.linear forward %ln, %wu_q
      : !coat.qtensor<4096x4096xf8E4M3FN, per_tensor, scale = bf16>,
        !coat.unresolved<11008x4096xbf16> -> tensor<4096x11008xbf16>
  %gate_q = coat.quantize_auto %gate : tensor<4096x11008xbf16> -> !coat.unresolved<4096x11008xbf16>
  %up_q = coat.quantize_auto %up : tensor<4096x11008xbf16> -> !coat.unresolved<4096x11008xbf16>

  // 3. SiLU on the 1xG gate.
  %act = coat.silu %gate_q : !coat.unresolved<4096x11008xbf16>
      -> !coat.qtensor<4096x11008xf8E4M3FN, per_group<16>, scale = bf16>

  // 4. SwiGLU product: per-tensor E4M3 for the down projection, and its
  //    transpose for the down projection's wgrad.
  %m, %m_t = coat.swiglu_mul %act, %up_q
      : !coat.qtensor<4096x11008xf8E4M3FN, per_group<16>, scale = bf16>,
        !coat.unresolved<4096x11008xbf16>
      -> !coat.qtensor<4096x11008xf8E4M3FN, per_tensor, scale = bf16>,
         !coat.qtensor<11008x4096xf8E4M3FN, per_tensor, scale = bf16>

  // 5. down projection.
  %down = coat.linear forward %m, %wd_q
      : !coat.qtensor<4096x11008xf8E4M3FN, per_tensor, scale = bf16>,
        !coat.unresolved<4096x11008xbf16> -> tensor<4096x4096xbf16>

  // 6. residual add: the new stream h'' and its 1x16 E4M3 copy for the next
  //    norm.
  %h_out, %h_out_q = coat.residual_add %h, %down
      : tensor<4096x4096xbf16>, tensor<4096x4096xbf16>
      -> tensor<4096x4096xbf16>,
         !coat.qtensor<4096x4096xf8E4M3FN, per_group<16>, scale = bf16>

  //===--------------------------------------------------------------------===//
  // Backward (COAT.md §3.6)
  //===--------------------------------------------------------------------===//

  // The output gradient feeds the down projection's dgrad, and transposed
  // its wgrad.
  %dout_q = coat.quantize_auto %dout : tensor<4096x4096xbf16> -> !coat.unresolved<4096x4096xbf16>
  %dout_t = coat.transpose %dout_q : !coat.unresolved<4096x4096xbf16> -> !coat.unresolved<4096x4096xbf16>

  // Down projection backward: dm = dY · W_d, dW_d = dY^T · m.
  %wd_t = coat.transpose %wd_q : !coat.unresolved<4096x11008xbf16> -> !coat.unresolved<11008x4096xbf16>
  %dm = coat.linear dgrad %dout_q, %wd_t
      : !coat.unresolved<4096x4096xbf16>, !coat.unresolved<11008x4096xbf16>
      -> tensor<4096x11008xbf16>
  %dw_down = coat.linear wgrad %dout_t, %m_t
      : !coat.unresolved<4096x4096xbf16>,
        !coat.qtensor<11008x4096xf8E4M3FN, per_tensor, scale = bf16>
      -> tensor<4096x11008xbf16>

  // SwiGLU and SiLU backward from the saved 1xG activations.
  %dact, %dup = coat.swiglu_mul_grad %act, %up_q, %dm
      : !coat.qtensor<4096x11008xf8E4M3FN, per_group<16>, scale = bf16>,
        !coat.unresolved<4096x11008xbf16>, tensor<4096x11008xbf16>
      -> tensor<4096x11008xbf16>, tensor<4096x11008xbf16>
  %dgate = coat.silu_grad %gate_q, %dact
      : !coat.unresolved<4096x11008xbf16>, tensor<4096x11008xbf16>
      -> tensor<4096x11008xbf16>

  // Gate and up gradients enter FP8 for their linear backward.
  %dgate_q = coat.quantize_auto %dgate : tensor<4096x11008xbf16> -> !coat.unresolved<4096x11008xbf16>
  %dgate_t = coat.transpose %dgate_q : !coat.unresolved<4096x11008xbf16> -> !coat.unresolved<11008x4096xbf16>
  %dup_q = coat.quantize_auto %dup : tensor<4096x11008xbf16> -> !coat.unresolved<4096x11008xbf16>
  %dup_t = coat.transpose %dup_q : !coat.unresolved<4096x11008xbf16> -> !coat.unresolved<11008x4096xbf16>

  // Gate/up projection backward; dX summed in BF16.
  %wg_t = coat.transpose %wg_q : !coat.unresolved<11008x4096xbf16> -> !coat.unresolved<4096x11008xbf16>
  %wu_t = coat.transpose %wu_q : !coat.unresolved<11008x4096xbf16> -> !coat.unresolved<4096x11008xbf16>
  %dx_gate = coat.linear dgrad %dgate_q, %wg_t
      : !coat.unresolved<4096x11008xbf16>, !coat.unresolved<4096x11008xbf16>
      -> tensor<4096x4096xbf16>
  %dw_gate = coat.linear wgrad %dgate_t, %ln_t
      : !coat.unresolved<11008x4096xbf16>,
        !coat.qtensor<4096x4096xf8E4M3FN, per_tensor, scale = bf16>
      -> tensor<11008x4096xbf16>
  %dx_up = coat.linear dgrad %dup_q, %wu_t
      : !coat.unresolved<4096x11008xbf16>, !coat.unresolved<4096x11008xbf16>
      -> tensor<4096x4096xbf16>
  %dw_up = coat.linear wgrad %dup_t, %ln_t
      : !coat.unresolved<11008x4096xbf16>,
        !coat.qtensor<4096x4096xf8E4M3FN, per_tensor, scale = bf16>
      -> tensor<11008x4096xbf16>
  // The norm output feeds both projections: its gradient is the sum.
  %dln = coat.residual_add_grad %dx_gate, %dx_up
      : tensor<4096x4096xbf16>, tensor<4096x4096xbf16> -> tensor<4096x4096xbf16>

  // RMSNorm backward from the saved 1xG input.
  %dx_norm, %dw_norm = coat.rmsnorm_grad %h_q, %w_norm, %rstd, %dln
      : !coat.unresolved<4096x4096xbf16>, tensor<4096xbf16>, tensor<4096xf32>,
        tensor<4096x4096xbf16>
      -> tensor<4096x4096xbf16>, tensor<4096xbf16>

  // Residual identity path: the BF16 total gradient of h' and its
  // per-tensor E5M2 copy for the previous block's linear backward.
  %dh, %dh_q = coat.residual_add_grad %dout, %dx_norm
      : tensor<4096x4096xbf16>, tensor<4096x4096xbf16>
      -> tensor<4096x4096xbf16>,
         !coat.qtensor<4096x4096xf8E5M2, per_tensor, scale = bf16>

  return %h_out, %h_out_q, %dh, %dh_q, %dw_norm, %dw_gate, %dw_up, %dw_down
      : tensor<4096x4096xbf16>,
        !coat.qtensor<4096x4096xf8E4M3FN, per_group<16>, scale = bf16>,
        tensor<4096x4096xbf16>,
        !coat.qtensor<4096x4096xf8E5M2, per_tensor, scale = bf16>,
        tensor<4096xbf16>, tensor<11008x4096xbf16>, tensor<11008x4096xbf16>,
        tensor<4096x11008xbf16>
}
