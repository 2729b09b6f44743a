// coat-compile-artifact on a linear layer with a bias (the text of
// coat.programs.LinearConfig(32, 48, bias=True)): the bias gradient of the
// incoming gradient and that gradient's maxima are one kernel and its
// reduction, called once in the backward, with `partials` bound to the
// token count and the workspace a scratch buffer.
// RUN: rm -rf %t && mkdir -p %t
// RUN: coat-opt %s -coat-mixed-granularity -coat-group-scaling -coat-outline-kernels -o %t/program.mlir 2>/dev/null
// RUN: coat-opt %t/program.mlir --pass-pipeline='builtin.module(coat-compile-artifact{dir=%t gpu=false})' -o /dev/null
// RUN: FileCheck %s < %t/manifest.json

// CHECK: "name": "dy"
// CHECK: "name": "absmax"
// CHECK: "bind": [
// CHECK-NEXT: "scratch"
// CHECK: "name": "dbias_partial"
// CHECK: "bind": "ceildiv(rows(in0),32)",
// CHECK: "name": "partials"
// CHECK: "absmax": true,
// CHECK: "rows_per_partial": 32,
// CHECK: "name": "coat_linear_i32_o48_b_k0_absmax_bias_grad",
// CHECK-NEXT: "op": "bias_grad"
// CHECK: "name": "dbias"
// CHECK: "of": "coat_linear_i32_o48_b_k0_absmax_bias_grad",
// CHECK: "name": "coat_linear_i32_o48_b_k0_absmax_bias_grad_reduce",
// CHECK-NEXT: "op": "bias_grad_reduce"
// CHECK-NOT: "op": "bias_grad"
// CHECK: "programs": [
// The bias gradient (value 5) is the output for argument 2, the bias.
// CHECK: "outputs": [
// CHECK: "grad_of": 2,
// CHECK-NEXT: "phase": "backward",
// CHECK-NEXT: "value": 5
// CHECK: "operands": [
// CHECK-NEXT: 3
// CHECK-NEXT: ],
// CHECK-NEXT: "phase": "backward",
// CHECK-NEXT: "results": [
// CHECK-NEXT: 4,
// CHECK-NEXT: 5
// CHECK-NEXT: ],
// CHECK-NEXT: "spec": "coat_linear_i32_o48_b_k0_absmax_bias_grad"
// CHECK-NOT: bias_grad"

func.func @coat_linear_i32_o48_b(
    %x: tensor<?x32xbf16>,
    %w: tensor<48x32xbf16> {coat.weight},
    %b: tensor<48xbf16> {coat.weight},
    %dy: tensor<?x48xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (tensor<?x48xbf16>, tensor<?x32xbf16> {coat.grad_of = 0 : i64},
        tensor<48x32xbf16> {coat.grad_of = 1 : i64}, tensor<48xbf16> {coat.grad_of = 2 : i64}) {
  %x_q = coat.quantize_auto %x : tensor<?x32xbf16> -> !coat.unresolved<?x32xbf16>
  %x_t = coat.transpose %x_q : !coat.unresolved<?x32xbf16> -> !coat.unresolved<32x?xbf16>
  %w_q = coat.quantize_auto %w : tensor<48x32xbf16> -> !coat.unresolved<48x32xbf16>
  %y = coat.linear forward %x_q, %w_q bias %b : !coat.unresolved<?x32xbf16>, !coat.unresolved<48x32xbf16>, tensor<48xbf16> -> tensor<?x48xbf16>

  %dy_q = coat.quantize_auto %dy : tensor<?x48xbf16> -> !coat.unresolved<?x48xbf16>
  %dy_t = coat.transpose %dy_q : !coat.unresolved<?x48xbf16> -> !coat.unresolved<48x?xbf16>
  %w_t = coat.transpose %w_q : !coat.unresolved<48x32xbf16> -> !coat.unresolved<32x48xbf16>
  %dx = coat.linear dgrad %dy_q, %w_t : !coat.unresolved<?x48xbf16>, !coat.unresolved<32x48xbf16> -> tensor<?x32xbf16>
  %dw = coat.linear wgrad %dy_t, %x_t : !coat.unresolved<48x?xbf16>, !coat.unresolved<32x?xbf16> -> tensor<48x32xbf16>
  %db = coat.bias_grad %dy : tensor<?x48xbf16> -> tensor<48xbf16>
  return %y, %dx, %dw, %db : tensor<?x48xbf16>, tensor<?x32xbf16>, tensor<48x32xbf16>, tensor<48xbf16>
}

