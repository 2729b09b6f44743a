// Norm results the program returns (`coat.finite_flag`) are flagged by the
// kernel that writes them: y or dx by the row kernel (a vector compare of
// each group as stored, OR-reduced), dweight and dbias by the reduction,
// each with its `finite_<result>` argument bound to finite(out<i>).
// RUN: coat-opt %s -coat-lower-norms='target=gpu' | FileCheck %s
// RUN: coat-opt %s -coat-lower-norms='target=cpu' | FileCheck %s --check-prefix=CPU

// CHECK-LABEL: gpu.func @ln_bwd_flagged(
// CHECK-SAME: name = "finite_dx"
// CHECK-NOT: gpu.func
// CHECK: arith.cmpf uge, %{{.*}}, %{{.*}} : vector<
// CHECK: vector.reduction <or>
// CHECK: memref.store %{{.*}} : memref<?xi32>
// CHECK-LABEL: gpu.func @ln_bwd_flagged_reduce(
// CHECK-SAME: {bind = ["finite(out1)"], dtype = "i32", extent = 1 : i64, kind = "memref", name = "finite_dweight"}
// CHECK-NOT: finite_dbias
// CHECK: arith.constant 0x7F800000 : f32
// CHECK: arith.cmpf uge
// CHECK-LABEL: gpu.func @rms_flagged(
// CHECK-SAME: name = "finite_y"
// CHECK: arith.constant dense<3.39617753E+38> : vector<
// CPU-LABEL: func.func @ln_bwd_flagged(
// CPU: vector.reduction <or>
// CPU-LABEL: func.func @ln_bwd_flagged_reduce(
// CPU: arith.cmpf uge
func.func @ln_bwd_flagged(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16> {coat.finite_flag}, tensor<?xf32> {coat.finite_flag}, tensor<?xf32>)
    attributes {coat.max_cols = 4096 : i64} {
  %dx, %dw, %db = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>,
        tensor<?xf32>, tensor<?x?xbf16>, tensor<?xf32>
      -> tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
}

func.func @rms_flagged(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
                       %w: tensor<?xbf16>) -> (tensor<?x?xbf16> {coat.finite_flag}, tensor<?xf32>)
    attributes {coat.max_cols = 1024 : i64} {
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.0e-5
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>
      -> tensor<?x?xbf16>, tensor<?xf32>
  return %y, %rstd : tensor<?x?xbf16>, tensor<?xf32>
}
