// row-prefetch: a backward row kernel whose teams loop over rows copies
// each thread's slots of the next row's x codes and dy into shared memory
// with cp.async (two stages), and loads the next row's scales and rstd
// into registers, while the team works on the current row.
// RUN: coat-opt %s -coat-lower-norms='target=gpu row-prefetch=true' | FileCheck %s
// RUN: coat-opt %s --nvvm-reflect-add=__CUDA_PREC_SQRT=1 --pass-pipeline='builtin.module(coat-lower-norms{target=gpu row-prefetch=true},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=PTX
// RUN: coat-opt %s -coat-lower-norms='target=gpu row-prefetch=true column-sums=shared max-cols=4096' | FileCheck %s --check-prefix=SHARED
// RUN: coat-opt %s -coat-lower-norms='target=gpu row-prefetch=true max-cols=4096 lane-elements=8' | FileCheck %s --check-prefix=F32
// RUN: coat-opt %s -coat-lower-norms='target=gpu' | FileCheck %s --check-prefix=OFF
// RUN: coat-opt %s -coat-lower-norms='target=gpu column-sums=shared max-cols=4096' | FileCheck %s --check-prefix=AUTO
// RUN: coat-opt %s -coat-lower-norms='target=gpu row-prefetch=false' | FileCheck %s --check-prefix=NEVER
// RUN: not coat-opt %s -coat-lower-norms='target=gpu row-prefetch=yes' 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: coat-opt %s -coat-lower-norms='target=cpu row-prefetch=true' | FileCheck %s --check-prefix=CPU
// RUN: not coat-opt %s -coat-lower-norms='target=gpu row-prefetch=true column-sums=shared max-cols=16384' 2>&1 | FileCheck %s --check-prefix=WIDE

// 2048 columns, fused sums: teams of 128 threads, one 16-element slot each,
// two a CTA. Dynamic shared memory: the team sums (64 bytes), then two
// stages of 256 threads' 16 bytes of codes, then of their 32 bytes of dy.
// CHECK-LABEL: gpu.func @rms_bwd(
// CHECK-SAME: %[[CODES:[^:]*]]: memref<?xi8>, %[[SCALES:[^:]*]]: memref<?xi16>, %{{[^:]*}}: memref<?xi16>, %[[RSTD:[^:]*]]: memref<?xf32>, %[[DY:[^:]*]]: memref<?xi16>
// CHECK-SAME: column_sums = "fused"
// CHECK-SAME: row_prefetch = true
// CHECK-SAME: launch = {block = [256, 1, 1], grid_tiles = {{\[\["partials", 2\]\]}}, shared_bytes = 24640 : i64}
// CHECK: %[[DYN:.*]] = gpu.dynamic_shared_memory
// CHECK: memref.view %[[DYN]][%c0{{.*}}][] : {{.*}} to memref<16xf32, #gpu.address_space<workgroup>>
// CHECK: %[[SC:.*]] = memref.view %[[DYN]][%c64{{.*}}][] : {{.*}} to memref<8192xi8, #gpu.address_space<workgroup>>
// CHECK: %[[SG:.*]] = memref.view %[[DYN]][%c8256{{.*}}][] : {{.*}} to memref<8192xi16, #gpu.address_space<workgroup>>
// The first row, before the loop: a slot past the row reads nothing and
// is zero-filled (source index 0, source count 0).
// CHECK: %[[FROM:.*]] = arith.select %[[VALID:.*]], %{{.*}}, %c0
// CHECK: %[[COUNT:.*]] = arith.select %[[VALID]], %c16{{.*}}, %c0
// CHECK: %[[C0:.*]] = nvgpu.device_async_copy %[[CODES]][%[[FROM]]], %[[SC]][%{{.*}}], 16, %[[COUNT]] {bypassL1}
// CHECK: %[[G0:.*]] = nvgpu.device_async_copy %[[DY]][%{{.*}}], %[[SG]][%{{.*}}], 8, %{{.*}} {bypassL1}
// CHECK: %[[G1:.*]] = nvgpu.device_async_copy %[[DY]][%{{.*}}], %[[SG]][%{{.*}}], 8, %{{.*}} {bypassL1}
// CHECK: nvgpu.device_async_create_group %[[C0]], %[[G0]], %[[G1]]
// CHECK: memref.load %[[SCALES]]
// CHECK: memref.load %[[RSTD]]
// Each row: start the next row's copies and loads, wait for this row's
// group only, read the stage i % 2, and carry the next row's scalars.
// CHECK: scf.for %[[I:.*]] = {{.*}} iter_args(%{{.*}} = %{{.*}}, %[[SCALE:.*]] = %{{.*}}, %[[R:.*]] = %{{.*}}) -> (vector<16xf32>, f32, f32)
// CHECK: %[[NEXT:.*]] = arith.andi %{{.*}}, %c1
// CHECK: %[[GROUP:.*]] = nvgpu.device_async_create_group
// CHECK: memref.load %[[SCALES]]
// CHECK: memref.load %[[RSTD]]
// CHECK: nvgpu.device_async_wait %[[GROUP]] {numGroups = 1 : i32}
// CHECK: %[[STAGE:.*]] = arith.andi %[[I]], %c1
// CHECK: arith.muli %[[STAGE]]
// CHECK: vector.load %[[SG]]
// CHECK: gpu.barrier
// CHECK: vector.load %[[SC]]
// CHECK-NOT: memref.load %[[RSTD]]
// CHECK: scf.yield
// Nothing in flight when the CTA exits.
// CHECK: %[[NONE:.*]] = nvgpu.device_async_create_group{{ *$}}
// CHECK: nvgpu.device_async_wait %[[NONE]] {numGroups = 0 : i32}

// A backward without dweight takes one row per team: nothing to prefetch.
// CHECK-LABEL: gpu.func @ln_bwd(
// CHECK-NOT: row_prefetch
// CHECK-SAME: shared_bytes = 0
// CHECK-NOT: nvgpu.
// CHECK: gpu.return

// cp.async with a source size; the wait leaves the newest group in flight.
// PTX-LABEL: .visible .entry rms_bwd(
// PTX-NOT: .shared .align {{.*}} __wg_rms_bwd_0
// PTX: cp.async.cg.shared.global [{{.*}}], [{{.*}}], 16, %r{{[0-9]+}};
// PTX: cp.async.commit_group;
// PTX: cp.async.commit_group;
// PTX: cp.async.wait_group 1;
// PTX: ld.shared.v4.b32
// PTX: bar.sync 0;
// PTX: cp.async.wait_group 0;
// PTX: ret;

// With shared sums, the stages follow the sums (two teams of 2048 f32).
// SHARED-LABEL: gpu.func @rms_bwd(
// SHARED-SAME: column_sums = "shared"
// SHARED-SAME: row_prefetch = true
// SHARED-SAME: shared_bytes = 41024 : i64
// SHARED: memref.view %{{.*}}[%c64{{.*}}][] : {{.*}} to memref<4096xf32, #gpu.address_space<workgroup>>
// SHARED: memref.view %{{.*}}[%c16448{{.*}}][] : {{.*}} to memref<8192xi8, #gpu.address_space<workgroup>>
// SHARED: memref.view %{{.*}}[%c24640{{.*}}][] : {{.*}} to memref<8192xi16, #gpu.address_space<workgroup>>
// SHARED: nvgpu.device_async_wait

// f32 dy in 8-element slots: 8 bytes of codes (through L1: cp.async.cg
// takes 16 bytes only) and two 16-byte pieces of dy a slot.
// F32-LABEL: gpu.func @ln_f32_bwd(
// F32-SAME: row_prefetch = true
// F32: nvgpu.device_async_copy %{{.*}}, 8, %{{.*}} : memref<?xi8> to memref<{{[0-9]+}}xi8, #gpu.address_space<workgroup>>
// F32: nvgpu.device_async_copy %{{.*}}, 4, %{{.*}} {bypassL1} : memref<?xf32> to memref<{{[0-9]+}}xf32, #gpu.address_space<workgroup>>
// F32: nvgpu.device_async_copy %{{.*}}, 4, %{{.*}} {bypassL1} : memref<?xf32> to memref<{{[0-9]+}}xf32, #gpu.address_space<workgroup>>

// `auto` (the default) leaves RMSNorm's teams without it; the manifest
// says so where a team loops over rows. It prefetches for the LayerNorm
// backward with a weight, no dbias and shared sums: 256 groups, one a
// thread in 8-element slots (two), a team of 256 threads a CTA; after the
// team sums (64 bytes) and the column sums (4096 f32), two stages of 16
// bytes of codes and 32 of dy a thread.
// OFF-LABEL: gpu.func @rms_bwd(
// OFF-SAME: row_prefetch = false
// OFF-SAME: shared_bytes = 0
// OFF-NOT: nvgpu.
// OFF: gpu.func @rms_bwd_reduce(
// OFF-LABEL: gpu.func @lnw_bwd(
// OFF-SAME: column_sums = "shared"
// OFF-SAME: row_prefetch = true
// OFF-SAME: launch = {block = [256, 1, 1], {{.*}}, shared_bytes = 41024 : i64}
// OFF: nvgpu.device_async_copy

// Not for RMSNorm's shared teams nor for those with dbias.
// AUTO-LABEL: gpu.func @rms_bwd(
// AUTO-SAME: column_sums = "shared"
// AUTO-SAME: row_prefetch = false
// AUTO-LABEL: gpu.func @ln_f32_bwd(
// AUTO-SAME: column_sums = "shared"
// AUTO-SAME: row_prefetch = false
// AUTO-LABEL: gpu.func @lnw_bwd(
// AUTO-SAME: row_prefetch = true

// NEVER-LABEL: gpu.func @lnw_bwd(
// NEVER-SAME: column_sums = "shared"
// NEVER-SAME: row_prefetch = false
// NEVER-NOT: nvgpu.
// NEVER: gpu.func @lnw_bwd_reduce(

// BAD: error: row-prefetch must be auto, true or false, got 'yes'

// The CPU twin has no latency to hide; its record, which shares the
// manifest entry with the GPU kernel's, says nothing of a prefetch.
// CPU-LABEL: func.func @rms_bwd(
// CPU-NOT: row_prefetch
// CPU-SAME: column_sums = "fused"
// CPU-NOT: row_prefetch
// CPU-NOT: nvgpu.

// Two f32 sums and two stages of f32 dy for 16384 columns do not fit.
// WIDE: error: a row of 16384 columns needs 295040 bytes of shared memory in a CTA of one team (at most 232448): use fused or separate column sums, drop row-prefetch, or lower max-cols
func.func @rms_bwd(%x: !coat.qtensor<?x2048xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<2048xbf16>, %rstd: tensor<?xf32>, %dy: tensor<?x2048xbf16>)
    -> (tensor<?x2048xbf16>, tensor<2048xbf16>) {
  %dx, %dw = coat.rmsnorm_grad %x, %w, %rstd, %dy
      : !coat.qtensor<?x2048xf8E4M3FN, per_group<16>, scale = bf16>, tensor<2048xbf16>,
        tensor<?xf32>, tensor<?x2048xbf16> -> tensor<?x2048xbf16>, tensor<2048xbf16>
  return %dx, %dw : tensor<?x2048xbf16>, tensor<2048xbf16>
}

func.func @ln_bwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>)
    -> tensor<?x?xbf16> {
  %dx = coat.layernorm_grad %x, %mean, %rstd, %dy
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>,
        tensor<?x?xbf16> -> tensor<?x?xbf16>
  return %dx : tensor<?x?xbf16>
}

func.func @ln_f32_bwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xf32>, %w: tensor<?xf32>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>) {
  %dx, %dw, %db = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>,
        tensor<?x?xf32>, tensor<?xf32> -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  return %dx, %dw, %db : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
}

func.func @lnw_bwd(%x: !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16>,
    %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x4096xbf16>, %w: tensor<4096xbf16>)
    -> (tensor<?x4096xbf16>, tensor<4096xbf16>) {
  %dx, %dw = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>,
        tensor<?x4096xbf16>, tensor<4096xbf16> -> tensor<?x4096xbf16>, tensor<4096xbf16>
  return %dx, %dw : tensor<?x4096xbf16>, tensor<4096xbf16>
}
