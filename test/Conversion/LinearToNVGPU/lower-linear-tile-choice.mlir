// Tiles follow the problem when the options leave them unset: a static
// M >= 8192 gets 256x128 tiles; a static M and N (a weight gradient, the
// tokens being K) whose 128x256 tiles leave multiprocessors idle gets
// narrower ones, with a remark; anything else (and explicit options) keeps
// 128x256 or what was asked.
// RUN: coat-opt %s -coat-lower-linear 2>&1 | FileCheck %s
// RUN: coat-opt %s -coat-lower-linear=tile-n=192 2>&1 | FileCheck %s --check-prefix=EXPLICIT
// RUN: coat-opt %s -coat-lower-linear=multiprocessors=32 2>&1 | FileCheck %s --check-prefix=FEW
// RUN: not coat-opt %s -coat-lower-linear=multiprocessors=0 2>&1 | FileCheck %s --check-prefix=INVALID

// CHECK: remark: coat-lower-linear: 64x128 tiles: 1024 x 1024 makes 128 of them for 132 multiprocessors, 32 of 128x256
// CHECK: remark: coat-lower-linear: 128x192 tiles: 2560 x 2048 makes 220 of them for 132 multiprocessors, 160 of 128x256
// CHECK-NOT: remark
// CHECK-LABEL: gpu.func @tall
// CHECK-SAME: tile = [256, 128, 128]
// CHECK-SAME: warpgroups = 2
// CHECK-LABEL: gpu.func @square
// CHECK-SAME: tile = [128, 256, 128]
// CHECK-LABEL: gpu.func @dynamic
// CHECK-SAME: tile = [128, 256, 128]
// CHECK-LABEL: gpu.func @wgrad_few_tiles
// CHECK-SAME: tile = [64, 128, 128]
// CHECK-SAME: warpgroups = 1
// CHECK-SAME: block = [256, 1, 1]
// CHECK-LABEL: gpu.func @wgrad_two_short_waves
// CHECK-SAME: tile = [128, 192, 128]
// CHECK-LABEL: gpu.func @wgrad_many_tiles
// CHECK-SAME: tile = [128, 256, 128]
// CHECK-SAME: warpgroups = 2
// CHECK-LABEL: gpu.func @wgrad_tall
// CHECK-SAME: tile = [256, 128, 128]

// EXPLICIT-NOT: remark
// EXPLICIT-LABEL: gpu.func @tall
// EXPLICIT-SAME: tile = [128, 192, 128]
// EXPLICIT-LABEL: gpu.func @wgrad_few_tiles
// EXPLICIT-SAME: tile = [128, 192, 128]

// 32 tiles of 128x256 fill 32 multiprocessors.
// FEW-NOT: remark
// FEW-LABEL: gpu.func @wgrad_few_tiles
// FEW-SAME: tile = [128, 256, 128]

// INVALID: coat-lower-linear: multiprocessors must be >= 1

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

// The 100m model's o-projection weight gradient: 1024 x 1024 over the tokens.
func.func @wgrad_few_tiles(%dy: !coat.qtensor<1024x?xf8E5M2, per_tensor>,
                           %x: !coat.qtensor<1024x?xf8E4M3FN, per_tensor>) -> tensor<1024x1024xbf16> {
  %dw = coat.linear wgrad %dy, %x : !coat.qtensor<1024x?xf8E5M2, per_tensor>,
      !coat.qtensor<1024x?xf8E4M3FN, per_tensor> -> tensor<1024x1024xbf16>
  return %dw : tensor<1024x1024xbf16>
}

// TinyLlama's q/k/v weight gradient: two waves of 128x256 tiles, the second
// a fifth full.
func.func @wgrad_two_short_waves(%dy: !coat.qtensor<2560x?xf8E5M2, per_tensor>,
                                 %x: !coat.qtensor<2048x?xf8E4M3FN, per_tensor>) -> tensor<2560x2048xbf16> {
  %dw = coat.linear wgrad %dy, %x : !coat.qtensor<2560x?xf8E5M2, per_tensor>,
      !coat.qtensor<2048x?xf8E4M3FN, per_tensor> -> tensor<2560x2048xbf16>
  return %dw : tensor<2560x2048xbf16>
}

// The 7B shape's o-projection weight gradient: 512 tiles of 128x256.
func.func @wgrad_many_tiles(%dy: !coat.qtensor<4096x?xf8E5M2, per_tensor>,
                            %x: !coat.qtensor<4096x?xf8E4M3FN, per_tensor>) -> tensor<4096x4096xbf16> {
  %dw = coat.linear wgrad %dy, %x : !coat.qtensor<4096x?xf8E5M2, per_tensor>,
      !coat.qtensor<4096x?xf8E4M3FN, per_tensor> -> tensor<4096x4096xbf16>
  return %dw : tensor<4096x4096xbf16>
}

// Its q/k/v projection's: a tall M.
func.func @wgrad_tall(%dy: !coat.qtensor<12288x?xf8E5M2, per_tensor>,
                      %x: !coat.qtensor<4096x?xf8E4M3FN, per_tensor>) -> tensor<12288x4096xbf16> {
  %dw = coat.linear wgrad %dy, %x : !coat.qtensor<12288x?xf8E5M2, per_tensor>,
      !coat.qtensor<4096x?xf8E4M3FN, per_tensor> -> tensor<12288x4096xbf16>
  return %dw : tensor<12288x4096xbf16>
}
