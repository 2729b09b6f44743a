// Structure of the norm kernels: a team of threads per row, workgroup sums
// for teams wider than a warp, the fused partial maxima, the dweight
// workspace, its _columns and _reduce kernels, and the manifest records.
// RUN: coat-opt %s -coat-lower-norms='target=gpu' | FileCheck %s --check-prefix=GPU
// RUN: coat-opt %s -coat-lower-norms='target=cpu' | FileCheck %s --check-prefix=CPU

// GPU: gpu.module @coat_norm_kernels
// GPU-LABEL: gpu.func @rms_warp(
// GPU-SAME: workgroup(%{{.*}} : memref<16xf32, #gpu.address_space<workgroup>>, %{{.*}} : memref<4096xi16, #gpu.address_space<workgroup>>)
// GPU-SAME: config = {{{.*}}max_cols = 1024 : i64, norm = "rms"{{.*}}rows_per_block = 8 : i64{{.*}}threads_per_row = 32 : i64
// GPU-SAME: launch = {block = [256, 1, 1], grid_tiles = {{\[}}["rows", 8]]
// GPU-SAME: known_block_size = array<i32: 256, 1, 1>
// GPU: vector.load {{.*}} : memref<?xi8>, vector<16xi8>
// GPU: arith.extf {{.*}} : vector<16xf8E4M3FN> to vector<16xf32>
// GPU: gpu.shuffle  xor {{.*}}, %{{.*}}, %{{.*}} : f32
// GPU-NOT: gpu.barrier
// GPU: math.sqrt
// GPU: arith.maxnumf
// GPU: arith.truncf {{.*}} : vector<16xf32> to vector<16xbf16>
// GPU: vector.store
// GPU: gpu.return
func.func @rms_warp(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>) -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>)
    attributes {coat.max_cols = 1024 : i64} {
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>
      -> tensor<?x?xbf16>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %y, %rstd, %m : tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>
}

// A static cols extent sets max_cols; 4096 columns in 2 groups per thread
// is a team of 128 threads, wider than a warp: per-warp sums go through
// workgroup memory between two barriers.
// The f32 output (64 bytes a group) is stored through a per-warp region of
// workgroup memory: a group's 16-byte chunks are written by consecutive
// lanes, so every store instruction covers 512 contiguous bytes.
// GPU-LABEL: gpu.func @ln_cta(
// GPU-SAME: workgroup(%{{.*}} : memref<16xf32, #gpu.address_space<workgroup>>, %[[STAGE:.*]] : memref<4096xf32, #gpu.address_space<workgroup>>)
// GPU-SAME: config = {{{.*}}max_cols = 4096 : i64, norm = "layer"{{.*}}threads_per_row = 128 : i64
// GPU-SAME: nvvm.minctasm = 4 : i32
// GPU: gpu.shuffle  xor
// GPU: gpu.barrier
// GPU: memref.load {{.*}} : memref<16xf32, #gpu.address_space<workgroup>>
// GPU: gpu.barrier
// GPU: vector.store %{{.*}}, %[[STAGE]][%{{.*}}] {alignment = 16 : i64} : memref<4096xf32, #gpu.address_space<workgroup>>, vector<16xf32>
// GPU-NEXT: %{{.*}} = arith.constant -1 : i32
// GPU-NEXT: nvvm.bar.warp.sync
// GPU: vector.load %[[STAGE]]{{.*}} : memref<4096xf32, #gpu.address_space<workgroup>>, vector<4xf32>
// GPU: vector.store {{.*}} : memref<?xf32>, vector<4xf32>
// GPU: nvvm.bar.warp.sync
func.func @ln_cta(%x: !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (tensor<?x4096xf32>, tensor<?xf32>, tensor<?xf32>) {
  %y, %mean, %rstd = coat.layernorm %x eps = 1.000000e-05
      : !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16>
      -> tensor<?x4096xf32>, tensor<?xf32>, tensor<?xf32>
  return %y, %mean, %rstd : tensor<?x4096xf32>, tensor<?xf32>, tensor<?xf32>
}

// Backward with dweight and dbias: a workspace row per team, then the
// _reduce kernel (32 columns x 8 warps) sums the partials in a fixed order.
// One group per thread (its column accumulators stay in registers): 256
// threads for 4096 columns.
// GPU-LABEL: gpu.func @ln_bwd(
// GPU-SAME: {bind = ["scratch"], dtype = "f32", extent = "partials*cols", kind = "memref", name = "dweight_partial"}
// GPU-SAME: {bind = ["scratch"], dtype = "f32", extent = "partials*cols", kind = "memref", name = "dbias_partial"}
// GPU-SAME: {bind = "free", dtype = "i64", kind = "scalar", name = "partials"}
// GPU-SAME: column_sums = "fused"
// GPU-SAME: threads_per_row = 256
// GPU-SAME: launch = {block = [256, 1, 1], grid_tiles = {{\[}}["partials", 1]]
// GPU: scf.for
// GPU: math.fma
// GPU: gpu.barrier
// GPU-LABEL: gpu.func @ln_bwd_reduce(
// GPU-SAME: launch = {block = [256, 1, 1], grid_tiles = {{\[}}["cols", 32]]
// GPU-SAME: op = "norm_grad_reduce"
// GPU: scf.for
// GPU: gpu.barrier
func.func @ln_bwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>) attributes {coat.max_cols = 4096 : i64} {
  %dx, %dw, %db = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>,
        tensor<?xf32>, tensor<?x?xbf16>, tensor<?xf32>
      -> tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
}

// 16384 columns with dbias: fused sums would hold two slots of two sums
// (128 registers), shared ones 128 KiB a team. The column sums go to
// _columns instead (a thread per group and partial, x over the columns, y
// over the partials), which re-reads x and dy; the row kernel takes one
// team per row and neither the workspace nor partials.
// GPU-LABEL: gpu.func @ln_bwd_wide(
// GPU-NOT: dweight_partial
// GPU-NOT: partials
// GPU-SAME: column_sums = "separate"
// GPU-SAME: launch = {block = [512, 1, 1], grid_tiles = {{\[}}["rows", 1]]
// GPU: gpu.return
// GPU-LABEL: gpu.func @ln_bwd_wide_columns(
// GPU-SAME: name = "dweight_partial"
// GPU-SAME: name = "dbias_partial"
// GPU-SAME: name = "partials"
// GPU-SAME: launch = {block = [128, 1, 1], grid_tiles = {{\[}}["cols", 2048], ["partials", 1]]
// GPU-SAME: op = "norm_grad_columns"
// GPU: gpu.block_id  y
// GPU: scf.for
// GPU: math.fma {{.*}} : vector<16xf32>
// GPU: arith.addf {{.*}} : vector<16xf32>
// GPU: scf.yield
// GPU-NOT: gpu.barrier
// GPU: gpu.return
// GPU-LABEL: gpu.func @ln_bwd_wide_reduce(
// GPU-SAME: of = "ln_bwd_wide"
func.func @ln_bwd_wide(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>) attributes {coat.max_cols = 16384 : i64} {
  %dx, %dw, %db = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>,
        tensor<?xf32>, tensor<?x?xbf16>, tensor<?xf32>
      -> tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
}

// CPU twins: the same ABI, loops over rows and groups, no GPU ops.
// CPU-LABEL: func.func @rms_warp(%{{.*}}: memref<?xi8>, %{{.*}}: memref<?xi16>, %{{.*}}: memref<?xi16>, %{{.*}}: memref<?xi16>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: i64, %{{.*}}: i64)
// CPU-NOT: gpu.
// CPU: scf.for
// CPU-LABEL: func.func @ln_cta(
// CPU-LABEL: func.func @ln_bwd(
// CPU-SAME: %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64)
// CPU-LABEL: func.func @ln_bwd_reduce(
// CPU-LABEL: func.func @ln_bwd_wide(
// CPU-SAME: memref<?xi16>, %{{.*}}: i64, %{{.*}}: i64)
// CPU-LABEL: func.func @ln_bwd_wide_columns(
// CPU-SAME: %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64)
// CPU-LABEL: func.func @ln_bwd_wide_reduce(
// CPU-NOT: gpu.

// A backward whose dx feeds a per-tensor quantize (a norm after a
// projection) takes the partial maxima of dx in its row kernel, bound to its
// third result, written after dx.
// GPU-LABEL: gpu.func @rms_bwd_absmax(
// GPU-SAME: {bind = ["out0"], dtype = "bf16", extent = "n", kind = "memref", name = "dx"}, {bind = ["out2"], dtype = "f32", extent = "groups", kind = "memref", name = "absmax"}
// GPU-SAME: epilogue_absmax = true
// GPU-SAME: op = "rmsnorm_grad"
// GPU: vector.store {{.*}} : memref<?xi16>, vector<16xi16>
// GPU: arith.maxnumf
// GPU: memref.store {{.*}} : memref<?xf32>
// GPU-LABEL: gpu.func @rms_bwd_absmax_reduce(
// CPU-LABEL: func.func @rms_bwd_absmax(
// CPU-SAME: name = "absmax"
// CPU-SAME: epilogue_absmax = true
// CPU: arith.maxnumf
// CPU: memref.store {{.*}} : memref<?xf32>
func.func @rms_bwd_absmax(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?xbf16>, tensor<?x?xf32>)
    attributes {coat.max_cols = 1024 : i64} {
  %dx, %dw = coat.rmsnorm_grad %x, %w, %rstd, %dy
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>, tensor<?xf32>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>, tensor<?xbf16>
  %m = coat.absmax %dx, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %dx, %dw, %m : tensor<?x?xbf16>, tensor<?xbf16>, tensor<?x?xf32>
}
