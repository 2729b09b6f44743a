// coat-lower-norms{lane-elements=V}: a thread takes V-element chunks of a
// row instead of whole G-element groups, so a warp's accesses to f32
// weight, bias and y are contiguous 16-byte lanes; the lanes of a group
// share its scale and combine its partial maximum by shuffles.
// RUN: coat-opt %s -coat-lower-norms='target=gpu lane-elements=4' | FileCheck %s --check-prefix=LANES
// RUN: coat-opt %s -coat-lower-norms='target=gpu' | FileCheck %s --check-prefix=DEFAULT
// RUN: coat-opt %s --nvvm-reflect-add=__CUDA_PREC_SQRT=1 --pass-pipeline='builtin.module(coat-lower-norms{target=gpu lane-elements=4},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=PTX
// RUN: not coat-opt %s -coat-lower-norms='target=gpu lane-elements=2' 2>&1 | FileCheck %s --check-prefix=SMALL
// RUN: not coat-opt %s -coat-lower-norms='target=gpu lane-elements=32' 2>&1 | FileCheck %s --check-prefix=WIDE
// RUN: not coat-opt %s -coat-lower-norms='target=gpu lane-elements=12' 2>&1 | FileCheck %s --check-prefix=ODD

// SMALL: error: lane-elements must be 0 (auto) or a power of two in [4, 16] (the group size), got 2
// WIDE: error: lane-elements must be 0 (auto) or a power of two in [4, 16] (the group size), got 32
// ODD: error: lane-elements must be 0 (auto) or a power of two in [4, 16] (the group size), got 12

// 4096 columns, 128 threads a row: 8 slots of 4 elements a thread. Only the
// team-sum buffer: y is stored contiguously without staging.
// LANES-LABEL: gpu.func @ln_wb(
// LANES-SAME: workgroup(%{{.*}} : memref<16xf32, #gpu.address_space<workgroup>>) kernel
// LANES-SAME: lane_elements = 4
// LANES-SAME: threads_per_row = 128
// Slot 0: chunk t, its group t / 4, its codes from element 4t.
// LANES: %[[T:.*]] = arith.remui %thread_id_x, %c128
// LANES: %[[CHUNK:.*]] = arith.addi %[[T]], %c0
// LANES: %[[GROUP:.*]] = arith.divui %[[CHUNK]], %c4
// LANES: %[[FIRST:.*]] = arith.muli %[[CHUNK]], %c4
// LANES: arith.cmpi ult, %[[GROUP]],
// LANES: vector.load %{{.*}} {alignment = 4 : i64} : memref<?xi8>, vector<4xi8>
// LANES: arith.addi %{{.*}}, %[[GROUP]]
// LANES: memref.load {{.*}} : memref<?xi16>
// The output pass: weight and bias 16 bytes a lane, y likewise.
// LANES: vector.load %arg2[{{.*}}] {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// LANES: vector.load %arg3[{{.*}}] {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// LANES: vector.store %{{.*}}, %arg4[{{.*}}] {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// The group's maximum over its 4 lanes, stored by its first lane.
// LANES: gpu.shuffle  xor %{{.*}}, %c2_i32
// LANES: arith.maxnumf
// LANES: gpu.shuffle  xor %{{.*}}, %c1_i32
// LANES: arith.maxnumf
// LANES: arith.remui %[[T]], %c4
// LANES: memref.store %{{.*}}, %arg7
// LANES-NOT: gpu.func @ln_wb(

// The default: a whole group a slot, y staged per warp.
// DEFAULT-LABEL: gpu.func @ln_wb(
// DEFAULT-SAME: memref<16xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<4096xf32, #gpu.address_space<workgroup>>) kernel
// DEFAULT-SAME: lane_elements = 16
// DEFAULT: vector.load %{{.*}} : memref<?xf32>, vector<16xf32>

// PTX-LABEL: .visible .entry ln_wb(
// PTX-NOT: st.shared.v4
// PTX: ld.global.b32
// PTX: ld.global.v4.b32
// PTX: st.global.v4.b32
// PTX: shfl.sync.bfly.b32 {{.*}}, 2, 31, -1;
// PTX: shfl.sync.bfly.b32 {{.*}}, 1, 31, -1;
func.func @ln_wb(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %w: tensor<?xf32>, %b: tensor<?xf32>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>) attributes {coat.max_cols = 4096 : i64} {
  %y, %mean, %rstd = coat.layernorm %x weight %w bias %b eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>
      -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xf32> -> tensor<?x?xf32>
  return %y, %mean, %rstd, %m : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?x?xf32>
}

// Backward with fused column sums: 4 accumulators a slot and sum, written
// to the workspace row at the slot's first element; `_columns`, where
// there is one, keeps a thread per group.
// LANES-LABEL: gpu.func @ln_bwd(
// LANES-SAME: column_sums = "fused"
// LANES-SAME: lane_elements = 4
// LANES: scf.for
// LANES: math.fma {{.*}} : vector<4xf32>
// LANES: scf.yield
// LANES: vector.store %{{.*}}, %arg7[{{.*}}] {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// LANES-LABEL: gpu.func @ln_bwd_reduce(
func.func @ln_bwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>) attributes {coat.max_cols = 4096 : i64} {
  %dx, %dw, %db = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>,
        tensor<?xf32>, tensor<?x?xbf16>, tensor<?xf32>
      -> tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
}

// The default by team and operands: 8-element slots where a team of 256
// threads or more reads a weight (8192 columns: 256 threads, two groups a
// thread); a whole group without a weight or with a narrower team (ln_wb,
// 128 threads, above).
// DEFAULT-LABEL: gpu.func @ln_wb_wide(
// DEFAULT-SAME: lane_elements = 8
// DEFAULT-SAME: threads_per_row = 256
// DEFAULT-LABEL: gpu.func @ln_wide(
// DEFAULT-SAME: lane_elements = 16
// DEFAULT-SAME: threads_per_row = 256
// Slots count V-element chunks: 11008 columns are 1376 8-element chunks,
// three slots of 512 threads (12288 columns), not the four of two whole
// groups; without a weight, two whole groups (16384).
// DEFAULT-LABEL: gpu.func @ln_wb_11008(
// DEFAULT-SAME: lane_elements = 8
// DEFAULT-SAME: max_cols = 12288
// DEFAULT-SAME: threads_per_row = 512
// DEFAULT: %[[T:.*]] = arith.remui %thread_id_x, %c512
// DEFAULT: arith.addi %[[T]], %c0
// DEFAULT: arith.addi %[[T]], %c512
// DEFAULT: arith.addi %[[T]], %c1024
// DEFAULT-NOT: arith.addi %[[T]], %c1536
// DEFAULT: gpu.return
// DEFAULT-LABEL: gpu.func @ln_11008(
// DEFAULT-SAME: lane_elements = 16
// DEFAULT-SAME: max_cols = 16384
func.func @ln_wb_wide(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %w: tensor<?xf32>, %b: tensor<?xf32>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>) attributes {coat.max_cols = 8192 : i64} {
  %y, %mean, %rstd = coat.layernorm %x weight %w bias %b eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>
      -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  return %y, %mean, %rstd : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
}

func.func @ln_wide(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>) attributes {coat.max_cols = 8192 : i64} {
  %y, %mean, %rstd = coat.layernorm %x eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
      -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  return %y, %mean, %rstd : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
}

func.func @ln_wb_11008(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %w: tensor<?xf32>, %b: tensor<?xf32>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>) attributes {coat.max_cols = 11008 : i64} {
  %y, %mean, %rstd = coat.layernorm %x weight %w bias %b eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>
      -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  return %y, %mean, %rstd : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
}

func.func @ln_11008(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>) attributes {coat.max_cols = 11008 : i64} {
  %y, %mean, %rstd = coat.layernorm %x eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
      -> tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
  return %y, %mean, %rstd : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>
}
