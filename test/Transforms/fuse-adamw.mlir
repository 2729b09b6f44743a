// RUN: coat-opt %s -coat-fuse-adamw -split-input-file | FileCheck %s
// RUN: coat-opt %s -coat-fuse-adamw=mode=reference -split-input-file | FileCheck %s --check-prefix=REF
// RUN: not coat-opt %s -coat-fuse-adamw=mode=exact -split-input-file 2>&1 | FileCheck %s --check-prefix=BADMODE

// BADMODE: coat-fuse-adamw: unknown mode 'exact' (expected 'fixed' or 'reference')

// The whole chain becomes one adamw_step; nothing of it is left.
// CHECK-LABEL: func.func @fuse
// CHECK-SAME: (%[[P:[^:]*]]: tensor<300xf32>, %[[G:[^:]*]]: tensor<300xf32>, %[[QM:[^:]*]]: !coat.qtensor{{.*}}, %[[QV:[^:]*]]: !coat.qtensor
// CHECK-NEXT: %[[NP:.*]], %[[NM:.*]], %[[NV:.*]] = coat.adamw_step %[[P]], %[[G]], %[[QM]], %[[QV]], {{.*}} {expand_min = 8 : i64} : tensor<300xf32>, tensor<300xf32>, !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<300xf8E4M3FN, flat_group<128>>
// CHECK-NEXT: return %[[NP]], %[[NM]], %[[NV]]
// REF-LABEL: func.func @fuse
// REF: coat.adamw_step {{.*}}mode = #coat.optimizer_mode<reference>
func.func @fuse(%p: tensor<300xf32>, %g: tensor<300xf32>,
                %qm: !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>,
                %qv: !coat.qtensor<300xf8E4M3FN, flat_group<128>>,
                %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<300xf32>, !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>,
        !coat.qtensor<300xf8E4M3FN, flat_group<128>>) {
  %m = coat.dequantize %qm : !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand> -> tensor<300xf32>
  %v = coat.dequantize %qv : !coat.qtensor<300xf8E4M3FN, flat_group<128>> -> tensor<300xf32>
  %p2, %m2, %v2 = coat.adamw_update %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<300xf32>, tensor<300xf32>, tensor<300xf32>
  %qm2 = coat.quantize %m2 {expand_min = 8 : i64} : tensor<300xf32> -> !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>
  %qv2 = coat.quantize %v2 {expand_min = 8 : i64} : tensor<300xf32> -> !coat.qtensor<300xf8E4M3FN, flat_group<128>>
  return %p2, %qm2, %qv2 : tensor<300xf32>, !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<300xf8E4M3FN, flat_group<128>>
}

// -----

// The update's gradient scale becomes the step's.
// CHECK-LABEL: func.func @fuse_grad_scale
// CHECK-SAME: %[[S:[^:]*]]: tensor<f32>)
// CHECK-NEXT: coat.adamw_step {{.*}} grad_scale %[[S]] : tensor<256xf32>, tensor<256xbf16>, {{.*}}, tensor<f32>
// CHECK-NEXT: return
func.func @fuse_grad_scale(%p: tensor<256xf32>, %g: tensor<256xbf16>,
                           %qm: !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand>,
                           %qv: !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand>,
                           %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32,
                           %s: tensor<f32>)
    -> (tensor<256xf32>, !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand>,
        !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand>) {
  %m = coat.dequantize %qm : !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand> -> tensor<256xf32>
  %v = coat.dequantize %qv : !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand> -> tensor<256xf32>
  %p2, %m2, %v2 = coat.adamw_update %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd grad_scale %s
      : tensor<256xf32>, tensor<256xbf16>, tensor<256xf32>, tensor<f32>
  %qm2 = coat.quantize %m2 : tensor<256xf32> -> !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand>
  %qv2 = coat.quantize %v2 : tensor<256xf32> -> !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand>
  return %p2, %qm2, %qv2 : tensor<256xf32>, !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand>
}

// -----

// The f32 first moment has another user: no fusion.
// CHECK-LABEL: func.func @extra_user
// CHECK-NOT: coat.adamw_step
// CHECK: coat.adamw_update
// CHECK: coat.quantize
// CHECK: coat.quantize
func.func @extra_user(%p: tensor<256xf32>, %g: tensor<256xf32>,
                      %qm: !coat.qtensor<256xf8E4M3FN, flat_group<128>>,
                      %qv: !coat.qtensor<256xf8E4M3FN, flat_group<128>>,
                      %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<256xf32>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>,
        !coat.qtensor<256xf8E4M3FN, flat_group<128>>, tensor<256xf32>) {
  %m = coat.dequantize %qm : !coat.qtensor<256xf8E4M3FN, flat_group<128>> -> tensor<256xf32>
  %v = coat.dequantize %qv : !coat.qtensor<256xf8E4M3FN, flat_group<128>> -> tensor<256xf32>
  %p2, %m2, %v2 = coat.adamw_update %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<256xf32>, tensor<256xf32>, tensor<256xf32>
  %qm2 = coat.quantize %m2 : tensor<256xf32> -> !coat.qtensor<256xf8E4M3FN, flat_group<128>>
  %qv2 = coat.quantize %v2 : tensor<256xf32> -> !coat.qtensor<256xf8E4M3FN, flat_group<128>>
  return %p2, %qm2, %qv2, %m2 : tensor<256xf32>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>, tensor<256xf32>
}

// -----

// The moment is re-quantized to another type (E5M2): no fusion.
// CHECK-LABEL: func.func @mismatched_type
// CHECK-NOT: coat.adamw_step
// CHECK: coat.adamw_update
func.func @mismatched_type(%p: tensor<256xf32>, %g: tensor<256xf32>,
                           %qm: !coat.qtensor<256xf8E4M3FN, flat_group<128>>,
                           %qv: !coat.qtensor<256xf8E4M3FN, flat_group<128>>,
                           %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<256xf32>, !coat.qtensor<256xf8E5M2, flat_group<128>>,
        !coat.qtensor<256xf8E4M3FN, flat_group<128>>) {
  %m = coat.dequantize %qm : !coat.qtensor<256xf8E4M3FN, flat_group<128>> -> tensor<256xf32>
  %v = coat.dequantize %qv : !coat.qtensor<256xf8E4M3FN, flat_group<128>> -> tensor<256xf32>
  %p2, %m2, %v2 = coat.adamw_update %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<256xf32>, tensor<256xf32>, tensor<256xf32>
  %qm2 = coat.quantize %m2 : tensor<256xf32> -> !coat.qtensor<256xf8E5M2, flat_group<128>>
  %qv2 = coat.quantize %v2 : tensor<256xf32> -> !coat.qtensor<256xf8E4M3FN, flat_group<128>>
  return %p2, %qm2, %qv2 : tensor<256xf32>, !coat.qtensor<256xf8E5M2, flat_group<128>>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>
}

// -----

// A quantization with a given scale is not the derived-scale re-quantization
// of the fused step: no fusion.
// CHECK-LABEL: func.func @given_scale
// CHECK-NOT: coat.adamw_step
// CHECK: coat.adamw_update
// CHECK: coat.quantize %{{.*}} scale
func.func @given_scale(%p: tensor<256xf32>, %g: tensor<256xf32>,
                       %qm: !coat.qtensor<256xf8E4M3FN, per_tensor>,
                       %qv: !coat.qtensor<256xf8E4M3FN, flat_group<128>>,
                       %s: tensor<f32>,
                       %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<256xf32>, !coat.qtensor<256xf8E4M3FN, per_tensor>,
        !coat.qtensor<256xf8E4M3FN, flat_group<128>>) {
  %m = coat.dequantize %qm : !coat.qtensor<256xf8E4M3FN, per_tensor> -> tensor<256xf32>
  %v = coat.dequantize %qv : !coat.qtensor<256xf8E4M3FN, flat_group<128>> -> tensor<256xf32>
  %p2, %m2, %v2 = coat.adamw_update %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<256xf32>, tensor<256xf32>, tensor<256xf32>
  %qm2 = coat.quantize %m2 scale %s : tensor<256xf32>, tensor<f32> -> !coat.qtensor<256xf8E4M3FN, per_tensor>
  %qv2 = coat.quantize %v2 : tensor<256xf32> -> !coat.qtensor<256xf8E4M3FN, flat_group<128>>
  return %p2, %qm2, %qv2 : tensor<256xf32>, !coat.qtensor<256xf8E4M3FN, per_tensor>, !coat.qtensor<256xf8E4M3FN, flat_group<128>>
}
