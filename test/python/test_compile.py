"""coat.compile runs coat-opt out of process: failures, crashes and missing
outputs become CompileError. Stand-in coat-opt scripts (fixtures written
here) play the compiler; the real pipeline is tested where it exists."""

import os
import stat
import textwrap

import pytest
from conftest import example_function

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


def test_real_coat_opt_compiles_an_optimizer_example_kernel(tmp_path):
    from coat import _paths

    if not _paths.find_coat_opt():
        pytest.skip("coat-opt is not built")
    src = tmp_path / "adamw.mlir"
    src.write_text(example_function(
        os.path.join(_paths.REPO_DIR, "examples", "optimizer", "adamw.mlir"),
        "coat_adamw_f32_e4m3x_e4m3x_g128"))
    out = coat.compile(str(src), str(tmp_path / "out"), gpu=False)
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


def test_one_coat_opt_run_gets_every_option(tmp_path):
    # The stand-in records its argv: one run, the program passes in front of
    # coat-compile-artifact for a program, each lowering's options as one
    # string (the occupancy hints are the pass's own, test/Conversion/Export),
    # and the artifact's identity.
    log = tmp_path / "argv"
    tool = fake_tool(tmp_path, f"""for a in "$@"; do echo "$a" >> {log}; done
        exit 0
        """)
    from coat.toolchain import PROGRAM_PASSES, Toolchain, source_key

    src = tmp_path / "in.mlir"
    src.write_text("module {}\n")
    with pytest.raises(coat.CompileError, match="wrote no manifest.json"):
        Toolchain(coat_opt=tool).compile_program(
            src, tmp_path / "out", lower_options="min-ctas=0 block-size=256",
            activation_options="tile=32", gpu=False)
    argv = log.read_text().splitlines()
    assert argv[argv.index(PROGRAM_PASSES[0]):][:len(PROGRAM_PASSES)] == list(PROGRAM_PASSES)
    artifact, = [a for a in argv if a.startswith("--coat-compile-artifact=")]
    assert f"dir={{{(tmp_path / 'out').resolve()}}}" in artifact
    assert "optimizer={min-ctas=0 block-size=256}" in artifact
    assert "activations={tile=32}" in artifact and "gpu=false" in artifact
    key = source_key("module {}\n", lower_options="min-ctas=0 block-size=256",
                     activation_options="tile=32", gpu=False)
    assert f"source-key={key}" in artifact


def test_source_key_tells_configurations_apart():
    from coat.toolchain import source_key

    base = source_key("text")
    assert base == source_key("text") and len(base) == 65
    assert base.split("-")[0] == source_key("text", gpu=False).split("-")[0]
    assert len({base, source_key("text2"), source_key("text", program=False),
                source_key("text", norm_options="column-sums=separate"),
                source_key("text", chip="sm_100a")}) == 5
    with pytest.raises(TypeError, match="unknown compile option"):
        source_key("text", tile=3)


def test_saved_report_counts_what_the_compiled_program_keeps():
    """Toolchain.saved_report runs the program passes and
    coat-report-saved-activations at a token count. The MLP block keeps its
    input's 1x16 E4M3 copy and the gate's and up's (codes, and a bf16 scale
    per 16): 1.125 bytes per element of N x (H + 2F), linear in N, plus the
    bf16 per-tensor scales of the two copies it derives again (the norm's
    output and the SwiGLU product: kept, not reduced again); its three FP8
    weight copies (codes and a bf16 scale each) are under the 8 MiB bound
    and kept."""
    from coat import _paths, programs
    from coat.toolchain import Toolchain

    if not _paths.find_coat_opt():
        pytest.skip("coat-opt is not built")
    H, F = 64, 160
    text = programs.MLPBlockConfig(hidden=H, ffn=F).text()
    tools = Toolchain()
    for n in (32, 48):
        r = tools.saved_report(text, n)
        assert r.saved == n * (H + 2 * F) * 9 // 8 + 2 * 2
        assert r.weight_copies == 3 * (H * F + 2)
        assert r.bf16 > r.saved
    with pytest.raises(ValueError, match="tokens must be positive"):
        tools.saved_report(text, 0)
    forward_only = "func.func @f(%x: tensor<?x32xbf16>) -> tensor<?x32xbf16> {\n" \
                   "  return %x : tensor<?x32xbf16>\n}\n"
    with pytest.raises(coat.CompileError, match="no saved activations"):
        tools.saved_report(forward_only, 16)
