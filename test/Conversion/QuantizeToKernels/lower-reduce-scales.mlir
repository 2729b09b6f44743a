// RUN: coat-opt %s -coat-lower-reduce-scales | FileCheck %s --check-prefix=GPU
// RUN: coat-opt %s -coat-lower-reduce-scales=target=cpu | FileCheck %s --check-prefix=CPU
// RUN: coat-opt %s -coat-lower-reduce-scales=block-size=256 | FileCheck %s --check-prefix=B256

// The scale of a per-tensor E4M3 tensor from its partial maxima, as
// coat-group-scaling writes it.
func.func @scale(%p: tensor<?x?xf32>) -> tensor<bf16> {
  %m = coat.reduce_scales %p : tensor<?x?xf32> -> tensor<f32>
  %eps = arith.constant dense<1.0e-10> : tensor<f32>
  %max = arith.constant dense<448.0> : tensor<f32>
  %a = arith.addf %m, %eps : tensor<f32>
  %s = arith.divf %a, %max : tensor<f32>
  %b = arith.truncf %s : tensor<f32> to tensor<bf16>
  return %b : tensor<bf16>
}

// On the GPU every CTA reads its slice with 16-byte loads issued before any use,
// reduces through shuffles and workgroup memory, and the last CTA (a counter
// in workspace[1]) computes the scale and clears the workspace.
// GPU-LABEL: gpu.func @scale(
// GPU-SAME: %[[MAX:.*]]: memref<?xf32>, %[[OUT:.*]]: memref<?xi16>, %[[WS:.*]]: memref<?xi32>, %[[N:.*]]: i64)
// GPU-SAME: workgroup(%[[PW:.*]] : memref<16xi32, #gpu.address_space<workgroup>>)
// GPU-SAME: {bind = ["in0"], {{.*}} name = "maxima"}, {bind = ["out0"], {{.*}} name = "scale"}, {bind = ["scratch"], {{.*}} name = "workspace"}, {bind = "numel(in0)", {{.*}} name = "n"}
// GPU-SAME: config = {eps = 1.000000e-10 : f32, format = "e4m3", fp8max = 4.480000e+02 : f32
// GPU-SAME: launch = {block = [512, 1, 1], elements_per_block = 16384
// GPU-SAME: op = "reduce_scales"
// GPU-COUNT-8: vector.load %[[MAX]]{{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// GPU: arith.maxnumf
// GPU: arith.cmpf uno
// GPU: gpu.shuffle  xor
// GPU: memref.store %{{.*}}, %[[PW]]
// GPU: gpu.barrier
// GPU: arith.maxui
// GPU: memref.atomic_rmw maxu %{{.*}}, %[[WS]][%{{.*}}]
// GPU: %[[DONE:.*]] = memref.atomic_rmw addi %{{.*}}, %[[WS]]
// GPU: arith.cmpi eq, %[[DONE]]
// GPU: memref.atomic_rmw maxu
// GPU: memref.atomic_rmw assign
// GPU: memref.atomic_rmw assign
// GPU: arith.addf %{{.*}} : f32
// GPU-NEXT: arith.divf %{{.*}} : f32
// GPU-NEXT: arith.truncf %{{.*}} : f32 to bf16
// GPU-NEXT: arith.bitcast %{{.*}} : bf16 to i16
// GPU: memref.store %{{.*}}, %[[OUT]]

// B256: workgroup(%{{.*}} : memref<8xi32, #gpu.address_space<workgroup>>)
// B256-SAME: elements_per_block = 8192

// On the CPU, a loop that propagates NaN, then the same arithmetic.
// CPU-LABEL: func.func @scale(
// CPU: scf.for
// CPU: arith.maximumf
// CPU: arith.addf
// CPU: arith.divf
// CPU: arith.truncf

// The scale of an E5M2 gradient: the manifest records which format the
// derivation is for (a scale of the wrong format is off by 128x).
func.func @scale_e5m2(%p: tensor<?xf32>) -> tensor<bf16> {
  %m = coat.reduce_scales %p : tensor<?xf32> -> tensor<f32>
  %eps = arith.constant dense<1.0e-10> : tensor<f32>
  %a = arith.addf %m, %eps : tensor<f32>
  %max = arith.constant dense<57344.0> : tensor<f32>
  %s = arith.divf %a, %max : tensor<f32>
  %b = arith.truncf %s : tensor<f32> to tensor<bf16>
  return %b : tensor<bf16>
}
// GPU-LABEL: gpu.func @scale_e5m2(
// GPU-SAME: config = {eps = 1.000000e-10 : f32, format = "e5m2", fp8max = 5.734400e+04 : f32
// CPU-LABEL: func.func @scale_e5m2(
// CPU-SAME: config = {eps = 1.000000e-10 : f32, format = "e5m2", fp8max = 5.734400e+04 : f32

// Arithmetic that is not the derivation records no format.
func.func @max_only(%p: tensor<?xbf16>) -> tensor<bf16> {
  %m = coat.reduce_scales %p : tensor<?xbf16> -> tensor<bf16>
  return %m : tensor<bf16>
}
// GPU-LABEL: gpu.func @max_only(
// GPU-SAME: config = {input = "bf16", scale = "bf16"}

// The largest group scale of a 1x32 tensor, read in place: the kernel's
// maxima are the argument's scale part, n = numel / 32.
// GPU-LABEL: gpu.func @group_scales(
// GPU-SAME: %{{.*}}: memref<?xi16>, %{{.*}}: memref<?xi16>, %{{.*}}: memref<?xi32>, %{{.*}}: i64)
// GPU-SAME: {bind = ["in0.scale"], dtype = "bf16", {{.*}} name = "maxima"}, {bind = ["out0"], {{.*}} name = "scale"}, {{.*}} {bind = "ceildiv(numel(in0),32)", {{.*}} name = "n"}
// GPU-SAME: op = "reduce_scales"
// CPU-LABEL: func.func @group_scales(
// CPU-SAME: {bind = ["in0.scale"]
func.func @group_scales(%q: !coat.qtensor<?x?xf8E4M3FN, per_group<32>, scale = bf16>) -> tensor<bf16> {
  %codes, %scales = coat.disassemble %q : !coat.qtensor<?x?xf8E4M3FN, per_group<32>, scale = bf16>
  %m = coat.reduce_scales %scales : tensor<?x?xbf16> -> tensor<bf16>
  return %m : tensor<bf16>
}

// The maxima of a tensor argument that only the reduction reads (a weight's,
// an incoming gradient's; coat-outline-kernels puts them in the scale
// kernel): the kernel reads the tensor, 8 bf16 values an access, and takes
// their magnitudes; the maxima are never written.
// GPU-LABEL: gpu.func @absmax_scale(
// GPU-SAME: %[[X:.*]]: memref<?xi16>, %{{.*}}: memref<?xi16>, %{{.*}}: memref<?xi32>, %{{.*}}: i64)
// GPU-SAME: {bind = ["in0"], dtype = "bf16", extent = "n", kind = "memref", name = "maxima"}
// GPU-SAME: {bind = "numel(in0)", dtype = "i64", kind = "scalar", name = "n"}
// GPU-SAME: config = {absolute = true, eps = 1.000000e-10 : f32, format = "e5m2"
// GPU-SAME: elements_per_block = 32768
// GPU: vector<8xbf16>
// GPU: math.absf
// GPU: arith.maxnumf
// CPU-LABEL: func.func @absmax_scale(
// CPU: %[[V:.*]] = arith.extf %{{.*}} : bf16 to f32
// CPU-NEXT: %[[A:.*]] = math.absf %[[V]] : f32
// CPU-NEXT: arith.maximumf %{{.*}}, %[[A]] : f32
func.func @absmax_scale(%x: tensor<?x2048xbf16>) -> tensor<bf16> {
  %p = coat.absmax %x, per_group<16> : tensor<?x2048xbf16> -> tensor<?x128xf32>
  %m = coat.reduce_scales %p : tensor<?x128xf32> -> tensor<f32>
  %eps = arith.constant dense<1.0e-10> : tensor<f32>
  %max = arith.constant dense<57344.0> : tensor<f32>
  %a = arith.addf %m, %eps : tensor<f32>
  %s = arith.divf %a, %max : tensor<f32>
  %b = arith.truncf %s : tensor<f32> to tensor<bf16>
  return %b : tensor<bf16>
}
