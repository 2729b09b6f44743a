//===- Gemm.h - what a coat.linear asks of its kernels ----------*- C++ -*-===//
//
// The problem description shared by the GEMM's GPU kernel
// (LinearToNVGPU.cpp) and its CPU twin (LinearCpuTwin.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef COAT_LIB_CONVERSION_LINEARTONVGPU_GEMM_H
#define COAT_LIB_CONVERSION_LINEARTONVGPU_GEMM_H

#include "coat/Dialect/CoatDialect.h"
#include "coat/Numerics/Fp8.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace mlir::coat {

/// Group size of a quantized GEMM output (COAT.md §3.1, §4.1: 1x16).
constexpr int64_t kOutputGroup = 16;
/// Side of a block-scale block (1x128 for A, 128x128 for B); on the GPU
/// equal to the K slice of one ring stage, so one stage is one scale block.
constexpr int64_t kScaleBlock = 128;

enum class OutputKind { BF16, F32, Fp8Groups };

/// What one coat.linear asks of the kernel.
struct GemmProblem {
  LinearKind kind;
  ::coat::Fp8Format lhs, rhs;
  OutputKind out;
  ::coat::Fp8Format outFormat = ::coat::Fp8Format::E4M3; ///< Fp8Groups codes
  Type biasElem; ///< null without a bias
  /// Element types of the operands' per-tensor scales (f32 or bf16), which
  /// the kernel reads as they are stored; block scales are always f32.
  Type lhsScale, rhsScale;
  /// DeepSeek-style scales (COAT.md §4.4): A 1x128 along K, B 128x128, f32,
  /// applied to each 128-wide K slice's partial product before it is added
  /// to the f32 accumulator.
  bool blockScaled = false;
};

/// Emits the body of the CPU twin `twin` of a GEMM kernel (its arguments in
/// the GPU kernel's order, tensormaps as memrefs of FP8 codes): the same
/// products, scales, bias and epilogue as the kernel, one output element at
/// a time with an f32 accumulator summed in K order.
void emitGemmCpuTwin(ImplicitLocOpBuilder &b, func::FuncOp twin,
                     const GemmProblem &p);

} // namespace mlir::coat

#endif // COAT_LIB_CONVERSION_LINEARTONVGPU_GEMM_H
