// Kernel spec of COAT's per-tensor FP8 linear forward (COAT.md §4.1):
// Y[M, N] = (X[M, K] . W[N, K]^T) * s_X * s_W in bf16, both operands E4M3 and
// K-major. Lower with
//   coat-opt examples/linear/fp8_linear.mlir --pass-pipeline='builtin.module(
//     coat-lower-linear, coat-gpu-to-binary{format=bin},
//     coat-export-binaries{dir=OUT}, coat-export-manifest{dir=OUT})'
func.func @coat_fp8_linear_fwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                               %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor>)
    -> tensor<?x?xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
           !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}
