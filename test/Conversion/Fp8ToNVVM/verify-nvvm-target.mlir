// coat-verify-nvvm-target: chip/PTX pairs LLVM would abort on are diagnosed
// on the gpu.module. Accepted modules pass through unchanged.
// RUN: coat-opt %s -split-input-file -verify-diagnostics --coat-verify-nvvm-target | FileCheck %s

// The minimum PTX ISA for FP8 cvt per chip (measured with llc 22.1.8).
// CHECK-LABEL: gpu.module @sm89_ptx81
gpu.module @sm89_ptx81 [#nvvm.target<chip = "sm_89", features = "+ptx81">] {
  func.func @f(%x: f32) -> f8E4M3FN {
    %0 = arith.truncf %x : f32 to f8E4M3FN
    return %0 : f8E4M3FN
  }
}
// CHECK-LABEL: gpu.module @sm90_ptx78
gpu.module @sm90_ptx78 [#nvvm.target<chip = "sm_90", features = "+ptx78">] {
  func.func @f(%x: f8E5M2) -> f32 {
    %0 = arith.extf %x : f8E5M2 to f32
    return %0 : f32
  }
}
// CHECK-LABEL: gpu.module @sm90a_ptx80
gpu.module @sm90a_ptx80 [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
  func.func @f(%x: f32) -> f8E4M3FN {
    %0 = arith.truncf %x : f32 to f8E4M3FN
    return %0 : f8E4M3FN
  }
}
// With no +ptx feature LLVM uses the chip's minimum (8.0 for sm_90a).
// CHECK-LABEL: gpu.module @sm90a_default
gpu.module @sm90a_default [#nvvm.target<chip = "sm_90a">] {
  func.func @f(%x: f32) -> f8E4M3FN {
    %0 = arith.truncf %x : f32 to f8E4M3FN
    return %0 : f8E4M3FN
  }
}
// CHECK-LABEL: gpu.module @sm100a_ptx86
gpu.module @sm100a_ptx86 [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
  func.func @f(%x: f32) -> f8E4M3FN {
    %0 = arith.truncf %x : f32 to f8E4M3FN
    return %0 : f8E4M3FN
  }
}
// CHECK-LABEL: gpu.module @sm120a_ptx87
gpu.module @sm120a_ptx87 [#nvvm.target<chip = "sm_120a", features = "+ptx87">] {
  func.func @f(%x: f32) -> f8E4M3FN {
    %0 = arith.truncf %x : f32 to f8E4M3FN
    return %0 : f8E4M3FN
  }
}
// Without FP8, an older chip is fine.
// CHECK-LABEL: gpu.module @sm80_no_fp8
gpu.module @sm80_no_fp8 [#nvvm.target<chip = "sm_80", features = "+ptx70">] {
  func.func @f(%x: f32) -> f16 {
    %0 = arith.truncf %x : f32 to f16
    return %0 : f16
  }
}
// Already lowered FP8 (NVVM cvt ops) is detected too.
// CHECK-LABEL: gpu.module @lowered_sm90
gpu.module @lowered_sm90 [#nvvm.target<chip = "sm_90", features = "+ptx80">] {
  llvm.func @f(%a: f32, %b: f32) -> i16 {
    %0 = nvvm.convert.f32x2.to.f8x2 %a, %b {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>} : i16(f8E4M3FN)
    llvm.return %0 : i16
  }
}
// Other targets are not ours to check.
// CHECK-LABEL: gpu.module @rocdl
gpu.module @rocdl [#rocdl.target<chip = "gfx942">] {
}

// -----

// expected-error @+1 {{target chip 'sm_89' with PTX 7.8 has no FP8 conversions: sm_89 needs +ptx81 (PTX 8.1) or newer}}
gpu.module @sm89_ptx78 [#nvvm.target<chip = "sm_89", features = "+ptx78">] {
  func.func @f(%x: f32) -> f8E4M3FN {
    %0 = arith.truncf %x : f32 to f8E4M3FN
    return %0 : f8E4M3FN
  }
}

// -----

// expected-error @+1 {{target chip 'sm_89' with PTX 7.8 (the chip's default) has no FP8 conversions: sm_89 needs +ptx81 (PTX 8.1) or newer}}
gpu.module @sm89_default [#nvvm.target<chip = "sm_89">] {
  func.func @f(%x: f8E4M3FN) -> f16 {
    %0 = arith.extf %x : f8E4M3FN to f16
    return %0 : f16
  }
}

// -----

// expected-error @+1 {{target chip 'sm_80' has no FP8 conversions (cvt e4m3x2/e5m2x2): they need sm_89 or newer}}
gpu.module @sm80_fp8 [#nvvm.target<chip = "sm_80", features = "+ptx80">] {
  func.func @f(%x: f32) -> f8E5M2 {
    %0 = arith.truncf %x : f32 to f8E5M2
    return %0 : f8E5M2
  }
}

// -----

// Rejected for any code, FP8 or not.
// expected-error @+1 {{target chip 'sm_90a' with PTX 7.8 is rejected by LLVM: sm_90a needs +ptx80 (PTX 8.0) or newer}}
gpu.module @sm90a_ptx78 [#nvvm.target<chip = "sm_90a", features = "+ptx78">] {
}

// -----

// expected-error @+1 {{target chip 'sm_100a' with PTX 8.0 is rejected by LLVM: sm_100a needs +ptx86 (PTX 8.6) or newer}}
gpu.module @sm100a_ptx80 [#nvvm.target<chip = "sm_100a", features = "+ptx80">] {
}

// -----

// expected-error @+1 {{target chip 'sm_120a' with PTX 8.6 is rejected by LLVM: sm_120a needs +ptx87 (PTX 8.7) or newer}}
gpu.module @sm120a_ptx86 [#nvvm.target<chip = "sm_120a", features = "+ptx86">] {
}

// -----

// Each target of a module is checked.
// expected-error @+1 {{target chip 'sm_80' has no FP8 conversions}}
gpu.module @two_targets [#nvvm.target<chip = "sm_90a", features = "+ptx80">,
                         #nvvm.target<chip = "sm_80", features = "+ptx70">] {
  func.func @f(%x: f32) -> f8E4M3FN {
    %0 = arith.truncf %x : f32 to f8E4M3FN
    return %0 : f8E4M3FN
  }
}

// -----

// expected-error @+1 {{target chip 'sm_999' is unknown to LLVM 22; FP8 conversions need sm_89 or newer}}
gpu.module @unknown_chip [#nvvm.target<chip = "sm_999", features = "+ptx80">] {
  func.func @f(%x: f32) -> f8E4M3FN {
    %0 = arith.truncf %x : f32 to f8E4M3FN
    return %0 : f8E4M3FN
  }
}
