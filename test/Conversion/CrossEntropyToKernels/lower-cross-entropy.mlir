// coat-lower-cross-entropy: a row per CTA, an online max and sum over the
// row's aligned 8-element chunks, the gradient written over the logits
// where the spec lends their buffer.
// RUN: coat-opt %s -coat-lower-cross-entropy | FileCheck %s --check-prefix=GPU
// RUN: coat-opt %s -coat-lower-cross-entropy=target=cpu | FileCheck %s --check-prefix=CPU
// RUN: coat-opt %s -coat-lower-cross-entropy=threads=64 | FileCheck %s --check-prefix=OPTS
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-cross-entropy,coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=PTX

// An odd vocabulary (rows start anywhere in a 16-byte line), in place,
// both results flagged.
func.func @ce(%x: tensor<?x1001xbf16> {coat.writable}, %t: tensor<?xi64>)
    -> (tensor<?xf32> {coat.finite_flag}, tensor<?x1001xbf16> {coat.finite_flag}) {
  %loss, %dx = coat.cross_entropy %x, %t
      : tensor<?x1001xbf16>, tensor<?xi64> -> tensor<?xf32>, tensor<?x1001xbf16>
  return %loss, %dx : tensor<?xf32>, tensor<?x1001xbf16>
}

// Llama's vocabulary, the gradient to a buffer of its own, another
// ignore_index.
func.func @ce_copy(%x: tensor<?x32000xbf16>, %t: tensor<?xi64>)
    -> (tensor<?xf32>, tensor<?x32000xbf16>) {
  %loss, %dx = coat.cross_entropy %x, %t ignore_index = 0
      : tensor<?x32000xbf16>, tensor<?xi64> -> tensor<?xf32>, tensor<?x32000xbf16>
  return %loss, %dx : tensor<?xf32>, tensor<?x32000xbf16>
}

// In place: no dlogits argument, the logits bind the input and the
// gradient; 32 threads for 1001 classes (one warp: nothing through
// workgroup memory but two floats).
// GPU-LABEL: gpu.func @ce(
// GPU-SAME: %[[X:[a-z0-9]+]]: memref<?xi16>, %[[T:[a-z0-9]+]]: memref<?xi64>, %[[L:[a-z0-9]+]]: memref<?xf32>, %[[FL:[a-z0-9]+]]: memref<?xi32>, %[[FG:[a-z0-9]+]]: memref<?xi32>, %{{.*}}: i64, %{{.*}}: i64) workgroup(%{{.*}} : memref<2xf32, #gpu.address_space<workgroup>>)
// GPU-SAME: {bind = ["in0", "out1"], dtype = "bf16", extent = "n", kind = "memref", name = "logits"}
// GPU-SAME: {bind = ["in1"], dtype = "i64", extent = "rows", kind = "memref", name = "targets"}
// GPU-SAME: {bind = ["out0"], dtype = "f32", extent = "rows", kind = "memref", name = "loss"}
// GPU-SAME: {bind = ["finite(out0)"], {{.*}} name = "finite_loss"}, {bind = ["finite(out1)"], {{.*}} name = "finite_logits"}
// GPU-SAME: {bind = "rows(in0)", {{.*}} name = "rows"}, {bind = "cols(in0)", {{.*}} name = "cols"}
// GPU-SAME: config = {chunk = 8 : i64, cols = 1001 : i64, ignore_index = -100 : i64, in_place = true, threads = 32 : i64}
// GPU-SAME: launch = {block = [32, 1, 1], grid_tiles = {{\[\["rows", 1\]\]}}
// GPU-SAME: op = "cross_entropy"
// The target's logit is read before pass 1 (the gradient may overwrite it).
// GPU: %[[TGT:.*]] = memref.load %[[T]][%{{.*}}] : memref<?xi64>
// GPU: memref.load %[[X]][%{{.*}}] : memref<?xi16>
// Pass 1: thread j folds chunks j, j + 32, ...; a whole chunk is one
// 16-byte load, a partial one a masked load whose missing lanes are -inf.
// GPU: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c32 iter_args(%{{.*}} = %cst{{.*}}, %{{.*}} = %cst{{.*}}) -> (f32, f32)
// GPU: vector.load %[[X]][%{{.*}}] {alignment = 16 : i64} : memref<?xi16>, vector<8xi16>
// GPU: vector.maskedload %[[X]][%{{.*}}], %{{.*}}, %{{.*}} : memref<?xi16>, vector<8xi1>, vector<8xi16> into vector<8xi16>
// GPU-COUNT-8: arith.maxnumf
// GPU-COUNT-9: math.exp2 %{{.*}} {coat.soft_exp2} : f32
// GPU: scf.yield
// The warp's butterfly, both halves of each pair.
// GPU: gpu.shuffle  xor %{{.*}}, %c16_i32, %c32_i32 : f32
// GPU: gpu.shuffle  xor %{{.*}}, %c1_i32, %c32_i32{{.*}} : f32
// GPU: gpu.barrier
// Thread 0: the loss, its flag.
// GPU: memref.store %{{.*}}, %[[L]][%{{.*}}] : memref<?xf32>
// GPU: memref.store %{{.*}}, %[[FL]]
// Pass 2 writes over the logits: 16-byte stores, masked for partial chunks.
// GPU: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c32
// GPU: vector.store %{{.*}}, %[[X]][%{{.*}}] {alignment = 16 : i64} : memref<?xi16>, vector<8xi16>
// GPU: vector.maskedstore %[[X]][%{{.*}}], %{{.*}}, %{{.*}} : memref<?xi16>, vector<8xi1>, vector<8xi16>
// GPU: memref.store %{{.*}}, %[[FG]]
// GPU-NOT: atomic_rmw
// GPU: gpu.return

// The gradient to its own buffer; 512 threads for 32000 classes: the 16
// warps' pairs through workgroup memory, combined in warp order.
// GPU-LABEL: gpu.func @ce_copy(
// GPU-SAME: %[[X2:[a-z0-9]+]]: memref<?xi16>, %{{.*}}: memref<?xi64>, %{{.*}}: memref<?xf32>, %[[D2:[a-z0-9]+]]: memref<?xi16>, %{{.*}}: i64, %{{.*}}: i64) workgroup(%[[S:.*]] : memref<32xf32, #gpu.address_space<workgroup>>)
// GPU-SAME: {bind = ["in0"], {{.*}} name = "logits"}
// GPU-SAME: {bind = ["out1"], dtype = "bf16", extent = "n", kind = "memref", name = "dlogits"}
// GPU-SAME: config = {chunk = 8 : i64, cols = 32000 : i64, ignore_index = 0 : i64, in_place = false, threads = 512 : i64}
// GPU-SAME: launch = {block = [512, 1, 1], grid_tiles = {{\[\["rows", 1\]\]}}
// GPU: gpu.barrier
// GPU-COUNT-32: memref.load %[[S]]
// GPU: vector.store %{{.*}}, %[[D2]][%{{.*}}] {alignment = 16 : i64}
// GPU-NOT: vector.store %{{.*}}, %[[X2]]
// GPU: gpu.return

// OPTS: config = {chunk = 8 : i64, cols = 1001 : i64, ignore_index = -100 : i64, in_place = true, threads = 64 : i64}
// OPTS-SAME: launch = {block = [64, 1, 1]

// The CPU twin: the same ABI; each of the 32 threads' folds, the warp
// butterfly as a halving tree over them, then the gradient.
// CPU-LABEL: func.func @ce(
// CPU-SAME: memref<?xi16>, %{{.*}}: memref<?xi64>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xi32>, %{{.*}}: memref<?xi32>, %{{.*}}: i64, %{{.*}}: i64)
// CPU-SAME: config = {chunk = 8 : i64, cols = 1001 : i64, ignore_index = -100 : i64, in_place = true, threads = 32 : i64}
// CPU-NOT: launch =
// CPU: memref.alloca() : memref<32xf32>
// CPU: memref.alloca() : memref<32xf32>
// CPU: vector.load %{{.*}} {alignment = 2 : i64}
// CPU: math.exp2 %{{.*}} {coat.soft_exp2} : f32
// CPU-NOT: gpu.
// CPU: return

// PTX: .entry ce(
// PTX-NOT: .local
// PTX: ld.global.v4.b32
// PTX: shfl.sync.bfly.b32
// PTX: bar.sync
// PTX: div.rn.f32
// PTX: st.global.v4.b32
// PTX-NOT: ex2.approx
// PTX-NOT: lg2.approx
// PTX: .entry ce_copy(
