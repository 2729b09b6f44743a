// coat-lower-linear: one per-tensor E4M3 coat.linear forward becomes a Hopper
// kernel: CUtensorMap grid-constant parameters, TMA loads completing on
// mbarriers, wgmma e4m3 x e4m3 into f32 registers, nothing in local memory.
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear)' \
// RUN:   | FileCheck %s --check-prefix=IR
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear,coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{tile-n=128 warpgroups=1 stages=3},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=N128

// IR-LABEL: gpu.module @coat_linear
// IR: gpu.func @fp8_linear(%{{.*}}: !llvm.ptr {llvm.align = 64 : i32}, %{{.*}}: !llvm.ptr {llvm.align = 64 : i32}, %{{.*}}: memref<?xbf16>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64) kernel
// IR-SAME: coat.grid_constant = array<i32: 0, 1>
// IR-SAME: kind = "tensormap"
// IR-SAME: grid_tiles = {{\[\["n", 256\], \["m", 128\]\]}}
// IR-SAME: known_block_size = array<i32: 256, 1, 1>
// IR: nvvm.mbarrier.init
// IR: nvvm.fence.mbarrier.init
// IR: nvvm.cp.async.bulk.tensor.shared.cluster.global
// IR: scf.for
// IR: nvvm.mbarrier.try_wait.parity
// IR: nvvm.wgmma.fence.aligned
// IR-COUNT-4: nvvm.wgmma.mma_async
// IR: nvvm.wgmma.commit.group.sync.aligned
// IR: nvvm.wgmma.wait.group.sync.aligned 1
// IR: nvvm.mbarrier.arrive
// IR: nvvm.wgmma.wait.group.sync.aligned 0
// IR-NOT: func.func @fp8_linear

// CHECK-NOT: .local
// CHECK: .entry fp8_linear(
// CHECK-NEXT: .param .align 64 .b8 fp8_linear_param_0[128]
// CHECK-NEXT: .param .align 64 .b8 fp8_linear_param_1[128]
// CHECK: cvta.param.u64
// CHECK: mbarrier.init.shared.b64
// CHECK: mbarrier.arrive.expect_tx.shared.b64
// CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// CHECK: mbarrier.try_wait.parity.shared.b64
// CHECK: wgmma.fence.sync.aligned
// CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3
// CHECK: wgmma.commit_group.sync.aligned
// CHECK: wgmma.wait_group.sync.aligned 1
// CHECK: wgmma.wait_group.sync.aligned 0
// CHECK: cvt.rn.bf16{{(x2)?}}.f32
// CHECK-NOT: .local

// N128: .entry fp8_linear(
// N128-COUNT-8: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3
// N128-NOT: .local

func.func @fp8_linear(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                      %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor>)
    -> tensor<?x?xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
           !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}
