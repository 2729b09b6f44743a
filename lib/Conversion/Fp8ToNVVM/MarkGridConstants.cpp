//===- MarkGridConstants.cpp - byval grid-constant kernel parameters ------===//
//
// An LLVM-level pass run after convert-gpu-to-nvvm: `nvvm.grid_constant` is
// only accepted on `llvm.func` kernels, so lowerings (the FP8 GEMM's TMA
// descriptors, lib/Conversion/LinearToNVGPU) mark a `gpu.func` with
// `coat.grid_constant` and this pass turns the listed parameters into
// 128-byte byval grid constants.
//
//===----------------------------------------------------------------------===//

#include "coat/Conversion/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATMARKGRIDCONSTANTS
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;

namespace {

constexpr int64_t kTensorMapBytes = 128;

/// After convert-gpu-to-nvvm: parameters listed in `coat.grid_constant`
/// become `.param .align 64 .b8 p[128]` grid constants (a CUtensorMap passed
/// by value, addressed in param space by cp.async.bulk.tensor).
struct CoatMarkGridConstantsPass
    : mlir::coat::impl::CoatMarkGridConstantsBase<CoatMarkGridConstantsPass> {
  void runOnOperation() override {
    getOperation()->walk([&](LLVM::LLVMFuncOp fn) {
      auto indices = fn->getAttrOfType<DenseI32ArrayAttr>(kGridConstantAttr);
      if (!indices)
        return;
      MLIRContext *ctx = fn.getContext();
      Builder b(ctx);
      auto bytes = LLVM::LLVMArrayType::get(b.getI8Type(), kTensorMapBytes);
      for (int32_t i : indices.asArrayRef()) {
        if (i < 0 || unsigned(i) >= fn.getNumArguments() ||
            !isa<LLVM::LLVMPointerType>(fn.getArgumentTypes()[i])) {
          fn.emitError() << "coat.grid_constant index " << i
                         << " is not a pointer parameter";
          return signalPassFailure();
        }
        fn.setArgAttr(i, LLVM::LLVMDialect::getByValAttrName(), TypeAttr::get(bytes));
        fn.setArgAttr(i, NVVM::NVVMDialect::getGridConstantAttrName(), b.getUnitAttr());
        fn.setArgAttr(i, LLVM::LLVMDialect::getAlignAttrName(), b.getI32IntegerAttr(64));
      }
      fn->removeAttr(kGridConstantAttr);
    });
  }
};

} // namespace
