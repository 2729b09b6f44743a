// coat-lower-bias-grad: a bias gradient (and the 1xG maxima of the same
// gradient, where the outliner put them beside it) becomes a partial-sum
// kernel and `<name>_reduce`, deterministic and without atomics.
// RUN: coat-opt %s -coat-lower-bias-grad | FileCheck %s --check-prefix=GPU
// RUN: coat-opt %s -coat-lower-bias-grad=target=cpu | FileCheck %s --check-prefix=CPU
// RUN: coat-opt %s '-coat-lower-bias-grad=rows-per-partial=64 rows-in-flight=2 block-size=256' \
// RUN:   | FileCheck %s --check-prefix=OPTS
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-bias-grad,coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=PTX

// An incoming gradient's maxima and its bias gradient: one read of dy.
func.func @db_maxima(%dy: tensor<?x512xbf16>) -> (tensor<?x32xf32>, tensor<512xbf16>) {
  %m = coat.absmax %dy, per_group<16> : tensor<?x512xbf16> -> tensor<?x32xf32>
  %db = coat.bias_grad %dy : tensor<?x512xbf16> -> tensor<512xbf16>
  return %m, %db : tensor<?x32xf32>, tensor<512xbf16>
}

// A produced gradient's bias gradient alone, f32 in and out.
func.func @db_f32(%dy: tensor<?x?xf32>) -> tensor<?xf32> {
  %db = coat.bias_grad %dy : tensor<?x?xf32> -> tensor<?xf32>
  return %db : tensor<?xf32>
}

// The partial sums: dy, the maxima, the scratch workspace, and `partials`
// bound to ceil(rows / 32), so the order of the sums depends on the shape
// alone. Grid x over the partials, y over 128 threads x 8 columns.
// GPU-LABEL: gpu.func @db_maxima(
// GPU-SAME: %[[DY:[a-z0-9]+]]: memref<?xi16>, %[[M:[a-z0-9]+]]: memref<?xf32>, %[[WS:[a-z0-9]+]]: memref<?xf32>, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64)
// GPU-SAME: {bind = ["in0"], dtype = "bf16", extent = "n", kind = "memref", name = "dy"}
// GPU-SAME: {bind = ["out0"], dtype = "f32", extent = "groups", kind = "memref", name = "absmax"}
// GPU-SAME: {bind = ["scratch"], dtype = "f32", extent = "partials*cols", kind = "memref", name = "dbias_partial"}
// GPU-SAME: {bind = "rows(in0)", {{.*}} name = "rows"}, {bind = "cols(in0)", {{.*}} name = "cols"}, {bind = "ceildiv(rows(in0),32)", {{.*}} name = "partials"}
// GPU-SAME: config = {absmax = true, dbias = "bf16", grad = "bf16", group_size = 16 : i64, lane_elements = 8 : i64, rows_in_flight = 8 : i64, rows_per_partial = 32 : i64, strides = 8 : i64}
// GPU-SAME: launch = {block = [128, 1, 1], grid_tiles = {{\[\["partials", 1\], \["cols", 1024\]\]}}
// GPU-SAME: op = "bias_grad"
// The rows of a partial, eight at a time: every load first (16 bytes of a
// row each), then each row's maximum (two lanes a group: one shuffle) and
// its eight sums, in row order.
// GPU: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32)
// GPU-COUNT-8: vector.load %[[DY]][%{{.*}}] {alignment = 16 : i64} : memref<?xi16>, vector<8xi16>
// GPU-NOT: vector.load
// GPU: gpu.shuffle  xor %{{.*}}, %c1_i32, %c32_i32 : f32
// GPU-NEXT: arith.maxnumf
// GPU: memref.store %{{.*}}, %[[M]]
// GPU-COUNT-8: arith.addf
// GPU: gpu.shuffle  xor
// GPU: scf.yield
// GPU: vector.store %{{.*}}, %[[WS]][%{{.*}}] {alignment = 16 : i64} : memref<?xf32>, vector<8xf32>
// GPU-NOT: atomic_rmw
// The reduction: 32 columns a CTA, a warp per strided run of the partials
// (step 8), then warp 0 adds the eight runs and rounds once.
// GPU-LABEL: gpu.func @db_maxima_reduce(
// GPU-SAME: %[[RWS:[a-z0-9]+]]: memref<?xf32>, %[[DB:[a-z0-9]+]]: memref<?xi16>, %{{.*}}: i64, %{{.*}}: i64)
// GPU-SAME: workgroup(%[[SMEM:.*]] : memref<256xf32, #gpu.address_space<workgroup>>)
// GPU-SAME: {bind = ["scratch"], {{.*}} name = "dbias_partial"}, {bind = ["out1"], dtype = "bf16", extent = "cols", kind = "memref", name = "dbias"}
// GPU-SAME: config = {dbias = "bf16", of = "db_maxima", strides = 8 : i64}
// GPU-SAME: launch = {block = [256, 1, 1], grid_tiles = {{\[\["cols", 32\]\]}}
// GPU-SAME: op = "bias_grad_reduce"
// GPU: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c8
// GPU: memref.load %[[RWS]]
// GPU: memref.store %{{.*}}, %[[SMEM]]
// GPU: gpu.barrier
// GPU-COUNT-7: arith.addf %{{.*}} : f32
// GPU-NEXT: arith.truncf %{{.*}} : f32 to bf16
// GPU: memref.store %{{.*}}, %[[DB]]
// GPU-NOT: atomic_rmw

// f32: 4 columns a thread (16 bytes), no maxima, group_size 4.
// GPU-LABEL: gpu.func @db_f32(
// GPU-SAME: config = {absmax = false, dbias = "f32", grad = "f32", group_size = 4 : i64, lane_elements = 4 : i64
// GPU-SAME: grid_tiles = {{\[\["partials", 1\], \["cols", 512\]\]}}
// GPU-COUNT-8: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// GPU-NOT: gpu.shuffle
// GPU-LABEL: gpu.func @db_f32_reduce(

// OPTS-LABEL: gpu.func @db_maxima(
// OPTS-SAME: {bind = "ceildiv(rows(in0),64)", {{.*}} name = "partials"}
// OPTS-SAME: rows_in_flight = 2 : i64, rows_per_partial = 64 : i64
// OPTS-SAME: launch = {block = [256, 1, 1], grid_tiles = {{\[\["partials", 1\], \["cols", 2048\]\]}}
// OPTS-COUNT-2: vector.load
// OPTS-NOT: vector.load
// OPTS: vector.store

// The CPU twins: a whole group of 16 columns an iteration, each partial's
// rows in order, the same maxima and the same strided reduction.
// CPU-LABEL: func.func @db_maxima(
// CPU-SAME: memref<?xi16>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: i64, %{{.*}}: i64, %{{.*}}: i64)
// CPU-SAME: op = "bias_grad"
// CPU-NOT: launch
// CPU: scf.for
// CPU: scf.for
// CPU: scf.for {{.*}} -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32)
// CPU: vector.load {{.*}} : memref<?xi16>, vector<16xi16>
// CPU-COUNT-16: arith.maxnumf
// CPU: memref.store
// CPU-COUNT-16: arith.addf
// CPU: vector.store {{.*}} : memref<?xf32>, vector<16xf32>
// CPU-LABEL: func.func @db_maxima_reduce(
// CPU-SAME: op = "bias_grad_reduce"
// CPU-COUNT-8: step %c8

// In the PTX the partial-sum kernel keeps eight 16-byte loads in flight, writes
// its sums with vector stores, and neither kernel uses atomics or local
// memory.
// PTX-LABEL: .entry db_maxima(
// PTX-NOT: atom.
// PTX-COUNT-8: ld.global.v4.b32
// PTX: shfl.sync.bfly.b32
// PTX: max.f32
// PTX: st.global.v4.b32
// PTX-LABEL: .entry db_maxima_reduce(
// PTX: bar.sync
// PTX: cvt.rn.bf16.f32
// PTX-LABEL: .entry db_f32(
// PTX-NOT: shfl.sync
// PTX-COUNT-8: ld.global.v4.b32
// PTX-NOT: .local
// PTX-NOT: atom.

// A flagged bias gradient (`coat.finite_flag`): the reduction compares each
// column's sum as stored (bf16) and sets `finite_dbias`.
func.func @db_flagged(%dy: tensor<?x64xbf16>) -> (tensor<64xbf16> {coat.finite_flag}) {
  %db = coat.bias_grad %dy : tensor<?x64xbf16> -> tensor<64xbf16>
  return %db : tensor<64xbf16>
}
// GPU-LABEL: gpu.func @db_flagged_reduce(
// GPU-SAME: {bind = ["finite(out0)"], dtype = "i32", extent = 1 : i64, kind = "memref", name = "finite_dbias"}
// GPU: arith.constant 3.39617753E+38 : f32
// GPU: arith.cmpf uge
// GPU: memref.store %{{.*}} : memref<?xi32>
// CPU-LABEL: func.func @db_flagged_reduce(
// CPU: arith.cmpf uge
