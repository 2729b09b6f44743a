// The FP8 lowering and the pipeline run in stock mlir-opt through the plugin
// (plugin passes are reachable only through --pass-pipeline).
// UNSUPPORTED: sanitizers
// RUN: mlir-opt %s --load-dialect-plugin=%coat_plugin \
// RUN:   --pass-pipeline='builtin.module(gpu.module(coat-lower-fp8-to-nvvm))' | FileCheck %s
// RUN: mlir-opt %s --load-pass-plugin=%coat_plugin \
// RUN:   --pass-pipeline='builtin.module(gpu.module(coat-lower-fp8-to-nvvm))' | FileCheck %s
// RUN: mlir-opt %s --load-dialect-plugin=%coat_plugin \
// RUN:   --pass-pipeline='builtin.module(coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' | FileCheck %s --check-prefix=PTX
// RUN: not mlir-opt %s --load-dialect-plugin=%coat_plugin \
// RUN:   --pass-pipeline='builtin.module(coat-verify-nvvm-target{require-fp8=true})' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=VERIFY

// CHECK-LABEL: gpu.func @roundtrip
// CHECK: nvvm.convert.f8x2.to.f16x2 %{{.*}} : vector<2xi8>(f8E4M3FN) -> vector<2xf16>
// CHECK: nvvm.convert.f32x2.to.f8x2 %{{.*}}, %{{.*}} {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>} : i16(f8E4M3FN)
// CHECK-NOT: arith.truncf
// PTX: .target sm_90a
// PTX: cvt.rn.f16x2.e4m3x2
// PTX: cvt.rn.satfinite.e4m3x2.f32
// VERIFY: error: target chip 'sm_86' has no FP8 conversions

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
  gpu.module @old [#nvvm.target<chip = "sm_86", features = "+ptx80">] {
  }
}
