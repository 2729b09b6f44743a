// RUN: coat-opt %s -coat-mixed-granularity -split-input-file -verify-diagnostics | FileCheck %s
// RUN: coat-opt %s -coat-mixed-granularity=group-size=32 -split-input-file 2>/dev/null | FileCheck %s --check-prefix=G32
// RUN: coat-opt %s -coat-mixed-granularity=backward-format=e4m3 -split-input-file 2>/dev/null | FileCheck %s --check-prefix=BWD43
// RUN: not coat-opt %s -coat-mixed-granularity=forward-format=e3m4 -split-input-file 2>&1 | FileCheck %s --check-prefix=BADFMT
// RUN: not coat-opt %s -coat-mixed-granularity=backward-format=bf16 -split-input-file 2>&1 | FileCheck %s --check-prefix=BADBWD
// RUN: not coat-opt %s -coat-mixed-granularity=group-size=0 -split-input-file 2>&1 | FileCheck %s --check-prefix=BADG
// RUN: not coat-opt %s -coat-mixed-granularity=forward-format=e5m2 -split-input-file 2>&1 | FileCheck %s --check-prefix=FWD52

// BADFMT: coat-mixed-granularity: unknown forward-format 'e3m4' (expected 'e4m3' or 'e5m2')
// BADBWD: coat-mixed-granularity: unknown backward-format 'bf16' (expected 'e4m3' or 'e5m2')
// BADG: coat-mixed-granularity: group-size must be positive, got 0
// Non-linear layers take E4M3 only, so forward-format=e5m2 cannot serve them.
// FWD52: error: cannot choose a format: coat.rmsnorm needs f8E4M3FN but the forward format is f8E5M2

// Input of a non-linear layer (and saved for its backward): 1x16 E4M3, one
// quantize, read by both.
// CHECK-LABEL: func.func @norm_input
// CHECK-SAME: (%[[X:[^:]*]]: tensor<128x256xbf16>
// CHECK-NEXT: %[[Q:.*]] = coat.quantize %[[X]] : tensor<128x256xbf16> -> !coat.qtensor<128x256xf8E4M3FN, per_group<16>, scale = bf16>
// CHECK-NEXT: coat.rmsnorm %[[Q]], {{.*}} : !coat.qtensor<128x256xf8E4M3FN, per_group<16>, scale = bf16>, tensor<256xbf16>
// CHECK-NEXT: coat.rmsnorm_grad %[[Q]], {{.*}} : !coat.qtensor<128x256xf8E4M3FN, per_group<16>, scale = bf16>,
// CHECK-NOT: coat.quantize
// G32-LABEL: func.func @norm_input
// G32: coat.quantize {{.*}} -> !coat.qtensor<128x256xf8E4M3FN, per_group<32>, scale = bf16>
// BWD43-LABEL: func.func @norm_input
// BWD43: coat.quantize {{.*}} -> !coat.qtensor<128x256xf8E4M3FN, per_group<16>, scale = bf16>
func.func @norm_input(%x: tensor<128x256xbf16>, %w: tensor<256xbf16>, %dy: tensor<128x256xbf16>)
    -> (!coat.qtensor<128x256xf8E4M3FN, per_tensor, scale = bf16>, tensor<128x256xbf16>) {
  // expected-remark @+1 {{f8E4M3FN 1x16 (per_group<16>); 1xG input of non-linear coat.rmsnorm, coat.rmsnorm_grad (saved input); f8E4M3FN: read as a forward tensor by coat.rmsnorm}}
  %u = coat.quantize_auto %x : tensor<128x256xbf16> -> !coat.unresolved<128x256xbf16>
  %y, %rstd = coat.rmsnorm %u, %w eps = 1.000000e-05 : !coat.unresolved<128x256xbf16>, tensor<256xbf16>
      -> !coat.qtensor<128x256xf8E4M3FN, per_tensor, scale = bf16>, tensor<128xf32>
  %dx, %dw = coat.rmsnorm_grad %u, %w, %rstd, %dy
      : !coat.unresolved<128x256xbf16>, tensor<256xbf16>, tensor<128xf32>, tensor<128x256xbf16>
      -> tensor<128x256xbf16>, tensor<256xbf16>
  return %y, %dx : !coat.qtensor<128x256xf8E4M3FN, per_tensor, scale = bf16>, tensor<128x256xbf16>
}

// -----

// A weight: per-tensor E4M3 for the forward GEMM and, transposed, for dgrad.
// The transpose moves the FP8 copy; nothing re-reads the weight.
// CHECK-LABEL: func.func @weight
// CHECK-SAME: (%[[X:arg0]]: {{.*}}, %[[W:arg1]]: tensor<64x256xbf16>, %[[DY:arg2]]:
// CHECK-NEXT: %[[WQ:.*]] = coat.quantize %[[W]] : tensor<64x256xbf16> -> !coat.qtensor<64x256xf8E4M3FN, per_tensor, scale = bf16>
// CHECK-NEXT: coat.linear forward %[[X]], %[[WQ]]
// CHECK-NEXT: %[[WT:.*]] = coat.transpose %[[WQ]] : !coat.qtensor<64x256xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<256x64xf8E4M3FN, per_tensor, scale = bf16>
// CHECK-NEXT: coat.linear dgrad %[[DY]], %[[WT]]
func.func @weight(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>, %w: tensor<64x256xbf16>,
                  %dy: !coat.qtensor<128x64xf8E5M2, per_tensor>)
    -> (tensor<128x64xbf16>, tensor<128x256xbf16>) {
  // expected-remark @+1 {{f8E4M3FN per_tensor + transposed copy; per-tensor GEMM operand of coat.linear forward rhs, coat.linear dgrad rhs (transposed); f8E4M3FN: read as a forward tensor by coat.linear forward rhs}}
  %wq = coat.quantize_auto %w : tensor<64x256xbf16> -> !coat.unresolved<64x256xbf16>
  %y = coat.linear forward %x, %wq : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.unresolved<64x256xbf16> -> tensor<128x64xbf16>
  %wt = coat.transpose %wq : !coat.unresolved<64x256xbf16> -> !coat.unresolved<256x64xbf16>
  %dx = coat.linear dgrad %dy, %wt : !coat.qtensor<128x64xf8E5M2, per_tensor>, !coat.unresolved<256x64xbf16> -> tensor<128x256xbf16>
  return %y, %dx : tensor<128x64xbf16>, tensor<128x256xbf16>
}

// -----

// An output gradient: per-tensor E5M2 for dgrad, and its transpose for wgrad.
// CHECK-LABEL: func.func @output_gradient
// CHECK: %[[G:.*]] = coat.quantize %{{.*}} : tensor<128x64xbf16> -> !coat.qtensor<128x64xf8E5M2, per_tensor, scale = bf16>
// CHECK-NEXT: %[[GT:.*]] = coat.transpose %[[G]] : !coat.qtensor<128x64xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<64x128xf8E5M2, per_tensor, scale = bf16>
// CHECK-NEXT: coat.linear dgrad %[[G]],
// CHECK-NEXT: coat.linear wgrad %[[GT]],
// BWD43-LABEL: func.func @output_gradient
// BWD43: coat.quantize {{.*}} -> !coat.qtensor<128x64xf8E4M3FN, per_tensor, scale = bf16>
// BWD43-NEXT: coat.transpose {{.*}} -> !coat.qtensor<64x128xf8E4M3FN, per_tensor, scale = bf16>
func.func @output_gradient(%dy: tensor<128x64xbf16>, %wt: !coat.qtensor<256x64xf8E4M3FN, per_tensor>,
                           %xt: !coat.qtensor<256x128xf8E4M3FN, per_tensor>)
    -> (tensor<128x256xbf16>, tensor<64x256xbf16>) {
  // expected-remark @+1 {{f8E5M2 per_tensor + transposed copy; per-tensor GEMM operand of coat.linear dgrad lhs, coat.linear wgrad lhs (transposed); f8E5M2: read as a gradient by coat.linear dgrad lhs}}
  %g = coat.quantize_auto %dy : tensor<128x64xbf16> -> !coat.unresolved<128x64xbf16>
  %gt = coat.transpose %g : !coat.unresolved<128x64xbf16> -> !coat.unresolved<64x128xbf16>
  %dx = coat.linear dgrad %g, %wt : !coat.unresolved<128x64xbf16>, !coat.qtensor<256x64xf8E4M3FN, per_tensor> -> tensor<128x256xbf16>
  %dw = coat.linear wgrad %gt, %xt : !coat.unresolved<64x128xbf16>, !coat.qtensor<256x128xf8E4M3FN, per_tensor> -> tensor<64x256xbf16>
  return %dx, %dw : tensor<128x256xbf16>, tensor<64x256xbf16>
}

// -----

// Both kinds of consumer: one quantize reads the high-precision tensor (1x16
// for the norm), and the per-tensor GEMM operand is re-quantized from that
// FP8 copy rather than from %x.
// CHECK-LABEL: func.func @both_kinds
// CHECK-SAME: (%[[X:[^:]*]]: tensor<128x256xbf16>
// CHECK-NEXT: %[[G:.*]] = coat.quantize %[[X]] : tensor<128x256xbf16> -> !coat.qtensor<128x256xf8E4M3FN, per_group<16>, scale = bf16>
// CHECK-NEXT: %[[T:.*]] = coat.requantize %[[G]] : !coat.qtensor<128x256xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<128x256xf8E4M3FN, per_tensor, scale = bf16>
// CHECK-NEXT: coat.rmsnorm %[[G]],
// CHECK-NEXT: coat.linear forward %[[T]],
// CHECK-NOT: coat.quantize
// G32-LABEL: func.func @both_kinds
// G32: coat.quantize {{.*}} -> !coat.qtensor<128x256xf8E4M3FN, per_group<32>, scale = bf16>
// G32-NEXT: coat.requantize {{.*}} : !coat.qtensor<128x256xf8E4M3FN, per_group<32>, scale = bf16> -> !coat.qtensor<128x256xf8E4M3FN, per_tensor, scale = bf16>
func.func @both_kinds(%x: tensor<128x256xbf16>, %w: tensor<256xbf16>,
                      %wq: !coat.qtensor<64x256xf8E4M3FN, per_tensor>)
    -> (!coat.qtensor<128x256xf8E4M3FN, per_tensor, scale = bf16>, tensor<128x64xbf16>) {
  // expected-remark @+1 {{f8E4M3FN 1x16 (per_group<16>) + per_tensor, the per_tensor copy re-quantized from the 1x16 one (one read of the high-precision tensor); 1xG input of non-linear coat.rmsnorm; per-tensor GEMM operand of coat.linear forward lhs; f8E4M3FN: read as a forward tensor by coat.rmsnorm}}
  %u = coat.quantize_auto %x : tensor<128x256xbf16> -> !coat.unresolved<128x256xbf16>
  %y, %rstd = coat.rmsnorm %u, %w eps = 1.000000e-05 : !coat.unresolved<128x256xbf16>, tensor<256xbf16>
      -> !coat.qtensor<128x256xf8E4M3FN, per_tensor, scale = bf16>, tensor<128xf32>
  %o = coat.linear forward %u, %wq : !coat.unresolved<128x256xbf16>, !coat.qtensor<64x256xf8E4M3FN, per_tensor> -> tensor<128x64xbf16>
  return %y, %o : !coat.qtensor<128x256xf8E4M3FN, per_tensor, scale = bf16>, tensor<128x64xbf16>
}

// -----

// A 1x16 E4M3 copy of a forward GEMM's output comes out of the GEMM epilogue
// (COAT's quantized gate/up projections); coat.silu keeps its input type.
// With group-size=32 the GEMM cannot (its epilogue groups are 1x16): a
// separate quantize, and silu follows the new type.
// CHECK-LABEL: func.func @gemm_epilogue
// CHECK-NEXT: %[[Y:.*]] = coat.linear forward %{{.*}}, %{{.*}} : {{.*}} -> !coat.qtensor<128x64xf8E4M3FN, per_group<16>, scale = bf16>
// CHECK-NEXT: coat.silu %[[Y]] : !coat.qtensor<128x64xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<128x64xf8E4M3FN, per_group<16>, scale = bf16>
// CHECK-NOT: coat.quantize
// G32-LABEL: func.func @gemm_epilogue
// G32-NEXT: %[[Y:.*]] = coat.linear forward {{.*}} -> tensor<128x64xbf16>
// G32-NEXT: %[[Q:.*]] = coat.quantize %[[Y]] : tensor<128x64xbf16> -> !coat.qtensor<128x64xf8E4M3FN, per_group<32>, scale = bf16>
// G32-NEXT: coat.silu %[[Q]] : !coat.qtensor<128x64xf8E4M3FN, per_group<32>, scale = bf16> -> !coat.qtensor<128x64xf8E4M3FN, per_group<32>, scale = bf16>
func.func @gemm_epilogue(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
                         %w: !coat.qtensor<64x256xf8E4M3FN, per_tensor>,
                         %w2: !coat.qtensor<32x64xf8E4M3FN, per_tensor>) -> tensor<128x32xbf16> {
  %y = coat.linear forward %x, %w : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<64x256xf8E4M3FN, per_tensor> -> tensor<128x64xbf16>
  // expected-remark @+1 {{f8E4M3FN 1x16 (per_group<16>) from the epilogue of the producing coat.linear forward; 1xG input of non-linear coat.silu}}
  %u = coat.quantize_auto %y : tensor<128x64xbf16> -> !coat.unresolved<128x64xbf16>
  %s = coat.silu %u : !coat.unresolved<128x64xbf16> -> !coat.qtensor<128x64xf8E4M3FN, per_group<16>, scale = bf16>
  %g, %gt = coat.gelu %s : !coat.qtensor<128x64xf8E4M3FN, per_group<16>, scale = bf16>
      -> !coat.qtensor<128x64xf8E4M3FN, per_tensor>, !coat.qtensor<64x128xf8E4M3FN, per_tensor>
  %o = coat.linear forward %g, %w2 : !coat.qtensor<128x64xf8E4M3FN, per_tensor>, !coat.qtensor<32x64xf8E4M3FN, per_tensor> -> tensor<128x32xbf16>
  return %o : tensor<128x32xbf16>
}

// -----

// The GEMM output is also returned: quantizing in the epilogue would lose the
// BF16 result, so it is a separate quantize.
// CHECK-LABEL: func.func @gemm_output_escapes
// CHECK: coat.linear forward {{.*}} -> tensor<128x64xbf16>
// CHECK-NEXT: coat.quantize {{.*}} -> !coat.qtensor<128x64xf8E4M3FN, per_group<16>, scale = bf16>
func.func @gemm_output_escapes(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
                               %w: !coat.qtensor<64x256xf8E4M3FN, per_tensor>)
    -> (tensor<128x64xbf16>, !coat.qtensor<128x64xf8E4M3FN, per_tensor>) {
  %y = coat.linear forward %x, %w : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<64x256xf8E4M3FN, per_tensor> -> tensor<128x64xbf16>
  // expected-remark @+1 {{f8E4M3FN 1x16 (per_group<16>); 1xG input of non-linear coat.gelu}}
  %u = coat.quantize_auto %y : tensor<128x64xbf16> -> !coat.unresolved<128x64xbf16>
  %g = coat.gelu %u : !coat.unresolved<128x64xbf16> -> !coat.qtensor<128x64xf8E4M3FN, per_tensor>
  return %y, %g : tensor<128x64xbf16>, !coat.qtensor<128x64xf8E4M3FN, per_tensor>
}

// -----

// Consumers that read it as a forward tensor (the forward GEMM, which needs
// E4M3) outrank one that only suggests a gradient (dgrad lhs accepts E4M3).
// CHECK-LABEL: func.func @firm_beats_hint
// CHECK: coat.quantize {{.*}} -> !coat.qtensor<128x64xf8E4M3FN, per_tensor, scale = bf16>
func.func @firm_beats_hint(%a: tensor<128x64xbf16>, %w: !coat.qtensor<32x64xf8E4M3FN, per_tensor>,
                           %wt: !coat.qtensor<256x64xf8E4M3FN, per_tensor>)
    -> (tensor<128x32xbf16>, tensor<128x256xbf16>) {
  // expected-remark @+1 {{f8E4M3FN per_tensor; per-tensor GEMM operand of coat.linear forward lhs, coat.linear dgrad lhs; f8E4M3FN: read as a forward tensor by coat.linear forward lhs}}
  %u = coat.quantize_auto %a : tensor<128x64xbf16> -> !coat.unresolved<128x64xbf16>
  %y = coat.linear forward %u, %w : !coat.unresolved<128x64xbf16>, !coat.qtensor<32x64xf8E4M3FN, per_tensor> -> tensor<128x32xbf16>
  %d = coat.linear dgrad %u, %wt : !coat.unresolved<128x64xbf16>, !coat.qtensor<256x64xf8E4M3FN, per_tensor> -> tensor<128x256xbf16>
  return %y, %d : tensor<128x32xbf16>, tensor<128x256xbf16>
}

// -----

// 'direction' settles what the consumers leave open: dgrad reads its lhs as
// a gradient, wgrad its rhs as an activation, and both accept either format.
// CHECK-LABEL: func.func @explicit_direction
// CHECK: coat.quantize {{.*}} -> !coat.qtensor<128x64xf8E5M2, per_tensor, scale = bf16>
func.func @explicit_direction(%a: tensor<128x64xbf16>, %wt: !coat.qtensor<256x64xf8E4M3FN, per_tensor>,
                              %l: !coat.qtensor<32x64xf8E4M3FN, per_tensor>)
    -> (tensor<128x256xbf16>, tensor<32x128xbf16>) {
  // expected-remark @+1 {{f8E5M2 per_tensor; per-tensor GEMM operand of coat.linear dgrad lhs, coat.linear wgrad rhs; f8E5M2: as given by 'direction'}}
  %u = coat.quantize_auto %a {direction = #coat.direction<backward>} : tensor<128x64xbf16> -> !coat.unresolved<128x64xbf16>
  %d = coat.linear dgrad %u, %wt : !coat.unresolved<128x64xbf16>, !coat.qtensor<256x64xf8E4M3FN, per_tensor> -> tensor<128x256xbf16>
  %w = coat.linear wgrad %l, %u : !coat.qtensor<32x64xf8E4M3FN, per_tensor>, !coat.unresolved<128x64xbf16> -> tensor<32x128xbf16>
  return %d, %w : tensor<128x256xbf16>, tensor<32x128xbf16>
}
