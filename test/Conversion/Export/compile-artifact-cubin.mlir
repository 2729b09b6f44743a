// REQUIRES: ptxas
// coat-compile-artifact with cubins: the PTX written is the text ptxas
// assembled (one lowering, one code generation for both files; opt-level 3
// is the pass default, which the serializer hands ptxas), and the GPU
// lowerings run under the occupancy hints, which the caller's option of the
// same key replaces.
// RUN: rm -rf %t && mkdir -p %t/hinted %t/unhinted
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-compile-artifact{dir=%t/hinted cpu=false toolkit=%cuda_toolkit})' -o /dev/null
// RUN: FileCheck %s --check-prefix=HINT < %t/hinted/coat_flow_kernels.ptx
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/hinted/manifest.json
// RUN: %cuda_toolkit/bin/ptxas -arch=sm_90a -O3 %t/hinted/coat_flow_kernels.ptx -o %t/again.cubin
// RUN: cmp %t/again.cubin %t/hinted/coat_flow_kernels.cubin
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-compile-artifact{dir=%t/unhinted cpu=false toolkit=%cuda_toolkit pointwise={min-ctas=0}})' -o /dev/null
// RUN: FileCheck %s --check-prefix=NOHINT < %t/unhinted/coat_flow_kernels.ptx

// HINT: .entry silu(
// HINT: .minnctapersm 6
// NOHINT: .entry silu(
// NOHINT-NOT: .minnctapersm

// MANIFEST: "cubin": "coat_flow_kernels.cubin",
// MANIFEST-NEXT: "module": "coat_flow_kernels",
// MANIFEST-NEXT: "ptx": "coat_flow_kernels.ptx"
// MANIFEST-NOT: "cpu": {
// MANIFEST: "target": {
// MANIFEST-NEXT: "chip": "sm_90a",
// MANIFEST-NEXT: "features": "+ptx80"
func.func @silu(%x: !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16>)
    -> !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16> {
  %y = coat.silu %x : !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16>
      -> !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16>
  return %y : !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16>
}
