// RUN: coat-opt %s | coat-opt | FileCheck %s
// RUN: coat-opt %s -mlir-print-op-generic | coat-opt | FileCheck %s

// Before coat-mixed-granularity: coat.quantize_auto results, typed
// !coat.unresolved, feed every FP8 consumer, whose verifiers check shapes only.

// CHECK-LABEL: func.func @consumers
func.func @consumers(%x: tensor<128x256xbf16>, %w: tensor<64x256xf32>, %nw: tensor<256xbf16>,
                     %dy: tensor<128x256xbf16>, %st: tensor<128xf32>) {
  // CHECK: coat.quantize_auto %{{.*}} : tensor<128x256xbf16> -> !coat.unresolved<128x256xbf16>
  %u = coat.quantize_auto %x : tensor<128x256xbf16> -> !coat.unresolved<128x256xbf16>
  // CHECK: coat.quantize_auto %{{.*}} {direction = #coat.direction<forward>} : tensor<64x256xf32> -> !coat.unresolved<64x256xf32>
  %wu = coat.quantize_auto %w {direction = #coat.direction<forward>} : tensor<64x256xf32> -> !coat.unresolved<64x256xf32>
  // CHECK: coat.linear forward %{{.*}}, %{{.*}} : !coat.unresolved<128x256xbf16>, !coat.unresolved<64x256xf32> -> tensor<128x64xbf16>
  %y = coat.linear forward %u, %wu : !coat.unresolved<128x256xbf16>, !coat.unresolved<64x256xf32> -> tensor<128x64xbf16>
  // CHECK: coat.linear forward {{.*}} -> !coat.qtensor<128x64xf8E4M3FN, per_group<16>>
  %yq = coat.linear forward %u, %wu : !coat.unresolved<128x256xbf16>, !coat.unresolved<64x256xf32> -> !coat.qtensor<128x64xf8E4M3FN, per_group<16>>
  // CHECK: coat.transpose %{{.*}} : !coat.unresolved<64x256xf32> -> !coat.unresolved<256x64xf32>
  %wt = coat.transpose %wu : !coat.unresolved<64x256xf32> -> !coat.unresolved<256x64xf32>
  %s = coat.silu %u : !coat.unresolved<128x256xbf16> -> !coat.qtensor<128x256xf8E4M3FN, per_group<16>>
  %dx = coat.silu_grad %u, %dy : !coat.unresolved<128x256xbf16>, tensor<128x256xbf16> -> tensor<128x256xbf16>
  %g, %gt = coat.gelu %u : !coat.unresolved<128x256xbf16>
      -> !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<256x128xf8E4M3FN, per_tensor>
  %gd = coat.gelu_grad %u, %dy : !coat.unresolved<128x256xbf16>, tensor<128x256xbf16> -> tensor<128x256xbf16>
  %m = coat.swiglu_mul %s, %u : !coat.qtensor<128x256xf8E4M3FN, per_group<16>>, !coat.unresolved<128x256xbf16>
      -> !coat.qtensor<128x256xf8E4M3FN, per_tensor>
  %d1, %d2 = coat.swiglu_mul_grad %u, %u, %dy : !coat.unresolved<128x256xbf16>, !coat.unresolved<128x256xbf16>, tensor<128x256xbf16>
      -> tensor<128x256xbf16>, tensor<128x256xbf16>
  %n, %r = coat.rmsnorm %u, %nw eps = 1.000000e-05 : !coat.unresolved<128x256xbf16>, tensor<256xbf16>
      -> !coat.qtensor<128x256xf8E4M3FN, per_tensor>, tensor<128xf32>
  %nd, %nwd = coat.rmsnorm_grad %u, %nw, %st, %dy : !coat.unresolved<128x256xbf16>, tensor<256xbf16>, tensor<128xf32>, tensor<128x256xbf16>
      -> tensor<128x256xbf16>, tensor<256xbf16>
  %l, %mu, %rs = coat.layernorm %u eps = 1.000000e-05 : !coat.unresolved<128x256xbf16>
      -> !coat.qtensor<128x256xf8E4M3FN, per_tensor>, tensor<128xf32>, tensor<128xf32>
  %ld = coat.layernorm_grad %u, %st, %st, %dy : !coat.unresolved<128x256xbf16>, tensor<128xf32>, tensor<128xf32>, tensor<128x256xbf16>
      -> tensor<128x256xbf16>
  // CHECK: coat.silu %{{.*}} : !coat.unresolved<128x256xbf16> -> !coat.qtensor<128x256xf8E4M3FN, per_group<16>>
  // CHECK: coat.silu_grad %{{.*}}, %{{.*}} : !coat.unresolved<128x256xbf16>, tensor<128x256xbf16>
  // CHECK: coat.gelu %{{.*}} : !coat.unresolved<128x256xbf16>
  // CHECK: coat.gelu_grad %{{.*}}, %{{.*}} : !coat.unresolved<128x256xbf16>
  // CHECK: coat.swiglu_mul %{{.*}}, %{{.*}} : !coat.qtensor<128x256xf8E4M3FN, per_group<16>>, !coat.unresolved<128x256xbf16>
  // CHECK: coat.swiglu_mul_grad {{.*}} : !coat.unresolved<128x256xbf16>, !coat.unresolved<128x256xbf16>
  // CHECK: coat.rmsnorm %{{.*}} : !coat.unresolved<128x256xbf16>
  // CHECK: coat.rmsnorm_grad {{.*}} : !coat.unresolved<128x256xbf16>
  // CHECK: coat.layernorm %{{.*}} : !coat.unresolved<128x256xbf16>
  // CHECK: coat.layernorm_grad {{.*}} : !coat.unresolved<128x256xbf16>
  return
}

// CHECK-LABEL: func.func @types
// CHECK-SAME: !coat.unresolved<f16>, %{{.*}}: !coat.unresolved<?x4096xbf16>
func.func @types(%a: !coat.unresolved<f16>, %b: !coat.unresolved<?x4096xbf16>) {
  return
}

// CHECK-LABEL: func.func @epilogue_maxima
// CHECK: coat.absmax %{{.*}}, per_group<16> epilogue : tensor<128x64xbf16> -> tensor<128x4xf32>
func.func @epilogue_maxima(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>, %w: !coat.qtensor<64x256xf8E4M3FN, per_tensor>) -> tensor<128x4xf32> {
  %y = coat.linear forward %x, %w : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<64x256xf8E4M3FN, per_tensor> -> tensor<128x64xbf16>
  %p = coat.absmax %y, per_group<16> epilogue : tensor<128x64xbf16> -> tensor<128x4xf32>
  return %p : tensor<128x4xf32>
}
