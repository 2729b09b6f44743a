// The PTX that matters: 16-byte global accesses, the hardware FP8
// conversions (E5M2 copies of gradients are per-tensor: coat-group-scaling
// leaves them to the quantize kernels), shuffles for groups spanning lanes,
// the sigmoid on the SFU (ex2/rcp .approx.ftz), the group scale and its
// reciprocal by IEEE division and the values divided by fma corrections, no
// mul+add contraction of the element math (mul.rn/add.rn), and no
// local-memory spills.
// RUN: coat-opt %s --pass-pipeline='builtin.module(coat-lower-pointwise{target=gpu},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s

// CHECK-LABEL: .visible .entry silu_e4m3(
// CHECK-NOT: .local
// CHECK: ld.global.v4.b32
// CHECK: cvt.rn.f16x2.e4m3x2
// CHECK: ex2.approx.ftz.f32
// CHECK: rcp.approx.ftz.f32
// CHECK: div.rn.f32 {{.*}}, 0f43E00000;
// CHECK: rcp.rn.f32
// CHECK: fma.rn.f32
// CHECK: fma.rn.f32
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK: st.global.v4.b32
// CHECK-LABEL: .visible .entry residual_add_g64(
// CHECK-NOT: .local
// CHECK: ld.global.v4.b32
// CHECK: add.rn.f32
// CHECK: shfl.sync.bfly.b32 {{.*}}, 2, 31, -1;
// CHECK: shfl.sync.bfly.b32 {{.*}}, 1, 31, -1;
// CHECK: cvt.rn.satfinite.e4m3x2.f32
// CHECK-LABEL: .visible .entry swiglu_mul_grad_e4m3(
// CHECK-NOT: .local
// CHECK: mul.rn.f32
// CHECK-NOT: .local
// Rotary embedding in place: 16-byte loads of both halves of a head and of
// the f32 tables, products and sums rounded one by one (mul.rn, sub.rn,
// add.rn: the library's bits, no fma), 16-byte stores, no spills.
// CHECK-LABEL: .visible .entry rope_in_place(
// CHECK-NOT: .local
// CHECK-NOT: fma.rn
// CHECK: ld.global.v4.b32
// CHECK: ld.global.v4.b32
// CHECK: mul.rn.f32
// CHECK: sub.rn.f32
// CHECK: add.rn.f32
// CHECK: st.global.v4.b32
// CHECK-NOT: .local
// CHECK-NOT: fma.rn
// The backward's maxima: one shuffle joins the two lanes of a 1x16 group.
// CHECK-LABEL: .visible .entry rope_grad_maxima(
// CHECK-NOT: .local
// CHECK-NOT: fma.rn
// CHECK: shfl.sync.bfly.b32 {{.*}}, 1, 31, -1;
// CHECK-NOT: .local
// CHECK-NOT: fma.rn
// GELU's tanh form (fast): t from one ex2 and one rcp on the SFU and a
// copysign, no libdevice tanh; the element math rounded op by op, no spills.
// CHECK-LABEL: .visible .entry gelu_tanh_grad(
// CHECK-NOT: .local
// CHECK-NOT: fma.rn
// CHECK: ex2.approx.ftz.f32
// CHECK: rcp.approx.ftz.f32
// CHECK: copysign.f32
// CHECK-NOT: .local
// CHECK-NOT: fma.rn

func.func @silu_e4m3(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> {
  %y = coat.silu %x : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
      -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  return %y : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
}

func.func @residual_add_g64(%r: tensor<?x?xbf16>, %b: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, !coat.qtensor<?x?xf8E4M3FN, per_group<64>, scale = bf16>) {
  %s, %q = coat.residual_add %r, %b : tensor<?x?xbf16>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>, !coat.qtensor<?x?xf8E4M3FN, per_group<64>, scale = bf16>
  return %s, %q : tensor<?x?xbf16>, !coat.qtensor<?x?xf8E4M3FN, per_group<64>, scale = bf16>
}

func.func @swiglu_mul_grad_e4m3(%a: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
                                %b: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
                                %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xf32>) {
  %d1, %d2 = coat.swiglu_mul_grad %a, %b, %dy
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
        !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>, tensor<?x?xbf16>
  %m = coat.absmax %d2, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %d1, %d2, %m : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xf32>
}

func.func @rope_in_place(%x: tensor<?x3072xbf16> {coat.writable}, %c: tensor<?x64xf32>,
                         %s: tensor<?x64xf32>) -> tensor<?x3072xbf16> {
  %y = coat.rope %x, %c, %s rotated_heads = 32
      : tensor<?x3072xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x3072xbf16>
  return %y : tensor<?x3072xbf16>
}

func.func @rope_grad_maxima(%g: tensor<?x3072xbf16>, %c: tensor<?x64xf32>, %s: tensor<?x64xf32>)
    -> (tensor<?x3072xbf16>, tensor<?x192xf32>) {
  %dx = coat.rope_grad %g, %c, %s rotated_heads = 32
      : tensor<?x3072xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x3072xbf16>
  %m = coat.absmax %dx, per_group<16> epilogue : tensor<?x3072xbf16> -> tensor<?x192xf32>
  return %dx, %m : tensor<?x3072xbf16>, tensor<?x192xf32>
}

func.func @gelu_tanh_grad(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
                          %dy: tensor<?x?xbf16>) -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %dx = coat.gelu_grad %x, %dy {approximate = "tanh"}
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?x?xbf16>
      -> tensor<?x?xbf16>
  %m = coat.absmax %dx, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %dx, %m : tensor<?x?xbf16>, tensor<?x?xf32>
}
