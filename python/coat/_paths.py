"""Where the package finds coat-opt, the runtime and manifest libraries and a
linker."""

from __future__ import annotations

import os
import shutil
from typing import List, Optional

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(os.path.dirname(PACKAGE_DIR))  # python/coat -> repo


def build_dirs() -> List[str]:
    dirs = []
    if os.environ.get("COAT_BUILD_DIR"):
        dirs.append(os.environ["COAT_BUILD_DIR"])
    dirs.append(os.path.join(REPO_DIR, "build"))
    return dirs


def find_coat_opt() -> Optional[str]:
    """$COAT_OPT, then <build>/bin/coat-opt, then coat-opt on PATH."""
    env = os.environ.get("COAT_OPT")
    if env:
        return env
    for b in build_dirs():
        p = os.path.join(b, "bin", "coat-opt")
        if os.access(p, os.X_OK):
            return p
    return shutil.which("coat-opt")


def runtime_lib_candidates() -> List[str]:
    """$COAT_RUNTIME_LIB, else the main build's lib/ and the standalone
    build-rt/ (cmake -S lib/Runtime -B build-rt)."""
    env = os.environ.get("COAT_RUNTIME_LIB")
    if env:
        return [env]
    out = [os.path.join(b, "lib", "libcoat_runtime.so") for b in build_dirs()]
    out += [os.path.join(REPO_DIR, "build-rt", "libcoat_runtime.so"),
            os.path.join(REPO_DIR, "build-rt", "lib", "libcoat_runtime.so")]
    return out


def manifest_lib_candidates() -> List[str]:
    """$COAT_MANIFEST_LIB, else libcoat_manifest.so (the CUDA-free manifest
    reader, built wherever lib/Runtime is) next to $COAT_RUNTIME_LIB, in the
    main build's lib/ and in the standalone build-rt/."""
    env = os.environ.get("COAT_MANIFEST_LIB")
    if env:
        return [env]
    name = "libcoat_manifest.so"
    out = []
    if os.environ.get("COAT_RUNTIME_LIB"):
        out.append(os.path.join(os.path.dirname(os.environ["COAT_RUNTIME_LIB"]), name))
    out += [os.path.join(b, "lib", name) for b in build_dirs()]
    out += [os.path.join(REPO_DIR, "build-rt", name),
            os.path.join(REPO_DIR, "build-rt", "lib", name)]
    return out


def find_linker() -> Optional[str]:
    """A C compiler driver that can link a shared library: $COAT_CC, LLVM 22's
    clang, then clang/cc/gcc on PATH (the GPU host has no LLVM)."""
    env = os.environ.get("COAT_CC")
    if env:
        return env
    for c in ("/usr/lib/llvm-22/bin/clang",):
        if os.access(c, os.X_OK):
            return c
    for c in ("clang", "cc", "gcc"):
        p = shutil.which(c)
        if p:
            return p
    return None
