// Options are checked against each spec.
// RUN: not coat-opt %s -coat-lower-activations='target=gpu block-size=48' 2>&1 | FileCheck %s --check-prefix=BLOCK
// RUN: not coat-opt %s -coat-lower-activations='target=gpu elements-per-thread=2' 2>&1 | FileCheck %s --check-prefix=EPT
// RUN: not coat-opt %s -coat-lower-activations='target=tpu' 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: not coat-opt %s -coat-lower-activations='target=gpu tile=48' 2>&1 | FileCheck %s --check-prefix=TILE
// RUN: coat-opt %s -coat-lower-activations='target=gpu' | FileCheck %s --check-prefix=AUTO
// RUN: coat-opt %s -coat-lower-activations='target=gpu' | FileCheck %s --check-prefix=NOMIN
// RUN: coat-opt %s -coat-lower-activations='target=gpu tile-min-ctas=2 flat-min-ctas=6' | FileCheck %s --check-prefix=MIN
// RUN: not coat-opt %s -coat-lower-activations='target=gpu flat-min-ctas=33' 2>&1 | FileCheck %s --check-prefix=MINBAD
// RUN: coat-opt %s -coat-lower-activations='target=gpu tile-block-size=1024 tiles-per-block=1' | FileCheck %s --check-prefix=TB
// RUN: not coat-opt %s -coat-lower-activations='target=gpu tile-block-size=100' 2>&1 | FileCheck %s --check-prefix=TBBAD
// RUN: coat-opt %s -coat-lower-activations='target=gpu tiles-per-block=1' | FileCheck %s --check-prefix=ONE
// RUN: coat-opt %s -coat-lower-activations='target=gpu' | FileCheck %s --check-prefix=BYTES
// RUN: coat-opt %s -coat-lower-activations='target=gpu tile=64 tiles-per-block=2' | FileCheck %s --check-prefix=TPB
// RUN: not coat-opt %s -coat-lower-activations='target=gpu tiles-per-block=65' 2>&1 | FileCheck %s --check-prefix=TPBBAD

// BLOCK: block-size must be a multiple of 32 in [32, 1024], got 48
// EPT: elements-per-thread=2 does not fit group size 128
// TARGET: target must be 'gpu' or 'cpu', got 'tpu'
// TILE: tile must be 32, 64 or 128, got 48
// MINBAD: flat-min-ctas must be in [0, 32], got 33
// By default ptxas picks the registers.
// NOMIN-NOT: nvvm.minctasm
// CTAs an SM must hold: flat kernels and tile kernels apart.
// MIN-LABEL: gpu.func @q(
// MIN-SAME: nvvm.minctasm = 6 : i32
// MIN-LABEL: gpu.func @qt_f32(
// MIN-SAME: nvvm.minctasm = 2 : i32
// tile-block-size sets the tile kernels' threads only.
// TB-LABEL: gpu.func @q(
// TB-SAME: launch = {block = [256, 1, 1]
// TB-SAME: known_block_size = array<i32: 256, 1, 1>
// TB-LABEL: gpu.func @qt_f32(
// TB-SAME: launch = {block = [1024, 1, 1], elements_per_block = 16384
// TB-SAME: known_block_size = array<i32: 1024, 1, 1>
// TBBAD: tile-block-size must be a multiple of 32 in [32, 1024], got 100
// One tile a block: its loop carries nothing.
// ONE-LABEL: gpu.func @qt_f32(
// ONE-SAME: elements_per_block = 16384
// ONE: scf.for %{{.*}} = %block_id_x to %{{.*}} step %grid_dim_x {
// tiles-per-block=2 (64x64 f32 tiles): half the grid; the block's first tile is loaded before
// the loop, and each iteration issues the next tile's loads (masked off past
// the end) before it processes the one it carries.
// TPB-LABEL: gpu.func @qt_f32(
// TPB-SAME: elements_per_block = 8192
// TPB-COUNT-4: vector.load %arg0
// TPB: scf.for %{{.*}} = %block_id_x to %{{.*}} step %grid_dim_x iter_args(
// TPB-SAME: -> (vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>)
// TPB-COUNT-4: vector.load %arg0
// TPB: gpu.barrier
// TPB: gpu.barrier
// TPB: scf.yield %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>
// TPBBAD: lower-activations-options.mlir:{{[1-9][0-9]*}}:1: error: coat-lower-activations: tiles-per-block must be 0 (by tile size) or in [1, 64], got 65
// By default the tile bytes choose: tiles of 16 KiB of input or more are
// taken two a block, and a block has a thread per 128 bytes of its tile
// where that is more than block-size; smaller tiles one a block, with a
// thread per 64 bytes.
// BYTES-LABEL: gpu.func @qt_f32(
// BYTES-SAME: launch = {block = [512, 1, 1], elements_per_block = 32768
// BYTES-LABEL: gpu.func @qt_bf16(
// BYTES-SAME: launch = {block = [128, 1, 1], elements_per_block = 4096
// BYTES-LABEL: gpu.func @qb_bf16(
// BYTES-SAME: launch = {block = [256, 1, 1], elements_per_block = 32768
// BYTES-LABEL: gpu.func @qb_f32(
// BYTES-SAME: launch = {block = [512, 1, 1], elements_per_block = 32768
// The tile edge by input type: 128 for f32, 64 for bf16.
// AUTO-LABEL: gpu.func @qt_f32(
// AUTO-SAME: workgroup(%{{.*}} : memref<128x32xi32, #gpu.address_space<workgroup>>
// AUTO-SAME: tile = 128
// AUTO-LABEL: gpu.func @qt_bf16(
// AUTO-SAME: workgroup(%{{.*}} : memref<64x16xi32, #gpu.address_space<workgroup>>
// AUTO-SAME: tile = 64
func.func @q(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<128>>
}

func.func @qt_f32(%x: tensor<?x?xf32>, %s: tensor<f32>) -> (!coat.qtensor<?x?xf8E4M3FN, per_tensor>, !coat.qtensor<?x?xf8E4M3FN, per_tensor>) {
  %q = coat.quantize %x scale %s : tensor<?x?xf32>, tensor<f32> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor>
  return %q, %t : !coat.qtensor<?x?xf8E4M3FN, per_tensor>, !coat.qtensor<?x?xf8E4M3FN, per_tensor>
}

func.func @qt_bf16(%x: tensor<?x?xbf16>, %s: tensor<f32>) -> (!coat.qtensor<?x?xf8E4M3FN, per_tensor>, !coat.qtensor<?x?xf8E4M3FN, per_tensor>) {
  %q = coat.quantize %x scale %s : tensor<?x?xbf16>, tensor<f32> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor>
  return %q, %t : !coat.qtensor<?x?xf8E4M3FN, per_tensor>, !coat.qtensor<?x?xf8E4M3FN, per_tensor>
}

func.func @qb_bf16(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>, scale = f32> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>, scale = f32>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>, scale = f32>
}

func.func @qb_f32(%x: tensor<?x?xf32>) -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>, scale = f32> {
  %q = coat.quantize %x : tensor<?x?xf32> -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>, scale = f32>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>, scale = f32>
}
