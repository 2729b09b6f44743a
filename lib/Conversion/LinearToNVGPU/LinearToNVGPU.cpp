//===- LinearToNVGPU.cpp - coat.linear to a Hopper TMA + wgmma kernel -----===//
//
// The coat-lower-linear pass: a kernel-spec function holding one
// per-tensor or block-scaled `coat.linear` becomes one GEMM kernel
// (LinearEmitter.cpp) or its CPU twin (LinearCpuTwin.cpp), through the
// kernel driver and the hooks of Gemm.h.
//
//===----------------------------------------------------------------------===//

#include "Gemm.h"

#include "coat/Conversion/Passes.h"

// The dialects the pass depends on (Passes.h.inc registers them).
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATLOWERLINEAR
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

struct CoatLowerLinearPass
    : mlir::coat::impl::CoatLowerLinearBase<CoatLowerLinearPass> {
  using Base::Base;

  void runOnOperation() override {
    GemmShape g{tileM, tileN, stages, warpgroups, warpSpecialize, groupM};
    LinearLowering lowering(g, tileM.hasValue() || tileN.hasValue(),
                            blockTileM, blockTileN, epilogue, multiprocessors);
    if (failed(lowering.run(getOperation(), target)))
      signalPassFailure();
  }
};

} // namespace
