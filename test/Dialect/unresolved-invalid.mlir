// RUN: coat-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{element type must be f32, bf16 or f16 (the high-precision source), got 'f8E4M3FN'}}
func.func @fp8_source(%a: !coat.unresolved<16xf8E4M3FN>) { return }

// -----

func.func @quantize_auto_shape(%x: tensor<16x32xbf16>) {
  // expected-error @+1 {{'coat.quantize_auto' op result must be !coat.unresolved of the input shape and element type, got '!coat.unresolved<32x16xbf16>'}}
  %u = coat.quantize_auto %x : tensor<16x32xbf16> -> !coat.unresolved<32x16xbf16>
  return
}

// -----

func.func @quantize_auto_element(%x: tensor<16x32xbf16>) {
  // expected-error @+1 {{'coat.quantize_auto' op result must be !coat.unresolved of the input shape and element type, got '!coat.unresolved<16x32xf32>'}}
  %u = coat.quantize_auto %x : tensor<16x32xbf16> -> !coat.unresolved<16x32xf32>
  return
}

// -----

func.func @transpose_resolves_early(%u: !coat.unresolved<16x32xbf16>) {
  // expected-error @+1 {{'coat.transpose' op result must be '!coat.unresolved<32x16xbf16>' for an unresolved input, got '!coat.qtensor<32x16xf8E4M3FN, per_tensor>'}}
  %t = coat.transpose %u : !coat.unresolved<16x32xbf16> -> !coat.qtensor<32x16xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @transpose_shape(%u: !coat.unresolved<16x32xbf16>) {
  // expected-error @+1 {{'coat.transpose' op result must be '!coat.unresolved<32x16xbf16>' for an unresolved input, got '!coat.unresolved<16x32xbf16>'}}
  %t = coat.transpose %u : !coat.unresolved<16x32xbf16> -> !coat.unresolved<16x32xbf16>
  return
}

// -----

func.func @transpose_unresolves(%q: !coat.qtensor<16x32xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{'coat.transpose' op an unresolved result needs an unresolved input, got '!coat.qtensor<16x32xf8E4M3FN, per_tensor>'}}
  %t = coat.transpose %q : !coat.qtensor<16x32xf8E4M3FN, per_tensor> -> !coat.unresolved<32x16xbf16>
  return
}

// -----

func.func @silu_result_not_grouped(%u: !coat.unresolved<16x32xbf16>) {
  // expected-error @+1 {{'coat.silu' op result must be a 1xG (per_group<G>) tensor, got per_tensor}}
  %s = coat.silu %u : !coat.unresolved<16x32xbf16> -> !coat.qtensor<16x32xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @silu_shape(%u: !coat.unresolved<16x32xbf16>) {
  // expected-error @+1 {{'coat.silu' op result shape 16x64 does not match the input shape 16x32}}
  %s = coat.silu %u : !coat.unresolved<16x32xbf16> -> !coat.qtensor<16x64xf8E4M3FN, per_group<16>>
  return
}

// -----

func.func @gelu_result_format(%u: !coat.unresolved<16x32xbf16>) {
  // expected-error @+1 {{'coat.gelu' op result must be f8E4M3FN (the format of the input), got 'f8E5M2'}}
  %g = coat.gelu %u : !coat.unresolved<16x32xbf16> -> !coat.qtensor<16x32xf8E5M2, per_tensor>
  return
}

// -----

func.func @linear_unresolved_shape(%a: !coat.unresolved<16x32xbf16>, %b: !coat.unresolved<8x64xbf16>) {
  // expected-error @+1 {{'coat.linear' op operands disagree on the K-major reduction dimension: 16x32 vs 8x64}}
  %y = coat.linear forward %a, %b : !coat.unresolved<16x32xbf16>, !coat.unresolved<8x64xbf16> -> tensor<16x8xbf16>
  return
}

// -----

func.func @linear_unresolved_quantized_result(%a: !coat.unresolved<16x32xbf16>, %b: !coat.unresolved<8x32xbf16>) {
  // expected-error @+1 {{'coat.linear' op a quantized result must be per_group<16> f8E4M3FN of a forward GEMM, got '!coat.qtensor<16x8xf8E4M3FN, per_tensor>'}}
  %y = coat.linear forward %a, %b : !coat.unresolved<16x32xbf16>, !coat.unresolved<8x32xbf16> -> !coat.qtensor<16x8xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @epilogue_of_argument(%x: tensor<16x32xbf16>) {
  // expected-error @+1 {{'coat.absmax' op epilogue maxima need an input produced by an op, got a block argument}}
  %p = coat.absmax %x, per_group<16> epilogue : tensor<16x32xbf16> -> tensor<16x2xf32>
  return
}
