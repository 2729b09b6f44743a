// math ops in a kernel lower through coat-gpu-to-binary. What MLIR 22 does:
// convert-gpu-to-nvvm turns every f32 math op into a libdevice call
// (__nv_exp2f, __nv_log2f, __nv_sqrtf, __nv_powf, __nv_rsqrtf; `fastmath<fast>`
// exp -> __nv_fast_expf), whatever its fastmath flags; gpu-module-to-binary
// links <toolkit>/nvvm/libdevice/libdevice.10.bc and LLVM inlines it.
// Results (sm_90a):
//  * exp2 -> ex2.approx.f32 (libdevice's exp2f is ex2.approx; ~2 ulp);
//    log2/powf -> polynomial code (no lg2.approx). With afn, coat-gpu-to-binary
//    first maps exp2/log2/sqrt/divf to the SFU's .ftz instructions
//    (coat-fast-nvvm-math; test/Conversion/FastMath).
//  * sqrt -> sqrt.approx.f32 (!): libdevice's __nv_sqrtf picks the IEEE
//    sqrt.rn.f32 only when __nvvm_reflect("__CUDA_PREC_SQRT") is 1, and MLIR
//    does not set it. Pass `--nvvm-reflect-add=__CUDA_PREC_SQRT=1` (an LLVM
//    option coat-opt accepts) to get sqrt.rn.f32, as nvcc does by default.
//  * rsqrt -> rsqrt.approx.f32. No local memory, no calls remain.
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefixes=CHECK,DEFAULT
// RUN: coat-opt %s --nvvm-reflect-add=__CUDA_PREC_SQRT=1 --pass-pipeline='builtin.module(coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefixes=CHECK,PRECISE
// RUN: coat-opt %s --pass-pipeline='builtin.module(nvvm-attach-target{chip=sm_90a features=+ptx80},gpu.module(convert-gpu-to-nvvm))' \
// RUN:   | FileCheck %s --check-prefix=LIBDEVICE

// LIBDEVICE-DAG: llvm.call @__nv_exp2f
// LIBDEVICE-DAG: llvm.call @__nv_log2f
// LIBDEVICE-DAG: llvm.call @__nv_sqrtf
// LIBDEVICE-DAG: llvm.call @__nv_powf
// LIBDEVICE-DAG: llvm.call @__nv_rsqrtf
// LIBDEVICE-DAG: llvm.call @__nv_fast_expf

// CHECK-LABEL: .entry math_ops(
// CHECK-NOT: .local
// CHECK-NOT: call
// CHECK: ex2.approx.f32
// DEFAULT: sqrt.approx.f32
// PRECISE-NOT: sqrt.approx
// PRECISE: sqrt.rn.f32
// CHECK: ex2.approx.ftz.f32
// CHECK: rsqrt.approx.f32
// CHECK: ex2.approx
// CHECK: st.global.b32
// CHECK-NOT: .local

module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @math_ops(%buf: memref<?xf32>) kernel {
      %tid = gpu.thread_id x
      %x = memref.load %buf[%tid] : memref<?xf32>
      %a = math.exp2 %x : f32
      %b = math.log2 %a : f32
      %c = math.sqrt %b : f32
      %d = math.powf %c, %x : f32
      %e = math.exp2 %d fastmath<afn> : f32
      %f = math.rsqrt %e : f32
      %g = math.exp %f fastmath<fast> : f32
      memref.store %g, %buf[%tid] : memref<?xf32>
      gpu.return
    }
  }
}
