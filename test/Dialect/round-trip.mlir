// Every coat type and op in its custom form, printed and re-parsed, and
// printed in generic form and re-parsed.
// RUN: coat-opt %s | coat-opt | FileCheck %s
// RUN: coat-opt %s --mlir-print-op-generic | coat-opt | FileCheck %s

// CHECK-LABEL: func.func @types
// CHECK-SAME: !coat.qtensor<f8E4M3FN, per_tensor>
// CHECK-SAME: !coat.qtensor<8192x4096xf8E5M2, per_tensor, scale = bf16>
// CHECK-SAME: !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>
// CHECK-SAME: !coat.qtensor<?x?xf8E4M3FN, per_group<16>>
// CHECK-SAME: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
// CHECK-SAME: !coat.qtensor<300x7xf8E4M3FN, flat_group<128>>
// CHECK-SAME: !coat.qtensor<4x300x200xf8E4M3FN, per_block<128x64>>
// CHECK-SAME: !coat.qtensor<2x16x64xf8E4M3FN, per_group<32>, expand>
func.func @types(%a: !coat.qtensor<f8E4M3FN, per_tensor>,
                 %b: !coat.qtensor<8192x4096xf8E5M2, per_tensor, scale = bf16>,
                 %c: !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>,
                 %d: !coat.qtensor<?x?xf8E4M3FN, per_group<16>>,
                 %e: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
                 %f: !coat.qtensor<300x7xf8E4M3FN, flat_group<128>, scale = f32>,
                 %g: !coat.qtensor<4x300x200xf8E4M3FN, per_block<128x64>>,
                 %h: !coat.qtensor<2x16x64xf8E4M3FN, per_group<32>, expand>) {
  return
}

// CHECK-LABEL: func.func @scaling_attrs
// CHECK-SAME: coat.kinds = [#coat.linear_kind<forward>, #coat.linear_kind<dgrad>, #coat.linear_kind<wgrad>]
// CHECK-SAME: coat.modes = [#coat.optimizer_mode<fixed>, #coat.optimizer_mode<reference>]
// CHECK-SAME: coat.scales = [#coat.scaling<per_tensor>, #coat.scaling<per_group<16>>, #coat.scaling<flat_group<128>>, #coat.scaling<per_block<128x128>>]
func.func @scaling_attrs() attributes {
    coat.scales = [#coat.scaling<per_tensor>, #coat.scaling<per_group<16>>,
                   #coat.scaling<flat_group<128>>, #coat.scaling<per_block<128x128>>],
    coat.kinds = [#coat.linear_kind<forward>, #coat.linear_kind<dgrad>,
                  #coat.linear_kind<wgrad>],
    coat.modes = [#coat.optimizer_mode<fixed>, #coat.optimizer_mode<reference>]} {
  return
}

// CHECK-LABEL: func.func @quantize_dequantize
// CHECK: coat.quantize %{{.*}} : tensor<16x64xbf16> -> !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>
// CHECK: coat.quantize %{{.*}} scale %{{.*}} : tensor<16x64xf32>, tensor<f32> -> !coat.qtensor<16x64xf8E5M2, per_tensor>
// CHECK: coat.quantize %{{.*}} {eps = 9.99999968E-21 : f32, expand_min = 8 : i64} : tensor<256xf32> -> !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand>
// CHECK: coat.dequantize %{{.*}} : !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<16x64xf32>
func.func @quantize_dequantize(%x: tensor<16x64xbf16>, %y: tensor<16x64xf32>,
                               %s: tensor<f32>, %m: tensor<256xf32>) -> tensor<16x64xf32> {
  %0 = coat.quantize %x : tensor<16x64xbf16> -> !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16>
  %1 = coat.quantize %y scale %s : tensor<16x64xf32>, tensor<f32> -> !coat.qtensor<16x64xf8E5M2, per_tensor>
  %2 = coat.quantize %m {eps = 1.0e-20 : f32, expand_min = 8 : i64} : tensor<256xf32> -> !coat.qtensor<256xf8E4M3FN, flat_group<128>, expand>
  %3 = coat.dequantize %0 : !coat.qtensor<16x64xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<16x64xf32>
  return %3 : tensor<16x64xf32>
}

// CHECK-LABEL: func.func @assemble_disassemble
// CHECK: coat.assemble %{{.*}}, %{{.*}} : tensor<300xf8E4M3FN>, tensor<3xf32> -> !coat.qtensor<300xf8E4M3FN, flat_group<128>>
// CHECK: coat.assemble %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<300xf8E4M3FN>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32> -> !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>
// CHECK: coat.disassemble %{{.*}} : !coat.qtensor<300xf8E4M3FN, flat_group<128>>{{$}}
// CHECK: coat.disassemble %{{.*}} : !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>{{$}}
func.func @assemble_disassemble(%d: tensor<300xf8E4M3FN>, %s: tensor<3xf32>,
                                %k: tensor<3xf32>, %c: tensor<3xf32>)
    -> (tensor<300xf8E4M3FN>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
  %q = coat.assemble %d, %s : tensor<300xf8E4M3FN>, tensor<3xf32> -> !coat.qtensor<300xf8E4M3FN, flat_group<128>>
  %e = coat.assemble %d, %s, %k, %c : tensor<300xf8E4M3FN>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32> -> !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>
  %d2, %s2 = coat.disassemble %q : !coat.qtensor<300xf8E4M3FN, flat_group<128>>
  %d3, %s3, %k3, %c3 = coat.disassemble %e : !coat.qtensor<300xf8E4M3FN, flat_group<128>, expand>
  return %d3, %s2, %k3, %c3 : tensor<300xf8E4M3FN>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
}

// CHECK-LABEL: func.func @adamw
// CHECK: coat.adamw_update %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<1024xf32>, tensor<1024xbf16>, tensor<1024xf32>
// CHECK: coat.adamw_step %{{.*}} {mode = #coat.optimizer_mode<reference>} : tensor<?xf32>, tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>>
func.func @adamw(%p: tensor<1024xf32>, %g: tensor<1024xbf16>, %m: tensor<1024xf32>,
                 %v: tensor<1024xf32>, %t: f32, %lr: f32, %b1: f32, %b2: f32,
                 %eps: f32, %wd: f32, %pd: tensor<?xf32>, %gd: tensor<?xf32>,
                 %qm: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
                 %qv: !coat.qtensor<?xf8E4M3FN, flat_group<128>>)
    -> (tensor<1024xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>) {
  %p2, %m2, %v2 = coat.adamw_update %p, %g, %m, %v, %t, %lr, %b1, %b2, %eps, %wd
      : tensor<1024xf32>, tensor<1024xbf16>, tensor<1024xf32>
  %p3, %m3, %v3 = coat.adamw_step %pd, %gd, %qm, %qv, %t, %lr, %b1, %b2, %eps, %wd {mode = #coat.optimizer_mode<reference>}
      : tensor<?xf32>, tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
        !coat.qtensor<?xf8E4M3FN, flat_group<128>>
  return %p2, %m3 : tensor<1024xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
}

// CHECK-LABEL: func.func @adamw_stochastic
// CHECK: coat.adamw_step %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} seed %{{.*}} {stochastic_moments, stochastic_param} : tensor<?xbf16>, tensor<?xbf16>
// CHECK: coat.adamw_step %{{.*}} seed %{{.*}} {stochastic_moments} : tensor<?xf32>, tensor<?xf32>
func.func @adamw_stochastic(%p: tensor<?xbf16>, %pf: tensor<?xf32>,
                            %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
                            %t: f32, %seed: i64)
    -> (tensor<?xbf16>, tensor<?xf32>) {
  %p2, %m2, %v2 = coat.adamw_step %p, %p, %m, %m, %t, %t, %t, %t, %t, %t seed %seed {stochastic_param, stochastic_moments}
      : tensor<?xbf16>, tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
        !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
  %p3, %m3, %v3 = coat.adamw_step %pf, %pf, %m, %m, %t, %t, %t, %t, %t, %t seed %seed {stochastic_moments}
      : tensor<?xf32>, tensor<?xf32>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
        !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>
  return %p2, %p3 : tensor<?xbf16>, tensor<?xf32>
}

// CHECK-LABEL: func.func @adamw_master
// CHECK: coat.adamw_step %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} grad_scale %{{.*}} master %{{.*}} : tensor<?xbf16>, tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, tensor<f32> master tensor<?xf32> -> tensor<?xf32>
func.func @adamw_master(%p: tensor<?xbf16>, %w: tensor<?xf32>,
                        %m: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
                        %t: f32, %s: tensor<f32>)
    -> (tensor<?xbf16>, tensor<?xf32>) {
  %p2, %m2, %v2, %w2 = coat.adamw_step %p, %p, %m, %m, %t, %t, %t, %t, %t, %t grad_scale %s master %w
      : tensor<?xbf16>, tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
        !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, tensor<f32> master tensor<?xf32> -> tensor<?xf32>
  return %p2, %w2 : tensor<?xbf16>, tensor<?xf32>
}

// CHECK-LABEL: func.func @adamw_grad_scale
// CHECK: coat.adamw_update %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} grad_scale %{{.*}} : tensor<1024xf32>, tensor<1024xbf16>, tensor<1024xf32>, tensor<f32>
// CHECK: coat.adamw_step %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} seed %{{.*}} grad_scale %{{.*}} {stochastic_param} : tensor<?xbf16>, tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, tensor<f32>
// CHECK: coat.adamw_step %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} grad_scale %{{.*}} : tensor<?xbf16>, tensor<?xbf16>
func.func @adamw_grad_scale(%p: tensor<1024xf32>, %g: tensor<1024xbf16>, %m: tensor<1024xf32>,
                            %pb: tensor<?xbf16>,
                            %q: !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
                            %t: f32, %seed: i64, %s: tensor<f32>)
    -> (tensor<1024xf32>, tensor<?xbf16>, tensor<?xbf16>) {
  %p2, %m2, %v2 = coat.adamw_update %p, %g, %m, %m, %t, %t, %t, %t, %t, %t grad_scale %s
      : tensor<1024xf32>, tensor<1024xbf16>, tensor<1024xf32>, tensor<f32>
  %p3, %m3, %v3 = coat.adamw_step %pb, %pb, %q, %q, %t, %t, %t, %t, %t, %t seed %seed grad_scale %s {stochastic_param}
      : tensor<?xbf16>, tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
        !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, tensor<f32>
  %p4, %m4, %v4 = coat.adamw_step %pb, %pb, %q, %q, %t, %t, %t, %t, %t, %t grad_scale %s
      : tensor<?xbf16>, tensor<?xbf16>, !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>,
        !coat.qtensor<?xf8E4M3FN, flat_group<128>, expand>, tensor<f32>
  return %p2, %p3, %p4 : tensor<1024xf32>, tensor<?xbf16>, tensor<?xbf16>
}

// CHECK-LABEL: func.func @requantize_transpose
// CHECK: coat.requantize %{{.*}} : !coat.qtensor<128x256xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<128x256xf8E4M3FN, per_tensor>
// CHECK: coat.requantize %{{.*}} {eps = 0.000000e+00 : f32} : !coat.qtensor<128x256xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<128x256xf8E4M3FN, per_block<128x64>>
// CHECK: coat.transpose %{{.*}} : !coat.qtensor<128x256xf8E4M3FN, per_tensor> -> !coat.qtensor<256x128xf8E4M3FN, per_tensor>
// CHECK: coat.transpose %{{.*}} : !coat.qtensor<128x256xf8E4M3FN, per_block<128x64>> -> !coat.qtensor<256x128xf8E4M3FN, per_block<64x128>>
// CHECK: coat.transpose %{{.*}} : !coat.qtensor<?x64xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<64x?xf8E5M2, per_tensor, scale = bf16>
func.func @requantize_transpose(%q: !coat.qtensor<128x256xf8E4M3FN, per_group<16>, scale = bf16>,
                                %d: !coat.qtensor<?x64xf8E5M2, per_tensor, scale = bf16>)
    -> (!coat.qtensor<256x128xf8E4M3FN, per_tensor>,
        !coat.qtensor<256x128xf8E4M3FN, per_block<64x128>>,
        !coat.qtensor<64x?xf8E5M2, per_tensor, scale = bf16>) {
  %0 = coat.requantize %q : !coat.qtensor<128x256xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<128x256xf8E4M3FN, per_tensor>
  %1 = coat.requantize %q {eps = 0.0 : f32} : !coat.qtensor<128x256xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<128x256xf8E4M3FN, per_block<128x64>>
  %2 = coat.transpose %0 : !coat.qtensor<128x256xf8E4M3FN, per_tensor> -> !coat.qtensor<256x128xf8E4M3FN, per_tensor>
  %3 = coat.transpose %1 : !coat.qtensor<128x256xf8E4M3FN, per_block<128x64>> -> !coat.qtensor<256x128xf8E4M3FN, per_block<64x128>>
  %4 = coat.transpose %d : !coat.qtensor<?x64xf8E5M2, per_tensor, scale = bf16> -> !coat.qtensor<64x?xf8E5M2, per_tensor, scale = bf16>
  return %2, %3, %4 : !coat.qtensor<256x128xf8E4M3FN, per_tensor>, !coat.qtensor<256x128xf8E4M3FN, per_block<64x128>>, !coat.qtensor<64x?xf8E5M2, per_tensor, scale = bf16>
}

// CHECK-LABEL: func.func @absmax
// CHECK: coat.absmax %{{.*}}, per_tensor : tensor<128x256xbf16> -> tensor<f32>
// CHECK: coat.absmax %{{.*}}, per_group<16> : tensor<128x256xbf16> -> tensor<128x16xf32>
// CHECK: coat.absmax %{{.*}}, flat_group<128> : tensor<300x7xf32> -> tensor<17xf32>
// CHECK: coat.absmax %{{.*}}, per_block<128x128> : tensor<300x200xf32> -> tensor<3x2xf32>
// CHECK: coat.absmax %{{.*}}, per_group<16> : tensor<?x256xf16> -> tensor<?x16xf32>
// CHECK: coat.reduce_scales %{{.*}} : tensor<128x16xf32> -> tensor<f32>
// CHECK: coat.reduce_scales %{{.*}} : tensor<16x4xbf16> -> tensor<bf16>
func.func @absmax(%x: tensor<128x256xbf16>, %y: tensor<300x7xf32>,
                  %z: tensor<300x200xf32>, %w: tensor<?x256xf16>,
                  %s: tensor<16x4xbf16>)
    -> (tensor<f32>, tensor<f32>, tensor<17xf32>, tensor<3x2xf32>,
        tensor<?x16xf32>, tensor<bf16>) {
  %0 = coat.absmax %x, per_tensor : tensor<128x256xbf16> -> tensor<f32>
  %1 = coat.absmax %x, per_group<16> : tensor<128x256xbf16> -> tensor<128x16xf32>
  %2 = coat.absmax %y, flat_group<128> : tensor<300x7xf32> -> tensor<17xf32>
  %3 = coat.absmax %z, per_block<128x128> : tensor<300x200xf32> -> tensor<3x2xf32>
  %4 = coat.absmax %w, per_group<16> : tensor<?x256xf16> -> tensor<?x16xf32>
  %5 = coat.reduce_scales %1 : tensor<128x16xf32> -> tensor<f32>
  %6 = coat.reduce_scales %s : tensor<16x4xbf16> -> tensor<bf16>
  return %0, %5, %2, %3, %4, %6 : tensor<f32>, tensor<f32>, tensor<17xf32>, tensor<3x2xf32>, tensor<?x16xf32>, tensor<bf16>
}

// CHECK-LABEL: func.func @linear
// CHECK: coat.linear forward %{{.*}}, %{{.*}} : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
// CHECK: coat.linear forward %{{.*}}, %{{.*}} bias %{{.*}} : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor>, tensor<512xf32> -> tensor<128x512xf32>
// CHECK: coat.linear forward %{{.*}}, %{{.*}} : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>
// CHECK: coat.linear forward %{{.*}}, %{{.*}} : !coat.qtensor<128x256xf8E4M3FN, per_group<128>>, !coat.qtensor<512x256xf8E4M3FN, per_block<128x128>> -> tensor<128x512xbf16>
// CHECK: coat.linear dgrad %{{.*}}, %{{.*}} : !coat.qtensor<128x512xf8E5M2, per_tensor>, !coat.qtensor<256x512xf8E4M3FN, per_tensor> -> tensor<128x256xbf16>
// CHECK: coat.linear wgrad %{{.*}}, %{{.*}} : !coat.qtensor<512x128xf8E5M2, per_tensor>, !coat.qtensor<256x128xf8E4M3FN, per_tensor> -> tensor<512x256xbf16>
// CHECK: coat.linear wgrad %{{.*}}, %{{.*}} : !coat.qtensor<512x128xf8E4M3FN, per_group<128>>, !coat.qtensor<256x128xf8E4M3FN, per_block<128x128>> -> tensor<512x256xf32>
func.func @linear(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
                  %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>,
                  %b: tensor<512xf32>,
                  %xb: !coat.qtensor<128x256xf8E4M3FN, per_group<128>>,
                  %wb: !coat.qtensor<512x256xf8E4M3FN, per_block<128x128>>,
                  %dy: !coat.qtensor<128x512xf8E5M2, per_tensor>,
                  %wt: !coat.qtensor<256x512xf8E4M3FN, per_tensor>,
                  %dyt: !coat.qtensor<512x128xf8E5M2, per_tensor>,
                  %xt: !coat.qtensor<256x128xf8E4M3FN, per_tensor>,
                  %dytb: !coat.qtensor<512x128xf8E4M3FN, per_group<128>>,
                  %xtb: !coat.qtensor<256x128xf8E4M3FN, per_block<128x128>>)
    -> (tensor<128x512xbf16>, tensor<128x512xf32>,
        !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>,
        tensor<128x512xbf16>, tensor<128x256xbf16>, tensor<512x256xbf16>,
        tensor<512x256xf32>) {
  %0 = coat.linear forward %x, %w : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
  %1 = coat.linear forward %x, %w bias %b : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor>, tensor<512xf32> -> tensor<128x512xf32>
  %2 = coat.linear forward %x, %w : !coat.qtensor<128x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>
  %3 = coat.linear forward %xb, %wb : !coat.qtensor<128x256xf8E4M3FN, per_group<128>>, !coat.qtensor<512x256xf8E4M3FN, per_block<128x128>> -> tensor<128x512xbf16>
  %4 = coat.linear dgrad %dy, %wt : !coat.qtensor<128x512xf8E5M2, per_tensor>, !coat.qtensor<256x512xf8E4M3FN, per_tensor> -> tensor<128x256xbf16>
  %5 = coat.linear wgrad %dyt, %xt : !coat.qtensor<512x128xf8E5M2, per_tensor>, !coat.qtensor<256x128xf8E4M3FN, per_tensor> -> tensor<512x256xbf16>
  %6 = coat.linear wgrad %dytb, %xtb : !coat.qtensor<512x128xf8E4M3FN, per_group<128>>, !coat.qtensor<256x128xf8E4M3FN, per_block<128x128>> -> tensor<512x256xf32>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<128x512xbf16>, tensor<128x512xf32>, !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<128x512xbf16>, tensor<128x256xbf16>, tensor<512x256xbf16>, tensor<512x256xf32>
}

// A sum of GEMM results in the last GEMM's epilogue (coat-fuse-linear-sum),
// also with a bias.
// CHECK-LABEL: func.func @addend
// CHECK: coat.linear dgrad %{{.*}}, %{{.*}} addend(%{{.*}} : tensor<?x256xbf16>) : !coat.qtensor<?x512xf8E5M2, per_tensor>, !coat.qtensor<256x512xf8E4M3FN, per_tensor> -> tensor<?x256xbf16>
// CHECK: coat.linear forward %{{.*}}, %{{.*}} bias %{{.*}} addend(%{{.*}} : tensor<?x512xf32>) : !coat.qtensor<?x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor>, tensor<512xf32> -> tensor<?x512xf32>
func.func @addend(%dy: !coat.qtensor<?x512xf8E5M2, per_tensor>,
                  %wt: !coat.qtensor<256x512xf8E4M3FN, per_tensor>, %c: tensor<?x256xbf16>,
                  %x: !coat.qtensor<?x256xf8E4M3FN, per_tensor>,
                  %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>, %b: tensor<512xf32>,
                  %d: tensor<?x512xf32>) -> (tensor<?x256xbf16>, tensor<?x512xf32>) {
  %0 = coat.linear dgrad %dy, %wt addend(%c : tensor<?x256xbf16>) : !coat.qtensor<?x512xf8E5M2, per_tensor>, !coat.qtensor<256x512xf8E4M3FN, per_tensor> -> tensor<?x256xbf16>
  %1 = coat.linear forward %x, %w bias %b addend(%d : tensor<?x512xf32>) : !coat.qtensor<?x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor>, tensor<512xf32> -> tensor<?x512xf32>
  return %0, %1 : tensor<?x256xbf16>, tensor<?x512xf32>
}

// A bf16 bias (a model's), also in front of a 1x16 FP8 result, and its
// gradient over a dynamic token extent.
// CHECK-LABEL: func.func @bias
// CHECK: coat.linear forward %{{.*}}, %{{.*}} bias %{{.*}} : !coat.qtensor<?x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor>, tensor<512xbf16> -> tensor<?x512xbf16>
// CHECK: coat.linear forward %{{.*}}, %{{.*}} bias %{{.*}} : !coat.unresolved<?x256xbf16>, !coat.unresolved<512x256xbf16>, tensor<512xbf16> -> !coat.qtensor<?x512xf8E4M3FN, per_group<16>, scale = bf16>
// CHECK: coat.bias_grad %{{.*}} : tensor<?x512xbf16> -> tensor<512xbf16>
// CHECK: coat.bias_grad %{{.*}} : tensor<100x48xf32> -> tensor<48xf32>
func.func @bias(%x: !coat.qtensor<?x256xf8E4M3FN, per_tensor>,
                %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>,
                %xu: !coat.unresolved<?x256xbf16>, %wu: !coat.unresolved<512x256xbf16>,
                %b: tensor<512xbf16>, %dy: tensor<?x512xbf16>, %dyf: tensor<100x48xf32>)
    -> (tensor<?x512xbf16>, !coat.qtensor<?x512xf8E4M3FN, per_group<16>, scale = bf16>,
        tensor<512xbf16>, tensor<48xf32>) {
  %0 = coat.linear forward %x, %w bias %b : !coat.qtensor<?x256xf8E4M3FN, per_tensor>, !coat.qtensor<512x256xf8E4M3FN, per_tensor>, tensor<512xbf16> -> tensor<?x512xbf16>
  %1 = coat.linear forward %xu, %wu bias %b : !coat.unresolved<?x256xbf16>, !coat.unresolved<512x256xbf16>, tensor<512xbf16> -> !coat.qtensor<?x512xf8E4M3FN, per_group<16>, scale = bf16>
  %2 = coat.bias_grad %dy : tensor<?x512xbf16> -> tensor<512xbf16>
  %3 = coat.bias_grad %dyf : tensor<100x48xf32> -> tensor<48xf32>
  return %0, %1, %2, %3 : tensor<?x512xbf16>, !coat.qtensor<?x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<512xbf16>, tensor<48xf32>
}

// CHECK-LABEL: func.func @activations
// CHECK: coat.silu %{{.*}} : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>
// CHECK: coat.silu_grad %{{.*}}, %{{.*}} : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<128x512xbf16> -> tensor<128x512xbf16>{{$}}
// CHECK: coat.silu_grad %{{.*}}, %{{.*}} : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<128x512xbf16> -> tensor<128x512xbf16>, !coat.qtensor<128x512xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<512x128xf8E5M2, per_tensor, scale = bf16>
// CHECK: coat.gelu %{{.*}} : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<128x512xf8E4M3FN, per_tensor>{{$}}
// CHECK: coat.gelu %{{.*}} : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<128x512xf8E4M3FN, per_tensor>, !coat.qtensor<512x128xf8E4M3FN, per_tensor>
// CHECK: coat.gelu_grad %{{.*}}, %{{.*}} : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<128x512xf32> -> tensor<128x512xf32>, !coat.qtensor<128x512xf8E5M2, per_tensor>{{$}}
func.func @activations(%x: !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>,
                       %dy: tensor<128x512xbf16>, %dyf: tensor<128x512xf32>)
    -> (!coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>,
        tensor<128x512xbf16>, !coat.qtensor<512x128xf8E5M2, per_tensor, scale = bf16>,
        !coat.qtensor<128x512xf8E4M3FN, per_tensor>,
        !coat.qtensor<512x128xf8E4M3FN, per_tensor>,
        !coat.qtensor<128x512xf8E5M2, per_tensor>) {
  %0 = coat.silu %x : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>
  %1 = coat.silu_grad %x, %dy : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<128x512xbf16> -> tensor<128x512xbf16>
  %2:3 = coat.silu_grad %x, %dy : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<128x512xbf16> -> tensor<128x512xbf16>, !coat.qtensor<128x512xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<512x128xf8E5M2, per_tensor, scale = bf16>
  %3 = coat.gelu %x : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<128x512xf8E4M3FN, per_tensor>
  %4:2 = coat.gelu %x : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<128x512xf8E4M3FN, per_tensor>, !coat.qtensor<512x128xf8E4M3FN, per_tensor>
  %5:2 = coat.gelu_grad %x, %dyf : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<128x512xf32> -> tensor<128x512xf32>, !coat.qtensor<128x512xf8E5M2, per_tensor>
  return %0, %1, %2#2, %3, %4#1, %5#1 : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<128x512xbf16>, !coat.qtensor<512x128xf8E5M2, per_tensor, scale = bf16>, !coat.qtensor<128x512xf8E4M3FN, per_tensor>, !coat.qtensor<512x128xf8E4M3FN, per_tensor>, !coat.qtensor<128x512xf8E5M2, per_tensor>
}

// GELU's tanh form is an attribute of both ops; the exact form ("none") is
// the default and is not printed, even when written out.
// CHECK-LABEL: func.func @gelu_tanh
// CHECK: coat.gelu %{{.*}} {approximate = "tanh"} : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<128x512xbf16>{{$}}
// CHECK: coat.gelu_grad %{{.*}}, %{{.*}} {approximate = "tanh"} : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<128x512xbf16> -> tensor<128x512xbf16>, !coat.qtensor<128x512xf8E5M2, per_tensor>{{$}}
// CHECK: coat.gelu %{{.*}} : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<128x512xbf16>{{$}}
func.func @gelu_tanh(%x: !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>,
                     %dy: tensor<128x512xbf16>)
    -> (tensor<128x512xbf16>, !coat.qtensor<128x512xf8E5M2, per_tensor>, tensor<128x512xbf16>) {
  %0 = coat.gelu %x {approximate = "tanh"} : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<128x512xbf16>
  %1:2 = coat.gelu_grad %x, %dy {approximate = "tanh"} : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<128x512xbf16> -> tensor<128x512xbf16>, !coat.qtensor<128x512xf8E5M2, per_tensor>
  %2 = coat.gelu %x {approximate = "none"} : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<128x512xbf16>
  return %0, %1#1, %2 : tensor<128x512xbf16>, !coat.qtensor<128x512xf8E5M2, per_tensor>, tensor<128x512xbf16>
}

// CHECK-LABEL: func.func @swiglu
// CHECK: coat.swiglu_mul %{{.*}}, %{{.*}} : !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>>, !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<2x64x512xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<512x128xf8E4M3FN, per_tensor, scale = bf16>
// CHECK: coat.swiglu_mul_grad %{{.*}}, %{{.*}}, %{{.*}} : !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>>, !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<2x64x512xbf16> -> tensor<2x64x512xbf16>, tensor<2x64x512xbf16>, !coat.qtensor<2x64x512xf8E5M2, per_tensor>, !coat.qtensor<512x128xf8E5M2, per_tensor>
// CHECK: coat.swiglu_mul_grad %{{.*}}, %{{.*}}, %{{.*}} : !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>>, !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<2x64x512xbf16> -> tensor<2x64x512xbf16>, tensor<2x64x512xbf16>{{$}}
func.func @swiglu(%a: !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>>,
                  %b: !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>, scale = bf16>,
                  %dy: tensor<2x64x512xbf16>)
    -> (!coat.qtensor<512x128xf8E4M3FN, per_tensor, scale = bf16>,
        !coat.qtensor<512x128xf8E5M2, per_tensor>, tensor<2x64x512xbf16>) {
  %y, %yt = coat.swiglu_mul %a, %b : !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>>, !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>, scale = bf16> -> !coat.qtensor<2x64x512xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<512x128xf8E4M3FN, per_tensor, scale = bf16>
  %d1, %d2, %d2q, %d2t = coat.swiglu_mul_grad %a, %b, %dy : !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>>, !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<2x64x512xbf16> -> tensor<2x64x512xbf16>, tensor<2x64x512xbf16>, !coat.qtensor<2x64x512xf8E5M2, per_tensor>, !coat.qtensor<512x128xf8E5M2, per_tensor>
  %e1, %e2 = coat.swiglu_mul_grad %a, %b, %dy : !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>>, !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<2x64x512xbf16> -> tensor<2x64x512xbf16>, tensor<2x64x512xbf16>
  return %yt, %d2t, %e1 : !coat.qtensor<512x128xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<512x128xf8E5M2, per_tensor>, tensor<2x64x512xbf16>
}

// CHECK-LABEL: func.func @residual
// CHECK: coat.residual_add %{{.*}}, %{{.*}} : tensor<128x512xbf16>, tensor<128x512xbf16> -> tensor<128x512xbf16>, !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>
// CHECK: coat.residual_add_grad %{{.*}}, %{{.*}} : tensor<128x512xbf16>, tensor<128x512xbf16> -> tensor<128x512xbf16>, !coat.qtensor<128x512xf8E5M2, per_tensor, scale = bf16>
func.func @residual(%r: tensor<128x512xbf16>, %o: tensor<128x512xbf16>)
    -> (!coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>,
        !coat.qtensor<128x512xf8E5M2, per_tensor, scale = bf16>) {
  %h, %hq = coat.residual_add %r, %o : tensor<128x512xbf16>, tensor<128x512xbf16> -> tensor<128x512xbf16>, !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>
  %g, %gq = coat.residual_add_grad %h, %o : tensor<128x512xbf16>, tensor<128x512xbf16> -> tensor<128x512xbf16>, !coat.qtensor<128x512xf8E5M2, per_tensor, scale = bf16>
  return %hq, %gq : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, !coat.qtensor<128x512xf8E5M2, per_tensor, scale = bf16>
}

// CHECK-LABEL: func.func @rmsnorm
// CHECK: coat.rmsnorm %{{.*}}, %{{.*}} eps = 9.99999974E-6 : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<512xbf16> -> !coat.qtensor<128x512xf8E4M3FN, per_tensor, scale = bf16>, tensor<128xf32>, !coat.qtensor<512x128xf8E4M3FN, per_tensor, scale = bf16>
// CHECK: coat.rmsnorm %{{.*}} eps = 9.99999997E-7 : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<512xbf16> -> !coat.qtensor<128x512xf8E4M3FN, per_tensor>, tensor<128xf32>{{$}}
// CHECK: coat.rmsnorm_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<512xbf16>, tensor<128xf32>, tensor<128x512xbf16> -> tensor<128x512xbf16>, tensor<512xbf16>
func.func @rmsnorm(%x: !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>,
                   %w: tensor<512xbf16>, %dy: tensor<128x512xbf16>)
    -> (!coat.qtensor<512x128xf8E4M3FN, per_tensor, scale = bf16>,
        !coat.qtensor<128x512xf8E4M3FN, per_tensor>, tensor<128x512xbf16>,
        tensor<512xbf16>) {
  %y, %rstd, %yt = coat.rmsnorm %x, %w eps = 1.0e-5 : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<512xbf16> -> !coat.qtensor<128x512xf8E4M3FN, per_tensor, scale = bf16>, tensor<128xf32>, !coat.qtensor<512x128xf8E4M3FN, per_tensor, scale = bf16>
  %y2, %rstd2 = coat.rmsnorm %x, %w eps = 1.0e-6 : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<512xbf16> -> !coat.qtensor<128x512xf8E4M3FN, per_tensor>, tensor<128xf32>
  %dx, %dw = coat.rmsnorm_grad %x, %w, %rstd, %dy : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = bf16>, tensor<512xbf16>, tensor<128xf32>, tensor<128x512xbf16> -> tensor<128x512xbf16>, tensor<512xbf16>
  return %yt, %y2, %dx, %dw : !coat.qtensor<512x128xf8E4M3FN, per_tensor, scale = bf16>, !coat.qtensor<128x512xf8E4M3FN, per_tensor>, tensor<128x512xbf16>, tensor<512xbf16>
}

// CHECK-LABEL: func.func @layernorm
// CHECK: coat.layernorm %{{.*}} eps = 9.99999974E-6 : !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>> -> !coat.qtensor<2x64x512xf8E4M3FN, per_tensor>, tensor<2x64xf32>, tensor<2x64xf32>{{$}}
// CHECK: coat.layernorm %{{.*}} weight %{{.*}} eps = 9.99999974E-6 : !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>>, tensor<512xf32> -> !coat.qtensor<2x64x512xf8E4M3FN, per_tensor>, tensor<2x64xf32>, tensor<2x64xf32>{{$}}
// CHECK: coat.layernorm %{{.*}} weight %{{.*}} bias %{{.*}} eps = 9.99999974E-6 : !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>>, tensor<512xf32>, tensor<512xf32> -> !coat.qtensor<2x64x512xf8E4M3FN, per_tensor>, tensor<2x64xf32>, tensor<2x64xf32>, !coat.qtensor<512x128xf8E4M3FN, per_tensor>
// CHECK: coat.layernorm_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>>, tensor<2x64xf32>, tensor<2x64xf32>, tensor<2x64x512xbf16> -> tensor<2x64x512xbf16>{{$}}
// CHECK: coat.layernorm_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} weight %{{.*}} : !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>>, tensor<2x64xf32>, tensor<2x64xf32>, tensor<2x64x512xbf16>, tensor<512xf32> -> tensor<2x64x512xbf16>, tensor<512xf32>, tensor<512xf32>
func.func @layernorm(%x: !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>>,
                     %w: tensor<512xf32>, %b: tensor<512xf32>,
                     %dy: tensor<2x64x512xbf16>)
    -> (!coat.qtensor<2x64x512xf8E4M3FN, per_tensor>,
        !coat.qtensor<2x64x512xf8E4M3FN, per_tensor>,
        !coat.qtensor<512x128xf8E4M3FN, per_tensor>,
        tensor<2x64x512xbf16>, tensor<512xf32>) {
  %y, %mu, %rs = coat.layernorm %x eps = 1.0e-5 : !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>> -> !coat.qtensor<2x64x512xf8E4M3FN, per_tensor>, tensor<2x64xf32>, tensor<2x64xf32>
  %y1, %mu1, %rs1 = coat.layernorm %x weight %w eps = 1.0e-5 : !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>>, tensor<512xf32> -> !coat.qtensor<2x64x512xf8E4M3FN, per_tensor>, tensor<2x64xf32>, tensor<2x64xf32>
  %y2, %mu2, %rs2, %yt2 = coat.layernorm %x weight %w bias %b eps = 1.0e-5 : !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>>, tensor<512xf32>, tensor<512xf32> -> !coat.qtensor<2x64x512xf8E4M3FN, per_tensor>, tensor<2x64xf32>, tensor<2x64xf32>, !coat.qtensor<512x128xf8E4M3FN, per_tensor>
  %dx = coat.layernorm_grad %x, %mu, %rs, %dy : !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>>, tensor<2x64xf32>, tensor<2x64xf32>, tensor<2x64x512xbf16> -> tensor<2x64x512xbf16>
  %dx2, %dw2, %db2 = coat.layernorm_grad %x, %mu2, %rs2, %dy weight %w : !coat.qtensor<2x64x512xf8E4M3FN, per_group<16>>, tensor<2x64xf32>, tensor<2x64xf32>, tensor<2x64x512xbf16>, tensor<512xf32> -> tensor<2x64x512xbf16>, tensor<512xf32>, tensor<512xf32>
  return %y, %y1, %yt2, %dx, %db2 : !coat.qtensor<2x64x512xf8E4M3FN, per_tensor>, !coat.qtensor<2x64x512xf8E4M3FN, per_tensor>, !coat.qtensor<512x128xf8E4M3FN, per_tensor>, tensor<2x64x512xbf16>, tensor<512xf32>
}

// The unquantized forms: forward flow ops returning their values in high
// precision, and the plain residual gradient sum.
// CHECK-LABEL: func.func @unquantized_results
// CHECK: coat.silu %{{.*}} : !coat.qtensor<16x64xf8E4M3FN, per_group<16>> -> tensor<16x64xbf16>
// CHECK: coat.swiglu_mul %{{.*}}, %{{.*}} : !coat.qtensor<16x64xf8E4M3FN, per_group<16>>, !coat.qtensor<16x64xf8E4M3FN, per_group<16>> -> tensor<16x64xbf16>{{$}}
// CHECK: coat.rmsnorm %{{.*}}, %{{.*}} eps = {{.*}} -> tensor<16x64xbf16>, tensor<16xf32>{{$}}
// CHECK: coat.layernorm %{{.*}} eps = {{.*}} -> tensor<16x64xf32>, tensor<16xf32>, tensor<16xf32>{{$}}
// CHECK: coat.residual_add_grad %{{.*}}, %{{.*}} : tensor<16x64xbf16>, tensor<16x64xbf16> -> tensor<16x64xbf16>{{$}}
func.func @unquantized_results(%x: !coat.qtensor<16x64xf8E4M3FN, per_group<16>>,
                               %w: tensor<64xbf16>, %g: tensor<16x64xbf16>)
    -> (tensor<16x64xbf16>, tensor<16x64xbf16>, tensor<16x64xbf16>,
        tensor<16x64xf32>, tensor<16x64xbf16>) {
  %s = coat.silu %x : !coat.qtensor<16x64xf8E4M3FN, per_group<16>> -> tensor<16x64xbf16>
  %m = coat.swiglu_mul %x, %x : !coat.qtensor<16x64xf8E4M3FN, per_group<16>>, !coat.qtensor<16x64xf8E4M3FN, per_group<16>> -> tensor<16x64xbf16>
  %n, %rstd = coat.rmsnorm %x, %w eps = 1.0e-5 : !coat.qtensor<16x64xf8E4M3FN, per_group<16>>, tensor<64xbf16> -> tensor<16x64xbf16>, tensor<16xf32>
  %l, %mean, %rstd2 = coat.layernorm %x eps = 1.0e-5 : !coat.qtensor<16x64xf8E4M3FN, per_group<16>> -> tensor<16x64xf32>, tensor<16xf32>, tensor<16xf32>
  %d = coat.residual_add_grad %g, %g : tensor<16x64xbf16>, tensor<16x64xbf16> -> tensor<16x64xbf16>
  return %s, %m, %n, %l, %d : tensor<16x64xbf16>, tensor<16x64xbf16>, tensor<16x64xbf16>, tensor<16x64xf32>, tensor<16x64xbf16>
}

// Rotary embedding of q and k (32 of the 48 heads of 64 columns) and its
// backward; the token count is dynamic, as in generated programs.
// CHECK-LABEL: func.func @rope
// CHECK: coat.rope %{{.*}}, %{{.*}}, %{{.*}} rotated_heads = 32 : tensor<?x3072xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x3072xbf16>
// CHECK: coat.rope_grad %{{.*}}, %{{.*}}, %{{.*}} rotated_heads = 40 : tensor<7x6144xf32>, tensor<7x128xbf16>, tensor<7x128xbf16> -> tensor<7x6144xf32>
func.func @rope(%qkv: tensor<?x3072xbf16>, %cos: tensor<?x64xf32>, %sin: tensor<?x64xf32>,
                %g: tensor<7x6144xf32>, %c: tensor<7x128xbf16>, %s: tensor<7x128xbf16>)
    -> (tensor<?x3072xbf16>, tensor<7x6144xf32>) {
  %y = coat.rope %qkv, %cos, %sin rotated_heads = 32 : tensor<?x3072xbf16>, tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x3072xbf16>
  %dx = coat.rope_grad %g, %c, %s rotated_heads = 40 : tensor<7x6144xf32>, tensor<7x128xbf16>, tensor<7x128xbf16> -> tensor<7x6144xf32>
  return %y, %dx : tensor<?x3072xbf16>, tensor<7x6144xf32>
}

// The softmax cross-entropy: the default ignore_index is not printed,
// another one is; a writable logits argument (the gradient may take its
// buffer).
// CHECK-LABEL: func.func @cross_entropy
// CHECK-SAME: {coat.writable}
// CHECK: coat.cross_entropy %{{.*}}, %{{.*}} : tensor<?x32000xbf16>, tensor<?xi64> -> tensor<?xf32>, tensor<?x32000xbf16>
// CHECK: coat.cross_entropy %{{.*}}, %{{.*}} ignore_index = 0 : tensor<3x17xbf16>, tensor<3xi64> -> tensor<3xf32>, tensor<3x17xbf16>
func.func @cross_entropy(%x: tensor<?x32000xbf16> {coat.writable}, %t: tensor<?xi64>,
                         %y: tensor<3x17xbf16>, %u: tensor<3xi64>)
    -> (tensor<?xf32>, tensor<?x32000xbf16>, tensor<3xf32>, tensor<3x17xbf16>) {
  %l, %g = coat.cross_entropy %x, %t ignore_index = -100 : tensor<?x32000xbf16>, tensor<?xi64> -> tensor<?xf32>, tensor<?x32000xbf16>
  %l2, %g2 = coat.cross_entropy %y, %u ignore_index = 0 : tensor<3x17xbf16>, tensor<3xi64> -> tensor<3xf32>, tensor<3x17xbf16>
  return %l, %g, %l2, %g2 : tensor<?xf32>, tensor<?x32000xbf16>, tensor<3xf32>, tensor<3x17xbf16>
}

// The SwiGLU with its SiLU folded in (coat-fuse-silu): the products take
// the gate.
// CHECK-LABEL: func.func @silu_gate
// CHECK: coat.swiglu_mul %{{.*}}, %{{.*}} {silu_gate} : !coat.qtensor<16x64xf8E4M3FN, per_group<16>>, !coat.qtensor<16x64xf8E4M3FN, per_group<16>> -> tensor<16x64xbf16>{{$}}
// CHECK: coat.swiglu_mul_grad %{{.*}}, %{{.*}}, %{{.*}} {silu_gate} : !coat.qtensor<16x64xf8E4M3FN, per_group<16>>, !coat.qtensor<16x64xf8E4M3FN, per_group<16>>, tensor<16x64xbf16> -> tensor<16x64xbf16>, tensor<16x64xbf16>{{$}}
func.func @silu_gate(%gate: !coat.qtensor<16x64xf8E4M3FN, per_group<16>>,
                     %up: !coat.qtensor<16x64xf8E4M3FN, per_group<16>>, %g: tensor<16x64xbf16>)
    -> (tensor<16x64xbf16>, tensor<16x64xbf16>, tensor<16x64xbf16>) {
  %m = coat.swiglu_mul %gate, %up {silu_gate} : !coat.qtensor<16x64xf8E4M3FN, per_group<16>>, !coat.qtensor<16x64xf8E4M3FN, per_group<16>> -> tensor<16x64xbf16>
  %dgate, %dup = coat.swiglu_mul_grad %gate, %up, %g {silu_gate} : !coat.qtensor<16x64xf8E4M3FN, per_group<16>>, !coat.qtensor<16x64xf8E4M3FN, per_group<16>>, tensor<16x64xbf16> -> tensor<16x64xbf16>, tensor<16x64xbf16>
  return %m, %dgate, %dup : tensor<16x64xbf16>, tensor<16x64xbf16>, tensor<16x64xbf16>
}
