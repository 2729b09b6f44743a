// column-sums=shared: the row kernel keeps each thread's partial column sums
// in dynamic shared memory, read and written by that thread alone. Most
// runs pin the team (two whole groups a thread); LEAN and AUTO check the
// default team.
// RUN: coat-opt %s -coat-lower-norms='target=gpu column-sums=shared groups-per-thread=2 lane-elements=16' | FileCheck %s
// RUN: coat-opt %s -coat-lower-norms='target=cpu column-sums=shared groups-per-thread=2 lane-elements=16' | FileCheck %s --check-prefix=CPU
// RUN: coat-opt %s --nvvm-reflect-add=__CUDA_PREC_SQRT=1 --pass-pipeline='builtin.module(coat-lower-norms{target=gpu column-sums=shared groups-per-thread=2 lane-elements=16},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=PTX
// RUN: coat-opt %s -coat-lower-norms='target=gpu column-sums=shared groups-per-thread=2 lane-elements=16 block-size=1024' | FileCheck %s --check-prefix=BLOCK
// RUN: coat-opt %s -coat-lower-norms='target=gpu' | FileCheck %s --check-prefix=AUTO
// RUN: coat-opt %s -coat-lower-norms='target=gpu column-sums=shared' | FileCheck %s --check-prefix=LEAN
// RUN: not coat-opt %s -coat-lower-norms='target=gpu column-sums=shared groups-per-thread=2 lane-elements=16 max-cols=32768' 2>&1 | FileCheck %s --check-prefix=WIDE

// 2048 columns: teams of 64 threads (two groups each), four a CTA, 2048 f32
// sums each (32 KiB) after the team sums (64 bytes), all of it dynamic
// shared memory. No `_columns` kernel.
// CHECK-LABEL: gpu.func @rms_bwd(
// CHECK-SAME: %[[PART:[^:]*]]: memref<?xf32>, %{{[^:]*}}: i64, %{{[^:]*}}: i64, %{{[^:]*}}: i64)
// CHECK-SAME: column_sums = "shared"
// CHECK-SAME: max_cols = 2048
// CHECK-SAME: launch = {block = [256, 1, 1], grid_tiles = {{\[\["partials", 4\]\]}}, shared_bytes = 32832 : i64}
// CHECK: %[[TEAM:.*]] = arith.divui %thread_id_x, %c64
// CHECK: %[[DYN:.*]] = gpu.dynamic_shared_memory
// CHECK: memref.view %[[DYN]][%c0{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<16xf32, #gpu.address_space<workgroup>>
// CHECK: %[[SUMS:.*]] = memref.view %[[DYN]][%{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<8192xf32, #gpu.address_space<workgroup>>
// CHECK: arith.muli %[[TEAM]], %c2048
// Zeroed before the rows, quad by quad; a quad's place is rotated by chunk.
// CHECK: scf.if
// CHECK: arith.shrui
// CHECK: arith.xori
// CHECK: vector.store %{{.*}}, %[[SUMS]][%{{.*}}] {alignment = 16 : i64} : memref<8192xf32, #gpu.address_space<workgroup>>, vector<4xf32>
// The rows: each slot adds its terms to its own sums, no barrier.
// CHECK: scf.for
// CHECK: gpu.barrier
// CHECK: scf.if
// CHECK-COUNT-4: vector.load %[[SUMS]]
// CHECK: math.fma
// CHECK-COUNT-4: vector.store %{{.*}}, %[[SUMS]]
// CHECK-NOT: gpu.barrier
// CHECK: scf.yield
// After the rows, one workspace row per team.
// CHECK-COUNT-4: vector.load %[[SUMS]]
// CHECK: vector.store %{{.*}}, %[[PART]]
// CHECK-NOT: gpu.func @rms_bwd_columns(
// CHECK: gpu.func @rms_bwd_reduce(

// The CPU twin takes partials like the fused kernel.
// CPU-LABEL: func.func @rms_bwd(
// CPU-SAME: i64, %{{.*}}: i64, %{{.*}}: i64)
// CPU-NOT: func.func @rms_bwd_columns(
// CPU: func.func @rms_bwd_reduce(

// No static shared memory in the row kernel: the dynamic region starts at
// the only static symbol.
// PTX-LABEL: .visible .entry rms_bwd(
// PTX-NOT: .shared .align {{.*}} __wg_rms_bwd_0
// PTX: mov.b64 {{.*}}, __dynamic_shmem__0;
// PTX: st.shared.v4.b32 {{.*}}{0f00000000, 0f00000000, 0f00000000, 0f00000000}
// PTX: ld.shared.v4.b32
// PTX: fma.rn.f32
// PTX: st.shared.v4.b32
func.func @rms_bwd(%x: !coat.qtensor<?x2048xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<2048xbf16>, %rstd: tensor<?xf32>, %dy: tensor<?x2048xbf16>)
    -> (tensor<?x2048xbf16>, tensor<2048xbf16>) {
  %dx, %dw = coat.rmsnorm_grad %x, %w, %rstd, %dy
      : !coat.qtensor<?x2048xf8E4M3FN, per_group<16>, scale = bf16>, tensor<2048xbf16>,
        tensor<?xf32>, tensor<?x2048xbf16> -> tensor<?x2048xbf16>, tensor<2048xbf16>
  return %dx, %dw : tensor<?x2048xbf16>, tensor<2048xbf16>
}

// Dynamic cols: sums for max-cols (16384), dweight's then dbias's: 128 KiB
// after the team sums.
// CHECK-LABEL: gpu.func @ln_wide_bwd(
// CHECK-SAME: column_sums = "shared"
// CHECK-SAME: max_cols = 16384
// CHECK-SAME: launch = {block = [512, 1, 1], grid_tiles = {{\[\["partials", 1\]\]}}, shared_bytes = 131200 : i64}
// CHECK: memref.view %{{.*}} to memref<32768xf32, #gpu.address_space<workgroup>>

// A CTA whose teams' sums would not fit takes one team.
// BLOCK-LABEL: gpu.func @rms_bwd(
// BLOCK-SAME: launch = {block = [1024, 1, 1], grid_tiles = {{\[\["partials", 16\]\]}}, shared_bytes = 131328 : i64}
// BLOCK-LABEL: gpu.func @ln_wide_bwd(
// BLOCK-SAME: launch = {block = [512, 1, 1], grid_tiles = {{\[\["partials", 1\]\]}}, shared_bytes = 131200 : i64}

// Two sums of 32768 columns (256 KiB) do not fit even a CTA of one team.
// WIDE: error: a row of 32768 columns needs 262400 bytes of shared memory in a CTA of one team (at most 232448): use fused or separate column sums, or lower max-cols
func.func @ln_wide_bwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>) {
  %dx, %dw, %db = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>,
        tensor<?x?xbf16>, tensor<?xf32> -> tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
}

// The default team of shared sums without dbias: one group a thread in
// 8-element slots (two quads each); with dbias two whole groups a thread.
// LEAN-LABEL: gpu.func @rms_bwd(
// LEAN-SAME: column_sums = "shared"
// LEAN-SAME: lane_elements = 8
// LEAN-SAME: threads_per_row = 128
// LEAN-SAME: shared_bytes = 16448 : i64
// LEAN-LABEL: gpu.func @ln_wide_bwd(
// LEAN-SAME: lane_elements = 16
// LEAN-SAME: threads_per_row = 512

// auto: shared for 129..512 groups a row without dbias, 257..512 with;
// separate for wider rows with dbias; else fused (2048 columns: 128
// groups). Other kernels ask for no dynamic shared memory.
// AUTO-LABEL: gpu.func @rms_bwd(
// AUTO-SAME: column_sums = "fused"
// AUTO-SAME: shared_bytes = 0 : i64
// AUTO-LABEL: gpu.func @ln_wide_bwd(
// AUTO-SAME: column_sums = "separate"
// AUTO-SAME: shared_bytes = 0 : i64
// AUTO-LABEL: gpu.func @rms_bwd_8192(
// AUTO-SAME: column_sums = "shared"
// AUTO-SAME: lane_elements = 8
// AUTO-SAME: threads_per_row = 512
// AUTO-SAME: shared_bytes = 32896 : i64
func.func @rms_bwd_8192(%x: !coat.qtensor<?x8192xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<8192xbf16>, %rstd: tensor<?xf32>, %dy: tensor<?x8192xbf16>)
    -> (tensor<?x8192xbf16>, tensor<8192xbf16>) {
  %dx, %dw = coat.rmsnorm_grad %x, %w, %rstd, %dy
      : !coat.qtensor<?x8192xf8E4M3FN, per_group<16>, scale = bf16>, tensor<8192xbf16>,
        tensor<?xf32>, tensor<?x8192xbf16> -> tensor<?x8192xbf16>, tensor<8192xbf16>
  return %dx, %dw : tensor<?x8192xbf16>, tensor<8192xbf16>
}
