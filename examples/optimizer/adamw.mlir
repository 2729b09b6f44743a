// FP8 AdamW kernels: one kernel-spec function per configuration.
// `coat-lower-optimizer` turns each into a GPU kernel (or its CPU twin)
// of the same name that updates p, m and v in place.

func.func @coat_adamw_f32_e4m3x_e4m3x_g128(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xf32>, tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
  return %p2, %m2, %v2 : tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
}

func.func @coat_adamw_f32_e4m3_e4m3_g128(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>>, %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>>, !coat.qtensor<?xf8E4M3FN, flat_group<128>>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xf32>, tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>>, !coat.qtensor<?xf8E4M3FN, flat_group<128>>
  return %p2, %m2, %v2 : tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>>, !coat.qtensor<?xf8E4M3FN, flat_group<128>>
}

func.func @coat_adamw_f32_e4m3x_e5m2x_g128(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, %v: !coat.qtensor<?xf8E5M2, flat_group<128>, expand>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E5M2, flat_group<128>, expand>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xf32>, tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E5M2, flat_group<128>, expand>
  return %p2, %m2, %v2 : tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E5M2, flat_group<128>, expand>
}

func.func @coat_adamw_bf16_e4m3x_e4m3x_g128(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xbf16>, tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
  return %p2, %m2, %v2 : tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
}

// The official kernel's numerics, quirks included (docs/optimizer-numerics.md
// §4), for fidelity checks against COAT.
func.func @coat_adamw_f32_e4m3x_e4m3x_g128_reference(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      {mode = #coat.optimizer_mode<reference>}
      : tensor<?xf32>, tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
  return %p2, %m2, %v2 : tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
}

// Stochastic rounding (docs/optimizer-numerics.md §5): bf16 parameters
// (alone, or with the moments' codes), and the codes of an f32 parameter's
// moments. The random bits come from the seed argument.
func.func @coat_adamw_bf16_e4m3x_e4m3x_g128_sr_param(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32, %seed: i64)
    -> (tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd seed %seed {stochastic_param}
      : tensor<?xbf16>, tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
  return %p2, %m2, %v2 : tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
}

func.func @coat_adamw_bf16_e4m3x_e4m3x_g128_sr(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32, %seed: i64)
    -> (tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd seed %seed {stochastic_param, stochastic_moments}
      : tensor<?xbf16>, tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
  return %p2, %m2, %v2 : tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
}

func.func @coat_adamw_f32_e4m3x_e5m2x_g128_sr_moments(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, %v: !coat.qtensor<?xf8E5M2, flat_group<128>, expand>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32, %seed: i64)
    -> (tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E5M2, flat_group<128>, expand>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd seed %seed {stochastic_moments}
      : tensor<?xf32>, tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E5M2, flat_group<128>, expand>
  return %p2, %m2, %v2 : tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E5M2, flat_group<128>, expand>
}

// A gradient scale (global gradient-norm clipping, FP8AdamW.clip_grad_norm_):
// the kernel multiplies each gradient by the f32 in `grad_scale` as it loads
// it. The configurations FP8AdamW uses most, the official numerics and
// stochastic rounding (of bf16 parameters, alone or with the moments); for
// the others FP8AdamW scales the gradient buffer before the launch.
func.func @coat_adamw_f32_e4m3x_e4m3x_g128_gscale(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32, %s: tensor<f32>)
    -> (tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd grad_scale %s
      : tensor<?xf32>, tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, tensor<f32>
  return %p2, %m2, %v2 : tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
}

func.func @coat_adamw_f32_e4m3_e4m3_g128_gscale(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>>, %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32, %s: tensor<f32>)
    -> (tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>>, !coat.qtensor<?xf8E4M3FN, flat_group<128>>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd grad_scale %s
      : tensor<?xf32>, tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>>, !coat.qtensor<?xf8E4M3FN, flat_group<128>>, tensor<f32>
  return %p2, %m2, %v2 : tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>>, !coat.qtensor<?xf8E4M3FN, flat_group<128>>
}

func.func @coat_adamw_bf16_e4m3x_e4m3x_g128_gscale(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32, %s: tensor<f32>)
    -> (tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd grad_scale %s
      : tensor<?xbf16>, tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, tensor<f32>
  return %p2, %m2, %v2 : tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
}

func.func @coat_adamw_f32_e4m3x_e4m3x_g128_reference_gscale(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32, %s: tensor<f32>)
    -> (tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd grad_scale %s
      {mode = #coat.optimizer_mode<reference>}
      : tensor<?xf32>, tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, tensor<f32>
  return %p2, %m2, %v2 : tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
}

func.func @coat_adamw_bf16_e4m3x_e4m3x_g128_sr_gscale(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32, %seed: i64, %s: tensor<f32>)
    -> (tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd seed %seed grad_scale %s {stochastic_param, stochastic_moments}
      : tensor<?xbf16>, tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, tensor<f32>
  return %p2, %m2, %v2 : tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
}

func.func @coat_adamw_bf16_e4m3x_e4m3x_g128_sr_param_gscale(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32, %seed: i64, %s: tensor<f32>)
    -> (tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd seed %seed grad_scale %s {stochastic_param}
      : tensor<?xbf16>, tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, tensor<f32>
  return %p2, %m2, %v2 : tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
}

// bf16 parameters with f32 master copies: the step updates the master and
// writes the parameter as the master rounded to nearest.
func.func @coat_adamw_bf16_e4m3x_e4m3x_g128_master(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32, %w: tensor<?xf32>)
    -> (tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, tensor<?xf32>) {
  %p2, %m2, %v2, %w2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd master %w
      : tensor<?xbf16>, tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand> master tensor<?xf32> -> tensor<?xf32>
  return %p2, %m2, %v2, %w2 : tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, tensor<?xf32>
}

func.func @coat_adamw_bf16_e4m3x_e4m3x_g128_master_gscale(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32, %s: tensor<f32>, %w: tensor<?xf32>)
    -> (tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, tensor<?xf32>) {
  %p2, %m2, %v2, %w2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd grad_scale %s master %w
      : tensor<?xbf16>, tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, tensor<f32> master tensor<?xf32> -> tensor<?xf32>
  return %p2, %m2, %v2, %w2 : tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, tensor<?xf32>
}
