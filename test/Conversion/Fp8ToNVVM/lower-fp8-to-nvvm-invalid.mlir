// FP8 conversions without an NVVM lowering are reported, not left for
// gpu-module-to-binary to trip over.
// RUN: coat-opt %s -split-input-file -verify-diagnostics --pass-pipeline='builtin.module(gpu.module(coat-lower-fp8-to-nvvm))'

gpu.module @f64_source {
  func.func @f(%x: f64) -> f8E4M3FN {
    // expected-error @+1 {{'arith.truncf' op has no NVVM lowering}}
    %0 = arith.truncf %x : f64 to f8E4M3FN
    return %0 : f8E4M3FN
  }
}

// -----

// PTX only rounds to nearest even.
gpu.module @rounding_mode {
  func.func @f(%x: f32) -> f8E5M2 {
    // expected-error @+1 {{'arith.truncf' op has no NVVM lowering}}
    %0 = arith.truncf %x toward_zero : f32 to f8E5M2
    return %0 : f8E5M2
  }
}

// -----

gpu.module @f64_result {
  func.func @f(%x: f8E4M3FN) -> f64 {
    // expected-error @+1 {{'arith.extf' op has no NVVM lowering}}
    %0 = arith.extf %x : f8E4M3FN to f64
    return %0 : f64
  }
}
