"""coat.compile: run coat-opt in a subprocess and link the CPU twins.

coat-opt runs out of process so that an LLVM fatal error (abort, crash) in the
compiler cannot take the Python process down; it becomes a CompileError.
"""

from __future__ import annotations

import os
import subprocess
from typing import Optional

from . import _paths
from ._compile_error import CompileError, _describe_exit


def _looks_like_path(s: str) -> bool:
    return "\n" not in s and len(s) < 4096 and (s.endswith(".mlir") or os.path.exists(s))


#: Instruction-set extensions the CPU twins are compiled for where the
#: compiling CPU has them: /proc/cpuinfo's flag -> clang's option. With
#: hardware FMA, llvm.fma is one instruction instead of a call to libm's
#: fmaf (about 9x on the GEMM twins); both round once, so no bit changes.
CPU_TWIN_FEATURES = {"fma": "-mfma"}

#: The symbol of a CPU-twin object naming the extensions it needs (a
#: space-separated C string), read before any twin runs.
CPU_FEATURES_SYMBOL = "coat_cpu_features"


def host_cpu_features() -> frozenset:
    """The extensions of CPU_TWIN_FEATURES this CPU has (/proc/cpuinfo's
    flags on x86-64 Linux; none where that cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split()) & CPU_TWIN_FEATURES.keys()
    except OSError:
        pass
    return frozenset()


def shared_library_for(object_path: str) -> str:
    """foo.cpu.o -> foo.cpu.so (a .so is used as is)."""
    if object_path.endswith(".so"):
        return object_path
    stem, _ = os.path.splitext(object_path)
    return stem + ".so"


def link_cpu_object(object_path: str, output: Optional[str] = None,
                    linker: Optional[str] = None, timeout: float = 300) -> str:
    """Links a CPU object from the manifest into a shared library (skipped
    when an up-to-date one exists). Returns the library's path."""
    out = output or shared_library_for(object_path)
    if out == object_path:
        return out
    if not os.path.isfile(object_path):
        raise CompileError(f"CPU object {object_path} does not exist")
    if os.path.isfile(out) and os.path.getmtime(out) >= os.path.getmtime(object_path):
        return out
    cc = linker or _paths.find_linker()
    if not cc:
        raise CompileError("no C compiler to link the CPU object with; set COAT_CC")
    cmd = [cc, "-shared", "-o", out + ".tmp", object_path, "-lm"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CompileError(f"linking {object_path} failed: {e}", command=cmd) from None
    if r.returncode != 0:
        raise CompileError(f"linking {object_path} failed ({_describe_exit(r.returncode)})",
                           r.stdout + r.stderr, cmd, r.returncode)
    os.replace(out + ".tmp", out)  # atomic: a concurrent loader never sees half a file
    return out


def compile(source: str, out_dir: str, *, chip: Optional[str] = None,
            features: Optional[str] = None, coat_opt: Optional[str] = None,
            timeout: Optional[float] = 900, gpu: bool = True, cpu: bool = True) -> str:
    """Compiles an MLIR module (a path to a .mlir file, or its text) into
    ``out_dir``: PTX and cubin of the GPU kernels, the CPU twins as a shared
    library, and manifest.json describing both. Returns ``out_dir``; pass it
    to :func:`coat.load`. The pipelines are in :mod:`coat.toolchain`.

    Raises CompileError with the compiler's diagnostics on failure.
    """
    # Imported here, not at the top: coat.toolchain reads $COAT_LLVM_BIN when
    # imported, and `import coat` should not fix it that early.
    from .toolchain import Toolchain

    os.makedirs(out_dir, exist_ok=True)
    out_dir = os.path.abspath(out_dir)
    if _looks_like_path(source):
        if not os.path.isfile(source):
            raise CompileError(f"input file {source} does not exist")
        input_path = os.path.abspath(source)
    else:
        input_path = os.path.join(out_dir, "input.mlir")
        with open(input_path, "w", encoding="utf-8") as f:
            f.write(source)
    tool = coat_opt or _paths.find_coat_opt()
    if not tool:
        raise CompileError("coat-opt not found: build it (scripts/build.sh) or set COAT_OPT")
    Toolchain(coat_opt=tool, timeout=timeout or 900).compile_file(
        input_path, out_dir, chip=chip or "sm_90a", features=features or "+ptx80",
        gpu=gpu, cpu=cpu)
    return out_dir
