// RUN: coat-opt %s -coat-report-saved-activations -o /dev/null 2>&1 | FileCheck %s

// A saved value without a static shape has no byte count: it is named, not
// silently counted as zero.
// CHECK: warning: saved value of dynamic shape '!coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>' is not counted
// CHECK: remark: saved activations: 0 bytes
func.func @f(%x: tensor<?x32xbf16>, %g: tensor<?x32xbf16> {coat.gradient}) -> tensor<?x32xbf16> {
  %q = coat.quantize %x : tensor<?x32xbf16> -> !coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>
  %dx = coat.silu_grad %q, %g : !coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?x32xbf16> -> tensor<?x32xbf16>
  return %dx : tensor<?x32xbf16>
}
