// The PTX that matters: 16-byte global accesses, the hardware FP8 conversion,
// shuffles for groups spanning lanes, bar.sync around the transpose tile,
// IEEE divisions, and no local-memory spills.
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-activations{target=gpu},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s

// CHECK-LABEL: .visible .entry q_g128(
// CHECK-NOT: .local
// CHECK: ld.global.v4.b32
// CHECK: shfl.sync.bfly.b32 {{.*}}, 4, 31, -1;
// CHECK: shfl.sync.bfly.b32 {{.*}}, 2, 31, -1;
// CHECK: shfl.sync.bfly.b32 {{.*}}, 1, 31, -1;
// CHECK: div.rn.f32 {{.*}}, 0f43E00000;
// CHECK: cvt.rn.bf16.f32
// CHECK: div.rn.f32
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK: st.global.v4.b32
// CHECK-NOT: .local
// CHECK-LABEL: .visible .entry q_g16(
func.func @q_g128(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16>
}

// One group per thread: no shuffles.
// CHECK-NOT: shfl
// CHECK: cvt.rn.satfinite.e5m2x2.f32
// CHECK-NOT: .local
// CHECK-LABEL: .visible .entry q_t(
func.func @q_g16(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E5M2, per_group<16>, scale = bf16> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E5M2, per_group<16>, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E5M2, per_group<16>, scale = bf16>
}

// The transposed copy: 32-bit shared loads of column words (never bytes),
// 4x4 byte transposes with prmt, 16-byte stores of q^T rows.
// CHECK: .shared .align 16 .b8 __wg_q_t_0[4096];
// CHECK-DAG: ld.global.v4.b32
// CHECK-DAG: cvt.rn.satfinite.e4m3x2.f32
// CHECK-DAG: st.shared.v2.b32
// CHECK-DAG: bar.sync 0;
// CHECK-DAG: bar.sync 0;
// CHECK-DAG: ld.shared.b32
// CHECK-DAG: prmt.b32 {{.*}}, 0x5140U;
// CHECK-DAG: prmt.b32 {{.*}}, 0x7362U;
// CHECK-DAG: prmt.b32 {{.*}}, 0x5410U;
// CHECK-DAG: prmt.b32 {{.*}}, 0x7632U;
// CHECK-DAG: st.global.v4.b32
// CHECK-NOT: ld.shared.b8
// CHECK-NOT: .local
// CHECK-LABEL: .visible .entry q_tb(
func.func @q_t(%x: tensor<?x?xbf16>, %s: tensor<bf16>)
    -> (!coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>) {
  %q = coat.quantize %x scale %s : tensor<?x?xbf16>, tensor<bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  return %q, %t : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
}

// 128x128 blocks + transpose: the block maximum by shuffles and one word
// per warp, the IEEE scale division by 448, both scale matrices, then the
// same transposed copy.
// CHECK: .shared .align 16 .b8 __wg_q_tb_0[16384];
// CHECK: .shared .align 16 .b8 __wg_q_tb_1[32];
// CHECK: ld.global.v4.b32
// CHECK: shfl.sync.bfly.b32 {{.*}}, 16, 31, -1;
// CHECK: shfl.sync.bfly.b32 {{.*}}, 1, 31, -1;
// CHECK: bar.sync 0;
// CHECK: div.rn.f32 {{.*}}, 0f43E00000;
// CHECK: st.global.b32
// CHECK: st.global.b32
// CHECK: div.rn.f32
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK: bar.sync 0;
// CHECK: ld.shared.b32
// CHECK: prmt.b32
// CHECK: st.global.v4.b32
// CHECK-NOT: ld.shared.b8
// CHECK-NOT: .local
// CHECK-LABEL: .visible .entry dq(
func.func @q_tb(%x: tensor<?x?xbf16>) -> (!coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>, !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>) {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>> -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
  return %q, %t : !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>, !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
}

// CHECK: ld.global.v4.b32
// CHECK: cvt.rn.f16x2.e4m3x2
// CHECK: cvt.rn.bf16x2.f32
// CHECK: st.global.v4.b32
// CHECK-NOT: .local
// CHECK-LABEL: .visible .entry q_t_only(
func.func @dq(%q: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>) -> tensor<?x?xbf16> {
  %x = coat.dequantize %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xbf16>
  return %x : tensor<?x?xbf16>
}

// The transposed copy alone: the codes go to the tile only (no 8-byte
// global store of a row-major chunk), then the same 16-byte rows of q^T.
// CHECK: .shared .align 16 .b8 __wg_q_t_only_0[4096];
// CHECK-NOT: st.global.v2.b32
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK-NOT: st.global.v2.b32
// CHECK: st.shared.v{{[24]}}.b{{16|32}}
// CHECK-NOT: st.global.v2.b32
// CHECK: bar.sync 0;
// CHECK: ld.shared.b32
// CHECK: prmt.b32
// CHECK: st.global.v4.b32
// CHECK-NOT: st.global.v2.b32
// CHECK-NOT: .local
func.func @q_t_only(%x: tensor<?x?xbf16>, %s: tensor<bf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> {
  %q = coat.quantize %x scale %s : tensor<?x?xbf16>, tensor<bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  return %t : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
}
