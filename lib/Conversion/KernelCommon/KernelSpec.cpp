//===- KernelSpec.cpp - what every kernel-spec lowering shares ------------===//

#include "coat/Conversion/KernelSpec.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/SmallPtrSet.h"

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

LogicalResult
mlir::coat::checkSpecsAreTopLevel(ModuleOp module, StringRef pass,
                                  function_ref<bool(Operation *)> ours) {
  bool bad = false;
  llvm::SmallPtrSet<Operation *, 4> reported;
  module.walk([&](Operation *op) {
    if (!ours(op))
      return;
    auto fn = op->getParentOfType<func::FuncOp>();
    if (fn && fn->getParentOp() == module)
      return;
    bad = true;
    if (!fn) {
      op->emitError(pass) << ": '" << op->getName()
                          << "' outside a function is not lowered; kernel "
                             "specs are top-level functions of the module";
      return;
    }
    if (!reported.insert(fn).second)
      return;
    fn.emitError(pass) << ": kernel-spec function @" << fn.getSymName()
                       << " sits in a nested '"
                       << fn->getParentOp()->getName()
                       << "' and is not lowered; kernel specs are top-level "
                          "functions of the module the pass runs on";
  });
  return failure(bad);
}

FailureOr<SmallVector<func::FuncOp>>
mlir::coat::collectKernelSpecs(ModuleOp module, StringRef pass,
                               function_ref<bool(Operation *)> ours) {
  if (failed(checkSpecsAreTopLevel(module, pass, ours)))
    return failure();
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
    if (Operation *taken = SymbolTable::lookupSymbolIn(module, name)) {
      taken->emitError(pass)
          << ": symbol @" << name
          << " is taken; the pass puts its kernels in a new gpu.module of "
             "that name";
      clashed = true;
    }
    b.setInsertionPointToEnd(module.getBody());
    gpuModule = gpu::GPUModuleOp::create(b, loc, name);
  } else if (Operation *other =
                 SymbolTable::lookupSymbolIn(gpuModule, kernelName)) {
    InFlightDiagnostic d = emitError(loc, pass);
    d << ": two kernels named @" << kernelName << " in gpu.module @" << name;
    d.attachNote(other->getLoc()) << "the other kernel @" << kernelName
                                  << " is made for this spec";
    clashed = true;
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
  std::string twinName = (kernelName + kTwinSuffix).str();
  for (StringRef n : {kernelName, StringRef(twinName)}) {
    Operation *other = SymbolTable::lookupSymbolIn(module, n);
    if (!other || other == spec.getOperation())
      continue;
    InFlightDiagnostic d = spec.emitError(pass);
    d << ": the CPU twin @" << kernelName << " clashes with symbol @" << n;
    d.attachNote(other->getLoc()) << "symbol @" << n << " is here";
    clashed = true;
    break;
  }
  OpBuilder b(spec);
  auto twin = func::FuncOp::create(b, spec.getLoc(),
                                   twinName, type);
  twin->setAttr("coat.kernel", record);
  return twin;
}

LogicalResult KernelContainer::finish() {
  if (clashed)
    return failure();
  if (gpu) {
    if (gpuModule)
      module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                      UnitAttr::get(module.getContext()));
    return success();
  }
  for (auto fn : llvm::make_early_inc_range(module.getOps<func::FuncOp>())) {
    StringRef n = fn.getSymName();
    if (n.ends_with(kTwinSuffix) && fn->hasAttr("coat.kernel"))
      fn.setSymName(n.drop_back(kTwinSuffix.size()));
  }
  return success();
}
