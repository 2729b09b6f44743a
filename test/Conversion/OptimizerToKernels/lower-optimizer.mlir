// RUN: coat-opt %s --coat-lower-optimizer=target=gpu | FileCheck %s --check-prefix=GPU
// RUN: coat-opt %s --coat-lower-optimizer=target=cpu | FileCheck %s --check-prefix=CPU
// RUN: coat-opt %s --coat-lower-optimizer='target=gpu elements-per-thread=4' | FileCheck %s --check-prefix=E4
// RUN: coat-opt %s --coat-lower-optimizer='target=gpu lanes-per-thread=1' | FileCheck %s --check-prefix=U1
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-optimizer{target=gpu elements-per-thread=8},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=PTX

!q = !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>

// The kernel-spec function becomes a kernel of the same name with the
// manifest ABI: p, g, codes/scale/k/c of m then v, n, hyperparameters.
// GPU: module attributes {gpu.container_module}
// GPU: gpu.module @coat_kernels
// GPU: gpu.func @step(%{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xi8>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xi8>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %{{.*}}: i64, %{{.*}}: f32, %{{.*}}: f32, %{{.*}}: f32, %{{.*}}: f32, %{{.*}}: f32, %{{.*}}: f32) kernel
// GPU-SAME: coat.kernel = {args = [{dtype = "f32", extent = "n", kind = "memref", name = "param"}
// A block takes 4 lanes per thread by default: 4 x 128 threads x 16 elements.
// GPU-SAME: launch = {block = [128, 1, 1], elements_per_block = 8192
// GPU-SAME: known_block_size = array<i32: 128, 1, 1>
// The step's constants (two accurate powers) come before the loop over
// tiles, which strides by the grid size.
// GPU: math.powf
// GPU: math.powf
// GPU: %[[BID:.*]] = gpu.block_id  x
// GPU: %[[GRID:.*]] = gpu.grid_dim  x
// GPU-NEXT: scf.for %{{.*}} = %[[BID]] to %{{.*}} step %[[GRID]] {
// GPU-NOT: math.powf
// 16 elements per thread by default (docs/benchmarks.md): 64-byte loads of
// p and g, 16-byte codes.
// GPU: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<16xf32>
// GPU: vector.maskedload
// GPU: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xi8>, vector<16xi8>
// GPU: arith.bitcast %{{.*}} : vector<16xi8> to vector<16xf8E4M3FN>
// GPU: arith.extf %{{.*}} : vector<16xf8E4M3FN> to vector<16xf32>
// The update: the decay and the step as fused multiply-adds.
// GPU: %[[Q:.*]] = arith.divf %{{.*}}, %{{.*}} fastmath<afn> : f32
// GPU-NEXT: math.fma %{{.*}}, %[[Q]], %{{.*}} : f32
// Group statistics: the zero-skipping minimum as an unsigned minimum of the
// magnitudes' bits less one (from +inf's bits less one), then a butterfly
// over the 8 lanes of a group.
// GPU: %[[START:.*]] = arith.constant 2139095039 : i32
// GPU: %[[BITS:.*]] = arith.bitcast %{{.*}} : f32 to i32
// GPU-NEXT: %[[ONE:.*]] = arith.constant 1 : i32
// GPU-NEXT: %[[LESS:.*]] = arith.subi %[[BITS]], %[[ONE]] : i32
// GPU-NEXT: arith.minui %[[START]], %[[LESS]] : i32
// GPU: gpu.shuffle  xor %{{.*}}, %c4_i32{{.*}}, %c32_i32{{.*}} : f32
// GPU: gpu.shuffle  xor %{{.*}}, %c1_i32{{.*}}, %c32_i32{{.*}} : f32
// GPU: gpu.shuffle  xor %{{.*}}, %c4_i32{{.*}}, %c32_i32{{.*}} : i32
// GPU: gpu.shuffle  xor %{{.*}}, %c1_i32{{.*}}, %c32_i32{{.*}} : i32
// GPU-NEXT: arith.minui %{{.*}}, %{{.*}} : i32
// GPU-NEXT: arith.constant 1 : i32
// GPU-NEXT: %[[MINBITS:.*]] = arith.addi %{{.*}}, %{{.*}} : i32
// GPU-NEXT: arith.bitcast %[[MINBITS]] : i32 to f32
// Expanded statistics in the log domain: log2 of the group maximum and
// minimum, no division of the two and no square roots; exact tests for a
// ratio that overflows f32 (M 2^-64 against mn 2^64) and for M == mn; the
// division by expand_min = 16 is a multiplication.
// GPU: %[[UB:.*]] = arith.constant 16.6147099 : f32
// GPU: %[[LMAX:.*]] = math.log2 %[[MAX:.*]] fastmath<afn> {coat.keep_subnormals} : f32
// GPU-NEXT: %[[LMIN:.*]] = math.log2 %[[MIN:.*]] fastmath<afn> {coat.keep_subnormals} : f32
// GPU-NEXT: arith.subf %[[LMAX]], %[[LMIN]] : f32
// GPU: arith.mulf %[[MAX]], %{{.*}} : f32
// GPU: arith.mulf %[[MIN]], %{{.*}} : f32
// GPU: %[[RATIO:.*]] = arith.select %{{.*}}, %{{.*}}, %{{.*}} : f32
// GPU-NEXT: arith.divf %[[UB]], %[[RATIO]] fastmath<afn>
// GPU-NEXT: arith.cmpf oeq, %[[MAX]], %[[MIN]] : f32
// GPU: math.floor
// GPU-NEXT: arith.constant 6.250000e-02 : f32
// GPU-NEXT: arith.mulf
// GPU: arith.addf %[[LMAX]], %[[LMIN]] : f32
// GPU-NOT: math.sqrt
// GPU: math.exp2 %{{.*}} fastmath<afn> : f32
// GPU: arith.truncf %{{.*}} : vector<16xf32> to vector<16xf8E4M3FN>
// GPU-NOT: func.func @step

// E4: elements_per_block = 2048

// U1: elements_per_block = 2048
// U1: scf.for
// E4: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// E4: gpu.shuffle  xor %{{.*}}, %c16_i32, %c32_i32{{.*}} : f32

// CPU: func.func @step(%{{.*}}: memref<?xf32>
// CPU-SAME: coat.kernel
// CPU-NOT: launch
// CPU: scf.for
// CPU: vector.load %{{.*}} : memref<?xf32>, vector<128xf32>
// The CPU twin keeps the specified formulas (log2(M/mn), sqrt(M) sqrt(mn)):
// no log-domain statistics and their overflow test.
// CPU-NOT: 5.42101086E-20
// CPU-NOT: gpu.shuffle
// CPU-NOT: fastmath<afn>
// CPU: return

// PTX-LABEL: .visible .entry step(
// PTX: ld.global.v4.b32
// PTX: cvt.rn.f16x2.e4m3x2
// PTX: shfl.sync.bfly.b32
// PTX: lg2.approx.ftz.f32
// PTX: ex2.approx.ftz.f32
// PTX: cvt.rn.satfinite.e4m3x2.f32
// PTX-NOT: .local
func.func @step(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !q, %v: !q,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xf32>, !q, !q) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xf32>, tensor<?xf32>, !q, !q
  return %p2, %m2, %v2 : tensor<?xf32>, !q, !q
}
