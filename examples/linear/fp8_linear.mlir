// Kernel specs of COAT's per-tensor FP8 linear layer (COAT.md §3.2, §4.1):
// C[M, N] = (A[M, K] . B[N, K]^T) * s_A * s_B (+ bias), both operands K-major.
// One lowering serves every kind and FP8 format pair. Compile with
//   coat-opt examples/linear/fp8_linear.mlir --coat-compile-artifact=dir=OUT

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

// A model's bf16 bias (Qwen2's q/k/v, GPT-2's projections).
func.func @coat_fp8_linear_fwd_bias_bf16(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                                         %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                                         %b: tensor<?xbf16>) -> tensor<?x?xbf16> {
  %y = coat.linear forward %x, %w bias %b
         : !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
           !coat.qtensor<?x?xf8E4M3FN, per_tensor>, tensor<?xbf16> -> tensor<?x?xbf16>
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

// The same with a bf16 bias, added before the group maxima (a GELU MLP's up
// projection).
func.func @coat_fp8_linear_fwd_q16_bias(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                                        %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                                        %b: tensor<?xbf16>)
    -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> {
  %y = coat.linear forward %x, %w bias %b
         : !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
           !coat.qtensor<?x?xf8E4M3FN, per_tensor>, tensor<?xbf16>
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

// Dgrad with an addend summed in the epilogue (coat-fuse-linear-sum: a
// SwiGLU MLP's gate and up dgrads as one sum): bf16(acc * s + addend), one
// rounding. Any N (staged epilogue), and N = 256 (stored by TMA).
func.func @coat_fp8_linear_dgrad_addend(%dy: !coat.qtensor<?x?xf8E5M2, per_tensor>,
                                        %wt: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                                        %c: tensor<?x?xbf16>) -> tensor<?x?xbf16> {
  %dx = coat.linear dgrad %dy, %wt addend(%c : tensor<?x?xbf16>)
          : !coat.qtensor<?x?xf8E5M2, per_tensor>,
            !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> tensor<?x?xbf16>
  return %dx : tensor<?x?xbf16>
}

func.func @coat_fp8_linear_dgrad_addend_n256(%dy: !coat.qtensor<?x?xf8E5M2, per_tensor>,
                                             %wt: !coat.qtensor<256x?xf8E4M3FN, per_tensor>,
                                             %c: tensor<?x256xbf16>) -> tensor<?x256xbf16> {
  %dx = coat.linear dgrad %dy, %wt addend(%c : tensor<?x256xbf16>)
          : !coat.qtensor<?x?xf8E5M2, per_tensor>,
            !coat.qtensor<256x?xf8E4M3FN, per_tensor> -> tensor<?x256xbf16>
  return %dx : tensor<?x256xbf16>
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

// DeepSeek-style block scaling (COAT.md §4.4): A with 1x128 scales along K
// (row-major [M, ceil(K/128)] f32), B with 128x128 block scales (row-major
// [ceil(N/128), ceil(K/128)] f32). Each 128-wide K slice's product is scaled
// by s_A[i, kb] * s_B[j / 128, kb] and promoted into the f32 accumulator:
// Y[i, j] = sum_kb s_A[i, kb] s_B[j/128, kb] sum_{k in kb} A[i, k] B[j, k].
// These kernels are block-tile-n (coat-lower-linear option, default 128) wide.
func.func @coat_fp8_linear_block_fwd(
    %x: !coat.qtensor<?x?xf8E4M3FN, per_group<128>>,
    %w: !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>) -> tensor<?x?xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x?xf8E4M3FN, per_group<128>>,
           !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>> -> tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}

func.func @coat_fp8_linear_block_fwd_bias(
    %x: !coat.qtensor<?x?xf8E4M3FN, per_group<128>>,
    %w: !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>,
    %b: tensor<?xbf16>) -> tensor<?x?xbf16> {
  %y = coat.linear forward %x, %w bias %b
         : !coat.qtensor<?x?xf8E4M3FN, per_group<128>>,
           !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>, tensor<?xbf16>
         -> tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}

// Dgrad dX = dY . W: E4M3 dY (1x128) x W^T re-quantized in 128x128 blocks.
func.func @coat_fp8_linear_block_dgrad(
    %dy: !coat.qtensor<?x?xf8E4M3FN, per_group<128>>,
    %wt: !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>) -> tensor<?x?xbf16> {
  %dx = coat.linear dgrad %dy, %wt
          : !coat.qtensor<?x?xf8E4M3FN, per_group<128>>,
            !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>> -> tensor<?x?xbf16>
  return %dx : tensor<?x?xbf16>
}

// Wgrad dW^T = X^T . dY: X^T (1x128 over tokens) x dY^T (128x128 blocks).
func.func @coat_fp8_linear_block_wgrad(
    %xt: !coat.qtensor<?x?xf8E4M3FN, per_group<128>>,
    %dyt: !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>) -> tensor<?x?xf32> {
  %dw = coat.linear wgrad %xt, %dyt
          : !coat.qtensor<?x?xf8E4M3FN, per_group<128>>,
            !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>> -> tensor<?x?xf32>
  return %dw : tensor<?x?xf32>
}
