// RUN: coat-opt %s -coat-lower-activations='target=gpu' | FileCheck %s --check-prefix=GPU
// RUN: coat-opt %s -coat-lower-activations='target=cpu' | FileCheck %s --check-prefix=CPU

// 1x128 groups of bf16: 16 elements per thread, 8 lanes per group, the group
// maximum through a shuffle butterfly, an IEEE scale rounded to bf16.
// GPU: gpu.module @coat_activation_kernels
// GPU-LABEL: gpu.func @q_g128(%{{.*}}: memref<?xi16>, %{{.*}}: memref<?xi8>, %{{.*}}: memref<?xi16>, %{{.*}}: i64, %{{.*}}: i64) kernel
// GPU-SAME: extent = "groups", kind = "memref", name = "scale"
// GPU-SAME: group_size = 128
// GPU-SAME: elements_per_block = 4096
// GPU-SAME: op = "quantize"
// GPU: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xi16>, vector<16xi16>
// GPU: vector.maskedload
// GPU: gpu.shuffle  xor %{{.*}}, %c4_i32
// GPU: gpu.shuffle  xor %{{.*}}, %c2_i32
// GPU: gpu.shuffle  xor %{{.*}}, %c1_i32
// GPU: %[[SUM:.*]] = arith.addf %{{.*}}, %cst{{.*}} : f32
// GPU: %[[S:.*]] = arith.divf %[[SUM]], %cst{{.*}} : f32
// GPU: %[[SB:.*]] = arith.truncf %[[S]] : f32 to bf16
// GPU: %[[SR:.*]] = arith.extf %[[SB]] : bf16 to f32
// GPU-COUNT-16: arith.divf %{{.*}}, %[[SR]] {coat.shared_divisor = "exact"} : f32
// GPU: arith.truncf %{{.*}} : vector<16xf32> to vector<16xf8E4M3FN>
// GPU: vector.store %{{.*}} {alignment = 16 : i64} : memref<?xi8>, vector<16xi8>
// GPU: vector.maskedstore
// CPU-LABEL: func.func @q_g128(%{{.*}}: memref<?xi16>, %{{.*}}: memref<?xi8>, %{{.*}}: memref<?xi16>, %{{.*}}: i64, %{{.*}}: i64)
// CPU-NOT: gpu.
// CPU: scf.for
// CPU: vector.load %{{.*}} : memref<?xi16>, vector<128xi16>
func.func @q_g128(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16>
}

// A given scale (rank 0) is one f32 load; no group statistics. Any scale
// may come in, so its divisions only promise the FP8 codes of the IEEE
// quotients (coat-expand-shared-divisions: a wider fast range, an
// overflowing first product kept).
// GPU-LABEL: gpu.func @q_scaled(%{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xi8>, %{{.*}}: i64, %{{.*}}: i64) kernel
// GPU-SAME: extent = 1 : i64, kind = "memref", name = "scale"
// GPU-SAME: given_scale = true
// GPU-NOT: gpu.shuffle
// GPU: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<8xf32>
// GPU: %[[GS:.*]] = memref.load %{{.*}}[%c0{{.*}}] : memref<?xf32>
// GPU-COUNT-8: arith.divf %{{.*}}, %[[GS]] {coat.shared_divisor = "fp8_codes"} : f32
// GPU: arith.truncf %{{.*}} : vector<8xf32> to vector<8xf8E5M2>
// GPU: vector.store %{{.*}} {alignment = 8 : i64} : memref<?xi8>, vector<8xi8>
func.func @q_scaled(%x: tensor<?x?xf32>, %s: tensor<f32>) -> !coat.qtensor<?x?xf8E5M2, per_tensor> {
  %q = coat.quantize %x scale %s : tensor<?x?xf32>, tensor<f32> -> !coat.qtensor<?x?xf8E5M2, per_tensor>
  return %q : !coat.qtensor<?x?xf8E5M2, per_tensor>
}

// Quantize + transpose: a 64x64-byte tile of words in workgroup memory,
// column words transposed with prmt, 16-byte rows of q^T, two barriers.
// GPU-LABEL: gpu.func @q_t(
// GPU-SAME: workgroup(%[[TILE:[^ ]*]] : memref<64x16xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// The given scale is read, and is the scale of both results.
// GPU-SAME: {bind = ["in0"], {{.*}} name = "input"}, {bind = ["in1", "out0.scale", "out1.scale"], {{.*}} name = "scale"}, {bind = ["out0.codes"], {{.*}} name = "codes"}, {bind = ["out1.codes"], {{.*}} name = "codes_t"}
// GPU-SAME: tile = 64
// GPU-SAME: op = "quantize_transpose"
// GPU: scf.for
// GPU: vector.store %{{.*}}, %[[TILE]][{{.*}}] {alignment = 8 : i64} : memref<64x16xi32, #gpu.address_space<workgroup>>, vector<2xi32>
// GPU: gpu.barrier
// GPU: memref.load %[[TILE]]
// GPU: nvvm.prmt <default>
// GPU: vector.store %{{.*}} {alignment = 16 : i64} : memref<?xi8>, vector<16xi8>
// GPU: gpu.barrier
// CPU-LABEL: func.func @q_t(
// CPU: scf.for
// CPU: scf.for
// CPU: arith.truncf %{{.*}} : f32 to f8E4M3FN
func.func @q_t(%x: tensor<?x?xbf16>, %s: tensor<bf16>)
    -> (!coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>) {
  %q = coat.quantize %x scale %s : tensor<?x?xbf16>, tensor<bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  return %q, %t : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
}

// Quantize + transpose returning only the transposed copy (its row-major
// codes have no reader): the same tile kernel without the row-major store;
// the codes reach q^T through the workgroup tile alone.
// GPU-LABEL: gpu.func @q_t_only(%{{.*}}: memref<?xi16>, %{{.*}}: memref<?xi16>, %{{.*}}: memref<?xi8>, %{{.*}}: i64, %{{.*}}: i64)
// GPU-SAME: workgroup(%[[TILE1:[^ ]*]] : memref<64x16xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// GPU-SAME: {bind = ["in0"], {{.*}} name = "input"}, {bind = ["in1", "out0.scale"], {{.*}} name = "scale"}, {bind = ["out0.codes"], {{.*}} name = "codes_t"}, {bind = "rows(in0)"
// GPU-SAME: given_scale = true
// GPU-SAME: op = "quantize_transposed_only"
// GPU-NOT: memref<?xi8>, vector<8xi8>
// GPU-NOT: vector<8xi1>, vector<8xi8>
// GPU: vector.store %{{.*}}, %[[TILE1]][{{.*}}] {alignment = 8 : i64} : memref<64x16xi32, #gpu.address_space<workgroup>>, vector<2xi32>
// GPU-NOT: memref<?xi8>, vector<8xi8>
// GPU-NOT: vector<8xi1>, vector<8xi8>
// GPU: gpu.barrier
// GPU: nvvm.prmt <default>
// GPU: vector.store %{{.*}} {alignment = 16 : i64} : memref<?xi8>, vector<16xi8>
// GPU: vector.maskedstore %{{.*}} : memref<?xi8>, vector<16xi1>, vector<16xi8>
// GPU: gpu.barrier
// GPU-NOT: memref<?xi8>, vector<8xi8>
// GPU: gpu.return
// One store per element, into q^T.
// CPU-LABEL: func.func @q_t_only(%{{.*}}: memref<?xi16>, %{{.*}}: memref<?xi16>, %{{.*}}: memref<?xi8>, %{{.*}}: i64, %{{.*}}: i64)
// CPU: scf.for
// CPU: scf.for
// CPU: arith.truncf %{{.*}} : f32 to f8E4M3FN
// CPU: memref.store %{{.*}}, %arg2[%{{.*}}] : memref<?xi8>
// CPU-NOT: memref.store
// CPU: return
func.func @q_t_only(%x: tensor<?x?xbf16>, %s: tensor<bf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> {
  %q = coat.quantize %x scale %s : tensor<?x?xbf16>, tensor<bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  return %t : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
}

// Dequantize 1x16: codes in, one scale per group, bf16 out.
// GPU-LABEL: gpu.func @dq(%{{.*}}: memref<?xi8>, %{{.*}}: memref<?xi16>, %{{.*}}: memref<?xi16>, %{{.*}}: i64, %{{.*}}: i64) kernel
// GPU-SAME: {bind = ["in0.codes"], {{.*}} name = "codes"}, {bind = ["in0.scale"], {{.*}} name = "scale"}, {bind = ["out0"], {{.*}} name = "output"}, {bind = "rows(out0)", {{.*}} name = "rows"}
// GPU-SAME: op = "dequantize"
// GPU: arith.extf %{{.*}} : vector<16xf8E4M3FN> to vector<16xf32>
// GPU: arith.mulf
// GPU: arith.truncf %{{.*}} : vector<16xf32> to vector<16xbf16>
func.func @dq(%q: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>) -> tensor<?x?xbf16> {
  %x = coat.dequantize %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xbf16>
  return %x : tensor<?x?xbf16>
}

// Requantize 1x16 codes to a per-tensor copy with a given scale: the codes
// and their group's scale in, the product divided by the given scale (one
// shared divisor), FP8 codes out: no f32 buffer in the ABI.
// GPU-LABEL: gpu.func @rq(%{{.*}}: memref<?xi8>, %{{.*}}: memref<?xi16>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xi8>, %{{.*}}: i64, %{{.*}}: i64) kernel
// GPU-SAME: {bind = ["in0.codes"], {{.*}} name = "input"}, {bind = ["in0.scale"], {{.*}} extent = "groups", {{.*}} name = "input_scale"}, {bind = ["in1", "out0.scale"], {{.*}} name = "scale"}, {bind = ["out0.codes"], dtype = "e5m2", {{.*}} name = "codes"}, {bind = "rows(in0)"
// GPU-SAME: config = {format = "e5m2", {{.*}} given_scale = true, group_size = 16 : i64, input = "e4m3", input_scale = "bf16", scale = "f32", scaling = "per_tensor"}
// GPU-SAME: op = "requantize"
// GPU: arith.extf %{{.*}} : vector<16xf8E4M3FN> to vector<16xf32>
// GPU: %[[GS:.*]] = arith.extf %{{.*}} : bf16 to f32
// GPU: arith.mulf %{{.*}}, %[[GS]] : f32
// GPU: %[[S:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<?xf32>
// GPU: arith.divf %{{.*}}, %[[S]] {coat.shared_divisor = "fp8_codes"} : f32
// GPU: arith.truncf %{{.*}} : vector<16xf32> to vector<16xf8E5M2>
// CPU-LABEL: func.func @rq(
// CPU: scf.for
// CPU: arith.divf %{{.*}} {coat.shared_divisor = "fp8_codes"} : f32
func.func @rq(%q: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %s: tensor<f32>) -> !coat.qtensor<?x?xf8E5M2, per_tensor> {
  %x = coat.dequantize %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xf32>
  %r = coat.quantize %x scale %s : tensor<?x?xf32>, tensor<f32> -> !coat.qtensor<?x?xf8E5M2, per_tensor>
  return %r : !coat.qtensor<?x?xf8E5M2, per_tensor>
}

// Stage one of group scaling: f32 maxima per 1x16 group.
// GPU-LABEL: gpu.func @amax(
// GPU-SAME: dtype = "f32", extent = "groups", kind = "memref", name = "absmax"
// GPU: arith.maxnumf
// GPU: memref.store %{{.*}} : memref<?xf32>
func.func @amax(%x: tensor<?x?xbf16>) -> tensor<?x?xf32> {
  %a = coat.absmax %x, per_group<16> : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %a : tensor<?x?xf32>
}

// 128x128 blocks: the block maximum over the CTA (warp shuffles, one word
// per warp), an IEEE scale division, the block scale from thread 0.
// GPU-LABEL: gpu.func @q_b(
// GPU-SAME: workgroup(%[[RED:[^ ]*]] : memref<8xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// GPU-SAME: extent = "rows/128*cols/128", kind = "memref", name = "scale"
// GPU-SAME: block = 128
// GPU-SAME: scaling = "per_block"
// GPU: scf.for
// GPU: gpu.shuffle xor
// GPU: memref.store %{{.*}}, %[[RED]]
// GPU: gpu.barrier
// GPU: memref.load %[[RED]]
// GPU: %[[BS:.*]] = arith.divf %{{.*}}, %{{.*}} : f32
// The codes of the IEEE quotients by the block scale (expanded by
// coat-expand-shared-divisions), the quantizer's own scale: the exact
// contract, no quotient overflows.
// GPU-COUNT-8: arith.divf %{{.*}}, %[[BS]] {coat.shared_divisor = "exact"} : f32
// GPU: vector.from_elements %{{.*}} : vector<8xf32>
// GPU: arith.truncf %{{.*}} : vector<8xf32> to vector<8xf8E4M3FN>
// GPU-NOT: nvvm.prmt
// GPU: gpu.barrier
// CPU-LABEL: func.func @q_b(
// CPU: scf.for
// CPU: scf.for
// CPU: arith.maxnumf
// CPU: arith.divf
// CPU: memref.store
// CPU: arith.truncf %{{.*}} : f32 to f8E4M3FN
func.func @q_b(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
}

// The transposed form writes both scale matrices and both layouts.
// GPU-LABEL: gpu.func @q_tb(
// GPU-SAME: workgroup(%[[TILE2:[^ ]*]] : memref<128x32xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %[[RED2:[^ ]*]] : memref<8xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// GPU-SAME: {bind = ["out0.scale"], {{.*}} name = "scale"}, {bind = ["out1.codes"], {{.*}} name = "codes_t"}, {bind = ["out1.scale"], dtype = "f32", extent = "cols/128*rows/128", kind = "memref", name = "scale_t"}
// GPU-SAME: op = "quantize_transpose"
// GPU: gpu.shuffle xor
// GPU: gpu.barrier
// GPU: memref.store %{{.*}}, %{{.*}}[%{{.*}}] : memref<?xf32>
// GPU: memref.store %{{.*}}, %{{.*}}[%{{.*}}] : memref<?xf32>
// GPU: vector.store %{{.*}}, %[[TILE2]]
// GPU: gpu.barrier
// GPU: nvvm.prmt
// CPU-LABEL: func.func @q_tb(
// CPU-SAME: %{{.*}}: memref<?xi16>, %{{.*}}: memref<?xi8>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xi8>, %{{.*}}: memref<?xf32>, %{{.*}}: i64, %{{.*}}: i64)
// CPU: arith.maxnumf
// CPU: memref.store
// CPU: memref.store
func.func @q_tb(%x: tensor<?x?xbf16>) -> (!coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>, !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>) {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>> -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
  return %q, %t : !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>, !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
}
