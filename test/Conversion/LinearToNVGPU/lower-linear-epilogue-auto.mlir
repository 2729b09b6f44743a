// epilogue=auto (the default) picks each spec's epilogue: TMA stores where
// the result rows are statically 16-byte aligned, staged stores elsewhere
// (any N, FP8 codes, block-scaled kernels).
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear)' | FileCheck %s
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-linear{epilogue=direct})' | FileCheck %s --check-prefix=DIRECT

// 4096 bf16 columns: 8 KiB rows, `out` a tensormap.
// CHECK-LABEL: gpu.func @static_n(
// CHECK-SAME: kind = "tensormap", name = "out"
// CHECK-SAME: epilogue = "tma"
// A dynamic N may be anything at launch.
// CHECK-LABEL: gpu.func @dynamic_n(
// CHECK-NOT: tensormap", name = "out"
// CHECK-SAME: epilogue = "staged"
// 1004 bf16 columns: 2008-byte rows, no TMA stride.
// CHECK-LABEL: gpu.func @unaligned_n(
// CHECK-NOT: tensormap", name = "out"
// CHECK-SAME: epilogue = "staged"
// CHECK-LABEL: gpu.func @codes(
// CHECK-SAME: epilogue = "staged"
// CHECK-LABEL: gpu.func @block(
// CHECK-SAME: epilogue = "staged"
// An explicit epilogue applies to every spec.
// DIRECT-COUNT-5: epilogue = "direct"

func.func @static_n(%x: !coat.qtensor<?x4096xf8E4M3FN, per_tensor>,
                    %w: !coat.qtensor<4096x4096xf8E4M3FN, per_tensor>) -> tensor<?x4096xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x4096xf8E4M3FN, per_tensor>,
           !coat.qtensor<4096x4096xf8E4M3FN, per_tensor> -> tensor<?x4096xbf16>
  return %y : tensor<?x4096xbf16>
}

func.func @dynamic_n(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                     %w: !coat.qtensor<?x?xf8E4M3FN, per_tensor>) -> tensor<?x?xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
           !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}

func.func @unaligned_n(%x: !coat.qtensor<?x4096xf8E4M3FN, per_tensor>,
                       %w: !coat.qtensor<1004x4096xf8E4M3FN, per_tensor>) -> tensor<?x1004xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x4096xf8E4M3FN, per_tensor>,
           !coat.qtensor<1004x4096xf8E4M3FN, per_tensor> -> tensor<?x1004xbf16>
  return %y : tensor<?x1004xbf16>
}

func.func @codes(%x: !coat.qtensor<?x4096xf8E4M3FN, per_tensor>,
                 %w: !coat.qtensor<4096x4096xf8E4M3FN, per_tensor>)
    -> !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x4096xf8E4M3FN, per_tensor>,
           !coat.qtensor<4096x4096xf8E4M3FN, per_tensor>
           -> !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16>
  return %y : !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16>
}

func.func @block(%x: !coat.qtensor<?x4096xf8E4M3FN, per_group<128>>,
                 %w: !coat.qtensor<4096x4096xf8E4M3FN, per_block<128x128>>) -> tensor<?x4096xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x4096xf8E4M3FN, per_group<128>>,
           !coat.qtensor<4096x4096xf8E4M3FN, per_block<128x128>> -> tensor<?x4096xbf16>
  return %y : tensor<?x4096xbf16>
}
