// RUN: coat-opt %s --coat-lower-optimizer=target=gpu | FileCheck %s --check-prefixes=CHECK,GPU
// RUN: coat-opt %s --coat-lower-optimizer=target=cpu | FileCheck %s --check-prefixes=CHECK,CPU
// RUN: not coat-opt %s --coat-lower-optimizer="target=gpu elements-per-thread=4" 2>&1 | FileCheck %s --check-prefix=EPT
// The random bits take registers; min-ctas asks ptxas to keep the round-to-
// nearest kernels' occupancy where it can do so without spilling.
// RUN: coat-opt %s --coat-lower-optimizer="target=gpu min-ctas=4" | FileCheck %s --check-prefix=CTAS
// RUN: not coat-opt %s --coat-lower-optimizer="target=gpu min-ctas=33" 2>&1 | FileCheck %s --check-prefix=CTAS-RANGE

// Stochastic rounding (docs/optimizer-numerics.md §5) on both targets: the
// kernel takes the seed last, derives the step's key once, hashes a word per
// block of 8 elements, multiplies it by each element's stream constant and
// adds the top bits below the stored type's last mantissa bit.

// CTAS: gpu.func @sr_all(
// CTAS-SAME: coat.min_ctas_unless_spilling
// CTAS-SAME: nvvm.minctasm = 4 : i32
// CTAS-RANGE: min-ctas must be in [0, 32], got 33
// EPT: elements-per-thread=4 is below the 8 elements that share a random word; stochastic rounding needs a multiple of them

!m = !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
!v = !coat.qtensor<?xf8E5M2, flat_group<128>>

// CHECK-LABEL: @sr_all
// GPU-SAME: %{{.*}}: f32, %[[SEED:.*]]: i64) kernel
// GPU-SAME: {dtype = "i64", kind = "scalar", name = "seed"}
// GPU-SAME: stochastic_moments = true, stochastic_param = true
// CPU-SAME: %{{.*}}: f32, %[[SEED:.*]]: i64)
// The key: the seed's halves and the step's bits through the mixer, once.
// CHECK: %[[LO:.*]] = arith.trunci %[[SEED]] : i64 to i32
// CHECK: arith.shrui %[[SEED]], %{{.*}} : i64
// CHECK: arith.muli %{{.*}}, %c-2048144789_i32 : i32
// CHECK: arith.muli %{{.*}}, %c-1028477387_i32 : i32
// CHECK: scf.for
// CHECK-NOT: arith.trunci %[[SEED]]
// The block word of the lane's first element (index / 8), then the
// parameter stream's first constant (0xbb08d0dd).
// CHECK: %[[BLOCK:.*]] = arith.shrui %{{.*}}, %c3_i64 : i64
// CHECK: %[[WORD:.*]] = arith.xori
// CHECK: arith.muli %{{.*}}, %c-1157050147_i32 : i32
// bf16: 16 random bits added, 16 bits cleared, non-finite values kept.
// CHECK: %[[R16:.*]] = arith.shrui %{{.*}}, %c16_i32{{.*}} : i32
// CHECK-NEXT: %[[SUM:.*]] = arith.addi %{{.*}}, %[[R16]] : i32
// CHECK: arith.andi %[[SUM]], %c-65536_i32{{.*}} : i32
// CHECK: arith.select
// E4M3 codes of m: the m stream (0x55dc1ef1), a lift below 2^-6, 20 bits.
// CHECK: arith.muli %{{.*}}, %c1440489201_i32 : i32
// CHECK: arith.cmpf olt, %{{.*}}, %cst{{.*}} : f32
// CHECK: arith.shrui %{{.*}}, %c12_i32{{.*}} : i32
// CHECK: arith.andi %{{.*}}, %c-1048576_i32{{.*}} : i32
// CHECK: math.copysign
// E5M2 codes of v: the v stream (0x90acc7a9), 21 bits.
// CHECK: arith.muli %{{.*}}, %c-1867724887_i32 : i32
// CHECK: arith.shrui %{{.*}}, %c11_i32{{.*}} : i32
// CHECK: arith.andi %{{.*}}, %c-2097152_i32{{.*}} : i32
func.func @sr_all(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !m, %v: !v,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32, %seed: i64)
    -> (tensor<?xbf16>, !m, !v) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd seed %seed {stochastic_param, stochastic_moments}
      : tensor<?xbf16>, tensor<?xbf16>, !m, !v
  return %p2, %m2, %v2 : tensor<?xbf16>, !m, !v
}

// Without stochastic rounding: no seed argument, no random bits.
// CHECK-LABEL: @nearest
// GPU-SAME: stochastic_moments = false, stochastic_param = false
// CHECK-NOT: %c-2048144789_i32
// CHECK-NOT: %c-1048576_i32
// CHECK-LABEL: @sr_param
func.func @nearest(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !m, %v: !v,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xbf16>, !m, !v) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xbf16>, tensor<?xbf16>, !m, !v
  return %p2, %m2, %v2 : tensor<?xbf16>, !m, !v
}

// Only the parameter: the moments' codes round to nearest.
// CHECK: arith.andi %{{.*}}, %c-65536_i32{{.*}} : i32
// CHECK-NOT: %c1440489201_i32
// CHECK-NOT: %c-1048576_i32
func.func @sr_param(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !m, %v: !v,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32, %seed: i64)
    -> (tensor<?xbf16>, !m, !v) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd seed %seed {stochastic_param}
      : tensor<?xbf16>, tensor<?xbf16>, !m, !v
  return %p2, %m2, %v2 : tensor<?xbf16>, !m, !v
}
