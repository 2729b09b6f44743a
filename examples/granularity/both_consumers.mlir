// A tensor read by both a linear layer and a non-linear one (COAT.md §3.1):
// coat-mixed-granularity gives it both forms, the 1xG copy for the SiLU and a
// per-tensor copy for the GEMM requantized from it; coat-outline-kernels
// expands that requantize into kernels that exist (dequantize, maxima,
// scale, quantize). `scripts/demo.sh` compiles it whole.

func.func @both_consumers(%x: tensor<256x512xbf16>,
                          %w: tensor<1024x512xbf16> {coat.weight})
    -> (tensor<256x1024xbf16>,
        !coat.qtensor<256x512xf8E4M3FN, per_group<16>, scale = bf16>) {
  %xq = coat.quantize_auto %x : tensor<256x512xbf16> -> !coat.unresolved<256x512xbf16>
  %wq = coat.quantize_auto %w : tensor<1024x512xbf16> -> !coat.unresolved<1024x512xbf16>
  %y = coat.linear forward %xq, %wq
      : !coat.unresolved<256x512xbf16>, !coat.unresolved<1024x512xbf16>
      -> tensor<256x1024xbf16>
  %s = coat.silu %xq : !coat.unresolved<256x512xbf16>
      -> !coat.qtensor<256x512xf8E4M3FN, per_group<16>, scale = bf16>
  return %y, %s : tensor<256x1024xbf16>,
      !coat.qtensor<256x512xf8E4M3FN, per_group<16>, scale = bf16>
}
