// Folds and canonicalization patterns of the coat dialect; only exact ones.
// RUN: coat-opt %s -canonicalize -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @requantize_identity
// CHECK-SAME: (%[[Q:.*]]: !coat.qtensor
// CHECK-NEXT: return %[[Q]]
func.func @requantize_identity(%q: !coat.qtensor<4x32xf8E4M3FN, per_group<16>, scale = bf16>)
    -> !coat.qtensor<4x32xf8E4M3FN, per_group<16>, scale = bf16> {
  %0 = coat.requantize %q : !coat.qtensor<4x32xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<4x32xf8E4M3FN, per_group<16>, scale = bf16>
  return %0 : !coat.qtensor<4x32xf8E4M3FN, per_group<16>, scale = bf16>
}

// -----

// A change of representation is kept.
// CHECK-LABEL: func.func @requantize_kept
// CHECK-NEXT: coat.requantize
// CHECK-SAME: -> !coat.qtensor<4x32xf8E4M3FN, per_group<16>>
func.func @requantize_kept(%q: !coat.qtensor<4x32xf8E4M3FN, per_group<16>, scale = bf16>)
    -> !coat.qtensor<4x32xf8E4M3FN, per_group<16>> {
  %0 = coat.requantize %q : !coat.qtensor<4x32xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<4x32xf8E4M3FN, per_group<16>>
  return %0 : !coat.qtensor<4x32xf8E4M3FN, per_group<16>>
}

// -----

// CHECK-LABEL: func.func @transpose_twice_per_tensor
// CHECK-SAME: (%[[Q:.*]]: !coat.qtensor
// CHECK-NOT: coat.transpose
// CHECK: return %[[Q]]
func.func @transpose_twice_per_tensor(%q: !coat.qtensor<64x32xf8E5M2, per_tensor, scale = bf16>)
    -> !coat.qtensor<64x32xf8E5M2, per_tensor, scale = bf16> {
  %0 = coat.transpose %q : !coat.qtensor<64x32xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<32x64xf8E5M2, per_tensor, scale = bf16>
  %1 = coat.transpose %0 : !coat.qtensor<32x64xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<64x32xf8E5M2, per_tensor, scale = bf16>
  return %1 : !coat.qtensor<64x32xf8E5M2, per_tensor, scale = bf16>
}

// -----

// CHECK-LABEL: func.func @transpose_twice_per_block
// CHECK-SAME: (%[[Q:.*]]: !coat.qtensor
// CHECK-NOT: coat.transpose
// CHECK: return %[[Q]]
func.func @transpose_twice_per_block(%q: !coat.qtensor<256x128xf8E4M3FN, per_block<128x64>>)
    -> !coat.qtensor<256x128xf8E4M3FN, per_block<128x64>> {
  %0 = coat.transpose %q : !coat.qtensor<256x128xf8E4M3FN, per_block<128x64>> -> !coat.qtensor<128x256xf8E4M3FN, per_block<64x128>>
  %1 = coat.transpose %0 : !coat.qtensor<128x256xf8E4M3FN, per_block<64x128>> -> !coat.qtensor<256x128xf8E4M3FN, per_block<128x64>>
  return %1 : !coat.qtensor<256x128xf8E4M3FN, per_block<128x64>>
}

// -----

// A single transpose moves data and stays.
// CHECK-LABEL: func.func @transpose_once
// CHECK-NEXT: coat.transpose
// CHECK-NEXT: return
func.func @transpose_once(%q: !coat.qtensor<64x32xf8E5M2, per_tensor>)
    -> !coat.qtensor<32x64xf8E5M2, per_tensor> {
  %0 = coat.transpose %q : !coat.qtensor<64x32xf8E5M2, per_tensor> -> !coat.qtensor<32x64xf8E5M2, per_tensor>
  return %0 : !coat.qtensor<32x64xf8E5M2, per_tensor>
}

// -----

// CHECK-LABEL: func.func @reduce_scales_rank0
// CHECK-SAME: (%[[S:.*]]: tensor<bf16>)
// CHECK-NEXT: return %[[S]]
func.func @reduce_scales_rank0(%s: tensor<bf16>) -> tensor<bf16> {
  %0 = coat.reduce_scales %s : tensor<bf16> -> tensor<bf16>
  return %0 : tensor<bf16>
}

// -----

// CHECK-LABEL: func.func @reduce_scales_kept
// CHECK-NEXT: coat.reduce_scales
func.func @reduce_scales_kept(%s: tensor<1xbf16>) -> tensor<bf16> {
  %0 = coat.reduce_scales %s : tensor<1xbf16> -> tensor<bf16>
  return %0 : tensor<bf16>
}

// -----

// CHECK-LABEL: func.func @assemble_of_disassemble
// CHECK-SAME: (%[[Q:.*]]: !coat.qtensor
// CHECK-NEXT: return %[[Q]]
func.func @assemble_of_disassemble(%q: !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>)
    -> !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand> {
  %d, %s, %k, %c = coat.disassemble %q : !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>
  %0 = coat.assemble %d, %s, %k, %c : tensor<300xf8E4M3FN>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32> -> !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>
  return %0 : !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>
}

// -----

// Swapped k and c are a different tensor.
// CHECK-LABEL: func.func @assemble_of_disassemble_swapped
// CHECK: coat.disassemble
// CHECK: coat.assemble
func.func @assemble_of_disassemble_swapped(%q: !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>)
    -> !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand> {
  %d, %s, %k, %c = coat.disassemble %q : !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>
  %0 = coat.assemble %d, %s, %c, %k : tensor<300xf8E4M3FN>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32> -> !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>
  return %0 : !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>
}

// -----

// CHECK-LABEL: func.func @disassemble_of_assemble
// CHECK-SAME: (%[[D:.*]]: tensor<4x32xf8E4M3FN>, %[[S:.*]]: tensor<4x2xbf16>)
// CHECK-NEXT: return %[[D]], %[[S]]
func.func @disassemble_of_assemble(%d: tensor<4x32xf8E4M3FN>, %s: tensor<4x2xbf16>)
    -> (tensor<4x32xf8E4M3FN>, tensor<4x2xbf16>) {
  %q = coat.assemble %d, %s : tensor<4x32xf8E4M3FN>, tensor<4x2xbf16> -> !coat.qtensor<4x32xf8E4M3FN, per_group<16>, scale = bf16>
  %d2, %s2 = coat.disassemble %q : !coat.qtensor<4x32xf8E4M3FN, per_group<16>, scale = bf16>
  return %d2, %s2 : tensor<4x32xf8E4M3FN>, tensor<4x2xbf16>
}

// -----

// Re-quantizing dequantized codes re-derives the scales (codes from
// coat.assemble need not reach fp8max), so it is not folded.
// CHECK-LABEL: func.func @quantize_of_dequantize_kept
// CHECK-NEXT: coat.dequantize
// CHECK-NEXT: coat.quantize
func.func @quantize_of_dequantize_kept(%q: !coat.qtensor<256xf8E4M3FN, flat_group<128>>)
    -> !coat.qtensor<256xf8E4M3FN, flat_group<128>> {
  %0 = coat.dequantize %q : !coat.qtensor<256xf8E4M3FN, flat_group<128>> -> tensor<256xf32>
  %1 = coat.quantize %0 : tensor<256xf32> -> !coat.qtensor<256xf8E4M3FN, flat_group<128>>
  return %1 : !coat.qtensor<256xf8E4M3FN, flat_group<128>>
}
