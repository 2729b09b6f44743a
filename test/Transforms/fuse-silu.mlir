// RUN: coat-opt %s -split-input-file -coat-fuse-silu | FileCheck %s
// RUN: coat-opt %s -split-input-file -coat-recompute-activations -coat-fuse-silu | FileCheck %s --check-prefix=RECOMPUTED
// RUN: coat-opt %s -split-input-file -coat-recompute-activations -coat-fuse-silu -coat-report-saved-activations -o /dev/null 2>&1 | FileCheck %s --check-prefix=SAVED

!g16 = !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>

// A SwiGLU MLP's forward and backward: both products take the gate, and the
// backward's product returns the gate's gradient in place of silu_grad.
// CHECK-LABEL: func.func @swiglu(
// CHECK-NEXT: %[[M:.*]] = coat.swiglu_mul %arg0, %arg1 {silu_gate} :
// CHECK-NEXT: %[[DGATE:.*]], %[[DUP:.*]] = coat.swiglu_mul_grad %arg0, %arg1, %arg2 {silu_gate} :
// CHECK-NEXT: return %[[M]], %[[DGATE]], %[[DUP]] :
// After recomputation the backward's SiLU is a clone; both fold, and the
// forward keeps the gate and up only, as before.
// RECOMPUTED-LABEL: func.func @swiglu(
// RECOMPUTED-NEXT: coat.swiglu_mul %arg0, %arg1 {silu_gate}
// RECOMPUTED-NEXT: coat.swiglu_mul_grad %arg0, %arg1, %arg2 {silu_gate}
// RECOMPUTED-NEXT: return
// SAVED: saved activations: 1152 bytes
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

// Forward only (inference): the product takes the gate.
// CHECK-LABEL: func.func @forward_only(
// CHECK-NEXT: %[[Y:.*]] = coat.swiglu_mul %arg0, %arg1 {silu_gate}
// CHECK-NEXT: return %[[Y]]
func.func @forward_only(%gate: !g16, %up: !g16) -> tensor<16x32xbf16> {
  %act = coat.silu %gate : !g16 -> !g16
  %m = coat.swiglu_mul %act, %up : !g16, !g16 -> tensor<16x32xbf16>
  return %m : tensor<16x32xbf16>
}

// -----

!g16 = !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>

// The SiLU's result is returned too: it is written anyway, so nothing folds.
// CHECK-LABEL: func.func @silu_returned(
// CHECK-NEXT: %[[S:.*]] = coat.silu %arg0
// CHECK-NEXT: coat.swiglu_mul %[[S]], %arg1 :
func.func @silu_returned(%gate: !g16, %up: !g16) -> (!g16, tensor<16x32xbf16>) {
  %act = coat.silu %gate : !g16 -> !g16
  %m = coat.swiglu_mul %act, %up : !g16, !g16 -> tensor<16x32xbf16>
  return %act, %m : !g16, tensor<16x32xbf16>
}

// -----

!g16 = !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>

// The SiLU is the product's rhs: x2 is not the one the kernel derives.
// CHECK-LABEL: func.func @silu_as_rhs(
// CHECK-NEXT: %[[S:.*]] = coat.silu %arg0
// CHECK-NEXT: coat.swiglu_mul %arg1, %[[S]] :
func.func @silu_as_rhs(%gate: !g16, %up: !g16) -> tensor<16x32xbf16> {
  %act = coat.silu %gate : !g16 -> !g16
  %m = coat.swiglu_mul %up, %act : !g16, !g16 -> tensor<16x32xbf16>
  return %m : tensor<16x32xbf16>
}

// -----

!g16 = !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
!t = !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>

// The SiLU's gradient carries its own FP8 copy, and in another case dlhs
// has a second reader: the backward stays unfused, so the forward's SiLU
// (shared with it) stays too.
// CHECK-LABEL: func.func @silu_grad_with_copy(
// CHECK: coat.silu %arg0
// CHECK-NOT: silu_gate
// CHECK: coat.silu_grad
func.func @silu_grad_with_copy(%gate: !g16, %up: !g16, %dm: tensor<16x32xbf16> {coat.gradient})
    -> (tensor<16x32xbf16>, tensor<16x32xbf16>, !t) {
  %act = coat.silu %gate : !g16 -> !g16
  %m = coat.swiglu_mul %act, %up : !g16, !g16 -> tensor<16x32xbf16>
  %dact, %dup = coat.swiglu_mul_grad %act, %up, %dm : !g16, !g16, tensor<16x32xbf16> -> tensor<16x32xbf16>, tensor<16x32xbf16>
  %dgate, %dq = coat.silu_grad %gate, %dact : !g16, tensor<16x32xbf16> -> tensor<16x32xbf16>, !t
  return %m, %dgate, %dq : tensor<16x32xbf16>, tensor<16x32xbf16>, !t
}

// CHECK-LABEL: func.func @dlhs_read_twice(
// CHECK: coat.silu %arg0
// CHECK-NOT: silu_gate
// CHECK: coat.silu_grad
func.func @dlhs_read_twice(%gate: !g16, %up: !g16, %dm: tensor<16x32xbf16> {coat.gradient})
    -> (tensor<16x32xbf16>, tensor<16x32xbf16>) {
  %act = coat.silu %gate : !g16 -> !g16
  %dact, %dup = coat.swiglu_mul_grad %act, %up, %dm : !g16, !g16, tensor<16x32xbf16> -> tensor<16x32xbf16>, tensor<16x32xbf16>
  %dgate = coat.silu_grad %gate, %dact : !g16, tensor<16x32xbf16> -> tensor<16x32xbf16>
  return %dgate, %dact : tensor<16x32xbf16>, tensor<16x32xbf16>
}

// -----

!g16 = !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>

// silu_grad of another tensor than the product's gate: not the SiLU's own
// gradient, so nothing folds.
// CHECK-LABEL: func.func @other_gate(
// CHECK: coat.silu %arg0
// CHECK-NOT: silu_gate
func.func @other_gate(%gate: !g16, %other: !g16, %up: !g16, %dm: tensor<16x32xbf16> {coat.gradient})
    -> (tensor<16x32xbf16>, tensor<16x32xbf16>) {
  %act = coat.silu %gate : !g16 -> !g16
  %dact, %dup = coat.swiglu_mul_grad %act, %up, %dm : !g16, !g16, tensor<16x32xbf16> -> tensor<16x32xbf16>, tensor<16x32xbf16>
  %d = coat.silu_grad %other, %dact : !g16, tensor<16x32xbf16> -> tensor<16x32xbf16>
  return %d, %dup : tensor<16x32xbf16>, tensor<16x32xbf16>
}
