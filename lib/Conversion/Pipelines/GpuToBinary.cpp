//===- GpuToBinary.cpp - gpu.module kernels to PTX/cubin ------------------===//
//
// The device half of upstream's gpu-lower-to-nvvm-pipeline, with the steps
// MLIR 22 lacks for COAT: an up-front chip/PTX check (LLVM aborts instead of
// diagnosing) and the FP8 conversion lowering before convert-gpu-to-nvvm
// (which leaves f8 truncf/extf in place). Host code outside gpu.modules is
// left alone.
//
//===----------------------------------------------------------------------===//

#include "coat/Conversion/Pipelines.h"
#include "coat/Conversion/Passes.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/NVGPUToNVVM/NVGPUToNVVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/VectorToSCF/VectorToSCF.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/Transforms/OptimizeForNVVM.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void mlir::coat::buildGpuToNVVMPipeline(OpPassManager &pm,
                                        const GpuToBinaryOptions &options) {
  GpuNVVMAttachTargetOptions target;
  target.chip = options.chip;
  target.features = options.features;
  target.optLevel = options.optLevel;
  pm.addPass(createGpuNVVMAttachTarget(target));
  pm.addPass(createCoatVerifyNVVMTarget());

  OpPassManager &gpm = pm.nest(gpu::GPUModuleOp::getOperationName());
  // A quantizer's divisions by one scale: one reciprocal and a correction
  // each (coat-expand-shared-divisions).
  gpm.addPass(createCoatExpandSharedDivisions());
  // ex2 marked for the FMA units (coat-expand-soft-exp2).
  gpm.addPass(createCoatExpandSoftExp2());
  // afn special functions go straight to the SFU (see coat-fast-nvvm-math).
  gpm.addPass(createCoatFastNVVMMath());
  gpm.addPass(createCoatLowerFp8ToNVVM());
  gpm.addPass(createConvertNVGPUToNVVMPass());
  gpm.addPass(createConvertVectorToSCFPass());
  gpm.addPass(createSCFToControlFlowPass());
  gpm.addPass(memref::createExpandStridedMetadataPass());
  gpm.addPass(createLowerAffinePass());
  gpm.addPass(createConvertGpuOpsToNVVMOps());
  // CUtensorMap parameters by value (coat-lower-linear).
  gpm.addPass(createCoatMarkGridConstants());
  // Inline-PTX NVVM ops (wgmma, mbarrier waits) need their own lowering.
  gpm.addPass(createConvertNVVMToLLVMPass());
  gpm.addPass(LLVM::createNVVMOptimizeForTargetPass());
  gpm.addPass(createCanonicalizerPass());
  gpm.addPass(createCSEPass());
  gpm.addPass(createReconcileUnrealizedCastsPass());
  // Occupancy hints stay only on kernels that fit them without spilling.
  CoatDropSpillingMinCtasOptions caps;
  caps.toolkit = options.toolkit;
  gpm.addPass(createCoatDropSpillingMinCtas(caps));
}

void mlir::coat::buildGpuToBinaryPipeline(OpPassManager &pm,
                                          const GpuToBinaryOptions &options) {
  buildGpuToNVVMPipeline(pm, options);
  GpuModuleToBinaryPassOptions binary;
  binary.compilationTarget = options.format;
  binary.toolkitPath = options.toolkit;
  pm.addPass(createGpuModuleToBinaryPass(binary));
}

namespace mlir::coat {
#define GEN_PASS_REGISTRATION
#include "coat/Conversion/PipelinePasses.h.inc"
} // namespace mlir::coat

void mlir::coat::registerCoatPipelines() {
  registerCoatPipelinePasses();
  PassPipelineRegistration<GpuToBinaryOptions>(
      "coat-gpu-to-binary",
      "Lowers gpu.module kernels written in arith/math/vector/memref/scf/gpu "
      "(FP8 conversions included) to a gpu.binary of PTX, cubin or fatbin",
      buildGpuToBinaryPipeline);
}
