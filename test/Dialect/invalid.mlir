// One case per coat op verifier rule.
// RUN: coat-opt %s -split-input-file -verify-diagnostics

func.func @quantize_shape(%x: tensor<4x32xf32>) {
  // expected-error @+1 {{input shape 'tensor<4x32xf32>' does not match result shape}}
  %0 = coat.quantize %x : tensor<4x32xf32> -> !coat.qtensor<4x16xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @quantize_scale_granularity(%x: tensor<4x32xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{a given scale needs a per_tensor result, got per_group<16>}}
  %0 = coat.quantize %x scale %s : tensor<4x32xf32>, tensor<f32> -> !coat.qtensor<4x32xf8E4M3FN, per_group<16>>
  return
}

// -----

func.func @quantize_scale_rank(%x: tensor<4x32xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{a given scale must be a rank-0 tensor}}
  %0 = coat.quantize %x scale %s : tensor<4x32xf32>, tensor<1xf32> -> !coat.qtensor<4x32xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @quantize_expand_min(%x: tensor<256xf32>) {
  // expected-error @+1 {{expand_min must be positive, got 0}}
  %0 = coat.quantize %x {expand_min = 0 : i64} : tensor<256xf32> -> !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand>
  return
}

// -----

func.func @quantize_eps(%x: tensor<256xf32>) {
  // expected-error @+1 {{eps must be non-negative}}
  %0 = coat.quantize %x {eps = -1.0 : f32} : tensor<256xf32> -> !coat.qtensor<256xf8E4M3FN, flat_group<128>>
  return
}

// -----

func.func @quantize_input_type(%x: tensor<256xi8>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  %0 = coat.quantize %x : tensor<256xi8> -> !coat.qtensor<256xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @dequantize_shape(%q: !coat.qtensor<4x32xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{does not match result shape 'tensor<4x16xf32>'}}
  %0 = coat.dequantize %q : !coat.qtensor<4x32xf8E4M3FN, per_tensor> -> tensor<4x16xf32>
  return
}

// -----

func.func @assemble_data(%d: tensor<256xf8E5M2>, %s: tensor<2xf32>) {
  // expected-error @+1 {{data type 'tensor<256xf8E5M2>' does not match the derived 'tensor<256xf8E4M3FN>'}}
  %0 = coat.assemble %d, %s : tensor<256xf8E5M2>, tensor<2xf32> -> !coat.qtensor<256xf8E4M3FN, flat_group<128>>
  return
}

// -----

func.func @assemble_scale(%d: tensor<300xf8E4M3FN>, %s: tensor<2xf32>) {
  // expected-error @+1 {{scale type 'tensor<2xf32>' does not match the derived 'tensor<3xf32>'}}
  %0 = coat.assemble %d, %s : tensor<300xf8E4M3FN>, tensor<2xf32> -> !coat.qtensor<300xf8E4M3FN, flat_group<128>>
  return
}

// -----

func.func @assemble_needs_kc(%d: tensor<256xf8E4M3FN>, %s: tensor<2xf32>) {
  // expected-error @+1 {{an expanded result needs k and c operands}}
  %0 = coat.assemble %d, %s : tensor<256xf8E4M3FN>, tensor<2xf32> -> !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand>
  return
}

// -----

func.func @assemble_kc_unexpanded(%d: tensor<256xf8E4M3FN>, %s: tensor<2xf32>) {
  // expected-error @+1 {{k and c operands need an expanded result}}
  %0 = coat.assemble %d, %s, %s, %s : tensor<256xf8E4M3FN>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32> -> !coat.qtensor<256xf8E4M3FN, flat_group<128>>
  return
}

// -----

func.func @assemble_kc_type(%d: tensor<256xf8E4M3FN>, %s: tensor<2xf32>, %k: tensor<3xf32>) {
  // expected-error @+1 {{k and c must have type 'tensor<2xf32>'}}
  %0 = coat.assemble %d, %s, %k, %s : tensor<256xf8E4M3FN>, tensor<2xf32>, tensor<3xf32>, tensor<2xf32> -> !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand>
  return
}

// -----

func.func @assemble_k_without_c(%d: tensor<256xf8E4M3FN>, %s: tensor<2xf32>) {
  // expected-error @+1 {{k and c must be given together}}
  %0 = "coat.assemble"(%d, %s, %s) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> : (tensor<256xf8E4M3FN>, tensor<2xf32>, tensor<2xf32>) -> !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand>
  return
}

// -----

func.func @disassemble_types(%q: !coat.qtensor<256xf8E4M3FN, flat_group<128>>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{'coat.disassemble' op inferred type(s) 'tensor<256xf8E4M3FN>', 'tensor<2xf32>' are incompatible with return type(s) of operation 'tensor<256xf8E4M3FN>', 'tensor<3xf32>'}}
  %0:2 = "coat.disassemble"(%q) : (!coat.qtensor<256xf8E4M3FN, flat_group<128>>) -> (tensor<256xf8E4M3FN>, tensor<3xf32>)
  return
}

// -----

func.func @disassemble_no_operand() {
  // expected-error @+1 {{'coat.disassemble' op requires a single operand}}
  %0:2 = "coat.disassemble"() : () -> (tensor<256xf8E4M3FN>, tensor<2xf32>)
  return
}

// -----

func.func @adamw_update_shape(%p: tensor<256xf32>, %g: tensor<128xf32>, %m: tensor<256xf32>, %s: f32) {
  // expected-error @+1 {{param, grad and moments must have the same shape}}
  %0:3 = coat.adamw_update %p, %g, %m, %m, %s, %s, %s, %s, %s, %s : tensor<256xf32>, tensor<128xf32>, tensor<256xf32>
  return
}

// -----

func.func @adamw_step_grad(%p: tensor<256xf32>, %g: tensor<128xf32>, %m: !coat.qtensor<256xf8E4M3FN, flat_group<128>>, %s: f32) {
  // expected-error @+1 {{grad shape does not match the parameter}}
  %0:3 = coat.adamw_step %p, %g, %m, %m, %s, %s, %s, %s, %s, %s : tensor<256xf32>, tensor<128xf32>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>
  return
}

// -----

func.func @adamw_step_scaling(%p: tensor<4x32xf32>, %m: !coat.qtensor<4x32xf8E4M3FN, per_group<32>>, %s: f32) {
  // expected-error @+1 {{m must use flat_group<G> scaling, got per_group<32>}}
  %0:3 = coat.adamw_step %p, %p, %m, %m, %s, %s, %s, %s, %s, %s : tensor<4x32xf32>, tensor<4x32xf32>, !coat.qtensor<4x32xf8E4M3FN, per_group<32>>, !coat.qtensor<4x32xf8E4M3FN, per_group<32>>
  return
}

// -----

func.func @adamw_step_stochastic_no_seed(%p: tensor<256xbf16>, %m: !coat.qtensor<256xf8E4M3FN, flat_group<128>>, %s: f32) {
  // expected-error @+1 {{stochastic rounding needs a seed operand}}
  %0:3 = coat.adamw_step %p, %p, %m, %m, %s, %s, %s, %s, %s, %s {stochastic_param} : tensor<256xbf16>, tensor<256xbf16>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>
  return
}

// -----

func.func @adamw_step_seed_unused(%p: tensor<256xbf16>, %m: !coat.qtensor<256xf8E4M3FN, flat_group<128>>, %s: f32, %seed: i64) {
  // expected-error @+1 {{a seed operand needs stochastic_param or stochastic_moments}}
  %0:3 = coat.adamw_step %p, %p, %m, %m, %s, %s, %s, %s, %s, %s seed %seed : tensor<256xbf16>, tensor<256xbf16>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>
  return
}

// -----

func.func @adamw_step_stochastic_reference(%p: tensor<256xf32>, %m: !coat.qtensor<256xf8E4M3FN, flat_group<128>>, %s: f32, %seed: i64) {
  // expected-error @+1 {{stochastic rounding needs mode = fixed}}
  %0:3 = coat.adamw_step %p, %p, %m, %m, %s, %s, %s, %s, %s, %s seed %seed {stochastic_moments, mode = #coat.optimizer_mode<reference>} : tensor<256xf32>, tensor<256xf32>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>
  return
}

// -----

func.func @adamw_step_stochastic_f32(%p: tensor<256xf32>, %m: !coat.qtensor<256xf8E4M3FN, flat_group<128>>, %s: f32, %seed: i64) {
  // expected-error @+1 {{stochastic_param needs bf16 parameters (f32 parameters are not rounded)}}
  %0:3 = coat.adamw_step %p, %p, %m, %m, %s, %s, %s, %s, %s, %s seed %seed {stochastic_param} : tensor<256xf32>, tensor<256xf32>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>
  return
}

// -----

func.func @adamw_step_master_f32(%p: tensor<256xf32>, %m: !coat.qtensor<256xf8E4M3FN, flat_group<128>>, %s: f32) {
  // expected-error @+1 {{a master copy needs bf16 parameters (f32 parameters are their own master)}}
  %0:4 = coat.adamw_step %p, %p, %m, %m, %s, %s, %s, %s, %s, %s master %p : tensor<256xf32>, tensor<256xf32>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<128>> master tensor<256xf32> -> tensor<256xf32>
  return
}

// -----

func.func @adamw_step_master_stochastic(%p: tensor<256xbf16>, %w: tensor<256xf32>, %m: !coat.qtensor<256xf8E4M3FN, flat_group<128>>, %s: f32, %seed: i64) {
  // expected-error @+1 {{stochastic_param does not go with a master copy (the bf16 parameter is the master rounded to nearest)}}
  %0:4 = coat.adamw_step %p, %p, %m, %m, %s, %s, %s, %s, %s, %s seed %seed master %w {stochastic_param} : tensor<256xbf16>, tensor<256xbf16>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<128>> master tensor<256xf32> -> tensor<256xf32>
  return
}

// -----

func.func @adamw_step_master_shape(%p: tensor<256xbf16>, %w: tensor<128xf32>, %m: !coat.qtensor<256xf8E4M3FN, flat_group<128>>, %s: f32) {
  // expected-error @+1 {{master shape does not match the parameter}}
  %0:4 = coat.adamw_step %p, %p, %m, %m, %s, %s, %s, %s, %s, %s master %w : tensor<256xbf16>, tensor<256xbf16>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<128>> master tensor<128xf32> -> tensor<128xf32>
  return
}

// -----

func.func @adamw_step_new_master_type(%p: tensor<256xbf16>, %w: tensor<256xf32>, %m: !coat.qtensor<256xf8E4M3FN, flat_group<128>>, %s: f32) {
  // expected-error @+1 {{new_master must have the master's type}}
  %0:4 = coat.adamw_step %p, %p, %m, %m, %s, %s, %s, %s, %s, %s master %w : tensor<256xbf16>, tensor<256xbf16>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<128>> master tensor<256xf32> -> tensor<?xf32>
  return
}

// -----

func.func @adamw_step_group(%p: tensor<256xf32>, %m: !coat.qtensor<256xf8E4M3FN, flat_group<100>>, %s: f32) {
  // expected-error @+1 {{m group size must be a power of two in [32, 1024], got 100}}
  %0:3 = coat.adamw_step %p, %p, %m, %m, %s, %s, %s, %s, %s, %s : tensor<256xf32>, tensor<256xf32>, !coat.qtensor<256xf8E4M3FN, flat_group<100>>, !coat.qtensor<256xf8E4M3FN, flat_group<100>>
  return
}

// -----

func.func @adamw_step_bf16_scales(%p: tensor<256xf32>, %m: !coat.qtensor<256xf8E4M3FN, flat_group<128>>, %v: !coat.qtensor<256xf8E4M3FN, flat_group<128>, scale = bf16>, %s: f32) {
  // expected-error @+1 {{v scales must be f32}}
  %0:3 = coat.adamw_step %p, %p, %m, %v, %s, %s, %s, %s, %s, %s : tensor<256xf32>, tensor<256xf32>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<128>, scale = bf16>
  return
}

// -----

func.func @adamw_step_groups_differ(%p: tensor<256xf32>, %m: !coat.qtensor<256xf8E4M3FN, flat_group<128>>, %v: !coat.qtensor<256xf8E4M3FN, flat_group<64>>, %s: f32) {
  // expected-error @+1 {{m and v must use the same group size}}
  %0:3 = coat.adamw_step %p, %p, %m, %v, %s, %s, %s, %s, %s, %s : tensor<256xf32>, tensor<256xf32>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<64>>
  return
}

// -----

func.func @adamw_step_max_k(%p: tensor<256xf32>, %m: !coat.qtensor<256xf8E4M3FN, flat_group<128>>, %s: f32) {
  // expected-error @+1 {{max_k must be at least 1}}
  %0:3 = coat.adamw_step %p, %p, %m, %m, %s, %s, %s, %s, %s, %s {max_k = 0.5 : f32} : tensor<256xf32>, tensor<256xf32>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>
  return
}

// -----

func.func @adamw_step_expand_min(%p: tensor<256xf32>, %m: !coat.qtensor<256xf8E4M3FN, flat_group<128>>, %s: f32) {
  // expected-error @+1 {{expand_min must be positive, got -1}}
  %0:3 = coat.adamw_step %p, %p, %m, %m, %s, %s, %s, %s, %s, %s {expand_min = -1 : i64} : tensor<256xf32>, tensor<256xf32>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>
  return
}

// -----

func.func @adamw_step_grad_scale_rank(%p: tensor<256xf32>, %m: !coat.qtensor<256xf8E4M3FN, flat_group<128>>, %s: f32, %gs: tensor<1xf32>) {
  // expected-error @+1 {{grad_scale must be a rank-0 tensor, got 'tensor<1xf32>'}}
  %0:3 = coat.adamw_step %p, %p, %m, %m, %s, %s, %s, %s, %s, %s grad_scale %gs : tensor<256xf32>, tensor<256xf32>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, tensor<1xf32>
  return
}

// -----

func.func @adamw_step_grad_scale_type(%p: tensor<256xbf16>, %m: !coat.qtensor<256xf8E4M3FN, flat_group<128>>, %s: f32, %gs: tensor<bf16>) {
  // expected-error @+1 {{must be ranked tensor of 32-bit float values, but got 'tensor<bf16>'}}
  %0:3 = coat.adamw_step %p, %p, %m, %m, %s, %s, %s, %s, %s, %s grad_scale %gs : tensor<256xbf16>, tensor<256xbf16>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, tensor<bf16>
  return
}

// -----

func.func @adamw_update_grad_scale(%p: tensor<256xf32>, %s: f32, %gs: tensor<256xf32>) {
  // expected-error @+1 {{grad_scale must be a rank-0 tensor, got 'tensor<256xf32>'}}
  %0:3 = coat.adamw_update %p, %p, %p, %p, %s, %s, %s, %s, %s, %s grad_scale %gs : tensor<256xf32>, tensor<256xf32>, tensor<256xf32>, tensor<256xf32>
  return
}

// -----

func.func @requantize_shape(%q: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>) {
  // expected-error @+1 {{input shape 4x32 does not match result shape 32x4}}
  %0 = coat.requantize %q : !coat.qtensor<4x32xf8E4M3FN, per_group<16>> -> !coat.qtensor<32x4xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @requantize_expand_min(%q: !coat.qtensor<256xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{expand_min must be positive, got 0}}
  %0 = coat.requantize %q {expand_min = 0 : i64} : !coat.qtensor<256xf8E4M3FN, per_tensor> -> !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand>
  return
}

// -----

func.func @requantize_eps(%q: !coat.qtensor<256xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{eps must be non-negative}}
  %0 = coat.requantize %q {eps = -1.0e-10 : f32} : !coat.qtensor<256xf8E4M3FN, per_tensor> -> !coat.qtensor<256xf8E5M2, per_tensor>
  return
}

// -----

func.func @transpose_rank(%q: !coat.qtensor<2x4x32xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{expects a 2-D input, got rank 3}}
  %0 = coat.transpose %q : !coat.qtensor<2x4x32xf8E4M3FN, per_tensor> -> !coat.qtensor<32x8xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @transpose_per_group(%q: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>) {
  // expected-error @+1 {{cannot transpose a per_group<16> tensor without re-quantization; use coat.requantize to per_tensor or per_block scaling first}}
  %0 = coat.transpose %q : !coat.qtensor<4x32xf8E4M3FN, per_group<16>> -> !coat.qtensor<32x4xf8E4M3FN, per_group<4>>
  return
}

// -----

func.func @transpose_flat_group(%q: !coat.qtensor<4x32xf8E4M3FN, flat_group<128>>) {
  // expected-error @+1 {{cannot transpose a flat_group<128> tensor without re-quantization}}
  %0 = coat.transpose %q : !coat.qtensor<4x32xf8E4M3FN, flat_group<128>> -> !coat.qtensor<32x4xf8E4M3FN, flat_group<128>>
  return
}

// -----

func.func @transpose_block_grid(%q: !coat.qtensor<256x128xf8E4M3FN, per_block<128x64>>) {
  // expected-error @+1 {{result must be '!coat.qtensor<128x256xf8E4M3FN, per_block<64x128>>', got '!coat.qtensor<128x256xf8E4M3FN, per_block<128x64>>'}}
  %0 = coat.transpose %q : !coat.qtensor<256x128xf8E4M3FN, per_block<128x64>> -> !coat.qtensor<128x256xf8E4M3FN, per_block<128x64>>
  return
}

// -----

func.func @transpose_shape(%q: !coat.qtensor<4x32xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{result must be '!coat.qtensor<32x4xf8E4M3FN, per_tensor>'}}
  %0 = coat.transpose %q : !coat.qtensor<4x32xf8E4M3FN, per_tensor> -> !coat.qtensor<4x32xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @transpose_format(%q: !coat.qtensor<4x32xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{result must be '!coat.qtensor<32x4xf8E4M3FN, per_tensor>', got '!coat.qtensor<32x4xf8E5M2, per_tensor>'}}
  %0 = coat.transpose %q : !coat.qtensor<4x32xf8E4M3FN, per_tensor> -> !coat.qtensor<32x4xf8E5M2, per_tensor>
  return
}

// -----

func.func @absmax_fit(%x: tensor<4x40xf32>) {
  // expected-error @+1 {{scaling per_group<16> does not fit the input: group size 16 does not divide the innermost dimension 40}}
  %0 = coat.absmax %x, per_group<16> : tensor<4x40xf32> -> tensor<4x2xf32>
  return
}

// -----

func.func @absmax_result(%x: tensor<300x7xf32>) {
  // expected-error @+1 {{result must be 'tensor<17xf32>' (the scale shape of flat_group<128>), got 'tensor<16xf32>'}}
  %0 = coat.absmax %x, flat_group<128> : tensor<300x7xf32> -> tensor<16xf32>
  return
}

// -----

func.func @absmax_bad_scaling(%x: tensor<4x32xf32>) {
  // expected-error @+1 {{group size must be positive, got 0}}
  %0 = coat.absmax %x, per_group<0> : tensor<4x32xf32> -> tensor<4x2xf32>
  return
}

// -----

func.func @reduce_scales_rank(%s: tensor<4x2xf32>) {
  // expected-error @+1 {{result must be a rank-0 tensor, got 'tensor<1xf32>'}}
  %0 = coat.reduce_scales %s : tensor<4x2xf32> -> tensor<1xf32>
  return
}

// -----

func.func @reduce_scales_type(%s: tensor<4x2xbf16>) {
  // expected-error @+1 {{result element type 'f32' differs from the input's 'bf16'}}
  %0 = coat.reduce_scales %s : tensor<4x2xbf16> -> tensor<f32>
  return
}

// -----

func.func @linear_rank(%x: !coat.qtensor<2x128x256xf8E4M3FN, per_tensor>, %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{operands must be 2-D}}
  %0 = coat.linear forward %x, %w : !coat.qtensor<2x128x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
  return
}

// -----

func.func @linear_reduction(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>, %w: !coat.qtensor<256x512xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{operands disagree on the K-major reduction dimension: 128x256 vs 256x512}}
  %0 = coat.linear forward %x, %w : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<256x512xf8E4M3FN, per_tensor> -> tensor<128x256xbf16>
  return
}

// -----

func.func @linear_result_shape(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>, %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{result shape must be 128x512, got 512x128}}
  %0 = coat.linear forward %x, %w : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<512x128xbf16>
  return
}

// -----

func.func @linear_expanded(%x: !coat.qtensor<128x256xf8E4M3FN, per_group<128>, expand>, %w: !coat.qtensor<512x256xf8E4M3FN, per_block<128x128>>) {
  // expected-error @+1 {{operands must not be range-expanded}}
  %0 = coat.linear forward %x, %w : !coat.qtensor<128x256xf8E4M3FN, per_group<128>, expand>, !coat.qtensor<512x256xf8E4M3FN, per_block<128x128>> -> tensor<128x512xbf16>
  return
}

// -----

func.func @linear_forward_format(%x: !coat.qtensor<128x256xf8E5M2, per_tensor>, %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{forward operands must both be f8E4M3FN}}
  %0 = coat.linear forward %x, %w : !coat.qtensor<128x256xf8E5M2, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
  return
}

// -----

func.func @linear_dgrad_weight_format(%dy: !coat.qtensor<128x512xf8E5M2, per_tensor>, %wt: !coat.qtensor<256x512xf8E5M2, per_tensor>) {
  // expected-error @+1 {{the dgrad weight operand (rhs) must be f8E4M3FN}}
  %0 = coat.linear dgrad %dy, %wt : !coat.qtensor<128x512xf8E5M2, per_tensor>, !coat.qtensor<256x512xf8E5M2, per_tensor> -> tensor<128x256xbf16>
  return
}

// -----

func.func @linear_wgrad_format(%dyt: !coat.qtensor<512x128xf8E5M2, per_tensor>, %xt: !coat.qtensor<256x128xf8E5M2, per_tensor>) {
  // expected-error @+1 {{at most one wgrad operand may be f8E5M2}}
  %0 = coat.linear wgrad %dyt, %xt : !coat.qtensor<512x128xf8E5M2, per_tensor>, !coat.qtensor<256x128xf8E5M2, per_tensor> -> tensor<512x256xbf16>
  return
}

// -----

func.func @linear_mixed_scaling(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>, %w: !coat.qtensor<512x256xf8E4M3FN, per_block<128x128>>) {
  // expected-error @+1 {{operands must both be per_tensor, or per_group<128> x per_block<128x128>; got per_tensor x per_block<128x128>}}
  %0 = coat.linear forward %x, %w : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_block<128x128>> -> tensor<128x512xbf16>
  return
}

// -----

func.func @linear_group_size(%x: !coat.qtensor<128x256xf8E4M3FN, per_group<16>>, %w: !coat.qtensor<512x256xf8E4M3FN, per_block<128x128>>) {
  // expected-error @+1 {{got per_group<16> x per_block<128x128>}}
  %0 = coat.linear forward %x, %w : !coat.qtensor<128x256xf8E4M3FN, per_group<16>>, !coat.qtensor<512x256xf8E4M3FN, per_block<128x128>> -> tensor<128x512xbf16>
  return
}

// -----

func.func @linear_block_scale_type(%x: !coat.qtensor<128x256xf8E4M3FN, per_group<128>, scale = bf16>, %w: !coat.qtensor<512x256xf8E4M3FN, per_block<128x128>>) {
  // expected-error @+1 {{block-scaled operands need f32 scales}}
  %0 = coat.linear forward %x, %w : !coat.qtensor<128x256xf8E4M3FN, per_group<128>, scale = bf16>, !coat.qtensor<512x256xf8E4M3FN, per_block<128x128>> -> tensor<128x512xbf16>
  return
}

// -----

func.func @linear_bias_kind(%dy: !coat.qtensor<128x512xf8E5M2, per_tensor>, %wt: !coat.qtensor<256x512xf8E4M3FN, per_tensor>, %b: tensor<256xbf16>) {
  // expected-error @+1 {{a bias is only allowed for forward}}
  %0 = coat.linear dgrad %dy, %wt bias %b : !coat.qtensor<128x512xf8E5M2, per_tensor>, !coat.qtensor<256x512xf8E4M3FN, per_tensor>, tensor<256xbf16> -> tensor<128x256xbf16>
  return
}

// -----

func.func @linear_bias_length(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>, %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>, %b: tensor<256xbf16>) {
  // expected-error @+1 {{bias must be 1-D of length 512, got 'tensor<256xbf16>'}}
  %0 = coat.linear forward %x, %w bias %b : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor>, tensor<256xbf16> -> tensor<128x512xbf16>
  return
}

// -----

func.func @linear_bias_rank(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>, %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>, %b: tensor<1x512xbf16>) {
  // expected-error @+1 {{bias must be 1-D of length 512, got 'tensor<1x512xbf16>'}}
  %0 = coat.linear forward %x, %w bias %b : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor>, tensor<1x512xbf16> -> tensor<128x512xbf16>
  return
}

// -----

func.func @linear_bias_unresolved_length(%x: !coat.unresolved<?x256xbf16>, %w: !coat.unresolved<512x256xbf16>, %b: tensor<256xbf16>) {
  // expected-error @+1 {{bias must be 1-D of length 512, got 'tensor<256xbf16>'}}
  %0 = coat.linear forward %x, %w bias %b : !coat.unresolved<?x256xbf16>, !coat.unresolved<512x256xbf16>, tensor<256xbf16> -> tensor<?x512xbf16>
  return
}

// -----

func.func @linear_bias_type(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>, %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>, %b: tensor<512xf16>) {
  // expected-error @+1 {{operand #2 must be ranked tensor of 32-bit float or bfloat16 type values}}
  %0 = coat.linear forward %x, %w bias %b : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor>, tensor<512xf16> -> tensor<128x512xbf16>
  return
}

// -----

func.func @bias_grad_rank(%dy: tensor<4x8x32xbf16>) {
  // expected-error @+1 {{grad must be 2-D [tokens, features], got 'tensor<4x8x32xbf16>'}}
  %0 = coat.bias_grad %dy : tensor<4x8x32xbf16> -> tensor<32xbf16>
  return
}

// -----

func.func @bias_grad_length(%dy: tensor<?x32xbf16>) {
  // expected-error @+1 {{dbias must be 1-D of the innermost extent 32, got 'tensor<16xbf16>'}}
  %0 = coat.bias_grad %dy : tensor<?x32xbf16> -> tensor<16xbf16>
  return
}

// -----

func.func @bias_grad_result_rank(%dy: tensor<?x32xbf16>) {
  // expected-error @+1 {{dbias must be 1-D of the innermost extent 32, got 'tensor<1x32xbf16>'}}
  %0 = coat.bias_grad %dy : tensor<?x32xbf16> -> tensor<1x32xbf16>
  return
}

// -----

func.func @bias_grad_result_type(%dy: tensor<?x32xbf16>) {
  // expected-error @+1 {{result #0 must be ranked tensor of 32-bit float or bfloat16 type values}}
  %0 = coat.bias_grad %dy : tensor<?x32xbf16> -> tensor<32xf16>
  return
}

// -----

func.func @linear_quantized_kind(%dy: !coat.qtensor<128x512xf8E5M2, per_tensor>, %wt: !coat.qtensor<256x512xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{a quantized result needs kind forward with per_tensor operands}}
  %0 = coat.linear dgrad %dy, %wt : !coat.qtensor<128x512xf8E5M2, per_tensor>, !coat.qtensor<256x512xf8E4M3FN, per_tensor> -> !coat.qtensor<128x256xf8E5M2, per_group<16>>
  return
}

// -----

func.func @linear_quantized_block(%x: !coat.qtensor<128x256xf8E4M3FN, per_group<128>>, %w: !coat.qtensor<512x256xf8E4M3FN, per_block<128x128>>) {
  // expected-error @+1 {{a quantized result needs kind forward with per_tensor operands}}
  %0 = coat.linear forward %x, %w : !coat.qtensor<128x256xf8E4M3FN, per_group<128>>, !coat.qtensor<512x256xf8E4M3FN, per_block<128x128>> -> !coat.qtensor<128x512xf8E4M3FN, per_group<16>>
  return
}

// -----

func.func @linear_quantized_granularity(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>, %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{a quantized result must be per_group<16>, got '!coat.qtensor<128x512xf8E4M3FN, per_tensor>'}}
  %0 = coat.linear forward %x, %w : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> !coat.qtensor<128x512xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @linear_quantized_format(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>, %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{a quantized result must have the lhs format 'f8E4M3FN', got 'f8E5M2'}}
  %0 = coat.linear forward %x, %w : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> !coat.qtensor<128x512xf8E5M2, per_group<16>>
  return
}

// -----

func.func @linear_unknown_kind(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>, %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{expected 'forward', 'dgrad' or 'wgrad', got 'backward'}}
  %0 = coat.linear backward %x, %w : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
  return
}

// -----

func.func @silu_granularity(%x: !coat.qtensor<4x32xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{input must be a 1xG (per_group<G>) tensor, got per_tensor}}
  %0 = coat.silu %x : !coat.qtensor<4x32xf8E4M3FN, per_tensor> -> !coat.qtensor<4x32xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @silu_expanded(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>, expand>) {
  // expected-error @+1 {{input must not be range-expanded}}
  %0 = coat.silu %x : !coat.qtensor<4x32xf8E4M3FN, per_group<16>, expand> -> !coat.qtensor<4x32xf8E4M3FN, per_group<16>, expand>
  return
}

// -----

func.func @silu_format(%x: !coat.qtensor<4x32xf8E5M2, per_group<16>>) {
  // expected-error @+1 {{input must be f8E4M3FN (forward activations are E4M3), got 'f8E5M2'}}
  %0 = coat.silu %x : !coat.qtensor<4x32xf8E5M2, per_group<16>> -> !coat.qtensor<4x32xf8E5M2, per_group<16>>
  return
}

// -----

func.func @silu_result(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>) {
  // expected-error @+1 {{result must have the input type '!coat.qtensor<4x32xf8E4M3FN, per_group<16>>', got '!coat.qtensor<4x32xf8E4M3FN, per_group<32>>'}}
  %0 = coat.silu %x : !coat.qtensor<4x32xf8E4M3FN, per_group<16>> -> !coat.qtensor<4x32xf8E4M3FN, per_group<32>>
  return
}

// -----

func.func @silu_grad_shape(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %dy: tensor<4x16xbf16>) {
  // expected-error @+1 {{gradient shape 4x16 does not match the input shape 4x32}}
  %0 = coat.silu_grad %x, %dy : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<4x16xbf16> -> tensor<4x16xbf16>
  return
}

// -----

func.func @silu_grad_dx_type(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %dy: tensor<4x32xbf16>) {
  // expected-error @+1 {{dx must have the gradient's type 'tensor<4x32xbf16>', got 'tensor<4x32xf32>'}}
  %0 = coat.silu_grad %x, %dy : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<4x32xbf16> -> tensor<4x32xf32>
  return
}

// -----

func.func @silu_grad_copy_format(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %dy: tensor<4x32xbf16>) {
  // expected-error @+1 {{dx copy must be f8E5M2 (backward gradient copies are E5M2), got 'f8E4M3FN'}}
  %0:2 = coat.silu_grad %x, %dy : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<4x32xbf16> -> tensor<4x32xbf16>, !coat.qtensor<4x32xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @silu_grad_copy_granularity(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %dy: tensor<4x32xbf16>) {
  // expected-error @+1 {{dx copy must be per_tensor, got per_group<16>}}
  %0:2 = coat.silu_grad %x, %dy : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<4x32xbf16> -> tensor<4x32xbf16>, !coat.qtensor<4x32xf8E5M2, per_group<16>>
  return
}

// -----

func.func @silu_grad_copy_shape(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %dy: tensor<4x32xbf16>) {
  // expected-error @+1 {{dx copy shape 32x4 does not match 4x32}}
  %0:2 = coat.silu_grad %x, %dy : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<4x32xbf16> -> tensor<4x32xbf16>, !coat.qtensor<32x4xf8E5M2, per_tensor>
  return
}

// -----

func.func @silu_grad_transposed(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %dy: tensor<4x32xbf16>) {
  // expected-error @+1 {{dx transposed copy must be the transposed copy '!coat.qtensor<32x4xf8E5M2, per_tensor>', got '!coat.qtensor<4x32xf8E5M2, per_tensor>'}}
  %0:3 = coat.silu_grad %x, %dy : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<4x32xbf16> -> tensor<4x32xbf16>, !coat.qtensor<4x32xf8E5M2, per_tensor>, !coat.qtensor<4x32xf8E5M2, per_tensor>
  return
}

// -----

func.func @silu_grad_transposed_alone(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %dy: tensor<4x32xbf16>) {
  // expected-error @+1 {{a transposed dx copy needs the per_tensor copy}}
  %0:2 = "coat.silu_grad"(%x, %dy) <{resultSegmentSizes = array<i32: 1, 0, 1>}> : (!coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<4x32xbf16>) -> (tensor<4x32xbf16>, !coat.qtensor<32x4xf8E5M2, per_tensor>)
  return
}

// -----

func.func @gelu_approximate(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>) {
  // expected-error @+1 {{approximate must be "none" (exact erf) or "tanh", got "sigmoid"}}
  %0 = coat.gelu %x {approximate = "sigmoid"} : !coat.qtensor<4x32xf8E4M3FN, per_group<16>> -> tensor<4x32xbf16>
  return
}

// -----

func.func @gelu_grad_approximate(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %dy: tensor<4x32xbf16>) {
  // expected-error @+1 {{approximate must be "none" (exact erf) or "tanh", got "Tanh"}}
  %0 = coat.gelu_grad %x, %dy {approximate = "Tanh"} : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<4x32xbf16> -> tensor<4x32xbf16>
  return
}

// -----

func.func @gelu_result_granularity(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>) {
  // expected-error @+1 {{result must be per_tensor, got per_group<16>}}
  %0 = coat.gelu %x : !coat.qtensor<4x32xf8E4M3FN, per_group<16>> -> !coat.qtensor<4x32xf8E4M3FN, per_group<16>>
  return
}

// -----

func.func @gelu_result_format(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>) {
  // expected-error @+1 {{result must be f8E4M3FN (the format of the input), got 'f8E5M2'}}
  %0 = coat.gelu %x : !coat.qtensor<4x32xf8E4M3FN, per_group<16>> -> !coat.qtensor<4x32xf8E5M2, per_tensor>
  return
}

// -----

func.func @gelu_transposed_scale(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>) {
  // expected-error @+1 {{transposed result must be the transposed copy '!coat.qtensor<32x4xf8E4M3FN, per_tensor>', got '!coat.qtensor<32x4xf8E4M3FN, per_tensor, scale = bf16>'}}
  %0:2 = coat.gelu %x : !coat.qtensor<4x32xf8E4M3FN, per_group<16>> -> !coat.qtensor<4x32xf8E4M3FN, per_tensor>, !coat.qtensor<32x4xf8E4M3FN, per_tensor, scale = bf16>
  return
}

// -----

func.func @gelu_transposed_rank(%x: !coat.qtensor<32xf8E4M3FN, per_group<16>>) {
  // expected-error @+1 {{transposed result: a transposed copy needs a value of rank >= 2}}
  %0:2 = coat.gelu %x : !coat.qtensor<32xf8E4M3FN, per_group<16>> -> !coat.qtensor<32xf8E4M3FN, per_tensor>, !coat.qtensor<32x1xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @gelu_grad_input(%x: !coat.qtensor<4x32xf8E4M3FN, per_tensor>, %dy: tensor<4x32xbf16>) {
  // expected-error @+1 {{input must be a 1xG (per_group<G>) tensor, got per_tensor}}
  %0 = coat.gelu_grad %x, %dy : !coat.qtensor<4x32xf8E4M3FN, per_tensor>, tensor<4x32xbf16> -> tensor<4x32xbf16>
  return
}

// -----

func.func @swiglu_mul_shapes(%a: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %b: !coat.qtensor<4x64xf8E4M3FN, per_group<16>>) {
  // expected-error @+1 {{operand shapes differ: 4x32 vs 4x64}}
  %0 = coat.swiglu_mul %a, %b : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, !coat.qtensor<4x64xf8E4M3FN, per_group<16>> -> !coat.qtensor<4x32xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @swiglu_mul_rhs(%a: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %b: !coat.qtensor<4x32xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{rhs must be a 1xG (per_group<G>) tensor, got per_tensor}}
  %0 = coat.swiglu_mul %a, %b : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, !coat.qtensor<4x32xf8E4M3FN, per_tensor> -> !coat.qtensor<4x32xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @swiglu_mul_result(%a: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>) {
  // expected-error @+1 {{result must be per_tensor, got per_group<16>}}
  %0 = coat.swiglu_mul %a, %a : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, !coat.qtensor<4x32xf8E4M3FN, per_group<16>> -> !coat.qtensor<4x32xf8E4M3FN, per_group<16>>
  return
}

// -----

func.func @swiglu_mul_grad_dlhs(%a: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %dy: tensor<4x32xbf16>) {
  // expected-error @+1 {{dlhs must have the gradient's type 'tensor<4x32xbf16>', got 'tensor<4x32xf32>'}}
  %0:2 = coat.swiglu_mul_grad %a, %a, %dy : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<4x32xbf16> -> tensor<4x32xf32>, tensor<4x32xbf16>
  return
}

// -----

func.func @swiglu_mul_grad_copy(%a: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %dy: tensor<4x32xbf16>) {
  // expected-error @+1 {{drhs copy must be f8E5M2 (backward gradient copies are E5M2), got 'f8E4M3FN'}}
  %0:3 = coat.swiglu_mul_grad %a, %a, %dy : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<4x32xbf16> -> tensor<4x32xbf16>, tensor<4x32xbf16>, !coat.qtensor<4x32xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @residual_add_types(%r: tensor<4x32xbf16>, %b: tensor<4x32xf32>) {
  // expected-error @+1 {{operand types differ: 'tensor<4x32xbf16>' vs 'tensor<4x32xf32>'}}
  %0:2 = coat.residual_add %r, %b : tensor<4x32xbf16>, tensor<4x32xf32> -> tensor<4x32xbf16>, !coat.qtensor<4x32xf8E4M3FN, per_group<16>>
  return
}

// -----

func.func @residual_add_sum_type(%r: tensor<4x32xbf16>) {
  // expected-error @+1 {{sum must have the operand type 'tensor<4x32xbf16>', got 'tensor<4x32xf32>'}}
  %0:2 = coat.residual_add %r, %r : tensor<4x32xbf16>, tensor<4x32xbf16> -> tensor<4x32xf32>, !coat.qtensor<4x32xf8E4M3FN, per_group<16>>
  return
}

// -----

func.func @residual_add_copy_shape(%r: tensor<4x32xbf16>) {
  // expected-error @+1 {{quantized sum shape 4x16 does not match 4x32}}
  %0:2 = coat.residual_add %r, %r : tensor<4x32xbf16>, tensor<4x32xbf16> -> tensor<4x32xbf16>, !coat.qtensor<4x16xf8E4M3FN, per_group<16>>
  return
}

// -----

func.func @residual_add_copy_granularity(%r: tensor<4x32xbf16>) {
  // expected-error @+1 {{quantized sum must be a 1xG (per_group<G>) tensor, got per_tensor}}
  %0:2 = coat.residual_add %r, %r : tensor<4x32xbf16>, tensor<4x32xbf16> -> tensor<4x32xbf16>, !coat.qtensor<4x32xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @residual_add_copy_format(%r: tensor<4x32xbf16>) {
  // expected-error @+1 {{quantized sum must be f8E4M3FN (forward activations are E4M3), got 'f8E5M2'}}
  %0:2 = coat.residual_add %r, %r : tensor<4x32xbf16>, tensor<4x32xbf16> -> tensor<4x32xbf16>, !coat.qtensor<4x32xf8E5M2, per_group<16>>
  return
}

// -----

func.func @residual_add_grad_format(%g: tensor<4x32xbf16>) {
  // expected-error @+1 {{quantized sum must be f8E5M2 (backward gradient copies are E5M2), got 'f8E4M3FN'}}
  %0:2 = coat.residual_add_grad %g, %g : tensor<4x32xbf16>, tensor<4x32xbf16> -> tensor<4x32xbf16>, !coat.qtensor<4x32xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @residual_add_grad_granularity(%g: tensor<4x32xbf16>) {
  // expected-error @+1 {{quantized sum must be per_tensor, got per_group<16>}}
  %0:2 = coat.residual_add_grad %g, %g : tensor<4x32xbf16>, tensor<4x32xbf16> -> tensor<4x32xbf16>, !coat.qtensor<4x32xf8E5M2, per_group<16>>
  return
}

// -----

func.func @rmsnorm_eps_zero(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %w: tensor<32xbf16>) {
  // expected-error @+1 {{eps must be positive}}
  %0:2 = coat.rmsnorm %x, %w eps = 0.0 : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<32xbf16> -> !coat.qtensor<4x32xf8E4M3FN, per_tensor>, tensor<4xf32>
  return
}

// -----

func.func @rmsnorm_eps_negative(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %w: tensor<32xbf16>) {
  // expected-error @+1 {{eps must be positive}}
  %0:2 = coat.rmsnorm %x, %w eps = -1.0e-5 : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<32xbf16> -> !coat.qtensor<4x32xf8E4M3FN, per_tensor>, tensor<4xf32>
  return
}

// -----

func.func @rmsnorm_input(%x: !coat.qtensor<4x32xf8E4M3FN, per_tensor>, %w: tensor<32xbf16>) {
  // expected-error @+1 {{input must be a 1xG (per_group<G>) tensor, got per_tensor}}
  %0:2 = coat.rmsnorm %x, %w eps = 1.0e-5 : !coat.qtensor<4x32xf8E4M3FN, per_tensor>, tensor<32xbf16> -> !coat.qtensor<4x32xf8E4M3FN, per_tensor>, tensor<4xf32>
  return
}

// -----

func.func @rmsnorm_weight(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %w: tensor<4xbf16>) {
  // expected-error @+1 {{weight must be 1-D of the innermost extent 32, got 'tensor<4xbf16>'}}
  %0:2 = coat.rmsnorm %x, %w eps = 1.0e-5 : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<4xbf16> -> !coat.qtensor<4x32xf8E4M3FN, per_tensor>, tensor<4xf32>
  return
}

// -----

func.func @rmsnorm_rstd(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %w: tensor<32xbf16>) {
  // expected-error @+1 {{rstd must have the input shape without its innermost dimension (4), got 'tensor<4x1xf32>'}}
  %0:2 = coat.rmsnorm %x, %w eps = 1.0e-5 : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<32xbf16> -> !coat.qtensor<4x32xf8E4M3FN, per_tensor>, tensor<4x1xf32>
  return
}

// -----

func.func @rmsnorm_result(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %w: tensor<32xbf16>) {
  // expected-error @+1 {{result must be per_tensor, got per_group<16>}}
  %0:2 = coat.rmsnorm %x, %w eps = 1.0e-5 : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<32xbf16> -> !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<4xf32>
  return
}

// -----

func.func @rmsnorm_grad_dweight(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %w: tensor<32xbf16>, %rstd: tensor<4xf32>, %dy: tensor<4x32xbf16>) {
  // expected-error @+1 {{dweight must have the weight's type 'tensor<32xbf16>', got 'tensor<32xf32>'}}
  %0:2 = coat.rmsnorm_grad %x, %w, %rstd, %dy : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<32xbf16>, tensor<4xf32>, tensor<4x32xbf16> -> tensor<4x32xbf16>, tensor<32xf32>
  return
}

// -----

func.func @rmsnorm_grad_rstd(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %w: tensor<32xbf16>, %rstd: tensor<8xf32>, %dy: tensor<4x32xbf16>) {
  // expected-error @+1 {{rstd must have the input shape without its innermost dimension (4), got 'tensor<8xf32>'}}
  %0:2 = coat.rmsnorm_grad %x, %w, %rstd, %dy : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<32xbf16>, tensor<8xf32>, tensor<4x32xbf16> -> tensor<4x32xbf16>, tensor<32xbf16>
  return
}

// -----

func.func @layernorm_bias_without_weight(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %b: tensor<32xf32>) {
  // expected-error @+1 {{a bias needs a weight (affine LayerNorm)}}
  %0:3 = "coat.layernorm"(%x, %b) <{eps = 1.0e-5 : f32, operandSegmentSizes = array<i32: 1, 0, 1>}> : (!coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<32xf32>) -> (!coat.qtensor<4x32xf8E4M3FN, per_tensor>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @layernorm_eps(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>) {
  // expected-error @+1 {{eps must be positive}}
  %0:3 = coat.layernorm %x eps = 0.0 : !coat.qtensor<4x32xf8E4M3FN, per_group<16>> -> !coat.qtensor<4x32xf8E4M3FN, per_tensor>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @layernorm_bias_length(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %w: tensor<32xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{bias must be 1-D of the innermost extent 32, got 'tensor<16xf32>'}}
  %0:3 = coat.layernorm %x weight %w bias %b eps = 1.0e-5 : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<32xf32>, tensor<16xf32> -> !coat.qtensor<4x32xf8E4M3FN, per_tensor>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @layernorm_mean(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>) {
  // expected-error @+1 {{mean must have the input shape without its innermost dimension (4), got 'tensor<32xf32>'}}
  %0:3 = coat.layernorm %x eps = 1.0e-5 : !coat.qtensor<4x32xf8E4M3FN, per_group<16>> -> !coat.qtensor<4x32xf8E4M3FN, per_tensor>, tensor<32xf32>, tensor<4xf32>
  return
}

// -----

func.func @layernorm_grad_needs_dweight(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %s: tensor<4xf32>, %dy: tensor<4x32xbf16>, %w: tensor<32xf32>) {
  // expected-error @+1 {{an affine LayerNorm backward must return dweight}}
  %0 = coat.layernorm_grad %x, %s, %s, %dy weight %w : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<4xf32>, tensor<4xf32>, tensor<4x32xbf16>, tensor<32xf32> -> tensor<4x32xbf16>
  return
}

// -----

func.func @layernorm_grad_dweight_without_weight(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %s: tensor<4xf32>, %dy: tensor<4x32xbf16>) {
  // expected-error @+1 {{dweight and dbias need a weight operand}}
  %0:2 = coat.layernorm_grad %x, %s, %s, %dy : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<4xf32>, tensor<4xf32>, tensor<4x32xbf16> -> tensor<4x32xbf16>, tensor<32xf32>
  return
}

// -----

func.func @layernorm_grad_dbias(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %s: tensor<4xf32>, %dy: tensor<4x32xbf16>, %w: tensor<32xf32>) {
  // expected-error @+1 {{dbias must have the weight's type 'tensor<32xf32>', got 'tensor<32xbf16>'}}
  %0:3 = coat.layernorm_grad %x, %s, %s, %dy weight %w : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<4xf32>, tensor<4xf32>, tensor<4x32xbf16>, tensor<32xf32> -> tensor<4x32xbf16>, tensor<32xf32>, tensor<32xbf16>
  return
}

// -----

func.func @layernorm_grad_dx(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, %s: tensor<4xf32>, %dy: tensor<4x32xbf16>) {
  // expected-error @+1 {{dx must have the gradient's type 'tensor<4x32xbf16>', got 'tensor<4x32xf16>'}}
  %0 = coat.layernorm_grad %x, %s, %s, %dy : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, tensor<4xf32>, tensor<4xf32>, tensor<4x32xbf16> -> tensor<4x32xf16>
  return
}

// -----

func.func @absmax_huge(%x: tensor<9223372036854775807x4xf32>) {
  // expected-error @+1 {{a quantized tensor has at most 2^48 elements}}
  %0 = coat.absmax %x, per_block<128x128> : tensor<9223372036854775807x4xf32> -> tensor<1x1xf32>
  return
}

// -----

func.func @unquantized_result_shape(%x: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>) {
  // expected-error @+1 {{result shape 4x16 does not match the input shape 4x32}}
  %0 = coat.gelu %x : !coat.qtensor<4x32xf8E4M3FN, per_group<16>> -> tensor<4x16xbf16>
  return
}

// -----

func.func @unquantized_result_transposed(%a: !coat.qtensor<4x32xf8E4M3FN, per_group<16>>) {
  // expected-error @+1 {{an unquantized result has no transposed copy}}
  %0, %1 = coat.swiglu_mul %a, %a : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>, !coat.qtensor<4x32xf8E4M3FN, per_group<16>> -> tensor<4x32xbf16>, !coat.qtensor<32x4xf8E4M3FN, per_tensor>
  return
}

// -----

func.func @rope_input_rank(%x: tensor<2x4x128xbf16>, %t: tensor<4x64xf32>) {
  // expected-error @+1 {{input must be a [tokens, columns] matrix, got rank 3}}
  %0 = coat.rope %x, %t, %t rotated_heads = 1 : tensor<2x4x128xbf16>, tensor<4x64xf32>, tensor<4x64xf32> -> tensor<2x4x128xbf16>
  return
}

// -----

func.func @rope_table_rank(%x: tensor<4x128xbf16>, %t: tensor<64xf32>) {
  // expected-error @+1 {{tables must be [tokens, head_dim] matrices, got rank 1}}
  %0 = coat.rope %x, %t, %t rotated_heads = 1 : tensor<4x128xbf16>, tensor<64xf32>, tensor<64xf32> -> tensor<4x128xbf16>
  return
}

// -----

func.func @rope_table_types(%x: tensor<4x128xbf16>, %c: tensor<4x64xf32>, %s: tensor<4x64xbf16>) {
  // expected-error @+1 {{cos and sin must have one type: 'tensor<4x64xf32>' vs 'tensor<4x64xbf16>'}}
  %0 = coat.rope %x, %c, %s rotated_heads = 1 : tensor<4x128xbf16>, tensor<4x64xf32>, tensor<4x64xbf16> -> tensor<4x128xbf16>
  return
}

// -----

func.func @rope_result_type(%x: tensor<4x128xbf16>, %t: tensor<4x64xf32>) {
  // expected-error @+1 {{result must have the input type 'tensor<4x128xbf16>', got 'tensor<4x128xf32>'}}
  %0 = coat.rope %x, %t, %t rotated_heads = 1 : tensor<4x128xbf16>, tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x128xf32>
  return
}

// -----

func.func @rope_dynamic_head_dim(%x: tensor<4x128xbf16>, %t: tensor<4x?xf32>) {
  // expected-error @+1 {{the tables' row length (head_dim) must be static}}
  %0 = coat.rope %x, %t, %t rotated_heads = 1 : tensor<4x128xbf16>, tensor<4x?xf32>, tensor<4x?xf32> -> tensor<4x128xbf16>
  return
}

// -----

func.func @rope_epilogue_of_an_argument(%x: tensor<4x128xbf16>, %t: tensor<4x64xf32>) {
  // expected-error @+1 {{epilogue: the input must be the bf16/f32 result of a coat.linear that nothing else reads}}
  %0 = coat.rope %x, %t, %t rotated_heads = 1 epilogue : tensor<4x128xbf16>, tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x128xbf16>
  return
}

// -----

func.func @rope_epilogue_of_a_gemm_read_twice(%a: !coat.qtensor<4x32xf8E4M3FN, per_tensor, scale = bf16>,
                                              %w: !coat.qtensor<128x32xf8E4M3FN, per_tensor, scale = bf16>,
                                              %t: tensor<4x64xf32>) -> tensor<4x128xbf16> {
  %y = coat.linear forward %a, %w : !coat.qtensor<4x32xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<128x32xf8E4M3FN, per_tensor, scale = bf16> -> tensor<4x128xbf16>
  // expected-error @+1 {{epilogue: the input must be the bf16/f32 result of a coat.linear that nothing else reads}}
  %0 = coat.rope %y, %t, %t rotated_heads = 1 epilogue : tensor<4x128xbf16>, tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x128xbf16>
  return %y : tensor<4x128xbf16>
}

// -----

func.func @rope_odd_head_dim(%x: tensor<4x126xbf16>, %t: tensor<4x63xf32>) {
  // expected-error @+1 {{head_dim (the tables' row length) must be positive and even: a head rotates its two halves, got 63}}
  %0 = coat.rope %x, %t, %t rotated_heads = 1 : tensor<4x126xbf16>, tensor<4x63xf32>, tensor<4x63xf32> -> tensor<4x126xbf16>
  return
}

// -----

func.func @rope_dynamic_row(%x: tensor<4x?xbf16>, %t: tensor<4x64xf32>) {
  // expected-error @+1 {{the input's row length must be static}}
  %0 = coat.rope %x, %t, %t rotated_heads = 1 : tensor<4x?xbf16>, tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x?xbf16>
  return
}

// -----

func.func @rope_partial_head(%x: tensor<4x160xbf16>, %t: tensor<4x64xf32>) {
  // expected-error @+1 {{input rows of 160 columns are not whole heads of head_dim 64}}
  %0 = coat.rope %x, %t, %t rotated_heads = 2 : tensor<4x160xbf16>, tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x160xbf16>
  return
}

// -----

func.func @rope_too_many_heads(%x: tensor<4x192xbf16>, %t: tensor<4x64xf32>) {
  // expected-error @+1 {{rotated_heads must be in [1, 3] (the input's heads of 64 columns), got 4}}
  %0 = coat.rope %x, %t, %t rotated_heads = 4 : tensor<4x192xbf16>, tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x192xbf16>
  return
}

// -----

func.func @rope_no_heads(%x: tensor<4x192xbf16>, %t: tensor<4x64xf32>) {
  // expected-error @+1 {{rotated_heads must be in [1, 3] (the input's heads of 64 columns), got -1}}
  %0 = coat.rope %x, %t, %t rotated_heads = -1 : tensor<4x192xbf16>, tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x192xbf16>
  return
}

// -----

func.func @rope_grad_table_rows(%g: tensor<4x192xbf16>, %t: tensor<5x64xf32>) {
  // expected-error @+1 {{tables have 5 rows, the input 4: one table row per token}}
  %0 = coat.rope_grad %g, %t, %t rotated_heads = 2 : tensor<4x192xbf16>, tensor<5x64xf32>, tensor<5x64xf32> -> tensor<4x192xbf16>
  return
}

// -----

func.func @rope_grad_result_type(%g: tensor<4x192xbf16>, %t: tensor<4x64xf32>) {
  // expected-error @+1 {{result must have the input type 'tensor<4x192xbf16>', got 'tensor<4x192xf16>'}}
  %0 = coat.rope_grad %g, %t, %t rotated_heads = 2 : tensor<4x192xbf16>, tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x192xf16>
  return
}

// -----

func.func @cross_entropy_rank(%x: tensor<4x8x32xbf16>, %t: tensor<4xi64>) {
  // expected-error @+1 {{logits must be 2-D [tokens, vocab], got 'tensor<4x8x32xbf16>'}}
  %l, %g = coat.cross_entropy %x, %t : tensor<4x8x32xbf16>, tensor<4xi64> -> tensor<4xf32>, tensor<4x8x32xbf16>
  return
}

// -----

func.func @cross_entropy_dynamic_vocab(%x: tensor<?x?xbf16>, %t: tensor<?xi64>) {
  // expected-error @+1 {{the vocabulary (logits' row length) must be static and positive, got 'tensor<?x?xbf16>'}}
  %l, %g = coat.cross_entropy %x, %t : tensor<?x?xbf16>, tensor<?xi64> -> tensor<?xf32>, tensor<?x?xbf16>
  return
}

// -----

func.func @cross_entropy_f32_logits(%x: tensor<?x32xf32>, %t: tensor<?xi64>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of bfloat16 type values}}
  %l, %g = coat.cross_entropy %x, %t : tensor<?x32xf32>, tensor<?xi64> -> tensor<?xf32>, tensor<?x32xf32>
  return
}

// -----

func.func @cross_entropy_i32_targets(%x: tensor<?x32xbf16>, %t: tensor<?xi32>) {
  // expected-error @+1 {{operand #1 must be ranked tensor of 64-bit signless integer values}}
  %l, %g = coat.cross_entropy %x, %t : tensor<?x32xbf16>, tensor<?xi32> -> tensor<?xf32>, tensor<?x32xbf16>
  return
}

// -----

func.func @cross_entropy_rows(%x: tensor<8x32xbf16>, %t: tensor<4xi64>) {
  // expected-error @+1 {{targets must be 1-D with one class per row of the logits, got 'tensor<4xi64>' for 'tensor<8x32xbf16>'}}
  %l, %g = coat.cross_entropy %x, %t : tensor<8x32xbf16>, tensor<4xi64> -> tensor<8xf32>, tensor<8x32xbf16>
  return
}

// -----

func.func @cross_entropy_target_rank(%x: tensor<?x32xbf16>, %t: tensor<?x1xi64>) {
  // expected-error @+1 {{targets must be 1-D with one class per row of the logits, got 'tensor<?x1xi64>' for 'tensor<?x32xbf16>'}}
  %l, %g = coat.cross_entropy %x, %t : tensor<?x32xbf16>, tensor<?x1xi64> -> tensor<?xf32>, tensor<?x32xbf16>
  return
}

// -----

func.func @cross_entropy_loss_rows(%x: tensor<8x32xbf16>, %t: tensor<8xi64>) {
  // expected-error @+1 {{loss must be 1-D with one value per row of the logits, got 'tensor<4xf32>' for 'tensor<8x32xbf16>'}}
  %l, %g = coat.cross_entropy %x, %t : tensor<8x32xbf16>, tensor<8xi64> -> tensor<4xf32>, tensor<8x32xbf16>
  return
}

// -----

func.func @cross_entropy_loss_type(%x: tensor<?x32xbf16>, %t: tensor<?xi64>) {
  // expected-error @+1 {{result #0 must be ranked tensor of 32-bit float values}}
  %l, %g = coat.cross_entropy %x, %t : tensor<?x32xbf16>, tensor<?xi64> -> tensor<?xbf16>, tensor<?x32xbf16>
  return
}

// -----

func.func @cross_entropy_grad_type(%x: tensor<?x32xbf16>, %t: tensor<?xi64>) {
  // expected-error @+1 {{dlogits must have the type of the logits 'tensor<?x32xbf16>', got 'tensor<?x16xbf16>'}}
  %l, %g = coat.cross_entropy %x, %t : tensor<?x32xbf16>, tensor<?xi64> -> tensor<?xf32>, tensor<?x16xbf16>
  return
}

// -----

func.func @linear_addend_type(%a: !coat.qtensor<4x32xf8E5M2, per_tensor, scale = bf16>,
                              %w: !coat.qtensor<128x32xf8E4M3FN, per_tensor, scale = bf16>,
                              %c: tensor<4x128xf32>) -> tensor<4x128xbf16> {
  // expected-error @+1 {{the addend must have the result's type 'tensor<4x128xbf16>', got 'tensor<4x128xf32>'}}
  %y = coat.linear dgrad %a, %w addend(%c : tensor<4x128xf32>) : !coat.qtensor<4x32xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<128x32xf8E4M3FN, per_tensor, scale = bf16> -> tensor<4x128xbf16>
  return %y : tensor<4x128xbf16>
}
