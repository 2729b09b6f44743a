// coat-export-programs: the launch plan of an outlined program, checked
// against the kernels already in the manifest.
// RUN: rm -rf %t && mkdir -p %t/empty
// RUN: coat-opt %s -coat-mixed-granularity -coat-group-scaling -coat-outline-kernels -o %t/program.mlir
// RUN: coat-opt %t/program.mlir -coat-export-programs=strip | FileCheck %s --check-prefix=STRIP
// RUN: not coat-opt %t/program.mlir -coat-export-programs=dir=%t 2>&1 | FileCheck %s --check-prefix=NOMANIFEST
// RUN: echo '{"format": "coat-manifest", "version": 1, "kernels": []}' > %t/empty/manifest.json
// RUN: not coat-opt %t/program.mlir -coat-export-programs=dir=%t/empty 2>&1 | FileCheck %s --check-prefix=NOKERNEL
// RUN: coat-opt %t/program.mlir -coat-export-programs=strip \
// RUN:   | coat-opt --pass-pipeline='builtin.module(coat-lower-pointwise{target=cpu},coat-lower-activations{target=cpu},coat-export-manifest{dir=%t})' -o /dev/null
// RUN: coat-opt %t/program.mlir -coat-export-programs=dir=%t -o /dev/null
// RUN: FileCheck %s --check-prefix=PLAN < %t/manifest.json

// STRIP-NOT: coat.program
// STRIP: func.func @act_k0_quantize_per_group
// STRIP-NOT: call @

// NOMANIFEST: coat-export-programs: cannot read '{{.*}}manifest.json': compile the program's kernel specs into it first

// NOKERNEL: error: coat-export-programs: no kernel in the manifest runs @act_k0_quantize_per_group

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
