// coat-lower-linear=target=cpu reports names its twins cannot take and specs
// it cannot reach, instead of leaving a clash for the verifier or a spec
// unlowered.
// RUN: coat-opt %s -split-input-file -verify-diagnostics -coat-lower-linear=target=cpu

// The twin is built as @fwd.cpu and renamed once the spec is gone: a symbol
// of that name is a clash.
// expected-note @+1 {{symbol @fwd.cpu is here}}
func.func private @"fwd.cpu"()

// expected-error @+1 {{coat-lower-linear: the CPU twin @fwd clashes with symbol @fwd.cpu}}
func.func @fwd(%x: !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
               %w: !coat.qtensor<512x256xf8E4M3FN, per_tensor>)
    -> tensor<128x512xbf16> {
  %y = coat.linear forward %x, %w
         : !coat.qtensor<128x256xf8E4M3FN, per_tensor>,
           !coat.qtensor<512x256xf8E4M3FN, per_tensor> -> tensor<128x512xbf16>
  return %y : tensor<128x512xbf16>
}

// -----

// A spec in a nested module is reported: its twin would keep the name
// @nested.cpu.
module {
  module @inner {
    // expected-error @+1 {{coat-lower-linear: kernel-spec function @nested sits in a nested 'builtin.module' and is not lowered}}
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
