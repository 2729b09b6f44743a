// Kernel specs of a linear layer's bias gradient, db = sum over tokens of dy
// (coat.bias_grad, coat-lower-bias-grad): deterministic f32 column sums, the
// same bits on every GPU and in the CPU twins. Compile with
//   coat-opt examples/linear/bias_grad.mlir --coat-compile-artifact=dir=OUT

// The gradient a model program receives: its 1x16 maxima (for the scale of
// its E5M2 copy) and the bias gradient from one read.
func.func @coat_bias_grad_absmax_bf16(%dy: tensor<?x?xbf16>)
    -> (tensor<?x?xf32>, tensor<?xbf16>) {
  %m = coat.absmax %dy, per_group<16> : tensor<?x?xbf16> -> tensor<?x?xf32>
  %db = coat.bias_grad %dy : tensor<?x?xbf16> -> tensor<?xbf16>
  return %m, %db : tensor<?x?xf32>, tensor<?xbf16>
}

// A gradient a kernel produced (its maxima came from that kernel).
func.func @coat_bias_grad_bf16(%dy: tensor<?x?xbf16>) -> tensor<?xbf16> {
  %db = coat.bias_grad %dy : tensor<?x?xbf16> -> tensor<?xbf16>
  return %db : tensor<?xbf16>
}

// f32 gradients and an f32 result (four columns a thread).
func.func @coat_bias_grad_f32(%dy: tensor<?x?xf32>) -> tensor<?xf32> {
  %db = coat.bias_grad %dy : tensor<?x?xf32> -> tensor<?xf32>
  return %db : tensor<?xf32>
}
