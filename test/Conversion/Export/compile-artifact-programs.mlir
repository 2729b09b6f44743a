// coat-compile-artifact on an outlined program: the launch plan, checked
// against the kernels the same run produced, beside them in one manifest;
// the module (the outlined program) comes out as it went in.
// RUN: rm -rf %t && mkdir -p %t
// RUN: coat-opt %s -coat-mixed-granularity -coat-group-scaling -coat-outline-kernels -o %t/program.mlir
// RUN: coat-opt %t/program.mlir --pass-pipeline='builtin.module(coat-compile-artifact{dir=%t gpu=false source-key=k123})' -o %t/after.mlir
// RUN: diff %t/program.mlir %t/after.mlir
// RUN: FileCheck %s --check-prefix=PLAN < %t/manifest.json
// RUN: FileCheck %s --check-prefix=KEY < %t/manifest.json

// The FP8 facts of coat/Numerics/Fp8.h, for readers that must not restate
// them; the source key as given; no GPU target without GPU kernels.
// KEY: "formats": {
// KEY-NEXT: "e4m3": {
// KEY: "has_infinity": false,
// KEY-NEXT: "mantissa_bits": 3,
// KEY-NEXT: "max_finite": 448,
// KEY: "e5m2": {
// KEY: "max_finite": 57344,
// KEY: "source_key": "k123"
// KEY-NOT: "target"

// The kernels' arguments are bound to their spec's values...
// PLAN: "name": "act_k1_silu"
// PLAN: "programs": [
// ...and the plan binds the specs' values to the program's: inputs with
// their roles, calls in order with their phase, outputs with what they are
// the gradient of, and the values the forward keeps (the 1x16 input).
// PLAN: "inputs": [
// PLAN-NEXT: {
// PLAN-NEXT: "role": "activation",
// PLAN-NEXT: "value": 0
// PLAN: "grad_of": 0,
// PLAN-NEXT: "role": "gradient",
// PLAN-NEXT: "value": 1
// PLAN: "name": "act",
// PLAN: "outputs": [
// PLAN-NEXT: {
// PLAN-NEXT: "phase": "forward",
// PLAN-NEXT: "value": 3
// PLAN: "grad_of": 0,
// PLAN-NEXT: "phase": "backward",
// PLAN-NEXT: "value": 4
// PLAN: "saved": [
// PLAN-NEXT: 2
// PLAN-NEXT: ],
// PLAN-NEXT: "steps": [
// PLAN: "operands": [
// PLAN-NEXT: 0
// PLAN-NEXT: ],
// PLAN-NEXT: "phase": "forward",
// PLAN-NEXT: "results": [
// PLAN-NEXT: 2
// PLAN-NEXT: ],
// PLAN-NEXT: "spec": "act_k0_quantize_per_group"
// PLAN: "phase": "forward",
// PLAN: "spec": "act_k1_silu"
// PLAN: "operands": [
// PLAN-NEXT: 2,
// PLAN-NEXT: 1
// PLAN-NEXT: ],
// PLAN-NEXT: "phase": "backward",
// PLAN: "spec": "act_k2_silu_grad"
// PLAN: "values": [
// PLAN-NEXT: {
// PLAN-NEXT: "dtype": "bf16",
// PLAN-NEXT: "kind": "tensor",
// PLAN-NEXT: "shape": [
// PLAN-NEXT: -1,
// PLAN-NEXT: 32
// PLAN: "kind": "qtensor",
// PLAN-NEXT: "scale_dtype": "bf16",
// PLAN-NEXT: "scale_shape": [
// PLAN-NEXT: -1,
// PLAN-NEXT: 2
// PLAN-NEXT: ],
// PLAN-NEXT: "scaling": "per_group<16>",
func.func @act(%x: tensor<?x32xbf16>,
               %dy: tensor<?x32xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (!coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>,
        tensor<?x32xbf16> {coat.grad_of = 0 : i64}) {
  %xq = coat.quantize_auto %x : tensor<?x32xbf16> -> !coat.unresolved<?x32xbf16>
  %y = coat.silu %xq : !coat.unresolved<?x32xbf16>
      -> !coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>
  %dx = coat.silu_grad %xq, %dy : !coat.unresolved<?x32xbf16>, tensor<?x32xbf16>
      -> tensor<?x32xbf16>
  return %y, %dx : !coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?x32xbf16>
}
