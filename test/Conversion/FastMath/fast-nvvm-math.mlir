// RUN: coat-opt %s --coat-fast-nvvm-math | FileCheck %s

// CHECK-LABEL: func.func @approx
func.func @approx(%x: f32, %y: f32) -> (f32, f32, f32, f32, f32) {
  // CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"(%{{.*}}) : (f32) -> f32
  %0 = math.exp2 %x fastmath<afn> : f32
  // CHECK: llvm.call_intrinsic "llvm.nvvm.lg2.approx.ftz.f"(%{{.*}}) : (f32) -> f32
  %1 = math.log2 %x fastmath<afn> : f32
  // CHECK: llvm.call_intrinsic "llvm.nvvm.sqrt.approx.ftz.f"(%{{.*}}) : (f32) -> f32
  %2 = math.sqrt %x fastmath<afn> : f32
  // A division by y is a multiply by rcp(y); 1/y is rcp(y) alone.
  // CHECK: %[[R:.*]] = llvm.call_intrinsic "llvm.nvvm.rcp.approx.ftz.f"(%arg1) : (f32) -> f32
  // CHECK-NEXT: arith.mulf %arg0, %[[R]] : f32
  %3 = arith.divf %x, %y fastmath<afn> : f32
  %one = arith.constant 1.0 : f32
  // CHECK: llvm.call_intrinsic "llvm.nvvm.rcp.approx.ftz.f"(%arg1) : (f32) -> f32
  // CHECK-NOT: arith.divf
  %4 = arith.divf %one, %y fastmath<afn> : f32
  return %0, %1, %2, %3, %4 : f32, f32, f32, f32, f32
}

// Without afn, and for f64, the ops stay (libdevice keeps them accurate).
// CHECK-LABEL: func.func @accurate
func.func @accurate(%x: f32, %d: f64) -> (f32, f32, f64) {
  // CHECK: math.exp2 %{{.*}} : f32
  %0 = math.exp2 %x : f32
  // CHECK: arith.divf %{{.*}}, %{{.*}} : f32
  %1 = arith.divf %x, %x : f32
  // CHECK: math.log2 %{{.*}} fastmath<afn> : f64
  %2 = math.log2 %d fastmath<afn> : f64
  return %0, %1, %2 : f32, f32, f64
}

// Ops marked coat.keep_subnormals get the non-flushing SFU variants.
// CHECK-LABEL: func.func @keep_subnormals
func.func @keep_subnormals(%x: f32, %y: f32) -> (f32, f32, f32, f32) {
  // CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.f32"
  %0 = math.exp2 %x fastmath<afn> {coat.keep_subnormals} : f32
  // CHECK: llvm.call_intrinsic "llvm.nvvm.lg2.approx.f"
  %1 = math.log2 %x fastmath<afn> {coat.keep_subnormals} : f32
  // CHECK: llvm.call_intrinsic "llvm.nvvm.sqrt.approx.f"
  %2 = math.sqrt %x fastmath<afn> {coat.keep_subnormals} : f32
  // CHECK: llvm.call_intrinsic "llvm.nvvm.div.approx.f"(%arg0, %arg1)
  %3 = arith.divf %x, %y fastmath<afn> {coat.keep_subnormals} : f32
  return %0, %1, %2, %3 : f32, f32, f32, f32
}
