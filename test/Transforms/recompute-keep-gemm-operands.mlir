// RUN: coat-opt %s -split-input-file -coat-recompute-activations | FileCheck %s
// RUN: coat-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(coat-recompute-activations{keep-gemm-operands=true}))' | FileCheck %s --check-prefix=OPTION
// RUN: coat-opt %s -split-input-file -coat-recompute-activations -coat-report-saved-activations -o /dev/null 2>&1 | FileCheck %s --check-prefix=SAVED
// RUN: coat-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(coat-recompute-activations{weight-copies-min-bytes=0}))' | FileCheck %s --check-prefix=WCOPY

// The Llama MLP block of coat.programs.MLPBlockConfig(32, 64) at 16 tokens,
// after coat-mixed-granularity and coat-group-scaling, keeping its backward
// GEMMs' operands: the norm output's transposed copy (read by the gate and
// up wgrads) and the SwiGLU product's (read by the down wgrad) stay as the
// forward made them, and so does the norm's rstd. Only silu(gate), which
// the SwiGLU backward reads, is derived again.
// CHECK-LABEL: func.func @mlp_kept
// CHECK: %[[LN:[^ ]*]], %[[RSTD:[^ ]*]] = coat.rmsnorm %[[XQ:[^ ]*]], %arg1
// CHECK: %[[LNT:[^ ]*]] = coat.transpose %{{.*}} : !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<32x16xf8E4M3FN
// CHECK: %[[GATE:[^ ]*]] = coat.linear forward
// CHECK-NEXT: %[[UP:[^ ]*]] = coat.linear forward
// CHECK: %[[MT:[^ ]*]] = coat.transpose %{{.*}} : !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<64x16xf8E4M3FN
// CHECK: coat.linear wgrad %{{[^ ]*}}, %[[MT]] :
// CHECK-NEXT: %[[ACT:[^ ]*]] = coat.silu %[[GATE]] {coat.recompute} :
// CHECK-NEXT: coat.swiglu_mul_grad %[[ACT]], %[[UP]],
// CHECK-NOT: coat.recompute
// CHECK: coat.linear wgrad %{{[^ ]*}}, %[[LNT]] :
// CHECK: coat.linear wgrad %{{[^ ]*}}, %[[LNT]] :
// CHECK: coat.rmsnorm_grad %[[XQ]], %arg1, %[[RSTD]],
// CHECK: return
// Kept on top of @mlp_default's three 1x16 tensors: the transposed copies
// (16x32 and 16x64 codes and a bf16 scale each) and rstd, 514 + 1026 + 64
// bytes.
// SAVED-LABEL: saved activations: 4484 bytes
// The weight copies (quantized from the weights alone) are derived again
// under weight-copies-min-bytes as without the attribute.
// WCOPY-LABEL: func.func @mlp_kept
// WCOPY-NOT: coat.silu %{{.*}} {coat.recompute}
// WCOPY: coat.quantize %arg4 {coat.recompute}
// WCOPY: coat.silu %{{.*}} {coat.recompute}
// WCOPY-NOT: coat.rmsnorm %{{.*}} {coat.recompute}
// WCOPY: coat.quantize %arg2 {coat.recompute}
// WCOPY: coat.quantize %arg3 {coat.recompute}
// WCOPY-NOT: coat.rmsnorm %{{.*}} {coat.recompute}
// WCOPY: return
func.func @mlp_kept(%arg0: tensor<16x32xbf16>, %arg1: tensor<32xbf16> {coat.weight}, %arg2: tensor<64x32xbf16> {coat.weight}, %arg3: tensor<64x32xbf16> {coat.weight}, %arg4: tensor<32x64xbf16> {coat.weight}, %arg5: tensor<16x32xbf16> {coat.grad_of = 0 : i64, coat.gradient}) -> (tensor<16x32xbf16>, !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<16x32xbf16> {coat.grad_of = 0 : i64}, !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>, tensor<32xbf16> {coat.grad_of = 1 : i64}, tensor<64x32xbf16> {coat.grad_of = 2 : i64}, tensor<64x32xbf16> {coat.grad_of = 3 : i64}, tensor<32x64xbf16> {coat.grad_of = 4 : i64}) attributes {coat.keep_gemm_operands = true} {
  %0 = coat.quantize %arg0 : tensor<16x32xbf16> -> !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
  %result, %rstd = coat.rmsnorm %0, %arg1 eps = 9.99999974E-6 : !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<32xbf16> -> tensor<16x32xbf16>, tensor<16xf32>
  %1 = coat.absmax %result, per_group<16> epilogue : tensor<16x32xbf16> -> tensor<16x2xf32>
  %2 = coat.reduce_scales %1 : tensor<16x2xf32> -> tensor<f32>
  %cst = arith.constant dense<1.000000e-10> : tensor<f32>
  %3 = arith.addf %2, %cst : tensor<f32>
  %cst_0 = arith.constant dense<4.480000e+02> : tensor<f32>
  %4 = arith.divf %3, %cst_0 : tensor<f32>
  %5 = arith.truncf %4 : tensor<f32> to tensor<bf16>
  %6 = coat.quantize %result scale %5 : tensor<16x32xbf16>, tensor<bf16> -> !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>
  %7 = coat.transpose %6 : !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<32x16xf8E4M3FN, per_tensor, scale = bf16>
  %8 = coat.quantize %arg2 : tensor<64x32xbf16> -> !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16>
  %9 = coat.quantize %arg3 : tensor<64x32xbf16> -> !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16>
  %10 = coat.quantize %arg4 : tensor<32x64xbf16> -> !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>
  %11 = coat.linear forward %6, %8 : !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>
  %12 = coat.linear forward %6, %9 : !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>
  %13 = coat.silu %11 : !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>
  %result_1 = coat.swiglu_mul %13, %12 : !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>, !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<16x64xbf16>
  %14 = coat.absmax %result_1, per_group<16> epilogue : tensor<16x64xbf16> -> tensor<16x4xf32>
  %15 = coat.reduce_scales %14 : tensor<16x4xf32> -> tensor<f32>
  %cst_2 = arith.constant dense<1.000000e-10> : tensor<f32>
  %16 = arith.addf %15, %cst_2 : tensor<f32>
  %cst_3 = arith.constant dense<4.480000e+02> : tensor<f32>
  %17 = arith.divf %16, %cst_3 : tensor<f32>
  %18 = arith.truncf %17 : tensor<f32> to tensor<bf16>
  %19 = coat.quantize %result_1 scale %18 : tensor<16x64xbf16>, tensor<bf16> -> !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>
  %20 = coat.transpose %19 : !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<64x16xf8E4M3FN, per_tensor, scale = bf16>
  %21 = coat.linear forward %19, %10 : !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x32xbf16>
  %sum, %sum_q = coat.residual_add %arg0, %21 : tensor<16x32xbf16>, tensor<16x32xbf16> -> tensor<16x32xbf16>, !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
  %22 = coat.quantize %arg5 : tensor<16x32xbf16> -> !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>
  %23 = coat.transpose %22 : !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<32x16xf8E5M2, per_tensor, scale = bf16>
  %24 = coat.transpose %10 : !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16>
  %25 = coat.linear dgrad %22, %24 : !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x64xbf16>
  %26 = coat.linear wgrad %23, %20 : !coat.qtensor<32x16xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<64x16xf8E4M3FN, per_tensor, scale = bf16> -> tensor<32x64xbf16>
  %dlhs, %drhs = coat.swiglu_mul_grad %13, %12, %25 : !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>, !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>, tensor<16x64xbf16> -> tensor<16x64xbf16>, tensor<16x64xbf16>
  %27 = coat.absmax %drhs, per_group<16> epilogue : tensor<16x64xbf16> -> tensor<16x4xf32>
  %dx = coat.silu_grad %11, %dlhs : !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>, tensor<16x64xbf16> -> tensor<16x64xbf16>
  %28 = coat.absmax %dx, per_group<16> epilogue : tensor<16x64xbf16> -> tensor<16x4xf32>
  %29 = coat.reduce_scales %28 : tensor<16x4xf32> -> tensor<f32>
  %cst_4 = arith.constant dense<1.000000e-10> : tensor<f32>
  %30 = arith.addf %29, %cst_4 : tensor<f32>
  %cst_5 = arith.constant dense<5.734400e+04> : tensor<f32>
  %31 = arith.divf %30, %cst_5 : tensor<f32>
  %32 = arith.truncf %31 : tensor<f32> to tensor<bf16>
  %33 = coat.quantize %dx scale %32 : tensor<16x64xbf16>, tensor<bf16> -> !coat.qtensor<16x64xf8E5M2, per_tensor, scale = bf16>
  %34 = coat.transpose %33 : !coat.qtensor<16x64xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<64x16xf8E5M2, per_tensor, scale = bf16>
  %35 = coat.reduce_scales %27 : tensor<16x4xf32> -> tensor<f32>
  %cst_6 = arith.constant dense<1.000000e-10> : tensor<f32>
  %36 = arith.addf %35, %cst_6 : tensor<f32>
  %cst_7 = arith.constant dense<5.734400e+04> : tensor<f32>
  %37 = arith.divf %36, %cst_7 : tensor<f32>
  %38 = arith.truncf %37 : tensor<f32> to tensor<bf16>
  %39 = coat.quantize %drhs scale %38 : tensor<16x64xbf16>, tensor<bf16> -> !coat.qtensor<16x64xf8E5M2, per_tensor, scale = bf16>
  %40 = coat.transpose %39 : !coat.qtensor<16x64xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<64x16xf8E5M2, per_tensor, scale = bf16>
  %41 = coat.transpose %8 : !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>
  %42 = coat.transpose %9 : !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>
  %43 = coat.linear dgrad %33, %41 : !coat.qtensor<16x64xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x32xbf16>
  %44 = coat.linear wgrad %34, %7 : !coat.qtensor<64x16xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x16xf8E4M3FN, per_tensor, scale = bf16> -> tensor<64x32xbf16>
  %45 = coat.linear dgrad %39, %42 : !coat.qtensor<16x64xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x32xbf16>
  %46 = coat.linear wgrad %40, %7 : !coat.qtensor<64x16xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x16xf8E4M3FN, per_tensor, scale = bf16> -> tensor<64x32xbf16>
  %sum_8 = coat.residual_add_grad %43, %45 : tensor<16x32xbf16>, tensor<16x32xbf16> -> tensor<16x32xbf16>
  %dx_9, %dweight = coat.rmsnorm_grad %0, %arg1, %rstd, %sum_8 : !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<32xbf16>, tensor<16xf32>, tensor<16x32xbf16> -> tensor<16x32xbf16>, tensor<32xbf16>
  %sum_10 = coat.residual_add_grad %arg5, %dx_9 : tensor<16x32xbf16>, tensor<16x32xbf16> -> tensor<16x32xbf16>
  %47 = coat.absmax %sum_10, per_group<16> epilogue : tensor<16x32xbf16> -> tensor<16x2xf32>
  %48 = coat.reduce_scales %47 : tensor<16x2xf32> -> tensor<f32>
  %cst_11 = arith.constant dense<1.000000e-10> : tensor<f32>
  %49 = arith.addf %48, %cst_11 : tensor<f32>
  %cst_12 = arith.constant dense<5.734400e+04> : tensor<f32>
  %50 = arith.divf %49, %cst_12 : tensor<f32>
  %51 = arith.truncf %50 : tensor<f32> to tensor<bf16>
  %52 = coat.quantize %sum_10 scale %51 : tensor<16x32xbf16>, tensor<bf16> -> !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>
  return %sum, %sum_q, %sum_10, %52, %dweight, %44, %46, %26 : tensor<16x32xbf16>, !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<16x32xbf16>, !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>, tensor<32xbf16>, tensor<64x32xbf16>, tensor<64x32xbf16>, tensor<32x64xbf16>
}

// -----

// The same block without the attribute: the norm output's and the SwiGLU
// product's transposed copies are derived again from the kept 1x16 values
// (the norm's rstd comes with the norm) and their kept scales; with
// keep-gemm-operands=true the pass decides as for @mlp_kept.
// CHECK-LABEL: func.func @mlp_default
// CHECK: %[[GATE:[^ ]*]] = coat.linear forward
// CHECK-NEXT: %[[UP:[^ ]*]] = coat.linear forward
// CHECK: %[[ACT:[^ ]*]] = coat.silu %[[GATE]] {coat.recompute} :
// CHECK-NEXT: %[[M:[^ ]*]] = coat.swiglu_mul %[[ACT]], %[[UP]] {coat.recompute} :
// CHECK: %[[MQ:[^ ]*]] = coat.quantize %[[M]] scale %{{[^ ]*}} {coat.recompute} :
// CHECK-NEXT: %[[MT:[^ ]*]] = coat.transpose %[[MQ]] {coat.recompute} :
// CHECK-NEXT: coat.linear wgrad %{{[^ ]*}}, %[[MT]] :
// CHECK-NEXT: coat.swiglu_mul_grad %[[ACT]], %[[UP]],
// CHECK: %[[LN:[^ ]*]], %[[RSTD:[^ ]*]] = coat.rmsnorm %{{.*}} {coat.recompute} :
// CHECK: %[[LNQ:[^ ]*]] = coat.quantize %[[LN]] scale %{{[^ ]*}} {coat.recompute} :
// CHECK-NEXT: %[[LNT:[^ ]*]] = coat.transpose %[[LNQ]] {coat.recompute} :
// CHECK-NEXT: coat.linear wgrad %{{[^ ]*}}, %[[LNT]] :
// CHECK: coat.linear wgrad %{{[^ ]*}}, %[[LNT]] :
// CHECK: coat.rmsnorm_grad %{{[^ ]*}}, %arg1, %[[RSTD]],
// OPTION-LABEL: func.func @mlp_default
// OPTION-NOT: coat.rmsnorm %{{.*}} {coat.recompute}
// OPTION-NOT: coat.swiglu_mul %{{.*}} {coat.recompute}
// OPTION: coat.silu %{{.*}} {coat.recompute}
// OPTION-NOT: coat.recompute
// OPTION: return
// SAVED-LABEL: saved activations: 2884 bytes
func.func @mlp_default(%arg0: tensor<16x32xbf16>, %arg1: tensor<32xbf16> {coat.weight}, %arg2: tensor<64x32xbf16> {coat.weight}, %arg3: tensor<64x32xbf16> {coat.weight}, %arg4: tensor<32x64xbf16> {coat.weight}, %arg5: tensor<16x32xbf16> {coat.grad_of = 0 : i64, coat.gradient}) -> (tensor<16x32xbf16>, !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<16x32xbf16> {coat.grad_of = 0 : i64}, !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>, tensor<32xbf16> {coat.grad_of = 1 : i64}, tensor<64x32xbf16> {coat.grad_of = 2 : i64}, tensor<64x32xbf16> {coat.grad_of = 3 : i64}, tensor<32x64xbf16> {coat.grad_of = 4 : i64}) {
  %0 = coat.quantize %arg0 : tensor<16x32xbf16> -> !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
  %result, %rstd = coat.rmsnorm %0, %arg1 eps = 9.99999974E-6 : !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<32xbf16> -> tensor<16x32xbf16>, tensor<16xf32>
  %1 = coat.absmax %result, per_group<16> epilogue : tensor<16x32xbf16> -> tensor<16x2xf32>
  %2 = coat.reduce_scales %1 : tensor<16x2xf32> -> tensor<f32>
  %cst = arith.constant dense<1.000000e-10> : tensor<f32>
  %3 = arith.addf %2, %cst : tensor<f32>
  %cst_0 = arith.constant dense<4.480000e+02> : tensor<f32>
  %4 = arith.divf %3, %cst_0 : tensor<f32>
  %5 = arith.truncf %4 : tensor<f32> to tensor<bf16>
  %6 = coat.quantize %result scale %5 : tensor<16x32xbf16>, tensor<bf16> -> !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>
  %7 = coat.transpose %6 : !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<32x16xf8E4M3FN, per_tensor, scale = bf16>
  %8 = coat.quantize %arg2 : tensor<64x32xbf16> -> !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16>
  %9 = coat.quantize %arg3 : tensor<64x32xbf16> -> !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16>
  %10 = coat.quantize %arg4 : tensor<32x64xbf16> -> !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>
  %11 = coat.linear forward %6, %8 : !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>
  %12 = coat.linear forward %6, %9 : !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>
  %13 = coat.silu %11 : !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>
  %result_1 = coat.swiglu_mul %13, %12 : !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>, !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<16x64xbf16>
  %14 = coat.absmax %result_1, per_group<16> epilogue : tensor<16x64xbf16> -> tensor<16x4xf32>
  %15 = coat.reduce_scales %14 : tensor<16x4xf32> -> tensor<f32>
  %cst_2 = arith.constant dense<1.000000e-10> : tensor<f32>
  %16 = arith.addf %15, %cst_2 : tensor<f32>
  %cst_3 = arith.constant dense<4.480000e+02> : tensor<f32>
  %17 = arith.divf %16, %cst_3 : tensor<f32>
  %18 = arith.truncf %17 : tensor<f32> to tensor<bf16>
  %19 = coat.quantize %result_1 scale %18 : tensor<16x64xbf16>, tensor<bf16> -> !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>
  %20 = coat.transpose %19 : !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<64x16xf8E4M3FN, per_tensor, scale = bf16>
  %21 = coat.linear forward %19, %10 : !coat.qtensor<16x64xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x32xbf16>
  %sum, %sum_q = coat.residual_add %arg0, %21 : tensor<16x32xbf16>, tensor<16x32xbf16> -> tensor<16x32xbf16>, !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
  %22 = coat.quantize %arg5 : tensor<16x32xbf16> -> !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>
  %23 = coat.transpose %22 : !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<32x16xf8E5M2, per_tensor, scale = bf16>
  %24 = coat.transpose %10 : !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16>
  %25 = coat.linear dgrad %22, %24 : !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x64xbf16>
  %26 = coat.linear wgrad %23, %20 : !coat.qtensor<32x16xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<64x16xf8E4M3FN, per_tensor, scale = bf16> -> tensor<32x64xbf16>
  %dlhs, %drhs = coat.swiglu_mul_grad %13, %12, %25 : !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>, !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>, tensor<16x64xbf16> -> tensor<16x64xbf16>, tensor<16x64xbf16>
  %27 = coat.absmax %drhs, per_group<16> epilogue : tensor<16x64xbf16> -> tensor<16x4xf32>
  %dx = coat.silu_grad %11, %dlhs : !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>, tensor<16x64xbf16> -> tensor<16x64xbf16>
  %28 = coat.absmax %dx, per_group<16> epilogue : tensor<16x64xbf16> -> tensor<16x4xf32>
  %29 = coat.reduce_scales %28 : tensor<16x4xf32> -> tensor<f32>
  %cst_4 = arith.constant dense<1.000000e-10> : tensor<f32>
  %30 = arith.addf %29, %cst_4 : tensor<f32>
  %cst_5 = arith.constant dense<5.734400e+04> : tensor<f32>
  %31 = arith.divf %30, %cst_5 : tensor<f32>
  %32 = arith.truncf %31 : tensor<f32> to tensor<bf16>
  %33 = coat.quantize %dx scale %32 : tensor<16x64xbf16>, tensor<bf16> -> !coat.qtensor<16x64xf8E5M2, per_tensor, scale = bf16>
  %34 = coat.transpose %33 : !coat.qtensor<16x64xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<64x16xf8E5M2, per_tensor, scale = bf16>
  %35 = coat.reduce_scales %27 : tensor<16x4xf32> -> tensor<f32>
  %cst_6 = arith.constant dense<1.000000e-10> : tensor<f32>
  %36 = arith.addf %35, %cst_6 : tensor<f32>
  %cst_7 = arith.constant dense<5.734400e+04> : tensor<f32>
  %37 = arith.divf %36, %cst_7 : tensor<f32>
  %38 = arith.truncf %37 : tensor<f32> to tensor<bf16>
  %39 = coat.quantize %drhs scale %38 : tensor<16x64xbf16>, tensor<bf16> -> !coat.qtensor<16x64xf8E5M2, per_tensor, scale = bf16>
  %40 = coat.transpose %39 : !coat.qtensor<16x64xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<64x16xf8E5M2, per_tensor, scale = bf16>
  %41 = coat.transpose %8 : !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>
  %42 = coat.transpose %9 : !coat.qtensor<64x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16>
  %43 = coat.linear dgrad %33, %41 : !coat.qtensor<16x64xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x32xbf16>
  %44 = coat.linear wgrad %34, %7 : !coat.qtensor<64x16xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x16xf8E4M3FN, per_tensor, scale = bf16> -> tensor<64x32xbf16>
  %45 = coat.linear dgrad %39, %42 : !coat.qtensor<16x64xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x64xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x32xbf16>
  %46 = coat.linear wgrad %40, %7 : !coat.qtensor<64x16xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x16xf8E4M3FN, per_tensor, scale = bf16> -> tensor<64x32xbf16>
  %sum_8 = coat.residual_add_grad %43, %45 : tensor<16x32xbf16>, tensor<16x32xbf16> -> tensor<16x32xbf16>
  %dx_9, %dweight = coat.rmsnorm_grad %0, %arg1, %rstd, %sum_8 : !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<32xbf16>, tensor<16xf32>, tensor<16x32xbf16> -> tensor<16x32xbf16>, tensor<32xbf16>
  %sum_10 = coat.residual_add_grad %arg5, %dx_9 : tensor<16x32xbf16>, tensor<16x32xbf16> -> tensor<16x32xbf16>
  %47 = coat.absmax %sum_10, per_group<16> epilogue : tensor<16x32xbf16> -> tensor<16x2xf32>
  %48 = coat.reduce_scales %47 : tensor<16x2xf32> -> tensor<f32>
  %cst_11 = arith.constant dense<1.000000e-10> : tensor<f32>
  %49 = arith.addf %48, %cst_11 : tensor<f32>
  %cst_12 = arith.constant dense<5.734400e+04> : tensor<f32>
  %50 = arith.divf %49, %cst_12 : tensor<f32>
  %51 = arith.truncf %50 : tensor<f32> to tensor<bf16>
  %52 = coat.quantize %sum_10 scale %51 : tensor<16x32xbf16>, tensor<bf16> -> !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>
  return %sum, %sum_q, %sum_10, %52, %dweight, %44, %46, %26 : tensor<16x32xbf16>, !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<16x32xbf16>, !coat.qtensor<16x32xf8E5M2, per_tensor, scale = bf16>, tensor<32xbf16>, tensor<64x32xbf16>, tensor<64x32xbf16>, tensor<32x64xbf16>
}

// -----

// A norm and a projection (@norm_linear of recompute-activations.mlir)
// keeping the norm output's transposed copy for the wgrad: nothing is
// derived again, and rmsnorm_grad reads the forward's rstd.
// CHECK-LABEL: func.func @norm_linear_kept
// CHECK-NOT: coat.recompute
// CHECK: return
// SAVED-LABEL: saved activations: 1154 bytes
// The weight copy still follows weight-copies-min-bytes.
// WCOPY-LABEL: func.func @norm_linear_kept
// WCOPY: %[[T:[^ ]*]] = coat.transpose %{{.*}} : !coat.qtensor<16x32xf8E4M3FN
// WCOPY: coat.quantize %arg2 {coat.recompute}
// WCOPY-NOT: coat.rmsnorm %{{.*}} {coat.recompute}
// WCOPY: coat.linear wgrad %{{[^ ]*}}, %[[T]] :
func.func @norm_linear_kept(%arg0: tensor<16x32xbf16>, %arg1: tensor<32xbf16> {coat.weight}, %arg2: tensor<48x32xbf16> {coat.weight}, %arg3: tensor<16x48xbf16> {coat.gradient, coat.grad_of = 0 : i64}) -> (tensor<16x48xbf16>, tensor<16x32xbf16> {coat.grad_of = 0 : i64}, tensor<32xbf16> {coat.grad_of = 1 : i64}, tensor<48x32xbf16> {coat.grad_of = 2 : i64}) attributes {coat.keep_gemm_operands = true} {
  %0 = coat.quantize %arg0 : tensor<16x32xbf16> -> !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
  %result, %rstd = coat.rmsnorm %0, %arg1 eps = 9.99999974E-6 : !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<32xbf16> -> tensor<16x32xbf16>, tensor<16xf32>
  %1 = coat.absmax %result, per_group<16> epilogue : tensor<16x32xbf16> -> tensor<16x2xf32>
  %2 = coat.reduce_scales %1 : tensor<16x2xf32> -> tensor<f32>
  %cst = arith.constant dense<1.000000e-10> : tensor<f32>
  %3 = arith.addf %2, %cst : tensor<f32>
  %cst_0 = arith.constant dense<4.480000e+02> : tensor<f32>
  %4 = arith.divf %3, %cst_0 : tensor<f32>
  %5 = arith.truncf %4 : tensor<f32> to tensor<bf16>
  %6 = coat.quantize %result scale %5 : tensor<16x32xbf16>, tensor<bf16> -> !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>
  %7 = coat.transpose %6 : !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<32x16xf8E4M3FN, per_tensor, scale = bf16>
  %8 = coat.quantize %arg2 : tensor<48x32xbf16> -> !coat.qtensor<48x32xf8E4M3FN, per_tensor, scale = bf16>
  %9 = coat.linear forward %6, %8 : !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<48x32xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x48xbf16>
  %10 = coat.quantize %arg3 : tensor<16x48xbf16> -> !coat.qtensor<16x48xf8E5M2, per_tensor, scale = bf16>
  %11 = coat.transpose %10 : !coat.qtensor<16x48xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<48x16xf8E5M2, per_tensor, scale = bf16>
  %12 = coat.transpose %8 : !coat.qtensor<48x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<32x48xf8E4M3FN, per_tensor, scale = bf16>
  %13 = coat.linear dgrad %10, %12 : !coat.qtensor<16x48xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x48xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x32xbf16>
  %14 = coat.linear wgrad %11, %7 : !coat.qtensor<48x16xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x16xf8E4M3FN, per_tensor, scale = bf16> -> tensor<48x32xbf16>
  %dx, %dweight = coat.rmsnorm_grad %0, %arg1, %rstd, %13 : !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<32xbf16>, tensor<16xf32>, tensor<16x32xbf16> -> tensor<16x32xbf16>, tensor<32xbf16>
  return %9, %dx, %dweight, %14 : tensor<16x48xbf16>, tensor<16x32xbf16>, tensor<32xbf16>, tensor<48x32xbf16>
}

// -----

// Without the attribute the option decides.
// CHECK-LABEL: func.func @norm_linear_default
// CHECK: coat.rmsnorm %{{.*}} {coat.recompute}
// OPTION-LABEL: func.func @norm_linear_default
// OPTION-NOT: coat.recompute
// OPTION: return
// SAVED-LABEL: saved activations: 578 bytes
func.func @norm_linear_default(%arg0: tensor<16x32xbf16>, %arg1: tensor<32xbf16> {coat.weight}, %arg2: tensor<48x32xbf16> {coat.weight}, %arg3: tensor<16x48xbf16> {coat.gradient, coat.grad_of = 0 : i64}) -> (tensor<16x48xbf16>, tensor<16x32xbf16> {coat.grad_of = 0 : i64}, tensor<32xbf16> {coat.grad_of = 1 : i64}, tensor<48x32xbf16> {coat.grad_of = 2 : i64}) {
  %0 = coat.quantize %arg0 : tensor<16x32xbf16> -> !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
  %result, %rstd = coat.rmsnorm %0, %arg1 eps = 9.99999974E-6 : !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<32xbf16> -> tensor<16x32xbf16>, tensor<16xf32>
  %1 = coat.absmax %result, per_group<16> epilogue : tensor<16x32xbf16> -> tensor<16x2xf32>
  %2 = coat.reduce_scales %1 : tensor<16x2xf32> -> tensor<f32>
  %cst = arith.constant dense<1.000000e-10> : tensor<f32>
  %3 = arith.addf %2, %cst : tensor<f32>
  %cst_0 = arith.constant dense<4.480000e+02> : tensor<f32>
  %4 = arith.divf %3, %cst_0 : tensor<f32>
  %5 = arith.truncf %4 : tensor<f32> to tensor<bf16>
  %6 = coat.quantize %result scale %5 : tensor<16x32xbf16>, tensor<bf16> -> !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>
  %7 = coat.transpose %6 : !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<32x16xf8E4M3FN, per_tensor, scale = bf16>
  %8 = coat.quantize %arg2 : tensor<48x32xbf16> -> !coat.qtensor<48x32xf8E4M3FN, per_tensor, scale = bf16>
  %9 = coat.linear forward %6, %8 : !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<48x32xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x48xbf16>
  %10 = coat.quantize %arg3 : tensor<16x48xbf16> -> !coat.qtensor<16x48xf8E5M2, per_tensor, scale = bf16>
  %11 = coat.transpose %10 : !coat.qtensor<16x48xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<48x16xf8E5M2, per_tensor, scale = bf16>
  %12 = coat.transpose %8 : !coat.qtensor<48x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<32x48xf8E4M3FN, per_tensor, scale = bf16>
  %13 = coat.linear dgrad %10, %12 : !coat.qtensor<16x48xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x48xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x32xbf16>
  %14 = coat.linear wgrad %11, %7 : !coat.qtensor<48x16xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x16xf8E4M3FN, per_tensor, scale = bf16> -> tensor<48x32xbf16>
  %dx, %dweight = coat.rmsnorm_grad %0, %arg1, %rstd, %13 : !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<32xbf16>, tensor<16xf32>, tensor<16x32xbf16> -> tensor<16x32xbf16>, tensor<32xbf16>
  return %9, %dx, %dweight, %14 : tensor<16x48xbf16>, tensor<16x32xbf16>, tensor<32xbf16>, tensor<48x32xbf16>
}

// -----

// The attribute, where given, decides over the option.
// CHECK-LABEL: func.func @norm_linear_not_kept
// CHECK: coat.rmsnorm %{{.*}} {coat.recompute}
// OPTION-LABEL: func.func @norm_linear_not_kept
// OPTION: coat.rmsnorm %{{.*}} {coat.recompute}
// SAVED-LABEL: saved activations: 578 bytes
func.func @norm_linear_not_kept(%arg0: tensor<16x32xbf16>, %arg1: tensor<32xbf16> {coat.weight}, %arg2: tensor<48x32xbf16> {coat.weight}, %arg3: tensor<16x48xbf16> {coat.gradient, coat.grad_of = 0 : i64}) -> (tensor<16x48xbf16>, tensor<16x32xbf16> {coat.grad_of = 0 : i64}, tensor<32xbf16> {coat.grad_of = 1 : i64}, tensor<48x32xbf16> {coat.grad_of = 2 : i64}) attributes {coat.keep_gemm_operands = false} {
  %0 = coat.quantize %arg0 : tensor<16x32xbf16> -> !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
  %result, %rstd = coat.rmsnorm %0, %arg1 eps = 9.99999974E-6 : !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<32xbf16> -> tensor<16x32xbf16>, tensor<16xf32>
  %1 = coat.absmax %result, per_group<16> epilogue : tensor<16x32xbf16> -> tensor<16x2xf32>
  %2 = coat.reduce_scales %1 : tensor<16x2xf32> -> tensor<f32>
  %cst = arith.constant dense<1.000000e-10> : tensor<f32>
  %3 = arith.addf %2, %cst : tensor<f32>
  %cst_0 = arith.constant dense<4.480000e+02> : tensor<f32>
  %4 = arith.divf %3, %cst_0 : tensor<f32>
  %5 = arith.truncf %4 : tensor<f32> to tensor<bf16>
  %6 = coat.quantize %result scale %5 : tensor<16x32xbf16>, tensor<bf16> -> !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>
  %7 = coat.transpose %6 : !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<32x16xf8E4M3FN, per_tensor, scale = bf16>
  %8 = coat.quantize %arg2 : tensor<48x32xbf16> -> !coat.qtensor<48x32xf8E4M3FN, per_tensor, scale = bf16>
  %9 = coat.linear forward %6, %8 : !coat.qtensor<16x32xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<48x32xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x48xbf16>
  %10 = coat.quantize %arg3 : tensor<16x48xbf16> -> !coat.qtensor<16x48xf8E5M2, per_tensor, scale = bf16>
  %11 = coat.transpose %10 : !coat.qtensor<16x48xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<48x16xf8E5M2, per_tensor, scale = bf16>
  %12 = coat.transpose %8 : !coat.qtensor<48x32xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<32x48xf8E4M3FN, per_tensor, scale = bf16>
  %13 = coat.linear dgrad %10, %12 : !coat.qtensor<16x48xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x48xf8E4M3FN, per_tensor, scale = bf16> -> tensor<16x32xbf16>
  %14 = coat.linear wgrad %11, %7 : !coat.qtensor<48x16xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<32x16xf8E4M3FN, per_tensor, scale = bf16> -> tensor<48x32xbf16>
  %dx, %dweight = coat.rmsnorm_grad %0, %arg1, %rstd, %13 : !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<32xbf16>, tensor<16xf32>, tensor<16x32xbf16> -> tensor<16x32xbf16>, tensor<32xbf16>
  return %9, %dx, %dweight, %14 : tensor<16x48xbf16>, tensor<16x32xbf16>, tensor<32xbf16>, tensor<48x32xbf16>
}
