// Options are checked against each spec.
// RUN: not coat-opt %s -coat-lower-activations='target=gpu block-size=48' 2>&1 | FileCheck %s --check-prefix=BLOCK
// RUN: not coat-opt %s -coat-lower-activations='target=gpu elements-per-thread=2' 2>&1 | FileCheck %s --check-prefix=EPT
// RUN: not coat-opt %s -coat-lower-activations='target=tpu' 2>&1 | FileCheck %s --check-prefix=TARGET

// BLOCK: block-size must be a multiple of 32 in [32, 1024], got 48
// EPT: elements-per-thread=2 does not fit group size 128
// TARGET: target must be 'gpu' or 'cpu', got 'tpu'
func.func @q(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<128>>
}
