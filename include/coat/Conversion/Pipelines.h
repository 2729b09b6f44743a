//===- Pipelines.h - coat pass pipelines ------------------------*- C++ -*-===//

#ifndef COAT_CONVERSION_PIPELINES_H
#define COAT_CONVERSION_PIPELINES_H

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir {
class OpPassManager;
namespace coat {

/// Options of `coat-gpu-to-binary`.
struct GpuToBinaryOptions : PassPipelineOptions<GpuToBinaryOptions> {
  Option<std::string> chip{*this, "chip", llvm::cl::desc("Target chip"),
                           llvm::cl::init("sm_90a")};
  Option<std::string> features{*this, "features",
                               llvm::cl::desc("Target features (PTX ISA)"),
                               llvm::cl::init("+ptx80")};
  Option<unsigned> optLevel{*this, "opt-level",
                            llvm::cl::desc("LLVM optimization level"),
                            llvm::cl::init(3)};
  Option<std::string> format{
      *this, "format",
      llvm::cl::desc("Object format: isa (PTX), bin (cubin, runs ptxas) or "
                     "fatbin (runs ptxas and fatbinary)"),
      llvm::cl::init("bin")};
  Option<std::string> toolkit{
      *this, "toolkit",
      llvm::cl::desc("CUDA toolkit root holding bin/ptxas and "
                     "nvvm/libdevice (default: $PATH, then $CUDA_ROOT, "
                     "$CUDA_HOME, $CUDA_PATH)"),
      llvm::cl::init("")};
};

/// Appends `coat-gpu-to-binary` to a module-level pass manager: attach an
/// #nvvm.target, check it, lower every gpu.module (FP8 conversions first) to
/// the LLVM/NVVM dialects and serialize it to a gpu.binary.
void buildGpuToBinaryPipeline(OpPassManager &pm,
                              const GpuToBinaryOptions &options);

/// The same without the serialization: every gpu.module ends in the
/// LLVM/NVVM dialects with its #nvvm.target attached (`format` unused).
void buildGpuToNVVMPipeline(OpPassManager &pm,
                            const GpuToBinaryOptions &options);

#define GEN_PASS_DECL
#include "coat/Conversion/PipelinePasses.h.inc"

/// Registers `coat-gpu-to-binary` and the passes of PipelinePasses.td with
/// the global pass registry.
void registerCoatPipelines();

} // namespace coat
} // namespace mlir

#endif // COAT_CONVERSION_PIPELINES_H
