//===- VerifyNVVMTarget.cpp - reject chip/PTX pairs LLVM aborts on --------===//
//
// LLVM's NVPTX backend reports an unsupported chip/PTX pair, or an FP8 cvt on
// a chip without one, with report_fatal_error: the process dies. This pass
// turns those cases into diagnostics before gpu-module-to-binary runs. The
// facts live in coat/Target/Nvptx.h.
//
//===----------------------------------------------------------------------===//

#include "coat/Conversion/Passes.h"
#include "coat/Target/Nvptx.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir::coat {
#define GEN_PASS_DEF_COATVERIFYNVVMTARGET
#include "coat/Conversion/Passes.h.inc"
} // namespace mlir::coat

using namespace mlir;
using namespace mlir::coat;
using ::coat::getEffectivePtx;
using ::coat::getMinPtxForFp8Cvt;
using ::coat::lookupNvptxChip;
using ::coat::NvptxChipInfo;
using ::coat::parsePtxFeature;

namespace {

bool isFp8(Type t) {
  return isa<Float8E4M3FNType, Float8E5M2Type>(getElementTypeOrSelf(t));
}

/// Whether `module` converts to or from FP8, before or after
/// coat-lower-fp8-to-nvvm.
bool hasFp8Conversions(gpu::GPUModuleOp module) {
  WalkResult r = module.walk([](Operation *op) {
    bool fp8 = false;
    if (isa<arith::TruncFOp, arith::ExtFOp>(op))
      fp8 = isFp8(op->getOperand(0).getType()) ||
            isFp8(op->getResult(0).getType());
    else if (auto c = dyn_cast<NVVM::ConvertF32x2ToF8x2Op>(op))
      fp8 = isFp8(c.getDstTy());
    else if (auto c = dyn_cast<NVVM::ConvertF16x2ToF8x2Op>(op))
      fp8 = isFp8(c.getDstTy());
    else if (auto c = dyn_cast<NVVM::ConvertF8x2ToF16x2Op>(op))
      fp8 = isFp8(c.getSrcType());
    return fp8 ? WalkResult::interrupt() : WalkResult::advance();
  });
  return r.wasInterrupted();
}

std::string formatPtx(unsigned v) {
  return std::to_string(v / 10) + "." + std::to_string(v % 10);
}

struct CoatVerifyNVVMTargetPass
    : mlir::coat::impl::CoatVerifyNVVMTargetBase<CoatVerifyNVVMTargetPass> {
  using Base::Base;

  void runOnOperation() override {
    bool anyFailed = false;
    getOperation().walk([&](gpu::GPUModuleOp module) {
      ArrayAttr targets = module.getTargetsAttr();
      if (!targets)
        return;
      std::optional<bool> fp8; // computed on first need
      for (Attribute attr : targets) {
        auto target = dyn_cast<NVVM::NVVMTargetAttr>(attr);
        if (!target)
          continue;
        if (!fp8)
          fp8 = requireFp8 || hasFp8Conversions(module);
        anyFailed |= failed(check(module, target, *fp8));
      }
    });
    if (anyFailed)
      signalPassFailure();
  }

  LogicalResult check(gpu::GPUModuleOp module, NVVM::NVVMTargetAttr target,
                      bool fp8) {
    StringRef chip = target.getChip();
    StringRef features = target.getFeatures();
    std::optional<NvptxChipInfo> info = lookupNvptxChip(chip);
    std::optional<unsigned> ptx = getEffectivePtx(chip, features);
    std::string ptxText =
        ptx ? "PTX " + formatPtx(*ptx) +
                  (parsePtxFeature(features) ? "" : " (the chip's default)")
            : std::string("no PTX version");

    if (!info) {
      // LLVM only warns about an unknown chip, but cannot select FP8 cvt.
      if (!fp8)
        return success();
      return module.emitError()
             << "target chip '" << chip
             << "' is unknown to LLVM 22; FP8 conversions need sm_89 or newer";
    }
    if (*ptx < info->minPtx)
      return module.emitError()
             << "target chip '" << chip << "' with " << ptxText
             << " is rejected by LLVM: " << chip << " needs +ptx"
             << info->minPtx << " (PTX " << formatPtx(info->minPtx)
             << ") or newer";
    if (!fp8)
      return success();
    std::optional<unsigned> fp8Ptx = getMinPtxForFp8Cvt(chip);
    if (!fp8Ptx)
      return module.emitError()
             << "target chip '" << chip
             << "' has no FP8 conversions (cvt e4m3x2/e5m2x2): they need "
                "sm_89 or newer";
    if (*ptx < *fp8Ptx)
      return module.emitError()
             << "target chip '" << chip << "' with " << ptxText
             << " has no FP8 conversions: " << chip << " needs +ptx" << *fp8Ptx
             << " (PTX " << formatPtx(*fp8Ptx) << ") or newer";
    return success();
  }
};

} // namespace
