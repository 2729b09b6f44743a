// RUN: coat-opt %s -split-input-file -coat-recompute-activations | FileCheck %s
// RUN: coat-opt %s -split-input-file -coat-recompute-activations -coat-report-saved-activations -o /dev/null 2>&1 | FileCheck %s --check-prefix=SAVED
// RUN: coat-opt %s -split-input-file -coat-report-saved-activations -o /dev/null 2>&1 | FileCheck %s --check-prefix=KEPT

!g16 = !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>

// The SwiGLU pattern: the backward reads gate (silu_grad) and up, so
// silu(gate) is recomputed before swiglu_mul_grad instead of kept; the
// forward's swiglu_mul keeps reading the original.
// CHECK-LABEL: func.func @swiglu
// CHECK: %[[ACT:.*]] = coat.silu %[[GATE:[^ ]*]] :
// CHECK-NOT: coat.recompute
// CHECK: coat.swiglu_mul %[[ACT]], %[[UP:[^ ]*]] :
// CHECK: %[[AGAIN:.*]] = coat.silu %[[GATE]] {coat.recompute} :
// CHECK-NEXT: coat.swiglu_mul_grad %[[AGAIN]], %[[UP]], %{{.*}} :
// CHECK: coat.silu_grad %[[GATE]],
// Kept: gate and up (two 1x16 tensors of 512 + 64 bytes), not silu(gate);
// BF16 keeps all three, recomputed or not.
// SAVED: saved activations: 1152 bytes, BF16 3072 bytes (1.12U vs BF16 3.00U
// KEPT: saved activations: 1728 bytes, BF16 3072 bytes (1.69U vs BF16 3.00U
func.func @swiglu(%gate: !g16, %up: !g16, %dm: tensor<16x32xbf16> {coat.gradient})
    -> (tensor<16x32xbf16>, tensor<16x32xbf16>, tensor<16x32xbf16>) {
  %act = coat.silu %gate : !g16 -> !g16
  %m = coat.swiglu_mul %act, %up : !g16, !g16 -> tensor<16x32xbf16>
  %dact, %dup = coat.swiglu_mul_grad %act, %up, %dm : !g16, !g16, tensor<16x32xbf16> -> tensor<16x32xbf16>, tensor<16x32xbf16>
  %dgate = coat.silu_grad %gate, %dact : !g16, tensor<16x32xbf16> -> tensor<16x32xbf16>
  return %m, %dgate, %dup : tensor<16x32xbf16>, tensor<16x32xbf16>, tensor<16x32xbf16>
}

// -----

!g16 = !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>

// The input is not kept (only the result is read in the backward):
// recomputing would keep the input alive instead, so nothing changes.
// CHECK-LABEL: func.func @input_not_kept
// CHECK-NOT: coat.recompute
// CHECK: return
func.func @input_not_kept(%x: !g16, %dy: tensor<16x32xbf16> {coat.gradient})
    -> tensor<16x32xbf16> {
  %y = coat.silu %x : !g16 -> !g16
  %dx = coat.silu_grad %y, %dy : !g16, tensor<16x32xbf16> -> tensor<16x32xbf16>
  return %dx : tensor<16x32xbf16>
}

// -----

!g16 = !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
!t = !coat.qtensor<16x32xf8E4M3FN, per_tensor>

// A per-tensor result depends on a scale derived elsewhere: one run of the
// op does not reproduce it, so it stays kept.
// CHECK-LABEL: func.func @per_tensor_result
// CHECK-NOT: coat.recompute
// CHECK: return
func.func @per_tensor_result(%x: !g16, %dy: tensor<16x32xbf16> {coat.gradient})
    -> (tensor<16x32xbf16>, tensor<16x32xbf16>) {
  %y = coat.gelu %x : !g16 -> !t
  %a = coat.silu_grad %x, %dy : !g16, tensor<16x32xbf16> -> tensor<16x32xbf16>
  %d = coat.dequantize %y : !t -> tensor<16x32xbf16>
  %s = coat.residual_add_grad %a, %dy : tensor<16x32xbf16>, tensor<16x32xbf16> -> tensor<16x32xbf16>
  %r = coat.residual_add_grad %s, %d : tensor<16x32xbf16>, tensor<16x32xbf16> -> tensor<16x32xbf16>
  return %r, %d : tensor<16x32xbf16>, tensor<16x32xbf16>
}

// -----

!g16 = !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>

// Without an incoming gradient there is no backward: nothing to do.
// CHECK-LABEL: func.func @forward_only
// CHECK-NOT: coat.recompute
// CHECK: return
func.func @forward_only(%gate: !g16, %up: !g16) -> tensor<16x32xbf16> {
  %act = coat.silu %gate : !g16 -> !g16
  %m = coat.swiglu_mul %act, %up : !g16, !g16 -> tensor<16x32xbf16>
  return %m : tensor<16x32xbf16>
}
