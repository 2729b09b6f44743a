// RUN: coat-opt %s -coat-lower-cross-entropy -split-input-file -verify-diagnostics
// RUN: not coat-opt %s -coat-lower-cross-entropy=target=tpu -split-input-file 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: not coat-opt %s -coat-lower-cross-entropy=threads=48 -split-input-file 2>&1 | FileCheck %s --check-prefix=THREADS
// RUN: not coat-opt %s -coat-lower-cross-entropy=threads=2048 -split-input-file 2>&1 | FileCheck %s --check-prefix=THREADS2K

// TARGET: coat-lower-cross-entropy: target must be 'gpu' or 'cpu', got 'tpu'
// THREADS: error: coat-lower-cross-entropy: threads must be 0 (chosen from the vocabulary) or a power of two in [32, 1024], got 48
// THREADS2K: error: coat-lower-cross-entropy: threads must be 0 (chosen from the vocabulary) or a power of two in [32, 1024], got 2048

func.func @loss_only(%x: tensor<?x17xbf16>, %t: tensor<?xi64>) -> tensor<?xf32> {
  // expected-error @+1 {{a cross-entropy kernel writes the loss and the gradient: the kernel-spec function must return both}}
  %l, %g = coat.cross_entropy %x, %t : tensor<?x17xbf16>, tensor<?xi64> -> tensor<?xf32>, tensor<?x17xbf16>
  return %l : tensor<?xf32>
}

// -----

func.func @computed_logits(%x: tensor<?x17xbf16>, %t: tensor<?xi64>)
    -> (tensor<?xf32>, tensor<?x17xbf16>, tensor<?xf32>, tensor<?x17xbf16>) {
  %l, %g = coat.cross_entropy %x, %t : tensor<?x17xbf16>, tensor<?xi64> -> tensor<?xf32>, tensor<?x17xbf16>
  // expected-error @+1 {{a cross-entropy kernel holds one coat.cross_entropy, not another 'coat.cross_entropy'}}
  %l2, %g2 = coat.cross_entropy %g, %t : tensor<?x17xbf16>, tensor<?xi64> -> tensor<?xf32>, tensor<?x17xbf16>
  return %l, %g, %l2, %g2 : tensor<?xf32>, tensor<?x17xbf16>, tensor<?xf32>, tensor<?x17xbf16>
}

// -----

func.func @other_op(%x: tensor<?x17xbf16>, %t: tensor<?xi64>) -> (tensor<?xf32>, tensor<?x17xbf16>) {
  %l, %g = coat.cross_entropy %x, %t : tensor<?x17xbf16>, tensor<?xi64> -> tensor<?xf32>, tensor<?x17xbf16>
  // expected-error @+1 {{a cross-entropy kernel holds one coat.cross_entropy, not another 'arith.addf'}}
  %l2 = arith.addf %l, %l : tensor<?xf32>
  return %l2, %g : tensor<?xf32>, tensor<?x17xbf16>
}
