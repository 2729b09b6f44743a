// require-fp8 checks FP8 support for modules that have no FP8 conversions
// yet (e.g. before the kernels are generated).
// RUN: coat-opt %s -verify-diagnostics --coat-verify-nvvm-target=require-fp8=true
// RUN: coat-opt %s --coat-verify-nvvm-target | FileCheck %s

// CHECK: gpu.module @sm86
// expected-error @+1 {{target chip 'sm_86' has no FP8 conversions}}
gpu.module @sm86 [#nvvm.target<chip = "sm_86", features = "+ptx80">] {
}
