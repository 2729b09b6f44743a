"""The compile pipelines: the one place that says which coat-opt passes turn a
module into PTX, cubin, the CPU library and manifest.json.

Every step runs in a subprocess, so an LLVM fatal error can never take the
calling Python process down; it becomes a CompileError.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from . import _paths
from ._compile_error import CompileError, _describe_exit

LLVM_BIN = Path(os.environ.get("COAT_LLVM_BIN", "/usr/lib/llvm-22/bin"))

# Kernels -> gpu.binary; {fmt} is isa (PTX) or bin (cubin, runs ptxas).
# The flow lowerings (pointwise, norms) own kernel specs whose maxima are
# fused into the producer (coat.absmax ... epilogue); the activation lowering
# takes only specs without another coat op.
GPU_PIPELINE = (
    "builtin.module(coat-fuse-adamw,coat-lower-optimizer{{target=gpu {lower}}},"
    "coat-lower-pointwise{{target=gpu {pointwise}}},coat-lower-norms{{target=gpu {norms}}},"
    "coat-lower-activations{{target=gpu {activation}}},"
    "coat-lower-reduce-scales{{target=gpu}},"
    "coat-lower-linear{{target=gpu {linear}}},"
    "coat-export-manifest{{dir={out} chip={chip} features={features}}},"
    "coat-gpu-to-binary{{chip={chip} features={features} format={fmt}}},"
    "coat-export-binaries{{dir={out}}})")

# Occupancy hints measured fastest (docs/benchmarks.md): the optimizer step
# at 5 CTAs of 128 threads a multiprocessor (6 for bf16 parameters), the
# flat activation kernels and the pointwise flow kernels at 6 of 256. A hint
# is kept only where ptxas fits it without spilling
# (coat-drop-spilling-min-ctas), so it needs ptxas, which compiling to
# cubins needs anyway: asked for here, not as pass defaults that would make
# PTX-only users of coat-opt need a CUDA toolkit.
GPU_OCCUPANCY_HINTS = {"lower": "min-ctas=5 bf16-min-ctas=6",
                       "activation": "flat-min-ctas=6", "pointwise": "min-ctas=6"}


def merge_pass_options(defaults: str, given: str) -> str:
    """Pass options `given` ("key=value ...") over `defaults`, key by key."""
    merged = {}
    for opt in (defaults + " " + given).split():
        merged[opt.split("=", 1)[0]] = opt
    return " ".join(merged.values())


# libdevice picks IEEE sqrt (sqrt.rn.f32, nvcc's default) only when told to;
# ops that asked for approximations (afn) are not affected.
GPU_LLVM_FLAGS = ("--nvvm-reflect-add=__CUDA_PREC_SQRT=1",)

# The same kernels for the CPU, down to the LLVM dialect. The GEMM twins get
# the GPU's linear options so that both targets record the same kernel;
# coat-expand-shared-divisions and coat-expand-soft-exp2 (part of
# coat-gpu-to-binary) are explicit here.
CPU_PIPELINE = (
    "builtin.module(coat-fuse-adamw,coat-lower-optimizer{{target=cpu}},"
    "coat-lower-pointwise{{target=cpu {pointwise}}},coat-lower-norms{{target=cpu {norms}}},"
    "coat-lower-activations{{target=cpu}},coat-lower-reduce-scales{{target=cpu}},"
    "coat-lower-linear{{target=cpu {linear}}},coat-expand-shared-divisions,"
    "coat-expand-soft-exp2,"
    "coat-export-manifest{{dir={out} chip={chip} features={features}}},"
    "coat-expand-fp8-conversions,arith-expand{{include-bf16=true}},canonicalize,cse,"
    "convert-vector-to-scf,"
    "convert-scf-to-cf,expand-strided-metadata,lower-affine,convert-to-llvm,"
    "reconcile-unrealized-casts)")


# A model program (before granularity resolution) to outlined kernel calls.
PROGRAM_PASSES = ("-coat-mixed-granularity", "-coat-group-scaling",
                  "-coat-recompute-activations", "-coat-outline-kernels")


@dataclass
class Toolchain:
    coat_opt: Optional[str] = None
    llvm_bin: Path = LLVM_BIN
    timeout: float = 900

    def __post_init__(self):
        self.coat_opt = self.coat_opt or _paths.find_coat_opt()
        if not self.coat_opt:
            raise CompileError("coat-opt not found: build it (scripts/build.sh) "
                               "or set COAT_OPT")

    def _run(self, cmd: List[str], what: str) -> None:
        try:
            r = subprocess.run(cmd, capture_output=True, text=True,
                               timeout=self.timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise CompileError(f"{what} timed out after {self.timeout} s",
                               command=cmd) from None
        except OSError as e:
            raise CompileError(f"cannot execute {cmd[0]}: {e}", command=cmd) from None
        if r.returncode != 0:
            raise CompileError(f"{what} failed ({_describe_exit(r.returncode)})",
                               r.stderr + r.stdout, cmd, r.returncode)

    def compile_file(self, src: Path, out: Path, *, chip: str = "sm_90a",
                     features: str = "+ptx80", gpu: bool = True,
                     cpu: bool = True, lower_options: str = "",
                     linear_options: str = "",
                     pointwise_options: str = "",
                     norm_options: str = "",
                     activation_options: str = "") -> List[Path]:
        """Compiles `src` into `out`; returns the files produced.
        `lower_options` go to coat-lower-optimizer for the GPU (for example
        "elements-per-thread=8 block-size=256"), `linear_options` to
        coat-lower-linear (for example "tile-n=128 stages=3"),
        `pointwise_options` to coat-lower-pointwise on both targets (for
        example "exact-math=true"), `norm_options` to coat-lower-norms on
        both targets (for example "column-sums=separate"),
        `activation_options` to
        coat-lower-activations for the GPU (for example "tile=64
        tile-min-ctas=3"). The GPU passes get GPU_OCCUPANCY_HINTS first;
        an option given here replaces the hint of the same key
        ("min-ctas=0" drops it)."""
        src, out = Path(src).resolve(), Path(out).resolve()
        out.mkdir(parents=True, exist_ok=True)
        manifest = out / "manifest.json"
        if manifest.exists():
            manifest.unlink()  # the export passes merge into an existing one
        fmt_args = dict(out=out, chip=chip, features=features, lower=lower_options,
                        linear=linear_options, pointwise=pointwise_options,
                        norms=norm_options, activation=activation_options)
        gpu_args = dict(fmt_args, **{k: merge_pass_options(v, fmt_args[k])
                                     for k, v in GPU_OCCUPANCY_HINTS.items()})
        if gpu:
            for fmt in ("isa", "bin"):
                self._run([self.coat_opt, str(src), *GPU_LLVM_FLAGS,
                           "--pass-pipeline=" + GPU_PIPELINE.format(fmt=fmt, **gpu_args),
                           "-o", os.devnull], f"coat-opt (gpu, {fmt})")
        if cpu:
            llvm_mlir = out / "coat_cpu.llvm.mlir"
            self._run([self.coat_opt, str(src),
                       "--pass-pipeline=" + CPU_PIPELINE.format(**fmt_args),
                       "-o", str(llvm_mlir)], "coat-opt (cpu)")
        if not manifest.exists():
            raise CompileError(f"coat-opt wrote no manifest.json to {out}: "
                               f"{src} holds no kernel-spec functions")
        if cpu:
            ll = out / "coat_cpu.ll"
            self._run([str(self.llvm_bin / "mlir-translate"), "--mlir-to-llvmir",
                       str(llvm_mlir), "-o", str(ll)], "mlir-translate")
            obj = out / "coat_cpu.o"
            self._run([str(self.llvm_bin / "clang"), "-O2", "-fPIC", "-w", "-c",
                       str(ll), "-o", str(obj)], "clang (cpu object)")
            self._run([str(self.llvm_bin / "clang"), "-shared", "-o",
                       str(out / "coat_cpu.so"), str(obj), "-lm"], "clang (cpu link)")
            llvm_mlir.unlink()
            ll.unlink()
        return sorted(p for p in out.iterdir() if p.is_file())

    def compile_program(self, src: Path, out: Path, **options) -> List[Path]:
        """Compiles a model program (coat ops with ``coat.quantize_auto``,
        e.g. from :mod:`coat.programs`) into ``out``: the granularity passes
        and outlining, the kernels of every outlined spec (as
        :meth:`compile_file`, with the same ``options``), then the launch
        plan of each program in manifest.json (``coat-export-programs``).
        Leaves ``program.mlir`` (the outlined program) and ``kernels.mlir``
        (its specs) beside them."""
        src, out = Path(src).resolve(), Path(out).resolve()
        out.mkdir(parents=True, exist_ok=True)
        program, kernels = out / "program.mlir", out / "kernels.mlir"
        self._run([self.coat_opt, str(src), *PROGRAM_PASSES,
                   "-mlir-print-op-on-diagnostic=false", "-o", str(program)],
                  "coat-opt (outline program)")
        self._run([self.coat_opt, str(program), "-coat-export-programs=strip",
                   "-o", str(kernels)], "coat-opt (kernel specs)")
        self.compile_file(kernels, out, **options)
        self._run([self.coat_opt, str(program), f"-coat-export-programs=dir={out}",
                   "-o", os.devnull], "coat-opt (launch plan)")
        return sorted(p for p in out.iterdir() if p.is_file())
