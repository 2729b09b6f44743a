// A GEMM with an addend (coat-fuse-linear-sum: the sum of a SwiGLU MLP's
// gate and up dgrads): the addend's element is added in f32 to the scaled
// accumulator (after the bias, where there is one) and the sum is rounded
// once, in every epilogue form and in the CPU twin. The addend is one more
// buffer of the result's shape.
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear)' \
// RUN:   | FileCheck %s --check-prefix=TMA
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{epilogue=direct})' \
// RUN:   | FileCheck %s --check-prefix=DIRECT
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear,coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=PTX
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{target=cpu})' \
// RUN:   | FileCheck %s --check-prefix=CPU

func.func @dgrad_sum(%dy: !coat.qtensor<?x512xf8E5M2, per_tensor, scale = bf16>,
                     %wt: !coat.qtensor<256x512xf8E4M3FN, per_tensor, scale = bf16>,
                     %c: tensor<?x256xbf16>) -> tensor<?x256xbf16> {
  %y = coat.linear dgrad %dy, %wt addend(%c : tensor<?x256xbf16>)
         : !coat.qtensor<?x512xf8E5M2, per_tensor, scale = bf16>,
           !coat.qtensor<256x512xf8E4M3FN, per_tensor, scale = bf16> -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

// TMA-LABEL: gpu.func @dgrad_sum(
// TMA-SAME: %[[C:[a-z0-9]+]]: memref<?xbf16>, %{{[a-z0-9]+}}: i64
// TMA-SAME: {bind = ["in2"], dtype = "bf16", extent = "m*n", kind = "memref", name = "addend"}
// TMA-SAME: config = {a = "e5m2", addend = true, b = "e4m3"
// Element (row, col) of the addend, both clamped inside the result, added
// to the scaled accumulator before the one rounding to bf16, as the value is
// staged for the TMA store.
// TMA: %[[A:.*]] = llvm.extractvalue %{{.*}}[0]
// TMA: %[[V:.*]] = arith.mulf %[[A]], %{{.*}} : f32
// TMA: %[[R:.*]] = arith.minui %{{.*}}, %{{.*}} : index
// TMA: %[[K:.*]] = arith.minui %{{.*}}, %{{.*}} : index
// TMA-NEXT: %[[RN:.*]] = arith.muli %[[R]], %{{.*}} : index
// TMA-NEXT: %[[AT:.*]] = arith.addi %[[RN]], %[[K]] : index
// TMA-NEXT: %[[L:.*]] = memref.load %[[C]][%[[AT]]] : memref<?xbf16>
// TMA-NEXT: %[[E:.*]] = arith.extf %[[L]] : bf16 to f32
// TMA-NEXT: %[[S:.*]] = arith.addf %[[V]], %[[E]] : f32
// TMA-NEXT: arith.truncf %[[S]] : f32 to bf16
// TMA: llvm.store %{{.*}} : vector<2xbf16>, !llvm.ptr<3>
// TMA: nvvm.cp.async.bulk.tensor.global.shared.cta

// DIRECT-LABEL: gpu.func @dgrad_sum(
// DIRECT: memref.load %{{.*}} : memref<?xbf16>
// DIRECT-NEXT: arith.extf
// DIRECT-NEXT: arith.addf
// DIRECT-NEXT: arith.truncf
// DIRECT: llvm.store %{{.*}} : vector<2xbf16>, !llvm.ptr<1>

// PTX-LABEL: .entry dgrad_sum(
// PTX: wgmma.mma_async.sync.aligned.m64n256k32.f32.e5m2.e4m3
// PTX: ld.global.b16
// PTX: add.rn.f32
// PTX-NOT: fma.rn.f32
// PTX: cp.async.bulk.tensor.2d.global.shared::cta

// CPU-LABEL: func.func @dgrad_sum(
// CPU-SAME: %[[C:[a-z0-9]+]]: memref<?xbf16>, %{{[a-z0-9]+}}: i64
// CPU: math.fma
// CPU: %[[V:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// CPU: %[[L:.*]] = memref.load %[[C]][%{{.*}}] : memref<?xbf16>
// CPU-NEXT: %[[E:.*]] = arith.extf %[[L]] : bf16 to f32
// CPU-NEXT: arith.addf %[[V]], %[[E]] : f32
