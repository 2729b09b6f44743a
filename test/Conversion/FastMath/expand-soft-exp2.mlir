// RUN: coat-opt %s -coat-expand-soft-exp2 -split-input-file -verify-diagnostics | FileCheck %s
// The options of coat-lower-pointwise mark the fast forms' ex2.
// RUN: coat-opt %coat_src/examples/flow/pointwise.mlir --coat-lower-pointwise='target=gpu soft-exp2=true' \
// RUN:   | FileCheck %s --check-prefix=MARK
// RUN: coat-opt %coat_src/examples/flow/pointwise.mlir --coat-lower-pointwise='target=gpu' \
// RUN:   | FileCheck %s --check-prefix=NOMARK
// RUN: not coat-opt %coat_src/examples/flow/pointwise.mlir --coat-lower-pointwise='target=gpu soft-exp2=true exact-math=true' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=EXACT
// In coat-gpu-to-binary no ex2 reaches the SFU.
// RUN: coat-opt %coat_src/examples/flow/pointwise.mlir \
// RUN:   --pass-pipeline='builtin.module(coat-lower-pointwise{target=gpu soft-exp2=true},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=PTX

// MARK-LABEL: gpu.func @coat_silu_e4m3_g16(
// MARK-SAME: ex2 = "fma"
// MARK: math.exp2 %{{.*}} fastmath<afn> {coat.soft_exp2} : f32
// NOMARK-NOT: coat.soft_exp2
// NOMARK-NOT: ex2 = "fma"
// EXACT: soft-exp2 applies to the fast forms; exact-math evaluates expf
// PTX-LABEL: .entry coat_silu_e4m3_g16(
// PTX-NOT: ex2.approx
// PTX: min.NaN.f32
// PTX: max.NaN.f32
// PTX: fma.rn.f32
// PTX-NOT: ex2.approx

// A marked exp2: clamp (NaN-propagating), the shifter's rounding of x - 1/2,
// the exact fraction, six fused multiply-adds from c6 down to c0, the power
// of two from t's low bits, one product. Unmarked ones stay.
// CHECK-LABEL: func.func @soft(
// CHECK-SAME: %[[X:.*]]: f32
// CHECK: %[[HI:.*]] = arith.constant 1.280000e+02 : f32
// CHECK: %[[MIN:.*]] = arith.minimumf %[[X]], %[[HI]] : f32
// CHECK: %[[LO:.*]] = arith.constant -1.265000e+02 : f32
// CHECK: %[[XC:.*]] = arith.maximumf %[[MIN]], %[[LO]] : f32
// CHECK: %[[SH:.*]] = arith.constant 0x4B400000 : f32
// CHECK: %[[HALF:.*]] = arith.constant 5.000000e-01 : f32
// CHECK: %[[XH:.*]] = arith.subf %[[XC]], %[[HALF]] : f32
// CHECK: %[[T:.*]] = arith.addf %[[XH]], %[[SH]] : f32
// CHECK: %[[R:.*]] = arith.subf %[[T]], %[[SH]] : f32
// CHECK: %[[F:.*]] = arith.subf %[[XC]], %[[R]] : f32
// CHECK: %[[C6:.*]] = arith.constant 2.17094028E-4 : f32
// CHECK: %[[C5:.*]] = arith.constant 0.00124376023 : f32
// CHECK: %[[P:.*]] = math.fma %[[C6]], %[[F]], %[[C5]] : f32
// CHECK-COUNT-4: math.fma
// CHECK: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: %[[P0:.*]] = math.fma %{{.*}}, %[[F]], %[[ONE]] : f32
// CHECK: %[[TB:.*]] = arith.bitcast %[[T]] : f32 to i32
// CHECK: %[[C23:.*]] = arith.constant 23 : i32
// CHECK: %[[SHL:.*]] = arith.shli %[[TB]], %[[C23]] : i32
// CHECK: %[[BIAS:.*]] = arith.constant 1065353216 : i32
// CHECK: %[[SB:.*]] = arith.addi %[[SHL]], %[[BIAS]] : i32
// CHECK: %[[S:.*]] = arith.bitcast %[[SB]] : i32 to f32
// CHECK: %[[Y:.*]] = arith.mulf %[[P0]], %[[S]] : f32
// CHECK: %[[U:.*]] = math.exp2 %[[X]] fastmath<afn> : f32
// CHECK: return %[[Y]], %[[U]]
func.func @soft(%x: f32) -> (f32, f32) {
  %y = math.exp2 %x fastmath<afn> {coat.soft_exp2} : f32
  %u = math.exp2 %x fastmath<afn> : f32
  return %y, %u : f32, f32
}

// -----

func.func @not_exp2(%x: f32) -> f32 {
  // expected-error @+1 {{'math.log2' op carries coat.soft_exp2, which only an f32 math.exp2 may}}
  %y = math.log2 %x {coat.soft_exp2} : f32
  return %y : f32
}

// -----

func.func @f64(%x: f64) -> f64 {
  // expected-error @+1 {{'math.exp2' op carries coat.soft_exp2, which only an f32 math.exp2 may}}
  %y = math.exp2 %x {coat.soft_exp2} : f64
  return %y : f64
}
