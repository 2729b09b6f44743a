// coat-gpu-to-binary end to end to PTX (format=isa needs no ptxas: the
// second RUN hides every CUDA toolkit). 16 FP8 lanes per thread: one 128-bit
// load, 8 packed cvts each way, one 128-bit store, nothing spilled.
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s
// RUN: env -u CUDA_HOME -u CUDA_ROOT -u CUDA_PATH PATH=/nonexistent \
// RUN:   coat-opt %s --pass-pipeline='builtin.module(coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s

// CHECK: gpu.binary @kernels
// CHECK-SAME: #nvvm.target<O = 3, chip = "sm_90a", features = "+ptx80">
// CHECK: .version 8.0
// CHECK: .target sm_90a
// CHECK-NOT: .local

// e4m3 in, f32 math, e5m2 out.
// CHECK-LABEL: .entry rescale(
// CHECK: ld.global.v4.b32
// CHECK-COUNT-8: cvt.rn.f16x2.e4m3x2
// CHECK-COUNT-16: cvt.f32.f16
// CHECK-COUNT-8: cvt.rn.satfinite.e5m2x2.f32
// CHECK-NOT: cvt.rn
// CHECK: st.global.v4.b32
// CHECK: ret;

// e5m2 in, f16 math, e4m3 out: the f16x2 forms.
// CHECK-LABEL: .entry requant_f16(
// CHECK: ld.global.v4.b32
// CHECK-COUNT-8: cvt.rn.f16x2.e5m2x2
// CHECK-COUNT-8: cvt.rn.satfinite.e4m3x2.f16x2
// CHECK-NOT: cvt.rn
// CHECK: st.global.v4.b32
// CHECK: ret;

// Byte order: of a pair (x0, x1), x1 is operand a (high byte), x0 operand b.
// CHECK-LABEL: .entry pair(
// CHECK: ld.global.v2.b32 {[[X0:%r[0-9]+]], [[X1:%r[0-9]+]]}
// CHECK: cvt.rn.satfinite.e4m3x2.f32 [[P:%rs[0-9]+]], [[X1]], [[X0]];
// CHECK: st.global.b16 [{{%rd[0-9]+}}], [[P]];

// CHECK-NOT: .local

module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @rescale(%in: memref<?xf8E4M3FN>, %out: memref<?xf8E5M2>, %s: f32) kernel {
      %tid = gpu.thread_id x
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %c16 = arith.constant 16 : index
      %t = arith.muli %bid, %bdim : index
      %g = arith.addi %t, %tid : index
      %i = arith.muli %g, %c16 : index
      // Without the alignment LLVM must assume 1 and emits 16 ld.global.b8.
      %v = vector.load %in[%i] {alignment = 16} : memref<?xf8E4M3FN>, vector<16xf8E4M3FN>
      %f = arith.extf %v : vector<16xf8E4M3FN> to vector<16xf32>
      %sv = vector.broadcast %s : f32 to vector<16xf32>
      %m = arith.mulf %f, %sv : vector<16xf32>
      %q = arith.truncf %m : vector<16xf32> to vector<16xf8E5M2>
      vector.store %q, %out[%i] {alignment = 16} : memref<?xf8E5M2>, vector<16xf8E5M2>
      gpu.return
    }

    gpu.func @requant_f16(%in: memref<?xf8E5M2>, %out: memref<?xf8E4M3FN>, %s: f16) kernel {
      %tid = gpu.thread_id x
      %c16 = arith.constant 16 : index
      %i = arith.muli %tid, %c16 : index
      %v = vector.load %in[%i] {alignment = 16} : memref<?xf8E5M2>, vector<16xf8E5M2>
      %f = arith.extf %v : vector<16xf8E5M2> to vector<16xf16>
      %sv = vector.broadcast %s : f16 to vector<16xf16>
      %m = arith.mulf %f, %sv : vector<16xf16>
      %q = arith.truncf %m : vector<16xf16> to vector<16xf8E4M3FN>
      vector.store %q, %out[%i] {alignment = 16} : memref<?xf8E4M3FN>, vector<16xf8E4M3FN>
      gpu.return
    }

    gpu.func @pair(%in: memref<?xf32>, %out: memref<?xf8E4M3FN>) kernel {
      %tid = gpu.thread_id x
      %c2 = arith.constant 2 : index
      %i = arith.muli %tid, %c2 : index
      %v = vector.load %in[%i] {alignment = 8} : memref<?xf32>, vector<2xf32>
      %q = arith.truncf %v : vector<2xf32> to vector<2xf8E4M3FN>
      vector.store %q, %out[%i] {alignment = 2} : memref<?xf8E4M3FN>, vector<2xf8E4M3FN>
      gpu.return
    }
  }
}
