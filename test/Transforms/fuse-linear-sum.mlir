// RUN: coat-opt %s -split-input-file -coat-fuse-linear-sum | FileCheck %s
// RUN: coat-opt %s -split-input-file -coat-fuse-linear-sum -coat-outline-kernels | FileCheck %s --check-prefix=OUTLINED

!dy = !coat.qtensor<?x512xf8E5M2, per_tensor, scale = bf16>
!wt = !coat.qtensor<256x512xf8E4M3FN, per_tensor, scale = bf16>

// The gate and up dgrads of a SwiGLU MLP: the second GEMM adds the first's
// result in its epilogue, and no kernel adds them.
// CHECK-LABEL: func.func @gate_up(
// CHECK-NEXT: %[[A:.*]] = coat.linear dgrad %arg0, %arg1 :
// CHECK-NEXT: %[[S:.*]] = coat.linear dgrad %arg2, %arg3 addend(%[[A]] : tensor<?x256xbf16>) :
// CHECK-NEXT: return %[[S]]
// OUTLINED-LABEL: func.func @gate_up_k1_linear_dgrad(
// OUTLINED-SAME: %arg2: tensor<?x256xbf16>) -> tensor<?x256xbf16>
// OUTLINED-LABEL: func.func @gate_up(
// OUTLINED-NEXT: %[[A:.*]] = call @gate_up_k0_linear_dgrad(%arg0, %arg1)
// OUTLINED-NEXT: %[[S:.*]] = call @gate_up_k1_linear_dgrad(%arg2, %arg3, %[[A]])
// OUTLINED-NEXT: return %[[S]]
func.func @gate_up(%dg: !dy, %wg: !wt, %du: !dy, %wu: !wt) -> tensor<?x256xbf16> {
  %a = coat.linear dgrad %dg, %wg : !dy, !wt -> tensor<?x256xbf16>
  %b = coat.linear dgrad %du, %wu : !dy, !wt -> tensor<?x256xbf16>
  %s = coat.residual_add_grad %a, %b : tensor<?x256xbf16>, tensor<?x256xbf16> -> tensor<?x256xbf16>
  return %s : tensor<?x256xbf16>
}

// -----

!dy = !coat.qtensor<?x512xf8E5M2, per_tensor, scale = bf16>
!wt = !coat.qtensor<256x512xf8E4M3FN, per_tensor, scale = bf16>

// A GEMM and an argument, in either order: the GEMM takes the argument.
// CHECK-LABEL: func.func @gemm_and_argument(
// CHECK-NEXT: %[[S:.*]] = coat.linear dgrad %arg0, %arg1 addend(%arg2 : tensor<?x256xbf16>) :
// CHECK-NEXT: return %[[S]]
func.func @gemm_and_argument(%dg: !dy, %wg: !wt, %x: tensor<?x256xbf16>) -> tensor<?x256xbf16> {
  %a = coat.linear dgrad %dg, %wg : !dy, !wt -> tensor<?x256xbf16>
  %s = coat.residual_add_grad %a, %x : tensor<?x256xbf16>, tensor<?x256xbf16> -> tensor<?x256xbf16>
  return %s : tensor<?x256xbf16>
}

// -----

!dy = !coat.qtensor<?x512xf8E5M2, per_tensor, scale = bf16>
!wt = !coat.qtensor<256x512xf8E4M3FN, per_tensor, scale = bf16>

// Not fused: a GEMM result read elsewhere too (it must be stored); the
// other operand computed after the GEMM (its kernel has not run yet); a
// sum whose maxima a producer's epilogue writes; a sum with an FP8 copy.
// CHECK-LABEL: func.func @unfused(
// CHECK-NOT: addend
// CHECK-COUNT-5: coat.residual_add_grad
// CHECK-NOT: addend
func.func @unfused(%dg: !dy, %wg: !wt, %x: tensor<?x256xbf16>)
    -> (tensor<?x256xbf16>, tensor<?x256xbf16>, tensor<?x256xbf16>, tensor<?x16xf32>,
        !coat.qtensor<?x256xf8E5M2, per_tensor, scale = bf16>) {
  %a = coat.linear dgrad %dg, %wg : !dy, !wt -> tensor<?x256xbf16>
  %s1 = coat.residual_add_grad %a, %x : tensor<?x256xbf16>, tensor<?x256xbf16> -> tensor<?x256xbf16>
  %b = coat.linear dgrad %dg, %wg : !dy, !wt -> tensor<?x256xbf16>
  %later = coat.residual_add_grad %x, %x : tensor<?x256xbf16>, tensor<?x256xbf16> -> tensor<?x256xbf16>
  %s2 = coat.residual_add_grad %b, %later : tensor<?x256xbf16>, tensor<?x256xbf16> -> tensor<?x256xbf16>
  %c = coat.linear dgrad %dg, %wg : !dy, !wt -> tensor<?x256xbf16>
  %s3 = coat.residual_add_grad %c, %x : tensor<?x256xbf16>, tensor<?x256xbf16> -> tensor<?x256xbf16>
  %m = coat.absmax %s3, per_group<16> epilogue : tensor<?x256xbf16> -> tensor<?x16xf32>
  %d = coat.linear dgrad %dg, %wg : !dy, !wt -> tensor<?x256xbf16>
  %s4, %q = coat.residual_add_grad %d, %x : tensor<?x256xbf16>, tensor<?x256xbf16>
      -> tensor<?x256xbf16>, !coat.qtensor<?x256xf8E5M2, per_tensor, scale = bf16>
  return %s1, %a, %s2, %m, %q : tensor<?x256xbf16>, tensor<?x256xbf16>, tensor<?x256xbf16>,
      tensor<?x16xf32>, !coat.qtensor<?x256xf8E5M2, per_tensor, scale = bf16>
}
