// One case per rule on the program attributes of function arguments and
// results (coat.weight, coat.frozen, coat.gradient, coat.grad_of,
// coat.writable, coat.kept_by_caller, coat.finite_flag, coat.recompute,
// coat.recompute_of) and of the program function attribute
// coat.keep_gemm_operands.
// RUN: coat-opt %s -split-input-file -verify-diagnostics

// One past the end: the function has two arguments.
// expected-error @+1 {{'coat.grad_of' of result 1 names argument 2, but the function has 2 arguments}}
func.func private @result_grad_of_past_end(%x: tensor<16x32xbf16>,
    %dy: tensor<16x32xbf16> {coat.gradient})
    -> (tensor<16x32xbf16>, tensor<16x32xbf16> {coat.grad_of = 2 : i64})

// -----

// expected-error @+1 {{'coat.grad_of' of result 1 names argument -1, but the function has 2 arguments}}
func.func private @result_grad_of_negative(%x: tensor<16x32xbf16>,
    %dy: tensor<16x32xbf16> {coat.gradient})
    -> (tensor<16x32xbf16>, tensor<16x32xbf16> {coat.grad_of = -1 : i64})

// -----

// The gradient of a 64x32 weight has its shape, not the transpose's.
// expected-error @+1 {{'coat.grad_of' of result 1 names argument 1 of type 'tensor<64x32xbf16>', whose shape differs from the gradient's 'tensor<32x64xbf16>'}}
func.func private @result_grad_of_shape(%x: tensor<16x32xbf16>,
    %w: tensor<64x32xbf16> {coat.weight},
    %dy: tensor<16x64xbf16> {coat.gradient})
    -> (tensor<16x64xbf16>, tensor<32x64xbf16> {coat.grad_of = 1 : i64})

// -----

// A dynamic extent is part of the shape: ? is not 16.
// expected-error @+1 {{'coat.grad_of' of result 1 names argument 0 of type 'tensor<?x32xbf16>', whose shape differs from the gradient's 'tensor<16x32xbf16>'}}
func.func private @result_grad_of_dynamic(%x: tensor<?x32xbf16>,
    %dy: tensor<?x32xbf16> {coat.gradient})
    -> (tensor<?x32xbf16>, tensor<16x32xbf16> {coat.grad_of = 0 : i64})

// -----

// A quantized argument's gradient has its logical shape.
// expected-error @+1 {{'coat.grad_of' of result 1 names argument 0 of type '!coat.qtensor<16x32xf8E4M3FN, per_group<16>>', whose shape differs from the gradient's 'tensor<16x16xbf16>'}}
func.func private @result_grad_of_qtensor_shape(
    %xq: !coat.qtensor<16x32xf8E4M3FN, per_group<16>>,
    %dy: tensor<16x32xbf16> {coat.gradient})
    -> (tensor<16x32xbf16>, tensor<16x16xbf16> {coat.grad_of = 0 : i64})

// -----

// Two gradients of the gate weight, which has the up weight's shape: the
// second one is the error.
// expected-error @+1 {{'coat.grad_of' of result 2 names argument 1, as result 1 does: arguments have at most one gradient}}
func.func private @result_grad_of_twice(%x: tensor<16x32xbf16>,
    %w_gate: tensor<64x32xbf16> {coat.weight},
    %w_up: tensor<64x32xbf16> {coat.weight},
    %dy: tensor<16x64xbf16> {coat.gradient})
    -> (tensor<16x64xbf16>, tensor<64x32xbf16> {coat.grad_of = 1 : i64},
        tensor<64x32xbf16> {coat.grad_of = 1 : i64},
        tensor<64x32xbf16> {coat.grad_of = 2 : i64})

// -----

// expected-error @+1 {{'coat.grad_of' of result 1 names argument 1, which is a gradient itself}}
func.func private @result_grad_of_gradient(%x: tensor<16x32xbf16>,
    %dy: tensor<16x32xbf16> {coat.gradient})
    -> (tensor<16x32xbf16>, tensor<16x32xbf16> {coat.grad_of = 1 : i64})

// -----

// expected-error @+1 {{'coat.grad_of' must be an integer attribute}}
func.func private @result_grad_of_not_integer(%x: tensor<16x32xbf16>,
    %dy: tensor<16x32xbf16> {coat.gradient})
    -> (tensor<16x32xbf16>, tensor<16x32xbf16> {coat.grad_of = "x"})

// -----

// expected-error @+1 {{'coat.grad_of' of argument 0 needs 'coat.gradient': an argument can only be the incoming gradient of a result}}
func.func private @argument_grad_of_not_gradient(%x: tensor<16x32xbf16> {coat.grad_of = 0 : i64})
    -> tensor<16x32xbf16>

// -----

// expected-error @+1 {{'coat.grad_of' of argument 1 names result 1, but the function has 1 result}}
func.func private @argument_grad_of_past_end(%x: tensor<16x32xbf16>,
    %dy: tensor<16x32xbf16> {coat.gradient, coat.grad_of = 1 : i64})
    -> tensor<16x32xbf16>

// -----

// expected-error @+1 {{'coat.grad_of' of argument 1 names result 1, which is a gradient itself}}
func.func private @argument_grad_of_gradient(%x: tensor<16x32xbf16>,
    %dy: tensor<16x32xbf16> {coat.gradient, coat.grad_of = 1 : i64})
    -> (tensor<16x32xbf16>, tensor<16x32xbf16> {coat.grad_of = 0 : i64})

// -----

// expected-error @+1 {{'coat.grad_of' of argument 1 names result 0 of type 'tensor<16x64xbf16>', whose shape differs from the gradient's 'tensor<16x32xbf16>'}}
func.func private @argument_grad_of_shape(%x: tensor<16x32xbf16>,
    %dy: tensor<16x32xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> tensor<16x64xbf16>

// -----

// expected-error @+1 {{'coat.grad_of' of argument 2 names result 0, as argument 1 does: results have at most one gradient}}
func.func private @argument_grad_of_twice(%x: tensor<16x32xbf16>,
    %dy: tensor<16x32xbf16> {coat.gradient, coat.grad_of = 0 : i64},
    %dy2: tensor<16x32xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> tensor<16x32xbf16>

// -----

// expected-error @+1 {{weight argument 1 has no gradient result ('coat.grad_of = 1'); mark it 'coat.frozen' if it is not trained}}
func.func private @weight_without_gradient(%x: tensor<16x32xbf16>,
    %w: tensor<64x32xbf16> {coat.weight},
    %dy: tensor<16x64xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (tensor<16x64xbf16>, tensor<16x32xbf16> {coat.grad_of = 0 : i64})

// -----

// expected-error @+1 {{frozen weight argument 1 has a gradient: result 1 ('coat.grad_of = 1')}}
func.func private @frozen_with_gradient(%x: tensor<16x32xbf16>,
    %w: tensor<64x32xbf16> {coat.weight, coat.frozen},
    %dy: tensor<16x64xbf16> {coat.gradient})
    -> (tensor<16x64xbf16>, tensor<64x32xbf16> {coat.grad_of = 1 : i64})

// -----

// expected-error @+1 {{'coat.frozen' on argument 0, which is not a weight ('coat.weight')}}
func.func private @frozen_not_weight(%x: tensor<16x32xbf16> {coat.frozen}) -> tensor<16x32xbf16>

// -----

// expected-error @+1 {{argument 0 is both a weight ('coat.weight') and an incoming gradient ('coat.gradient')}}
func.func private @weight_and_gradient(%w: tensor<16x32xbf16> {coat.weight, coat.gradient})
    -> tensor<16x32xbf16>

// -----

// expected-error @+1 {{'coat.weight' must be a unit attribute}}
func.func private @weight_not_unit(%w: tensor<16x32xbf16> {coat.weight = 1 : i64})
    -> tensor<16x32xbf16>

// -----

// expected-error @+1 {{'coat.gradient' is an attribute of function arguments, not results}}
func.func private @gradient_on_result(%x: tensor<16x32xbf16>)
    -> (tensor<16x32xbf16> {coat.gradient})

// -----

// A weight is the caller's: the optimizer reads it after the step.
// expected-error @+1 {{argument 0 is 'coat.writable', but a weight or incoming gradient is the caller's to keep}}
func.func private @writable_weight(%w: tensor<16x64xbf16> {coat.weight, coat.writable})
    -> tensor<16x64xbf16>

// -----

// expected-error @+1 {{'coat.writable' must be a unit attribute}}
func.func private @writable_not_unit(%x: tensor<16x64xbf16> {coat.writable = true})
    -> tensor<16x64xbf16>

// -----

// expected-error @+1 {{'coat.writable' argument 0 must be a ranked tensor}}
func.func private @writable_scalar(%x: f32 {coat.writable}) -> f32

// -----

// Two readers: the first must not find the second's operand overwritten.
// expected-error @+1 {{'coat.writable' argument 0 must have exactly one use, the op that may overwrite it}}
func.func @writable_two_uses(%x: tensor<16x64xbf16> {coat.writable},
                             %t: tensor<16x64xf32>) -> (tensor<16x64xbf16>, tensor<16x64xbf16>) {
  %a = coat.rope %x, %t, %t rotated_heads = 1 : tensor<16x64xbf16>, tensor<16x64xf32>, tensor<16x64xf32> -> tensor<16x64xbf16>
  %b = coat.rope_grad %x, %t, %t rotated_heads = 1 : tensor<16x64xbf16>, tensor<16x64xf32>, tensor<16x64xf32> -> tensor<16x64xbf16>
  return %a, %b : tensor<16x64xbf16>, tensor<16x64xbf16>
}

// -----

// expected-error @+1 {{'coat.writable' is an attribute of function arguments, not results}}
func.func private @writable_on_result(%x: tensor<16x32xbf16>)
    -> (tensor<16x32xbf16> {coat.writable})

// -----

// FP8 codes are not checked (saturating conversions write no infinity).
// expected-error @+1 {{'coat.finite_flag' result 0 must be an f32, bf16 or f16 tensor, got '!coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>'}}
func.func private @finite_flag_qtensor(%x: tensor<16x32xbf16>)
    -> (!coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16> {coat.finite_flag})

// -----

// expected-error @+1 {{'coat.finite_flag' must be a unit attribute}}
func.func private @finite_flag_not_unit(%x: tensor<16x32xbf16>)
    -> (tensor<16x32xbf16> {coat.finite_flag = 1 : i64})

// -----

// expected-error @+1 {{'coat.finite_flag' is an attribute of function results}}
func.func private @finite_flag_on_argument(%x: tensor<16x32xbf16> {coat.finite_flag})
    -> tensor<16x32xbf16>

// -----

// Only forward outputs are given up and asked for again.
// expected-error @+1 {{'coat.recompute' result 1 is a gradient ('coat.grad_of'): only forward outputs are recomputed}}
func.func private @recompute_gradient(%x: tensor<16x32xbf16>,
    %dy: tensor<16x32xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> (tensor<16x32xbf16>, tensor<16x32xbf16> {coat.grad_of = 0 : i64, coat.recompute})

// -----

// A qtensor result stays inside the program: the caller holds no such value.
// expected-error @+1 {{'coat.recompute' result 0 must be a ranked tensor the caller holds, got '!coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>'}}
func.func private @recompute_qtensor(%x: tensor<16x32xbf16>)
    -> (!coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16> {coat.recompute})

// -----

// expected-error @+1 {{'coat.recompute' must be a unit attribute}}
func.func private @recompute_not_unit(%x: tensor<16x32xbf16>)
    -> (tensor<16x32xbf16> {coat.recompute = 1 : i64})

// -----

// expected-error @+1 {{'coat.recompute' is an attribute of function results}}
func.func private @recompute_on_argument(%x: tensor<16x32xbf16> {coat.recompute})
    -> tensor<16x32xbf16>

// -----

// expected-error @+1 {{'coat.recompute_of' result 1 names result 0, which is not marked 'coat.recompute'}}
func.func private @recompute_of_unmarked(%x: tensor<16x32xbf16>)
    -> (tensor<16x32xbf16>, tensor<16x32xbf16> {coat.recompute_of = 0 : i64})

// -----

// expected-error @+1 {{'coat.recompute_of' result 1 names result 2, which is not another of the function's 2 results}}
func.func private @recompute_of_past_end(%x: tensor<16x32xbf16>)
    -> (tensor<16x32xbf16> {coat.recompute}, tensor<16x32xbf16> {coat.recompute_of = 2 : i64})

// -----

// expected-error @+1 {{'coat.recompute_of' result 1 has type 'tensor<16x16xbf16>', result 0 has type 'tensor<16x32xbf16>'}}
func.func private @recompute_of_type(%x: tensor<16x32xbf16>)
    -> (tensor<16x32xbf16> {coat.recompute}, tensor<16x16xbf16> {coat.recompute_of = 0 : i64})

// -----

// expected-error @+1 {{'coat.recompute_of' result 2 names result 0, as result 1 does: a result has at most one recomputed copy}}
func.func private @recompute_of_twice(%x: tensor<16x32xbf16>)
    -> (tensor<16x32xbf16> {coat.recompute}, tensor<16x32xbf16> {coat.recompute_of = 0 : i64},
        tensor<16x32xbf16> {coat.recompute_of = 0 : i64})

// -----

// expected-error @+1 {{'coat.recompute_of' must be an integer attribute}}
func.func private @recompute_of_not_integer(%x: tensor<16x32xbf16>)
    -> (tensor<16x32xbf16> {coat.recompute}, tensor<16x32xbf16> {coat.recompute_of})

// -----

// expected-error @+1 {{'coat.recompute_of' is an attribute of function results}}
func.func private @recompute_of_on_argument(%x: tensor<16x32xbf16> {coat.recompute_of = 0 : i64})
    -> tensor<16x32xbf16>

// -----

// A choice, not a flag: `= true` or `= false`.
// expected-error @+1 {{'coat.keep_gemm_operands' must be a boolean attribute (true or false), got unit}}
func.func private @keep_gemm_operands_unit(%x: tensor<16x32xbf16>,
    %dy: tensor<16x32xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> tensor<16x32xbf16> attributes {coat.keep_gemm_operands}

// -----

// expected-error @+1 {{'coat.keep_gemm_operands' must be a boolean attribute (true or false), got 1 : i64}}
func.func private @keep_gemm_operands_integer(%x: tensor<16x32xbf16>,
    %dy: tensor<16x32xbf16> {coat.gradient, coat.grad_of = 0 : i64})
    -> tensor<16x32xbf16> attributes {coat.keep_gemm_operands = 1 : i64}

// -----

// A forward alone keeps nothing for a backward.
// expected-error @+1 {{'coat.keep_gemm_operands' on a function without a backward (no 'coat.gradient' argument): it keeps nothing}}
func.func private @keep_gemm_operands_forward_only(%x: tensor<16x32xbf16>)
    -> tensor<16x32xbf16> attributes {coat.keep_gemm_operands = true}

// -----

// On the program's function, not on one of its ops.
func.func @keep_gemm_operands_on_op(%x: tensor<16x32xbf16>) -> tensor<16x32xbf16> {
  // expected-error @+1 {{'coat.keep_gemm_operands' is an attribute of program functions, not of 'coat.silu'}}
  %y = coat.silu %x {coat.keep_gemm_operands = true} : tensor<16x32xbf16> -> tensor<16x32xbf16>
  return %y : tensor<16x32xbf16>
}

// -----

// expected-error @+1 {{argument 0 is 'coat.kept_by_caller', which marks an activation, not a weight or an incoming gradient}}
func.func private @kept_weight(%w: tensor<16x64xbf16> {coat.weight, coat.kept_by_caller})

// -----

// expected-error @+1 {{'coat.kept_by_caller' must be a unit attribute}}
func.func private @kept_not_unit(%x: tensor<16x64xbf16> {coat.kept_by_caller = 1 : i64})

// -----

// expected-error @+1 {{'coat.kept_by_caller' argument 0 must be a ranked tensor}}
func.func private @kept_scalar(%x: f32 {coat.kept_by_caller}) -> f32

// -----

// expected-error @+1 {{'coat.kept_by_caller' is an attribute of function arguments, not results}}
func.func private @kept_result() -> (tensor<16x64xbf16> {coat.kept_by_caller})
