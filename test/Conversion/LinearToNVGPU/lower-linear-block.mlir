// coat-lower-linear on DeepSeek-style block-scaled operands (COAT.md §4.4):
// lhs per_group<128> (1x128 along K), rhs per_block<128x128>, f32 scales.
// Each 128-wide K slice (one ring stage) is multiplied by wgmma into a fresh
// fragment, waited for, and promoted into the f32 accumulators with one FMA
// per element by s_A[row, kb] * s_B[n-block, kb]. Tiles are block-tile-n
// wide (default 128: one weight block, and room for the partial fragment);
// a width that can cross a weight-block boundary (192) gets one mainloop per
// column offset of the tile inside its block.
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{epilogue=direct})' \
// RUN:   | FileCheck %s --check-prefix=IR
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{epilogue=direct},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{tile-m=64 block-tile-n=64 warpgroups=1 stages=3 warp-specialize=false epilogue=direct},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=PLAIN
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{tile-n=192 block-tile-n=192 stages=5})' \
// RUN:   | FileCheck %s --check-prefix=N192
// Block-scaled kernels share the per-spec shared-memory check.
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{stages=8})' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=SMEM
// SMEM: error: 'coat.linear' op coat-lower-linear: 128x128 tiles with 8 stages need 263296 bytes of shared memory, more than Hopper's 227 KiB per block
// epilogue=auto stages block-scaled results, except where the staging block
// does not fit beside the ring: 7 stages take 230512 bytes, and a staging
// block would add 16 KiB beyond the 227 KiB.
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{stages=7})' \
// RUN:   | FileCheck %s --check-prefix=FALLBACK
// FALLBACK-LABEL: gpu.func @block_fwd(
// FALLBACK-SAME: epilogue = "direct"
// FALLBACK-SAME: shared_bytes = 230512
// By default the staged 128x128 kernel keeps 4 stages of 32 KiB (6 would
// fit beside its staging block, and ran 0.95-1.00x as fast on an H100).
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear)' \
// RUN:   | FileCheck %s --check-prefix=AUTO
// AUTO-LABEL: gpu.func @block_fwd(
// AUTO-SAME: epilogue = "staged"
// AUTO-SAME: stages = 4 : i64
// AUTO-SAME: shared_bytes = 149504
// tile-n shapes per-tensor kernels only: with three consumer warpgroups
// its default (256) is too wide for a wgmma at launch, which a module of
// block-scaled specs (block-tile-n = 128) does not care about.
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{tile-m=192 warpgroups=3})' \
// RUN:   | FileCheck %s --check-prefix=WG3
// WG3-LABEL: gpu.func @block_fwd(
// WG3-SAME: tile = [192, 128, 128]
// WG3-LABEL: gpu.func @block_wgrad(
// WG3-SAME: tile = [192, 128, 128]
// 256x128 tiles on two consumer warpgroups: two partials (128 registers)
// beside 128 accumulators do not fit 232, so each slice is multiplied and
// promoted one 64-row m-block at a time through one partial fragment; the
// stage is released after the second m-block's wgmma completed.
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{block-tile-m=256})' \
// RUN:   | FileCheck %s --check-prefix=MBLOCK
// block-tile-m = 0 means tile-m: one consumer warpgroup's 255 registers
// hold 128 accumulators and one partial, not two.
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{tile-m=128 warpgroups=1})' \
// RUN:   | FileCheck %s --check-prefix=ONEWG

// IR-LABEL: gpu.func @block_fwd(%{{[a-z0-9]+}}: !llvm.ptr {llvm.align = 64 : i32}, %{{[a-z0-9]+}}: !llvm.ptr {llvm.align = 64 : i32}, %{{[a-z0-9]+}}: memref<?xbf16>, %{{[a-z0-9]+}}: memref<?xf32>, %{{[a-z0-9]+}}: memref<?xf32>, %{{[a-z0-9]+}}: i64, %{{[a-z0-9]+}}: i64, %{{[a-z0-9]+}}: i64, %{{[a-z0-9]+}}: i64, %{{[a-z0-9]+}}: i64) kernel
// IR-SAME: box = [128, 128], dims = ["k", "n"], dtype = "e4m3", kind = "tensormap", name = "b"
// IR-SAME: {bind = ["in0.scale"], dtype = "f32", extent = "m*k_blocks", kind = "memref", name = "a_scale"}, {bind = ["in1.scale"], dtype = "f32", extent = "n_blocks*k_blocks", kind = "memref", name = "b_scale"}
// IR-SAME: {bind = "cols(in0)", dtype = "i64", kind = "scalar", name = "k"}, {bind = "ceildiv(rows(in1),128)", dtype = "i64", kind = "scalar", name = "n_blocks"}, {bind = "ceildiv(cols(in0),128)", dtype = "i64", kind = "scalar", name = "k_blocks"}
// IR-SAME: a_scale_block = [1, 128], b = "e4m3", b_scale_block = [128, 128]
// IR-SAME: scaling = "block", stages = 4 : i64, tile = [128, 128, 128]
// IR-SAME: grid_tiles = {{\[\["m", 128\], \["n", 128\]\]}}
// IR: nvvm.setmaxregister increase 232
// IR: scf.for
// IR: scf.for
// IR: memref.load
// IR: memref.load
// IR: memref.load
// IR: nvvm.mbarrier.try_wait.parity
// IR: llvm.mlir.undef : !llvm.struct<(f32,
// IR: nvvm.wgmma.mma_async {{.*}} D[<f32>, <zero>]
// IR-COUNT-3: nvvm.wgmma.mma_async {{.*}} D[<f32>, <one>]
// IR: nvvm.wgmma.wait.group.sync.aligned 0
// IR: nvvm.mbarrier.arrive
// IR-COUNT-64: math.fma
// IR: scf.yield

// IR-LABEL: gpu.func @block_wgrad(
// IR-SAME: kind = "wgrad", out = "f32", promotion = "per_tile", scaling = "block"

// The promotion (loop latch) is laid out before the loop head: the scale
// product, 64 FMAs, then the next slice's scale loads, barrier wait and wgmma.
// CHECK-NOT: .local
// CHECK-LABEL: .entry block_fwd(
// CHECK-NEXT: .param .align 64 .b8 block_fwd_param_0[128]
// CHECK-NEXT: .param .align 64 .b8 block_fwd_param_1[128]
// CHECK: setmaxnreg.inc.sync.aligned.u32 232
// CHECK: cvt.rn.bf16x2.f32
// CHECK: mul.rn.f32 [[SA0:%r[0-9]+]], %r{{[0-9]+}}, [[SB:%r[0-9]+]];
// CHECK-NEXT: mul.rn.f32 [[SA1:%r[0-9]+]], %r{{[0-9]+}}, [[SB]];
// CHECK-NEXT: fma.rn.f32 [[ACC:%r[0-9]+]], %r{{[0-9]+}}, [[SA0]], [[ACC]];
// CHECK-COUNT-63: fma.rn.f32
// CHECK: ld.global.b32
// CHECK: ld.global.b32
// CHECK: ld.global.b32
// CHECK: mbarrier.try_wait.parity.shared.b64
// CHECK: wgmma.fence.sync.aligned
// CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3
// CHECK: wgmma.commit_group.sync.aligned
// CHECK-NEXT: wgmma.wait_group.sync.aligned 0
// CHECK: mbarrier.arrive.shared.b64
// CHECK: setmaxnreg.dec.sync.aligned.u32 40
// CHECK: mbarrier.arrive.expect_tx.shared.b64
// CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// CHECK-LABEL: .entry block_wgrad(
// CHECK-COUNT-64: fma.rn.f32
// CHECK: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3
// CHECK: cp.async.bulk.tensor.2d
// CHECK-NOT: .local

// PLAIN-LABEL: .entry block_fwd(
// PLAIN: .maxntid 128, 1, 1
// PLAIN-NOT: setmaxnreg
// PLAIN: cp.async.bulk.tensor.2d
// PLAIN-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3
// PLAIN: wgmma.wait_group.sync.aligned 0
// PLAIN-COUNT-32: fma.rn.f32
// PLAIN-NOT: .local

// 192-wide tiles start at column offset 0 or 64 of a weight block and
// always reach into the next one: n8 chunks 16..23 (offset 0) or 8..23
// (offset 64) use the next block's scale, loaded as a fourth scale.
// N192-LABEL: gpu.func @block_fwd(
// N192-SAME: tile = [128, 192, 128]
// N192: scf.index_switch %{{.*}} -> !llvm.struct
// N192: case 64 {
// N192: scf.for
// N192-COUNT-4: memref.load
// N192: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 192, k = 32>
// N192-COUNT-96: math.fma
// N192: default {
// N192: scf.for
// N192-COUNT-4: memref.load
// N192-NOT: memref.load
// N192: nvvm.wgmma.mma_async
// N192-COUNT-96: math.fma

func.func @block_fwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<128>>,
                     %w: !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>)
    -> tensor<?x?xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x?xf8E4M3FN, per_group<128>>,
           !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>> -> tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}

func.func @block_wgrad(%xt: !coat.qtensor<?x?xf8E4M3FN, per_group<128>>,
                       %dyt: !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>)
    -> tensor<?x?xf32> {
  %dw = coat.linear wgrad %xt, %dyt
          : !coat.qtensor<?x?xf8E4M3FN, per_group<128>>,
            !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>> -> tensor<?x?xf32>
  return %dw : tensor<?x?xf32>
}

// MBLOCK-LABEL: gpu.func @block_fwd(
// MBLOCK-SAME: promotion = "per_m_block", scaling = "block", stages = 4 : i64, tile = [256, 128, 128]
// MBLOCK-SAME: grid_tiles = {{\[\["m", 256\], \["n", 128\]\]}}
// MBLOCK: nvvm.setmaxregister increase 232
// MBLOCK: nvvm.mbarrier.try_wait.parity
// MBLOCK: nvvm.wgmma.mma_async {{.*}} D[<f32>, <zero>]
// MBLOCK-COUNT-3: nvvm.wgmma.mma_async {{.*}} D[<f32>, <one>]
// MBLOCK-NOT: nvvm.wgmma.mma_async
// MBLOCK: nvvm.wgmma.wait.group.sync.aligned 0
// MBLOCK-NOT: nvvm.mbarrier.arrive
// MBLOCK-COUNT-64: math.fma
// MBLOCK: nvvm.wgmma.mma_async {{.*}} D[<f32>, <zero>]
// MBLOCK-COUNT-3: nvvm.wgmma.mma_async {{.*}} D[<f32>, <one>]
// MBLOCK: nvvm.wgmma.wait.group.sync.aligned 0
// MBLOCK: nvvm.mbarrier.arrive
// MBLOCK-COUNT-64: math.fma
// MBLOCK: scf.yield
// The default tiles keep one partial per m-block.
// IR-NOT: promotion = "per_m_block"

// ONEWG-LABEL: gpu.func @block_fwd(
// ONEWG-SAME: promotion = "per_m_block", scaling = "block", stages = 4 : i64, tile = [128, 128, 128], warp_specialized = true, warpgroups = 1
