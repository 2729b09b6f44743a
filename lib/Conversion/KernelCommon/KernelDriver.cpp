//===- KernelDriver.cpp - one driver for every kernel family --------------===//

#include "coat/Conversion/KernelDriver.h"
#include "coat/Conversion/GroupKernel.h"
#include "coat/Conversion/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;
using namespace mlir::coat;

KernelArgs mlir::coat::bindArgs(ValueRange values, ArrayRef<AbiArg> abi) {
  // A gpu.func's entry block also holds its workgroup attributions.
  assert(values.size() >= abi.size() && "fewer arguments than the ABI");
  KernelArgs args;
  for (auto [v, a] : llvm::zip(values, abi))
    args[a.name] = v;
  return args;
}

void mlir::coat::bindToSpec(MutableArrayRef<AbiArg> abi,
                            const SpecBindings &binds) {
  for (AbiArg &a : abi)
    if (auto it = binds.find(a.name); it != binds.end())
      a.bind = it->second;
}

FunctionType mlir::coat::abiFunctionType(MLIRContext *ctx,
                                         ArrayRef<AbiArg> abi) {
  SmallVector<Type> types;
  for (const AbiArg &a : abi)
    types.push_back(a.type);
  return FunctionType::get(ctx, types, {});
}

MemRefType mlir::coat::abiBuffer(Type logical) {
  return MemRefType::get({ShapedType::kDynamic}, laneStorageType(logical));
}

LogicalResult mlir::coat::checkMinCtasOption(Operation *anchor, StringRef name,
                                             int64_t value, StringRef prefix) {
  if (value >= 0 && value <= kMaxCtasPerMultiprocessor)
    return success();
  return anchor->emitError() << prefix << name << " must be in [0, "
                             << kMaxCtasPerMultiprocessor << "], got " << value;
}

void mlir::coat::requestMinCtasUnlessSpilling(gpu::GPUFuncOp kernel,
                                               int64_t minCtas) {
  if (minCtas <= 0)
    return;
  Builder b(kernel.getContext());
  kernel->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
                  b.getI32IntegerAttr(static_cast<int32_t>(minCtas)));
  kernel->setAttr(kMinCtasUnlessSpillingAttr, b.getUnitAttr());
}

MemRefType mlir::coat::workgroupBuffer(ArrayRef<int64_t> shape, Type element) {
  MLIRContext *ctx = element.getContext();
  return MemRefType::get(
      shape, element, AffineMap(),
      gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup));
}

void mlir::coat::emitKernel(KernelContainer &kernels, func::FuncOp spec,
                            const KernelDecl &decl, DictionaryAttr record,
                            GpuBodyFn emitGpu, CpuBodyFn emitCpu) {
  MLIRContext *ctx = spec.getContext();
  Location loc = spec.getLoc();
  FunctionType type = abiFunctionType(ctx, decl.abi);
  ImplicitLocOpBuilder b(loc, ctx);
  if (kernels.onGpu()) {
    gpu::GPUFuncOp kernel = kernels.createGpuKernel(
        loc, decl.name, type, decl.blockSize, record, decl.workgroup);
    Block *entry = &kernel.getBody().front();
    b.setInsertionPointToStart(entry);
    emitGpu(b, kernel, bindArgs(kernel.getArguments(), decl.abi));
    b.setInsertionPointToEnd(entry);
    gpu::ReturnOp::create(b);
    return;
  }
  func::FuncOp twin = kernels.createCpuTwin(spec, decl.name, type, record);
  Block *entry = twin.addEntryBlock();
  b.setInsertionPointToStart(entry);
  emitCpu(b, twin, bindArgs(twin.getArguments(), decl.abi));
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b);
}
