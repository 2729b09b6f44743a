// RUN: coat-opt %s -coat-outline-kernels -split-input-file -verify-diagnostics | FileCheck %s
// RUN: coat-opt %s -coat-outline-kernels=drop-programs -split-input-file -verify-diagnostics | FileCheck %s --check-prefix=DROP
// RUN: not coat-opt %s -coat-outline-kernels=group-size=0 -split-input-file 2>&1 | FileCheck %s --check-prefix=BADG

// BADG: coat-outline-kernels: group-size must be positive, got 0

// A norm with its epilogue maxima, the scale kernel with its scalar
// arithmetic, and a quantize with its transposed copy become three kernels;
// the program calls them in order.
// CHECK-LABEL: func.func @norm_k0_rmsnorm(
// CHECK-SAME: %[[X:.*]]: !coat.qtensor<64x128xf8E4M3FN, per_group<16>, scale = bf16>, %[[W:.*]]: tensor<128xbf16>)
// CHECK-SAME: -> (tensor<64x128xbf16>, tensor<64xf32>, tensor<64x8xf32>)
// CHECK-NEXT: %[[Y:.*]], %[[R:.*]] = coat.rmsnorm %[[X]], %[[W]]
// CHECK-NEXT: %[[P:.*]] = coat.absmax %[[Y]], per_group<16> epilogue
// CHECK-NEXT: return %[[Y]], %[[R]], %[[P]]
// CHECK-LABEL: func.func @norm_k1_scale_from_maxima(
// CHECK-SAME: -> tensor<bf16>
// CHECK-DAG: arith.constant dense<1.000000e-10> : tensor<f32>
// CHECK-DAG: arith.constant dense<4.480000e+02> : tensor<f32>
// CHECK: coat.reduce_scales
// CHECK-NEXT: arith.addf
// CHECK-NEXT: arith.divf
// CHECK-NEXT: %[[S:.*]] = arith.truncf
// CHECK-NEXT: return %[[S]] : tensor<bf16>
// CHECK-LABEL: func.func @norm_k2_quantize_per_tensor_transpose(
// CHECK: coat.quantize
// CHECK-NEXT: coat.transpose
// CHECK-LABEL: func.func @norm(
// CHECK-NEXT: %[[K0:.*]]:3 = call @norm_k0_rmsnorm(%arg0, %arg1)
// CHECK-NEXT: %[[K1:.*]] = call @norm_k1_scale_from_maxima(%[[K0]]#2)
// CHECK-NEXT: %[[K2:.*]]:2 = call @norm_k2_quantize_per_tensor_transpose(%[[K0]]#0, %[[K1]])
// CHECK-NEXT: return %[[K2]]#0, %[[K0]]#1, %[[K2]]#1
// DROP-NOT: func.func @norm(
func.func @norm(%x: !coat.qtensor<64x128xf8E4M3FN, per_group<16>, scale = bf16>, %w: tensor<128xbf16>)
    -> (!coat.qtensor<64x128xf8E4M3FN, per_tensor, scale = bf16>, tensor<64xf32>,
        !coat.qtensor<128x64xf8E4M3FN, per_tensor, scale = bf16>) {
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.0e-5
      : !coat.qtensor<64x128xf8E4M3FN, per_group<16>, scale = bf16>, tensor<128xbf16>
      -> tensor<64x128xbf16>, tensor<64xf32>
  %p = coat.absmax %y, per_group<16> epilogue : tensor<64x128xbf16> -> tensor<64x8xf32>
  %m = coat.reduce_scales %p : tensor<64x8xf32> -> tensor<f32>
  %eps = arith.constant dense<1.0e-10> : tensor<f32>
  %a = arith.addf %m, %eps : tensor<f32>
  %max = arith.constant dense<448.0> : tensor<f32>
  %s32 = arith.divf %a, %max : tensor<f32>
  %s = arith.truncf %s32 : tensor<f32> to tensor<bf16>
  %q = coat.quantize %y scale %s : tensor<64x128xbf16>, tensor<bf16> -> !coat.qtensor<64x128xf8E4M3FN, per_tensor, scale = bf16>
  %t = coat.transpose %q : !coat.qtensor<64x128xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<128x64xf8E4M3FN, per_tensor, scale = bf16>
  return %q, %rstd, %t : !coat.qtensor<64x128xf8E4M3FN, per_tensor, scale = bf16>, tensor<64xf32>,
      !coat.qtensor<128x64xf8E4M3FN, per_tensor, scale = bf16>
}

// -----

// A per-tensor quantization of an argument (a weight) still derives its
// scale (no epilogue to borrow maxima from): one scale kernel reduces the
// weight itself, the maxima and the scalar arithmetic in it, so the maxima
// are never written; then the quantize kernel. Two weights of one shape
// share every kernel.
// CHECK-LABEL: func.func @weights_k0_absmax_scale(
// CHECK-SAME: %arg0: tensor<32x64xbf16>) -> tensor<bf16>
// CHECK: %[[P:.*]] = coat.absmax %arg0, per_group<16> : tensor<32x64xbf16> -> tensor<32x4xf32>
// CHECK-NEXT: %[[M:.*]] = coat.reduce_scales %[[P]]
// CHECK-NEXT: arith.addf %[[M]]
// CHECK-NEXT: arith.divf
// CHECK-NEXT: arith.truncf
// CHECK-NOT: func.func @weights_k1_absmax
// CHECK-LABEL: func.func @weights(
// CHECK-NEXT: %[[S1:.*]] = call @weights_k0_absmax_scale(%arg1)
// CHECK-NEXT: %[[S0:.*]] = call @weights_k0_absmax_scale(%arg0)
// CHECK-NEXT: call @weights_k2_quantize_per_tensor(%arg0, %[[S0]])
// CHECK-NEXT: call @weights_k2_quantize_per_tensor(%arg1, %[[S1]])
func.func @weights(%w1: tensor<32x64xbf16>, %w2: tensor<32x64xbf16>)
    -> (!coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>,
        !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>) {
  %q1 = coat.quantize %w1 : tensor<32x64xbf16> -> !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>
  %q2 = coat.quantize %w2 : tensor<32x64xbf16> -> !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>
  return %q1, %q2 : !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>,
      !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>
}

// -----

// A function with one kernel's worth of ops is already a kernel spec.
// CHECK-LABEL: func.func @spec(
// CHECK-NEXT: coat.quantize
// CHECK-NEXT: return
func.func @spec(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
}

// -----

// So are the two-op kernels: a requantize's dequantize and quantize, the
// group scales a scale kernel reads, and the maxima of a tensor a scale
// kernel reduces.
// CHECK-LABEL: func.func @requantize_spec(
// CHECK-NEXT: coat.dequantize
// CHECK-NEXT: coat.quantize
// CHECK-NEXT: return
// CHECK-LABEL: func.func @group_scales_spec(
// CHECK-NEXT: coat.disassemble
// CHECK-NEXT: coat.reduce_scales
// CHECK-NEXT: return
// CHECK-LABEL: func.func @tensor_maxima_spec(
// CHECK-NEXT: coat.absmax
// CHECK-NEXT: coat.reduce_scales
// CHECK-NEXT: return
// CHECK-NOT: call @
func.func @requantize_spec(%q: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %s: tensor<bf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> {
  %x = coat.dequantize %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xf32>
  %r = coat.quantize %x scale %s : tensor<?x?xf32>, tensor<bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  return %r : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
}

func.func @group_scales_spec(%q: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>) -> tensor<bf16> {
  %codes, %scales = coat.disassemble %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  %m = coat.reduce_scales %scales : tensor<?x?xbf16> -> tensor<bf16>
  return %m : tensor<bf16>
}

func.func @tensor_maxima_spec(%x: tensor<?x64xbf16>) -> tensor<f32> {
  %p = coat.absmax %x, per_group<16> : tensor<?x64xbf16> -> tensor<?x4xf32>
  %m = coat.reduce_scales %p : tensor<?x4xf32> -> tensor<f32>
  return %m : tensor<f32>
}

// -----

func.func @foreign(%x: tensor<16x32xbf16>, %y: tensor<16x32xbf16>) -> !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16> {
  %q0 = coat.quantize %x : tensor<16x32xbf16> -> !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
  // expected-error @+1 {{cannot outline 'arith.addf' into a kernel: model programs must express tensor work as coat ops}}
  %s = arith.addf %x, %y : tensor<16x32xbf16>
  %q = coat.quantize %s : tensor<16x32xbf16> -> !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
  return %q : !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
}

// -----

func.func @loose_transpose(%x: !coat.qtensor<16x32xf8E4M3FN, per_tensor>, %y: tensor<16x32xbf16>)
    -> (!coat.qtensor<32x16xf8E4M3FN, per_tensor>, !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>) {
  // expected-error @+1 {{no kernel makes this transposed copy: transpose the tensor where it is quantized}}
  %t = coat.transpose %x : !coat.qtensor<16x32xf8E4M3FN, per_tensor> -> !coat.qtensor<32x16xf8E4M3FN, per_tensor>
  %q = coat.quantize %y : tensor<16x32xbf16> -> !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
  return %t, %q : !coat.qtensor<32x16xf8E4M3FN, per_tensor>, !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
}

// -----

// A value with both kinds of consumers: its per-tensor copy is a requantize
// of the 1x16 tensor. Its scale is the largest group scale (a scale kernel
// reading the group scales in place); one kernel dequantizes and quantizes
// with it, so no f32 copy is written.
// CHECK-LABEL: func.func @both_k1_max_of_group_scales(
// CHECK-SAME: %arg0: !coat.qtensor<64x128xf8E4M3FN, per_group<16>, scale = bf16>) -> tensor<bf16>
// CHECK-NEXT: %{{.*}}, %[[GS:.*]] = coat.disassemble %arg0
// CHECK-NEXT: %[[M:.*]] = coat.reduce_scales %[[GS]] : tensor<64x8xbf16> -> tensor<bf16>
// CHECK-NEXT: return %[[M]]
// CHECK-LABEL: func.func @both_k2_requantize_per_tensor(
// CHECK-SAME: -> !coat.qtensor<64x128xf8E4M3FN, per_tensor, scale = bf16>
// CHECK-NEXT: %[[V:.*]] = coat.dequantize %arg0 : {{.*}} -> tensor<64x128xf32>
// CHECK-NEXT: %[[R:.*]] = coat.quantize %[[V]] scale %arg1
// CHECK-NEXT: return %[[R]]
// CHECK-LABEL: func.func @both(
// CHECK-NEXT: %[[G:.*]] = call @both_k0_quantize_per_group(%arg0)
// CHECK-NEXT: %[[S:.*]] = call @both_k1_max_of_group_scales(%[[G]])
// CHECK-NEXT: %[[T:.*]] = call @both_k2_requantize_per_tensor(%[[G]], %[[S]])
// CHECK-NEXT: call @both_k3_silu(%[[G]])
// CHECK-NOT: coat.requantize
func.func @both(%x: tensor<64x128xbf16>)
    -> (!coat.qtensor<64x128xf8E4M3FN, per_tensor, scale = bf16>,
        !coat.qtensor<64x128xf8E4M3FN, per_group<16>, scale = bf16>) {
  %g = coat.quantize %x : tensor<64x128xbf16> -> !coat.qtensor<64x128xf8E4M3FN, per_group<16>, scale = bf16>
  %t = coat.requantize %g : !coat.qtensor<64x128xf8E4M3FN, per_group<16>, scale = bf16>
      -> !coat.qtensor<64x128xf8E4M3FN, per_tensor, scale = bf16>
  %s = coat.silu %g : !coat.qtensor<64x128xf8E4M3FN, per_group<16>, scale = bf16>
      -> !coat.qtensor<64x128xf8E4M3FN, per_group<16>, scale = bf16>
  return %t, %s : !coat.qtensor<64x128xf8E4M3FN, per_tensor, scale = bf16>,
      !coat.qtensor<64x128xf8E4M3FN, per_group<16>, scale = bf16>
}

// -----

// A requantize that changes the format has no scale among the group scales:
// it goes through f32, a dequantize kernel, then a quantize whose scale comes
// from a scale kernel reducing the f32 values themselves.
// CHECK-LABEL: func.func @other_format_k1_dequantize(
// CHECK-NEXT: coat.dequantize %arg0 : {{.*}} -> tensor<64x128xf32>
// CHECK-LABEL: func.func @other_format_k2_absmax_scale(
// CHECK: coat.absmax %arg0, per_group<16> : tensor<64x128xf32>
// CHECK-NEXT: coat.reduce_scales
// CHECK-LABEL: func.func @other_format(
// CHECK-NEXT: %[[G:.*]] = call @other_format_k0_quantize_per_group(%arg0)
// CHECK-NEXT: %[[D:.*]] = call @other_format_k1_dequantize(%[[G]])
// CHECK-NEXT: %[[S:.*]] = call @other_format_k2_absmax_scale(%[[D]])
// CHECK-NEXT: call @other_format_k3_quantize_per_tensor(%[[D]], %[[S]])
// CHECK-NOT: coat.requantize
func.func @other_format(%x: tensor<64x128xbf16>)
    -> (!coat.qtensor<64x128xf8E5M2, per_tensor, scale = bf16>,
        !coat.qtensor<64x128xf8E4M3FN, per_group<16>, scale = bf16>) {
  %g = coat.quantize %x : tensor<64x128xbf16> -> !coat.qtensor<64x128xf8E4M3FN, per_group<16>, scale = bf16>
  %t = coat.requantize %g : !coat.qtensor<64x128xf8E4M3FN, per_group<16>, scale = bf16>
      -> !coat.qtensor<64x128xf8E5M2, per_tensor, scale = bf16>
  return %t, %g : !coat.qtensor<64x128xf8E5M2, per_tensor, scale = bf16>,
      !coat.qtensor<64x128xf8E4M3FN, per_group<16>, scale = bf16>
}

// -----

// The bias gradient of an incoming gradient is summed in the kernel that
// reads it for its maxima (one read of dy); the scale and the E5M2 copies
// follow as for any argument.
// CHECK-LABEL: func.func @linear_bias_k0_absmax_bias_grad(
// CHECK-SAME: %[[DY:.*]]: tensor<?x64xbf16>) -> (tensor<?x4xf32>, tensor<64xbf16>)
// CHECK-NEXT: %[[M:.*]] = coat.absmax %[[DY]], per_group<16> : tensor<?x64xbf16> -> tensor<?x4xf32>
// CHECK-NEXT: %[[DB:.*]] = coat.bias_grad %[[DY]] : tensor<?x64xbf16> -> tensor<64xbf16>
// CHECK-NEXT: return %[[M]], %[[DB]]
// CHECK-NOT: func.func @linear_bias_k{{[0-9]+}}_bias_grad(
// CHECK-LABEL: func.func @linear_bias(
// CHECK-NEXT: %[[K0:.*]]:2 = call @linear_bias_k0_absmax_bias_grad(%arg0)
// CHECK-NEXT: %[[S:.*]] = call @linear_bias_k1_scale_from_maxima(%[[K0]]#0)
// CHECK-NEXT: %[[Q:.*]]:2 = call @linear_bias_k2_quantize_per_tensor_transpose(%arg0, %[[S]])
// CHECK-NEXT: return %[[Q]]#0, %[[Q]]#1, %[[K0]]#1
func.func @linear_bias(%dy: tensor<?x64xbf16> {coat.gradient})
    -> (!coat.qtensor<?x64xf8E5M2, per_tensor, scale = bf16>,
        !coat.qtensor<64x?xf8E5M2, per_tensor, scale = bf16>, tensor<64xbf16>) {
  %q = coat.quantize %dy : tensor<?x64xbf16> -> !coat.qtensor<?x64xf8E5M2, per_tensor, scale = bf16>
  %t = coat.transpose %q : !coat.qtensor<?x64xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<64x?xf8E5M2, per_tensor, scale = bf16>
  %db = coat.bias_grad %dy : tensor<?x64xbf16> -> tensor<64xbf16>
  return %q, %t, %db : !coat.qtensor<?x64xf8E5M2, per_tensor, scale = bf16>,
      !coat.qtensor<64x?xf8E5M2, per_tensor, scale = bf16>, tensor<64xbf16>
}

// -----

// A gradient that a coat op produces has its maxima in that op's kernel:
// its bias gradient is a kernel of its own.
// CHECK-LABEL: func.func @produced_k0_residual_add_grad(
// CHECK: coat.absmax %{{.*}}, per_group<16> epilogue
// CHECK-LABEL: func.func @produced_k1_bias_grad(
// CHECK-NEXT: coat.bias_grad %arg0 : tensor<?x64xbf16> -> tensor<64xf32>
// CHECK-NEXT: return
// CHECK-LABEL: func.func @produced(
// CHECK-NEXT: %[[G:.*]]:2 = call @produced_k0_residual_add_grad(%arg0, %arg1)
// CHECK-NEXT: call @produced_k1_bias_grad(%[[G]]#0)
func.func @produced(%a: tensor<?x64xbf16>, %b: tensor<?x64xbf16>)
    -> (!coat.qtensor<?x64xf8E5M2, per_tensor, scale = bf16>, tensor<64xf32>) {
  %g = coat.residual_add_grad %a, %b : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x64xbf16>
  %db = coat.bias_grad %g : tensor<?x64xbf16> -> tensor<64xf32>
  %q = coat.quantize %g : tensor<?x64xbf16> -> !coat.qtensor<?x64xf8E5M2, per_tensor, scale = bf16>
  return %q, %db : !coat.qtensor<?x64xf8E5M2, per_tensor, scale = bf16>, tensor<64xf32>
}

// -----

// Maxima and a bias gradient of one argument are one kernel spec already,
// in either order; maxima the kernel cannot take (whole 48-column rows:
// six 16-byte loads a group) stay apart.
// CHECK-LABEL: func.func @fused_spec(
// CHECK-NEXT: coat.bias_grad
// CHECK-NEXT: coat.absmax
// CHECK-NEXT: return
// CHECK-LABEL: func.func @unfusable_k0_absmax(
// CHECK-LABEL: func.func @unfusable_k1_bias_grad(
// CHECK-LABEL: func.func @unfusable(
// CHECK-NEXT: call @unfusable_k0_absmax
// CHECK-NEXT: call @unfusable_k1_bias_grad
func.func @fused_spec(%dy: tensor<?x64xbf16>) -> (tensor<64xbf16>, tensor<?x4xf32>) {
  %db = coat.bias_grad %dy : tensor<?x64xbf16> -> tensor<64xbf16>
  %m = coat.absmax %dy, per_group<16> : tensor<?x64xbf16> -> tensor<?x4xf32>
  return %db, %m : tensor<64xbf16>, tensor<?x4xf32>
}

func.func @unfusable(%dy: tensor<?x48xbf16>) -> (tensor<?x1xf32>, tensor<48xbf16>) {
  %m = coat.absmax %dy, per_group<48> : tensor<?x48xbf16> -> tensor<?x1xf32>
  %db = coat.bias_grad %dy : tensor<?x48xbf16> -> tensor<48xbf16>
  return %m, %db : tensor<?x1xf32>, tensor<48xbf16>
}

// -----

// An op that can update its input in place gets that input as a
// coat.writable argument where the program computes it and reads it
// nowhere else (%b); not a program input (%x: the caller's) or a value read
// again (%a, also returned). Specs that differ only there stay apart.
// CHECK-LABEL: func.func @rotary_k0_rope(
// CHECK-SAME: %arg0: tensor<?x128xbf16>, %arg1: tensor<?x64xf32>, %arg2: tensor<?x64xf32>)
// CHECK-LABEL: func.func @rotary_k1_rope_grad(
// CHECK-SAME: %arg0: tensor<?x128xbf16>, %arg1: tensor<?x64xf32>, %arg2: tensor<?x64xf32>)
// CHECK-LABEL: func.func @rotary_k2_rope(
// CHECK-SAME: %arg0: tensor<?x128xbf16> {coat.writable}, %arg1: tensor<?x64xf32>, %arg2: tensor<?x64xf32>)
// CHECK-LABEL: func.func @rotary(
// CHECK-NEXT: %[[A:.*]] = call @rotary_k0_rope(%arg0, %arg1, %arg2)
// CHECK-NEXT: %[[B:.*]] = call @rotary_k1_rope_grad(%[[A]], %arg1, %arg2)
// CHECK-NEXT: %[[D:.*]] = call @rotary_k2_rope(%[[B]], %arg1, %arg2)
// CHECK-NEXT: return %[[A]], %[[D]]
func.func @rotary(%x: tensor<?x128xbf16>, %c: tensor<?x64xf32>, %s: tensor<?x64xf32>)
    -> (tensor<?x128xbf16>, tensor<?x128xbf16>) {
  %a = coat.rope %x, %c, %s rotated_heads = 1 : tensor<?x128xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x128xbf16>
  %b = coat.rope_grad %a, %c, %s rotated_heads = 1 : tensor<?x128xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x128xbf16>
  %d = coat.rope %b, %c, %s rotated_heads = 1 : tensor<?x128xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x128xbf16>
  return %a, %d : tensor<?x128xbf16>, tensor<?x128xbf16>
}

// -----

// A kernel writes the layouts of a per-tensor quantize that are read: a
// transposed copy nobody reads is not made (%at), codes read only through
// their transposed copy are not written (%b), and both layouts are made
// where both are read (%c).
// CHECK-LABEL: func.func @layouts_k0_quantize_per_tensor(
// CHECK-SAME: -> !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>
// CHECK-NEXT: %[[A:.*]] = coat.quantize %arg0 scale %arg1
// CHECK-NEXT: return %[[A]]
// CHECK-LABEL: func.func @layouts_k1_quantize_per_tensor_transposed_only(
// CHECK-SAME: -> !coat.qtensor<64x16xf8E4M3FN, per_tensor, scale = bf16>
// CHECK-NEXT: %[[B:.*]] = coat.quantize %arg0 scale %arg1
// CHECK-NEXT: %[[BT:.*]] = coat.transpose %[[B]]
// CHECK-NEXT: return %[[BT]]
// CHECK-LABEL: func.func @layouts_k2_quantize_per_tensor_transpose(
// CHECK-SAME: -> (!coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<64x16xf8E4M3FN, per_tensor, scale = bf16>)
// CHECK-NEXT: %[[C:.*]] = coat.quantize %arg0 scale %arg1
// CHECK-NEXT: %[[CT:.*]] = coat.transpose %[[C]]
// CHECK-NEXT: return %[[C]], %[[CT]]
// CHECK-LABEL: func.func @layouts(
// CHECK-NEXT: %[[KA:.*]] = call @layouts_k0_quantize_per_tensor(%arg0, %arg3)
// CHECK-NEXT: %[[KB:.*]] = call @layouts_k1_quantize_per_tensor_transposed_only(%arg1, %arg3)
// CHECK-NEXT: %[[KC:.*]]:2 = call @layouts_k2_quantize_per_tensor_transpose(%arg2, %arg3)
// CHECK-NEXT: return %[[KA]], %[[KB]], %[[KC]]#1, %[[KC]]#0
func.func @layouts(%x: tensor<16x64xbf16>, %y: tensor<16x64xbf16>, %z: tensor<16x64xbf16>, %s: tensor<bf16>)
    -> (!coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<64x16xf8E4M3FN, per_tensor, scale = bf16>,
        !coat.qtensor<64x16xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>) {
  %a = coat.quantize %x scale %s : tensor<16x64xbf16>, tensor<bf16> -> !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>
  %at = coat.transpose %a : !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<64x16xf8E4M3FN, per_tensor, scale = bf16>
  %b = coat.quantize %y scale %s : tensor<16x64xbf16>, tensor<bf16> -> !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>
  %bt = coat.transpose %b : !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<64x16xf8E4M3FN, per_tensor, scale = bf16>
  %c = coat.quantize %z scale %s : tensor<16x64xbf16>, tensor<bf16> -> !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>
  %ct = coat.transpose %c : !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<64x16xf8E4M3FN, per_tensor, scale = bf16>
  return %a, %bt, %ct, %c : !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<64x16xf8E4M3FN, per_tensor, scale = bf16>,
      !coat.qtensor<64x16xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>
}

// -----

!q = !coat.qtensor<?x64xf8E4M3FN, per_tensor, scale = bf16>
!qt = !coat.qtensor<64x?xf8E4M3FN, per_tensor, scale = bf16>
!w = !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>
!dyt = !coat.qtensor<32x?xf8E5M2, per_tensor, scale = bf16>

// The same quantize in the forward and, derived again, in the backward
// (coat-recompute-activations moved the wgrad's read to the copy): each
// call site gets the kernel of the layouts it reads, so the forward's does
// not write the transposed copy and the backward's writes only that.
// CHECK-LABEL: func.func @phases_k0_quantize_per_tensor(
// CHECK-NOT: coat.transpose
// CHECK-LABEL: func.func @phases_k2_quantize_per_tensor_transposed_only(
// CHECK-NOT: coat.recompute
// CHECK-LABEL: func.func @phases(
// CHECK-NEXT: %[[Q:.*]] = call @phases_k0_quantize_per_tensor(%arg0, %arg1) :
// CHECK-NEXT: %[[Y:.*]] = call @phases_k1_linear_forward(%[[Q]], %arg2)
// CHECK-NEXT: %[[QT:.*]] = call @phases_k2_quantize_per_tensor_transposed_only(%arg0, %arg1) {coat.recompute} :
// CHECK-NEXT: %[[DW:.*]] = call @phases_k3_linear_wgrad(%arg3, %[[QT]])
// CHECK-NEXT: return %[[Y]], %[[DW]]
func.func @phases(%x: tensor<?x64xbf16>, %s: tensor<bf16>, %w: !w, %dyt: !dyt {coat.gradient})
    -> (tensor<?x32xbf16>, tensor<32x64xbf16>) {
  %q = coat.quantize %x scale %s : tensor<?x64xbf16>, tensor<bf16> -> !q
  %t = coat.transpose %q : !q -> !qt
  %y = coat.linear forward %q, %w : !q, !w -> tensor<?x32xbf16>
  %q2 = coat.quantize %x scale %s {coat.recompute} : tensor<?x64xbf16>, tensor<bf16> -> !q
  %t2 = coat.transpose %q2 {coat.recompute} : !q -> !qt
  %dw = coat.linear wgrad %dyt, %t2 : !dyt, !qt -> tensor<32x64xbf16>
  return %y, %dw : tensor<?x32xbf16>, tensor<32x64xbf16>
}
