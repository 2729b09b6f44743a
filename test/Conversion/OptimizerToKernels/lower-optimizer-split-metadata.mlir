// RUN: coat-opt %s --coat-lower-optimizer='target=gpu split-metadata=true' | FileCheck %s
// RUN: coat-opt %s --coat-lower-optimizer='target=gpu split-metadata=false' | FileCheck %s --check-prefix=BOTH
// The default splits.
// RUN: coat-opt %s --coat-lower-optimizer='target=gpu' | FileCheck %s --check-prefix=DEFAULT
// RUN: coat-opt %s --coat-lower-optimizer='target=cpu split-metadata=true' | FileCheck %s --check-prefix=CPU

// split-metadata: the lanes of a pair derive one moment's new group metadata
// each (m on even lanes, v on odd ones) from the statistics every lane holds,
// store it from lanes 0 and 1, and swap k, 1/c and -log2 s by one shuffle
// each.

!e4x = !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
!e5x = !coat.qtensor<?xf8E5M2, flat_group<128>, expand>
!e4 = !coat.qtensor<?xf8E4M3FN, flat_group<128>>

// CHECK-LABEL: gpu.func @same_formats(
// The statistics' butterflies end with the zero-skipping minimum of v.
// CHECK: gpu.shuffle  xor %{{.*}}, %c1_i32{{.*}}, %c32_i32{{.*}} : i32
// CHECK-NEXT: arith.minui
// CHECK: %[[LANE:.*]] = arith.index_cast %[[IN_GROUP:.*]] : index to i32
// CHECK: %[[PARITY:.*]] = arith.andi %[[LANE]], %[[ONE:.*]] : i32
// CHECK: %[[IS_V:.*]] = arith.cmpi eq, %[[PARITY]], %[[ONE]] : i32
// CHECK: %[[MAX:.*]] = arith.select %[[IS_V]], %{{.*}}, %{{.*}} : f32
// CHECK: %[[MIN:.*]] = arith.select %[[IS_V]], %{{.*}}, %{{.*}} : f32
// CHECK: arith.select %[[IS_V]], %{{.*}}, %{{.*}} : i1
// Equal formats: their constants need no selection.
// CHECK-NEXT: arith.constant 16.6147099 : f32
// CHECK-NEXT: arith.constant 8.80735492 : f32
// One derivation: two logarithms, three powers of two.
// CHECK-NEXT: math.log2 %[[MAX]] fastmath<afn> {coat.keep_subnormals}
// CHECK-NEXT: math.log2 %[[MIN]] fastmath<afn> {coat.keep_subnormals}
// CHECK-COUNT-3: math.exp2 %{{.*}} fastmath<afn> {coat.keep_subnormals}
// CHECK-NOT: math.log2
// Lane 0 stores m's scale, k and c (arguments 2-4), lane 1 v's (6-8).
// CHECK: scf.if %[[LEADER:.*]] {
// CHECK-NEXT: memref.store %[[S:.*]], %arg3[%[[GROUP:.*]]]
// CHECK: scf.if %[[LEADER]] {
// CHECK-NEXT: memref.store %[[K:.*]], %arg4[%[[GROUP]]]
// CHECK: scf.if %[[LEADER]] {
// CHECK-NEXT: memref.store %[[C:.*]], %arg5[%[[GROUP]]]
// CHECK: %[[IS_LANE1:.*]] = arith.cmpi eq, %[[IN_GROUP]], %c1{{(_[0-9]+)?}} : index
// CHECK: %[[SECOND:.*]] = arith.andi %{{.*}}, %[[IS_LANE1]] : i1
// CHECK: scf.if %[[SECOND]] {
// CHECK-NEXT: memref.store %[[S]], %arg7[%[[GROUP]]]
// CHECK: scf.if %[[SECOND]] {
// CHECK-NEXT: memref.store %[[K]], %arg8[%[[GROUP]]]
// CHECK: scf.if %[[SECOND]] {
// CHECK-NEXT: memref.store %[[C]], %arg9[%[[GROUP]]]
// The swap: the partner's k, then 1/c and -log2 s, each placed by parity.
// CHECK: %[[THEIR_K:.*]], %{{.*}} = gpu.shuffle  xor %[[K]], %c1_i32{{.*}}, %c32_i32{{.*}} : f32
// CHECK-NEXT: %[[M_K:.*]] = arith.select %[[IS_V]], %[[THEIR_K]], %[[K]] : f32
// CHECK-NEXT: %[[V_K:.*]] = arith.select %[[IS_V]], %[[K]], %[[THEIR_K]] : f32
// CHECK-COUNT-2: gpu.shuffle  xor %{{.*}}, %c1_i32{{.*}}, %c32_i32{{.*}} : f32
// The codes: m's eight elements with m's k, then v's with v's.
// CHECK-COUNT-8: math.fma %[[M_K]]
// CHECK-COUNT-8: math.fma %[[V_K]]
// CHECK-NOT: gpu.shuffle
// CHECK: gpu.return

// DEFAULT-LABEL: gpu.func @same_formats(
// DEFAULT: %[[LANE:.*]] = arith.index_cast %{{.*}} : index to i32
// DEFAULT: arith.andi %[[LANE]], %{{.*}} : i32
// DEFAULT-COUNT-2: math.log2 %{{.*}} fastmath<afn> {coat.keep_subnormals}
// DEFAULT-NOT: math.log2
// DEFAULT: gpu.shuffle  xor %{{.*}}, %c1_i32{{.*}}, %c32_i32{{.*}} : f32
// DEFAULT: gpu.return

// With the option off every lane derives both moments' metadata.
// BOTH-LABEL: gpu.func @same_formats(
// BOTH-COUNT-2: math.log2 %{{.*}} fastmath<afn> {coat.keep_subnormals}
// BOTH-NOT: arith.index_cast
// BOTH: math.log2 %{{.*}} fastmath<afn> {coat.keep_subnormals}
// BOTH-NEXT: math.log2 %{{.*}} fastmath<afn> {coat.keep_subnormals}
// BOTH: math.log2 %{{.*}} fastmath<afn> {coat.keep_subnormals}
// BOTH-NEXT: math.log2 %{{.*}} fastmath<afn> {coat.keep_subnormals}
// BOTH-NOT: gpu.shuffle  xor %{{.*}}, %c1_i32{{.*}}, %c32_i32{{.*}} : f32
// BOTH: gpu.return
func.func @same_formats(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !e4x, %v: !e4x,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xf32>, !e4x, !e4x) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xf32>, tensor<?xf32>, !e4x, !e4x
  return %p2, %m2, %v2 : tensor<?xf32>, !e4x, !e4x
}

// E4M3 m and E5M2 v: the odd lanes take E5M2's bounds, log2(57344^2 / 2)
// and log2 57344.
// CHECK-LABEL: gpu.func @mixed_formats(
// CHECK: %[[IS_V2:.*]] = arith.cmpi eq, %{{.*}}, %{{.*}} : i32
// CHECK-DAG: %[[M_UB:.*]] = arith.constant 16.6147099 : f32
// CHECK-DAG: %[[M_MAX:.*]] = arith.constant 8.80735492 : f32
// CHECK-DAG: %[[V_UB:.*]] = arith.constant 30.6147099 : f32
// CHECK-DAG: %[[V_MAX:.*]] = arith.constant 15.8073549 : f32
// CHECK: %[[UB:.*]] = arith.select %[[IS_V2]], %[[V_UB]], %[[M_UB]] : f32
// CHECK-NEXT: arith.select %[[IS_V2]], %[[V_MAX]], %[[M_MAX]] : f32
// CHECK: arith.divf %[[UB]], %{{.*}} fastmath<afn> {coat.keep_subnormals}
func.func @mixed_formats(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !e4x, %v: !e5x,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xf32>, !e4x, !e5x) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xf32>, tensor<?xf32>, !e4x, !e5x
  return %p2, %m2, %v2 : tensor<?xf32>, !e4x, !e5x
}

// A plain v has nothing to split with m: the option leaves the kernel as is.
// CHECK-LABEL: gpu.func @plain_v(
// CHECK-NOT: arith.cmpi eq, %{{.*}}, %c1{{(_[0-9]+)?}} : index
// CHECK: gpu.return
func.func @plain_v(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !e4x, %v: !e4,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xf32>, !e4x, !e4) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xf32>, tensor<?xf32>, !e4x, !e4
  return %p2, %m2, %v2 : tensor<?xf32>, !e4x, !e4
}

// The CPU twin holds a whole group in one lane: nothing to split.
// CPU-LABEL: func.func @same_formats(
// CPU-NOT: gpu.shuffle
// CPU: return
