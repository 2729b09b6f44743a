// REQUIRES: ptxas
// The optimizer's occupancy hints merge with the caller's options key by key:
// bf16-min-ctas given replaces its hint (6) for bf16 parameters, and the
// hint for f32 parameters (min-ctas=5), not given, stays.
// RUN: rm -rf %t && mkdir -p %t
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-compile-artifact{dir=%t cpu=false toolkit=%cuda_toolkit optimizer={bf16-min-ctas=2}})' -o /dev/null
// RUN: FileCheck %s < %t/coat_kernels.ptx

// CHECK-LABEL: .entry adamw_f32(
// CHECK: .minnctapersm 5
// CHECK-LABEL: .entry adamw_bf16(
// CHECK: .minnctapersm 2
func.func @adamw_f32(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xf32>, tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
  return %p2, %m2, %v2 : tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
}

func.func @adamw_bf16(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, %v: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xbf16>, tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
  return %p2, %m2, %v2 : tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
}
