// RUN: coat-opt %s -split-input-file -coat-mixed-granularity -coat-group-scaling -coat-recompute-activations=weight-copies-min-bytes=0 2>/dev/null | FileCheck %s
// RUN: coat-opt %s -split-input-file -coat-mixed-granularity -coat-group-scaling -coat-recompute-activations=weight-copies-min-bytes=0 -o /dev/null 2>&1 | FileCheck %s --check-prefix=REMARK

// The attention input (coat.programs.NormLinearConfig with RoPE and
// recompute_output): the caller drops the rotated q/k/v projection after
// the forward. The backward keeps the 1x16 copy of h and the rotary tables;
// the norm weight and W are weights. So the norm, the per-tensor copy of
// its output (with the forward's scale, kept: a rank-0 tensor, where its
// maxima would re-read the norm's output), W's FP8 copy, the GEMM and the
// rotation run again, marked
// `coat.recompute = "output"`, between the forward and the backward, and
// their value is a new result, the recomputed copy of result 0.
// CHECK-LABEL: func.func @attention_input
// CHECK-SAME: -> (tensor<?x256xbf16> {coat.recompute}, tensor<?x128xbf16> {coat.grad_of = 0 : i64}, tensor<128xbf16> {coat.grad_of = 1 : i64}, tensor<256x128xbf16> {coat.grad_of = 2 : i64}, tensor<?x256xbf16> {coat.recompute_of = 0 : i64})
// CHECK: %[[HQ:.*]] = coat.quantize %arg0 :
// CHECK: %[[S:.*]] = arith.truncf
// CHECK: %[[Y:.*]] = coat.linear forward
// CHECK-NOT: coat.recompute
// CHECK: %[[YR:.*]] = coat.rope %[[Y]], %arg3, %arg4 rotated_heads = 6 :
// CHECK-NEXT: %[[N:.*]], %{{.*}} = coat.rmsnorm %[[HQ]], %arg1 eps = {{.*}} {coat.recompute = "output"}
// CHECK-NEXT: %[[NQ:.*]] = coat.quantize %[[N]] scale %[[S]] {coat.recompute = "output"}
// CHECK-NEXT: %[[WQ:.*]] = coat.quantize %arg2 {coat.recompute = "output"}
// CHECK-NEXT: %[[Y2:.*]] = coat.linear forward %[[NQ]], %[[WQ]] {coat.recompute = "output"}
// CHECK-NEXT: %[[YR2:.*]] = coat.rope %[[Y2]], %arg3, %arg4 rotated_heads = 6 {coat.recompute = "output"}
// CHECK-NEXT: coat.rope_grad %arg5, %arg3, %arg4
// The backward derives its own copies (its phase runs whether or not the
// caller asked for the output again).
// CHECK: coat.quantize %arg2 {coat.recompute} :
// CHECK: coat.rmsnorm %[[HQ]], %arg1 eps = {{.*}} {coat.recompute} :
// CHECK: return %[[YR]], %{{.*}}, %{{.*}}, %{{.*}}, %[[YR2]] :
// REMARK: remark: result 0 may be dropped after the forward: result 4 recomputes it for the backward from values the backward has anyway (5 ops, 1 GEMM); frees 512 bytes a token
func.func @attention_input(
    %h: tensor<?x128xbf16>,
    %w_norm: tensor<128xbf16> {coat.weight},
    %w: tensor<256x128xbf16> {coat.weight},
    %cos: tensor<?x32xf32>,
    %sin: tensor<?x32xf32>,
    %dy: tensor<?x256xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (tensor<?x256xbf16> {coat.recompute}, tensor<?x128xbf16> {coat.grad_of = 0 : i64},
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

// -----

// A linear layer keeps its input only as the transposed FP8 copy (for the
// weight gradient); the GEMM reads the row-major copy, whose per-tensor
// scale comes from the input itself: nothing the backward has makes it, so
// the output stays the caller's to keep, and the remark says why.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: -> (tensor<?x32xbf16> {coat.recompute}, tensor<?x64xbf16> {coat.grad_of = 0 : i64}, tensor<32x64xbf16> {coat.grad_of = 1 : i64})
// CHECK-NOT: coat.recompute = "output"
// CHECK: return
// REMARK: remark: result 0 is not recomputed: it needs 'coat.quantize', which cannot run again for it
func.func @linear(%x: tensor<?x64xbf16>, %w: tensor<32x64xbf16> {coat.weight},
                  %dy: tensor<?x32xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (tensor<?x32xbf16> {coat.recompute}, tensor<?x64xbf16> {coat.grad_of = 0 : i64},
        tensor<32x64xbf16> {coat.grad_of = 1 : i64}) {
  %x_q = coat.quantize_auto %x : tensor<?x64xbf16> -> !coat.unresolved<?x64xbf16>
  %x_t = coat.transpose %x_q : !coat.unresolved<?x64xbf16> -> !coat.unresolved<64x?xbf16>
  %w_q = coat.quantize_auto %w : tensor<32x64xbf16> -> !coat.unresolved<32x64xbf16>
  %y = coat.linear forward %x_q, %w_q : !coat.unresolved<?x64xbf16>, !coat.unresolved<32x64xbf16> -> tensor<?x32xbf16>
  %dy_q = coat.quantize_auto %dy : tensor<?x32xbf16> -> !coat.unresolved<?x32xbf16>
  %dy_t = coat.transpose %dy_q : !coat.unresolved<?x32xbf16> -> !coat.unresolved<32x?xbf16>
  %w_t = coat.transpose %w_q : !coat.unresolved<32x64xbf16> -> !coat.unresolved<64x32xbf16>
  %dx = coat.linear dgrad %dy_q, %w_t : !coat.unresolved<?x32xbf16>, !coat.unresolved<64x32xbf16> -> tensor<?x64xbf16>
  %dw = coat.linear wgrad %dy_t, %x_t : !coat.unresolved<32x?xbf16>, !coat.unresolved<64x?xbf16> -> tensor<32x64xbf16>
  return %y, %dx, %dw : tensor<?x32xbf16>, tensor<?x64xbf16>, tensor<32x64xbf16>
}

// -----

!g16 = !coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>

// The backward keeps the 1x16 gate (for silu_grad), not the up: the
// product needs the up's copy, hence the caller's input.
// CHECK-LABEL: func.func @input_not_kept
// CHECK-NOT: coat.recompute = "output"
// CHECK: return
// REMARK: remark: result 0 is not recomputed: it needs argument 1, which the backward does not keep
func.func @input_not_kept(%a: tensor<?x32xbf16>, %b: tensor<?x32xbf16>,
                          %dy: tensor<?x32xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (tensor<?x32xbf16> {coat.recompute}, tensor<?x32xbf16> {coat.grad_of = 0 : i64}) {
  %aq = coat.quantize %a : tensor<?x32xbf16> -> !g16
  %bq = coat.quantize %b : tensor<?x32xbf16> -> !g16
  %m = coat.swiglu_mul %aq, %bq : !g16, !g16 -> tensor<?x32xbf16>
  %da = coat.silu_grad %aq, %dy : !g16, tensor<?x32xbf16> -> tensor<?x32xbf16>
  return %m, %da : tensor<?x32xbf16>, tensor<?x32xbf16>
}

// -----

!g16 = !coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>

// The backward reads the output itself: the program keeps it, so the
// caller would free nothing by dropping it.
// CHECK-LABEL: func.func @read_by_backward
// CHECK-NOT: coat.recompute = "output"
// CHECK: return
// REMARK: remark: result 0 is not recomputed: the program keeps it for its backward, so dropping it frees nothing
func.func @read_by_backward(%a: tensor<?x32xbf16>,
                            %dy: tensor<?x32xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (tensor<?x32xbf16> {coat.recompute}, tensor<?x32xbf16> {coat.grad_of = 0 : i64}) {
  %aq = coat.quantize %a : tensor<?x32xbf16> -> !g16
  %m = coat.swiglu_mul %aq, %aq : !g16, !g16 -> tensor<?x32xbf16>
  %da = coat.residual_add_grad %dy, %m : tensor<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32xbf16>
  return %m, %da : tensor<?x32xbf16>, tensor<?x32xbf16>
}

// -----

!g16 = !coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>

// A forward alone has no backward to recompute for.
// CHECK-LABEL: func.func @forward_only
// CHECK-SAME: -> (tensor<?x32xbf16> {coat.recompute})
// CHECK-NOT: coat.recompute = "output"
// REMARK: remark: result 0 is not recomputed: the program has no backward (no 'coat.gradient' argument)
func.func @forward_only(%a: tensor<?x32xbf16>) -> (tensor<?x32xbf16> {coat.recompute}) {
  %aq = coat.quantize %a : tensor<?x32xbf16> -> !g16
  %m = coat.swiglu_mul %aq, %aq : !g16, !g16 -> tensor<?x32xbf16>
  return %m : tensor<?x32xbf16>
}
