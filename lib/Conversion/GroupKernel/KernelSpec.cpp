//===- KernelSpec.cpp - what every kernel-spec lowering shares ------------===//

#include "coat/Conversion/KernelSpec.h"

using namespace mlir;
using namespace mlir::coat;

/// Twins are built beside their spec under this suffix, then renamed.
static constexpr StringLiteral kTwinSuffix = ".cpu";

FailureOr<bool> mlir::coat::parseKernelTarget(ModuleOp module, StringRef pass,
                                              StringRef target) {
  if (target == "gpu" || target == "cpu")
    return target == "gpu";
  module.emitError(pass) << ": target must be 'gpu' or 'cpu', got '" << target
                         << "'";
  return failure();
}

SmallVector<func::FuncOp>
mlir::coat::collectKernelSpecs(ModuleOp module,
                               function_ref<bool(Operation *)> ours) {
  SmallVector<func::FuncOp> specs;
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn.isExternal())
      continue;
    if (fn.walk([&](Operation *op) {
            return ours(op) ? WalkResult::interrupt() : WalkResult::advance();
          }).wasInterrupted())
      specs.push_back(fn);
  }
  return specs;
}

gpu::GPUFuncOp KernelContainer::createGpuKernel(Location loc,
                                                StringRef kernelName,
                                                FunctionType type,
                                                int64_t blockSize,
                                                DictionaryAttr record,
                                                TypeRange workgroup) {
  OpBuilder b(module.getContext());
  if (!gpuModule) {
    b.setInsertionPointToEnd(module.getBody());
    gpuModule = gpu::GPUModuleOp::create(b, loc, name);
  }
  b.setInsertionPointToEnd(gpuModule.getBody());
  auto kernel = gpu::GPUFuncOp::create(b, loc, kernelName, type, workgroup);
  kernel->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  kernel.setKnownBlockSizeAttr(
      b.getDenseI32ArrayAttr({static_cast<int32_t>(blockSize), 1, 1}));
  kernel->setAttr("coat.kernel", record);
  return kernel;
}

func::FuncOp KernelContainer::createCpuTwin(func::FuncOp spec,
                                            StringRef kernelName,
                                            FunctionType type,
                                            DictionaryAttr record) {
  OpBuilder b(spec);
  auto twin = func::FuncOp::create(b, spec.getLoc(),
                                   (kernelName + kTwinSuffix).str(), type);
  twin->setAttr("coat.kernel", record);
  return twin;
}

void KernelContainer::finish() {
  if (gpu) {
    if (gpuModule)
      module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                      UnitAttr::get(module.getContext()));
    return;
  }
  for (auto fn : llvm::make_early_inc_range(module.getOps<func::FuncOp>())) {
    StringRef n = fn.getSymName();
    if (n.ends_with(kTwinSuffix) && fn->hasAttr("coat.kernel"))
      fn.setSymName(n.drop_back(kTwinSuffix.size()));
  }
}
