// A forward value recomputed for the backward (coat-recompute-activations)
// through outlining and the launch plan: the copy calls the forward's kernel
// (one spec), carries `coat.recompute`, runs in the backward phase, and the
// forward keeps gate and up but not silu(gate).
// RUN: rm -rf %t && mkdir -p %t
// RUN: coat-opt %s -coat-mixed-granularity -coat-group-scaling -coat-recompute-activations -coat-outline-kernels -o %t/program.mlir
// RUN: FileCheck %s --check-prefix=OUTLINED < %t/program.mlir
// RUN: coat-opt %t/program.mlir --pass-pipeline='builtin.module(coat-compile-artifact{dir=%t gpu=false})' -o /dev/null
// RUN: FileCheck %s --check-prefix=PLAN < %t/manifest.json

// OUTLINED-COUNT-1: func.func @glu_k{{[0-9]+}}_silu(
// OUTLINED-NOT: coat.recompute
// OUTLINED: func.func @glu(
// OUTLINED: %[[GATE:.*]] = call @glu_k0_quantize_per_group(%arg0)
// OUTLINED: %[[ACT:.*]] = call @[[SILU:glu_k[0-9]+_silu]](%[[GATE]]) :
// OUTLINED: call @glu_k{{[0-9]+}}_swiglu_mul(%[[ACT]],
// OUTLINED: %[[AGAIN:.*]] = call @[[SILU]](%[[GATE]]) {coat.recompute} :
// OUTLINED-NEXT: call @glu_k{{[0-9]+}}_swiglu_mul_grad(%[[AGAIN]],

// Values 3 and 4 are the 1x16 gate and up, 5 the forward's silu(gate), 7 its
// recomputation.
// PLAN: "saved": [
// PLAN-NEXT: 3,
// PLAN-NEXT: 4
// PLAN-NEXT: ],
// PLAN-COUNT-2: "spec": "glu_k0_quantize_per_group"
// PLAN-NEXT: },
// PLAN-NEXT: {
// PLAN-NEXT: "operands": [
// PLAN-NEXT: 3
// PLAN-NEXT: ],
// PLAN-NEXT: "phase": "forward",
// PLAN-NEXT: "results": [
// PLAN-NEXT: 5
// PLAN-NEXT: ],
// PLAN-NEXT: "spec": "[[SILU:glu_k[0-9]+_silu]]"
// PLAN: "spec": "glu_k{{[0-9]+}}_swiglu_mul"
// PLAN-NEXT: },
// PLAN-NEXT: {
// PLAN-NEXT: "operands": [
// PLAN-NEXT: 3
// PLAN-NEXT: ],
// PLAN-NEXT: "phase": "backward",
// PLAN-NEXT: "results": [
// PLAN-NEXT: 7
// PLAN-NEXT: ],
// PLAN-NEXT: "spec": "[[SILU]]"
// PLAN-NEXT: },
// PLAN-NEXT: {
// PLAN-NEXT: "operands": [
// PLAN-NEXT: 7,
// PLAN-NEXT: 4,
// PLAN-NEXT: 2
// PLAN-NEXT: ],
// PLAN-NEXT: "phase": "backward",
func.func @glu(%gate: tensor<?x32xbf16>, %up: tensor<?x32xbf16>,
               %dm: tensor<?x32xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (tensor<?x32xbf16>, tensor<?x32xbf16> {coat.grad_of = 0 : i64},
        tensor<?x32xbf16> {coat.grad_of = 1 : i64}) {
  %gq = coat.quantize_auto %gate : tensor<?x32xbf16> -> !coat.unresolved<?x32xbf16>
  %uq = coat.quantize_auto %up : tensor<?x32xbf16> -> !coat.unresolved<?x32xbf16>
  %act = coat.silu %gq : !coat.unresolved<?x32xbf16>
      -> !coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>
  %m = coat.swiglu_mul %act, %uq : !coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>, !coat.unresolved<?x32xbf16> -> tensor<?x32xbf16>
  %dact, %dup = coat.swiglu_mul_grad %act, %uq, %dm
      : !coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>, !coat.unresolved<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32xbf16>, tensor<?x32xbf16>
  %dgate = coat.silu_grad %gq, %dact : !coat.unresolved<?x32xbf16>, tensor<?x32xbf16> -> tensor<?x32xbf16>
  return %m, %dgate, %dup : tensor<?x32xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16>
}
