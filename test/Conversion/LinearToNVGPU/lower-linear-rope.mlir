// A coat.rope in the epilogue of the GEMM that produces its input
// (coat-fuse-rope): the epilogue rounds the scaled values to the result
// type, as the unfused GEMM stores them, rotates the leading heads as
// coat.rope does (two f32 products and their difference or sum, no FMA),
// and stores the rotated values once. The tables are two more buffers.
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear)' \
// RUN:   | FileCheck %s --check-prefix=IR
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear,coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=PTX
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{target=cpu})' \
// RUN:   | FileCheck %s --check-prefix=CPU

func.func @qkv_rope(%x: !coat.qtensor<?x256xf8E4M3FN, per_tensor, scale = bf16>,
                    %w: !coat.qtensor<384x256xf8E4M3FN, per_tensor, scale = bf16>,
                    %cos: tensor<?x64xf32>, %sin: tensor<?x64xf32>) -> tensor<?x384xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x256xf8E4M3FN, per_tensor, scale = bf16>,
           !coat.qtensor<384x256xf8E4M3FN, per_tensor, scale = bf16> -> tensor<?x384xbf16>
  %r = coat.rope %y, %cos, %sin rotated_heads = 4 epilogue
         : tensor<?x384xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x384xbf16>
  return %r : tensor<?x384xbf16>
}

// IR-LABEL: gpu.func @qkv_rope(
// IR-SAME: %[[COS:[a-z0-9]+]]: memref<?xf32>, %[[SIN:[a-z0-9]+]]: memref<?xf32>, %{{[a-z0-9]+}}: i64
// IR-SAME: {bind = ["in2"], dtype = "f32", extent = "m*64", kind = "memref", name = "cos"}
// IR-SAME: {bind = ["in3"], dtype = "f32", extent = "m*64", kind = "memref", name = "sin"}
// IR-SAME: rope_head_dim = 64 : i64, rope_rotated_heads = 4 : i64
// IR-SAME: name = "qkv_rope", op = "linear"
// Each value scaled, then rounded to bf16 and widened again ...
// IR: %[[E:.*]] = llvm.extractvalue
// IR: %[[V:.*]] = arith.mulf %[[E]], %{{.*}} : f32
// IR: %[[T:.*]] = arith.truncf %[[V]] : f32 to bf16
// IR-NEXT: arith.extf %[[T]] : bf16 to f32
// ... then the first half of a head: x1 c1 - x2 s1 where the head is
// rotated, x1 where not.
// IR: %[[ROT:.*]] = arith.cmpi ult, %{{.*}}, %c256{{.*}} : index
// IR: %[[C:.*]] = memref.load %[[COS]][%{{.*}}] : memref<?xf32>
// IR-NEXT: %[[S:.*]] = memref.load %[[SIN]][%{{.*}}] : memref<?xf32>
// IR-NEXT: %[[P1:.*]] = arith.mulf %[[X1:.*]], %[[C]] : f32
// IR-NEXT: %[[P2:.*]] = arith.mulf %{{.*}}, %[[S]] : f32
// IR-NEXT: %[[Y1:.*]] = arith.subf %[[P1]], %[[P2]] : f32
// IR-NEXT: arith.select %[[ROT]], %[[Y1]], %[[X1]] : f32
// The second half: x2 c2 + x1 s2.
// IR: %[[Y2:.*]] = arith.addf %{{.*}}, %{{.*}} : f32
// IR-NEXT: arith.select %{{.*}}, %[[Y2]], %{{.*}} : f32
// The rotated values are what the TMA epilogue stages and stores.
// IR: llvm.insertvalue
// IR: llvm.store %{{.*}} : vector<2xbf16>, !llvm.ptr<3>
// IR: nvvm.cp.async.bulk.tensor.global.shared.cta

// PTX-LABEL: .entry qkv_rope(
// PTX: wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3
// PTX: ld.global.b32
// PTX: mul.rn.f32
// PTX: sub.rn.f32
// PTX: add.rn.f32
// PTX-NOT: fma.rn.f32
// PTX: cp.async.bulk.tensor.2d.global.shared::cta

// CPU twin: the group's sixteen sums, then their partners' sixteen (the
// other half of each head) in a loop of their own, each element and its
// partner rounded to bf16, the rotation where the column's head is rotated.
// CPU-LABEL: func.func @qkv_rope(
// CPU-SAME: %[[COS:[a-z0-9]+]]: memref<?xf32>, %[[SIN:[a-z0-9]+]]: memref<?xf32>
// CPU: %{{.*}}:16 = scf.for
// CPU: arith.cmpi ult, %{{.*}}, %c32 : index
// CPU: %{{.*}}:16 = scf.for
// CPU-NOT: scf.for
// CPU: %[[X:.*]] = arith.truncf %{{.*}} : f32 to bf16
// CPU-NEXT: %[[XW:.*]] = arith.extf %[[X]] : bf16 to f32
// CPU: %[[C:.*]] = memref.load %[[COS]][%{{.*}}] : memref<?xf32>
// CPU-NEXT: %[[P1:.*]] = arith.mulf %[[XW]], %[[C]] : f32
// CPU: %[[S:.*]] = memref.load %[[SIN]][%{{.*}}] : memref<?xf32>
// CPU-NEXT: %[[P2:.*]] = arith.mulf %{{.*}}, %[[S]] : f32
// CPU-NEXT: %[[D:.*]] = arith.subf %[[P1]], %[[P2]] : f32
// CPU-NEXT: %[[A:.*]] = arith.addf %[[P1]], %[[P2]] : f32
// CPU-NEXT: %[[Y:.*]] = arith.select %{{.*}}, %[[D]], %[[A]] : f32
// CPU: arith.select %{{.*}}, %[[Y]], %[[XW]] : f32
