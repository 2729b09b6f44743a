"""The Python package as installed: python/pyproject.toml (`pip install
./python`), `python -m coat --version` and the `coat` console command
(coat/cli.py)."""

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest
from conftest import example_function

import coat
from coat import _paths

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYDIR = os.path.join(REPO, "python")
VENV_PYTHON = os.path.join(REPO, ".venv", "bin", "python")
ADAMW = os.path.join(REPO, "examples", "optimizer", "adamw.mlir")


def pyproject():
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11")
    with open(os.path.join(PYDIR, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def run_coat(*args, env=None, timeout=600, cwd=None):
    """`python -m coat ARGS` with PYTHONPATH=python (the source tree)."""
    full = dict(os.environ, PYTHONPATH=PYDIR, PYTHONDONTWRITEBYTECODE="1")
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "coat", *args], capture_output=True,
                          text=True, env=full, timeout=timeout, cwd=cwd)


def fake_tool(tmp_path, body):
    p = tmp_path / "fake-coat-opt"
    p.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def test_pyproject_names_the_package_and_the_entry_point():
    data = pyproject()
    assert data["build-system"]["build-backend"] == "setuptools.build_meta"
    project = data["project"]
    assert project["name"] == "coat-mlir"
    assert project["scripts"] == {"coat": "coat.cli:main"}
    # Every sub-package is listed (setuptools installs only those named).
    pkg_root = os.path.join(REPO, "python")
    subpackages = sorted(
        os.path.relpath(d, pkg_root).replace(os.sep, ".")
        for d, _, files in os.walk(os.path.join(pkg_root, "coat"))
        if "__init__.py" in files)
    assert sorted(data["tool"]["setuptools"]["packages"]) == subpackages
    # The version has one source, read by setuptools without importing coat.
    assert project["dynamic"] == ["version"]
    assert data["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "coat._version.__version__"}
    from coat import cli
    assert callable(cli.main)


def test_version_matches_the_cmake_project():
    with open(os.path.join(REPO, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(\s*coat-mlir\s+VERSION\s+([0-9.]+)", f.read())
    assert m, "no project(coat-mlir VERSION ...) in CMakeLists.txt"
    assert coat.__version__ == m.group(1) == "0.1.0"


def test_python_m_coat_version():
    r = run_coat("--version")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"coat {coat.__version__} (")
    assert lines[0].endswith(os.path.join(PYDIR, "coat") + ")")
    tool = _paths.find_coat_opt()  # same environment as the subprocess
    if tool and os.access(tool, os.X_OK):
        assert lines[1] == f"coat-opt: {tool}"
        assert f"COAT-MLIR {coat.__version__}" in r.stdout
    else:
        assert lines[1].startswith("coat-opt:")


def test_version_reports_the_coat_opt_it_finds(tmp_path):
    tool = fake_tool(tmp_path, 'echo "COAT-MLIR 9.9.9 (built against LLVM/MLIR 22.1.8)"\n')
    r = run_coat("--version", env={"COAT_OPT": tool})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1:] == [f"coat-opt: {tool}",
                                         "  COAT-MLIR 9.9.9 (built against LLVM/MLIR 22.1.8)"]
    broken = fake_tool(tmp_path, "exit 3\n")
    r = run_coat("--version", env={"COAT_OPT": broken})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1] == f"coat-opt: {broken} (`--version` failed)"


def test_coat_without_a_command_prints_usage():
    r = run_coat()
    assert r.returncode == 2 and "usage: coat" in r.stderr and "compile" in r.stderr


def test_coat_compile_reports_compiler_errors(tmp_path):
    tool = fake_tool(tmp_path, """echo "in.mlir:1:1: error: it is wrong" >&2; exit 1\n""")
    src = tmp_path / "in.mlir"
    src.write_text("module {}\n")
    r = run_coat("compile", str(src), str(tmp_path / "out"), "--coat-opt", tool)
    assert r.returncode == 1
    assert r.stderr.startswith("coat compile: error: ") and "it is wrong" in r.stderr
    r = run_coat("compile", str(tmp_path / "missing.mlir"), str(tmp_path / "out"))
    assert r.returncode == 1 and "missing.mlir: no such file" in r.stderr


def test_coat_compile_writes_a_manifest(tmp_path):
    if not _paths.find_coat_opt():
        pytest.skip("coat-opt is not built")
    out = tmp_path / "adamw"
    src = tmp_path / "adamw.mlir"
    src.write_text(example_function(ADAMW, "coat_adamw_f32_e4m3x_e4m3x_g128"))
    # --no-gpu: the CPU pipeline needs no CUDA toolkit (ptxas); the GPU one is
    # exercised by the compile-examples test.
    r = run_coat("compile", str(src), str(out), "--no-gpu", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    manifest = out / "manifest.json"
    assert r.stdout.strip() == str(manifest)
    data = json.loads(manifest.read_text())
    assert data["format"] == "coat-manifest" and data["kernels"]
    assert (out / "coat_cpu.so").is_file()


def test_pip_install_target_then_import(tmp_path):
    if not os.access(VENV_PYTHON, os.X_OK):
        pytest.skip("no project venv (.venv/bin/python)")
    if subprocess.run([VENV_PYTHON, "-m", "pip", "--version"], capture_output=True).returncode:
        pytest.skip("pip is not available in the project venv")
    # Installed from a copy of python/: setuptools leaves build/ and *.egg-info
    # in the tree it builds, and a stale build/lib would end up in the wheel.
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(os.path.join(PYDIR, "pyproject.toml"), src)
    shutil.copytree(os.path.join(PYDIR, "coat"), src / "coat",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    target = tmp_path / "site"
    # Without build isolation: the venv's setuptools builds it, no index is
    # needed.
    r = subprocess.run([VENV_PYTHON, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                        "--no-input", "--quiet", "--target", str(target), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (target / "coat" / "__init__.py").is_file()
    assert (target / "coat" / "_version.py").is_file()
    assert (target / "bin" / "coat").is_file()

    env = dict(os.environ, PYTHONPATH=str(target), PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([VENV_PYTHON, "-c", "import coat, coat.cli; print(coat.__file__); "
                        "print(coat.__version__)"],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    path, version = r.stdout.split()
    assert path == str(target / "coat" / "__init__.py")
    assert version == coat.__version__
    # The console script pip wrote runs the installed package.
    r = subprocess.run([str(target / "bin" / "coat"), "--version"], capture_output=True,
                       text=True, env=env, cwd=str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"coat {coat.__version__} ({target / 'coat'})")
