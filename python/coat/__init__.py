"""COAT-MLIR's Python package: compile modules with coat-opt, load their
kernels and launch them on the GPU or the CPU, and the FP8 AdamW optimizer
(``coat.optim.FP8AdamW``, imported on first use since it needs torch)."""

from .compiler import CompileError, compile
from .manifest import ManifestError, load_manifest
from .runtime import Kernel, Module, RuntimeError_ as CoatRuntimeError, load

__all__ = ["compile", "load", "CompileError", "ManifestError", "CoatRuntimeError", "Module",
           "Kernel", "load_manifest", "optim"]


def __getattr__(name):
    if name == "optim":  # needs torch; keep `import coat` torch-free
        import importlib

        return importlib.import_module(".optim", __name__)
    raise AttributeError(name)
