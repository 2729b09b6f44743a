// coat-lower-optimizer{soft-exp2}: the requantization of the chosen
// expanded moments takes its ex2 on the FMA units (the op is marked for
// coat-expand-soft-exp2); the dequantization's ex2, which may give
// subnormals, stays on the SFU. GPU and fixed mode only.
// RUN: coat-opt %s --coat-lower-optimizer='target=gpu soft-exp2=m' | FileCheck %s --check-prefix=M
// RUN: coat-opt %s --coat-lower-optimizer='target=gpu soft-exp2=both' | FileCheck %s --check-prefix=BOTH
// RUN: coat-opt %s --coat-lower-optimizer='target=gpu' | FileCheck %s --check-prefix=NONE
// RUN: coat-opt %s --coat-lower-optimizer='target=cpu soft-exp2=both' | FileCheck %s --check-prefix=NONE
// RUN: not coat-opt %s --coat-lower-optimizer='target=gpu soft-exp2=w' 2>&1 | FileCheck %s --check-prefix=BAD

!e4x = !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
!e4 = !coat.qtensor<?xf8E4M3FN, flat_group<128>>

// 16 elements a lane: m's 16 requantization ex2 marked, then v's not.
// M-LABEL: @expanded(
// M-SAME: soft_exp2 = "m"
// M: math.exp2 %{{.*}} fastmath<afn> {coat.keep_subnormals} : f32
// M-NOT: coat.soft_exp2
// M-COUNT-16: math.exp2 %{{.*}} fastmath<afn> {coat.soft_exp2} : f32
// M-NOT: coat.soft_exp2
// M: math.exp2 %{{.*}} fastmath<afn> : f32
// M-NOT: coat.soft_exp2
// M-LABEL: @plain(
// M-SAME: soft_exp2 = "none"
// M-NOT: coat.soft_exp2
// BOTH-LABEL: @expanded(
// BOTH-SAME: soft_exp2 = "both"
// BOTH-COUNT-32: math.exp2 %{{.*}} fastmath<afn> {coat.soft_exp2} : f32
// BOTH-NOT: coat.soft_exp2
// NONE-NOT: {coat.soft_exp2}
// NONE: soft_exp2 = "none"
// NONE-NOT: {coat.soft_exp2}
// BAD: error: soft-exp2 must be none, m, v or both, got 'w'
func.func @expanded(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !e4x, %v: !e4x,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xf32>, !e4x, !e4x) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xf32>, tensor<?xf32>, !e4x, !e4x
  return %p2, %m2, %v2 : tensor<?xf32>, !e4x, !e4x
}

// Plain moments have no ex2 to move.
func.func @plain(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !e4, %v: !e4,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xf32>, !e4, !e4) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xf32>, tensor<?xf32>, !e4, !e4
  return %p2, %m2, %v2 : tensor<?xf32>, !e4, !e4
}
