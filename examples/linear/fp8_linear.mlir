// Kernel specs of COAT's per-tensor FP8 linear layer (COAT.md §3.2, §4.1):
// C[M, N] = (A[M, K] . B[N, K]^T) * s_A * s_B (+ bias), both operands K-major.
// One lowering serves every kind and FP8 format pair. Lower with
//   coat-opt examples/linear/fp8_linear.mlir --pass-pipeline='builtin.module(
//     coat-lower-linear, coat-gpu-to-binary{format=bin},
//     coat-export-binaries{dir=OUT}, coat-export-manifest{dir=OUT})'

// Forward Y = X . W^T: E4M3 x E4M3 -> bf16 (the QKV/O/down projections).
func.func @coat_fp8_linear_fwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                               %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor>)
    -> tensor<?x?xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
           !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}

// Forward with an f32 bias added before rounding.
func.func @coat_fp8_linear_fwd_bias(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                                    %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                                    %b: tensor<?xf32>) -> tensor<?x?xbf16> {
  %y = coat.linear forward %x, %w bias %b
         : !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
           !coat.qtensor<?x?xf8E4M3FN, per_tensor>, tensor<?xf32> -> tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}

// Forward with the output quantized 1x16 in the epilogue (gate/up, §3.5).
func.func @coat_fp8_linear_fwd_q16(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                                   %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor>)
    -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
           !coat.qtensor<?x?xf8E4M3FN, per_tensor>
         -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  return %y : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
}

// Dgrad dX = dY . W: E5M2 gradient x E4M3 W^T stored [K_in, N_out] -> bf16.
func.func @coat_fp8_linear_dgrad(%dy: !coat.qtensor<?x?xf8E5M2, per_tensor>,
                                 %wt: !coat.qtensor<?x?xf8E4M3FN, per_tensor>)
    -> tensor<?x?xbf16> {
  %dx = coat.linear dgrad %dy, %wt
          : !coat.qtensor<?x?xf8E5M2, per_tensor>,
            !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> tensor<?x?xbf16>
  return %dx : tensor<?x?xbf16>
}

// Wgrad dW = dY^T . X: E5M2 dY^T [N_out, T] x E4M3 X^T [K_in, T] -> f32.
func.func @coat_fp8_linear_wgrad(%dyt: !coat.qtensor<?x?xf8E5M2, per_tensor>,
                                 %xt: !coat.qtensor<?x?xf8E4M3FN, per_tensor>)
    -> tensor<?x?xf32> {
  %dw = coat.linear wgrad %dyt, %xt
          : !coat.qtensor<?x?xf8E5M2, per_tensor>,
            !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> tensor<?x?xf32>
  return %dw : tensor<?x?xf32>
}
