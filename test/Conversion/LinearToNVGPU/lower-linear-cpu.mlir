// RUN: coat-opt %s -coat-lower-linear=target=cpu -split-input-file | FileCheck %s
// RUN: not coat-opt %s -coat-lower-linear=target=tpu 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: coat-opt %s -coat-lower-linear='target=cpu epilogue=tma' -split-input-file | FileCheck %s --check-prefix=TMA-OUT

// With the TMA epilogue `out` is a tensormap in the record, and the twin
// writes the same buffer through a memref of the element type.
// TMA-OUT-LABEL: func.func @dgrad(
// TMA-OUT-SAME: %{{.*}}: memref<?xi8>, %{{.*}}: memref<?xi8>, %[[OUT:.*]]: memref<?xbf16>, %{{.*}}: memref<?xf32>
// TMA-OUT-SAME: {bind = ["out0"], box = [64, 64], dims = ["n", "m"], dtype = "bf16", kind = "tensormap", name = "out", swizzle = "128b"}
// TMA-OUT: memref.store %{{.*}}, %[[OUT]]

// The CPU twin keeps the kernel's parameters and manifest record (tensormaps
// become memrefs of codes) but not its launch rule. It decodes both operands
// to f32 once, then sums each 1x16 output group's products in K order: one
// loop carrying the group's sixteen f32 FMA chains, A's value loaded once.
// CHECK-LABEL: func.func @dgrad(
// CHECK-SAME: %[[A:.*]]: memref<?xi8>, %[[B:.*]]: memref<?xi8>, %[[OUT:.*]]: memref<?xbf16>, %[[SA:.*]]: memref<?xf32>, %[[SB:.*]]: memref<?xf32>, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64)
// CHECK-SAME: kind = "tensormap", name = "a"
// CHECK-SAME: config = {a = "e5m2", b = "e4m3"
// CHECK-NOT: launch =
// CHECK: arith.mulf
// CHECK: %[[AV:.*]] = memref.alloc(%{{.*}}) : memref<?xf32>
// CHECK: scf.for
// CHECK: memref.load %[[A]]
// CHECK: arith.bitcast %{{.*}} : i8 to f8E5M2
// CHECK: arith.extf %{{.*}} : f8E5M2 to f32
// CHECK: memref.store %{{.*}}, %[[AV]]
// CHECK: %[[BV:.*]] = memref.alloc(%{{.*}}) : memref<?xf32>
// CHECK: memref.load %[[B]]
// CHECK: arith.bitcast %{{.*}} : i8 to f8E4M3FN
// CHECK: memref.store %{{.*}}, %[[BV]]
// CHECK: scf.for
// CHECK: scf.for
// CHECK: %{{.*}}:16 = scf.for {{.*}} iter_args
// CHECK: memref.load %[[AV]]
// CHECK-NOT: memref.load %[[AV]]
// CHECK: memref.load %[[BV]]
// CHECK-NEXT: math.fma
// CHECK-COUNT-15: memref.load %[[BV]]
// CHECK: scf.yield
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: memref.store %{{.*}}, %[[OUT]]
// CHECK: memref.dealloc %[[AV]]
// CHECK-NEXT: memref.dealloc %[[BV]]
// CHECK-NOT: gpu.
func.func @dgrad(%dy: !coat.qtensor<?x?xf8E5M2, per_tensor>,
                 %wt: !coat.qtensor<?x?xf8E4M3FN, per_tensor>) -> tensor<?x?xbf16> {
  %dx = coat.linear dgrad %dy, %wt
      : !coat.qtensor<?x?xf8E5M2, per_tensor>,
        !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> tensor<?x?xbf16>
  return %dx : tensor<?x?xbf16>
}

// -----

// The 1x16 FP8 output: group maximum, IEEE division by (max + 1e-10) /
// fp8max, codes and a bf16 scale per group.
// CHECK-LABEL: func.func @fwd_q16(
// CHECK-SAME: %{{.*}}: memref<?xi8>, %{{.*}}: memref<?xi8>, %[[CODES:.*]]: memref<?xi8>, %[[SCALE:.*]]: memref<?xi16>
// CHECK: arith.maxnumf
// CHECK: arith.constant 1.000000e-10 : f32
// CHECK: arith.divf
// CHECK: arith.truncf %{{.*}} : f32 to f8E4M3FN
// CHECK: memref.store %{{.*}}, %[[CODES]]
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: memref.store %{{.*}}, %[[SCALE]]
func.func @fwd_q16(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                   %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor>)
    -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> {
  %y = coat.linear forward %x, %w
      : !coat.qtensor<?x?xf8E4M3FN, per_tensor>, !coat.qtensor<?x?xf8E4M3FN, per_tensor>
      -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  return %y : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
}

// -----

// Operands with bf16 per-tensor scales (those of model programs) are read
// as stored: the scale parameters are bf16 (as i16 bits), widened to f32.
// Bindings name the spec's values: codes and scales of the operands, the
// result, and the extents from the operand shapes (b is N x K).
// CHECK-LABEL: func.func @fwd_bf16_scales(
// CHECK-SAME: %{{.*}}: memref<?xi8>, %{{.*}}: memref<?xi8>, %{{.*}}: memref<?xbf16>, %[[SA:.*]]: memref<?xi16>, %[[SB:.*]]: memref<?xi16>
// CHECK-SAME: {bind = ["out0"], dtype = "bf16", extent = "m*n", kind = "memref", name = "out"}, {bind = ["in0.scale"], dtype = "bf16", extent = 1 : i64, kind = "memref", name = "a_scale"}, {bind = ["in1.scale"], dtype = "bf16", extent = 1 : i64, kind = "memref", name = "b_scale"}, {bind = "rows(in0)", dtype = "i64", kind = "scalar", name = "m"}, {bind = "rows(in1)", dtype = "i64", kind = "scalar", name = "n"}, {bind = "cols(in0)", dtype = "i64", kind = "scalar", name = "k"}
// CHECK: %[[RA:.*]] = memref.load %[[SA]]
// CHECK: arith.bitcast %[[RA]] : i16 to bf16
// CHECK: arith.extf %{{.*}} : bf16 to f32
func.func @fwd_bf16_scales(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>,
                           %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>)
    -> tensor<?x?xbf16> {
  %y = coat.linear forward %x, %w
      : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>,
        !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> -> tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}

// TARGET: coat-lower-linear: target must be

// -----

// The CPU twin reads the codes from memrefs, not with TMA: K need not be a
// multiple of 16 there.
// CHECK-LABEL: func.func @k_8(
// CHECK-SAME: coat.kernel =
func.func @k_8(%x: !coat.qtensor<128x8xf8E4M3FN, per_tensor>,
               %w: !coat.qtensor<512x8xf8E4M3FN, per_tensor>)
    -> tensor<128x512xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<128x8xf8E4M3FN, per_tensor>,
           !coat.qtensor<512x8xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
  return %y : tensor<128x512xbf16>
}
