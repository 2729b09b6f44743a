// RUN: coat-opt %s --split-input-file --verify-diagnostics --coat-lower-optimizer=target=gpu
// RUN: not coat-opt %S/../../../examples/optimizer/adamw.mlir --coat-lower-optimizer=target=tpu 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: not coat-opt %S/../../../examples/optimizer/adamw.mlir --coat-lower-optimizer="target=gpu elements-per-thread=3" 2>&1 | FileCheck %s --check-prefix=EPT
// RUN: not coat-opt %S/../../../examples/optimizer/adamw.mlir --coat-lower-optimizer="target=gpu block-size=100" 2>&1 | FileCheck %s --check-prefix=BLOCK
// RUN: not coat-opt %S/../../../examples/optimizer/adamw.mlir --coat-lower-optimizer="target=gpu lanes-per-thread=0" 2>&1 | FileCheck %s --check-prefix=LANES
// RUN: not coat-opt %S/../../../examples/optimizer/adamw.mlir --coat-lower-optimizer="target=gpu lanes-per-thread=4096" 2>&1 | FileCheck %s --check-prefix=LANES-BIG

// TARGET: target must be 'gpu' or 'cpu', got 'tpu'
// EPT: elements-per-thread=3 does not fit group size 128
// BLOCK: block-size must be a multiple of 32 in [32, 1024], got 100
// LANES: lanes-per-thread must be in [1, 1024], got 0
// LANES-BIG: lanes-per-thread must be in [1, 1024], got 4096

!q = !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>

// A spec function must hold the step and return its results, nothing else.
// expected-error @+1 {{kernel-spec function @extra must hold exactly one coat.adamw_step and return its results}}
func.func @extra(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !q, %v: !q,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xf32>, !q, !q) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xf32>, tensor<?xf32>, !q, !q
  %x = arith.addf %t, %lr : f32
  return %p2, %m2, %v2 : tensor<?xf32>, !q, !q
}

// -----

!q = !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>

// expected-error @+1 {{coat-lower-optimizer: symbol @coat_kernels is taken; the pass puts its kernels in a new gpu.module of that name}}
func.func private @coat_kernels()

func.func @step(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !q, %v: !q,
    %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
    -> (tensor<?xf32>, !q, !q) {
  %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<?xf32>, tensor<?xf32>, !q, !q
  return %p2, %m2, %v2 : tensor<?xf32>, !q, !q
}

// -----

!q = !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>

// A spec in a nested module is reported, not silently left unlowered (nor
// lowered into the outer module's kernels).
module {
  module @inner {
    // expected-error @+1 {{coat-lower-optimizer: kernel-spec function @nested sits in a nested 'builtin.module' and is not lowered}}
    func.func @nested(%p: tensor<?xf32>, %g: tensor<?xf32>, %m: !q, %v: !q,
        %t: f32, %lr: f32, %b1: f32, %b2: f32, %eps: f32, %wd: f32)
        -> (tensor<?xf32>, !q, !q) {
      %p2, %m2, %v2 = coat.adamw_step %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
          : tensor<?xf32>, tensor<?xf32>, !q, !q
      return %p2, %m2, %v2 : tensor<?xf32>, !q, !q
    }
  }
}
