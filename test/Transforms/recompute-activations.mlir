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

// -----

// A chain (a norm, its per-tensor scale and the quantize+transpose for the
// weight gradient): the norm's 1x16 input and weight stay kept for
// rmsnorm_grad, so the transposed copy is derived again from them, op by op
// in program order right before the wgrad; its scale (a rank-0 tensor) is
// the forward's, kept rather than reduced again from the norm's output, so
// neither the maxima nor the scale arithmetic run again. rmsnorm_grad then
// reads the copy's rstd. The weight's transposed copy (from a weight that
// is not kept) and the forward GEMM's operand stay as they are.
// CHECK-LABEL: func.func @norm_linear
// CHECK: %[[XQ:.*]] = coat.quantize %arg0 :
// CHECK: %[[Y:.*]], %[[RSTD:.*]] = coat.rmsnorm %[[XQ]], %arg1
// CHECK: %[[S:.*]] = arith.truncf
// CHECK: coat.linear forward
// CHECK: %[[WT:.*]] = coat.transpose %{{.*}} : !coat.qtensor<48x32
// CHECK: %[[DLN:.*]] = coat.linear dgrad %{{.*}}, %[[WT]]
// CHECK-NEXT: %[[Y2:.*]], %[[RSTD2:.*]] = coat.rmsnorm %[[XQ]], %arg1 {{.*}}{coat.recompute}
// CHECK-NEXT: %[[Q2:.*]] = coat.quantize %[[Y2]] scale %[[S]] {coat.recompute}
// CHECK-NEXT: %[[T2:.*]] = coat.transpose %[[Q2]] {coat.recompute}
// CHECK-NEXT: coat.linear wgrad %{{.*}}, %[[T2]]
// CHECK-NEXT: coat.rmsnorm_grad %[[XQ]], %arg1, %[[RSTD2]], %[[DLN]]
// The copy gives rstd too: only the 1x16 input stays (BF16: x, the norm's
// output, rstd).
// SAVED: saved activations: 578 bytes, BF16 2082 bytes
// KEPT: saved activations: 1154 bytes, BF16 2080 bytes
func.func @norm_linear(%arg0: tensor<16x32xbf16>, %arg1: tensor<32xbf16> {coat.weight}, %arg2: tensor<48x32xbf16> {coat.weight}, %arg3: tensor<16x48xbf16> {coat.gradient, coat.grad_of = 0 : i64}) -> (tensor<16x48xbf16>, tensor<16x32xbf16> {coat.grad_of = 0 : i64}, tensor<32xbf16> {coat.grad_of = 1 : i64}, tensor<48x32xbf16> {coat.grad_of = 2 : i64}) {
  %0 = coat.quantize %arg0 : tensor<16x32xbf16> -> !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
  %result, %rstd = coat.rmsnorm %0, %arg1 eps = 9.99999974E-6 : !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<32xbf16> -> tensor<16x32xbf16>, tensor<16xf32>
  %1 = coat.absmax %result, per_group<16> epilogue : tensor<16x32xbf16> -> tensor<16x2xf32>
  %2 = coat.reduce_scales %1 : tensor<16x2xf32> -> tensor<f32>
  %cst = arith.constant dense<1.000000e-10> : tensor<f32>
  %3 = arith.addf %2, %cst : tensor<f32>
  %cst_0 = arith.constant dense<4.480000e+02> : tensor<f32>
  %4 = arith.divf %3, %cst_0 : tensor<f32>
  %5 = arith.truncf %4 : tensor<f32> to tensor<bf16>
  %6 = coat.quantize %result scale %5 : tensor<16x32xbf16>, tensor<bf16> -> !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>
  %7 = coat.transpose %6 : !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<32x16xf8E4M3FN, per_tensor, scale = bf16>
  %8 = coat.quantize %arg2 : tensor<48x32xbf16> -> !coat.qtensor<48x32xf8E4M3FN, per_tensor, scale = bf16>
  %9 = coat.linear forward %6, %8 : !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<48x32xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x48xbf16>
  %10 = coat.quantize %arg3 : tensor<16x48xbf16> -> !coat.qtensor<16x48xf8E5M2, per_tensor, scale = bf16>
  %11 = coat.transpose %10 : !coat.qtensor<16x48xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<48x16xf8E5M2, per_tensor, scale = bf16>
  %12 = coat.transpose %8 : !coat.qtensor<48x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<32x48xf8E4M3FN, per_tensor, scale = bf16>
  %13 = coat.linear dgrad %10, %12 : !coat.qtensor<16x48xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x48xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x32xbf16>
  %14 = coat.linear wgrad %11, %7 : !coat.qtensor<48x16xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x16xf8E4M3FN, per_tensor, scale = bf16> -> tensor<48x32xbf16>
  %dx, %dweight = coat.rmsnorm_grad %0, %arg1, %rstd, %13 : !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<32xbf16>, tensor<16xf32>, tensor<16x32xbf16> -> tensor<16x32xbf16>, tensor<32xbf16>
  return %9, %dx, %dweight, %14 : tensor<16x48xbf16>, tensor<16x32xbf16>, tensor<32xbf16>, tensor<48x32xbf16>
}

// -----

!g16 = !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
!pt = !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>
!ptt = !coat.qtensor<32x16xf8E4M3FN, per_tensor, scale = bf16>

// An affine LayerNorm before a linear layer: its bias is read by the forward
// only, yet, as a weight, it is there in the backward, so the norm's
// transposed output is derived again for the wgrad as in @norm_linear (and
// layernorm_grad reads the copy's mean and rstd).
// CHECK-LABEL: func.func @layernorm_bias
// CHECK-SAME: %arg2: tensor<32xbf16> {coat.weight}
// CHECK: %[[DLN:.*]] = coat.linear dgrad
// CHECK-NEXT: %[[Y2:.*]], %[[MEAN2:.*]], %[[RSTD2:.*]] = coat.layernorm %arg0 weight %arg1 bias %arg2 {{.*}}{coat.recompute}
// CHECK-NOT: coat.absmax
// CHECK: %[[Q2:.*]] = coat.quantize %[[Y2]] scale %{{.*}} {coat.recompute}
// CHECK-NEXT: %[[T2:.*]] = coat.transpose %[[Q2]] {coat.recompute}
// CHECK-NEXT: coat.linear wgrad %{{.*}}, %[[T2]]
// CHECK-NEXT: coat.layernorm_grad %arg0, %[[MEAN2]], %[[RSTD2]], %[[DLN]] weight %arg1
// Only the 1x16 input stays.
// SAVED: saved activations: 578 bytes, BF16 2114 bytes
// KEPT: saved activations: 1218 bytes, BF16 2112 bytes
func.func @layernorm_bias(%xq: !g16, %w_ln: tensor<32xbf16> {coat.weight},
    %b_ln: tensor<32xbf16> {coat.weight}, %w: tensor<48x32xbf16> {coat.weight},
    %dy: tensor<16x48xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (tensor<16x48xbf16>, tensor<16x32xbf16> {coat.grad_of = 0 : i64},
        tensor<32xbf16> {coat.grad_of = 1 : i64}, tensor<32xbf16> {coat.grad_of = 2 : i64},
        tensor<48x32xbf16> {coat.grad_of = 3 : i64}) {
  %y, %mean, %rstd = coat.layernorm %xq weight %w_ln bias %b_ln eps = 1.0e-5
      : !g16, tensor<32xbf16>, tensor<32xbf16> -> tensor<16x32xf32>, tensor<16xf32>, tensor<16xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<16x32xf32> -> tensor<16x2xf32>
  %r = coat.reduce_scales %m : tensor<16x2xf32> -> tensor<f32>
  %eps = arith.constant dense<1.000000e-10> : tensor<f32>
  %a = arith.addf %r, %eps : tensor<f32>
  %max = arith.constant dense<4.480000e+02> : tensor<f32>
  %d = arith.divf %a, %max : tensor<f32>
  %s = arith.truncf %d : tensor<f32> to tensor<bf16>
  %yq = coat.quantize %y scale %s : tensor<16x32xf32>, tensor<bf16> -> !pt
  %yt = coat.transpose %yq : !pt -> !ptt
  %wq = coat.quantize %w : tensor<48x32xbf16> -> !coat.qtensor<48x32xf8E4M3FN, per_tensor, scale = bf16>
  %out = coat.linear forward %yq, %wq : !pt, !coat.qtensor<48x32xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x48xbf16>
  %dyq = coat.quantize %dy : tensor<16x48xbf16> -> !coat.qtensor<16x48xf8E5M2, per_tensor, scale = bf16>
  %dyt = coat.transpose %dyq : !coat.qtensor<16x48xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<48x16xf8E5M2, per_tensor, scale = bf16>
  %wt = coat.transpose %wq : !coat.qtensor<48x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<32x48xf8E4M3FN, per_tensor, scale = bf16>
  %dln = coat.linear dgrad %dyq, %wt : !coat.qtensor<16x48xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x48xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x32xbf16>
  %dw = coat.linear wgrad %dyt, %yt : !coat.qtensor<48x16xf8E5M2, per_tensor, scale = bf16>, !ptt -> tensor<48x32xbf16>
  %dx, %dw_ln, %db_ln = coat.layernorm_grad %xq, %mean, %rstd, %dln weight %w_ln
      : !g16, tensor<16xf32>, tensor<16xf32>, tensor<16x32xbf16>, tensor<32xbf16>
      -> tensor<16x32xbf16>, tensor<32xbf16>, tensor<32xbf16>
  return %out, %dx, %dw_ln, %db_ln, %dw
      : tensor<16x48xbf16>, tensor<16x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<48x32xbf16>
}
