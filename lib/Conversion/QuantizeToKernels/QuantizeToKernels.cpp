//===- QuantizeToKernels.cpp - activation quantization to GPU/CPU kernels -===//
//
// The coat-lower-activations pass: coat.quantize, coat.dequantize,
// coat.absmax and coat.quantize + coat.transpose kernel specs as GPU kernels
// or CPU twins, run by the kernel driver over the hooks of Quantize.h.
//
//===----------------------------------------------------------------------===//

#include "Quantize.h"

#include "coat/Conversion/Passes.h"

// The dialects the pass depends on (Passes.h.inc registers them).
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATLOWERACTIVATIONS
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

struct CoatLowerActivationsPass
    : mlir::coat::impl::CoatLowerActivationsBase<CoatLowerActivationsPass> {
  using Base::Base;

  void runOnOperation() override {
    QuantizeLowering lowering(blockSize, tileBlockSize, elementsPerThread,
                              tile, approxDivision, tileMinCtas, flatMinCtas,
                              tilesPerBlock);
    if (failed(lowering.run(getOperation(), target)))
      signalPassFailure();
  }
};

} // namespace
