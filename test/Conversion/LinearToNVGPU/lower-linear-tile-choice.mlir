// Tiles follow the problem when the options leave them unset: a static
// M >= 8192 gets 256x128 tiles, anything else (and explicit options) keeps
// 128x256 or what was asked.
// RUN: coat-opt %s -coat-lower-linear | FileCheck %s
// RUN: coat-opt %s -coat-lower-linear=tile-n=192 | FileCheck %s --check-prefix=EXPLICIT

// CHECK-LABEL: gpu.func @tall
// CHECK-SAME: tile = [256, 128, 128]
// CHECK-LABEL: gpu.func @square
// CHECK-SAME: tile = [128, 256, 128]
// CHECK-LABEL: gpu.func @dynamic
// CHECK-SAME: tile = [128, 256, 128]
// EXPLICIT-LABEL: gpu.func @tall
// EXPLICIT-SAME: tile = [128, 192, 128]

func.func @tall(%a: !coat.qtensor<8192x4096xf8E4M3FN, per_tensor>,
                %b: !coat.qtensor<11008x4096xf8E4M3FN, per_tensor>) -> tensor<8192x11008xbf16> {
  %y = coat.linear forward %a, %b : !coat.qtensor<8192x4096xf8E4M3FN, per_tensor>,
      !coat.qtensor<11008x4096xf8E4M3FN, per_tensor> -> tensor<8192x11008xbf16>
  return %y : tensor<8192x11008xbf16>
}

func.func @square(%a: !coat.qtensor<4096x4096xf8E4M3FN, per_tensor>,
                  %b: !coat.qtensor<4096x4096xf8E4M3FN, per_tensor>) -> tensor<4096x4096xbf16> {
  %y = coat.linear forward %a, %b : !coat.qtensor<4096x4096xf8E4M3FN, per_tensor>,
      !coat.qtensor<4096x4096xf8E4M3FN, per_tensor> -> tensor<4096x4096xbf16>
  return %y : tensor<4096x4096xbf16>
}

func.func @dynamic(%a: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                   %b: !coat.qtensor<?x?xf8E4M3FN, per_tensor>) -> tensor<?x?xbf16> {
  %y = coat.linear forward %a, %b : !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
      !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}
