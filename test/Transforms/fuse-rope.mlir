// RUN: coat-opt %s -split-input-file -coat-fuse-rope | FileCheck %s
// RUN: coat-opt %s -split-input-file -coat-fuse-rope -coat-outline-kernels | FileCheck %s --check-prefix=OUTLINED

!x = !coat.qtensor<?x256xf8E4M3FN, per_tensor, scale = bf16>
!w = !coat.qtensor<384x256xf8E4M3FN, per_tensor, scale = bf16>

// The q|k|v projection read only by its rotation: the rope goes into the
// GEMM's epilogue, and one kernel writes the rotated projection.
// CHECK-LABEL: func.func @qkv(
// CHECK-NEXT: %[[Y:.*]] = coat.linear forward %arg0, %arg1
// CHECK-NEXT: coat.rope %[[Y]], %arg2, %arg3 rotated_heads = 4 epilogue :
// OUTLINED-LABEL: func.func @qkv_k0_linear_forward_rope(
// OUTLINED-SAME: -> tensor<?x384xbf16>
// OUTLINED-NEXT: %[[Y:.*]] = coat.linear forward %arg0, %arg1
// OUTLINED-NEXT: %[[R:.*]] = coat.rope %[[Y]], %arg2, %arg3 rotated_heads = 4 epilogue
// OUTLINED-NEXT: return %[[R]] : tensor<?x384xbf16>
// OUTLINED-LABEL: func.func @qkv(
// OUTLINED-NEXT: %[[K:.*]] = call @qkv_k0_linear_forward_rope(%arg0, %arg1, %arg2, %arg3)
// OUTLINED-NEXT: %[[B:.*]] = call @qkv_k1_linear_forward(
// OUTLINED-NEXT: return %[[K]], %[[B]]
func.func @qkv(%x: !x, %w: !w, %cos: tensor<?x64xf32>, %sin: tensor<?x64xf32>)
    -> (tensor<?x384xbf16>, tensor<?x384xbf16>) {
  %y = coat.linear forward %x, %w : !x, !w -> tensor<?x384xbf16>
  %r = coat.rope %y, %cos, %sin rotated_heads = 4 : tensor<?x384xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x384xbf16>
  // Another GEMM, not rotated: a kernel of its own.
  %z = coat.linear forward %x, %w : !x, !w -> tensor<?x384xbf16>
  return %r, %z : tensor<?x384xbf16>, tensor<?x384xbf16>
}

// -----

!x = !coat.qtensor<?x256xf8E4M3FN, per_tensor, scale = bf16>
!w = !coat.qtensor<384x256xf8E4M3FN, per_tensor, scale = bf16>

// The unrotated projection is read elsewhere too: it must be stored, so
// the rope stays a kernel of its own.
// CHECK-LABEL: func.func @read_twice(
// CHECK: coat.rope %{{.*}} rotated_heads = 4 :
func.func @read_twice(%x: !x, %w: !w, %cos: tensor<?x64xf32>, %sin: tensor<?x64xf32>)
    -> (tensor<?x384xbf16>, tensor<?x384xbf16>) {
  %y = coat.linear forward %x, %w : !x, !w -> tensor<?x384xbf16>
  %r = coat.rope %y, %cos, %sin rotated_heads = 4 : tensor<?x384xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x384xbf16>
  return %r, %y : tensor<?x384xbf16>, tensor<?x384xbf16>
}

// -----

!x = !coat.qtensor<?x256xf8E4M3FN, per_tensor, scale = bf16>
!w = !coat.qtensor<512x256xf8E4M3FN, per_tensor, scale = bf16>
!w2 = !coat.qtensor<384x256xf8E4M3FN, per_tensor, scale = bf16>

// Heads of 256 columns do not fit a 128-column tile, and heads of 8 have
// their halves inside one thread's column pair: neither is fused.
// CHECK-LABEL: func.func @head_sizes(
// CHECK: coat.rope %{{.*}} rotated_heads = 1 :
// CHECK: coat.rope %{{.*}} rotated_heads = 40 :
func.func @head_sizes(%x: !x, %w: !w, %w2: !w2, %c256: tensor<?x256xf32>, %s256: tensor<?x256xf32>,
                      %c8: tensor<?x8xf32>, %s8: tensor<?x8xf32>)
    -> (tensor<?x512xbf16>, tensor<?x384xbf16>) {
  %y = coat.linear forward %x, %w : !x, !w -> tensor<?x512xbf16>
  %r = coat.rope %y, %c256, %s256 rotated_heads = 1 : tensor<?x512xbf16>, tensor<?x256xf32>, tensor<?x256xf32> -> tensor<?x512xbf16>
  %y2 = coat.linear forward %x, %w2 : !x, !w2 -> tensor<?x384xbf16>
  %r2 = coat.rope %y2, %c8, %s8 rotated_heads = 40 : tensor<?x384xbf16>, tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x384xbf16>
  return %r, %r2 : tensor<?x512xbf16>, tensor<?x384xbf16>
}

// -----

!x = !coat.qtensor<?x256xf8E4M3FN, per_tensor, scale = bf16>
!w = !coat.qtensor<384x256xf8E4M3FN, per_tensor, scale = bf16>

// Maxima of the rotated values in the producer's epilogue (group scaling)
// would be the GEMM's to write, which it does not: not fused.
// CHECK-LABEL: func.func @rotated_maxima(
// CHECK: coat.rope %{{.*}} rotated_heads = 4 :
func.func @rotated_maxima(%x: !x, %w: !w, %cos: tensor<?x64xf32>, %sin: tensor<?x64xf32>)
    -> (tensor<?x384xbf16>, tensor<?x24xf32>) {
  %y = coat.linear forward %x, %w : !x, !w -> tensor<?x384xbf16>
  %r = coat.rope %y, %cos, %sin rotated_heads = 4 : tensor<?x384xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x384xbf16>
  %m = coat.absmax %r, per_group<16> epilogue : tensor<?x384xbf16> -> tensor<?x24xf32>
  return %r, %m : tensor<?x384xbf16>, tensor<?x24xf32>
}
