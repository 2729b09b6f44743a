// The PTX that matters: 16-byte loads of the FP8 codes and stores of the
// values (forward: staged per warp in shared memory, then stored
// contiguously), the FP8->f16x2 conversion, the butterfly shuffles, IEEE division,
// sqrt and reciprocal for rstd, barriers only where a row spans warps, and no
// local-memory stack.
// RUN: coat-opt %s --nvvm-reflect-add=__CUDA_PREC_SQRT=1 --pass-pipeline='builtin.module(coat-lower-norms{target=gpu},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s

// CHECK-LABEL: .visible .entry rms_warp(
// CHECK-NOT: .local
// CHECK-NOT: bar.sync
// CHECK: ld.global.v4.b32
// CHECK: cvt.rn.f16x2.e4m3x2
// CHECK: shfl.sync.bfly.b32 {{.*}}, 16, 31, -1;
// CHECK: shfl.sync.bfly.b32 {{.*}}, 1, 31, -1;
// CHECK: div.rn.f32
// CHECK: sqrt.rn.f32
// CHECK: rcp.rn.f32
// CHECK: st.shared.v4.b32
// CHECK: bar.warp.sync -1;
// CHECK: ld.shared.v4.b32
// CHECK: st.global.v4.b32
// CHECK-LABEL: .visible .entry ln_bwd(
// CHECK-NOT: .local
// CHECK: shfl.sync.bfly.b32
// CHECK: bar.sync
// CHECK: st.global.v4.b32
// CHECK-LABEL: .visible .entry ln_bwd_reduce(
// CHECK-NOT: .local
// CHECK: bar.sync
func.func @rms_warp(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>) -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>)
    attributes {coat.max_cols = 1024 : i64} {
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>
      -> tensor<?x?xbf16>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %y, %rstd, %m : tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>
}

func.func @ln_bwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>) attributes {coat.max_cols = 4096 : i64} {
  %dx, %dw, %db = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>,
        tensor<?xf32>, tensor<?x?xbf16>, tensor<?xf32>
      -> tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
}
