// coat-lower-linear reports, with a location, what it does not lower instead
// of emitting a wrong kernel or aborting.
// RUN: coat-opt %s -split-input-file -verify-diagnostics --pass-pipeline='builtin.module(coat-lower-linear)'

func.func @unresolved(%x: tensor<128x256xbf16>,
                      %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>)
    -> tensor<128x512xbf16> {
  %u = coat.quantize_auto %x : tensor<128x256xbf16> -> !coat.unresolved<128x256xbf16>
  // expected-error @+1 {{needs resolved !coat.qtensor operands}}
  %y = coat.linear forward %u, %w
         : !coat.unresolved<128x256xbf16>,
           !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
  return %y : tensor<128x512xbf16>
}

// -----

func.func @f32_group_scales(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
                            %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>)
    -> !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = f32> {
  // expected-error @+1 {{writes quantized results only as per_group<16> with bf16 scales}}
  %y = coat.linear forward %x, %w
         : !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
           !coat.qtensor<512x256xf8E4M3FN, per_tensor>
         -> !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = f32>
  return %y : !coat.qtensor<128x512xf8E4M3FN, per_group<16>, scale = f32>
}

// -----

// expected-error @+1 {{holds one coat.linear, this one holds several}}
func.func @two_gemms(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
                     %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>)
    -> (tensor<128x512xbf16>, tensor<128x512xbf16>) {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
           !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
  %z = coat.linear forward %x, %w
         : !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
           !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
  return %y, %z : tensor<128x512xbf16>, tensor<128x512xbf16>
}

// -----

// The GPU GEMM reads the operands with TMA, whose rows (K FP8 bytes) are a
// multiple of 16 bytes apart: a static K that is not is refused here, not at
// launch.
func.func @k_not_multiple_of_16(%x: !coat.qtensor<128x8xf8E4M3FN, per_tensor>,
                                %w: !coat.qtensor<512x8xf8E4M3FN, per_tensor>)
    -> tensor<128x512xbf16> {
  // expected-error @+1 {{'coat.linear' op coat-lower-linear: K = 8 is not a multiple of 16; the GPU GEMM loads the K-major FP8 operands with TMA, whose row pitch (K bytes) must be a multiple of 16 bytes}}
  %y = coat.linear forward %x, %w
         : !coat.qtensor<128x8xf8E4M3FN, per_tensor>,
           !coat.qtensor<512x8xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
  return %y : tensor<128x512xbf16>
}

// -----

// K static on one operand only.
func.func @k_static_on_weight(%x: !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
                              %w: !coat.qtensor<512x40xf8E4M3FN, per_tensor>)
    -> tensor<?x512xbf16> {
  // expected-error @+1 {{K = 40 is not a multiple of 16}}
  %y = coat.linear forward %x, %w
         : !coat.qtensor<?x?xf8E4M3FN, per_tensor>,
           !coat.qtensor<512x40xf8E4M3FN, per_tensor> -> tensor<?x512xbf16>
  return %y : tensor<?x512xbf16>
}

// -----

// The lowering reads only the coat.linear and the returned value: a spec
// returning anything but the GEMM's result would lose what it returns.
func.func @returns_an_input(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
                            %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>)
    -> !coat.qtensor<128x256xf8E4M3FN, per_tensor> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
           !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
  // expected-error @+1 {{coat-lower-linear: a kernel-spec function returns the result of its coat.linear (or of the coat.rope in its epilogue) and nothing else}}
  return %x : !coat.qtensor<128x256xf8E4M3FN, per_tensor>
}

// -----

func.func @returns_nothing(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
                           %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>) {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
           !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
  // expected-error @+1 {{returns the result of its coat.linear (or of the coat.rope in its epilogue) and nothing else}}
  return
}

// -----

// An op on the result would be dropped from the kernel.
func.func @epilogue_op(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
                       %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>)
    -> tensor<128x512xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
           !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
  %z = arith.addf %y, %y : tensor<128x512xbf16>
  // expected-error @+1 {{returns the result of its coat.linear (or of the coat.rope in its epilogue) and nothing else}}
  return %z : tensor<128x512xbf16>
}

// -----

// A coat.linear in a nested region is no spec the lowering can read.
func.func @in_region(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
                     %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>)
    -> tensor<128x512xbf16> {
  %r = scf.execute_region -> tensor<128x512xbf16> {
    // expected-error @+1 {{'coat.linear' op coat-lower-linear: a kernel spec's coat.linear sits directly in the function body, not in a nested region}}
    %y = coat.linear forward %x, %w
           : !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
             !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
    scf.yield %y : tensor<128x512xbf16>
  }
  return %r : tensor<128x512xbf16>
}

// -----

// The kernels go into a new gpu.module @coat_linear: a symbol of that name
// already there is reported, not left for the verifier.
// expected-error @+1 {{coat-lower-linear: symbol @coat_linear is taken; the pass puts its kernels in a new gpu.module of that name}}
func.func private @coat_linear()

func.func @fwd(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
               %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>)
    -> tensor<128x512xbf16> {
  // expected-remark @+1 {{coat-lower-linear: 64x128 tiles: 128 x 512 makes 8 of them}}
  %y = coat.linear forward %x, %w
         : !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
           !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
  return %y : tensor<128x512xbf16>
}

// -----

// A spec in a nested module is reported, not silently left unlowered.
module {
module @inner {
  // expected-error @+1 {{coat-lower-linear: kernel-spec function @nested sits in a nested 'builtin.module' and is not lowered; kernel specs are top-level functions of the module the pass runs on}}
  func.func @nested(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
                    %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>)
      -> tensor<128x512xbf16> {
    %y = coat.linear forward %x, %w
           : !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
             !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
    return %y : tensor<128x512xbf16>
  }
}
}
