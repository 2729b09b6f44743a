// RUN: not coat-opt %s -coat-lower-norms='target=gpu block-size=48' 2>&1 | FileCheck %s --check-prefix=BLOCK
// RUN: not coat-opt %s -coat-lower-norms='target=gpu threads-per-row=16' 2>&1 | FileCheck %s --check-prefix=TPR
// RUN: not coat-opt %s -coat-lower-norms='target=tpu' 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: coat-opt %s -coat-lower-norms='target=gpu threads-per-row=1024' | FileCheck %s --check-prefix=CTA
// RUN: not coat-opt %s -coat-lower-norms='target=gpu column-sums=atomic' 2>&1 | FileCheck %s --check-prefix=SUMS
// RUN: coat-opt %s -coat-lower-norms='target=gpu column-sums=separate' | FileCheck %s --check-prefix=SEP
// RUN: coat-opt %s -coat-lower-norms='target=cpu column-sums=fused' | FileCheck %s --check-prefix=FUSED
// RUN: coat-opt %s -coat-lower-norms='target=gpu backward-min-ctas=3' | FileCheck %s --check-prefix=BWD-CTAS
// RUN: coat-opt %s -coat-lower-norms='target=gpu' | FileCheck %s --check-prefix=BWD-NO-CTAS
// RUN: not coat-opt %s -coat-lower-norms='target=gpu backward-min-ctas=33' 2>&1 | FileCheck %s --check-prefix=BWD-CTAS-RANGE
// RUN: not coat-opt %s -coat-lower-norms='target=gpu groups-per-thread=17' 2>&1 | FileCheck %s --check-prefix=GPT

// BLOCK: error: block-size must be a power of two in [32, 1024], got 48
// TPR: error: threads-per-row must be 0 (auto) or a power of two in [32, 1024], got 16
// TARGET: error: coat-lower-norms: target must be 'gpu' or 'cpu', got 'tpu'
// CTA: threads_per_row = 1024
// CTA-SAME: known_block_size = array<i32: 1024, 1, 1>
// SUMS: error: column-sums must be auto, fused, shared or separate, got 'atomic'
// The option overrides the choice (auto takes fused at 2048 columns); the
// forward has no column sums either way.
// SEP: gpu.func @rms(
// SEP-NOT: column_sums
// SEP: gpu.func @rms_bwd(
// SEP-SAME: column_sums = "separate"
// SEP: gpu.func @rms_bwd_columns(
// SEP: gpu.func @rms_bwd_reduce(
// FUSED: func.func @rms_bwd(
// FUSED-SAME: column_sums = "fused"
// FUSED-NOT: func.func @rms_bwd_columns(
// FUSED: func.func @rms_bwd_reduce(
// The forward's bound is fixed (1024 threads' worth); the backward row
// kernel's is a request that coat-drop-spilling-min-ctas may drop, and only
// with the option.
// BWD-CTAS: gpu.func @rms(
// BWD-CTAS-NOT: coat.min_ctas_unless_spilling
// BWD-CTAS: gpu.func @rms_bwd(
// BWD-CTAS-SAME: coat.min_ctas_unless_spilling
// BWD-CTAS-SAME: nvvm.minctasm = 3 : i32
// BWD-CTAS: gpu.func @rms_bwd_reduce(
// BWD-CTAS-NOT: minctasm
// BWD-NO-CTAS: gpu.func @rms_bwd(
// BWD-NO-CTAS-NOT: minctasm
// BWD-NO-CTAS: gpu.func @rms_bwd_reduce(
// BWD-CTAS-RANGE: error: backward-min-ctas must be in [0, 32], got 33
// GPT: error: groups-per-thread must be in [0, 16], got 17
func.func @rms(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>) -> (tensor<?x?xbf16>, tensor<?xf32>) {
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>
      -> tensor<?x?xbf16>, tensor<?xf32>
  return %y, %rstd : tensor<?x?xbf16>, tensor<?xf32>
}

func.func @rms_bwd(%x: !coat.qtensor<?x2048xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<2048xbf16>, %rstd: tensor<?xf32>, %dy: tensor<?x2048xbf16>)
    -> (tensor<?x2048xbf16>, tensor<2048xbf16>) {
  %dx, %dw = coat.rmsnorm_grad %x, %w, %rstd, %dy
      : !coat.qtensor<?x2048xf8E4M3FN, per_group<16>, scale = bf16>, tensor<2048xbf16>,
        tensor<?xf32>, tensor<?x2048xbf16> -> tensor<?x2048xbf16>, tensor<2048xbf16>
  return %dx, %dw : tensor<?x2048xbf16>, tensor<2048xbf16>
}
