// coat-lower-linear reports what it does not lower yet instead of emitting a
// wrong kernel.
// RUN: coat-opt %s -split-input-file -verify-diagnostics --pass-pipeline='builtin.module(coat-lower-linear)'

func.func @block_scaled(%x: !coat.qtensor<128x256xf8E4M3FN, per_group<128>>,
                        %w: !coat.qtensor<512x256xf8E4M3FN, per_block<128x128>>)
    -> tensor<128x512xbf16> {
  // expected-error @+1 {{handles only per_tensor operands so far}}
  %y = coat.linear forward %x, %w
         : !coat.qtensor<128x256xf8E4M3FN, per_group<128>>,
           !coat.qtensor<512x256xf8E4M3FN, per_block<128x128>> -> tensor<128x512xbf16>
  return %y : tensor<128x512xbf16>
}

// -----

func.func @f32_out(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
                   %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>)
    -> tensor<128x512xf32> {
  // expected-error @+1 {{handles only a bf16 result so far}}
  %y = coat.linear forward %x, %w
         : !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
           !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<128x512xf32>
  return %y : tensor<128x512xf32>
}
