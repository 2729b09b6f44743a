// coat-compile-artifact refuses what it cannot compile, at the place that
// says why, and writes no manifest then.
// RUN: rm -rf %t && mkdir -p %t
// RUN: coat-opt %s -split-input-file -verify-diagnostics --pass-pipeline='builtin.module(coat-compile-artifact{dir=%t cubin=false})' -o /dev/null
// RUN: not ls %t/manifest.json
// RUN: not coat-opt %s -split-input-file --pass-pipeline='builtin.module(coat-compile-artifact{dir=%t cubin=false norms={no-such-option=1}})' -o /dev/null 2>&1 | FileCheck %s --check-prefix=OPTIONS
// RUN: not ls %t/manifest.json

// OPTIONS: error: coat-compile-artifact: bad lowering options:
// OPTIONS-SAME: no-such-option

// expected-error @+1 {{the module holds no kernel-spec function to compile}}
module {
  func.func @only_a_program(%x: tensor<?x32xbf16>) -> tensor<?x32xbf16>
      attributes {coat.program} {
    return %x : tensor<?x32xbf16>
  }
}

// -----

func.func @unresolved(%x: tensor<?x32xbf16>) -> !coat.unresolved<?x32xbf16> {
  // expected-error @+1 {{no lowering takes this op in kernel-spec function @unresolved}}
  %q = coat.quantize_auto %x : tensor<?x32xbf16> -> !coat.unresolved<?x32xbf16>
  return %q : !coat.unresolved<?x32xbf16>
}

// -----

// A program may call only specs whose kernels the artifact holds.
func.func @quantize(%x: tensor<?x32xbf16>) -> !coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16> {
  %q = coat.quantize %x : tensor<?x32xbf16> -> !coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>
  return %q : !coat.qtensor<?x32xf8E4M3FN, per_group<16>, scale = bf16>
}
func.func @no_kernel(%x: tensor<?x32xbf16>) -> tensor<?x32xbf16> {
  return %x : tensor<?x32xbf16>
}
func.func @program(%x: tensor<?x32xbf16>) -> tensor<?x32xbf16>
    attributes {coat.program} {
  // expected-error @+1 {{coat-compile-artifact: no kernel of this artifact runs @no_kernel}}
  %y = call @no_kernel(%x) : (tensor<?x32xbf16>) -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}
