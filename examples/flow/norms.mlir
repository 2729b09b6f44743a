// Kernel specs of the row normalizations of COAT's FP8 precision flow
// (COAT.md §3.4, §3.5, §3.8), lowered by coat-lower-norms. Inputs are the
// saved 1x16 E4M3 activations (codes + bf16 group scales); forward outputs
// are the unquantized values (bf16 for RMSNorm, f32 for LayerNorm, as COAT
// keeps them) with the per-1x16 partial maxima that coat-group-scaling asks
// the producer to compute in its epilogue (coat.absmax ... epilogue); the
// per-tensor scale and the quantize/transpose kernels follow separately
// (examples/activations/quantize.mlir).
//
// Every spec has dynamic [rows, cols]; a kernel handles any rows and any
// cols that is a multiple of 16 up to its max_cols (the `coat.max_cols`
// attribute, else coat-lower-norms' max-cols = 16384), which also picks
// how many threads share a row. The `_h1024`/`_h4096`/`_h8192`/`_h11008` variants are
// the same kernels tuned for narrower rows (a row per warp at 1024); the
// `_absmax` backward also writes the partial maxima of dx.

// Llama RMSNorm forward (§3.5 MLPResidual step 1, after coat-group-scaling).
func.func @rmsnorm_fwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>) -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>) {
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16> -> tensor<?x?xbf16>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %y, %rstd, %m : tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>
}

// RMSNorm backward: dx (bf16) and dweight (bf16).
func.func @rmsnorm_bwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?xbf16>) {
  %dx, %dw = coat.rmsnorm_grad %x, %w, %rstd, %dy
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>, tensor<?xf32>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>, tensor<?xbf16>
  return %dx, %dw : tensor<?x?xbf16>, tensor<?xbf16>
}

// RMSNorm backward whose dx feeds a per-tensor quantize (a norm after a
// projection, OLMo2's): the partial maxima of dx come from its epilogue.
func.func @rmsnorm_bwd_absmax(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?xbf16>, tensor<?x?xf32>) {
  %dx, %dw = coat.rmsnorm_grad %x, %w, %rstd, %dy
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>, tensor<?xf32>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>, tensor<?xbf16>
  %m = coat.absmax %dx, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %dx, %dw, %m : tensor<?x?xbf16>, tensor<?xbf16>, tensor<?x?xf32>
}

// OLMo's non-affine LayerNorm forward (f32 values, as COAT stores them).
func.func @layernorm_fwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>) {
  %y, %mean, %rstd = coat.layernorm %x eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %y, %mean, %rstd, %m : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
}

// LayerNorm with a weight.
func.func @layernorm_w_fwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>) {
  %y, %mean, %rstd = coat.layernorm %x weight %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32> -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %y, %mean, %rstd, %m : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
}

// LayerNorm with weight and bias (COAT's func_layernorm_param).
func.func @layernorm_wb_fwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %w: tensor<?xf32>, %b: tensor<?xf32>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>) {
  %y, %mean, %rstd = coat.layernorm %x weight %w bias %b eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32> -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %y, %mean, %rstd, %m : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
}

// Non-affine LayerNorm backward: dx only.
func.func @layernorm_bwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>)
    -> tensor<?x?xbf16> {
  %dx = coat.layernorm_grad %x, %mean, %rstd, %dy
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>
  return %dx : tensor<?x?xbf16>
}

// LayerNorm-with-weight backward: dx, dweight.
func.func @layernorm_w_bwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?xf32>) {
  %dx, %dw = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?xf32>
      -> tensor<?x?xbf16>, tensor<?xf32>
  return %dx, %dw : tensor<?x?xbf16>, tensor<?xf32>
}

// Affine LayerNorm backward: dx, dweight, dbias.
func.func @layernorm_wb_bwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>) {
  %dx, %dw, %db = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?xf32>
      -> tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
}

//===--- tuned for rows of at most 1024 columns ---===//

// Llama RMSNorm forward (§3.5 MLPResidual step 1, after coat-group-scaling).
func.func @rmsnorm_fwd_h1024(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>) -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 1024 : i64} {
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16> -> tensor<?x?xbf16>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %y, %rstd, %m : tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>
}

// RMSNorm backward: dx (bf16) and dweight (bf16).
func.func @rmsnorm_bwd_h1024(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?xbf16>) attributes {coat.max_cols = 1024 : i64} {
  %dx, %dw = coat.rmsnorm_grad %x, %w, %rstd, %dy
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>, tensor<?xf32>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>, tensor<?xbf16>
  return %dx, %dw : tensor<?x?xbf16>, tensor<?xbf16>
}

// Non-affine LayerNorm forward.
func.func @layernorm_fwd_h1024(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 1024 : i64} {
  %y, %mean, %rstd = coat.layernorm %x eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %y, %mean, %rstd, %m : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
}

// Non-affine LayerNorm backward.
func.func @layernorm_bwd_h1024(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>)
    -> tensor<?x?xbf16> attributes {coat.max_cols = 1024 : i64} {
  %dx = coat.layernorm_grad %x, %mean, %rstd, %dy
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>
  return %dx : tensor<?x?xbf16>
}

// LayerNorm forward with a weight.
func.func @layernorm_w_fwd_h1024(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 1024 : i64} {
  %y, %mean, %rstd = coat.layernorm %x weight %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32> -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %y, %mean, %rstd, %m : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
}

// LayerNorm-with-weight backward.
func.func @layernorm_w_bwd_h1024(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?xf32>) attributes {coat.max_cols = 1024 : i64} {
  %dx, %dw = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?xf32>
      -> tensor<?x?xbf16>, tensor<?xf32>
  return %dx, %dw : tensor<?x?xbf16>, tensor<?xf32>
}

// Affine LayerNorm forward.
func.func @layernorm_wb_fwd_h1024(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %w: tensor<?xf32>, %b: tensor<?xf32>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 1024 : i64} {
  %y, %mean, %rstd = coat.layernorm %x weight %w bias %b eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32> -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %y, %mean, %rstd, %m : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
}

// Affine LayerNorm backward.
func.func @layernorm_wb_bwd_h1024(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>) attributes {coat.max_cols = 1024 : i64} {
  %dx, %dw, %db = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?xf32>
      -> tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
}

//===--- tuned for rows of at most 4096 columns ---===//

// Llama RMSNorm forward (§3.5 MLPResidual step 1, after coat-group-scaling).
func.func @rmsnorm_fwd_h4096(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>) -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 4096 : i64} {
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16> -> tensor<?x?xbf16>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %y, %rstd, %m : tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>
}

// RMSNorm backward: dx (bf16) and dweight (bf16).
func.func @rmsnorm_bwd_h4096(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?xbf16>) attributes {coat.max_cols = 4096 : i64} {
  %dx, %dw = coat.rmsnorm_grad %x, %w, %rstd, %dy
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>, tensor<?xf32>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>, tensor<?xbf16>
  return %dx, %dw : tensor<?x?xbf16>, tensor<?xbf16>
}

// Non-affine LayerNorm forward.
func.func @layernorm_fwd_h4096(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 4096 : i64} {
  %y, %mean, %rstd = coat.layernorm %x eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %y, %mean, %rstd, %m : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
}

// Non-affine LayerNorm backward.
func.func @layernorm_bwd_h4096(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>)
    -> tensor<?x?xbf16> attributes {coat.max_cols = 4096 : i64} {
  %dx = coat.layernorm_grad %x, %mean, %rstd, %dy
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>
  return %dx : tensor<?x?xbf16>
}

// LayerNorm forward with a weight.
func.func @layernorm_w_fwd_h4096(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 4096 : i64} {
  %y, %mean, %rstd = coat.layernorm %x weight %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32> -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %y, %mean, %rstd, %m : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
}

// LayerNorm-with-weight backward.
func.func @layernorm_w_bwd_h4096(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?xf32>) attributes {coat.max_cols = 4096 : i64} {
  %dx, %dw = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?xf32>
      -> tensor<?x?xbf16>, tensor<?xf32>
  return %dx, %dw : tensor<?x?xbf16>, tensor<?xf32>
}

// Affine LayerNorm forward.
func.func @layernorm_wb_fwd_h4096(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %w: tensor<?xf32>, %b: tensor<?xf32>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 4096 : i64} {
  %y, %mean, %rstd = coat.layernorm %x weight %w bias %b eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32> -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %y, %mean, %rstd, %m : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
}

// Affine LayerNorm backward.
func.func @layernorm_wb_bwd_h4096(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>) attributes {coat.max_cols = 4096 : i64} {
  %dx, %dw, %db = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?xf32>
      -> tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
}

//===--- tuned for rows of at most 8192 columns ---===//

// Llama RMSNorm forward (§3.5 MLPResidual step 1, after coat-group-scaling).
func.func @rmsnorm_fwd_h8192(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>) -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 8192 : i64} {
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16> -> tensor<?x?xbf16>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %y, %rstd, %m : tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>
}

// RMSNorm backward: dx (bf16) and dweight (bf16).
func.func @rmsnorm_bwd_h8192(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?xbf16>) attributes {coat.max_cols = 8192 : i64} {
  %dx, %dw = coat.rmsnorm_grad %x, %w, %rstd, %dy
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>, tensor<?xf32>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>, tensor<?xbf16>
  return %dx, %dw : tensor<?x?xbf16>, tensor<?xbf16>
}

// Non-affine LayerNorm forward.
func.func @layernorm_fwd_h8192(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 8192 : i64} {
  %y, %mean, %rstd = coat.layernorm %x eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %y, %mean, %rstd, %m : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
}

// Non-affine LayerNorm backward.
func.func @layernorm_bwd_h8192(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>)
    -> tensor<?x?xbf16> attributes {coat.max_cols = 8192 : i64} {
  %dx = coat.layernorm_grad %x, %mean, %rstd, %dy
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>
  return %dx : tensor<?x?xbf16>
}

// LayerNorm forward with a weight.
func.func @layernorm_w_fwd_h8192(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 8192 : i64} {
  %y, %mean, %rstd = coat.layernorm %x weight %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32> -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %y, %mean, %rstd, %m : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
}

// LayerNorm-with-weight backward.
func.func @layernorm_w_bwd_h8192(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?xf32>) attributes {coat.max_cols = 8192 : i64} {
  %dx, %dw = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?xf32>
      -> tensor<?x?xbf16>, tensor<?xf32>
  return %dx, %dw : tensor<?x?xbf16>, tensor<?xf32>
}

// Affine LayerNorm forward.
func.func @layernorm_wb_fwd_h8192(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %w: tensor<?xf32>, %b: tensor<?xf32>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 8192 : i64} {
  %y, %mean, %rstd = coat.layernorm %x weight %w bias %b eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32> -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %y, %mean, %rstd, %m : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
}

// Affine LayerNorm backward.
func.func @layernorm_wb_bwd_h8192(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>) attributes {coat.max_cols = 8192 : i64} {
  %dx, %dw, %db = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?xf32>
      -> tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
}

//===--- tuned for rows of at most 11008 columns ---===//

// Llama RMSNorm forward (§3.5 MLPResidual step 1, after coat-group-scaling).
func.func @rmsnorm_fwd_h11008(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>) -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 11008 : i64} {
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16> -> tensor<?x?xbf16>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %y, %rstd, %m : tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>
}

// RMSNorm backward: dx (bf16) and dweight (bf16).
func.func @rmsnorm_bwd_h11008(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?xbf16>) attributes {coat.max_cols = 11008 : i64} {
  %dx, %dw = coat.rmsnorm_grad %x, %w, %rstd, %dy
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>, tensor<?xf32>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>, tensor<?xbf16>
  return %dx, %dw : tensor<?x?xbf16>, tensor<?xbf16>
}

// Non-affine LayerNorm forward.
func.func @layernorm_fwd_h11008(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 11008 : i64} {
  %y, %mean, %rstd = coat.layernorm %x eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %y, %mean, %rstd, %m : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
}

// Non-affine LayerNorm backward.
func.func @layernorm_bwd_h11008(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>)
    -> tensor<?x?xbf16> attributes {coat.max_cols = 11008 : i64} {
  %dx = coat.layernorm_grad %x, %mean, %rstd, %dy
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>
  return %dx : tensor<?x?xbf16>
}

// LayerNorm forward with a weight.
func.func @layernorm_w_fwd_h11008(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 11008 : i64} {
  %y, %mean, %rstd = coat.layernorm %x weight %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32> -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %y, %mean, %rstd, %m : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
}

// LayerNorm-with-weight backward.
func.func @layernorm_w_bwd_h11008(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?xf32>) attributes {coat.max_cols = 11008 : i64} {
  %dx, %dw = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?xf32>
      -> tensor<?x?xbf16>, tensor<?xf32>
  return %dx, %dw : tensor<?x?xbf16>, tensor<?xf32>
}

// Affine LayerNorm forward.
func.func @layernorm_wb_fwd_h11008(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %w: tensor<?xf32>, %b: tensor<?xf32>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 11008 : i64} {
  %y, %mean, %rstd = coat.layernorm %x weight %w bias %b eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32> -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %y, %mean, %rstd, %m : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
}

// Affine LayerNorm backward.
func.func @layernorm_wb_bwd_h11008(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>) attributes {coat.max_cols = 11008 : i64} {
  %dx, %dw, %db = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xbf16>, tensor<?xf32>
      -> tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
}
