// RUN: coat-opt %s -coat-mixed-granularity -split-input-file -verify-diagnostics

// Values coat-mixed-granularity cannot decide; each is reported at the
// coat.quantize_auto with notes at the consumers involved.

func.func @no_consumer(%x: tensor<128x256xbf16>) {
  // expected-error @+1 {{cannot choose a granularity: the value has no FP8 consumer}}
  %u = coat.quantize_auto %x : tensor<128x256xbf16> -> !coat.unresolved<128x256xbf16>
  return
}

// -----

func.func @unknown_consumer(%x: tensor<128x256xbf16>) -> !coat.unresolved<128x256xbf16> {
  // expected-error @+1 {{cannot choose a granularity: used by 'func.return', which is not an FP8 consumer (coat.linear, coat.transpose or a precision-flow op)}}
  %u = coat.quantize_auto %x : tensor<128x256xbf16> -> !coat.unresolved<128x256xbf16>
  // expected-note @+1 {{used here}}
  return %u : !coat.unresolved<128x256xbf16>
}

// -----

func.func @transposed_copy_unused(%x: tensor<128x256xbf16>) {
  // expected-error @+1 {{cannot choose a granularity: its transposed copy has no user}}
  %u = coat.quantize_auto %x : tensor<128x256xbf16> -> !coat.unresolved<128x256xbf16>
  // expected-note @+1 {{transposed here}}
  %t = coat.transpose %u : !coat.unresolved<128x256xbf16> -> !coat.unresolved<256x128xbf16>
  return
}

// -----

func.func @transposed_copy_not_gemm(%x: tensor<128x256xbf16>) -> !coat.unresolved<256x128xbf16> {
  // expected-error @+1 {{cannot choose a granularity: its transposed copy is read by 'func.return'; only coat.linear reads transposed copies}}
  %u = coat.quantize_auto %x : tensor<128x256xbf16> -> !coat.unresolved<128x256xbf16>
  %t = coat.transpose %u : !coat.unresolved<128x256xbf16> -> !coat.unresolved<256x128xbf16>
  // expected-note @+1 {{read here}}
  return %t : !coat.unresolved<256x128xbf16>
}

// -----

// dgrad reads its lhs as a gradient (E5M2), wgrad its rhs as an activation
// (E4M3); both would accept either, so only 'direction' can decide.
func.func @conflicting_formats(%a: tensor<128x64xbf16>, %wt: !coat.qtensor<256x64xf8E4M3FN, per_tensor>,
                               %l: !coat.qtensor<32x64xf8E4M3FN, per_tensor>)
    -> (tensor<128x256xbf16>, tensor<32x128xbf16>) {
  // expected-error @+1 {{cannot choose a format: coat.linear wgrad rhs reads it as a forward tensor (f8E4M3FN) but coat.linear dgrad lhs reads it as a gradient (f8E5M2); state 'direction'}}
  %u = coat.quantize_auto %a : tensor<128x64xbf16> -> !coat.unresolved<128x64xbf16>
  // expected-note @+1 {{backward consumer}}
  %d = coat.linear dgrad %u, %wt : !coat.unresolved<128x64xbf16>, !coat.qtensor<256x64xf8E4M3FN, per_tensor> -> tensor<128x256xbf16>
  // expected-note @+1 {{forward consumer}}
  %w = coat.linear wgrad %l, %u : !coat.qtensor<32x64xf8E4M3FN, per_tensor>, !coat.unresolved<128x64xbf16> -> tensor<32x128xbf16>
  return %d, %w : tensor<128x256xbf16>, tensor<32x128xbf16>
}

// -----

// 'direction' against a consumer that accepts one format only.
func.func @direction_against_consumer(%x: tensor<128x64xbf16>) -> !coat.qtensor<128x64xf8E4M3FN, per_group<16>, scale = bf16> {
  // expected-error @+1 {{cannot choose a format: coat.silu needs f8E4M3FN but the backward format is f8E5M2}}
  %u = coat.quantize_auto %x {direction = #coat.direction<backward>} : tensor<128x64xbf16> -> !coat.unresolved<128x64xbf16>
  // expected-note @+1 {{consumer}}
  %s = coat.silu %u : !coat.unresolved<128x64xbf16> -> !coat.qtensor<128x64xf8E4M3FN, per_group<16>, scale = bf16>
  return %s : !coat.qtensor<128x64xf8E4M3FN, per_group<16>, scale = bf16>
}

// -----

// wgrad takes at most one E5M2 operand; its lhs already is one.
func.func @wgrad_second_e5m2(%a: tensor<128x64xbf16>, %l: !coat.qtensor<32x64xf8E5M2, per_tensor>) -> tensor<32x128xbf16> {
  // expected-error @+1 {{cannot choose a format: coat.linear wgrad rhs needs f8E4M3FN but the backward format is f8E5M2}}
  %u = coat.quantize_auto %a {direction = #coat.direction<backward>} : tensor<128x64xbf16> -> !coat.unresolved<128x64xbf16>
  // expected-note @+1 {{consumer}}
  %w = coat.linear wgrad %l, %u : !coat.qtensor<32x64xf8E5M2, per_tensor>, !coat.unresolved<128x64xbf16> -> tensor<32x128xbf16>
  return %w : tensor<32x128xbf16>
}

// -----

func.func @group_does_not_divide(%x: tensor<128x100xbf16>, %w: tensor<100xbf16>) -> !coat.qtensor<128x100xf8E4M3FN, per_tensor> {
  // expected-error @+1 {{cannot quantize 1x16 for coat.rmsnorm: the group size does not divide the innermost extent 100}}
  %u = coat.quantize_auto %x : tensor<128x100xbf16> -> !coat.unresolved<128x100xbf16>
  %y, %r = coat.rmsnorm %u, %w eps = 1.000000e-05 : !coat.unresolved<128x100xbf16>, tensor<100xbf16>
      -> !coat.qtensor<128x100xf8E4M3FN, per_tensor>, tensor<128xf32>
  return %y : !coat.qtensor<128x100xf8E4M3FN, per_tensor>
}

// -----

// Every undecidable value is reported, and nothing is rewritten.
func.func @all_reported(%x: tensor<16x16xbf16>, %y: tensor<16x16xbf16>) {
  // expected-error @+1 {{no FP8 consumer}}
  %u = coat.quantize_auto %x : tensor<16x16xbf16> -> !coat.unresolved<16x16xbf16>
  // expected-error @+1 {{no FP8 consumer}}
  %v = coat.quantize_auto %y : tensor<16x16xbf16> -> !coat.unresolved<16x16xbf16>
  return
}

// -----

// coat.silu returns its input type; the return pins the result to 1x32.
func.func @silu_result_pinned(%x: tensor<128x64xbf16>) -> !coat.qtensor<128x64xf8E4M3FN, per_group<32>, scale = bf16> {
  // expected-error @+1 {{cannot give coat.silu the input type '!coat.qtensor<128x64xf8E4M3FN, per_group<16>, scale = bf16>': its result type '!coat.qtensor<128x64xf8E4M3FN, per_group<32>, scale = bf16>' is fixed by 'func.return'}}
  %u = coat.quantize_auto %x : tensor<128x64xbf16> -> !coat.unresolved<128x64xbf16>
  %s = coat.silu %u : !coat.unresolved<128x64xbf16> -> !coat.qtensor<128x64xf8E4M3FN, per_group<32>, scale = bf16>
  // expected-note @+1 {{fixed here}}
  return %s : !coat.qtensor<128x64xf8E4M3FN, per_group<32>, scale = bf16>
}

// -----

func.func @rank0_group(%x: tensor<bf16>) -> !coat.qtensor<f8E4M3FN, per_tensor> {
  // expected-error @+1 {{cannot quantize a rank-0 tensor 1xG for coat.gelu}}
  %u = coat.quantize_auto %x : tensor<bf16> -> !coat.unresolved<bf16>
  %g = coat.gelu %u : !coat.unresolved<bf16> -> !coat.qtensor<f8E4M3FN, per_tensor>
  return %g : !coat.qtensor<f8E4M3FN, per_tensor>
}
