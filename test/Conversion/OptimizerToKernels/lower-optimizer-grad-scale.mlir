// RUN: coat-opt %s --coat-lower-optimizer=target=gpu | FileCheck %s --check-prefixes=CHECK,GPU
// RUN: coat-opt %s --coat-lower-optimizer=target=cpu | FileCheck %s --check-prefixes=CHECK,CPU
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-optimizer{target=gpu},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=PTX

// A gradient scale (global gradient-norm clipping) on both targets: the
// kernel takes a buffer of one f32 right after the gradient, loads it once
// before the loop over tiles (groups, on the CPU) and multiplies every
// loaded gradient by it in f32, before the moments.

!q = !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>

// CPU-NOT: gpu.module

// The PTX loads the scale once and multiplies in IEEE f32 (no flush to zero).
// PTX-LABEL: .visible .entry scaled(
// PTX: ld.global.b32 %r[[S:[0-9]+]], [%rd{{[0-9]+}}];
// PTX-NOT: ld.global.b32 %r{{[0-9]+}}, [%rd{{[0-9]+}}];
// PTX: mul.rn.f32 %r{{[0-9]+}}, %r[[S]], %r{{[0-9]+}};
// PTX-NOT: .local
// PTX-LABEL: .visible .entry unscaled(

// CHECK-LABEL: @scaled
// CHECK-SAME: (%{{[^:]*}}: memref<?xi16>, %[[G:[^:]*]]: memref<?xi16>, %[[S:[^:]*]]: memref<?xf32>, %{{[^:]*}}: memref<?xi8>,
// GPU-SAME: name = "grad"}, {dtype = "f32", extent = 1 : i64, kind = "memref", name = "grad_scale"}, {dtype = "e4m3", extent = "n", kind = "memref", name = "m_codes"}
// GPU-SAME: grad_scale = true
// CHECK: %[[SCALE:.*]] = memref.load %[[S]][%{{.*}}] : memref<?xf32>
// CHECK: scf.for
// CHECK-NOT: memref.load %[[S]]
// The gradient (bf16, widened to f32 exactly) times the scale, element by
// element.
// CHECK: vector.load %[[G]][
// CHECK: %[[GF:.*]] = arith.extf %{{.*}} : vector<{{[0-9]+}}xbf16> to vector<{{[0-9]+}}xf32>
// CHECK-NEXT: %[[G0:.*]] = vector.extract %[[GF]][0]
// CHECK: arith.mulf %[[G0]], %[[SCALE]] : f32
// CHECK-NOT: memref.load %[[S]]
// CHECK: return
func.func @scaled(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !q, %v: !q,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32, %s: tensor<f32>)
    -> (tensor<?xbf16>, !q, !q) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd grad_scale %s
      : tensor<?xbf16>, tensor<?xbf16>, !q, !q, tensor<f32>
  return %p2, %m2, %v2 : tensor<?xbf16>, !q, !q
}

// Without the operand: no argument and no multiply of the gradient.
// CHECK-LABEL: @unscaled
// CHECK-SAME: (%{{[^:]*}}: memref<?xi16>, %{{[^:]*}}: memref<?xi16>, %{{[^:]*}}: memref<?xi8>,
// GPU-SAME: grad_scale = false
// CHECK-NOT: name = "grad_scale"
// CHECK: return
func.func @unscaled(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !q, %v: !q,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xbf16>, !q, !q) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xbf16>, tensor<?xbf16>, !q, !q
  return %p2, %m2, %v2 : tensor<?xbf16>, !q, !q
}

// With stochastic rounding the seed stays the last argument.
// CHECK-LABEL: @scaled_sr
// CHECK-SAME: %[[S:[^:]*]]: memref<?xf32>, %{{[^:]*}}: memref<?xi8>,
// CHECK-SAME: %{{[^:]*}}: f32, %{{[^:]*}}: i64)
// GPU-SAME: grad_scale = true
// GPU-SAME: stochastic_moments = true
// CHECK: memref.load %[[S]]
func.func @scaled_sr(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !q, %v: !q,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32, %seed: i64,
    %s: tensor<f32>) -> (tensor<?xbf16>, !q, !q) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd seed %seed grad_scale %s {stochastic_moments}
      : tensor<?xbf16>, tensor<?xbf16>, !q, !q, tensor<f32>
  return %p2, %m2, %v2 : tensor<?xbf16>, !q, !q
}
