// A pointwise result the program returns (`coat.finite_flag`) gets an i32
// flag argument `finite_<result>` bound to finite(out<i>); each lane
// compares what it stores (a tail lane only its elements inside the
// tensor) and sets the flag where one is NaN or rounds to infinity.
// RUN: coat-opt %s -split-input-file -coat-lower-pointwise | FileCheck %s
// RUN: coat-opt %s -split-input-file -coat-lower-pointwise=target=cpu | FileCheck %s --check-prefix=CPU

// The sum is flagged, its 1x16 FP8 copy is not.
// CHECK-LABEL: gpu.func @residual(
// CHECK-SAME: memref<?xi32>
// CHECK-SAME: {bind = ["finite(out0)"], dtype = "i32", extent = 1 : i64, kind = "memref", name = "finite_sum"}
// CHECK-NOT: finite_sum_q
// CHECK: arith.constant 3.39617753E+38 : f32
// CHECK: arith.cmpf uge
// CHECK: memref.store %{{.*}} : memref<?xi32>
// CPU-LABEL: func.func @residual(
// CPU: arith.cmpf uge
// CPU: memref.store %{{.*}} : memref<?xi32>
func.func @residual(%a: tensor<?x64xbf16>, %b: tensor<?x64xbf16>)
    -> (tensor<?x64xbf16> {coat.finite_flag}, !coat.qtensor<?x64xf8E4M3FN, per_group<16>>) {
  %s, %q = coat.residual_add %a, %b : tensor<?x64xbf16>, tensor<?x64xbf16>
      -> tensor<?x64xbf16>, !coat.qtensor<?x64xf8E4M3FN, per_group<16>>
  return %s, %q : tensor<?x64xbf16>, !coat.qtensor<?x64xf8E4M3FN, per_group<16>>
}

// -----

// In place, the heads a rotary kernel does not rotate are part of the
// result: a flagged kernel's lanes visit all 3 heads (those past the
// rotated 2 select their input), an unflagged one's only the rotated ones.
// CHECK-LABEL: gpu.func @rope_flagged(
// CHECK-SAME: name = "finite_x"
// CHECK: arith.cmpi ult, %{{.*}}, %c2
// CHECK: arith.select
// CHECK: arith.cmpf uge
// CHECK-LABEL: gpu.func @rope_unflagged(
// CHECK-NOT: finite_
// CHECK-NOT: arith.select
// CHECK: gpu.return
func.func @rope_flagged(%x: tensor<?x192xbf16> {coat.writable}, %c: tensor<?x64xf32>,
                        %s: tensor<?x64xf32>) -> (tensor<?x192xbf16> {coat.finite_flag}) {
  %y = coat.rope %x, %c, %s rotated_heads = 2 : tensor<?x192xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x192xbf16>
  return %y : tensor<?x192xbf16>
}
func.func @rope_unflagged(%x: tensor<?x192xbf16> {coat.writable}, %c: tensor<?x64xf32>,
                          %s: tensor<?x64xf32>) -> tensor<?x192xbf16> {
  %y = coat.rope %x, %c, %s rotated_heads = 2 : tensor<?x192xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x192xbf16>
  return %y : tensor<?x192xbf16>
}
