// coat-compile-artifact runs in stock mlir-opt through the plugin: the
// pass's nested pipelines and its LLVM IR translation need nothing that only
// coat-opt registers.
// UNSUPPORTED: sanitizers
// RUN: rm -rf %t && mkdir -p %t
// RUN: mlir-opt %s --load-dialect-plugin=%coat_plugin --load-pass-plugin=%coat_plugin \
// RUN:   --pass-pipeline='builtin.module(coat-compile-artifact{dir=%t cubin=false})' -o /dev/null
// RUN: FileCheck %s < %t/manifest.json
// RUN: FileCheck %s --check-prefix=PTX < %t/coat_activation_kernels.ptx
// RUN: FileCheck %s --check-prefix=LL < %t/coat_cpu.ll

// CHECK: "name": "quantize_g16",
// CHECK: "op": "quantize"
// PTX: .entry quantize_g16(
// PTX: cvt.rn.satfinite.e4m3x2.f32
// LL: define void @quantize_g16(
func.func @quantize_g16(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
}
