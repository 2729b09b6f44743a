"""The compile pipelines: the one place that says which coat-opt passes turn a
module into PTX, cubin, the CPU library and manifest.json.

Every step runs in a subprocess, so an LLVM fatal error can never take the
calling Python process down; it becomes a CompileError.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

LLVM_BIN = Path("/usr/lib/llvm-22/bin")

# Kernels -> gpu.binary; {fmt} is isa (PTX) or bin (cubin, runs ptxas).
GPU_PIPELINE = (
    "builtin.module(coat-fuse-adamw,coat-lower-optimizer{{target=gpu}},"
    "coat-export-manifest{{dir={out} chip={chip} features={features}}},"
    "coat-gpu-to-binary{{chip={chip} features={features} format={fmt}}},"
    "coat-export-binaries{{dir={out}}})")

# The same kernels for the CPU, down to the LLVM dialect.
CPU_PIPELINE = (
    "builtin.module(coat-fuse-adamw,coat-lower-optimizer{{target=cpu}},"
    "coat-export-manifest{{dir={out} chip={chip} features={features}}},"
    "coat-expand-fp8-conversions,arith-expand{{include-bf16=true}},canonicalize,cse,"
    "convert-vector-to-scf,"
    "convert-scf-to-cf,expand-strided-metadata,lower-affine,convert-to-llvm,"
    "reconcile-unrealized-casts)")


class CompileError(RuntimeError):
    """A compile step failed; the message carries its diagnostics."""

    def __init__(self, message: str, diagnostics: str = "",
                 command: Sequence[str] = ()):
        full = message + ("\n" + diagnostics.rstrip() if diagnostics.strip() else "")
        super().__init__(full)
        self.diagnostics = diagnostics
        self.command = list(command)


def _find_coat_opt() -> Optional[str]:
    env = os.environ.get("COAT_OPT")
    if env:
        return env
    root = Path(__file__).resolve().parents[2]
    for build in sorted(root.glob("build*")):
        cand = build / "bin" / "coat-opt"
        if cand.exists():
            return str(cand)
    return shutil.which("coat-opt")


@dataclass
class Toolchain:
    coat_opt: Optional[str] = None
    llvm_bin: Path = LLVM_BIN
    timeout: float = 900

    def __post_init__(self):
        self.coat_opt = self.coat_opt or _find_coat_opt()
        if not self.coat_opt:
            raise CompileError("coat-opt not found: build it (scripts/build.sh) "
                               "or set COAT_OPT")

    def _run(self, cmd: List[str], what: str) -> None:
        try:
            r = subprocess.run(cmd, capture_output=True, text=True,
                               timeout=self.timeout, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise CompileError(f"{what}: {e}", command=cmd) from None
        if r.returncode != 0:
            why = (f"killed by signal {-r.returncode}" if r.returncode < 0
                   else f"exit status {r.returncode}")
            raise CompileError(f"{what} failed ({why})", r.stderr + r.stdout, cmd)

    def compile_file(self, src: Path, out: Path, *, chip: str = "sm_90a",
                     features: str = "+ptx80", gpu: bool = True,
                     cpu: bool = True) -> List[Path]:
        """Compiles `src` into `out`; returns the files produced."""
        src, out = Path(src).resolve(), Path(out).resolve()
        out.mkdir(parents=True, exist_ok=True)
        manifest = out / "manifest.json"
        if manifest.exists():
            manifest.unlink()  # the export passes merge into an existing one
        fmt_args = dict(out=out, chip=chip, features=features)
        if gpu:
            for fmt in ("isa", "bin"):
                self._run([self.coat_opt, str(src),
                           "--pass-pipeline=" + GPU_PIPELINE.format(fmt=fmt, **fmt_args),
                           "-o", os.devnull], f"coat-opt (gpu, {fmt})")
        if cpu:
            llvm_mlir = out / "coat_cpu.llvm.mlir"
            self._run([self.coat_opt, str(src),
                       "--pass-pipeline=" + CPU_PIPELINE.format(**fmt_args),
                       "-o", str(llvm_mlir)], "coat-opt (cpu)")
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
        if not manifest.exists():
            raise CompileError(f"{src}: no kernel-spec functions, nothing compiled")
        return sorted(p for p in out.iterdir() if p.is_file())
