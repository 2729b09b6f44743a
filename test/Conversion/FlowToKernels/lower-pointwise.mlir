// RUN: coat-opt %s -coat-lower-pointwise | FileCheck %s
// RUN: coat-opt %s -coat-lower-pointwise=target=cpu | FileCheck %s --check-prefix=CPU
// RUN: coat-opt %s -coat-lower-pointwise=lanes-per-thread=2 | FileCheck %s --check-prefix=U2

// A 1x16 FP8 in -> 1x16 FP8 out op: no shuffles (one lane per group), the
// codes are read and written with 16-byte vectors, the scale is derived from
// the group maximum with IEEE division and rounded to bf16.
// CHECK: gpu.module @coat_flow_kernels
// CHECK-LABEL: gpu.func @silu(
// CHECK-SAME: %{{.*}}: memref<?xi8>, %{{.*}}: memref<?xi16>, %{{.*}}: memref<?xi8>, %{{.*}}: memref<?xi16>, %{{.*}}: i64, %{{.*}}: i64) kernel
// CHECK-SAME: coat.kernel = {args = [{dtype = "e4m3", extent = "n", kind = "memref", name = "x"}, {dtype = "bf16", extent = "groups", kind = "memref", name = "x_scale"}, {dtype = "e4m3", extent = "n", kind = "memref", name = "y"}, {dtype = "bf16", extent = "groups", kind = "memref", name = "y_scale"}
// CHECK-SAME: config = {eps = {{.*}}, group_size = 16 : i64, operands = ["x"], results = ["y"]}
// CHECK-SAME: launch = {block = [256, 1, 1], elements_per_block = 4096 : i64
// CHECK-SAME: op = "silu"}, known_block_size = array<i32: 256, 1, 1>
// CHECK: scf.if
// CHECK: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xi8>, vector<16xi8>
// CHECK: arith.extf %{{.*}} : vector<16xf8E4M3FN> to vector<16xf32>
// CHECK: math.exp
// CHECK: arith.maxnumf
// CHECK-NOT: gpu.shuffle
// CHECK: arith.constant 4.480000e+02 : f32
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: arith.truncf %{{.*}} : vector<16xf32> to vector<16xf8E4M3FN>
// CHECK: vector.store %{{.*}} {alignment = 16 : i64} : memref<?xi8>, vector<16xi8>
// The last block masks its tail.
// CHECK: } else {
// CHECK: vector.maskedload
// CHECK: vector.maskedstore
// CHECK: gpu.return
// CPU-LABEL: func.func @silu(
// CPU-SAME: coat.kernel
// CPU: scf.for
// CPU: math.exp
// CPU-NOT: gpu.
// U2-LABEL: gpu.func @silu(
// U2-SAME: elements_per_block = 8192 : i64
// U2-COUNT-2: vector.load %{{.*}} : memref<?xi8>, vector<16xi8>
func.func @silu(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> {
  %y = coat.silu %x : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
      -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  return %y : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
}

// Groups of 64 span 4 lanes of 16: the epilogue maxima combine across them
// with xor shuffles 2, 1 and are stored by the group's first lane. bf16
// results move as 32-byte vectors; the maxima are of the rounded values.
// CHECK-LABEL: gpu.func @gelu_grad(
// CHECK-SAME: name = "x"}, {dtype = "f32", extent = "groups", kind = "memref", name = "x_scale"}, {dtype = "bf16", extent = "n", kind = "memref", name = "dy"}, {dtype = "bf16", extent = "n", kind = "memref", name = "dx"}, {dtype = "f32", extent = "groups", kind = "memref", name = "dx_absmax"}
// CHECK-SAME: group_size = 64
// CHECK: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xi16>, vector<16xi16>
// CHECK: math.erf
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: vector.store %{{.*}} : memref<?xi16>, vector<16xi16>
// CHECK: gpu.shuffle  xor %{{.*}}, %{{.*}}, %{{.*}} : f32
// CHECK: gpu.shuffle  xor
// CHECK-NOT: gpu.shuffle
// CHECK: scf.if
// CHECK: memref.store %{{.*}} : memref<?xf32>
// CPU-LABEL: func.func @gelu_grad(
// CPU: func.call @erff
// CPU-NOT: math.erf
func.func @gelu_grad(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<64>>, %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %dx = coat.gelu_grad %x, %dy : !coat.qtensor<?x?xf8E4M3FN, per_group<64>>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>
  %m = coat.absmax %dx, per_group<64> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %dx, %m : tensor<?x?xbf16>, tensor<?x?xf32>
}

// Two results: the ABI lists operands, results, then maxima.
// CHECK-LABEL: gpu.func @swiglu_mul_grad(
// CHECK-SAME: name = "x1"}, {{.*}} name = "x1_scale"}, {{.*}} name = "x2"}, {{.*}} name = "x2_scale"}, {{.*}} name = "dy"}, {{.*}} name = "dx1"}, {{.*}} name = "dx2"}, {{.*}} name = "dx2_absmax"}, {dtype = "i64", kind = "scalar", name = "rows"}, {dtype = "i64", kind = "scalar", name = "cols"}
// CHECK-SAME: results = ["dx1", "dx2"]
func.func @swiglu_mul_grad(%a: !coat.qtensor<?x?xf8E4M3FN, per_group<32>>,
                           %b: !coat.qtensor<?x?xf8E4M3FN, per_group<32>>,
                           %dy: tensor<?x?xf32>)
    -> (tensor<?x?xf32>, tensor<?x?xf32>, tensor<?x?xf32>) {
  %d1, %d2 = coat.swiglu_mul_grad %a, %b, %dy
      : !coat.qtensor<?x?xf8E4M3FN, per_group<32>>, !coat.qtensor<?x?xf8E4M3FN, per_group<32>>,
        tensor<?x?xf32> -> tensor<?x?xf32>, tensor<?x?xf32>
  %m = coat.absmax %d2, per_group<32> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %d1, %d2, %m : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?x?xf32>
}
