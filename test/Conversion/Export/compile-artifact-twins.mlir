// coat-compile-artifact: the GPU kernel and its CPU twin share one manifest
// entry. Objects merge key by key, so what only the GPU record says (its
// launch, its row prefetch) survives the CPU twin's record, which adds its
// section without dropping the GPU one. The PTX is written beside the
// manifest (cubin=false: no ptxas) and the CPU twins' LLVM IR too.
// RUN: rm -rf %t && mkdir -p %t
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-compile-artifact{dir=%t cubin=false})' -o /dev/null
// RUN: FileCheck %s < %t/manifest.json
// RUN: FileCheck %s --check-prefix=PTX < %t/coat_norm_kernels.ptx
// RUN: FileCheck %s --check-prefix=LL < %t/coat_cpu.ll
// RUN: not ls %t/coat_norm_kernels.cubin

// PTX: .target sm_90a
// PTX: .entry lnw_bwd(
// LL: define void @lnw_bwd(

// CHECK: "config": {
// CHECK: "column_sums": "shared",
// CHECK: "row_prefetch": true,
// CHECK: "threads_per_row": 256,
// CHECK: "cpu": {
// CHECK-NEXT: "library": "coat_cpu.so",
// CHECK: "gpu": {
// CHECK-NEXT: "module": "coat_norm_kernels",
// CHECK-NEXT: "ptx": "coat_norm_kernels.ptx"
// CHECK: "launch": {
// CHECK: "shared_bytes": 41024
// CHECK: "name": "lnw_bwd",
func.func @lnw_bwd(%x: !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16>,
    %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x4096xbf16>, %w: tensor<4096xbf16>)
    -> (tensor<?x4096xbf16>, tensor<4096xbf16>) {
  %dx, %dw = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>, tensor<?xf32>,
        tensor<?x4096xbf16>, tensor<4096xbf16> -> tensor<?x4096xbf16>, tensor<4096xbf16>
  return %dx, %dw : tensor<?x4096xbf16>, tensor<4096xbf16>
}
