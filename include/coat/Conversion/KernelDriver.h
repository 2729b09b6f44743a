//===- KernelDriver.h - one driver for every kernel family ------*- C++ -*-===//
//
// Every kernel family (scales, pointwise flow, norms, activations, GEMM,
// optimizer) lowers a kernel-spec function through the same steps: analyze
// the spec, declare its kernels' argument ABI, bind the ABI to the spec,
// record the manifest entry, make the GPU kernel or the CPU twin, emit its
// body over the ABI's arguments by name, and erase the spec. KernelLowering
// runs those steps once; a family supplies what differs through a few hooks
// (docs/design.md, "Adding a kernel family").
//
//===----------------------------------------------------------------------===//

#ifndef COAT_CONVERSION_KERNELDRIVER_H
#define COAT_CONVERSION_KERNELDRIVER_H

#include "coat/Conversion/KernelRecord.h"
#include "coat/Conversion/KernelSpec.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"

#include <string>
#include <vector>

namespace mlir::coat {

/// The arguments of a kernel or CPU twin, by ABI name.
using KernelArgs = llvm::StringMap<Value>;

/// Names the block arguments `values` after the ABI they were made from.
KernelArgs bindArgs(ValueRange values, ArrayRef<AbiArg> abi);

/// What ABI arguments are in terms of the kernel-spec function
/// (docs/manifest.md, "Bindings"), by argument name.
using SpecBindings = llvm::StringMap<std::vector<std::string>>;

/// Sets the binding of each argument of `abi` that `binds` names; the others
/// keep theirs.
void bindToSpec(MutableArrayRef<AbiArg> abi, const SpecBindings &binds);

/// The function type of a kernel whose parameters are `abi`.
FunctionType abiFunctionType(MLIRContext *ctx, ArrayRef<AbiArg> abi);

/// A 1-D buffer of `logical` elements as kernels declare it: memref<? x
/// laneStorageType(logical)>.
MemRefType abiBuffer(Type logical);

/// A buffer in workgroup (shared) memory.
MemRefType workgroupBuffer(ArrayRef<int64_t> shape, Type element);

/// The most CTAs a multiprocessor holds (sm_90): the range of the lowerings'
/// occupancy options is [0, kMaxCtasPerMultiprocessor].
constexpr int64_t kMaxCtasPerMultiprocessor = 32;

/// Reports at `anchor` an occupancy option (`name` = `value`) outside
/// [0, kMaxCtasPerMultiprocessor]; `prefix` (a pass name and ": ") starts the
/// message where the anchor does not say which pass it is.
LogicalResult checkMinCtasOption(Operation *anchor, StringRef name,
                                 int64_t value, StringRef prefix = "");

/// Shared memory one block may opt in to on Hopper (227 KiB).
constexpr int64_t kSharedBytesPerBlock = 227 * 1024;

/// Asks ptxas for `minCtas` CTAs a multiprocessor (`.minnctapersm`) where
/// that does not spill: coat-drop-spilling-min-ctas decides. 0 asks nothing.
void requestMinCtasUnlessSpilling(gpu::GPUFuncOp kernel, int64_t minCtas);

/// One kernel that a spec lowers to.
struct KernelDecl {
  std::string name;            ///< the kernel's (and its CPU twin's) symbol
  SmallVector<AbiArg> abi;     ///< its parameters, in order
  int64_t blockSize = 0;       ///< GPU: threads per CTA
  SmallVector<Type> workgroup; ///< GPU: workgroup attributions
};

/// Emits the body of a GPU kernel or of a CPU twin; the builder starts at
/// the entry block and the driver adds the terminator at its end.
using GpuBodyFn = function_ref<void(ImplicitLocOpBuilder &, gpu::GPUFuncOp,
                                    const KernelArgs &)>;
using CpuBodyFn = function_ref<void(ImplicitLocOpBuilder &, func::FuncOp,
                                    const KernelArgs &)>;

/// Makes the kernel `decl` of `spec` in `kernels` (a gpu.func, or the CPU
/// twin beside the spec when the container is for the CPU) with `record`,
/// and emits its body.
void emitKernel(KernelContainer &kernels, func::FuncOp spec,
                const KernelDecl &decl, DictionaryAttr record,
                GpuBodyFn emitGpu, CpuBodyFn emitCpu);

/// The names a family's lowering goes by.
struct KernelFamilyInfo {
  StringRef pass;      ///< the pass, as diagnostics name it
  StringRef container; ///< the gpu.module the GPU kernels go to
  /// Stop at the first spec that fails to analyze instead of reporting on
  /// every spec.
  bool stopAtFirstFailure = false;
};

/// Declares, in a family's lowering class whose spec type is `SPEC`, the
/// hooks every family defines with the same signature: declare, record,
/// emitGpu and emitCpu (`analyze` is declared by hand: its arguments vary).
#define COAT_KERNEL_LOWERING_HOOKS(SPEC)                                       \
  ::llvm::SmallVector<::mlir::coat::KernelDecl> declare(                      \
      ::mlir::func::FuncOp fn, const SPEC &spec) const;                        \
  ::mlir::DictionaryAttr record(const SPEC &spec,                              \
                                const ::mlir::coat::KernelDecl &decl,          \
                                unsigned index) const;                         \
  void emitGpu(::mlir::ImplicitLocOpBuilder &b, const SPEC &spec,              \
               unsigned index, ::mlir::gpu::GPUFuncOp kernel,                  \
               const ::mlir::coat::KernelArgs &args) const;                    \
  void emitCpu(::mlir::ImplicitLocOpBuilder &b, const SPEC &spec,              \
               unsigned index, ::mlir::func::FuncOp twin,                      \
               const ::mlir::coat::KernelArgs &args) const;

/// Lowers the kernel specs of a module for one family. `Derived` provides:
///
///   bool isSpecOp(Operation *op);
///       the ops that make a top-level function a kernel spec;
///   FailureOr<Spec> analyze(func::FuncOp fn);
///       what the spec means, checked (onGpu() tells the target);
///   SmallVector<KernelDecl> declare(func::FuncOp fn, const Spec &spec);
///       its kernels' names, ABI and launch shape;
///   DictionaryAttr record(const Spec &, const KernelDecl &, unsigned i);
///       the manifest record of kernel i;
///   void emitGpu(ImplicitLocOpBuilder &, const Spec &, unsigned i,
///                gpu::GPUFuncOp, const KernelArgs &);
///   void emitCpu(ImplicitLocOpBuilder &, const Spec &, unsigned i,
///                func::FuncOp, const KernelArgs &);
///
/// (COAT_KERNEL_LOWERING_HOOKS declares the last four), and may replace the
/// defaults of checkOptions (option checks for the whole module, reported at
/// its first kernel spec), takesSpec (skips a collected function) and
/// bindings (what the ABI arguments are in terms of the spec, when `declare`
/// leaves them unbound).
template <typename Derived, typename SpecT>
class KernelLowering {
public:
  using Spec = SpecT;

  explicit KernelLowering(KernelFamilyInfo info) : info(info) {}

  /// Lowers every kernel spec of `module` for `target` ("gpu" or "cpu").
  LogicalResult run(ModuleOp module, StringRef target) {
    FailureOr<bool> parsed = parseKernelTarget(module, info.pass, target);
    if (failed(parsed))
      return failure();
    gpu = *parsed;
    FailureOr<SmallVector<func::FuncOp>> specs = collectKernelSpecs(
        module, info.pass, [&](Operation *op) { return self().isSpecOp(op); });
    if (failed(specs))
      return failure();
    // Option errors point at the first kernel spec: an implicit module's
    // location is only the file.
    Operation *optionsAnchor =
        specs->empty() ? module.getOperation() : specs->front().getOperation();
    if (failed(self().checkOptions(optionsAnchor)))
      return failure();
    KernelContainer kernels(module, info.pass, info.container, gpu);
    bool failedAny = false;
    for (func::FuncOp fn : *specs) {
      if (!self().takesSpec(fn))
        continue;
      FailureOr<Spec> spec = self().analyze(fn);
      if (failed(spec)) {
        if (info.stopAtFirstFailure)
          return failure();
        failedAny = true;
        continue;
      }
      lowerSpec(kernels, fn, *spec);
    }
    if (failedAny)
      return failure();
    return kernels.finish();
  }

  /// Declares, binds, records and emits the kernels of the analyzed `spec`
  /// in `kernels`, then erases `fn`.
  void lowerSpec(KernelContainer &kernels, func::FuncOp fn, const Spec &spec) {
    gpu = kernels.onGpu();
    SmallVector<KernelDecl> decls = self().declare(fn, spec);
    SpecBindings binds = self().bindings(fn, spec);
    for (auto [i, decl] : llvm::enumerate(decls)) {
      bindToSpec(decl.abi, binds);
      unsigned index = i;
      DictionaryAttr record = self().record(spec, decl, index);
      emitKernel(
          kernels, fn, decl, record,
          [&](ImplicitLocOpBuilder &b, gpu::GPUFuncOp kernel,
              const KernelArgs &args) {
            self().emitGpu(b, spec, index, kernel, args);
          },
          [&](ImplicitLocOpBuilder &b, func::FuncOp twin,
              const KernelArgs &args) {
            self().emitCpu(b, spec, index, twin, args);
          });
    }
    fn.erase();
  }

  // Defaults of the optional hooks.
  LogicalResult checkOptions(Operation *) { return success(); }
  bool takesSpec(func::FuncOp) { return true; }
  SpecBindings bindings(func::FuncOp, const Spec &) { return {}; }

  /// Whether the kernels being made are GPU kernels (else CPU twins).
  bool onGpu() const { return gpu; }

private:
  Derived &self() { return static_cast<Derived &>(*this); }

  KernelFamilyInfo info;
  bool gpu = false;
};

} // namespace mlir::coat

#endif // COAT_CONVERSION_KERNELDRIVER_H
