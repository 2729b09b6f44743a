// A forward GEMM's bias (a model's bf16 [N]) is added in f32 in the GEMM's
// own epilogue: after the accumulator is scaled by s_A * s_B, before the
// result is rounded to bf16, and before a 1x16 FP8 result's group maxima,
// in every epilogue form and in the CPU twin. No second kernel.
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{epilogue=direct})' \
// RUN:   | FileCheck %s --check-prefix=IR
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{epilogue=staged})' \
// RUN:   | FileCheck %s --check-prefix=STAGED
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{epilogue=direct},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=PTX
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{target=cpu})' \
// RUN:   | FileCheck %s --check-prefix=CPU

func.func @qkv_bias(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>,
                    %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>,
                    %b: tensor<?xbf16>) -> tensor<?x?xbf16> {
  %y = coat.linear forward %x, %w bias %b
         : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>,
           !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>, tensor<?xbf16>
         -> tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}

func.func @up_bias_q16(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>,
                       %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>,
                       %b: tensor<?xbf16>)
    -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> {
  %y = coat.linear forward %x, %w bias %b
         : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>,
           !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>, tensor<?xbf16>
         -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  return %y : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
}

// One kernel per spec, the bias its sixth parameter (a bf16 buffer of n).
// IR-LABEL: gpu.module @coat_linear
// IR: gpu.func @qkv_bias(%{{[a-z0-9]+}}: !llvm.ptr {llvm.align = 64 : i32}, %{{[a-z0-9]+}}: !llvm.ptr {llvm.align = 64 : i32}, %{{[a-z0-9]+}}: memref<?xbf16>, %[[SA:[a-z0-9]+]]: memref<?xi16>, %[[SB:[a-z0-9]+]]: memref<?xi16>, %[[B:[a-z0-9]+]]: memref<?xbf16>
// IR-SAME: {bind = ["in2"], dtype = "bf16", extent = "n", kind = "memref", name = "bias"}
// IR-SAME: bias = true
// The scale s_A * s_B, then per accumulator: scaled, plus the bias, and
// only then rounded to bf16 and stored.
// IR: %[[A:.*]] = arith.extf %{{.*}} : bf16 to f32
// IR: %[[BS:.*]] = arith.extf %{{.*}} : bf16 to f32
// IR-NEXT: %[[S:.*]] = arith.mulf %[[A]], %[[BS]] : f32
// IR: %[[V:.*]] = arith.mulf %{{.*}}, %[[S]] : f32
// IR: %[[L:.*]] = memref.load %[[B]][%{{.*}}] : memref<?xbf16>
// IR-NEXT: %[[E:.*]] = arith.extf %[[L]] : bf16 to f32
// IR-NEXT: %[[Y:.*]] = arith.addf %[[V]], %[[E]] : f32
// IR-NEXT: arith.truncf %[[Y]] : f32 to bf16
// IR: llvm.store %{{.*}} : vector<2xbf16>, !llvm.ptr<1>
// The 1x16 result: the biased values are the group's, so the bias is in
// the group maximum and in the codes. A tile inside N takes them as they
// are; one reaching past N masks those columns out of the maximum.
// IR: gpu.func @up_bias_q16(
// IR-SAME: %[[QB:[a-z0-9]+]]: memref<?xbf16>, %{{[a-z0-9]+}}: i64
// IR: %[[QS:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// IR: %[[INSIDE:.*]] = arith.cmpi ule, %{{.*}}, %{{.*}} : index
// IR-NEXT: scf.if %[[INSIDE]] -> (
// IR: %[[QV:.*]] = arith.mulf %{{.*}}, %[[QS]] : f32
// IR: %[[QL:.*]] = memref.load %[[QB]][%{{.*}}] : memref<?xbf16>
// IR-NEXT: %[[QE:.*]] = arith.extf %[[QL]] : bf16 to f32
// IR-NEXT: %[[QY:.*]] = arith.addf %[[QV]], %[[QE]] : f32
// IR-NOT: arith.select
// IR: math.absf %[[QY]] : f32
// IR: arith.maxnumf
// IR: gpu.shuffle  xor %{{.*}}, %c2_i32
// IR: arith.divf %{{.*}}, %{{.*}} : f32
// IR: arith.truncf %{{.*}} : f32 to f8E4M3FN
// IR: } else {
// IR: %[[MV:.*]] = arith.mulf %{{.*}}, %[[QS]] : f32
// IR: %[[ML:.*]] = memref.load %[[QB]][%{{.*}}] : memref<?xbf16>
// IR-NEXT: %[[ME:.*]] = arith.extf %[[ML]] : bf16 to f32
// IR-NEXT: %[[MY:.*]] = arith.addf %[[MV]], %[[ME]] : f32
// IR-NEXT: %[[MZ:.*]] = arith.constant 0.000000e+00 : f32
// IR-NEXT: arith.select %{{.*}}, %[[MY]], %[[MZ]] : f32
// IR: math.absf
// IR: arith.truncf %{{.*}} : f32 to f8E4M3FN
// IR-NOT: gpu.func

// Staged: the biased values are rounded as they are staged in shared
// memory, before the 16-byte stores.
// STAGED: gpu.func @qkv_bias(
// STAGED-SAME: epilogue = "staged"
// STAGED: %[[L:.*]] = memref.load %{{.*}} : memref<?xbf16>
// STAGED-NEXT: %[[E:.*]] = arith.extf %[[L]] : bf16 to f32
// STAGED-NEXT: %[[Y:.*]] = arith.addf %{{.*}}, %[[E]] : f32
// STAGED-NEXT: arith.truncf %[[Y]] : f32 to bf16
// STAGED: llvm.store %{{.*}} : vector<2xbf16>, !llvm.ptr<3>
// STAGED: nvvm.barrier
// STAGED: llvm.load %{{.*}} : !llvm.ptr<3> -> vector<16xi8>
// STAGED: gpu.func @up_bias_q16(
// STAGED: arith.addf
// STAGED: gpu.shuffle  xor

// In the PTX the product and the sum stay two roundings (mul.rn, add.rn:
// never contracted into an FMA), so the kernel computes exactly what the
// reference library's epilogue does.
// PTX-LABEL: .entry qkv_bias(
// PTX: wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3
// PTX: mul.rn.f32
// PTX: ld.global.b16 [[L:%rs[0-9]+]],
// PTX-NEXT: cvt.f32.bf16 [[E:%r[0-9]+]], [[L]];
// PTX-NEXT: add.rn.f32 %r{{[0-9]+}}, %r{{[0-9]+}}, [[E]];
// PTX: cvt.rn.bf16{{(x2)?}}.f32
// PTX-NOT: fma.rn.f32
// PTX-LABEL: .entry up_bias_q16(
// PTX: ld.global.b16
// PTX: add.rn.f32
// PTX: shfl.sync.bfly.b32
// PTX: cvt.rn.satfinite.e4m3x2.f32
// PTX-NOT: .entry

// CPU twin: the same f32 products (a group's sixteen), each with its bias
// element added, then the bf16 rounding.
// CPU-LABEL: func.func @qkv_bias(
// CPU-SAME: memref<?xbf16>
// CPU: %[[S:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// CPU: %[[V:.*]] = arith.mulf %{{.*}}, %[[S]] : f32
// CPU-COUNT-15: arith.mulf %{{.*}}, %[[S]] : f32
// CPU-NEXT: %[[L:.*]] = memref.load %{{.*}} : memref<?xbf16>
// CPU-NEXT: %[[E:.*]] = arith.extf %[[L]] : bf16 to f32
// CPU-NEXT: %[[Y:.*]] = arith.addf %[[V]], %[[E]] : f32
// CPU: arith.truncf %{{.*}} : f32 to bf16
