// RUN: coat-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(coat-recompute-activations{weight-copies=true}))' | FileCheck %s
// RUN: coat-opt %s -split-input-file -coat-recompute-activations | FileCheck %s --check-prefix=KEPT
// RUN: coat-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(coat-recompute-activations{weight-copies=true},coat-report-saved-activations))' -o /dev/null 2>&1 | FileCheck %s --check-prefix=SAVED

!w = !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>
!wt = !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16>
!x = !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>
!dy = !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>

// The FP8 copy of a weight, read by the forward GEMM and (transposed) by
// the dgrad, is quantized again in the backward with weight-copies: the
// weight is unchanged there, so the copy is the same bits. Without the
// option it is kept (a per-tensor scale the quantize derived itself).
// CHECK-LABEL: func.func @weight_copy
// CHECK: %[[W:.*]] = coat.quantize %arg1 :
// CHECK: coat.linear forward %arg0, %[[W]]
// CHECK: %[[AGAIN:.*]] = coat.quantize %arg1 {coat.recompute} :
// CHECK-NEXT: coat.transpose %[[AGAIN]]
// KEPT-LABEL: func.func @weight_copy
// KEPT-NOT: coat.recompute
// SAVED: saved activations: 0 bytes{{.*}}weight copies kept for the backward: 0 bytes
func.func @weight_copy(%x: !x, %w: tensor<32x64xbf16> {coat.weight, coat.frozen},
                       %dy: !dy {coat.gradient}) -> (tensor<16x32xbf16>, tensor<16x64xbf16>) {
  %wq = coat.quantize %w : tensor<32x64xbf16> -> !w
  %y = coat.linear forward %x, %wq : !x, !w -> tensor<16x32xbf16>
  %wt = coat.transpose %wq : !w -> !wt
  %dx = coat.linear dgrad %dy, %wt : !dy, !wt -> tensor<16x64xbf16>
  return %y, %dx : tensor<16x32xbf16>, tensor<16x64xbf16>
}

// -----

!w = !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>
!wt = !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16>
!x = !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>
!dy = !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>

// Only a weight's copy: the same program with an activation in the place
// of the weight keeps the copy (its values are gone by the backward).
// CHECK-LABEL: func.func @activation_copy
// CHECK-NOT: coat.recompute
// CHECK: return
func.func @activation_copy(%x: !x, %a: tensor<32x64xbf16>, %dy: !dy {coat.gradient})
    -> (tensor<16x32xbf16>, tensor<16x64xbf16>) {
  %aq = coat.quantize %a : tensor<32x64xbf16> -> !w
  %y = coat.linear forward %x, %aq : !x, !w -> tensor<16x32xbf16>
  %at = coat.transpose %aq : !w -> !wt
  %dx = coat.linear dgrad %dy, %at : !dy, !wt -> tensor<16x64xbf16>
  return %y, %dx : tensor<16x32xbf16>, tensor<16x64xbf16>
}
