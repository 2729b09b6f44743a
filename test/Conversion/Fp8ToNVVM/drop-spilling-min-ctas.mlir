// coat-drop-spilling-min-ctas (inside coat-gpu-to-binary) asks ptxas which
// kernels fit `.minnctapersm 6` without spilling and keeps the hint only on
// those: of the example quantizers, the 1x16 bf16 kernel fits 40 registers,
// the 1x32..1x128 bf16 kernels spill under them (docs/benchmarks.md).
// REQUIRES: ptxas
// RUN: coat-opt %coat_src/examples/activations/quantize.mlir \
// RUN:   --pass-pipeline='builtin.module(coat-lower-activations{target=gpu flat-min-ctas=6},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s
// Without the hint nothing runs ptxas: no toolkit is needed.
// RUN: env -u CUDA_HOME -u CUDA_ROOT -u CUDA_PATH PATH=/nonexistent \
// RUN:   coat-opt %coat_src/examples/activations/quantize.mlir \
// RUN:   --pass-pipeline='builtin.module(coat-lower-activations{target=gpu},coat-gpu-to-binary{format=isa})' \
// RUN:   | sed -e 's/\\0A/\n/g' -e 's/\\09/ /g' | FileCheck %s --check-prefix=NOHINT
// With the hint and no ptxas: a diagnostic, not a guess.
// RUN: not env -u CUDA_HOME -u CUDA_ROOT -u CUDA_PATH PATH=/nonexistent \
// RUN:   coat-opt %coat_src/examples/activations/quantize.mlir \
// RUN:   --pass-pipeline='builtin.module(coat-lower-activations{target=gpu flat-min-ctas=6},coat-gpu-to-binary{format=isa})' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NOPTXAS
// RUN: not coat-opt %s --pass-pipeline='builtin.module(gpu.module(coat-drop-spilling-min-ctas))' 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NOTARGET

// CHECK: .entry coat_quantize_bf16_e4m3_g16_sbf16(
// CHECK: .minnctapersm 6
// CHECK: .entry coat_quantize_bf16_e4m3_g32_sbf16(
// CHECK-NOT: .minnctapersm
// CHECK: .entry coat_quantize_bf16_e4m3_g128_sbf16(
// CHECK-NOT: .minnctapersm
// CHECK: .entry coat_quantize_f32_e4m3_g16_sbf16(
// CHECK: .minnctapersm 6

// NOHINT-NOT: .minnctapersm

// NOPTXAS: error: coat-drop-spilling-min-ctas: ptxas not found ($PATH, $CUDA_ROOT, $CUDA_HOME, $CUDA_PATH); it decides which kernels keep nvvm.minctasm

// NOTARGET: error: coat-drop-spilling-min-ctas: the module needs an #nvvm.target (run it inside coat-gpu-to-binary)
module attributes {gpu.container_module} {
  gpu.module @kernels {
    llvm.func @k() attributes {coat.min_ctas_unless_spilling, gpu.kernel, nvvm.kernel, nvvm.minctasm = 4 : i32} {
      llvm.return
    }
  }
}
