//===- KernelSpec.h - what every kernel-spec lowering shares ----*- C++ -*-===//
//
// The lowerings that turn kernel-spec functions into kernels (optimizer,
// activations, scales, pointwise flow, norms, GEMM) produce the same
// containers: a gpu.module of kernel entry points, or CPU twins with the
// kernels' names and ABI. Making and finishing those lives here, once.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_CONVERSION_KERNELSPEC_H
#define COAT_CONVERSION_KERNELSPEC_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::coat {

/// Whether a lowering's `target` option names the GPU. Anything but "gpu"
/// and "cpu" is an error naming the pass.
FailureOr<bool> parseKernelTarget(ModuleOp module, StringRef pass,
                                  StringRef target);

/// Fails, with an error naming `pass` on each, where an op for which `ours`
/// holds sits anywhere but in a top-level function of `module` (in a nested
/// module, say): the lowerings take only those, and would leave it as is.
LogicalResult checkSpecsAreTopLevel(ModuleOp module, StringRef pass,
                                    function_ref<bool(Operation *)> ours);

/// The kernel-spec functions of `module` a lowering takes: the defined
/// functions holding an op for which `ours` holds. Fails, as
/// `checkSpecsAreTopLevel`, where such an op is out of their reach.
FailureOr<SmallVector<func::FuncOp>>
collectKernelSpecs(ModuleOp module, StringRef pass,
                   function_ref<bool(Operation *)> ours);

/// Where a lowering puts its kernels: one gpu.module of `name` at the end of
/// the module, created on first use. A name the kernels or their container
/// would share with another symbol is an error naming `pass`, reported as
/// the kernel is made; `finish` then fails.
class KernelContainer {
public:
  KernelContainer(ModuleOp module, StringRef pass, StringRef name, bool gpu)
      : module(module), pass(pass), name(name), gpu(gpu) {}

  /// A kernel entry point `name` with `type` (and workgroup attributions),
  /// launched with `blockSize` threads, carrying its manifest `record`.
  gpu::GPUFuncOp createGpuKernel(Location loc, StringRef kernelName,
                                 FunctionType type, int64_t blockSize,
                                 DictionaryAttr record,
                                 TypeRange workgroup = {});

  /// The CPU twin of `spec`: a function beside it, named after the kernel
  /// once `finish` has run (the spec still holds the name until erased).
  func::FuncOp createCpuTwin(func::FuncOp spec, StringRef kernelName,
                             FunctionType type, DictionaryAttr record);

  /// After the specs are erased: marks the module as a GPU container, or
  /// gives the CPU twins their kernels' names. Fails if a name clashed.
  LogicalResult finish();

  /// Whether the kernels go to a gpu.module (else they are CPU twins).
  bool onGpu() const { return gpu; }

private:
  ModuleOp module;
  std::string pass;
  std::string name;
  bool gpu;
  bool clashed = false;
  gpu::GPUModuleOp gpuModule;
};

} // namespace mlir::coat

#endif // COAT_CONVERSION_KERNELSPEC_H
