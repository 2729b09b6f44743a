// RUN: not coat-opt %s -coat-lower-norms='target=gpu block-size=48' 2>&1 | FileCheck %s --check-prefix=BLOCK
// RUN: not coat-opt %s -coat-lower-norms='target=gpu threads-per-row=16' 2>&1 | FileCheck %s --check-prefix=TPR
// RUN: not coat-opt %s -coat-lower-norms='target=tpu' 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: coat-opt %s -coat-lower-norms='target=gpu threads-per-row=1024' | FileCheck %s --check-prefix=CTA

// BLOCK: error: block-size must be a power of two in [32, 1024], got 48
// TPR: error: threads-per-row must be 0 (auto) or a power of two in [32, 1024], got 16
// TARGET: error: coat-lower-norms: target must be 'gpu' or 'cpu', got 'tpu'
// CTA: threads_per_row = 1024
// CTA-SAME: known_block_size = array<i32: 1024, 1, 1>
func.func @rms(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>) -> (tensor<?x?xbf16>, tensor<?xf32>) {
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>
      -> tensor<?x?xbf16>, tensor<?xf32>
  return %y, %rstd : tensor<?x?xbf16>, tensor<?xf32>
}
