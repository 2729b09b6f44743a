// RUN: coat-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(coat-recompute-activations{weight-copies-min-bytes=0}))' | FileCheck %s
// RUN: coat-opt %s -split-input-file -coat-recompute-activations | FileCheck %s --check-prefix=KEPT
// RUN: coat-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(coat-recompute-activations{weight-copies-min-bytes=-1}))' | FileCheck %s --check-prefix=KEPT
// RUN: coat-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(coat-recompute-activations{weight-copies-min-bytes=0},coat-report-saved-activations))' -o /dev/null 2>&1 | FileCheck %s --check-prefix=SAVED
// RUN: coat-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(coat-recompute-activations{weight-copies-min-bytes=2050}))' | FileCheck %s --check-prefix=SIZE
// RUN: coat-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(coat-recompute-activations{weight-copies-min-bytes=2051}))' | FileCheck %s --check-prefix=KEPT
// RUN: coat-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(coat-recompute-activations{weight-copies-min-bytes=2050}))' -o /dev/null 2>&1 | FileCheck %s --check-prefix=REMARK
// RUN: coat-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(coat-recompute-activations{weight-copies-min-bytes=-1}))' -o /dev/null 2>&1 | FileCheck %s --check-prefix=NEVER
// RUN: coat-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(coat-recompute-activations{weight-copies-min-bytes=0}),coat-outline-kernels)' | FileCheck %s --check-prefix=OUTLINED

!w = !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>
!wt = !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16>
!x = !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>
!dy = !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>

// The FP8 copy of a weight, read by the forward GEMM and (transposed) by
// the dgrad, is quantized again in the backward when it has at least
// weight-copies-min-bytes (2048 codes and a bf16 scale: 2050 bytes): the
// weight is unchanged there, so the copy is the same bits. A smaller copy
// (by default, under 8 MiB) is kept: a per-tensor scale the quantize
// derived itself.
// CHECK-LABEL: func.func @weight_copy
// CHECK: %[[W:.*]] = coat.quantize %arg1 :
// CHECK: coat.linear forward %arg0, %[[W]]
// CHECK: %[[AGAIN:.*]] = coat.quantize %arg1 {coat.recompute} :
// CHECK-NEXT: coat.transpose %[[AGAIN]]
// SIZE-LABEL: func.func @weight_copy
// SIZE: coat.quantize %arg1 {coat.recompute} :
// Each decision is a remark at the weight's quantize.
// REMARK: remark: FP8 copy of weight argument 1 (2050 bytes) derived again in the backward: at least weight-copies-min-bytes (2050)
// NEVER: remark: FP8 copy of weight argument 1 (2050 bytes) kept for the backward: weight-copies-min-bytes is negative
// Outlined, the copy derived again takes the forward's scale (a rank-0
// value the program keeps: two bytes) instead of reading the whole weight
// again for its maxima. Each quantize writes only the layout its phase
// reads: the forward's the row-major codes (its transpose lost its reader
// to the copy), the backward's only the transposed copy.
// OUTLINED-LABEL: func.func @weight_copy(
// OUTLINED: %[[S:.*]] = call @weight_copy_k{{[0-9]+}}_absmax_scale(%arg1) :
// OUTLINED-NOT: coat.recompute
// OUTLINED: call @weight_copy_k{{[0-9]+}}_quantize_per_tensor(%arg1, %[[S]]) :
// OUTLINED-NEXT: call @weight_copy_k{{[0-9]+}}_linear_forward(
// OUTLINED-NEXT: call @weight_copy_k{{[0-9]+}}_quantize_per_tensor_transposed_only(%arg1, %[[S]]) {coat.recompute}
// OUTLINED-NEXT: call @weight_copy_k{{[0-9]+}}_linear_dgrad(
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

// -----

!w = !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>
!wt = !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16>
!v = !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>
!vt = !coat.qtensor<64x16xf8E4M3FN, per_tensor, scale = bf16>
!x = !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>
!dy = !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>
!dz = !coat.qtensor<16x16xf8E5M2, per_tensor, scale = bf16>

// The decision is per copy: at 2050 bytes the 32x64 weight's copy is
// derived again and the 16x64 one's (1026 bytes) is kept.
// REMARK: remark: FP8 copy of weight argument 1 (2050 bytes) derived again in the backward: at least weight-copies-min-bytes (2050)
// REMARK: remark: FP8 copy of weight argument 2 (1026 bytes) kept for the backward: under weight-copies-min-bytes (2050)
// SIZE-LABEL: func.func @two_weights
// SIZE: %[[V:.*]] = coat.quantize %arg2 :
// SIZE: %[[VT:.*]] = coat.transpose %[[V]]
// SIZE: %[[AGAIN:.*]] = coat.quantize %arg1 {coat.recompute} :
// SIZE-NEXT: coat.transpose %[[AGAIN]]
// SIZE-NOT: coat.quantize %arg2 {coat.recompute}
// SIZE: coat.linear dgrad %{{.*}}, %[[VT]]
// SIZE: return
// KEPT-LABEL: func.func @two_weights
// KEPT-NOT: coat.recompute
// CHECK-LABEL: func.func @two_weights
// CHECK-COUNT-2: {coat.recompute}
// CHECK: return
// SAVED: saved activations: 0 bytes{{.*}}weight copies kept for the backward: 0 bytes
func.func @two_weights(%x: !x, %w: tensor<32x64xbf16> {coat.weight, coat.frozen},
                       %v: tensor<16x64xbf16> {coat.weight, coat.frozen},
                       %dy: !dy {coat.gradient}, %dz: !dz {coat.gradient})
    -> (tensor<16x32xbf16>, tensor<16x16xbf16>, tensor<16x64xbf16>, tensor<16x64xbf16>) {
  %wq = coat.quantize %w : tensor<32x64xbf16> -> !w
  %y = coat.linear forward %x, %wq : !x, !w -> tensor<16x32xbf16>
  %vq = coat.quantize %v : tensor<16x64xbf16> -> !v
  %z = coat.linear forward %x, %vq : !x, !v -> tensor<16x16xbf16>
  %wt = coat.transpose %wq : !w -> !wt
  %vt = coat.transpose %vq : !v -> !vt
  %dxw = coat.linear dgrad %dy, %wt : !dy, !wt -> tensor<16x64xbf16>
  %dxv = coat.linear dgrad %dz, %vt : !dz, !vt -> tensor<16x64xbf16>
  return %y, %z, %dxw, %dxv : tensor<16x32xbf16>, tensor<16x16xbf16>, tensor<16x64xbf16>, tensor<16x64xbf16>
}
