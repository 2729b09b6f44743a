// Valid programs with weights, incoming gradients, gradient results and a
// frozen weight, printed and re-parsed (custom and generic form).
// RUN: coat-opt %s -split-input-file | coat-opt | FileCheck %s
// RUN: coat-opt %s -split-input-file --mlir-print-op-generic | coat-opt | FileCheck %s --check-prefix=GENERIC

// A LayerNorm whose bias is frozen: the weight has a gradient, the bias none.
// CHECK-LABEL: func.func @layernorm_frozen_bias
// CHECK-SAME: %{{[^:]*}}: tensor<64xbf16> {coat.weight}
// CHECK-SAME: %{{[^:]*}}: tensor<64xbf16> {coat.frozen, coat.weight}
// CHECK-SAME: %{{[^:]*}}: tensor<?x64xbf16> {coat.grad_of = 0 : i64, coat.gradient})
// CHECK-SAME: -> (tensor<?x64xbf16>, tensor<?x64xbf16> {coat.grad_of = 0 : i64}, tensor<64xbf16> {coat.grad_of = 1 : i64})
// GENERIC-LABEL: func.func @layernorm_frozen_bias
// GENERIC-SAME: {coat.frozen, coat.weight}
func.func @layernorm_frozen_bias(%x: tensor<?x64xbf16>,
    %w: tensor<64xbf16> {coat.weight},
    %b: tensor<64xbf16> {coat.weight, coat.frozen},
    %dy: tensor<?x64xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (tensor<?x64xbf16>, tensor<?x64xbf16> {coat.grad_of = 0 : i64},
        tensor<64xbf16> {coat.grad_of = 1 : i64}) {
  %xq = coat.quantize_auto %x : tensor<?x64xbf16> -> !coat.unresolved<?x64xbf16>
  %y, %mean, %rstd = coat.layernorm %xq weight %w bias %b eps = 1.0e-5
      : !coat.unresolved<?x64xbf16>, tensor<64xbf16>, tensor<64xbf16>
      -> tensor<?x64xbf16>, tensor<?xf32>, tensor<?xf32>
  %dx, %dw = coat.layernorm_grad %xq, %mean, %rstd, %dy weight %w
      : !coat.unresolved<?x64xbf16>, tensor<?xf32>, tensor<?xf32>, tensor<?x64xbf16>,
        tensor<64xbf16> -> tensor<?x64xbf16>, tensor<64xbf16>
  return %y, %dx, %dw : tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<64xbf16>
}

// -----

// Two weights of one shape: each result names its weight, in any order.
// CHECK-LABEL: func.func private @gate_up
// CHECK-SAME: -> (tensor<16x64xbf16>, tensor<16x64xbf16>, tensor<64x32xbf16> {coat.grad_of = 2 : i64}, tensor<64x32xbf16> {coat.grad_of = 1 : i64})
func.func private @gate_up(%x: tensor<16x32xbf16>,
    %w_gate: tensor<64x32xbf16> {coat.weight},
    %w_up: tensor<64x32xbf16> {coat.weight},
    %dgate: tensor<16x64xbf16> {coat.gradient},
    %dup: tensor<16x64xbf16> {coat.gradient})
    -> (tensor<16x64xbf16>, tensor<16x64xbf16>,
        tensor<64x32xbf16> {coat.grad_of = 2 : i64},
        tensor<64x32xbf16> {coat.grad_of = 1 : i64})

// -----

// A quantized input and a quantized output: gradients have their logical
// shapes, in bf16.
// CHECK-LABEL: func.func private @quantized
// CHECK-SAME: tensor<16x32xbf16> {coat.grad_of = 0 : i64, coat.gradient})
// CHECK-SAME: tensor<16x32xbf16> {coat.grad_of = 0 : i64})
func.func private @quantized(%xq: !coat.qtensor<16x32xf8E4M3FN, per_group<16>>,
    %dy: tensor<16x32xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (!coat.qtensor<16x32xf8E4M3FN, per_tensor>,
        tensor<16x32xbf16> {coat.grad_of = 0 : i64})

// -----

// A forward alone (no incoming gradient) names no gradients.
// CHECK-LABEL: func.func private @forward_only
// CHECK-SAME: tensor<64x32xbf16> {coat.weight}) -> tensor<16x64xbf16>
func.func private @forward_only(%x: tensor<16x32xbf16>,
    %w: tensor<64x32xbf16> {coat.weight}) -> tensor<16x64xbf16>

// -----

// A kernel spec whose caller gives up the operand's buffer.
// CHECK-LABEL: func.func @writable
// CHECK-SAME: tensor<?x128xbf16> {coat.writable}
func.func @writable(%x: tensor<?x128xbf16> {coat.writable}, %c: tensor<?x64xf32>,
                    %s: tensor<?x64xf32>) -> tensor<?x128xbf16> {
  %y = coat.rope %x, %c, %s rotated_heads = 1 : tensor<?x128xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x128xbf16>
  return %y : tensor<?x128xbf16>
}

// -----

// A kernel spec whose result the program returns: its kernel flags NaN and
// infinities.
// CHECK-LABEL: func.func private @finite_flag
// CHECK-SAME: -> (tensor<?x128xbf16> {coat.finite_flag}, tensor<?x4xf32>)
func.func private @finite_flag(%x: tensor<?x128xbf16>)
    -> (tensor<?x128xbf16> {coat.finite_flag}, tensor<?x4xf32>)

// -----

// A forward output the caller may drop and ask for again, and its
// recomputed copy (coat-recompute-activations appends it).
// CHECK-LABEL: func.func private @recompute
// CHECK-SAME: -> (tensor<?x64xbf16> {coat.recompute}, tensor<?x32xbf16> {coat.grad_of = 0 : i64}, tensor<?x64xbf16> {coat.recompute_of = 0 : i64})
func.func private @recompute(%x: tensor<?x32xbf16>,
    %dy: tensor<?x64xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (tensor<?x64xbf16> {coat.recompute}, tensor<?x32xbf16> {coat.grad_of = 0 : i64},
        tensor<?x64xbf16> {coat.recompute_of = 0 : i64})

// -----

// A program that keeps its backward GEMMs' operands from the forward.
// CHECK-LABEL: func.func private @keep_gemm_operands
// CHECK-SAME: attributes {coat.keep_gemm_operands = true}
// GENERIC-LABEL: func.func private @keep_gemm_operands
// GENERIC-SAME: coat.keep_gemm_operands = true
func.func private @keep_gemm_operands(%x: tensor<16x32xbf16>,
    %dy: tensor<16x32xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (tensor<16x32xbf16>, tensor<16x32xbf16> {coat.grad_of = 0 : i64})
    attributes {coat.keep_gemm_operands = true}
