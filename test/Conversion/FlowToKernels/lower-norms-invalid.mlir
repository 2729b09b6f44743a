// RUN: coat-opt %s -split-input-file -verify-diagnostics -coat-lower-norms='target=gpu'

// expected-error @+1 {{must hold one coat.rmsnorm, coat.layernorm}}
func.func @extra_op(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>) -> (tensor<?x?xbf16>, tensor<?xf32>) {
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>
      -> tensor<?x?xbf16>, tensor<?xf32>
  %m = coat.absmax %y, per_group<16> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %y, %rstd : tensor<?x?xbf16>, tensor<?xf32>
}

// -----

func.func @small_groups(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<8>, scale = bf16>,
    %w: tensor<?xbf16>) -> (tensor<?x?xbf16>, tensor<?xf32>) {
  // expected-error @+1 {{group size 8 has no norm kernel: need a power of two in [16, 128]}}
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<8>, scale = bf16>, tensor<?xbf16>
      -> tensor<?x?xbf16>, tensor<?xf32>
  return %y, %rstd : tensor<?x?xbf16>, tensor<?xf32>
}

// -----

func.func @quantized_result(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>) -> (!coat.qtensor<?x?xf8E4M3FN, per_tensor>, tensor<?xf32>) {
  // expected-error @+1 {{norm kernels write the unquantized values}}
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>
      -> !coat.qtensor<?x?xf8E4M3FN, per_tensor>, tensor<?xf32>
  return %y, %rstd : !coat.qtensor<?x?xf8E4M3FN, per_tensor>, tensor<?xf32>
}

// -----

func.func @unfused_absmax(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>) -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>) {
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>
      -> tensor<?x?xbf16>, tensor<?xf32>
  // expected-error @+1 {{only a coat.absmax marked `epilogue` is fused}}
  %m = coat.absmax %y, per_group<16> : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %y, %rstd, %m : tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>
}

// -----

func.func @other_groups(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>) -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>) {
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>
      -> tensor<?x?xbf16>, tensor<?xf32>
  // expected-error @+1 {{the fused partial maxima must use the input's groups, per_group<16>}}
  %m = coat.absmax %y, per_group<32> epilogue : tensor<?x?xbf16> -> tensor<?x?xf32>
  return %y, %rstd, %m : tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xf32>
}

// -----

// expected-error @+1 {{max_cols must be a positive multiple of the group size 16, got 100}}
func.func @bad_max_cols(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>) -> (tensor<?x?xbf16>, tensor<?xf32>) attributes {coat.max_cols = 100 : i64} {
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>
      -> tensor<?x?xbf16>, tensor<?xf32>
  return %y, %rstd : tensor<?x?xbf16>, tensor<?xf32>
}

// -----

func.func @too_wide(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %w: tensor<?xbf16>) -> (tensor<?x?xbf16>, tensor<?xf32>) attributes {coat.max_cols = 1048576 : i64} {
  // expected-error @+1 {{values per thread with 1024 threads per row (limit 256)}}
  %y, %rstd = coat.rmsnorm %x, %w eps = 1.000000e-05
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xbf16>
      -> tensor<?x?xbf16>, tensor<?xf32>
  return %y, %rstd : tensor<?x?xbf16>, tensor<?xf32>
}

// -----

// A spec in a nested module is reported, not silently left unlowered.
module {
  module @inner {
    // expected-error @+1 {{coat-lower-norms: kernel-spec function @nested sits in a nested 'builtin.module' and is not lowered}}
    func.func @nested(%x: !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16>)
        -> (tensor<?x4096xf32>, tensor<?xf32>, tensor<?xf32>) {
      %y, %mean, %rstd = coat.layernorm %x eps = 1.000000e-05
          : !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16>
          -> tensor<?x4096xf32>, tensor<?xf32>, tensor<?xf32>
      return %y, %mean, %rstd : tensor<?x4096xf32>, tensor<?xf32>, tensor<?xf32>
    }
  }
}

// -----

// A weight-gradient spec makes a second kernel, @<spec>_reduce: a spec of
// that name is a clash, reported where the second kernel is made.
func.func @ln_bwd_reduce(%x: !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16>)
    -> (tensor<?x4096xf32>, tensor<?xf32>, tensor<?xf32>) {
  // expected-note @-2 {{the other kernel @ln_bwd_reduce is made for this spec}}
  %y, %mean, %rstd = coat.layernorm %x eps = 1.000000e-05
      : !coat.qtensor<?x4096xf8E4M3FN, per_group<16>, scale = bf16>
      -> tensor<?x4096xf32>, tensor<?xf32>, tensor<?xf32>
  return %y, %mean, %rstd : tensor<?x4096xf32>, tensor<?xf32>, tensor<?xf32>
}

// expected-error @+1 {{coat-lower-norms: two kernels named @ln_bwd_reduce in gpu.module @coat_norm_kernels}}
func.func @ln_bwd(%x: !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>,
    %mean: tensor<?xf32>, %rstd: tensor<?xf32>, %dy: tensor<?x?xbf16>, %w: tensor<?xf32>)
    -> (tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>) attributes {coat.max_cols = 8192 : i64} {
  %dx, %dw, %db = coat.layernorm_grad %x, %mean, %rstd, %dy weight %w
      : !coat.qtensor<?x?xf8E4M3FN, per_group<16>, scale = bf16>, tensor<?xf32>,
        tensor<?xf32>, tensor<?x?xbf16>, tensor<?xf32>
      -> tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
  return %dx, %dw, %db : tensor<?x?xbf16>, tensor<?xf32>, tensor<?xf32>
}
