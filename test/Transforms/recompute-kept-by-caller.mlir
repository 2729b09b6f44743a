// RUN: coat-opt %s -split-input-file -coat-recompute-activations | FileCheck %s
// RUN: coat-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(coat-recompute-activations,coat-report-saved-activations))' -o /dev/null 2>&1 | FileCheck %s --check-prefix=SAVED
// RUN: coat-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(coat-recompute-activations),coat-outline-kernels)' | FileCheck %s --check-prefix=OUTLINED

!a = !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>
!at = !coat.qtensor<64x16xf8E4M3FN, per_tensor, scale = bf16>
!w = !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>
!dy = !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>
!dyt = !coat.qtensor<32x16xf8E5M2, per_tensor, scale = bf16>

// An output projection whose input the caller keeps for its own backward
// (attention's output): the wgrad's transposed FP8 copy of it is quantized
// again in the backward from the argument, whatever its size, instead of
// kept.
// CHECK-LABEL: func.func @projection
// CHECK: %[[Q:.*]] = coat.quantize %arg0 :
// CHECK: coat.linear forward %[[Q]]
// CHECK: %[[AGAIN:.*]] = coat.quantize %arg0 {coat.recompute} :
// CHECK-NEXT: %[[T:.*]] = coat.transpose %[[AGAIN]] {coat.recompute}
// CHECK-NEXT: coat.linear wgrad %{{.*}}, %[[T]]
// The copy is no longer counted; the argument the backward reads is the
// caller's.
// SAVED: remark: read by the backward, kept by the caller: 'tensor<16x64xbf16>', 2048 bytes (not counted)
// SAVED: saved activations: 0 bytes{{.*}}; read from the caller's: 2048 bytes
// Outlined, the copy derived again takes the forward's scale and writes only
// the transposed layout the wgrad reads.
// OUTLINED-LABEL: func.func @projection(
// OUTLINED: %[[S:.*]] = call @projection_k{{[0-9]+}}_absmax_scale(%arg0) :
// OUTLINED: call @projection_k{{[0-9]+}}_quantize_per_tensor(%arg0, %[[S]]) :
// OUTLINED: call @projection_k{{[0-9]+}}_quantize_per_tensor_transposed_only(%arg0, %[[S]]) {coat.recompute}
// OUTLINED-NEXT: call @projection_k{{[0-9]+}}_linear_wgrad(
func.func @projection(%a: tensor<16x64xbf16> {coat.kept_by_caller},
                      %w: tensor<32x64xbf16> {coat.weight},
                      %dy: tensor<16x32xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (tensor<16x32xbf16>, tensor<32x64xbf16> {coat.grad_of = 1 : i64}) {
  %aq = coat.quantize %a : tensor<16x64xbf16> -> !a
  %wq = coat.quantize %w : tensor<32x64xbf16> -> !w
  %y = coat.linear forward %aq, %wq : !a, !w -> tensor<16x32xbf16>
  %at = coat.transpose %aq : !a -> !at
  %dyq = coat.quantize %dy : tensor<16x32xbf16> -> !dy
  %dyt = coat.transpose %dyq : !dy -> !dyt
  %dw = coat.linear wgrad %dyt, %at : !dyt, !at -> tensor<32x64xbf16>
  return %y, %dw : tensor<16x32xbf16>, tensor<32x64xbf16>
}

// -----

!a = !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>
!at = !coat.qtensor<64x16xf8E4M3FN, per_tensor, scale = bf16>
!w = !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>
!dy = !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>
!dyt = !coat.qtensor<32x16xf8E5M2, per_tensor, scale = bf16>

// A program that keeps its backward GEMMs' operands keeps the copy (it
// asked for fewer kernels, not less memory), and its backward reads
// nothing of the caller's.
// CHECK-LABEL: func.func @projection_keeps_operands
// CHECK-NOT: coat.recompute
// CHECK: return
// SAVED: saved activations: 1026 bytes{{.*}}weight copies kept for the backward: 0 bytes{{$}}
func.func @projection_keeps_operands(%a: tensor<16x64xbf16> {coat.kept_by_caller},
                                     %w: tensor<32x64xbf16> {coat.weight},
                                     %dy: tensor<16x32xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (tensor<16x32xbf16>, tensor<32x64xbf16> {coat.grad_of = 1 : i64})
    attributes {coat.keep_gemm_operands = true} {
  %aq = coat.quantize %a : tensor<16x64xbf16> -> !a
  %wq = coat.quantize %w : tensor<32x64xbf16> -> !w
  %y = coat.linear forward %aq, %wq : !a, !w -> tensor<16x32xbf16>
  %at = coat.transpose %aq : !a -> !at
  %dyq = coat.quantize %dy : tensor<16x32xbf16> -> !dy
  %dyt = coat.transpose %dyq : !dy -> !dyt
  %dw = coat.linear wgrad %dyt, %at : !dyt, !at -> tensor<32x64xbf16>
  return %y, %dw : tensor<16x32xbf16>, tensor<32x64xbf16>
}
