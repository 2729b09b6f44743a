// coat-lower-fp8-to-nvvm: f8 arith.truncf/extf become packed NVVM cvt ops.
// RUN: coat-opt %s --pass-pipeline='builtin.module(gpu.module(coat-lower-fp8-to-nvvm))' | FileCheck %s
// The pass anchors on any op, so it also runs on a plain func.func.
// RUN: coat-opt %s --pass-pipeline='builtin.module(gpu.module(func.func(coat-lower-fp8-to-nvvm)))' | FileCheck %s

// CHECK-NOT: arith.truncf {{.*}} to {{.*}}f8E
// CHECK-NOT: arith.extf {{.*}}f8E{{.*}} to

gpu.module @fp8 {

// Scalar: the value goes to operand `b` (low byte), zero to `a` (high byte).
// CHECK-LABEL: func.func @trunc_f32_scalar
// CHECK-SAME: (%[[X:.*]]: f32)
// CHECK: %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[P:.*]] = nvvm.convert.f32x2.to.f8x2 %[[Z]], %[[X]] {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>} : i16(f8E4M3FN)
// CHECK: %[[B:.*]] = arith.trunci %[[P]] : i16 to i8
// CHECK: %[[R:.*]] = arith.bitcast %[[B]] : i8 to f8E4M3FN
// CHECK: return %[[R]]
func.func @trunc_f32_scalar(%x: f32) -> f8E4M3FN {
  %0 = arith.truncf %x : f32 to f8E4M3FN
  return %0 : f8E4M3FN
}

// Byte order: element 0 must land in byte 0, i.e. in the low byte of the
// little-endian i16, i.e. in operand `b`; element 1 goes to operand `a`.
// CHECK-LABEL: func.func @trunc_f32_pair_byte_order
// CHECK-SAME: (%[[V:.*]]: vector<2xf32>)
// CHECK-DAG: %[[E0:.*]] = vector.extract %[[V]][0] : f32 from vector<2xf32>
// CHECK-DAG: %[[E1:.*]] = vector.extract %[[V]][1] : f32 from vector<2xf32>
// CHECK: %[[P:.*]] = nvvm.convert.f32x2.to.f8x2 %[[E1]], %[[E0]] {{.*}} : i16(f8E5M2)
// CHECK: %[[W:.*]] = vector.from_elements %[[P]] : vector<1xi16>
// CHECK: %[[B:.*]] = vector.bitcast %[[W]] : vector<1xi16> to vector<2xi8>
// CHECK: arith.bitcast %[[B]] : vector<2xi8> to vector<2xf8E5M2>
func.func @trunc_f32_pair_byte_order(%v: vector<2xf32>) -> vector<2xf8E5M2> {
  %0 = arith.truncf %v : vector<2xf32> to vector<2xf8E5M2>
  return %0 : vector<2xf8E5M2>
}

// The common case: 16 lanes -> 8 packed cvts, one bitcast.
// CHECK-LABEL: func.func @trunc_f32_x16
// CHECK-COUNT-8: nvvm.convert.f32x2.to.f8x2 {{.*}} {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>} : i16(f8E4M3FN)
// CHECK-NOT: nvvm.convert
// CHECK: vector.from_elements {{.*}} : vector<8xi16>
// CHECK: vector.bitcast {{.*}} : vector<8xi16> to vector<16xi8>
// CHECK: arith.bitcast {{.*}} : vector<16xi8> to vector<16xf8E4M3FN>
func.func @trunc_f32_x16(%v: vector<16xf32>) -> vector<16xf8E4M3FN> {
  %0 = arith.truncf %v : vector<16xf32> to vector<16xf8E4M3FN>
  return %0 : vector<16xf8E4M3FN>
}

// Odd length: the last element is paired with zero and the pad byte dropped.
// CHECK-LABEL: func.func @trunc_f32_x3
// CHECK: %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: nvvm.convert.f32x2.to.f8x2
// CHECK: %[[E2:.*]] = vector.extract %{{.*}}[2] : f32 from vector<3xf32>
// CHECK: nvvm.convert.f32x2.to.f8x2 %[[Z]], %[[E2]]
// CHECK: %[[B:.*]] = vector.bitcast %{{.*}} : vector<2xi16> to vector<4xi8>
// CHECK: vector.shuffle %[[B]], %[[B]] [0, 1, 2] : vector<4xi8>, vector<4xi8>
func.func @trunc_f32_x3(%v: vector<3xf32>) -> vector<3xf8E4M3FN> {
  %0 = arith.truncf %v : vector<3xf32> to vector<3xf8E4M3FN>
  return %0 : vector<3xf8E4M3FN>
}

// f16 sources use the f16x2 form; pairs keep their element order.
// CHECK-LABEL: func.func @trunc_f16_x4
// CHECK-SAME: (%[[V:.*]]: vector<4xf16>)
// CHECK: %[[P0:.*]] = vector.shuffle %[[V]], %[[V]] [0, 1]
// CHECK: nvvm.convert.f16x2.to.f8x2 %[[P0]] : vector<2xf16> -> i16(f8E4M3FN)
// CHECK: %[[P1:.*]] = vector.shuffle %[[V]], %[[V]] [2, 3]
// CHECK: nvvm.convert.f16x2.to.f8x2 %[[P1]] : vector<2xf16> -> i16(f8E4M3FN)
func.func @trunc_f16_x4(%v: vector<4xf16>) -> vector<4xf8E4M3FN> {
  %0 = arith.truncf %v : vector<4xf16> to vector<4xf8E4M3FN>
  return %0 : vector<4xf8E4M3FN>
}

// CHECK-LABEL: func.func @trunc_f16_scalar
// CHECK: %[[PAIR:.*]] = vector.from_elements %{{.*}}, %{{.*}} : vector<2xf16>
// CHECK: nvvm.convert.f16x2.to.f8x2 %[[PAIR]] : vector<2xf16> -> i16(f8E5M2)
// CHECK: arith.trunci
func.func @trunc_f16_scalar(%x: f16) -> f8E5M2 {
  %0 = arith.truncf %x : f16 to f8E5M2
  return %0 : f8E5M2
}

// PTX converts bf16x2 only to ue8m0x2: bf16 goes through f32 (exact).
// CHECK-LABEL: func.func @trunc_bf16_x2
// CHECK: arith.extf %{{.*}} : vector<2xbf16> to vector<2xf32>
// CHECK: nvvm.convert.f32x2.to.f8x2 {{.*}} : i16(f8E4M3FN)
func.func @trunc_bf16_x2(%v: vector<2xbf16>) -> vector<2xf8E4M3FN> {
  %0 = arith.truncf %v : vector<2xbf16> to vector<2xf8E4M3FN>
  return %0 : vector<2xf8E4M3FN>
}

// n-D vectors are converted row by row.
// CHECK-LABEL: func.func @trunc_f32_2d
// CHECK: %[[ACC:.*]] = arith.constant dense<0> : vector<2x4xi8>
// CHECK: vector.extract %{{.*}}[0] : vector<4xf32> from vector<2x4xf32>
// CHECK-COUNT-2: nvvm.convert.f32x2.to.f8x2
// CHECK: vector.insert %{{.*}}, %[[ACC]] [0] : vector<4xi8> into vector<2x4xi8>
// CHECK-COUNT-2: nvvm.convert.f32x2.to.f8x2
// CHECK: arith.bitcast %{{.*}} : vector<2x4xi8> to vector<2x4xf8E4M3FN>
func.func @trunc_f32_2d(%v: vector<2x4xf32>) -> vector<2x4xf8E4M3FN> {
  %0 = arith.truncf %v : vector<2x4xf32> to vector<2x4xf8E4M3FN>
  return %0 : vector<2x4xf8E4M3FN>
}

// CHECK-LABEL: func.func @trunc_f32_0d
// CHECK: nvvm.convert.f32x2.to.f8x2
// CHECK: vector.broadcast %{{.*}} : i8 to vector<i8>
func.func @trunc_f32_0d(%v: vector<f32>) -> vector<f8E4M3FN> {
  %0 = arith.truncf %v : vector<f32> to vector<f8E4M3FN>
  return %0 : vector<f8E4M3FN>
}

// Scalar extf: the byte is duplicated into a pair, lane 0 is kept.
// CHECK-LABEL: func.func @ext_scalar_f32
// CHECK-SAME: (%[[X:.*]]: f8E4M3FN)
// CHECK: %[[B:.*]] = arith.bitcast %[[X]] : f8E4M3FN to i8
// CHECK: %[[P:.*]] = vector.broadcast %[[B]] : i8 to vector<2xi8>
// CHECK: %[[H:.*]] = nvvm.convert.f8x2.to.f16x2 %[[P]] : vector<2xi8>(f8E4M3FN) -> vector<2xf16>
// CHECK: %[[E:.*]] = vector.extract %[[H]][0] : f16 from vector<2xf16>
// CHECK: arith.extf %[[E]] : f16 to f32
func.func @ext_scalar_f32(%x: f8E4M3FN) -> f32 {
  %0 = arith.extf %x : f8E4M3FN to f32
  return %0 : f32
}

// CHECK-LABEL: func.func @ext_pair_f16
// CHECK-SAME: (%[[V:.*]]: vector<2xf8E5M2>)
// CHECK: %[[B:.*]] = arith.bitcast %[[V]] : vector<2xf8E5M2> to vector<2xi8>
// CHECK: %[[H:.*]] = nvvm.convert.f8x2.to.f16x2 %[[B]] : vector<2xi8>(f8E5M2) -> vector<2xf16>
// CHECK: return %[[H]]
func.func @ext_pair_f16(%v: vector<2xf8E5M2>) -> vector<2xf16> {
  %0 = arith.extf %v : vector<2xf8E5M2> to vector<2xf16>
  return %0 : vector<2xf16>
}

// CHECK-LABEL: func.func @ext_x16_f32
// CHECK-COUNT-8: nvvm.convert.f8x2.to.f16x2 {{.*}} : vector<2xi8>(f8E4M3FN) -> vector<2xf16>
// CHECK-NOT: nvvm.convert
// CHECK: arith.extf %{{.*}} : vector<16xf16> to vector<16xf32>
func.func @ext_x16_f32(%v: vector<16xf8E4M3FN>) -> vector<16xf32> {
  %0 = arith.extf %v : vector<16xf8E4M3FN> to vector<16xf32>
  return %0 : vector<16xf32>
}

// CHECK-LABEL: func.func @ext_x3_f16
// CHECK: %[[PAD:.*]] = vector.shuffle %[[B:.*]], %[[B]] [0, 1, 2, 0] : vector<3xi8>, vector<3xi8>
// CHECK-COUNT-2: nvvm.convert.f8x2.to.f16x2
// CHECK: %[[C:.*]] = vector.shuffle %{{.*}}, %{{.*}} [0, 1, 2, 3] : vector<2xf16>, vector<2xf16>
// CHECK: vector.shuffle %[[C]], %[[C]] [0, 1, 2] : vector<4xf16>, vector<4xf16>
func.func @ext_x3_f16(%v: vector<3xf8E5M2>) -> vector<3xf16> {
  %0 = arith.extf %v : vector<3xf8E5M2> to vector<3xf16>
  return %0 : vector<3xf16>
}

// Every FP8 value is a bf16: f16 -> f32 -> bf16 is exact.
// CHECK-LABEL: func.func @ext_x2_bf16
// CHECK: nvvm.convert.f8x2.to.f16x2
// CHECK: arith.extf %{{.*}} : vector<2xf16> to vector<2xf32>
// CHECK: arith.truncf %{{.*}} : vector<2xf32> to vector<2xbf16>
func.func @ext_x2_bf16(%v: vector<2xf8E4M3FN>) -> vector<2xbf16> {
  %0 = arith.extf %v : vector<2xf8E4M3FN> to vector<2xbf16>
  return %0 : vector<2xbf16>
}

// Conversions that do not involve FP8 are left alone.
// CHECK-LABEL: func.func @non_fp8
// CHECK: arith.truncf %{{.*}} : f32 to f16
// CHECK: arith.extf %{{.*}} : bf16 to f32
func.func @non_fp8(%x: f32, %y: bf16) -> (f16, f32) {
  %0 = arith.truncf %x : f32 to f16
  %1 = arith.extf %y : bf16 to f32
  return %0, %1 : f16, f32
}

}
