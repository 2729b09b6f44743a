// coat.rope and coat.rope_grad through coat-lower-pointwise: a lane holds 8
// bf16 (16 bytes) of the first half of a head and their 8 partners d/2
// columns on, reads the token's cos and sin at both, and a GPU block takes
// whole rows (launch.grid_tiles over `rows`).
// RUN: coat-opt %s -split-input-file -coat-lower-pointwise | FileCheck %s
// RUN: coat-opt %s -split-input-file -coat-lower-pointwise=target=cpu | FileCheck %s --check-prefix=CPU
// RUN: coat-opt %s -split-input-file -coat-lower-pointwise=lanes-per-thread=4 | FileCheck %s --check-prefix=U4

// Out of place, 3 heads of 64 of which 2 rotate (12 lanes a row): the
// tables are [rows, 64] (a fixed row length in the extent), the row length
// is compiled in (config.cols), and 64 rows a block fill three sweeps of
// 256 threads exactly. Each element: two f32 products and their
// difference (first half) or sum (second half), no fused multiply-add; the
// third head takes the input.
// CHECK-LABEL: gpu.func @rope(
// CHECK-SAME: %{{.*}}: memref<?xi16>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xi16>, %{{.*}}: i64, %{{.*}}: i64) kernel
// CHECK-SAME: coat.kernel = {args = [{bind = ["in0"], dtype = "bf16", extent = "n", kind = "memref", name = "x"}, {bind = ["in1"], dtype = "f32", extent = "rows*64", kind = "memref", name = "cos"}, {bind = ["in2"], dtype = "f32", extent = "rows*64", kind = "memref", name = "sin"}, {bind = ["out0"], dtype = "bf16", extent = "n", kind = "memref", name = "y"}, {bind = "rows(in0)", dtype = "i64", kind = "scalar", name = "rows"}, {bind = "cols(in0)", dtype = "i64", kind = "scalar", name = "cols"}]
// CHECK-SAME: config = {cols = 192 : i64, head_dim = 64 : i64, in_place = false, operands = ["x", "cos", "sin"], results = ["y"], rotated_heads = 2 : i64}
// CHECK-SAME: launch = {block = [256, 1, 1], grid_tiles = {{\[}}["rows", 64]], shared_bytes = 0 : i64}, name = "rope", op = "rope"}
// CHECK: %[[X:.*]] = vector.load %arg0[%[[FIRST:.*]]] {alignment = 16 : i64} : memref<?xi16>, vector<8xi16>
// CHECK: vector.load %arg0[%{{.*}}] {alignment = 16 : i64} : memref<?xi16>, vector<8xi16>
// CHECK-COUNT-4: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<8xf32>
// CHECK: %[[ROT:.*]] = arith.cmpi ult, %{{.*}}, %c2{{.*}} : index
// CHECK-NEXT: %[[P1:.*]] = arith.mulf
// CHECK-NEXT: %[[Q1:.*]] = arith.mulf
// CHECK-NEXT: %[[P2:.*]] = arith.mulf
// CHECK-NEXT: %[[Q2:.*]] = arith.mulf
// CHECK-NEXT: %[[Y1:.*]] = arith.subf %[[P1]], %[[Q1]] : f32
// CHECK-NEXT: %[[Y2:.*]] = arith.addf %[[P2]], %[[Q2]] : f32
// CHECK-NEXT: arith.select %[[ROT]], %[[Y1]], %{{.*}} : f32
// CHECK-NEXT: arith.select %[[ROT]], %[[Y2]], %{{.*}} : f32
// CHECK-NOT: math.fma
// CHECK: arith.truncf %{{.*}} : vector<8xf32> to vector<8xbf16>
// CHECK: vector.store %{{.*}}, %arg3[%[[FIRST]]] {alignment = 16 : i64} : memref<?xi16>, vector<8xi16>
// The last block's rows are checked.
// CHECK: } else {
// CHECK: arith.cmpi ult, %{{.*}}, %{{.*}} : index
// CHECK: gpu.return
// CPU-LABEL: func.func @rope(
// CPU-SAME: coat.kernel
// CPU-NOT: launch
// CPU: scf.for
// CPU: vector.load %arg0[%{{.*}}] {alignment = 16 : i64} : memref<?xi16>, vector<16xi16>
// Loads of four sweeps in flight together: a block takes at least 1024
// lanes, 128 rows (six whole sweeps).
// U4: grid_tiles = {{\[}}["rows", 128]]
func.func @rope(%x: tensor<?x192xbf16>, %c: tensor<?x64xf32>, %s: tensor<?x64xf32>) -> tensor<?x192xbf16> {
  %y = coat.rope %x, %c, %s rotated_heads = 2 : tensor<?x192xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x192xbf16>
  return %y : tensor<?x192xbf16>
}

// -----

// In place (a coat.writable input): one buffer for the input and the
// result, no result argument, and only the rotated heads visited (8 lanes
// a row; v is never read or written).
// CHECK-LABEL: gpu.func @rope_in_place(
// CHECK-SAME: %{{.*}}: memref<?xi16>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: i64, %{{.*}}: i64) kernel
// CHECK-SAME: {bind = ["in0", "out0"], dtype = "bf16", extent = "n", kind = "memref", name = "x"}
// CHECK-SAME: in_place = true, operands = ["x", "cos", "sin"], results = ["x"]
// CHECK-SAME: grid_tiles = {{\[}}["rows", 32]]
// CHECK: arith.divui %{{.*}}, %c8 : index
// CHECK-NOT: arith.select
// CHECK: vector.store %{{.*}}, %arg0[
// CHECK: gpu.return
func.func @rope_in_place(%x: tensor<?x192xbf16> {coat.writable}, %c: tensor<?x64xf32>, %s: tensor<?x64xf32>) -> tensor<?x192xbf16> {
  %y = coat.rope %x, %c, %s rotated_heads = 2 : tensor<?x192xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x192xbf16>
  return %y : tensor<?x192xbf16>
}

// -----

// The backward with its 1x16 maxima fused (group scaling): the two lanes
// of a group combine their maxima with one shuffle, the group's first lane
// stores it. Products pair as dx1 = dy1 c1 + dy2 s2, dx2 = dy2 c2 - dy1 s1.
// CHECK-LABEL: gpu.func @rope_grad(
// CHECK-SAME: {bind = ["out1"], dtype = "f32", extent = "groups", kind = "memref", name = "dx_absmax"}
// CHECK-SAME: group_size = 16 : i64
// CHECK-SAME: op = "rope_grad"
// CHECK: %[[P1:.*]] = arith.mulf
// CHECK-NEXT: %[[Q1:.*]] = arith.mulf
// CHECK-NEXT: %[[P2:.*]] = arith.mulf
// CHECK-NEXT: %[[Q2:.*]] = arith.mulf
// CHECK-NEXT: arith.addf %[[P1]], %[[Q1]] : f32
// CHECK-NEXT: arith.subf %[[P2]], %[[Q2]] : f32
// CHECK: gpu.shuffle  xor %{{.*}}, %c1_i32, %c32_i32 : f32
// CHECK: arith.cmpi eq, %{{.*}}, %c0{{.*}} : index
// CHECK: memref.store %{{.*}}, %arg4[%{{.*}}] : memref<?xf32>
// CPU-LABEL: func.func @rope_grad(
// CPU-NOT: gpu.shuffle
// CPU: vector.load %arg0[%{{.*}}] {alignment = 16 : i64} : memref<?xi16>, vector<16xi16>
func.func @rope_grad(%g: tensor<?x192xbf16>, %c: tensor<?x64xf32>, %s: tensor<?x64xf32>)
    -> (tensor<?x192xbf16>, tensor<?x12xf32>) {
  %dx = coat.rope_grad %g, %c, %s rotated_heads = 2 : tensor<?x192xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x192xbf16>
  %m = coat.absmax %dx, per_group<16> epilogue : tensor<?x192xbf16> -> tensor<?x12xf32>
  return %dx, %m : tensor<?x192xbf16>, tensor<?x12xf32>
}

// -----

// In place with maxima: every head is read for the maxima, only the
// rotated ones are stored (in the last block, only those of its rows).
// CHECK-LABEL: gpu.func @rope_in_place_maxima(
// CHECK-SAME: in_place = true
// CHECK: %[[ROT:.*]] = arith.cmpi ult, %{{.*}}, %c1{{.*}} : index
// CHECK: scf.if %[[ROT]] {
// CHECK-NEXT: vector.store %{{.*}}, %arg0[
// CHECK: } else {
// CHECK: %[[ROT2:.*]] = arith.cmpi ult, %{{.*}}, %c1{{.*}} : index
// CHECK: %[[STORE:.*]] = arith.andi %{{.*}}, %[[ROT2]] : i1
// CHECK: scf.if %[[STORE]] {
// CHECK-NEXT: vector.store %{{.*}}, %arg0[
func.func @rope_in_place_maxima(%x: tensor<?x128xbf16> {coat.writable}, %c: tensor<?x64xf32>, %s: tensor<?x64xf32>)
    -> (tensor<?x128xbf16>, tensor<?x8xf32>) {
  %y = coat.rope %x, %c, %s rotated_heads = 1 : tensor<?x128xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x128xbf16>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x128xbf16> -> tensor<?x8xf32>
  return %y, %m : tensor<?x128xbf16>, tensor<?x8xf32>
}
