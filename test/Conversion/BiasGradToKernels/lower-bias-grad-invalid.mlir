// RUN: coat-opt %s -coat-lower-bias-grad -split-input-file -verify-diagnostics
// RUN: not coat-opt %s -coat-lower-bias-grad=target=tpu -split-input-file 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: not coat-opt %s -coat-lower-bias-grad=block-size=48 -split-input-file 2>&1 | FileCheck %s --check-prefix=BLOCK
// RUN: not coat-opt %s -coat-lower-bias-grad=rows-per-partial=0 -split-input-file 2>&1 | FileCheck %s --check-prefix=ROWS
// RUN: not coat-opt %s -coat-lower-bias-grad=rows-in-flight=33 -split-input-file 2>&1 | FileCheck %s --check-prefix=FLIGHT

// TARGET: coat-lower-bias-grad: target must be 'gpu' or 'cpu', got 'tpu'
// BLOCK: lower-bias-grad-invalid.mlir:{{[1-9][0-9]*}}:1: error: coat-lower-bias-grad: block-size must be a multiple of 32 in [32, 1024], got 48
// ROWS: error: coat-lower-bias-grad: rows-per-partial must be positive, got 0
// FLIGHT: error: coat-lower-bias-grad: rows-in-flight must be in [1, 32], got 33

func.func @odd_columns(%dy: tensor<?x20xbf16>) -> tensor<20xbf16> {
  // expected-error @+1 {{the bias-gradient kernel reads whole 16-byte loads of 8 elements a row: the column count 20 is not a multiple of 8}}
  %db = coat.bias_grad %dy : tensor<?x20xbf16> -> tensor<20xbf16>
  return %db : tensor<20xbf16>
}

// -----

// Whole-row maxima of 48 columns: 6 lanes a group, not a power of two.
func.func @unfusable_maxima(%dy: tensor<?x48xbf16>) -> (tensor<?x1xf32>, tensor<48xbf16>) {
  // expected-error @+1 {{these maxima cannot share the bias-gradient kernel: it takes per_group<G> maxima of its own input (not epilogue ones) whose groups are 1, 2, 4, ... or 32 of its 16-byte loads (8 elements)}}
  %m = coat.absmax %dy, per_group<48> : tensor<?x48xbf16> -> tensor<?x1xf32>
  %db = coat.bias_grad %dy : tensor<?x48xbf16> -> tensor<48xbf16>
  return %m, %db : tensor<?x1xf32>, tensor<48xbf16>
}

// -----

func.func @maxima_of_another(%dy: tensor<?x64xbf16>, %x: tensor<?x64xbf16>) -> (tensor<?x4xf32>, tensor<64xbf16>) {
  // expected-error @+1 {{these maxima cannot share the bias-gradient kernel}}
  %m = coat.absmax %x, per_group<16> : tensor<?x64xbf16> -> tensor<?x4xf32>
  %db = coat.bias_grad %dy : tensor<?x64xbf16> -> tensor<64xbf16>
  return %m, %db : tensor<?x4xf32>, tensor<64xbf16>
}

// -----

func.func @two_bias_grads(%dy: tensor<?x64xbf16>) -> (tensor<64xbf16>, tensor<64xf32>) {
  %a = coat.bias_grad %dy : tensor<?x64xbf16> -> tensor<64xbf16>
  // expected-error @+1 {{a bias-gradient kernel holds one coat.bias_grad and at most the 1xG maxima of its input, not another 'coat.bias_grad'}}
  %b = coat.bias_grad %dy : tensor<?x64xbf16> -> tensor<64xf32>
  return %a, %b : tensor<64xbf16>, tensor<64xf32>
}

// -----

func.func @computed_input(%x: tensor<?x64xbf16>) -> (tensor<?x4xf32>, tensor<4xf32>) {
  %m = coat.absmax %x, per_group<16> : tensor<?x64xbf16> -> tensor<?x4xf32>
  // expected-error @+1 {{the input of a bias-gradient kernel must be an argument of its kernel-spec function}}
  %db = coat.bias_grad %m : tensor<?x4xf32> -> tensor<4xf32>
  return %m, %db : tensor<?x4xf32>, tensor<4xf32>
}

// -----

func.func @maxima_not_returned(%dy: tensor<?x64xbf16>) -> tensor<64xbf16> {
  // expected-error @+1 {{a bias-gradient kernel writes every result of its ops: the kernel-spec function must return this one}}
  %m = coat.absmax %dy, per_group<16> : tensor<?x64xbf16> -> tensor<?x4xf32>
  %db = coat.bias_grad %dy : tensor<?x64xbf16> -> tensor<64xbf16>
  return %db : tensor<64xbf16>
}
