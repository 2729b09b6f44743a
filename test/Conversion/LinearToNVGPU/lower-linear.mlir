// coat-lower-linear: every kind of per-tensor coat.linear becomes one Hopper
// kernel: CUtensorMap grid-constant parameters, TMA loads completing on
// mbarriers, wgmma with the operands' FP8 formats into f32 registers, an
// epilogue writing bf16, f32 or 1x16-quantized FP8, nothing in local memory.
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{epilogue=direct})' \
// RUN:   | FileCheck %s --check-prefix=IR
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{epilogue=direct},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{tile-n=128 warpgroups=1 stages=3 warp-specialize=false epilogue=direct},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=PLAIN
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{epilogue=staged})' \
// RUN:   | FileCheck %s --check-prefix=STAGED-IR
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{epilogue=staged},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=STAGED
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{epilogue=tma})' \
// RUN:   | FileCheck %s --check-prefix=TMA-IR
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{epilogue=tma},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=TMA

// epilogue=staged: 16 KiB more shared memory (2 consumer warpgroups x 64
// rows x 128 bytes, 1024-byte aligned after the mbarriers), for FP8 codes
// (128 columns a block) as for bf16/f32 results.
// STAGED-IR-LABEL: gpu.func @fwd(
// STAGED-IR-SAME: epilogue = "staged"
// STAGED-IR-SAME: shared_bytes = 215040
// STAGED-IR-LABEL: gpu.func @gate_q16(
// STAGED-IR-SAME: epilogue = "staged"
// STAGED-IR-SAME: shared_bytes = 215040
// Per 128-byte column block (4 for bf16): the fragment's element pairs to
// shared memory, the warpgroup's named barrier, a 16-byte chunk a thread
// per pass, contiguous 16-byte global stores, the barrier again.
// STAGED-LABEL: .visible .entry fwd(
// STAGED: st.shared.b32
// STAGED: bar.sync {{%r[0-9]+}}, 128;
// STAGED: ld.shared.v4.b32
// STAGED: st.global.v4.b32
// STAGED: bar.sync {{%r[0-9]+}}, 128;
// STAGED-NOT: .local
// STAGED-LABEL: .visible .entry dgrad(
// STAGED: st.shared.v2.b32
// STAGED: ld.shared.v4.b32
// STAGED: st.global.v4.b32
// FP8 codes: a group's maximum over its quad, the code pairs into the rows
// (8 groups a block), the scale straight to out_scale from the quad's
// first lane; then the same 16-byte chunks.
// STAGED-LABEL: .visible .entry gate_q16(
// STAGED: shfl.sync.bfly.b32
// STAGED: st.shared.v2.b8
// STAGED: st.global.b16
// STAGED: bar.sync {{%r[0-9]+}}, 128;
// STAGED: ld.shared.v4.b32
// STAGED: st.global.v4.b32
// STAGED-NOT: .local

// epilogue=tma: `out` is a third tensormap, passed by value: 128-byte boxes
// of a warpgroup's 64 rows (64 bf16 or 32 f32 columns) with the 128-byte
// swizzle the staged rows have; the CPU twin keeps a typed buffer
// (lower-linear-cpu.mlir). The FP8 result keeps its memref and is staged.
// TMA-IR-LABEL: gpu.func @fwd(%{{[a-z0-9]+}}: !llvm.ptr {llvm.align = 64 : i32}, %{{[a-z0-9]+}}: !llvm.ptr {llvm.align = 64 : i32}, %{{[a-z0-9]+}}: !llvm.ptr {llvm.align = 64 : i32}, %{{[a-z0-9]+}}: memref<?xf32>
// TMA-IR-SAME: coat.grid_constant = array<i32: 0, 1, 2>
// TMA-IR-SAME: {bind = ["out0"], box = [64, 64], dims = ["n", "m"], dtype = "bf16", kind = "tensormap", name = "out", swizzle = "128b"}
// TMA-IR-SAME: epilogue = "tma"
// TMA-IR-LABEL: gpu.func @dgrad(
// TMA-IR-SAME: {bind = ["out0"], box = [32, 64], dims = ["n", "m"], dtype = "f32", kind = "tensormap", name = "out", swizzle = "128b"}
// TMA-IR-LABEL: gpu.func @gate_q16(
// TMA-IR-SAME: coat.grid_constant = array<i32: 0, 1>
// TMA-IR-SAME: kind = "memref", name = "out"
// TMA-IR-SAME: epilogue = "staged"
// Per block: the previous store has read the rows, they are rewritten,
// fenced for the async proxy, and one thread stores them and commits; the
// warpgroup waits for its stores before it exits.
// TMA-LABEL: .visible .entry fwd(
// TMA-NOT: ld.shared.v4
// TMA-DAG: cp.async.bulk.wait_group.read 0;
// TMA-DAG: st.shared.b32
// TMA-DAG: fence.proxy.async.shared::cta;
// TMA-DAG: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [{{%rd[0-9]+}}, {{{%r[0-9]+}}, {{%r[0-9]+}}}], [{{%rd[0-9]+}}];
// TMA-DAG: cp.async.bulk.commit_group;
// TMA-DAG: cp.async.bulk.wait_group 0;
// TMA-LABEL: .visible .entry dgrad(

// IR-LABEL: gpu.module @coat_linear
// IR: gpu.func @fwd(%{{[a-z0-9]+}}: !llvm.ptr {llvm.align = 64 : i32}, %{{[a-z0-9]+}}: !llvm.ptr {llvm.align = 64 : i32}, %{{[a-z0-9]+}}: memref<?xbf16>, %{{[a-z0-9]+}}: memref<?xf32>, %{{[a-z0-9]+}}: memref<?xf32>, %{{[a-z0-9]+}}: i64, %{{[a-z0-9]+}}: i64, %{{[a-z0-9]+}}: i64) kernel
// IR-SAME: coat.grid_constant = array<i32: 0, 1>
// IR-SAME: dtype = "e4m3", kind = "tensormap", name = "a"
// IR-SAME: config = {a = "e4m3", b = "e4m3", bias = false, epilogue = "direct", group_m = 8 : i64, kind = "forward", out = "bf16"
// IR-SAME: launch = {block = [384, 1, 1], grid_tiles = {{\[\["m", 128\], \["n", 256\]\]}}, persistent = true
// IR-SAME: known_block_size = array<i32: 384, 1, 1>, nvvm.minctasm = 1
// IR: nvvm.mbarrier.init
// IR: nvvm.fence.mbarrier.init
// IR: scf.if
// IR: nvvm.setmaxregister decrease 40
// IR: scf.for
// IR: nvvm.mbarrier.try_wait.parity
// IR: nvvm.cp.async.bulk.tensor.shared.cluster.global
// IR: else
// IR: nvvm.setmaxregister increase 232
// IR: scf.for
// IR: nvvm.mbarrier.try_wait.parity
// IR: nvvm.wgmma.fence.aligned
// IR-COUNT-4: nvvm.wgmma.mma_async
// IR: nvvm.wgmma.commit.group.sync.aligned
// IR: nvvm.wgmma.wait.group.sync.aligned 1
// IR: nvvm.mbarrier.arrive
// IR: nvvm.wgmma.wait.group.sync.aligned 0

// IR: gpu.func @dgrad(%{{[a-z0-9]+}}: !llvm.ptr {llvm.align = 64 : i32}, %{{[a-z0-9]+}}: !llvm.ptr {llvm.align = 64 : i32}, %{{[a-z0-9]+}}: memref<?xf32>, %{{[a-z0-9]+}}: memref<?xf32>, %{{[a-z0-9]+}}: memref<?xf32>, %{{[a-z0-9]+}}: i64
// IR-SAME: {bind = ["in0.codes"], box = [128, 128], dims = ["k", "m"], dtype = "e5m2", kind = "tensormap", name = "a"
// IR-SAME: dtype = "e4m3", kind = "tensormap", name = "b"
// IR-SAME: {bind = ["out0"], dtype = "f32", extent = "m*n", kind = "memref", name = "out"}, {bind = ["in0.scale"], dtype = "f32", extent = 1 : i64, kind = "memref", name = "a_scale"}
// IR-SAME: kind = "dgrad", out = "f32"

// IR: gpu.func @wgrad(
// IR-SAME: kind = "wgrad", out = "bf16"

// IR: gpu.func @gate_q16(%{{[a-z0-9]+}}: !llvm.ptr {llvm.align = 64 : i32}, %{{[a-z0-9]+}}: !llvm.ptr {llvm.align = 64 : i32}, %{{[a-z0-9]+}}: memref<?xi8>, %{{[a-z0-9]+}}: memref<?xi16>, %{{[a-z0-9]+}}: memref<?xf32>, %{{[a-z0-9]+}}: memref<?xf32>, %{{[a-z0-9]+}}: memref<?xbf16>, %{{[a-z0-9]+}}: i64
// IR-SAME: {bind = ["out0.codes"], dtype = "e4m3", extent = "m*n", kind = "memref", name = "out"}, {bind = ["out0.scale"], dtype = "bf16", extent = "m*groups", kind = "memref", name = "out_scale"}
// IR-SAME: {bind = ["in2"], dtype = "bf16", extent = "n", kind = "memref", name = "bias"}
// IR-SAME: bias = true
// IR-SAME: group_size = 16 : i64
// IR-SAME: out = "e4m3", out_scale = "bf16"
// Each group's maximum over its quad, plus eps, one group after the other:
// IR: gpu.shuffle  xor %{{.*}}, %c2_i32
// IR-NEXT: arith.maxnumf
// IR: gpu.shuffle  xor %{{.*}}, %c1_i32
// IR-NEXT: %[[MAX:.*]] = arith.maxnumf
// IR-NEXT: %[[EPS:.*]] = arith.constant 1.000000e-10 : f32
// IR-NEXT: %[[SUM:.*]] = arith.addf %[[MAX]], %[[EPS]] : f32
// then the scales (max + eps) / 448, and the lane's values divided by them,
// each an IEEE reciprocal and Markstein's correction, with no branch: every
// divisor lies in the correction's range.
// IR: %[[FP8MAX:.*]] = arith.constant 4.480000e+02 : f32
// IR: %[[R:.*]] = arith.divf %{{.*}}, %[[FP8MAX]] : f32
// IR: %[[Q0:.*]] = arith.mulf %[[SUM]], %[[R]] : f32
// IR: %[[S:.*]] = arith.select %{{.*}}, %[[Q0]], %{{.*}} : f32
// IR-NOT: scf.if
// IR: arith.divf %{{.*}}, %[[S]] : f32
// IR-NOT: scf.if
// IR: arith.truncf %{{.*}} : f32 to f8E4M3FN
// IR-NOT: coat.shared_divisor
// IR-NOT: func.func @

// CHECK-NOT: .local
// CHECK-LABEL: .entry fwd(
// CHECK-NEXT: .param .align 64 .b8 fwd_param_0[128]
// CHECK-NEXT: .param .align 64 .b8 fwd_param_1[128]
// CHECK: .maxntid 384, 1, 1
// CHECK-NEXT: .minnctapersm 1
// CHECK: mbarrier.init.shared.b64
// CHECK: setmaxnreg.inc.sync.aligned.u32 232
// CHECK: mbarrier.try_wait.parity.shared.b64
// CHECK: wgmma.fence.sync.aligned
// CHECK: wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3
// CHECK: wgmma.commit_group.sync.aligned
// CHECK: wgmma.wait_group.sync.aligned 1
// CHECK: mbarrier.arrive.shared.b64
// CHECK: wgmma.wait_group.sync.aligned 0
// CHECK: cvt.rn.bf16{{(x2)?}}.f32
// CHECK: setmaxnreg.dec.sync.aligned.u32 40
// CHECK: mbarrier.arrive.expect_tx.shared.b64
// CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes

// CHECK-LABEL: .entry dgrad(
// CHECK-NOT: cvt.rn.bf16
// CHECK: st.global.v2.b32
// CHECK: wgmma.mma_async.sync.aligned.m64n256k32.f32.e5m2.e4m3
// CHECK: cp.async.bulk.tensor.2d

// CHECK-LABEL: .entry wgrad(
// CHECK: wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e5m2
// CHECK: cp.async.bulk.tensor.2d

// CHECK-LABEL: .entry gate_q16(
// CHECK: wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3
// CHECK: shfl.sync.bfly.b32
// CHECK-NOT: div.rn.f32
// CHECK: rcp.rn.f32
// CHECK-NOT: div.rn.f32
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK: st.global.v2.b8
// CHECK: cvt.rn.bf16.f32
// CHECK: st.global.b16
// CHECK-NOT: .local

// PLAIN-LABEL: .entry fwd(
// PLAIN: .maxntid 128, 1, 1
// PLAIN-NOT: setmaxnreg
// PLAIN: cp.async.bulk.tensor.2d
// PLAIN-COUNT-8: wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3
// PLAIN-LABEL: .entry dgrad(
// PLAIN-COUNT-8: wgmma.mma_async.sync.aligned.m64n128k32.f32.e5m2.e4m3
// PLAIN-NOT: .local

func.func @fwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
               %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor>) -> tensor<?x?xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
           !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}

func.func @dgrad(%dy: !coat.qtensor<?x?xf8E5M2, per_tensor>,
                 %wt: !coat.qtensor<?x?xf8E4M3FN, per_tensor>) -> tensor<?x?xf32> {
  %dx = coat.linear dgrad %dy, %wt
          : !coat.qtensor<?x?xf8E5M2, per_tensor>,
            !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> tensor<?x?xf32>
  return %dx : tensor<?x?xf32>
}

func.func @wgrad(%dyt: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                 %xt: !coat.qtensor<?x?xf8E5M2, per_tensor>) -> tensor<?x?xbf16> {
  %dw = coat.linear wgrad %dyt, %xt
          : !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
            !coat.qtensor<?x?xf8E5M2, per_tensor> -> tensor<?x?xbf16>
  return %dw : tensor<?x?xbf16>
}

func.func @gate_q16(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                    %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor>, %b: tensor<?xbf16>)
    -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> {
  %y = coat.linear forward %x, %w bias %b
         : !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
           !coat.qtensor<?x?xf8E4M3FN, per_tensor>, tensor<?xbf16>
         -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  return %y : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
}
