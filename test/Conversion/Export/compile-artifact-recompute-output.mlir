// A forward output the caller may drop (`coat.recompute`, as
// coat.programs.NormLinearConfig(recompute_output=True) marks its rotated
// q/k/v projection) through the program passes and the launch plan: the
// calls that make it again run the forward's kernels in the `recompute`
// phase (W's copy without the transposed codes: the dgrad reads the
// forward's), between the forward and the backward; their result is an
// output with `recompute_of` = 0; and the forward keeps no activation it does not
// keep without the mark (the 1x16 copy of h, the rotary tables and W's
// transposed FP8 copy, under weight-copies-min-bytes here) but the two
// per-tensor scales the recompute phase quantizes with (rank-0 values,
// instead of maxima over the norm's output and W again): the recompute
// phase reads W itself too, a weight, there anyway (coat.nn keeps how to
// make its bf16 copy, not the copy).
// RUN: rm -rf %t && mkdir -p %t/rc %t/plain
// RUN: coat-opt %s -coat-mixed-granularity -coat-group-scaling -coat-recompute-activations -coat-outline-kernels -o %t/rc/program.mlir
// RUN: FileCheck %s --check-prefix=OUTLINED < %t/rc/program.mlir
// RUN: coat-opt %t/rc/program.mlir --pass-pipeline='builtin.module(coat-compile-artifact{dir=%t/rc gpu=false})' -o /dev/null
// RUN: FileCheck %s --check-prefix=PLAN < %t/rc/manifest.json
// RUN: sed 's/ {coat.recompute}//' %s > %t/plain/input.mlir
// RUN: coat-opt %t/plain/input.mlir -coat-mixed-granularity -coat-group-scaling -coat-recompute-activations -coat-outline-kernels -o %t/plain/program.mlir
// RUN: coat-opt %t/plain/program.mlir --pass-pipeline='builtin.module(coat-compile-artifact{dir=%t/plain gpu=false})' -o /dev/null
// RUN: FileCheck %s --check-prefix=PLAIN < %t/plain/manifest.json

// OUTLINED-LABEL: func.func @attention_input(
// OUTLINED-SAME: tensor<?x256xbf16> {coat.recompute_of = 0 : i64}) attributes {coat.program}
// OUTLINED: %[[Y:.*]] = call @[[GEMM:attention_input_k[0-9]+_linear_forward]](
// OUTLINED-NEXT: %[[YR:.*]] = call @[[ROPE:attention_input_k[0-9]+_rope]](%[[Y]], %arg3, %arg4) :
// OUTLINED-NEXT: call @attention_input_k{{[0-9]+}}_rmsnorm(%{{.*}}, %arg1) {coat.recompute = "output"}
// No maxima or scale kernel runs in the recompute phase: the copies take the
// forward's scales.
// OUTLINED-NOT: absmax
// OUTLINED-NOT: scale_from_maxima
// OUTLINED: %[[Y2:.*]] = call @[[GEMM]](%{{.*}}, %{{.*}}) {coat.recompute = "output"}
// OUTLINED-NEXT: %[[YR2:.*]] = call @[[ROPE]](%[[Y2]], %arg3, %arg4) {coat.recompute = "output"}
// OUTLINED-NEXT: call @attention_input_k{{[0-9]+}}_rope_grad(%arg5,
// OUTLINED: return %[[YR]], %{{.*}}, %{{.*}}, %{{.*}}, %[[YR2]] :

// PLAN: "outputs": [
// PLAN-NEXT: {
// PLAN-NEXT: "phase": "forward",
// PLAN-NEXT: "value": 16
// PLAN: "phase": "recompute",
// PLAN-NEXT: "recompute_of": 0,
// PLAN-NEXT: "value": 22
// PLAN-NEXT: }
// PLAN-NEXT: ],
// PLAIN: "outputs": [
// PLAIN-NOT: recompute
// PLAIN: "saved": [
// PLAIN-NEXT: 3,
// PLAIN-NEXT: 4,
// PLAIN-NEXT: 14,
// PLAIN-NEXT: 7,
// PLAIN-NEXT: 1,
// PLAIN-NEXT: 11
// PLAIN-NEXT: ],
// PLAN: "saved": [
// PLAN-NEXT: 7,
// PLAN-NEXT: 1,
// PLAN-NEXT: 11,
// PLAN-NEXT: 2,
// PLAN-NEXT: 6,
// PLAN-NEXT: 3,
// PLAN-NEXT: 4,
// PLAN-NEXT: 14
// PLAN-NEXT: ],
// The copies with the saved scales (11: the norm output's, 6: W's, which the
// forward's scale kernel reduced from W itself), then the GEMM and the
// rotation again, reading the recompute phase's copies (19: the norm
// output's per-tensor copy, 20: W's) and the saved tables.
// PLAN: "spec": "attention_input_k8_rmsnorm"
// PLAN: {{^ *}}17,{{$}}
// PLAN-NEXT: 11
// PLAN-NEXT: ],
// PLAN-NEXT: "phase": "recompute",
// PLAN: {{^ *}}2,{{$}}
// PLAN-NEXT: 6
// PLAN-NEXT: ],
// PLAN-NEXT: "phase": "recompute",
// PLAN: {{^ *}}19,{{$}}
// PLAN-NEXT: 20
// PLAN-NEXT: ],
// PLAN-NEXT: "phase": "recompute",
// PLAN-NEXT: "results": [
// PLAN-NEXT: 21
// PLAN-NEXT: ],
// PLAN-NEXT: "spec": "attention_input_k6_linear_forward"
// PLAN: "operands": [
// PLAN-NEXT: 21,
// PLAN-NEXT: 3,
// PLAN-NEXT: 4
// PLAN-NEXT: ],
// PLAN-NEXT: "phase": "recompute",
// PLAN-NEXT: "results": [
// PLAN-NEXT: 22
// PLAN-NEXT: ],
// PLAN-NEXT: "spec": "attention_input_k7_rope"
// PLAN: "phase": "backward",
// PLAN-NOT: "phase": "recompute"
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
