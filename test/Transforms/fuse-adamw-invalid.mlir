// coat-fuse-adamw reports a chain the fused step does not take, once and on
// the update, instead of re-creating an invalid coat.adamw_step until the
// rewrite driver gives up.
// RUN: coat-opt %s -coat-fuse-adamw -split-input-file -verify-diagnostics

// The second moment is per-tensor; the fused step takes flat_group moments.
func.func @per_tensor_v(%p: tensor<300xf32>, %g: tensor<300xf32>,
                        %qm: !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>,
                        %qv: !coat.qtensor<300xf8E4M3FN, per_tensor>,
                        %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<300xf32>, !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>,
        !coat.qtensor<300xf8E4M3FN, per_tensor>) {
  %m = coat.dequantize %qm : !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand> -> tensor<300xf32>
  %v = coat.dequantize %qv : !coat.qtensor<300xf8E4M3FN, per_tensor> -> tensor<300xf32>
  // expected-error @+1 {{'coat.adamw_update' op coat-fuse-adamw: the dequantize -> adamw_update -> quantize chain does not fuse into coat.adamw_step: 'coat.adamw_step' op v must use flat_group<G> scaling, got per_tensor}}
  %p2, %m2, %v2 = coat.adamw_update %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<300xf32>, tensor<300xf32>, tensor<300xf32>
  %qm2 = coat.quantize %m2 {expand_min = 8 : i64} : tensor<300xf32> -> !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>
  %qv2 = coat.quantize %v2 {expand_min = 8 : i64} : tensor<300xf32> -> !coat.qtensor<300xf8E4M3FN, per_tensor>
  return %p2, %qm2, %qv2 : tensor<300xf32>, !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<300xf8E4M3FN, per_tensor>
}

