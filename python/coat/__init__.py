"""COAT-MLIR's Python package: compile modules with coat-opt, load their
kernels and launch them on the GPU or the CPU, and the FP8 AdamW optimizer
(``coat.optim.FP8AdamW``) and ``torch._scaled_mm``-shaped FP8 GEMMs
(``coat.linear.scaled_mm``) and autograd modules backed by compiled programs
(``coat.nn``), imported on first use since they need torch."""

from ._version import __version__
from .compiler import CompileError, compile
from .manifest import ManifestError, load_manifest
from .runtime import Kernel, Module, RuntimeError_ as CoatRuntimeError, load

__all__ = ["compile", "load", "CompileError", "ManifestError", "CoatRuntimeError", "Module",
           "Kernel", "load_manifest", "optim", "linear", "nn", "hf", "llama", "programs", "executor",
           "convert"]


def __getattr__(name):
    if name == "convert":
        from .nn import convert

        return convert
    if name in ("optim", "linear", "nn", "llama", "hf"):  # need torch; keep `import coat` torch-free
        import importlib

        return importlib.import_module("." + name, __name__)
    raise AttributeError(name)
