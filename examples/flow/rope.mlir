// Rotary position embedding (coat.rope, coat.rope_grad) of the q|k|v matrix
// that one GEMM over the stacked projections writes: [tokens, heads * d],
// the first `rotated_heads` heads (q and k) rotated by per-token tables
// [tokens, d] of f32 angles' cos and sin, v passed through. Hugging Face's
// layout; f32 math, one rounding to bf16. `coat-lower-pointwise` turns each
// spec into a GPU kernel and a CPU twin (docs/manifest.md).
//
//   - A `coat.writable` input (what coat-outline-kernels marks when the
//     GEMM's output is read by the rotation alone) is rotated in place: the
//     kernel writes q and k over it and never touches v.
//   - The backward of a program quantizes its result per tensor: its 1x16
//     maxima are fused in (coat-group-scaling), so the incoming gradient is
//     read once.

// Llama-like attention, 16 heads of 64: 32 rotated of 48.
func.func @coat_rope_d64_h48_r32(%qkv: tensor<?x3072xbf16>, %cos: tensor<?x64xf32>,
                                 %sin: tensor<?x64xf32>) -> tensor<?x3072xbf16> {
  %y = coat.rope %qkv, %cos, %sin rotated_heads = 32
      : tensor<?x3072xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x3072xbf16>
  return %y : tensor<?x3072xbf16>
}

func.func @coat_rope_d64_h48_r32_in_place(%qkv: tensor<?x3072xbf16> {coat.writable},
                                          %cos: tensor<?x64xf32>, %sin: tensor<?x64xf32>)
    -> tensor<?x3072xbf16> {
  %y = coat.rope %qkv, %cos, %sin rotated_heads = 32
      : tensor<?x3072xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x3072xbf16>
  return %y : tensor<?x3072xbf16>
}

func.func @coat_rope_grad_d64_h48_r32_g16(%dqkv: tensor<?x3072xbf16>, %cos: tensor<?x64xf32>,
                                          %sin: tensor<?x64xf32>)
    -> (tensor<?x3072xbf16>, tensor<?x192xf32>) {
  %dx = coat.rope_grad %dqkv, %cos, %sin rotated_heads = 32
      : tensor<?x3072xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x3072xbf16>
  %m = coat.absmax %dx, per_group<16> epilogue : tensor<?x3072xbf16> -> tensor<?x192xf32>
  return %dx, %m : tensor<?x3072xbf16>, tensor<?x192xf32>
}

// Grouped queries, 32 heads of 128 and 8 key/value heads: 40 rotated of 48.
func.func @coat_rope_d128_h48_r40_in_place(%qkv: tensor<?x6144xbf16> {coat.writable},
                                           %cos: tensor<?x128xf32>, %sin: tensor<?x128xf32>)
    -> tensor<?x6144xbf16> {
  %y = coat.rope %qkv, %cos, %sin rotated_heads = 40
      : tensor<?x6144xbf16>, tensor<?x128xf32>, tensor<?x128xf32> -> tensor<?x6144xbf16>
  return %y : tensor<?x6144xbf16>
}

func.func @coat_rope_grad_d128_h48_r40_g16(%dqkv: tensor<?x6144xbf16>, %cos: tensor<?x128xf32>,
                                           %sin: tensor<?x128xf32>)
    -> (tensor<?x6144xbf16>, tensor<?x384xf32>) {
  %dx = coat.rope_grad %dqkv, %cos, %sin rotated_heads = 40
      : tensor<?x6144xbf16>, tensor<?x128xf32>, tensor<?x128xf32> -> tensor<?x6144xbf16>
  %m = coat.absmax %dx, per_group<16> epilogue : tensor<?x6144xbf16> -> tensor<?x384xf32>
  return %dx, %m : tensor<?x6144xbf16>, tensor<?x384xf32>
}

// In place with maxima: v is read for its maxima, not written.
func.func @coat_rope_d64_h6_r4_in_place_g16(%qkv: tensor<?x384xbf16> {coat.writable},
                                            %cos: tensor<?x64xf32>, %sin: tensor<?x64xf32>)
    -> (tensor<?x384xbf16>, tensor<?x24xf32>) {
  %y = coat.rope %qkv, %cos, %sin rotated_heads = 4
      : tensor<?x384xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x384xbf16>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x384xbf16> -> tensor<?x24xf32>
  return %y, %m : tensor<?x384xbf16>, tensor<?x24xf32>
}

// f32 values: 4 a 16-byte access, bf16 tables.
func.func @coat_rope_grad_f32_d32_h3_r2(%g: tensor<?x96xf32>, %cos: tensor<?x32xbf16>,
                                        %sin: tensor<?x32xbf16>) -> tensor<?x96xf32> {
  %dx = coat.rope_grad %g, %cos, %sin rotated_heads = 2
      : tensor<?x96xf32>, tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x96xf32>
  return %dx : tensor<?x96xf32>
}
