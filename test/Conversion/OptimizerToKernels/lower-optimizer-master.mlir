// RUN: coat-opt %s --coat-lower-optimizer=target=gpu | FileCheck %s --check-prefixes=CHECK,GPU
// RUN: coat-opt %s --coat-lower-optimizer=target=cpu | FileCheck %s --check-prefixes=CHECK,CPU
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-optimizer{target=gpu},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=PTX

// bf16 parameters with an f32 master copy: the kernel takes the master
// right after the gradient, updates it in f32 and stores both it and its
// round-to-nearest bf16 value; the bf16 parameter is never read.

!q = !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>

// CPU-NOT: gpu.module

// PTX-LABEL: .visible .entry master(
// PTX: cvt.rn.bf16x2.f32
// PTX-NOT: .local
// PTX-LABEL: .visible .entry plain(

// CHECK-LABEL: @master
// CHECK-SAME: (%[[P:[^:]*]]: memref<?xi16>, %[[G:[^:]*]]: memref<?xi16>, %[[W:[^:]*]]: memref<?xf32>, %{{[^:]*}}: memref<?xi8>,
// GPU-SAME: name = "grad"}, {dtype = "f32", extent = "n", kind = "memref", name = "master"}, {dtype = "e4m3", extent = "n", kind = "memref", name = "m_codes"}
// GPU-SAME: master = true
// CHECK-NOT: vector.load %[[P]][
// CHECK: vector.load %[[W]][
// CHECK-NOT: vector.load %[[P]][
// CHECK: vector.store %{{.*}}, %[[W]][{{.*}} : memref<?xf32>, vector<{{[0-9]+}}xf32>
// CHECK: arith.truncf %{{.*}} : vector<{{[0-9]+}}xf32> to vector<{{[0-9]+}}xbf16>
// CHECK: vector.store %{{.*}}, %[[P]][
// CHECK-NOT: vector.load %[[P]][
// CHECK: return
func.func @master(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !q, %v: !q,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32, %w: tensor<?xf32>)
    -> (tensor<?xbf16>, !q, !q, tensor<?xf32>) {
  %p2, %m2, %v2, %w2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd master %w
      : tensor<?xbf16>, tensor<?xbf16>, !q, !q master tensor<?xf32> -> tensor<?xf32>
  return %p2, %m2, %v2, %w2 : tensor<?xbf16>, !q, !q, tensor<?xf32>
}

// Without it: the parameter is read and updated, no master argument.
// CHECK-LABEL: @plain
// CHECK-SAME: (%[[P:[^:]*]]: memref<?xi16>, %{{[^:]*}}: memref<?xi16>, %{{[^:]*}}: memref<?xi8>,
// GPU-SAME: master = false
// CHECK-NOT: name = "master"
// CHECK: vector.load %[[P]][
// CHECK: return
func.func @plain(%p: tensor<?xbf16>, %g: tensor<?xbf16>, %m: !q, %v: !q,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xbf16>, !q, !q) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xbf16>, tensor<?xbf16>, !q, !q
  return %p2, %m2, %v2 : tensor<?xbf16>, !q, !q
}
