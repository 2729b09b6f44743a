// Why coat-lower-fp8-to-nvvm exists: stock mlir-opt 22 lowers the kernel's
// f8 loads and stores (f8 maps to i8) but leaves arith.truncf/extf to and from
// FP8 in place, wrapped in casts, and serialization then fails. No upstream
// pass (arith-expand, arith-emulate-unsupported-floats) lowers them either.
// UNSUPPORTED: sanitizers
// RUN: mlir-opt %s --pass-pipeline='builtin.module(gpu.module(convert-gpu-to-nvvm,reconcile-unrealized-casts))' \
// RUN:   | FileCheck %s --check-prefix=LEFT
// RUN: not mlir-opt %s --pass-pipeline='builtin.module(nvvm-attach-target{chip=sm_90a features=+ptx80},gpu.module(convert-gpu-to-nvvm,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=FAIL
// RUN: mlir-opt %s --pass-pipeline='builtin.module(gpu.module(arith-expand,arith-emulate-unsupported-floats{source-types=f8E4M3FN,f8E5M2 target-type=f32}))' \
// RUN:   | FileCheck %s --check-prefix=UNTOUCHED
// With the coat pass first (through the plugin), the same stock pipeline works.
// RUN: mlir-opt %s --load-dialect-plugin=%coat_plugin --pass-pipeline='builtin.module(nvvm-attach-target{chip=sm_90a features=+ptx80},gpu.module(coat-lower-fp8-to-nvvm,convert-gpu-to-nvvm,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' | FileCheck %s --check-prefix=FIXED

// LEFT: llvm.load {{.*}} -> vector<16xi8>
// LEFT: arith.extf {{.*}} : vector<16xf8E4M3FN> to vector<16xf32>
// LEFT: arith.truncf {{.*}} : vector<16xf32> to vector<16xf8E5M2>
// LEFT: llvm.store {{.*}} : vector<16xi8>, !llvm.ptr
// FAIL: error: LLVM Translation failed for operation: builtin.unrealized_conversion_cast
// UNTOUCHED: arith.extf {{.*}} : vector<16xf8E4M3FN> to vector<16xf32>
// UNTOUCHED: arith.truncf {{.*}} : vector<16xf32> to vector<16xf8E5M2>
// FIXED: cvt.rn.f16x2.e4m3x2
// FIXED: cvt.rn.satfinite.e5m2x2.f32

module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @rescale(%in: memref<?xf8E4M3FN>, %out: memref<?xf8E5M2>, %s: f32) kernel {
      %tid = gpu.thread_id x
      %c16 = arith.constant 16 : index
      %i = arith.muli %tid, %c16 : index
      %v = vector.load %in[%i] {alignment = 16} : memref<?xf8E4M3FN>, vector<16xf8E4M3FN>
      %f = arith.extf %v : vector<16xf8E4M3FN> to vector<16xf32>
      %sv = vector.broadcast %s : f32 to vector<16xf32>
      %m = arith.mulf %f, %sv : vector<16xf32>
      %q = arith.truncf %m : vector<16xf32> to vector<16xf8E5M2>
      vector.store %q, %out[%i] {alignment = 16} : memref<?xf8E5M2>, vector<16xf8E5M2>
      gpu.return
    }
  }
}
