// coat-gpu-to-binary stops with a diagnostic, instead of an LLVM abort, on a
// chip/PTX pair that cannot compile the kernel. The same kernel compiles for
// the supported pairs.
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-gpu-to-binary{chip=sm_89 features=+ptx78 format=isa})' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=SM89-PTX78
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-gpu-to-binary{chip=sm_80 features=+ptx80 format=isa})' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=SM80
// RUN: not coat-opt %s --pass-pipeline='builtin.module(coat-gpu-to-binary{chip=sm_90a features=+ptx78 format=isa})' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=SM90A-PTX78
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-gpu-to-binary{chip=sm_89 features=+ptx81 format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' | FileCheck %s --check-prefix=OK -DTARGET=sm_89
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-gpu-to-binary{chip=sm_90 features=+ptx78 format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' | FileCheck %s --check-prefix=OK -DTARGET=sm_90
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-gpu-to-binary{chip=sm_100a features=+ptx86 format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' | FileCheck %s --check-prefix=OK -DTARGET=sm_100a
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-gpu-to-binary{chip=sm_120a features=+ptx87 format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' | FileCheck %s --check-prefix=OK -DTARGET=sm_120a

// SM89-PTX78: error: target chip 'sm_89' with PTX 7.8 has no FP8 conversions: sm_89 needs +ptx81 (PTX 8.1) or newer
// SM89-PTX78-NOT: LLVM ERROR
// SM89-PTX78-NOT: gpu.binary
// SM80: error: target chip 'sm_80' has no FP8 conversions (cvt e4m3x2/e5m2x2): they need sm_89 or newer
// SM80-NOT: LLVM ERROR
// SM90A-PTX78: error: target chip 'sm_90a' with PTX 7.8 is rejected by LLVM: sm_90a needs +ptx80 (PTX 8.0) or newer
// SM90A-PTX78-NOT: LLVM ERROR
// OK: .target [[TARGET]]
// OK: cvt.rn.f16x2.e4m3x2
// OK: cvt.rn.satfinite.e4m3x2.f32

module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @roundtrip(%buf: memref<?xf8E4M3FN>) kernel {
      %tid = gpu.thread_id x
      %c2 = arith.constant 2 : index
      %i = arith.muli %tid, %c2 : index
      %v = vector.load %buf[%i] : memref<?xf8E4M3FN>, vector<2xf8E4M3FN>
      %f = arith.extf %v : vector<2xf8E4M3FN> to vector<2xf32>
      %d = arith.addf %f, %f : vector<2xf32>
      %q = arith.truncf %d : vector<2xf32> to vector<2xf8E4M3FN>
      vector.store %q, %buf[%i] : memref<?xf8E4M3FN>, vector<2xf8E4M3FN>
      gpu.return
    }
  }
}
