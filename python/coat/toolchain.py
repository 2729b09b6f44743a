"""The compile step: one coat-opt run that writes a whole artifact.

``coat-compile-artifact`` (docs/reference/CoatPipelinePasses.md) lowers a
module's kernel specs for the GPU and the CPU, writes the PTX, the cubins,
the CPU twins' LLVM IR and manifest.json (kernel records and program launch
plans) once; which lowerings run, in which order and with which occupancy
hints is the pass's to say. What is left here: the program passes in front
of it for a model program, and the host compiler for the CPU twins.

Every step runs in a subprocess, so an LLVM fatal error can never take the
calling Python process down; it becomes a CompileError.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

from . import _paths
from ._compile_error import CompileError, _describe_exit
from ._compiler_id import COMPILER_ID
from .compiler import CPU_FEATURES_SYMBOL, CPU_TWIN_FEATURES, host_cpu_features
from ._version import __version__

LLVM_BIN = Path(os.environ.get("COAT_LLVM_BIN", "/usr/lib/llvm-22/bin"))

# libdevice picks IEEE sqrt (sqrt.rn.f32, nvcc's default) only when told to;
# ops that asked for approximations (afn) are not affected.
GPU_LLVM_FLAGS = ("--nvvm-reflect-add=__CUDA_PREC_SQRT=1",)

# A model program (before granularity resolution) to outlined kernel calls.
PROGRAM_PASSES = ("-coat-mixed-granularity", "-coat-group-scaling",
                  "-coat-recompute-activations", "-coat-fuse-silu", "-coat-fuse-linear-sum",
                  "-coat-fuse-rope",
                  "-coat-outline-kernels=finite-flags=true")

# compile_file's keyword -> the coat-compile-artifact option that takes it.
_LOWERING_OPTIONS = {"lower_options": "optimizer", "pointwise_options": "pointwise",
                     "norm_options": "norms", "activation_options": "activations",
                     "linear_options": "linear"}


def artifact_options(out: str = "", *, chip: str = "sm_90a", features: str = "+ptx80",
                     gpu: bool = True, cpu: bool = True, source_key: str = "",
                     **lowering: str) -> str:
    """The options of ``coat-compile-artifact`` writing into ``out``;
    ``lowering`` holds compile_file's ``*_options`` strings."""
    unknown = sorted(set(lowering) - set(_LOWERING_OPTIONS))
    if unknown:
        raise TypeError(f"unknown compile option(s): {', '.join(unknown)}")
    opts = [f"dir={{{out}}}" if out else "", f"chip={chip}", f"features={features}",
            f"gpu={str(gpu).lower()}", f"cpu={str(cpu).lower()}"]
    opts += [f"{_LOWERING_OPTIONS[k]}={{{v}}}" for k, v in sorted(lowering.items()) if v]
    if source_key:
        opts.append(f"source-key={source_key}")
    return " ".join(o for o in opts if o)


def source_key(text: str, *, program: bool = True, **options) -> str:
    """What identifies a compiled artifact, in two halves: a hash of the
    source text, then one of how it was compiled (whether it is a model
    program run through PROGRAM_PASSES first, every compile option of
    ``artifact_options``, the package's version and COMPILER_ID, the hash
    of the compiler's sources). Recorded as the manifest's ``source_key``;
    :mod:`coat.artifacts` finds artifacts by it, so nothing compiled for one
    configuration, or by an older compiler, serves another."""
    passes = ",".join(PROGRAM_PASSES) if program else ""
    how = "\0".join((__version__, COMPILER_ID, passes, artifact_options(**options)))
    return "-".join(hashlib.sha256(s.encode("utf-8")).hexdigest()[:32] for s in (text, how))


def key_halves(key: str) -> Tuple[str, str]:
    """A source key's two halves (:func:`source_key`): the text's hash and
    how it was compiled ("" for a key without a second half)."""
    text, _, how = str(key).partition("-")
    return text, how


#: coat-report-saved-activations' summary remark.
_SAVED_SUMMARY = re.compile(r"saved activations: (?P<saved>\d+) bytes, BF16 (?P<bf16>\d+) "
                            r"bytes.*; weight copies kept for the backward: (?P<weights>\d+) bytes")


@dataclass(frozen=True)
class SavedReport:
    """Bytes a program keeps from its forward for its backward
    (coat-report-saved-activations): FP8 codes and scales of activations;
    the same tensors in BF16 (what a BF16 program of the same math keeps,
    values derived again counted as kept); FP8 weight copies."""

    saved: int
    bf16: int
    weight_copies: int


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

    def _run(self, cmd: List[str], what: str,
             stdin: Optional[str] = None) -> subprocess.CompletedProcess:
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout,
                               input=stdin or "")
        except subprocess.TimeoutExpired:
            raise CompileError(f"{what} timed out after {self.timeout} s",
                               command=cmd) from None
        except OSError as e:
            raise CompileError(f"cannot execute {cmd[0]}: {e}", command=cmd) from None
        if r.returncode != 0:
            raise CompileError(f"{what} failed ({_describe_exit(r.returncode)})",
                               r.stderr + r.stdout, cmd, r.returncode)
        return r

    def saved_report(self, text: str, tokens: int) -> "SavedReport":
        """What a model program (coat.programs text) keeps from its forward
        for its backward at ``tokens`` tokens, as the compiled program
        does: PROGRAM_PASSES up to outlining (granularity, scaling,
        recomputation), then ``coat-report-saved-activations``."""
        if tokens <= 0:
            raise ValueError(f"tokens must be positive, got {tokens}")
        passes = [p for p in PROGRAM_PASSES if not p.startswith("-coat-outline-kernels")]
        r = self._run([self.coat_opt, "-", *passes,
                       f"-coat-report-saved-activations=tokens={tokens}",
                       "-mlir-print-op-on-diagnostic=false", "-o", os.devnull],
                      "coat-opt (saved-activations report)", stdin=text)
        m = _SAVED_SUMMARY.search(r.stderr)
        if not m:
            raise CompileError("coat-opt reported no saved activations (does the program "
                               "have {coat.gradient} arguments?)", r.stderr)
        return SavedReport(int(m["saved"]), int(m["bf16"]), int(m["weights"]))

    def compile_file(self, src: Path, out: Path, **options) -> List[Path]:
        """Compiles the kernel specs of ``src`` into ``out``; returns the
        files produced. ``options``: ``chip``, ``features``, ``gpu``,
        ``cpu``, and each lowering's options as one string —
        ``lower_options`` (coat-lower-optimizer on the GPU, e.g.
        "elements-per-thread=8 block-size=256"), ``linear_options``
        (coat-lower-linear, e.g. "tile-n=128 stages=3"),
        ``pointwise_options`` and ``norm_options`` (both targets, e.g.
        "exact-math=true", "column-sums=separate"), ``activation_options``
        (coat-lower-activations on the GPU, e.g. "tile=64
        tile-min-ctas=3"). On the GPU an option replaces the occupancy hint
        of the same key ("min-ctas=0" drops it)."""
        return self._compile(Path(src), Path(out), program=False, **options)

    def compile_program(self, src: Path, out: Path, **options) -> List[Path]:
        """Compiles a model program (coat ops with ``coat.quantize_auto``,
        e.g. from :mod:`coat.programs`) into ``out``: the granularity passes
        and outlining, then the artifact of the outlined program (its
        kernels and its launch plan), with compile_file's ``options``.
        Leaves ``program.mlir``, the outlined program, beside them."""
        return self._compile(Path(src), Path(out), program=True, **options)

    def _compile(self, src: Path, out: Path, *, program: bool, **options) -> List[Path]:
        src, out = src.resolve(), out.resolve()
        out.mkdir(parents=True, exist_ok=True)
        # A failed run must not leave an older artifact looking current.
        for stale in ("manifest.json", "coat_cpu.ll"):
            (out / stale).unlink(missing_ok=True)
        text = src.read_text(encoding="utf-8")
        key = source_key(text, program=program, **options)
        # Pass flags, not --pass-pipeline: coat-opt nests each pass where it
        # runs (coat-recompute-activations on functions).
        self._run([self.coat_opt, str(src), *GPU_LLVM_FLAGS,
                   *(PROGRAM_PASSES if program else ()),
                   "--coat-compile-artifact="
                   + artifact_options(str(out), source_key=key, **options),
                   *(["-mlir-print-op-on-diagnostic=false"] if program else []),
                   "-o", str(out / "program.mlir") if program else os.devnull],
                  "coat-opt")
        if not (out / "manifest.json").is_file():
            raise CompileError(f"coat-opt wrote no manifest.json to {out}", command=[self.coat_opt])
        if options.get("cpu", True):
            self._link_cpu_twins(out)
        return sorted(p for p in out.iterdir() if p.is_file())

    def _link_cpu_twins(self, out: Path) -> None:
        """coat_cpu.ll -> coat_cpu.o (the manifest's object) and coat_cpu.so,
        for the extensions of compiler.CPU_TWIN_FEATURES this CPU has, named
        in the object (runtime.check_cpu_features reads them at load)."""
        ll, obj = out / "coat_cpu.ll", out / "coat_cpu.o"
        features = sorted(host_cpu_features())
        record = " ".join(features).encode() + b"\0"
        with ll.open("a", encoding="utf-8") as f:
            f.write(f'\n@{CPU_FEATURES_SYMBOL} = constant [{len(record)} x i8] '
                    f'c"{record[:-1].decode()}\\00"\n')
        clang = str(self.llvm_bin / "clang")
        self._run([clang, "-O2", *(CPU_TWIN_FEATURES[x] for x in features), "-fPIC", "-w",
                   "-c", str(ll), "-o", str(obj)], "clang (cpu object)")
        self._run([clang, "-shared", "-o", str(out / "coat_cpu.so"), str(obj), "-lm"],
                  "clang (cpu link)")
        ll.unlink()

