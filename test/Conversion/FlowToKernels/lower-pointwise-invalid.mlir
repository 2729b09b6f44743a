// RUN: coat-opt %s -split-input-file -verify-diagnostics -coat-lower-pointwise

// A per-tensor result needs the maximum of the whole tensor.
func.func @per_tensor_result(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> {
  // expected-error @+1 {{result 'y': a pointwise kernel writes per_group<G> FP8 results only; a per-tensor result needs the maximum of the whole tensor: run coat-group-scaling}}
  %y = coat.gelu %x : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
      -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  return %y : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
}

// -----

func.func @transposed(%a: !coat.qtensor<?x?xf8E4M3FN, per_group<16>>, %b: !coat.qtensor<?x?xf8E4M3FN, per_group<16>>)
    -> (!coat.qtensor<?x?xf8E4M3FN, per_tensor>, !coat.qtensor<?x?xf8E4M3FN, per_tensor>) {
  // expected-error @+1 {{transposed FP8 copies need the per-tensor scale of the whole result: run coat-group-scaling}}
  %y, %t = coat.swiglu_mul %a, %b : !coat.qtensor<?x?xf8E4M3FN, per_group<16>>, !coat.qtensor<?x?xf8E4M3FN, per_group<16>>
      -> !coat.qtensor<?x?xf8E4M3FN, per_tensor>, !coat.qtensor<?x?xf8E4M3FN, per_tensor>
  return %y, %t : !coat.qtensor<?x?xf8E4M3FN, per_tensor>, !coat.qtensor<?x?xf8E4M3FN, per_tensor>
}

// -----

func.func @mixed_groups(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>>, %dy: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %dx = coat.silu_grad %x, %dy : !coat.qtensor<?x?xf8E4M3FN, per_group<16>>, tensor<?x?xbf16> -> tensor<?x?xbf16>
  // expected-error @+1 {{all grouped operands, results and maxima of a pointwise kernel must share one group size; the maxima has 32, another has 16}}
  %m = coat.absmax %dx, per_group<32> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %dx, %m : tensor<?x?xbf16>, tensor<?x?xf32>
}

// -----

func.func @not_epilogue(%a: tensor<?x?xbf16>, %b: tensor<?x?xbf16>) -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %s = coat.residual_add_grad %a, %b : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?x?xbf16>
  // expected-error @+1 {{only `coat.absmax ... epilogue` of a result of the flow op fuses into a pointwise kernel}}
  %m = coat.absmax %s, per_group<16> : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %s, %m : tensor<?x?xbf16>, tensor<?x?xf32>
}

// -----

func.func @other_op(%a: tensor<?x?xbf16>, %b: tensor<?x?xbf16>) -> tensor<?x?xbf16> {
  %s = coat.residual_add_grad %a, %b : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?x?xbf16>
  // expected-error @+1 {{a pointwise kernel spec holds one flow op and coat.absmax ... epilogue ops on its results, nothing else}}
  %t = arith.addf %s, %s : tensor<?x?xbf16>
  return %t : tensor<?x?xbf16>
}

// -----

func.func @wrong_return(%a: tensor<?x?xbf16>, %b: tensor<?x?xbf16>) -> (tensor<?x?xf32>, tensor<?x?xbf16>) {
  %s = coat.residual_add_grad %a, %b : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?x?xbf16>
  %m = coat.absmax %s, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  // expected-error @+1 {{a pointwise kernel spec returns the flow op's results, then its epilogue maxima, in order}}
  return %m, %s : tensor<?x?xf32>, tensor<?x?xbf16>
}

// -----

func.func @rank3(%a: tensor<2x4x16xbf16>, %b: tensor<2x4x16xbf16>) -> tensor<2x4x16xbf16> {
  // expected-error @+1 {{pointwise kernels take 2-D [rows, cols] operands and results; operand 'a' has type 'tensor<2x4x16xbf16>'}}
  %s = coat.residual_add_grad %a, %b : tensor<2x4x16xbf16>, tensor<2x4x16xbf16> -> tensor<2x4x16xbf16>
  return %s : tensor<2x4x16xbf16>
}

// -----

// expected-error @+1 {{kernel-spec function @computed_operand must start with a pointwise precision-flow op}}
func.func @computed_operand(%a: tensor<?x?xbf16>, %b: tensor<?x?xbf16>) -> tensor<?x?xbf16> {
  %c = arith.addf %a, %b : tensor<?x?xbf16>
  %s = coat.residual_add_grad %c, %b : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?x?xbf16>
  return %s : tensor<?x?xbf16>
}

// -----

func.func @big_group(%a: tensor<?x?xbf16>, %b: tensor<?x?xbf16>) -> (tensor<?x?xbf16>, tensor<?x?xf32>) {
  %s = coat.residual_add_grad %a, %b : tensor<?x?xbf16>, tensor<?x?xbf16> -> tensor<?x?xbf16>
  // expected-error @+1 {{group size 1024 of the maxima has no pointwise kernel: need a power of two <= 512}}
  %m = coat.absmax %s, per_group<1024> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %s, %m : tensor<?x?xbf16>, tensor<?x?xf32>
}

// -----

// expected-error @+1 {{coat-lower-pointwise: symbol @coat_flow_kernels is taken; the pass puts its kernels in a new gpu.module of that name}}
func.func private @coat_flow_kernels()

func.func @silu(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
    -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> {
  %y = coat.silu %x : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
      -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
  return %y : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
}

// -----

// A spec in a nested module is reported, not silently left unlowered.
module {
  module @inner {
    // expected-error @+1 {{coat-lower-pointwise: kernel-spec function @nested sits in a nested 'builtin.module' and is not lowered}}
    func.func @nested(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>)
        -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> {
      %y = coat.silu %x : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
          -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
      return %y : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>
    }
  }
}

// -----

// A rotary lane holds runs of both halves of a head: a 1x32 group would
// span both halves of a 32-column head.
func.func @rope_group_across_halves(%x: tensor<?x64xbf16>, %c: tensor<?x32xf32>, %s: tensor<?x32xf32>)
    -> (tensor<?x64xbf16>, tensor<?x2xf32>) {
  %y = coat.rope %x, %c, %s rotated_heads = 2 : tensor<?x64xbf16>, tensor<?x32xf32>, tensor<?x32xf32> -> tensor<?x64xbf16>
  // expected-error @+1 {{epilogue maxima of a rotary kernel need groups inside a half head: group size 32 does not divide head_dim / 2 = 16}}
  %m = coat.absmax %y, per_group<32> epilogue : tensor<?x64xbf16> -> tensor<?x2xf32>
  return %y, %m : tensor<?x64xbf16>, tensor<?x2xf32>
}
