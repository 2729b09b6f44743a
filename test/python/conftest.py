"""Shared fixtures of the Python tests. Kernel-dependent tests look for
compiled modules (scripts/demo.sh writes them under build/demo) and skip with
a reason when there are none."""

import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

FIXTURES = os.path.join(HERE, "fixtures")


@pytest.fixture
def fixture_module_dir(tmp_path):
    """A copy of fixtures/small_manifest.json as <tmp>/manifest.json, with the
    CPU twin compiled to fixture.cpu.o (PIC) next to it."""
    from coat import _paths

    cc = _paths.find_linker()
    if cc is None:
        pytest.skip("no C compiler to build the CPU-twin fixture")
    shutil.copy(os.path.join(FIXTURES, "small_manifest.json"), tmp_path / "manifest.json")
    subprocess.run([cc, "-c", "-fPIC", "-O1", "-o", str(tmp_path / "fixture.cpu.o"),
                    os.path.join(FIXTURES, "axpy_twin.c")], check=True)
    return tmp_path


def torch_or_skip():
    return pytest.importorskip("torch", reason="torch is not installed")


@pytest.fixture(scope="module")
def cpu_cache(tmp_path_factory):
    """A fresh kernel cache (COAT_KERNEL_CACHE) for the module's tests, where
    coat.nn compiles the programs it needs with coat-opt; skips without it."""
    from coat import _paths

    if not _paths.find_coat_opt():
        pytest.skip("coat-opt is not built")
    old = os.environ.get("COAT_KERNEL_CACHE")
    os.environ["COAT_KERNEL_CACHE"] = str(tmp_path_factory.mktemp("kernels"))
    yield
    if old is None:
        os.environ.pop("COAT_KERNEL_CACHE")
    else:
        os.environ["COAT_KERNEL_CACHE"] = old
