// RUN: coat-opt %s -coat-lower-reduce-scales -split-input-file -verify-diagnostics
// RUN: not coat-opt %s -coat-lower-reduce-scales=target=tpu -split-input-file 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: not coat-opt %s -coat-lower-reduce-scales=block-size=48 -split-input-file 2>&1 | FileCheck %s --check-prefix=BLOCK

// TARGET: coat-lower-reduce-scales: target must be 'gpu' or 'cpu', got 'tpu'
// BLOCK: lower-reduce-scales-invalid.mlir:{{[1-9][0-9]*}}:1: error: coat-lower-reduce-scales: block-size must be a multiple of 32 in [32, 1024], got 48

func.func @two_results(%p: tensor<?xf32>) -> (tensor<f32>, tensor<f32>) {
  // expected-error @-1 {{a scale kernel returns one rank-0 value}}
  %m = coat.reduce_scales %p : tensor<?xf32> -> tensor<f32>
  return %m, %m : tensor<f32>, tensor<f32>
}

// -----

func.func @argument_in_arith(%p: tensor<?xf32>, %e: tensor<f32>) -> tensor<f32> {
  %m = coat.reduce_scales %p : tensor<?xf32> -> tensor<f32>
  // expected-error @+1 {{the scalar arithmetic of a scale kernel may only use the maximum and constants}}
  %a = arith.addf %m, %e : tensor<f32>
  return %a : tensor<f32>
}

// -----

func.func @tensor_arith(%p: tensor<4xf32>) -> tensor<f32> {
  %m = coat.reduce_scales %p : tensor<4xf32> -> tensor<f32>
  // expected-error @+1 {{a scale kernel may only hold arith ops on rank-0 tensors after its coat.reduce_scales}}
  %x = arith.addf %p, %p : tensor<4xf32>
  return %m : tensor<f32>
}

// -----

func.func @returns_the_input(%p: tensor<?xf32>) -> tensor<?xf32> {
  %m = coat.reduce_scales %p : tensor<?xf32> -> tensor<f32>
  // expected-error @+1 {{a scale kernel returns its maximum or the scalar arithmetic on it}}
  return %p : tensor<?xf32>
}

// -----

// A spec in a nested module is reported, not silently left unlowered.
module {
  module @inner {
    // expected-error @+1 {{coat-lower-reduce-scales: kernel-spec function @nested sits in a nested 'builtin.module' and is not lowered}}
    func.func @nested(%p: tensor<?xf32>) -> tensor<f32> {
      %m = coat.reduce_scales %p : tensor<?xf32> -> tensor<f32>
      return %m : tensor<f32>
    }
  }
}

// -----

// expected-error @+1 {{coat-lower-reduce-scales: symbol @coat_scale_kernels is taken; the pass puts its kernels in a new gpu.module of that name}}
func.func private @coat_scale_kernels()

func.func @scale(%p: tensor<?xf32>) -> tensor<f32> {
  %m = coat.reduce_scales %p : tensor<?xf32> -> tensor<f32>
  return %m : tensor<f32>
}

// -----

func.func @codes_read(%q: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>) -> (tensor<bf16>, tensor<?x?xf8E4M3FN>) {
  // expected-error @+1 {{a scale kernel may only read the group scales of one per_group function argument}}
  %codes, %scales = coat.disassemble %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  %m = coat.reduce_scales %scales : tensor<?x?xbf16> -> tensor<bf16>
  return %m, %codes : tensor<bf16>, tensor<?x?xf8E4M3FN>
}

// -----

func.func @flat_groups(%q: !coat.qtensor<?xf8E4M3FN, flat_group<128>>) -> tensor<f32> {
  // expected-error @+1 {{a scale kernel may only read the group scales of one per_group function argument}}
  %codes, %scales = coat.disassemble %q : !coat.qtensor<?xf8E4M3FN, flat_group<128>>
  %m = coat.reduce_scales %scales : tensor<?xf32> -> tensor<f32>
  return %m : tensor<f32>
}

// -----

// The maxima of a tensor argument belong in a scale kernel only when the
// reduction alone reads them (here they are returned too).
func.func @maxima_read_twice(%x: tensor<?x64xbf16>) -> (tensor<f32>, tensor<?x4xf32>) {
  // expected-error @+1 {{a scale kernel may only hold the maxima of one tensor argument, read by its coat.reduce_scales alone}}
  %p = coat.absmax %x, per_group<16> : tensor<?x64xbf16> -> tensor<?x4xf32>
  %m = coat.reduce_scales %p : tensor<?x4xf32> -> tensor<f32>
  return %m, %p : tensor<f32>, tensor<?x4xf32>
}
