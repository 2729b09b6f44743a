// RUN: coat-opt %s -coat-report-saved-activations -o /dev/null 2>&1 | FileCheck %s
// RUN: coat-opt %s --pass-pipeline='builtin.module(func.func(coat-report-saved-activations{tokens=48}))' -o /dev/null 2>&1 | FileCheck %s --check-prefix=TOKENS
// RUN: not coat-opt %s --pass-pipeline='builtin.module(func.func(coat-report-saved-activations{tokens=-1}))' -o /dev/null 2>&1 | FileCheck %s --check-prefix=NEGATIVE

// A saved value without a static shape has no byte count: it is named, not
// silently counted as zero.
// CHECK: warning: saved value of dynamic shape '!coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>' is not counted (tokens=N counts it)
// CHECK: remark: saved activations: 0 bytes

// With tokens=48 the ? is 48: 48x32 codes (1536 bytes) and 48x2 bf16 group
// scales (192 bytes); the same tensor in BF16 is 3072 bytes, which is also
// U (the first activation argument in BF16).
// TOKENS-NOT: warning
// TOKENS: remark: saved for the backward: '!coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>', 1728 bytes
// TOKENS: remark: saved activations: 1728 bytes, BF16 3072 bytes (0.56U vs BF16 1.00U, U = 3072 bytes); weight copies kept for the backward: 0 bytes

// NEGATIVE: error: coat-report-saved-activations: tokens must be positive (or 0: dynamic shapes not counted), got -1
func.func @f(%x: tensor<?x32xbf16>, %g: tensor<?x32xbf16> {coat.gradient}) -> tensor<?x32xbf16> {
  %q = coat.quantize %x : tensor<?x32xbf16> -> !coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>
  %dx = coat.silu_grad %q, %g : !coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?x32xbf16> -> tensor<?x32xbf16>
  return %dx : tensor<?x32xbf16>
}
