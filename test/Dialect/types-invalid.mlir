// Malformed !coat.qtensor types and #coat attributes are diagnosed, never
// crash.
// RUN: coat-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{element type must be f8E4M3FN or f8E5M2, got 'f32'}}
func.func private @non_fp8(!coat.qtensor<16xf32, per_tensor>)

// -----

// expected-error @+1 {{element type must be f8E4M3FN or f8E5M2, got 'f8E4M3FNUZ'}}
func.func private @other_fp8(!coat.qtensor<16xf8E4M3FNUZ, per_tensor>)

// -----

// expected-error @+1 {{element type must be f8E4M3FN or f8E5M2, got 'i8'}}
func.func private @integer(!coat.qtensor<16xi8, per_tensor>)

// -----

// expected-error @+1 {{group size 16 does not divide the innermost dimension 40}}
func.func private @group_not_dividing(!coat.qtensor<8x40xf8E4M3FN, per_group<16>>)

// -----

// expected-error @+1 {{group size must be positive, got 0}}
func.func private @zero_group(!coat.qtensor<16xf8E4M3FN, flat_group<0>>)

// -----

// expected-error @+1 {{group size must be positive, got -16}}
func.func private @negative_group(!coat.qtensor<16xf8E4M3FN, per_group<-16>>)

// -----

// expected-error @+1 {{block sizes must be positive, got 0x128}}
func.func private @zero_block(!coat.qtensor<16x16xf8E4M3FN, per_block<0x128>>)

// -----

// expected-error @+1 {{per_block expects RxC, got 3 extents}}
func.func private @block_rank(!coat.qtensor<16x16xf8E4M3FN, per_block<1x2x3>>)

// -----

// expected-error @+1 {{dimension sizes must be positive, got 0}}
func.func private @zero_dim(!coat.qtensor<0x16xf8E4M3FN, per_tensor>)

// -----

// expected-error @+1 {{per_group scaling needs a tensor of rank >= 1}}
func.func private @group_rank0(!coat.qtensor<f8E4M3FN, per_group<16>>)

// -----

// expected-error @+1 {{per_block scaling needs a tensor of rank >= 2}}
func.func private @block_rank1(!coat.qtensor<256xf8E4M3FN, per_block<128x128>>)

// -----

// expected-error @+1 {{range expansion needs a grouped scaling (per_group or flat_group), got per_tensor}}
func.func private @expand_per_tensor(!coat.qtensor<16xf8E4M3FN, per_tensor, expand>)

// -----

// expected-error @+1 {{range expansion needs a grouped scaling (per_group or flat_group), got per_block<2x2>}}
func.func private @expand_per_block(!coat.qtensor<4x4xf8E4M3FN, per_block<2x2>, expand>)

// -----

// expected-error @+1 {{an expanded tensor needs f32 scales}}
func.func private @expand_bf16(!coat.qtensor<256xf8E4M3FN, flat_group<128>, scale = bf16, expand>)

// -----

// expected-error @+1 {{scale type must be f32 or bf16, got 'f16'}}
func.func private @scale_f16(!coat.qtensor<16xf8E4M3FN, per_tensor, scale = f16>)

// -----

// expected-error @+1 {{scale type must be f32 or bf16, got 'i32'}}
func.func private @scale_int(!coat.qtensor<16xf8E4M3FN, per_tensor, scale = i32>)

// -----

// expected-error @+1 {{expected 'scale = T' or 'expand', got 'expanded'}}
func.func private @unknown_option(!coat.qtensor<16xf8E4M3FN, flat_group<16>, expanded>)

// -----

// expected-error @+1 {{expected per_tensor, per_group<G>, flat_group<G> or per_block<RxC>, got 'per_row'}}
func.func private @unknown_scaling(!coat.qtensor<16xf8E4M3FN, per_row>)

// -----

// expected-error @+1 {{group size must be positive, got 0}}
func.func private @attr_zero_group() attributes {s = #coat.scaling<per_group<0>>}

// -----

// expected-error @+1 {{expected per_tensor, per_group<G>, flat_group<G> or per_block<RxC>, got 'blocks'}}
func.func private @attr_unknown() attributes {s = #coat.scaling<blocks>}

// -----

// expected-error @+2 {{expected ::mlir::coat::LinearKind to be one of: forward, dgrad, wgrad}}
// expected-error @+1 {{failed to parse Coat_LinearKindAttr parameter 'value'}}
func.func private @bad_linear_kind() attributes {k = #coat.linear_kind<backward>}

// -----

// expected-error @+1 {{a quantized tensor has at most 2^48 elements}}
func.func private @too_many_elements(!coat.qtensor<9223372036854775807x2xf8E4M3FN, flat_group<128>>)

// -----

// expected-error @+1 {{group and block sizes must be at most 2^32}}
func.func private @huge_group(!coat.qtensor<16xf8E4M3FN, flat_group<9223372036854775807>>)

// -----

// Each option is given once: a repeated one is an error, not last-wins.
// expected-error @+1 {{duplicate 'scale' option in !coat.qtensor}}
func.func private @scale_twice(!coat.qtensor<4x16xf8E4M3FN, per_group<16>, scale = bf16, scale = f32>)

// -----

// expected-error @+1 {{duplicate 'expand' option in !coat.qtensor}}
func.func private @expand_twice(!coat.qtensor<256xf8E4M3FN, flat_group<128>, expand, expand>)

// -----

// expected-error @+1 {{duplicate scaling 'per_tensor': a !coat.qtensor has one scaling granularity, given right after the element type}}
func.func private @scaling_twice(!coat.qtensor<4x16xf8E4M3FN, per_group<16>, per_tensor>)

// -----

// expected-error @+1 {{duplicate scaling 'per_group'}}
func.func private @scaling_after_option(!coat.qtensor<4x16xf8E4M3FN, per_group<16>, scale = bf16, per_group<16>>)
