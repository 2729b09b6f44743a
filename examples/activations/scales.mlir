// The second stage of group scaling (COAT.md §3.1): the per-tensor scale from
// the partial maxima a producer wrote, computed on the device in one kernel
// (`coat-lower-reduce-scales`). The arithmetic after the reduction is the one
// coat-group-scaling writes: (max + eps) / fp8max, rounded to the scale type.

func.func @coat_scale_from_maxima_e4m3_sbf16(%p: tensor<?xf32>) -> tensor<bf16> {
  %m = coat.reduce_scales %p : tensor<?xf32> -> tensor<f32>
  %eps = arith.constant dense<1.0e-10> : tensor<f32>
  %a = arith.addf %m, %eps : tensor<f32>
  %fp8max = arith.constant dense<448.0> : tensor<f32>
  %s = arith.divf %a, %fp8max : tensor<f32>
  %b = arith.truncf %s : tensor<f32> to tensor<bf16>
  return %b : tensor<bf16>
}

func.func @coat_scale_from_maxima_e5m2_sbf16(%p: tensor<?xf32>) -> tensor<bf16> {
  %m = coat.reduce_scales %p : tensor<?xf32> -> tensor<f32>
  %eps = arith.constant dense<1.0e-10> : tensor<f32>
  %a = arith.addf %m, %eps : tensor<f32>
  %fp8max = arith.constant dense<57344.0> : tensor<f32>
  %s = arith.divf %a, %fp8max : tensor<f32>
  %b = arith.truncf %s : tensor<f32> to tensor<bf16>
  return %b : tensor<bf16>
}

func.func @coat_scale_from_maxima_e4m3_sf32(%p: tensor<?xf32>) -> tensor<f32> {
  %m = coat.reduce_scales %p : tensor<?xf32> -> tensor<f32>
  %eps = arith.constant dense<1.0e-10> : tensor<f32>
  %a = arith.addf %m, %eps : tensor<f32>
  %fp8max = arith.constant dense<448.0> : tensor<f32>
  %s = arith.divf %a, %fp8max : tensor<f32>
  return %s : tensor<f32>
}

// The maximum of bf16 group scales (COAT's torch.max over the scale tensor).
func.func @coat_max_of_scales_bf16(%s: tensor<?xbf16>) -> tensor<bf16> {
  %m = coat.reduce_scales %s : tensor<?xbf16> -> tensor<bf16>
  return %m : tensor<bf16>
}

// The same over the group scales of a 1xG tensor, read in place (the scale
// of a per-tensor copy requantized from it, as coat-outline-kernels cuts
// coat.requantize).
func.func @coat_max_of_group_scales_e4m3_g16_sbf16(%q: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>) -> tensor<bf16> {
  %codes, %scales = coat.disassemble %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  %m = coat.reduce_scales %scales : tensor<?x?xbf16> -> tensor<bf16>
  return %m : tensor<bf16>
}
