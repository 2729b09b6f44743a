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
