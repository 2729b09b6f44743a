// RUN: coat-opt %s --coat-expand-fp8-conversions | FileCheck %s
// The CPU twins' FP8 conversions become integer arithmetic; the Python tests
// check them bit for bit against the reference library on all codes.

// CHECK-LABEL: func.func @trunc
// CHECK-NOT: arith.truncf
// CHECK: arith.bitcast %{{.*}} : f32 to i32
// RNE on the mantissa: the dropped-bit bias and the kept LSB.
// CHECK: arith.shrui
// CHECK: math.roundeven
// Saturation to the largest finite code (0x7E = 126 for E4M3).
// CHECK: arith.minui %{{.*}}, %c126_i32
// CHECK: arith.trunci %{{.*}} : i32 to i8
// CHECK: arith.bitcast %{{.*}} : i8 to f8E4M3FN
func.func @trunc(%x: f32) -> f8E4M3FN {
  %q = arith.truncf %x : f32 to f8E4M3FN
  return %q : f8E4M3FN
}

// E5M2 saturates to 0x7B = 123; vectors keep their shape.
// CHECK-LABEL: func.func @trunc_vector
// CHECK: arith.minui %{{.*}}, %cst{{.*}} : vector<4xi32>
// CHECK: arith.bitcast %{{.*}} : vector<4xi8> to vector<4xf8E5M2>
func.func @trunc_vector(%x: vector<4xf32>) -> vector<4xf8E5M2> {
  %q = arith.truncf %x : vector<4xf32> to vector<4xf8E5M2>
  return %q : vector<4xf8E5M2>
}

// CHECK-LABEL: func.func @ext
// CHECK-NOT: arith.extf %{{.*}} : f8E4M3FN
// CHECK: arith.bitcast %{{.*}} : f8E4M3FN to i8
// CHECK: arith.extui %{{.*}} : i8 to i32
// Subnormal codes: mantissa * 2^-9.
// CHECK: arith.uitofp
// CHECK: arith.bitcast %{{.*}} : i32 to f32
// A bf16 result is an exact truncation of the f32 value.
// CHECK: arith.truncf %{{.*}} : f32 to bf16
func.func @ext(%q: f8E4M3FN) -> bf16 {
  %x = arith.extf %q : f8E4M3FN to bf16
  return %x : bf16
}

// Conversions between wider types are left alone.
// CHECK-LABEL: func.func @untouched
// CHECK: arith.truncf %{{.*}} : f32 to bf16
func.func @untouched(%x: f32) -> bf16 {
  %y = arith.truncf %x : f32 to bf16
  return %y : bf16
}
