// RUN: coat-opt %s -split-input-file -verify-diagnostics -coat-lower-activations='target=gpu'

func.func @per_tensor_needs_scale(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_tensor> {
  // expected-error @+1 {{a per_tensor coat.quantize kernel needs its scale as an operand}}
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor>
}

// -----

func.func @group_not_power_of_two(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<48>> {
  // expected-error @+1 {{group size 48 has no kernel: need a power of two <= 1024}}
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_group<48>>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<48>>
}

// -----

func.func @not_a_matrix(%x: tensor<?x?x?xbf16>) -> !coat.qtensor<?x?x?xf8E4M3FN, per_group<16>> {
  // expected-error @+1 {{activation kernels take 2-D [rows, cols] tensors}}
  %q = coat.quantize %x : tensor<?x?x?xbf16> -> !coat.qtensor<?x?x?xf8E4M3FN, per_group<16>>
  return %q : !coat.qtensor<?x?x?xf8E4M3FN, per_group<16>>
}

// -----

func.func @flat_groups(%x: tensor<?x?xf32>) -> !coat.qtensor<?x?xf8E4M3FN, flat_group<128>> {
  // expected-error @+1 {{activation kernels support per_group<G> and per_tensor scaling (and per_block<BxB> for coat.quantize) only}}
  %q = coat.quantize %x : tensor<?x?xf32> -> !coat.qtensor<?x?xf8E4M3FN, flat_group<128>>
  return %q : !coat.qtensor<?x?xf8E4M3FN, flat_group<128>>
}

// -----

func.func @expanded(%x: tensor<?x?xf32>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>, expand> {
  // expected-error @+1 {{range-expanded activations have no kernel}}
  %q = coat.quantize %x : tensor<?x?xf32> -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>, expand>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<128>, expand>
}

// -----

// expected-error @+1 {{kernel-spec function @two_ops must hold one coat.quantize, coat.dequantize or coat.absmax}}
func.func @two_ops(%x: tensor<?x?xbf16>) -> (!coat.qtensor<?x?xf8E4M3FN, per_group<16>>, !coat.qtensor<?x?xf8E5M2, per_group<16>>) {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_group<16>>
  %r = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E5M2, per_group<16>>
  return %q, %r : !coat.qtensor<?x?xf8E4M3FN, per_group<16>>, !coat.qtensor<?x?xf8E5M2, per_group<16>>
}

// -----

func.func @oblong_blocks(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x64>> {
  // expected-error @+1 {{per_block<128x64> has no kernel: need square blocks of 32, 64 or 128}}
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x64>>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_block<128x64>>
}

// -----

func.func @big_blocks_t(%x: tensor<?x?xbf16>) -> (!coat.qtensor<?x?xf8E4M3FN, per_block<256x256>>, !coat.qtensor<?x?xf8E4M3FN, per_block<256x256>>) {
  // expected-error @+1 {{per_block<256x256> has no kernel: need square blocks of 32, 64 or 128}}
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_block<256x256>>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_block<256x256>> -> !coat.qtensor<?x?xf8E4M3FN, per_block<256x256>>
  return %q, %t : !coat.qtensor<?x?xf8E4M3FN, per_block<256x256>>, !coat.qtensor<?x?xf8E4M3FN, per_block<256x256>>
}

// -----

// expected-error @+1 {{kernel-spec function @blocks_t_only: a per_block<BxB> quantize + transpose kernel writes both layouts; return the quantized tensor too}}
func.func @blocks_t_only(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>> -> !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
  return %t : !coat.qtensor<?x?xf8E4M3FN, per_block<128x128>>
}

// -----

// expected-error @+1 {{kernel-spec function @codes_only must hold one coat.quantize}}
func.func @codes_only(%x: tensor<?x?xbf16>, %s: tensor<bf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> {
  %q = coat.quantize %x scale %s : tensor<?x?xbf16>, tensor<bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  %t = coat.transpose %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
}

// -----

// The kernels go into a new gpu.module @coat_activation_kernels: a symbol of
// that name already there is reported, not left for the verifier.
// expected-error @+1 {{coat-lower-activations: symbol @coat_activation_kernels is taken; the pass puts its kernels in a new gpu.module of that name}}
gpu.module @coat_activation_kernels {
}

func.func @q(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16> {
  %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16>
  return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16>
}

// -----

// A spec in a nested module is reported, not silently left unlowered.
module {
  module @inner {
    // expected-error @+1 {{coat-lower-activations: kernel-spec function @nested sits in a nested 'builtin.module' and is not lowered}}
    func.func @nested(%x: tensor<?x?xbf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16> {
      %q = coat.quantize %x : tensor<?x?xbf16> -> !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16>
      return %q : !coat.qtensor<?x?xf8E4M3FN, per_group<128>, scale = bf16>
    }
  }
}

// -----

func.func @requantize_through_bf16(%q: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %s: tensor<bf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> {
  // expected-error @+1 {{a requantize kernel dequantizes to f32}}
  %x = coat.dequantize %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xbf16>
  %r = coat.quantize %x scale %s : tensor<?x?xbf16>, tensor<bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  return %r : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
}

// -----

func.func @requantize_per_tensor_codes(%q: !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>, %s: tensor<bf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> {
  // expected-error @+1 {{a requantize kernel reads per_group<G> codes}}
  %x = coat.dequantize %q : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16> -> tensor<?x?xf32>
  %r = coat.quantize %x scale %s : tensor<?x?xf32>, tensor<bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  return %r : !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
}

// -----

func.func @requantize_derives_scale(%q: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>) -> !coat.qtensor<?x?xf8E4M3FN, per_group<32>, scale = bf16> {
  %x = coat.dequantize %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xf32>
  // expected-error @+1 {{a requantize kernel quantizes per tensor with a given scale}}
  %r = coat.quantize %x : tensor<?x?xf32> -> !coat.qtensor<?x?xf8E4M3FN, per_group<32>, scale = bf16>
  return %r : !coat.qtensor<?x?xf8E4M3FN, per_group<32>, scale = bf16>
}

// -----

// expected-error @+1 {{must dequantize, quantize the values with a given scale and return only the quantized tensor}}
func.func @requantize_returns_values(%q: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, %s: tensor<bf16>) -> (tensor<?x?xf32>, !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>) {
  %x = coat.dequantize %q : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16> -> tensor<?x?xf32>
  %r = coat.quantize %x scale %s : tensor<?x?xf32>, tensor<bf16> -> !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
  return %x, %r : tensor<?x?xf32>, !coat.qtensor<?x?xf8E4M3FN, per_tensor, scale = bf16>
}
