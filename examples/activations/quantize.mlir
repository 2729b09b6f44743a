// Activation quantization kernels (COAT.md §3): one kernel-spec function per
// configuration. `coat-lower-activations` turns each into a GPU kernel (and
// a CPU twin) of the same name over a [rows, cols] tensor; the ABI is in
// docs/manifest.md.
//
//   (a) 1xG per-group quantize (scales from the group maxima)
//   (b) per-tensor quantize with a given scale; the scale comes from the
//       per-group maxima (coat.absmax per_group<G>) reduced on the host
//   (c) per-tensor quantize + transpose (q and q^T from one read), and the
//       same returning only q^T (a wgrad operand derived again in the
//       backward reads no row-major codes)
//   (d) dequantize, per-group and per-tensor
//   (e) 128x128 block quantize with f32 scales (DeepSeek-style weights,
//       COAT.md §4.4), alone and with the transposed copy (q^T's block
//       scales are the same matrix, transposed)
//   (f) requantize: 1xG codes to a per-tensor copy with a given scale (the
//       maximum of the group scales), the values staying in registers


func.func @coat_quantize_bf16_e4m3_g16_sbf16(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
}

func.func @coat_quantize_bf16_e4m3_g32_sbf16(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<32>, scale = bf16> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_group<32>, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<32>, scale = bf16>
}

func.func @coat_quantize_bf16_e4m3_g64_sbf16(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<64>, scale = bf16> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_group<64>, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<64>, scale = bf16>
}

func.func @coat_quantize_bf16_e4m3_g128_sbf16(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16>
}

func.func @coat_quantize_f32_e4m3_g16_sbf16(%x: tensor<?x?xf32>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> {
  %q = coat.quantize %x : tensor<?x?xf32> -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
}

func.func @coat_quantize_f32_e4m3_g128_sbf16(%x: tensor<?x?xf32>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16> {
  %q = coat.quantize %x : tensor<?x?xf32> -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16>
}

func.func @coat_quantize_bf16_e5m2_g16_sbf16(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E5M2, per_group<16>, scale = bf16> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E5M2, per_group<16>, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E5M2, per_group<16>, scale = bf16>
}

func.func @coat_quantize_bf16_e4m3_g128_sf32(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<128>>
}

func.func @coat_quantize_f32_e5m2_g32_sf32(%x: tensor<?x?xf32>) -> !coat.qtensor<?x?xf8E5M2, per_group<32>> {
  %q = coat.quantize %x : tensor<?x?xf32> -> !coat.qtensor<?x?xf8E5M2, per_group<32>>
  return %q : !coat.qtensor<?x?xf8E5M2, per_group<32>>
}

func.func @coat_absmax_bf16_g16(%x: tensor<?x?xbf16>) -> tensor<?x?xf32> {
  %a = coat.absmax %x, per_group<16> : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %a : tensor<?x?xf32>
}

func.func @coat_absmax_f32_g16(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %a = coat.absmax %x, per_group<16> : tensor<?x?xf32> -> tensor<?x?xf32>
  return %a : tensor<?x?xf32>
}

func.func @coat_quantize_pt_bf16_e4m3_sbf16(%x: tensor<?x?xbf16>, %s: tensor<bf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> {
  %q = coat.quantize %x scale %s : tensor<?x?xbf16>, tensor<bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
}

func.func @coat_quantize_pt_bf16_e5m2_sbf16(%x: tensor<?x?xbf16>, %s: tensor<bf16>) -> !coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16> {
  %q = coat.quantize %x scale %s : tensor<?x?xbf16>, tensor<bf16> -> !coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16>
}

func.func @coat_quantize_pt_f32_e4m3_sf32(%x: tensor<?x?xf32>, %s: tensor<f32>) -> !coat.qtensor<?x?xf8E4M3FN, per_tensor> {
  %q = coat.quantize %x scale %s : tensor<?x?xf32>, tensor<f32> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor>
}

func.func @coat_quantize_t_bf16_e4m3_sbf16(%x: tensor<?x?xbf16>, %s: tensor<bf16>) -> (!coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>) {
  %q = coat.quantize %x scale %s : tensor<?x?xbf16>, tensor<bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  return %q, %t : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
}

func.func @coat_quantize_t_bf16_e5m2_sbf16(%x: tensor<?x?xbf16>, %s: tensor<bf16>) -> (!coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16>) {
  %q = coat.quantize %x scale %s : tensor<?x?xbf16>, tensor<bf16> -> !coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16>
  return %q, %t : !coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16>
}

func.func @coat_quantize_t_f32_e4m3_sf32(%x: tensor<?x?xf32>, %s: tensor<f32>) -> (!coat.qtensor<?x?xf8E4M3FN, per_tensor>, !coat.qtensor<?x?xf8E4M3FN, per_tensor>) {
  %q = coat.quantize %x scale %s : tensor<?x?xf32>, tensor<f32> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor>
  return %q, %t : !coat.qtensor<?x?xf8E4M3FN, per_tensor>, !coat.qtensor<?x?xf8E4M3FN, per_tensor>
}

func.func @coat_quantize_t_only_bf16_e4m3_sbf16(%x: tensor<?x?xbf16>, %s: tensor<bf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> {
  %q = coat.quantize %x scale %s : tensor<?x?xbf16>, tensor<bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  return %t : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
}

func.func @coat_quantize_t_only_bf16_e5m2_sbf16(%x: tensor<?x?xbf16>, %s: tensor<bf16>) -> !coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16> {
  %q = coat.quantize %x scale %s : tensor<?x?xbf16>, tensor<bf16> -> !coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16>
  return %t : !coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16>
}

func.func @coat_quantize_t_only_f32_e4m3_sf32(%x: tensor<?x?xf32>, %s: tensor<f32>) -> !coat.qtensor<?x?xf8E4M3FN, per_tensor> {
  %q = coat.quantize %x scale %s : tensor<?x?xf32>, tensor<f32> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor>
  return %t : !coat.qtensor<?x?xf8E4M3FN, per_tensor>
}

func.func @coat_dequantize_e4m3_g16_sbf16_bf16(%q: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>) -> tensor<?x?xbf16> {
  %x = coat.dequantize %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xbf16>
  return %x : tensor<?x?xbf16>
}

func.func @coat_dequantize_e4m3_g128_sf32_f32(%q: !coat.qtensor<?x?xf8E4M3FN, per_group<128>>) -> tensor<?x?xf32> {
  %x = coat.dequantize %q : !coat.qtensor<?x?xf8E4M3FN, per_group<128>> -> tensor<?x?xf32>
  return %x : tensor<?x?xf32>
}

func.func @coat_dequantize_e5m2_g32_sbf16_f32(%q: !coat.qtensor<?x?xf8E5M2, per_group<32>, scale = bf16>) -> tensor<?x?xf32> {
  %x = coat.dequantize %q : !coat.qtensor<?x?xf8E5M2, per_group<32>, scale = bf16> -> tensor<?x?xf32>
  return %x : tensor<?x?xf32>
}

func.func @coat_dequantize_e4m3_pt_sbf16_bf16(%q: !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>) -> tensor<?x?xbf16> {
  %x = coat.dequantize %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> -> tensor<?x?xbf16>
  return %x : tensor<?x?xbf16>
}

func.func @coat_dequantize_e5m2_pt_sf32_f32(%q: !coat.qtensor<?x?xf8E5M2, per_tensor>) -> tensor<?x?xf32> {
  %x = coat.dequantize %q : !coat.qtensor<?x?xf8E5M2, per_tensor> -> tensor<?x?xf32>
  return %x : tensor<?x?xf32>
}

func.func @coat_quantize_b128_bf16_e4m3_sf32(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
}

func.func @coat_quantize_b128_f32_e4m3_sf32(%x: tensor<?x?xf32>) -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>> {
  %q = coat.quantize %x : tensor<?x?xf32> -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
}

func.func @coat_quantize_b128_bf16_e5m2_sbf16(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E5M2, per_block<128x128>, scale = bf16> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E5M2, per_block<128x128>, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E5M2, per_block<128x128>, scale = bf16>
}

func.func @coat_quantize_tb128_bf16_e4m3_sf32(%x: tensor<?x?xbf16>) -> (!coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>, !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>) {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>> -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
  return %q, %t : !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>, !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
}

func.func @coat_quantize_tb128_f32_e4m3_sf32(%x: tensor<?x?xf32>) -> (!coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>, !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>) {
  %q = coat.quantize %x : tensor<?x?xf32> -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>> -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
  return %q, %t : !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>, !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
}

func.func @coat_requantize_e4m3_g16_sbf16(%q: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %s: tensor<bf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> {
  %x = coat.dequantize %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xf32>
  %r = coat.quantize %x scale %s : tensor<?x?xf32>, tensor<bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  return %r : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
}

func.func @coat_requantize_e5m2_g128_sf32(%q: !coat.qtensor<?x?xf8E5M2, per_group<128>>, %s: tensor<f32>) -> !coat.qtensor<?x?xf8E5M2, per_tensor> {
  %x = coat.dequantize %q : !coat.qtensor<?x?xf8E5M2, per_group<128>> -> tensor<?x?xf32>
  %r = coat.quantize %x scale %s : tensor<?x?xf32>, tensor<f32> -> !coat.qtensor<?x?xf8E5M2, per_tensor>
  return %r : !coat.qtensor<?x?xf8E5M2, per_tensor>
}
