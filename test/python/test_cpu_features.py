"""The CPU twins are compiled for the extensions of the compiling CPU that
speed them up (coat.compiler.CPU_TWIN_FEATURES: hardware FMA), and a library
names them (its coat_cpu_features string), so a library carried to a CPU
without them is refused with the reason before any of its code runs, never
killed by an illegal instruction."""

import ctypes
import os
import subprocess

import pytest
from conftest import example_function

import coat
from coat import _paths, compiler, runtime

ADAMW = os.path.join(_paths.REPO_DIR, "examples", "optimizer", "adamw.mlir")


def _library_naming(tmp_path, features):
    """A shared library whose record names ``features`` (None: no record)."""
    cc = _paths.find_linker()
    if cc is None:
        pytest.skip("no C compiler to build the stand-in library")
    src = tmp_path / "lib.c"
    record = ("" if features is None else
              f'const char {compiler.CPU_FEATURES_SYMBOL}[] = "{features}";\n')
    src.write_text(record + "int coat_stand_in(void) { return 1; }\n")
    lib = tmp_path / "lib.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return ctypes.CDLL(str(lib)), str(lib)


def test_a_compiled_module_names_this_cpus_extensions(tmp_path, monkeypatch):
    if not _paths.find_coat_opt():
        pytest.skip("coat-opt is not built")
    src = tmp_path / "adamw.mlir"
    src.write_text(example_function(ADAMW, "coat_adamw_f32_e4m3x_e4m3x_g128"))
    out = coat.compile(str(src), str(tmp_path / "out"), gpu=False)
    lib = ctypes.CDLL(os.path.join(out, "coat_cpu.so"))
    ctypes.c_char.in_dll(lib, compiler.CPU_FEATURES_SYMBOL)  # the record is there
    named = runtime.compiled_cpu_features(lib)
    assert named == compiler.host_cpu_features()
    runtime.check_cpu_features(lib, "lib")  # this CPU has them
    if not named:
        return  # baseline code: nothing to refuse below
    # On a CPU without them, the module's loader refuses the library.
    monkeypatch.setattr(runtime, "host_cpu_features", lambda: frozenset())
    mod = coat.load(out)
    spec = mod.kernels["coat_adamw_f32_e4m3x_e4m3x_g128"].spec
    with pytest.raises(runtime.RuntimeError_, match="which this CPU lacks"):
        mod._cpu_library(spec)


def test_a_library_for_missing_extensions_is_refused(tmp_path, monkeypatch):
    lib, path = _library_naming(tmp_path, "fma avx512f")
    monkeypatch.setattr(runtime, "host_cpu_features", lambda: frozenset({"fma"}))
    with pytest.raises(runtime.RuntimeError_, match="compiled for a CPU with avx512f, "
                                                    "which this CPU lacks") as e:
        runtime.check_cpu_features(lib, path)
    assert path in str(e.value)
    monkeypatch.setattr(runtime, "host_cpu_features", lambda: frozenset())
    with pytest.raises(runtime.RuntimeError_, match="with avx512f, fma, which"):
        runtime.check_cpu_features(lib, path)


@pytest.mark.parametrize("features", [None, ""])
def test_a_library_needing_nothing_loads_anywhere(tmp_path, monkeypatch, features):
    """Without the record (compiled before it existed) or with an empty one
    (compiled on a CPU without the extensions) it is baseline code."""
    lib, path = _library_naming(tmp_path, features)
    assert runtime.compiled_cpu_features(lib) == frozenset()
    monkeypatch.setattr(runtime, "host_cpu_features", lambda: frozenset())
    runtime.check_cpu_features(lib, path)
