// RUN: coat-opt %s -coat-report-saved-activations -o /dev/null 2>&1 | FileCheck %s

// %q is computed before the gradient arrives and read after: saved (codes +
// bf16 group scales). %d is used before only, and returned: not saved. The
// weight's FP8 copy is saved too, but counted as a weight copy. In BF16 the
// saved activation is %x itself, once. The weight is frozen: the function
// computes no gradient for it.
// CHECK: remark: saved for the backward: '!coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>', 576 bytes
// CHECK-NEXT: %q = coat.quantize
// CHECK: remark: saved for the backward: '!coat.qtensor<32x8xf8E4M3FN, per_tensor>', 260 bytes (weight copy)
// CHECK-NOT: saved for the backward
// CHECK: remark: saved activations: 576 bytes, BF16 1024 bytes (0.56U vs BF16 1.00U, U = 1024 bytes); weight copies kept for the backward: 260 bytes
func.func @f(%x: tensor<16x32xbf16>, %w: tensor<8x32xbf16> {coat.weight, coat.frozen},
             %g: tensor<16x32xbf16> {coat.gradient}, %gq: !coat.qtensor<16x8xf8E5M2, per_tensor> {coat.gradient})
    -> (tensor<16x32xbf16>, tensor<16x32xbf16>, tensor<16x32xbf16>) {
  %q = coat.quantize %x : tensor<16x32xbf16> -> !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>
  %wq = coat.quantize %w : tensor<8x32xbf16> -> !coat.qtensor<8x32xf8E4M3FN, per_tensor>
  %d = coat.dequantize %q : !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<16x32xbf16>
  %dx = coat.silu_grad %q, %g : !coat.qtensor<16x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<16x32xbf16> -> tensor<16x32xbf16>
  %wt = coat.transpose %wq : !coat.qtensor<8x32xf8E4M3FN, per_tensor> -> !coat.qtensor<32x8xf8E4M3FN, per_tensor>
  %s = coat.residual_add_grad %g, %dx : tensor<16x32xbf16>, tensor<16x32xbf16> -> tensor<16x32xbf16>
  %dl = coat.linear dgrad %gq, %wt : !coat.qtensor<16x8xf8E5M2, per_tensor>, !coat.qtensor<32x8xf8E4M3FN, per_tensor> -> tensor<16x32xbf16>
  %z = coat.residual_add_grad %s, %dl : tensor<16x32xbf16>, tensor<16x32xbf16> -> tensor<16x32xbf16>
  return %z, %d, %dx : tensor<16x32xbf16>, tensor<16x32xbf16>, tensor<16x32xbf16>
}
