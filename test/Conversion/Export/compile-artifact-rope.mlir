// The attention input with RoPE (coat.programs.NormLinearConfig with
// rope_head_dim = 32, rope_heads = 6: 4 q and 2 k heads rotated, 2 v heads
// not) through the program passes and coat-compile-artifact: the rotation
// is one kernel that writes q and k over the GEMM's output (the plan binds
// both to one buffer), and the backward reads the incoming gradient once,
// in rope_grad, which writes the 1x16 maxima its per-tensor E5M2 copy
// needs; no maxima kernel of its own reads it.
// RUN: rm -rf %t && mkdir -p %t
// RUN: coat-opt %s -coat-mixed-granularity -coat-group-scaling -coat-recompute-activations -coat-outline-kernels -o %t/program.mlir
// RUN: FileCheck %s < %t/program.mlir
// RUN: coat-opt %t/program.mlir --pass-pipeline='builtin.module(coat-compile-artifact{dir=%t gpu=false})' -o /dev/null
// RUN: FileCheck %s --check-prefix=PLAN < %t/manifest.json

// CHECK-LABEL: func.func @attention_input_k{{[0-9]+}}_rope(
// CHECK-SAME: %arg0: tensor<?x256xbf16> {coat.writable}, %arg1: tensor<?x32xf32>, %arg2: tensor<?x32xf32>) -> tensor<?x256xbf16>
// CHECK-LABEL: func.func @attention_input_k{{[0-9]+}}_rope_grad(
// CHECK-SAME: %arg0: tensor<?x256xbf16>, %arg1: tensor<?x32xf32>, %arg2: tensor<?x32xf32>) -> (tensor<?x256xbf16>, tensor<?x16xf32>)
// CHECK: coat.absmax %{{.*}}, per_group<16> epilogue
// CHECK-LABEL: func.func @attention_input(
// CHECK: %[[Y:.*]] = call @attention_input_k{{[0-9]+}}_linear_forward(
// CHECK-NEXT: %[[YR:.*]] = call @attention_input_k{{[0-9]+}}_rope(%[[Y]], %arg3, %arg4)
// CHECK-NOT: absmax(%arg5)
// CHECK: call @attention_input_k{{[0-9]+}}_rope_grad(%arg5, %arg3, %arg4)
// CHECK-NOT: absmax(%arg5)
// CHECK: return %[[YR]],

// PLAN: "in0",
// PLAN-NEXT: "out0"
// PLAN-NEXT: ],
// PLAN-NEXT: "dtype": "bf16",
// PLAN-NEXT: "extent": "n",
// PLAN-NEXT: "kind": "memref",
// PLAN-NEXT: "name": "x"
// PLAN: "extent": "rows*32",
// PLAN: "in_place": true,
// PLAN: "name": "attention_input_k{{[0-9]+}}_rope",
func.func @attention_input(
    %h: tensor<?x128xbf16>,
    %w_norm: tensor<128xbf16> {coat.weight},
    %w: tensor<256x128xbf16> {coat.weight},
    %cos: tensor<?x32xf32>,
    %sin: tensor<?x32xf32>,
    %dy: tensor<?x256xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (tensor<?x256xbf16>, tensor<?x128xbf16> {coat.grad_of = 0 : i64},
        tensor<128xbf16> {coat.grad_of = 1 : i64}, tensor<256x128xbf16> {coat.grad_of = 2 : i64}) {
  %h_q = coat.quantize_auto %h : tensor<?x128xbf16> -> !coat.unresolved<?x128xbf16>
  %ln, %rstd, %ln_t = coat.rmsnorm %h_q, %w_norm eps = 1.000000e-05
      : !coat.unresolved<?x128xbf16>, tensor<128xbf16> -> !coat.qtensor<?x128xf8E4M3FN, per_tensor, scale = bf16>, tensor<?xf32>, !coat.qtensor<128x?xf8E4M3FN, per_tensor, scale = bf16>
  %w_q = coat.quantize_auto %w : tensor<256x128xbf16> -> !coat.unresolved<256x128xbf16>
  %y = coat.linear forward %ln, %w_q : !coat.qtensor<?x128xf8E4M3FN, per_tensor, scale = bf16>, !coat.unresolved<256x128xbf16> -> tensor<?x256xbf16>
  %y_rot = coat.rope %y, %cos, %sin rotated_heads = 6
      : tensor<?x256xbf16>, tensor<?x32xf32>, tensor<?x32xf32> -> tensor<?x256xbf16>

  %dy_unrot = coat.rope_grad %dy, %cos, %sin rotated_heads = 6
      : tensor<?x256xbf16>, tensor<?x32xf32>, tensor<?x32xf32> -> tensor<?x256xbf16>
  %dy_q = coat.quantize_auto %dy_unrot : tensor<?x256xbf16> -> !coat.unresolved<?x256xbf16>
  %dy_t = coat.transpose %dy_q : !coat.unresolved<?x256xbf16> -> !coat.unresolved<256x?xbf16>
  %w_t = coat.transpose %w_q : !coat.unresolved<256x128xbf16> -> !coat.unresolved<128x256xbf16>
  %dln = coat.linear dgrad %dy_q, %w_t : !coat.unresolved<?x256xbf16>, !coat.unresolved<128x256xbf16> -> tensor<?x128xbf16>
  %dw = coat.linear wgrad %dy_t, %ln_t : !coat.unresolved<256x?xbf16>, !coat.qtensor<128x?xf8E4M3FN, per_tensor, scale = bf16> -> tensor<256x128xbf16>
  %dh, %dw_norm = coat.rmsnorm_grad %h_q, %w_norm, %rstd, %dln
      : !coat.unresolved<?x128xbf16>, tensor<128xbf16>, tensor<?xf32>, tensor<?x128xbf16> -> tensor<?x128xbf16>, tensor<128xbf16>
  return %y_rot, %dh, %dw_norm, %dw : tensor<?x256xbf16>, tensor<?x128xbf16>, tensor<128xbf16>, tensor<256x128xbf16>
}
