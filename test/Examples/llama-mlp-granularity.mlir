// The Llama MLP block example through the activation passes: the choices
// must be COAT's granularity table (COAT.md §3.8).
//
// RUN: coat-opt %coat_src/examples/llama_mlp/mlp_block.mlir -coat-mixed-granularity -mlir-print-op-on-diagnostic=false 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK
// RUN: coat-opt %coat_src/examples/llama_mlp/mlp_block.mlir -coat-mixed-granularity 2>/dev/null | FileCheck %s
// RUN: coat-opt %coat_src/examples/llama_mlp/mlp_block.mlir -coat-mixed-granularity -coat-group-scaling 2>/dev/null | FileCheck %s --check-prefix=GS

// One remark per quantized value, in program order.
// REMARK-LABEL: remark: f8E4M3FN 1x16 (per_group<16>); 1xG input of non-linear coat.rmsnorm, coat.rmsnorm_grad (saved input)
// REMARK-NEXT: %h_q = coat.quantize_auto
// REMARK: remark: f8E4M3FN per_tensor + transposed copy; per-tensor GEMM operand of coat.linear forward rhs, coat.linear dgrad rhs (transposed)
// REMARK-NEXT: %wg_q = coat.quantize_auto
// REMARK: remark: f8E4M3FN per_tensor + transposed copy; per-tensor GEMM operand of coat.linear forward rhs, coat.linear dgrad rhs (transposed)
// REMARK-NEXT: %wu_q = coat.quantize_auto
// REMARK: remark: f8E4M3FN per_tensor + transposed copy; per-tensor GEMM operand of coat.linear forward rhs, coat.linear dgrad rhs (transposed)
// REMARK-NEXT: %wd_q = coat.quantize_auto
// REMARK: remark: f8E4M3FN 1x16 (per_group<16>) from the epilogue of the producing coat.linear forward; 1xG input of non-linear coat.silu, coat.silu_grad (saved input)
// REMARK-NEXT: %gate_q = coat.quantize_auto
// REMARK: remark: f8E4M3FN 1x16 (per_group<16>) from the epilogue of the producing coat.linear forward; 1xG input of non-linear coat.swiglu_mul, coat.swiglu_mul_grad (saved input)
// REMARK-NEXT: %up_q = coat.quantize_auto
// REMARK: remark: f8E5M2 per_tensor + transposed copy; per-tensor GEMM operand of coat.linear dgrad lhs, coat.linear wgrad lhs (transposed); f8E5M2: read as a gradient by coat.linear dgrad lhs
// REMARK-NEXT: %dout_q = coat.quantize_auto
// REMARK: remark: f8E5M2 per_tensor + transposed copy; per-tensor GEMM operand of coat.linear dgrad lhs, coat.linear wgrad lhs (transposed); f8E5M2: read as a gradient by coat.linear dgrad lhs
// REMARK-NEXT: %dgate_q = coat.quantize_auto
// REMARK: remark: f8E5M2 per_tensor + transposed copy; per-tensor GEMM operand of coat.linear dgrad lhs, coat.linear wgrad lhs (transposed); f8E5M2: read as a gradient by coat.linear dgrad lhs
// REMARK-NEXT: %dup_q = coat.quantize_auto
// REMARK-NOT: remark:

// CHECK-LABEL: func.func @llama_mlp_block
// CHECK-SAME: (%[[H:arg0]]: tensor<4096x4096xbf16>, %[[WN:arg1]]: tensor<4096xbf16> {coat.weight}, %[[WGATE:arg2]]: {{[^,]*}}, %[[WUP:arg3]]: {{[^,]*}}, %[[WDOWN:arg4]]: {{[^,]*}}, %[[DOUT:arg5]]:

// Residual-stream copy (norm input, saved): 1x16 E4M3, bf16 scales.
// CHECK-NEXT: %[[HQ:.*]] = coat.quantize %[[H]] : tensor<4096x4096xbf16> -> !coat.qtensor<4096x4096xf8E4M3FN, per_group<16>, scale = bf16>
// Norm output: per-tensor E4M3 plus the transposed copy.
// CHECK-NEXT: %[[LN:.*]], %[[RSTD:.*]], %[[LNT:.*]] = coat.rmsnorm %[[HQ]], %[[WN]] {{.*}} -> !coat.qtensor<4096x4096xf8E4M3FN, per_tensor, scale = bf16>, tensor<4096xf32>, !coat.qtensor<4096x4096xf8E4M3FN, per_tensor, scale = bf16>
// Weights: per-tensor E4M3.
// CHECK-NEXT: %[[WG:.*]] = coat.quantize %[[WGATE]] : tensor<11008x4096xbf16> -> !coat.qtensor<11008x4096xf8E4M3FN, per_tensor, scale = bf16>
// CHECK-NEXT: %[[WU:.*]] = coat.quantize %[[WUP]] : tensor<11008x4096xbf16> -> !coat.qtensor<11008x4096xf8E4M3FN, per_tensor, scale = bf16>
// CHECK-NEXT: %[[WD:.*]] = coat.quantize %[[WDOWN]] : tensor<4096x11008xbf16> -> !coat.qtensor<4096x11008xf8E4M3FN, per_tensor, scale = bf16>
// gate/up outputs (saved): 1x16 E4M3 from the GEMM epilogue.
// CHECK-NEXT: %[[GATE:.*]] = coat.linear forward %[[LN]], %[[WG]] : {{.*}} -> !coat.qtensor<4096x11008xf8E4M3FN, per_group<16>, scale = bf16>
// CHECK-NEXT: %[[UP:.*]] = coat.linear forward %[[LN]], %[[WU]] : {{.*}} -> !coat.qtensor<4096x11008xf8E4M3FN, per_group<16>, scale = bf16>
// SiLU output (saved): 1x16 E4M3.
// CHECK-NEXT: %[[ACT:.*]] = coat.silu %[[GATE]] : !coat.qtensor<4096x11008xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<4096x11008xf8E4M3FN, per_group<16>, scale = bf16>
// SwiGLU product (down input, saved transposed): per-tensor E4M3 + transposed.
// CHECK-NEXT: %[[M:.*]], %[[MT:.*]] = coat.swiglu_mul %[[ACT]], %[[UP]] : {{.*}} -> !coat.qtensor<4096x11008xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<11008x4096xf8E4M3FN, per_tensor, scale = bf16>
// CHECK-NEXT: %[[DOWN:.*]] = coat.linear forward %[[M]], %[[WD]] : {{.*}} -> tensor<4096x4096xbf16>
// Next norm's input: the residual add's 1x16 E4M3 copy.
// CHECK-NEXT: coat.residual_add %[[H]], %[[DOWN]] : {{.*}} -> tensor<4096x4096xbf16>, !coat.qtensor<4096x4096xf8E4M3FN, per_group<16>, scale = bf16>

// Output gradient into the down projection's backward: per-tensor E5M2 + transposed.
// CHECK-NEXT: %[[G:.*]] = coat.quantize %[[DOUT]] : tensor<4096x4096xbf16> -> !coat.qtensor<4096x4096xf8E5M2, per_tensor, scale = bf16>
// CHECK-NEXT: %[[GT:.*]] = coat.transpose %[[G]] : !coat.qtensor<4096x4096xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<4096x4096xf8E5M2, per_tensor, scale = bf16>
// CHECK-NEXT: %[[WDT:.*]] = coat.transpose %[[WD]] : {{.*}} -> !coat.qtensor<11008x4096xf8E4M3FN, per_tensor, scale = bf16>
// CHECK-NEXT: %[[DM:.*]] = coat.linear dgrad %[[G]], %[[WDT]] :
// CHECK-NEXT: coat.linear wgrad %[[GT]], %[[MT]] :
// Saved 1x16 activations feed the backward of SwiGLU and SiLU.
// CHECK-NEXT: %[[DACT:.*]], %[[DUP:.*]] = coat.swiglu_mul_grad %[[ACT]], %[[UP]], %[[DM]] :
// CHECK-NEXT: %[[DGATE:.*]] = coat.silu_grad %[[GATE]], %[[DACT]] :
// Activation gradients into the gate/up backward: per-tensor E5M2 + transposed.
// CHECK-NEXT: %[[DGQ:.*]] = coat.quantize %[[DGATE]] : tensor<4096x11008xbf16> -> !coat.qtensor<4096x11008xf8E5M2, per_tensor, scale = bf16>
// CHECK-NEXT: %[[DGT:.*]] = coat.transpose %[[DGQ]] : {{.*}} -> !coat.qtensor<11008x4096xf8E5M2, per_tensor, scale = bf16>
// CHECK-NEXT: %[[DUQ:.*]] = coat.quantize %[[DUP]] : tensor<4096x11008xbf16> -> !coat.qtensor<4096x11008xf8E5M2, per_tensor, scale = bf16>
// CHECK-NEXT: %[[DUT:.*]] = coat.transpose %[[DUQ]] : {{.*}} -> !coat.qtensor<11008x4096xf8E5M2, per_tensor, scale = bf16>
// CHECK-NEXT: %[[WGT:.*]] = coat.transpose %[[WG]]
// CHECK-NEXT: %[[WUT:.*]] = coat.transpose %[[WU]]
// CHECK-NEXT: coat.linear dgrad %[[DGQ]], %[[WGT]] :
// CHECK-NEXT: coat.linear wgrad %[[DGT]], %[[LNT]] :
// CHECK-NEXT: coat.linear dgrad %[[DUQ]], %[[WUT]] :
// CHECK-NEXT: coat.linear wgrad %[[DUT]], %[[LNT]] :
// CHECK-NEXT: %[[DLN:.*]] = coat.residual_add_grad
// CHECK-NEXT: coat.rmsnorm_grad %[[HQ]], %[[WN]], %[[RSTD]], %[[DLN]] :
// The gradient handed upstream: per-tensor E5M2.
// CHECK-NEXT: coat.residual_add_grad %[[DOUT]], {{.*}} -> tensor<4096x4096xbf16>, !coat.qtensor<4096x4096xf8E5M2, per_tensor, scale = bf16>
// Nothing is left unresolved.
// CHECK-NOT: coat.quantize_auto
// CHECK-NOT: !coat.unresolved

// Group scaling: every per-tensor tensor produced by a coat op takes its scale
// from maxima written by its producer: the norm output and the SwiGLU product
// (the ops now return their unquantized values, quantized by a separate
// coat.quantize with the reduced scale), the two activation gradients
// (silu_grad, swiglu_mul_grad) and the gradient handed upstream
// (residual_add_grad). Weights and the incoming gradient are block arguments
// and keep derived scales. No op reads a full tensor only to find its maximum.
// GS-LABEL: func.func @llama_mlp_block
// GS-NOT: coat.absmax {{.*}}per_tensor
// GS: %[[LN:.*]], %{{.*}} = coat.rmsnorm {{.*}} -> tensor<4096x4096xbf16>, tensor<4096xf32>
// GS-NEXT: %[[PLN:.*]] = coat.absmax %[[LN]], per_group<16> epilogue : tensor<4096x4096xbf16> -> tensor<4096x256xf32>
// GS-NEXT: coat.reduce_scales %[[PLN]]
// GS: %[[SLN:.*]] = arith.truncf
// GS-NEXT: %[[LNQ:.*]] = coat.quantize %[[LN]] scale %[[SLN]] : tensor<4096x4096xbf16>, tensor<bf16> -> !coat.qtensor<4096x4096xf8E4M3FN, per_tensor, scale = bf16>
// GS-NEXT: coat.transpose %[[LNQ]]
// GS: %[[M:.*]] = coat.swiglu_mul {{.*}} -> tensor<4096x11008xbf16>
// GS-NEXT: coat.absmax %[[M]], per_group<16> epilogue : tensor<4096x11008xbf16> -> tensor<4096x688xf32>
// GS: %[[DACT:.*]], %[[DUP:.*]] = coat.swiglu_mul_grad
// GS-NEXT: %[[PUP:.*]] = coat.absmax %[[DUP]], per_group<16> epilogue : tensor<4096x11008xbf16> -> tensor<4096x688xf32>
// GS-NEXT: %[[DGATE:.*]] = coat.silu_grad
// GS-NEXT: %[[PGATE:.*]] = coat.absmax %[[DGATE]], per_group<16> epilogue : tensor<4096x11008xbf16> -> tensor<4096x688xf32>
// GS-NEXT: coat.reduce_scales %[[PGATE]] : tensor<4096x688xf32> -> tensor<f32>
// GS: %[[SG:.*]] = arith.truncf
// GS-NEXT: coat.quantize %[[DGATE]] scale %[[SG]] : tensor<4096x11008xbf16>, tensor<bf16> -> !coat.qtensor<4096x11008xf8E5M2, per_tensor, scale = bf16>
// GS: coat.reduce_scales %[[PUP]]
// GS: %[[SU:.*]] = arith.truncf
// GS-NEXT: coat.quantize %[[DUP]] scale %[[SU]] : tensor<4096x11008xbf16>, tensor<bf16> -> !coat.qtensor<4096x11008xf8E5M2, per_tensor, scale = bf16>
// GS: coat.rmsnorm_grad
// GS-NEXT: %[[DH:.*]] = coat.residual_add_grad {{.*}} -> tensor<4096x4096xbf16>{{$}}
// GS-NEXT: coat.absmax %[[DH]], per_group<16> epilogue
// GS: coat.quantize %[[DH]] scale {{.*}} -> !coat.qtensor<4096x4096xf8E5M2, per_tensor, scale = bf16>
// GS-NOT: coat.absmax
