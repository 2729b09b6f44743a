//===- PipelinePasses.td - passes that run whole pipelines -*- tablegen -*-===//
//
// Owned with lib/Conversion/Pipelines: they schedule the lowerings of
// Passes.td and upstream's NVVM and LLVM conversions, so they live in the
// library that links those.
//
//===----------------------------------------------------------------------===//

#ifndef COAT_CONVERSION_PIPELINEPASSES_TD
#define COAT_CONVERSION_PIPELINEPASSES_TD

include "mlir/Pass/PassBase.td"

def CoatCompileArtifact : Pass<"coat-compile-artifact", "::mlir::ModuleOp"> {
  let summary = "Compiles a module's kernel specs and programs into one "
                "artifact folder";
  let description = [{
    The one pass that writes a compiled artifact (docs/manifest.md): from
    a module of kernel-spec functions, and optionally programs that
    `coat-outline-kernels` cut into calls to them (functions marked
    `coat.program`), it writes to `dir`

    - `<gpu.module>.ptx` and `<gpu.module>.cubin` of every GPU kernel: the
      specs lowered once for the GPU (`coat-fuse-adamw`, the
      `coat-lower-*` lowerings with `target=gpu`, then the device half of
      `coat-gpu-to-binary`), the PTX being the text ptxas assembled into
      the cubin;
    - `coat_cpu.ll`, the LLVM IR of every kernel's CPU twin (the same
      lowerings with `target=cpu`, FP8 conversions in integer arithmetic),
      for the host compiler;
    - `manifest.json`, written once, last: every kernel's `coat.kernel`
      record, a kernel and its twin in one entry, and the launch plan of
      every program checked against them (a call no kernel runs, or a
      kernel argument with no binding, is an error at the call).

    The module itself is left as it was (the specs are lowered in clones),
    so the outlined program can be printed beside the artifact:

    ```
    coat-opt block.mlir --pass-pipeline='builtin.module(coat-mixed-granularity,
        coat-group-scaling,coat-recompute-activations,coat-outline-kernels,
        coat-compile-artifact{dir=out norms={column-sums=shared}})' -o out/program.mlir
    ```

    Each lowering's options are given as one string (`norms={...}`), for
    both targets or, where marked, the GPU only. On the GPU they come after
    the occupancy hints measured fastest (docs/benchmarks.md: the optimizer
    step at 5 CTAs of 128 threads a multiprocessor, 6 for bf16 parameters;
    the flat activation kernels and the pointwise kernels at 6), which
    ptxas keeps only where they fit without spilling; an option of the same
    key replaces its hint (`optimizer={min-ctas=0}` drops it). With
    `cubin=false` only PTX is written, without the hints (deciding them
    needs ptxas).
  }];
  let options = [
    Option<"dir", "dir", "std::string", /*default=*/"\".\"",
           "Folder that receives the artifact">,
    Option<"chip", "chip", "std::string", /*default=*/"\"sm_90a\"",
           "GPU target chip">,
    Option<"features", "features", "std::string", /*default=*/"\"+ptx80\"",
           "GPU target features (PTX ISA)">,
    Option<"optLevel", "opt-level", "unsigned", /*default=*/"3",
           "LLVM optimization level of the GPU code">,
    Option<"toolkit", "toolkit", "std::string", /*default=*/"\"\"",
           "CUDA toolkit root holding bin/ptxas and nvvm/libdevice "
           "(default: $PATH, then $CUDA_ROOT, $CUDA_HOME, $CUDA_PATH)">,
    Option<"gpu", "gpu", "bool", /*default=*/"true",
           "Compile the GPU kernels">,
    Option<"cpu", "cpu", "bool", /*default=*/"true",
           "Compile the CPU twins">,
    Option<"cubin", "cubin", "bool", /*default=*/"true",
           "Assemble the PTX into cubins (runs ptxas)">,
    Option<"optimizerOptions", "optimizer", "std::string", /*default=*/"\"\"",
           "Options of coat-lower-optimizer (GPU only)">,
    Option<"pointwiseOptions", "pointwise", "std::string", /*default=*/"\"\"",
           "Options of coat-lower-pointwise">,
    Option<"normOptions", "norms", "std::string", /*default=*/"\"\"",
           "Options of coat-lower-norms">,
    Option<"activationOptions", "activations", "std::string",
           /*default=*/"\"\"",
           "Options of coat-lower-activations (GPU only)">,
    Option<"linearOptions", "linear", "std::string", /*default=*/"\"\"",
           "Options of coat-lower-linear">,
    Option<"sourceKey", "source-key", "std::string", /*default=*/"\"\"",
           "Identity of what was compiled (source text, options, target), "
           "recorded as the manifest's source_key for the programs' finders">,
  ];
}

#endif // COAT_CONVERSION_PIPELINEPASSES_TD
