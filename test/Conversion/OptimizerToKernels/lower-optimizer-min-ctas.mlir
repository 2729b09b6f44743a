// The occupancy request of the step kernels: min-ctas for all of them, and
// bf16-min-ctas in its place for those of bf16 parameters.
// RUN: coat-opt %s --coat-lower-optimizer="target=gpu" | FileCheck %s --check-prefix=NONE
// RUN: coat-opt %s --coat-lower-optimizer="target=gpu min-ctas=5" | FileCheck %s --check-prefix=ALL
// RUN: coat-opt %s --coat-lower-optimizer="target=gpu min-ctas=5 bf16-min-ctas=6" | FileCheck %s --check-prefix=BF16
// RUN: coat-opt %s --coat-lower-optimizer="target=gpu bf16-min-ctas=6" | FileCheck %s --check-prefix=ONLY
// RUN: not coat-opt %s --coat-lower-optimizer="target=gpu bf16-min-ctas=33" 2>&1 | FileCheck %s --check-prefix=RANGE

// NONE-NOT: minctasm
// ALL-LABEL: gpu.func @f32_params(
// ALL-SAME: nvvm.minctasm = 5 : i32
// ALL-LABEL: gpu.func @bf16_params(
// ALL-SAME: nvvm.minctasm = 5 : i32
// BF16-LABEL: gpu.func @f32_params(
// BF16-SAME: nvvm.minctasm = 5 : i32
// BF16-LABEL: gpu.func @bf16_params(
// BF16-SAME: coat.min_ctas_unless_spilling
// BF16-SAME: nvvm.minctasm = 6 : i32
// ONLY-LABEL: gpu.func @f32_params(
// ONLY-NOT: minctasm
// ONLY-LABEL: gpu.func @bf16_params(
// ONLY-SAME: nvvm.minctasm = 6 : i32
// RANGE: bf16-min-ctas must be in [0, 32], got 33

!m = !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
!v = !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>

func.func @f32_params(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !m, %v: !v,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xf32>, !m, !v) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xf32>, tensor<?xf32>, !m, !v
  return %p2, %m2, %v2 : tensor<?xf32>, !m, !v
}

func.func @bf16_params(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !m, %v: !v,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xbf16>, !m, !v) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xbf16>, tensor<?xbf16>, !m, !v
  return %p2, %m2, %v2 : tensor<?xbf16>, !m, !v
}
