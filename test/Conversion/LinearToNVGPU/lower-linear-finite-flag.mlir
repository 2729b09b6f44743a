// A GEMM result the program returns (`coat.finite_flag`) gets a finiteness
// flag: an i32 argument bound to finite(out0), which the epilogue sets where
// a value it stores is NaN or infinite. One unordered compare per value
// against the least magnitude that rounds to infinity in the stored type
// (bf16: 0x7F7F8000; f32: infinity), one branch per tile; the stores are
// unchanged.
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{epilogue=staged})' \
// RUN:   | FileCheck %s
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{target=cpu})' \
// RUN:   | FileCheck %s --check-prefix=CPU
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear,coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=PTX

func.func @forward_flagged(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>,
                           %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>,
                           %b: tensor<?xbf16>) -> (tensor<?x?xbf16> {coat.finite_flag}) {
  %y = coat.linear forward %x, %w bias %b
         : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>,
           !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>, tensor<?xbf16>
         -> tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}

func.func @wgrad_flagged(%dy: !coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16>,
                         %x: !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>)
    -> (tensor<?x?xf32> {coat.finite_flag}) {
  %g = coat.linear wgrad %dy, %x
         : !coat.qtensor<?x?xf8E5M2, per_tensor, scale = bf16>,
           !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
         -> tensor<?x?xf32>
  return %g : tensor<?x?xf32>
}

func.func @unflagged(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>,
                     %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>)
    -> tensor<?x?xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>,
           !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
         -> tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}

// CHECK-LABEL: gpu.func @forward_flagged(
// CHECK-SAME: %[[B:[a-z0-9]+]]: memref<?xbf16>, %[[F:[a-z0-9]+]]: memref<?xi32>, %{{[a-z0-9]+}}: i64
// CHECK-SAME: {bind = ["finite(out0)"], dtype = "i32", extent = 1 : i64, kind = "memref", name = "finite_out"}
// Each value as stored: scaled, plus the bias, then compared.
// CHECK: %[[L:.*]] = memref.load %[[B]][%{{.*}}] : memref<?xbf16>
// CHECK-NEXT: %[[E:.*]] = arith.extf %[[L]] : bf16 to f32
// CHECK-NEXT: %[[V:.*]] = arith.addf %{{.*}}, %[[E]] : f32
// CHECK: %[[LIM:.*]] = arith.constant 3.39617753E+38 : f32
// CHECK-NEXT: %[[A:.*]] = math.absf %{{.*}} : f32
// CHECK-NEXT: %[[BAD:.*]] = arith.cmpf uge, %[[A]], %[[LIM]] : f32
// CHECK: arith.ori
// CHECK: scf.if %{{.*}} {
// CHECK-NEXT: %[[ONE:.*]] = arith.constant 1 : i32
// CHECK: memref.store %[[ONE]], %[[F]][%{{.*}}] : memref<?xi32>
// CHECK-LABEL: gpu.func @wgrad_flagged(
// CHECK-SAME: %[[G:[a-z0-9]+]]: memref<?xi32>
// CHECK-SAME: name = "finite_out"
// CHECK: arith.constant 0x7F800000 : f32
// CHECK: arith.cmpf uge
// CHECK: memref.store %{{.*}}, %[[G]][%{{.*}}] : memref<?xi32>
// CHECK-LABEL: gpu.func @unflagged(
// CHECK-NOT: finite_out
// CHECK-NOT: arith.cmpf uge
// CHECK: gpu.return

// The CPU twin flags what it stores (inside the matrix only).
// CPU-LABEL: func.func @forward_flagged(
// CPU-SAME: %{{[a-z0-9]+}}: memref<?xi32>
// CPU: arith.cmpf uge
// CPU: arith.andi
// CPU: memref.store %{{.*}} : memref<?xi32>

// The flag costs no local memory: per value an abs and a compare against
// 0x7F7F8000 (bf16; f32: an ordered != infinity, false for NaN too) folded
// into one predicate, one predicated store of 1.
// PTX-LABEL: .entry forward_flagged(
// PTX-NOT: .local
// PTX: setp.lt.f32 {{.*}}, 0f7F7F8000;
// PTX: st.global.b32 [%rd{{[0-9]+}}], 1;
// PTX-LABEL: .entry wgrad_flagged(
// PTX: setp.ne.f32 {{.*}}, 0f7F800000;
// PTX: st.global.b32 [%rd{{[0-9]+}}], 1;
