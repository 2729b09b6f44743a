// A rope in a GEMM's epilogue needs tiles of whole heads, and the halves of
// a head in whole 8-column chunks; the lowering says so at the rope.
// RUN: coat-opt %s -split-input-file -verify-diagnostics \
// RUN:   --pass-pipeline='builtin.module(coat-lower-linear{tile-n=96})'

func.func @tile_of_part_heads(%x: !coat.qtensor<?x256xf8E4M3FN, per_tensor, scale = bf16>,
                              %w: !coat.qtensor<384x256xf8E4M3FN, per_tensor, scale = bf16>,
                              %cos: tensor<?x64xf32>, %sin: tensor<?x64xf32>) -> tensor<?x384xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x256xf8E4M3FN, per_tensor, scale = bf16>,
           !coat.qtensor<384x256xf8E4M3FN, per_tensor, scale = bf16> -> tensor<?x384xbf16>
  // expected-error @+1 {{coat-lower-linear: tile-n (96) must be a multiple of head_dim (64) for the rope in the GEMM's epilogue}}
  %r = coat.rope %y, %cos, %sin rotated_heads = 4 epilogue
         : tensor<?x384xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x384xbf16>
  return %r : tensor<?x384xbf16>
}

// -----

func.func @head_of_8(%x: !coat.qtensor<?x256xf8E4M3FN, per_tensor, scale = bf16>,
                     %w: !coat.qtensor<384x256xf8E4M3FN, per_tensor, scale = bf16>,
                     %cos: tensor<?x8xf32>, %sin: tensor<?x8xf32>) -> tensor<?x384xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x256xf8E4M3FN, per_tensor, scale = bf16>,
           !coat.qtensor<384x256xf8E4M3FN, per_tensor, scale = bf16> -> tensor<?x384xbf16>
  // expected-error @+1 {{coat-lower-linear: head_dim (8) must be a multiple of 16 for the rope in the GEMM's epilogue (a head's halves in whole 8-column chunks)}}
  %r = coat.rope %y, %cos, %sin rotated_heads = 4 epilogue
         : tensor<?x384xbf16>, tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x384xbf16>
  return %r : tensor<?x384xbf16>
}
