// RUN: coat-opt %s -coat-group-scaling -split-input-file | FileCheck %s
// RUN: coat-opt %s -coat-group-scaling=group-size=32 -split-input-file | FileCheck %s --check-prefix=G32
// RUN: not coat-opt %s -coat-group-scaling=group-size=-1 -split-input-file 2>&1 | FileCheck %s --check-prefix=BADG

// BADG: coat-group-scaling: group-size must be positive, got -1

// A per-tensor quantization of a GEMM output: the GEMM's epilogue writes the
// 1x16 maxima, the scale is (max + eps) / 448 of that 128x16 tensor rounded
// to bf16, and the quantize takes it as given. The only ops that read %y are
// the epilogue maxima (fused into the GEMM) and the quantization itself.
// CHECK-LABEL: func.func @gemm_output
// CHECK-NEXT: %[[Y:.*]] = coat.linear forward
// CHECK-NEXT: %[[P:.*]] = coat.absmax %[[Y]], per_group<16> epilogue : tensor<128x256xbf16> -> tensor<128x16xf32>
// CHECK-NEXT: %[[M:.*]] = coat.reduce_scales %[[P]] : tensor<128x16xf32> -> tensor<f32>
// CHECK-NEXT: %[[EPS:.*]] = arith.constant dense<1.000000e-10> : tensor<f32>
// CHECK-NEXT: %[[SUM:.*]] = arith.addf %[[M]], %[[EPS]] : tensor<f32>
// CHECK-NEXT: %[[MAX:.*]] = arith.constant dense<4.480000e+02> : tensor<f32>
// CHECK-NEXT: %[[S32:.*]] = arith.divf %[[SUM]], %[[MAX]] : tensor<f32>
// CHECK-NEXT: %[[S:.*]] = arith.truncf %[[S32]] : tensor<f32> to tensor<bf16>
// CHECK-NEXT: %[[Q:.*]] = coat.quantize %[[Y]] scale %[[S]] : tensor<128x256xbf16>, tensor<bf16> -> !coat.qtensor<128x256xf8E4M3FN, per_tensor, scale = bf16>
// CHECK-NEXT: %[[T:.*]] = coat.transpose %[[Q]]
// CHECK-NEXT: return %[[Q]], %[[T]]
// CHECK-NOT: coat.absmax
// G32-LABEL: func.func @gemm_output
// G32: coat.absmax %{{.*}}, per_group<32> epilogue : tensor<128x256xbf16> -> tensor<128x8xf32>
func.func @gemm_output(%x: !coat.qtensor<128x64xf8E4M3FN, per_tensor>, %w: !coat.qtensor<256x64xf8E4M3FN, per_tensor>)
    -> (!coat.qtensor<128x256xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<256x128xf8E4M3FN, per_tensor, scale = bf16>) {
  %y = coat.linear forward %x, %w : !coat.qtensor<128x64xf8E4M3FN, per_tensor>, !coat.qtensor<256x64xf8E4M3FN, per_tensor> -> tensor<128x256xbf16>
  %q = coat.quantize %y : tensor<128x256xbf16> -> !coat.qtensor<128x256xf8E4M3FN, per_tensor, scale = bf16>
  %t = coat.transpose %q : !coat.qtensor<128x256xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<256x128xf8E4M3FN, per_tensor, scale = bf16>
  return %q, %t : !coat.qtensor<128x256xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<256x128xf8E4M3FN, per_tensor, scale = bf16>
}

// -----

// A gradient from a backward op: E5M2 (fp8max 57344), f32 scales (no
// rounding), the op's own eps. The maxima come right after the producer,
// before anything else runs.
// CHECK-LABEL: func.func @gradient
// CHECK: %[[DX:.*]] = coat.silu_grad
// CHECK-NEXT: %[[P:.*]] = coat.absmax %[[DX]], per_group<16> epilogue : tensor<64x512xf32> -> tensor<64x32xf32>
// CHECK-NEXT: arith.addf
// CHECK-NEXT: coat.reduce_scales %[[P]]
// CHECK-NEXT: arith.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: arith.addf
// CHECK-NEXT: arith.constant dense<5.734400e+04> : tensor<f32>
// CHECK-NEXT: %[[S:.*]] = arith.divf
// CHECK-NEXT: coat.quantize %[[DX]] scale %[[S]] {eps = 0.000000e+00 : f32} : tensor<64x512xf32>, tensor<f32> -> !coat.qtensor<64x512xf8E5M2, per_tensor>
func.func @gradient(%x: !coat.qtensor<64x512xf8E4M3FN, per_group<16>>, %dy: tensor<64x512xf32>, %z: tensor<64x512xf32>)
    -> (!coat.qtensor<64x512xf8E5M2, per_tensor>, tensor<64x512xf32>) {
  %dx = coat.silu_grad %x, %dy : !coat.qtensor<64x512xf8E4M3FN, per_group<16>>, tensor<64x512xf32> -> tensor<64x512xf32>
  %other = arith.addf %dx, %z : tensor<64x512xf32>
  %q = coat.quantize %dx {eps = 0.0 : f32} : tensor<64x512xf32> -> !coat.qtensor<64x512xf8E5M2, per_tensor>
  return %q, %other : !coat.qtensor<64x512xf8E5M2, per_tensor>, tensor<64x512xf32>
}

// -----

// 16 does not divide the row length 100: per-row maxima (COAT's norms use
// per-row scales the same way).
// CHECK-LABEL: func.func @per_row
// CHECK: coat.absmax %{{.*}}, per_group<100> epilogue : tensor<8x100xbf16> -> tensor<8x1xf32>
// CHECK: coat.quantize %{{.*}} scale
func.func @per_row(%r: tensor<8x100xbf16>, %b: tensor<8x100xbf16>) -> !coat.qtensor<8x100xf8E5M2, per_tensor> {
  %s, %sq = coat.residual_add_grad %r, %b : tensor<8x100xbf16>, tensor<8x100xbf16>
      -> tensor<8x100xbf16>, !coat.qtensor<8x100xf8E5M2, per_tensor>
  %q = coat.quantize %s : tensor<8x100xbf16> -> !coat.qtensor<8x100xf8E5M2, per_tensor>
  return %q : !coat.qtensor<8x100xf8E5M2, per_tensor>
}

// -----

// A dynamic number of rows is fine: the maxima tensor is dynamic too.
// CHECK-LABEL: func.func @dynamic_rows
// CHECK: coat.absmax %{{.*}}, per_group<16> epilogue : tensor<?x64xbf16> -> tensor<?x4xf32>
func.func @dynamic_rows(%q0: !coat.qtensor<?x64xf8E4M3FN, per_group<16>>) -> !coat.qtensor<?x64xf8E4M3FN, per_tensor> {
  %x = coat.dequantize %q0 : !coat.qtensor<?x64xf8E4M3FN, per_group<16>> -> tensor<?x64xbf16>
  %q = coat.quantize %x : tensor<?x64xbf16> -> !coat.qtensor<?x64xf8E4M3FN, per_tensor>
  return %q : !coat.qtensor<?x64xf8E4M3FN, per_tensor>
}

// -----

// Left alone: a block argument and a non-coat producer have no epilogue; a
// given scale needs no maximum; grouped quantizations have no global maximum;
// a dynamic row length has no static group; rank 0 has no rows.
// CHECK-LABEL: func.func @untouched
// CHECK-NOT: coat.absmax
// CHECK-NOT: coat.reduce_scales
// CHECK: return
func.func @untouched(%a: tensor<16x64xbf16>, %b: tensor<16x64xbf16>, %s: tensor<f32>,
                     %d: tensor<4x?xbf16>, %r: tensor<bf16>)
    -> (!coat.qtensor<16x64xf8E4M3FN, per_tensor>, !coat.qtensor<16x64xf8E4M3FN, per_tensor>,
        !coat.qtensor<16x64xf8E4M3FN, per_tensor>, !coat.qtensor<16x64xf8E4M3FN, per_group<16>>,
        !coat.qtensor<4x?xf8E4M3FN, per_tensor>, !coat.qtensor<f8E4M3FN, per_tensor>) {
  %q0 = coat.quantize %a : tensor<16x64xbf16> -> !coat.qtensor<16x64xf8E4M3FN, per_tensor>
  %sum = arith.addf %a, %b : tensor<16x64xbf16>
  %q1 = coat.quantize %sum : tensor<16x64xbf16> -> !coat.qtensor<16x64xf8E4M3FN, per_tensor>
  %h, %hq = coat.residual_add %a, %b : tensor<16x64xbf16>, tensor<16x64xbf16>
      -> tensor<16x64xbf16>, !coat.qtensor<16x64xf8E4M3FN, per_group<16>>
  %q2 = coat.quantize %h scale %s : tensor<16x64xbf16>, tensor<f32> -> !coat.qtensor<16x64xf8E4M3FN, per_tensor>
  %q3 = coat.quantize %h : tensor<16x64xbf16> -> !coat.qtensor<16x64xf8E4M3FN, per_group<16>>
  %dd = arith.negf %d : tensor<4x?xbf16>
  %hd, %hdq = coat.residual_add %d, %dd : tensor<4x?xbf16>, tensor<4x?xbf16>
      -> tensor<4x?xbf16>, !coat.qtensor<4x?xf8E4M3FN, per_group<16>>
  %q4 = coat.quantize %hd : tensor<4x?xbf16> -> !coat.qtensor<4x?xf8E4M3FN, per_tensor>
  %r2 = arith.negf %r : tensor<bf16>
  %q5 = coat.quantize %r2 : tensor<bf16> -> !coat.qtensor<f8E4M3FN, per_tensor>
  return %q0, %q1, %q2, %q3, %q4, %q5
      : !coat.qtensor<16x64xf8E4M3FN, per_tensor>, !coat.qtensor<16x64xf8E4M3FN, per_tensor>,
        !coat.qtensor<16x64xf8E4M3FN, per_tensor>, !coat.qtensor<16x64xf8E4M3FN, per_group<16>>,
        !coat.qtensor<4x?xf8E4M3FN, per_tensor>, !coat.qtensor<f8E4M3FN, per_tensor>
}

// -----

// A norm whose per-tensor output (and its transposed copy) the op would
// compute itself is split: the norm returns its unquantized bf16 values, its
// epilogue writes the 1x16 maxima, and a separate quantize + transpose take
// the reduced scale. rstd is untouched.
// CHECK-LABEL: func.func @rmsnorm_split
// CHECK-NEXT: %[[Y:.*]], %[[RSTD:.*]] = coat.rmsnorm %arg0, %arg1 eps = {{.*}} -> tensor<128x512xbf16>, tensor<128xf32>
// CHECK-NEXT: %[[P:.*]] = coat.absmax %[[Y]], per_group<16> epilogue : tensor<128x512xbf16> -> tensor<128x32xf32>
// CHECK: %[[Q:.*]] = coat.quantize %[[Y]] scale %{{.*}} : tensor<128x512xbf16>, tensor<bf16> -> !coat.qtensor<128x512xf8E4M3FN, per_tensor, scale = bf16>
// CHECK-NEXT: %[[T:.*]] = coat.transpose %[[Q]] : {{.*}} -> !coat.qtensor<512x128xf8E4M3FN, per_tensor, scale = bf16>
// CHECK-NEXT: return %[[Q]], %[[RSTD]], %[[T]]
func.func @rmsnorm_split(%x: !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, %w: tensor<512xbf16>)
    -> (!coat.qtensor<128x512xf8E4M3FN, per_tensor, scale = bf16>, tensor<128xf32>,
        !coat.qtensor<512x128xf8E4M3FN, per_tensor, scale = bf16>) {
  %y, %rstd, %yt = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<512xbf16>
      -> !coat.qtensor<128x512xf8E4M3FN, per_tensor, scale = bf16>, tensor<128xf32>,
         !coat.qtensor<512x128xf8E4M3FN, per_tensor, scale = bf16>
  return %y, %rstd, %yt : !coat.qtensor<128x512xf8E4M3FN, per_tensor, scale = bf16>, tensor<128xf32>,
      !coat.qtensor<512x128xf8E4M3FN, per_tensor, scale = bf16>
}

// -----

// LayerNorm keeps its unquantized values in f32 (as COAT does).
// CHECK-LABEL: func.func @layernorm_split
// CHECK-NEXT: %[[Y:.*]], %[[MEAN:.*]], %[[RSTD:.*]] = coat.layernorm %arg0 eps = {{.*}} -> tensor<64x48xf32>, tensor<64xf32>, tensor<64xf32>
// CHECK-NEXT: coat.absmax %[[Y]], per_group<16> epilogue : tensor<64x48xf32> -> tensor<64x3xf32>
// CHECK: coat.quantize %[[Y]] scale %{{.*}} : tensor<64x48xf32>, tensor<f32> -> !coat.qtensor<64x48xf8E4M3FN, per_tensor>
func.func @layernorm_split(%x: !coat.qtensor<64x48xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (!coat.qtensor<64x48xf8E4M3FN, per_tensor>, tensor<64xf32>, tensor<64xf32>) {
  %y, %mean, %rstd = coat.layernorm %x eps = 1.000000e-05
      : !coat.qtensor<64x48xf8E4M3FN, per_group<16>, scale = bf16>
      -> !coat.qtensor<64x48xf8E4M3FN, per_tensor>, tensor<64xf32>, tensor<64xf32>
  return %y, %mean, %rstd : !coat.qtensor<64x48xf8E4M3FN, per_tensor>, tensor<64xf32>, tensor<64xf32>
}

// -----

// A backward op's optional E5M2 copies (a result segment) are dropped from the
// op and made from its high-precision gradient; the gradient keeps its uses.
// CHECK-LABEL: func.func @silu_grad_split
// CHECK-NEXT: %[[DX:.*]] = coat.silu_grad %arg0, %arg1 : {{.*}} -> tensor<32x64xbf16>{{$}}
// CHECK-NEXT: coat.absmax %[[DX]], per_group<16> epilogue : tensor<32x64xbf16> -> tensor<32x4xf32>
// CHECK: arith.constant dense<5.734400e+04>
// CHECK: %[[Q:.*]] = coat.quantize %[[DX]] scale %{{.*}} -> !coat.qtensor<32x64xf8E5M2, per_tensor, scale = bf16>
// CHECK-NEXT: %[[T:.*]] = coat.transpose %[[Q]]
// CHECK-NEXT: return %[[DX]], %[[Q]], %[[T]]
func.func @silu_grad_split(%x: !coat.qtensor<32x64xf8E4M3FN, per_group<16>, scale = bf16>, %dy: tensor<32x64xbf16>)
    -> (tensor<32x64xbf16>, !coat.qtensor<32x64xf8E5M2, per_tensor, scale = bf16>,
        !coat.qtensor<64x32xf8E5M2, per_tensor, scale = bf16>) {
  %dx, %dxq, %dxt = coat.silu_grad %x, %dy
      : !coat.qtensor<32x64xf8E4M3FN, per_group<16>, scale = bf16>, tensor<32x64xbf16>
      -> tensor<32x64xbf16>, !coat.qtensor<32x64xf8E5M2, per_tensor, scale = bf16>,
         !coat.qtensor<64x32xf8E5M2, per_tensor, scale = bf16>
  return %dx, %dxq, %dxt : tensor<32x64xbf16>, !coat.qtensor<32x64xf8E5M2, per_tensor, scale = bf16>,
      !coat.qtensor<64x32xf8E5M2, per_tensor, scale = bf16>
}

// -----

// swiglu_mul_grad: only drhs has a copy; dlhs is untouched.
// CHECK-LABEL: func.func @swiglu_mul_grad_split
// CHECK-NEXT: %[[D1:.*]], %[[D2:.*]] = coat.swiglu_mul_grad {{.*}} -> tensor<32x64xbf16>, tensor<32x64xbf16>{{$}}
// CHECK-NEXT: coat.absmax %[[D2]], per_group<16> epilogue
// CHECK: %[[Q:.*]] = coat.quantize %[[D2]] scale
// CHECK-NEXT: return %[[D1]], %[[Q]]
func.func @swiglu_mul_grad_split(%a: !coat.qtensor<32x64xf8E4M3FN, per_group<16>, scale = bf16>,
                                 %b: !coat.qtensor<32x64xf8E4M3FN, per_group<16>, scale = bf16>,
                                 %dy: tensor<32x64xbf16>)
    -> (tensor<32x64xbf16>, !coat.qtensor<32x64xf8E5M2, per_tensor, scale = bf16>) {
  %d1, %d2, %d2q = coat.swiglu_mul_grad %a, %b, %dy
      : !coat.qtensor<32x64xf8E4M3FN, per_group<16>, scale = bf16>,
        !coat.qtensor<32x64xf8E4M3FN, per_group<16>, scale = bf16>, tensor<32x64xbf16>
      -> tensor<32x64xbf16>, tensor<32x64xbf16>, !coat.qtensor<32x64xf8E5M2, per_tensor, scale = bf16>
  return %d1, %d2q : tensor<32x64xbf16>, !coat.qtensor<32x64xf8E5M2, per_tensor, scale = bf16>
}

// -----

// Without a static row length there are no partial maxima: the op keeps its
// fused copy.
// CHECK-LABEL: func.func @dynamic_rows_kept
// CHECK-NEXT: coat.gelu %arg0 : {{.*}} -> !coat.qtensor<?x?xf8E4M3FN, per_tensor>
// CHECK-NOT: coat.absmax
func.func @dynamic_rows_kept(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>>)
    -> !coat.qtensor<?x?xf8E4M3FN, per_tensor> {
  %y = coat.gelu %x : !coat.qtensor<?x?xf8E4M3FN, per_group<16>> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor>
  return %y : !coat.qtensor<?x?xf8E4M3FN, per_tensor>
}
