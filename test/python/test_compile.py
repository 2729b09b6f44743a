"""coat.compile runs coat-opt out of process: failures, crashes and missing
outputs become CompileError. Stand-in coat-opt scripts (fixtures written
here) play the compiler; the real pipeline is tested where it exists."""

import os
import stat
import textwrap

import pytest

import coat


def fake_tool(tmp_path, body):
    p = tmp_path / "fake-coat-opt"
    p.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def test_diagnostics_become_compile_error(tmp_path):
    tool = fake_tool(tmp_path, """echo "in.mlir:3:5: error: 'coat.adamw_step' op bad" >&2; exit 1""")
    with pytest.raises(coat.CompileError) as e:
        coat.compile("module {}\n", str(tmp_path / "out"), coat_opt=tool)
    assert "exit status 1" in str(e.value) and "op bad" in e.value.diagnostics
    assert e.value.command[0] == tool and e.value.returncode == 1


def test_a_crashing_compiler_does_not_kill_python(tmp_path):
    tool = fake_tool(tmp_path, """echo "LLVM ERROR: fatal" >&2; kill -ABRT $$""")
    with pytest.raises(coat.CompileError, match="killed by signal SIGABRT") as e:
        coat.compile("module {}\n", str(tmp_path / "out"), coat_opt=tool)
    assert "LLVM ERROR" in e.value.diagnostics


def test_success_without_manifest_is_an_error(tmp_path):
    tool = fake_tool(tmp_path, "exit 0\n")
    with pytest.raises(coat.CompileError, match="wrote no manifest.json"):
        coat.compile("module {}\n", str(tmp_path / "out"), coat_opt=tool)


def test_missing_tool_and_input(tmp_path):
    with pytest.raises(coat.CompileError, match="cannot execute"):
        coat.compile("module {}\n", str(tmp_path), coat_opt=str(tmp_path / "nope"))
    with pytest.raises(coat.CompileError, match="does not exist"):
        coat.compile(str(tmp_path / "missing.mlir"), str(tmp_path))


def test_real_coat_opt_compiles_the_optimizer_example(tmp_path):
    from coat import _paths

    src = os.path.join(_paths.REPO_DIR, "examples", "optimizer", "adamw.mlir")
    if not _paths.find_coat_opt():
        pytest.skip("coat-opt is not built")
    out = coat.compile(src, str(tmp_path), gpu=False)
    mod = coat.load(out)
    assert "coat_adamw_f32_e4m3x_e4m3x_g128" in mod.kernels
    assert os.path.isfile(os.path.join(out, "coat_cpu.so"))


def test_a_bad_module_reports_the_diagnostic(tmp_path):
    from coat import _paths

    if not _paths.find_coat_opt():
        pytest.skip("coat-opt is not built")
    bad = ("func.func @f(%x: tensor<4xf32>) {\n"
           "  %q = coat.quantize %x : tensor<4xf32> -> !coat.qtensor<4xf32, per_tensor>\n"
           "  return\n}\n")
    with pytest.raises(coat.CompileError, match="f8E4M3FN or f8E5M2"):
        coat.compile(bad, str(tmp_path), gpu=False)


def test_input_nested_too_deep_for_the_parser_is_refused(tmp_path):
    """MLIR's parser would overflow the stack; coat-opt refuses with a
    located error instead (test/Tools/input-nesting.mlir)."""
    from coat import _paths

    if not _paths.find_coat_opt():
        pytest.skip("coat-opt is not built")
    deep = "func.func @f() attributes {a = " + "[" * 5000 + "0" + "]" * 5000 + "} {\n  return\n}\n"
    with pytest.raises(coat.CompileError, match="exit status 1") as e:
        coat.compile(deep, str(tmp_path), gpu=False)
    assert "brackets nest deeper than 1024 levels" in e.value.diagnostics


def test_gpu_passes_get_the_occupancy_hints_under_the_callers_options(tmp_path):
    # The stand-in records each pipeline; the GPU runs carry the hints, an
    # option of the same key given by the caller replaces its hint, and the
    # CPU run (no ptxas to check them against) carries none.
    log = tmp_path / "pipelines"
    tool = fake_tool(tmp_path, f"""for a in "$@"; do case "$a" in --pass-pipeline=*) echo "$a" >> {log};; esac; done
        exit 0
        """)
    from coat.toolchain import Toolchain

    src = tmp_path / "in.mlir"
    src.write_text("module {}\n")
    with pytest.raises(coat.CompileError, match="wrote no manifest.json"):
        Toolchain(coat_opt=tool).compile_file(
            src, tmp_path / "out", lower_options="min-ctas=0 block-size=256",
            activation_options="tile=32")
    gpu, *rest = [p for p in log.read_text().splitlines()]
    # Key by key: the bf16 parameters' hint stays unless it is given too.
    assert "coat-lower-optimizer{target=gpu min-ctas=0 bf16-min-ctas=6 block-size=256}" in gpu
    assert "coat-lower-activations{target=gpu flat-min-ctas=6 tile=32}" in gpu
    assert all("min-ctas" not in p for p in rest if "target=cpu" in p)


def test_merge_pass_options_replaces_by_key():
    from coat.toolchain import merge_pass_options

    assert merge_pass_options("min-ctas=5", "") == "min-ctas=5"
    assert merge_pass_options("min-ctas=5", "min-ctas=3 block-size=64") == \
        "min-ctas=3 block-size=64"
    assert merge_pass_options("a=1 b=2", "c=3") == "a=1 b=2 c=3"
