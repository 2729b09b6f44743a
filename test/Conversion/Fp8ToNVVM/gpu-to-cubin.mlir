// coat-gpu-to-binary with format=bin (the default) runs ptxas on the FP8
// kernel; the toolkit comes from $PATH, or from the toolkit option.
// REQUIRES: ptxas
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-gpu-to-binary)' | FileCheck %s
// RUN: env -u CUDA_HOME -u CUDA_ROOT -u CUDA_PATH PATH=/nonexistent \
// RUN:   coat-opt %s --pass-pipeline='builtin.module(coat-gpu-to-binary{toolkit=%cuda_toolkit})' \
// RUN:   | FileCheck %s
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-gpu-to-binary{format=fatbin})' \
// RUN:   | FileCheck %s --check-prefix=FATBIN
// RUN: not env -u CUDA_HOME -u CUDA_ROOT -u CUDA_PATH PATH=/nonexistent \
// RUN:   coat-opt %s --pass-pipeline='builtin.module(coat-gpu-to-binary)' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NOPTXAS

// CHECK: gpu.binary @kernels [#gpu.object<#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx80">, properties = {{.*}}, bin = "\7FELF
// FATBIN: gpu.binary @kernels [#gpu.object<#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx80">, properties = {{.*}}, "P\EDU\BA
// NOPTXAS: error: Couldn't find the `ptxas` binary

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
