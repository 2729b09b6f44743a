//===- CoatBase.td - The coat dialect ---------------------------*- tablegen -*-===//

#ifndef COAT_BASE_TD
#define COAT_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Coat_Dialect : Dialect {
  let name = "coat";
  let cppNamespace = "::mlir::coat";
  let summary = "FP8 training with scale-carrying quantized tensors (COAT)";
  let description = [{
    The `coat` dialect models FP8 training as in COAT (Xi et al., 2024):
    optimizer states stored in FP8 with per-group scales and Dynamic Range
    Expansion, and activations kept in FP8 with mixed granularity (per-tensor
    for linear-layer operands, per-group 1xG for non-linear layers).

    Its central type, `!coat.qtensor`, carries everything needed to interpret
    the bytes: the logical shape, the FP8 format, the scaling granularity, the
    scale element type and whether the data is range-expanded. The shapes of
    the data, scale, `k` and `c` tensors follow from the type alone.

    Ops have value semantics on tensors; lowerings bufferize at the edge.

    ## Model programs

    A model program is a `func.func` holding one block's forward and
    backward. Discardable attributes on its arguments and results say what
    each one is:

    - `coat.weight` (unit, argument): a parameter. In a function with a
      backward (a `coat.gradient` argument), some result must be its
      gradient, unless the weight is also marked `coat.frozen`.
    - `coat.frozen` (unit, argument): a `coat.weight` that is not trained;
      no result may be its gradient.
    - `coat.gradient` (unit, argument): an incoming gradient; everything that
      depends on one is the backward.
    - `coat.kept_by_caller` (unit, argument): an activation (not a weight
      or an incoming gradient) that the caller keeps for its own backward
      anyway, such as attention's output, which attention's autograd
      saves: the program's backward may read it at no cost, so
      `coat-recompute-activations` derives values from it again instead of
      keeping them.
    - `coat.grad_of = i` (integer): on a result, the gradient of argument
      `i`; on a `coat.gradient` argument, the gradient of result `i`. The two
      have the same shape (the logical shape, for a `!coat.qtensor`), `i` is
      in range and names no gradient, and no argument or result has two.

    ```mlir
    func.func @linear(%x: tensor<?x64xbf16>,
                      %w: tensor<32x64xbf16> {coat.weight},
                      %w_base: tensor<32x64xbf16> {coat.weight, coat.frozen},
                      %dy: tensor<?x32xbf16> {coat.gradient, coat.grad_of = 0 : i64})
        -> (tensor<?x32xbf16>, tensor<?x64xbf16> {coat.grad_of = 0 : i64},
            tensor<32x64xbf16> {coat.grad_of = 1 : i64})
    ```

    - `coat.recompute` (unit, result): a forward output (a ranked tensor,
      no gradient) that the caller may drop after the forward and ask the
      program for again in the backward. `coat-recompute-activations`
      appends the copy as a result `coat.recompute_of = i` (integer): it
      names a result marked `coat.recompute`, has its type, and no two
      results name the same one. (On an op, `coat.recompute` marks a
      recomputation: unit for the program's own backward, `"output"` for
      such a copy.)

    `coat.program` (unit, on the function) marks a program that
    `coat-outline-kernels` cut into kernel calls.

    `coat.keep_gemm_operands` (bool, on a function with a backward) says
    whether `coat-recompute-activations` keeps the per-tensor FP8 operands
    of the backward's GEMMs from the forward (`true`: more memory, fewer
    kernels in the backward) or derives them again there (`false`); without
    it the pass's `keep-gemm-operands` option decides.

    ```mlir
    func.func @mlp(...) -> (...) attributes {coat.keep_gemm_operands = true}
    ```

    `coat.writable` (unit, argument of a kernel-spec function) says that the
    caller reads the value no more after the call, so the kernel may write
    into its buffer (as `bufferization.writable` does for one-shot
    bufferization). Exactly one op reads the argument; it is not a weight or
    an incoming gradient. `coat-outline-kernels` sets it on the operand of
    an op that can update its input in place (`coat.rope`,
    `coat.rope_grad`) where the program computes that operand and reads it
    nowhere else.

    ```mlir
    func.func @rope(%x: tensor<?x3072xbf16> {coat.writable},
                    %cos: tensor<?x64xf32>, %sin: tensor<?x64xf32>)
        -> tensor<?x3072xbf16> {
      %y = coat.rope %x, %cos, %sin rotated_heads = 32
          : tensor<?x3072xbf16>, tensor<?x64xf32>, tensor<?x64xf32>
          -> tensor<?x3072xbf16>
      return %y : tensor<?x3072xbf16>
    }
    ```

    `coat.finite_flag` (unit, an f32/bf16/f16 tensor result of a kernel-spec
    function) says that the program returns the value (a forward output or a
    gradient), so the kernel that writes it also writes a finiteness flag:
    an `i32` argument `finite_<name>` bound to `finite(out<i>)`, set to a
    non-zero value by any thread that stores a NaN or an infinity (the
    stored, rounded value) and left alone otherwise. The caller zeroes the
    flags and reads them once a step. `coat-outline-kernels{finite-flags}`
    sets it; a lowering that has no such epilogue leaves the result
    unflagged (the manifest then binds no flag to it).
  }];
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = ["::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect"];
}

class Coat_Op<string mnemonic, list<Trait> traits = []>
    : Op<Coat_Dialect, mnemonic, traits>;

#endif // COAT_BASE_TD
