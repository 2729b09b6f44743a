// RUN: coat-opt %s -coat-outline-kernels=finite-flags=true -split-input-file | FileCheck %s
// RUN: coat-opt %s -coat-outline-kernels -split-input-file | FileCheck %s --check-prefix=OFF

// What the program returns in high precision is flagged on the spec that
// writes it: the residual sum (returned) but not the gradient only its
// quantized copy and the bias gradient leave with; the bias gradient (f32,
// returned) is flagged; FP8 copies and maxima never are.
// CHECK-LABEL: func.func @block_k0_residual_add_grad(
// CHECK-SAME: -> (tensor<?x64xbf16>, tensor<?x4xf32>)
// CHECK-LABEL: func.func @block_k1_bias_grad(
// CHECK-SAME: -> (tensor<64xf32> {coat.finite_flag})
// CHECK-LABEL: func.func @block_k4_residual_add(
// CHECK-SAME: -> (tensor<?x64xbf16> {coat.finite_flag}, !coat.qtensor<?x64xf8E4M3FN, per_group<16>>)
// OFF-NOT: coat.finite_flag
func.func @block(%a: tensor<?x64xbf16>, %b: tensor<?x64xbf16>)
    -> (!coat.qtensor<?x64xf8E5M2, per_tensor, scale = bf16>, tensor<64xf32>,
        tensor<?x64xbf16>, !coat.qtensor<?x64xf8E4M3FN, per_group<16>>) {
  %g = coat.residual_add_grad %a, %b : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x64xbf16>
  %db = coat.bias_grad %g : tensor<?x64xbf16> -> tensor<64xf32>
  %q = coat.quantize %g : tensor<?x64xbf16> -> !coat.qtensor<?x64xf8E5M2, per_tensor, scale = bf16>
  %s, %sq = coat.residual_add %a, %b : tensor<?x64xbf16>, tensor<?x64xbf16>
      -> tensor<?x64xbf16>, !coat.qtensor<?x64xf8E4M3FN, per_group<16>>
  return %q, %db, %s, %sq : !coat.qtensor<?x64xf8E5M2, per_tensor, scale = bf16>, tensor<64xf32>,
      tensor<?x64xbf16>, !coat.qtensor<?x64xf8E4M3FN, per_group<16>>
}

// -----

// Two call sites of one kernel, one returning its result and one not, get
// two specs: the flag is part of what identifies a kernel.
// CHECK-LABEL: func.func @twice_k0_residual_add(
// CHECK-SAME: -> (tensor<?x64xbf16>, !coat.qtensor
// CHECK-NOT: func.func @twice_k1_
// CHECK-LABEL: func.func @twice_k2_residual_add(
// CHECK-SAME: -> (tensor<?x64xbf16> {coat.finite_flag}, !coat.qtensor
// OFF-LABEL: func.func @twice_k0_residual_add(
// OFF-NOT: func.func @twice_k2_residual_add(
func.func @twice(%a: tensor<?x64xbf16>, %b: tensor<?x64xbf16>) -> tensor<?x64xbf16> {
  %s, %sq = coat.residual_add %a, %b : tensor<?x64xbf16>, tensor<?x64xbf16>
      -> tensor<?x64xbf16>, !coat.qtensor<?x64xf8E4M3FN, per_group<16>>
  %t, %tq = coat.residual_add %s, %b : tensor<?x64xbf16>, tensor<?x64xbf16>
      -> tensor<?x64xbf16>, !coat.qtensor<?x64xf8E4M3FN, per_group<16>>
  %u, %uq = coat.residual_add %t, %b : tensor<?x64xbf16>, tensor<?x64xbf16>
      -> tensor<?x64xbf16>, !coat.qtensor<?x64xf8E4M3FN, per_group<16>>
  return %u : tensor<?x64xbf16>
}
