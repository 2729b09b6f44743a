"""scripts/gpu_check.sh must reach every benchmark whose kernels exist: a
directory without the op (or the last one lacking it) must not end the run;
and the summary of their results comes last. Kernels the finder would pass
over stop the run before anything is built."""

import json
import os
import subprocess
import sys

from conftest import REPO

SCRIPT = os.path.join(REPO, "scripts", "gpu_check.sh")


def _module(root, name, ops):
    d = root / name
    d.mkdir()
    manifest = {"kernels": [{"name": f"{name}_k{i}", "op": op} for i, op in enumerate(ops)]}
    (d / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return d


def _dry_run(*args, env=None):
    out = subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True,
                         check=True, env=env).stdout
    return [l[2:] for l in out.splitlines() if l.startswith("+ ")]


def _what(cmd):
    """pytest, or the benchmark script that a command runs."""
    words = cmd.split()
    return "pytest" if words[1:3] == ["-m", "pytest"] else os.path.basename(words[1])


def test_every_benchmark_is_reached(tmp_path):
    # Each op lives in one directory only, and the last directory holds none
    # of the ops that a benchmark looks for.
    _module(tmp_path, "a_opt", ["adamw_step"])
    _module(tmp_path, "b_act", ["quantize", "silu"])
    _module(tmp_path, "c_norm", ["rmsnorm", "reduce_scales", "bias_grad", "linear",
                                 "rmsnorm_grad"])
    _module(tmp_path, "d_rope", ["rope", "rope_grad"])
    _module(tmp_path, "z_other", ["mul"])
    cmds = _dry_run("--bench", "--dry-run", str(tmp_path))
    assert [_what(c) for c in cmds] == ["pytest", "bench_optimizer.py", "bench_activations.py",
                       "bench_flow.py", "bench_rope.py", "bench_norms.py", "bench_scales.py",
                       "bench_bias_grad.py", "bench_linear.py", "bench_block.py", "bench_fsdp.py",
                       "summary.py"]
    optimizer = cmds[1].split()
    assert optimizer[optimizer.index("--kernels") + 1:] == [str(tmp_path / "a_opt")]


def test_benchmarks_without_kernels_are_left_out(tmp_path):
    _module(tmp_path, "only", ["mul"])
    cmds = _dry_run("--bench", "--dry-run", str(tmp_path))
    assert [_what(c) for c in cmds] == [
        "pytest", "bench_fsdp.py", "summary.py"]


def test_without_bench_only_the_tests_run(tmp_path):
    _module(tmp_path, "a_opt", ["adamw_step"])
    cmds = _dry_run("--dry-run", str(tmp_path))
    assert len(cmds) == 1 and "pytest" in cmds[0]


def test_bench_only_skips_the_tests(tmp_path):
    _module(tmp_path, "a_opt", ["adamw_step"])
    cmds = _dry_run("--bench-only", "--dry-run", str(tmp_path))
    assert [_what(c) for c in cmds] == ["bench_optimizer.py", "bench_fsdp.py", "summary.py"]


def test_sanitize_runs_each_tool_over_every_family(tmp_path):
    _module(tmp_path, "a_opt", ["adamw_step"])
    cmds = _dry_run("--sanitize-only", "--dry-run", str(tmp_path))
    tools = [c.split("--tool ")[1].split()[0] for c in cmds]
    assert tools == ["memcheck", "racecheck", "initcheck"]
    for c in cmds:
        assert "PYTORCH_NO_CUDA_MEMORY_CACHING=1" in c and "--error-exitcode" in c
        for family in ("adamw", "activation", "scale", "flow", "rope", "norm", "bias_grad",
                       "linear_gpu"):
            assert f"test_{family}" in c
    with_tests = _dry_run("--sanitize", "--bench", "--dry-run", str(tmp_path))
    assert [_what(c) for c in with_tests][:1] == ["pytest"]
    assert len(with_tests) == 1 + 3 + 2 + 1  # tests, three tools, two benchmarks, summary


def test_summary_reads_the_results_file_the_benchmarks_write(tmp_path):
    _module(tmp_path, "a_opt", ["adamw_step"])
    env = dict(os.environ, COAT_BENCH_RESULTS=str(tmp_path / "results.jsonl"))
    cmds = _dry_run("--bench-only", "--dry-run", str(tmp_path), env=env)
    assert cmds[-1].split()[1:] == [os.path.join(REPO, "bench", "summary.py"),
                                    str(tmp_path / "results.jsonl")]


def test_tests_spread_over_the_workers_asked_for(tmp_path):
    _module(tmp_path, "a_opt", ["adamw_step"])
    env = dict(os.environ, COAT_TEST_WORKERS="4")
    (cmd,) = _dry_run("--dry-run", str(tmp_path), env=env)
    assert "-n 4 --dist loadfile" in cmd
    env["COAT_TEST_WORKERS"] = "0"
    (cmd,) = _dry_run("--dry-run", str(tmp_path), env=env)
    assert " -n " not in cmd


def test_profile_runs_ncu_on_the_targets_then_summarizes(tmp_path):
    _module(tmp_path, "a_opt", ["adamw_step"])
    env = dict(os.environ, COAT_PROFILE_DIR=str(tmp_path / "prof"),
               COAT_PROFILE_TARGETS="a_opt:k:1024 a_opt:k2:2048")
    ncu, summary = _dry_run("--profile-only", "--dry-run", str(tmp_path), env=env)
    words = ncu.split()
    assert words[0] == "ncu" and "--nvtx-include" in words and "--clock-control" in words
    assert words[words.index("--targets") + 1:] == ["a_opt:k:1024", "a_opt:k2:2048"]
    assert words[words.index("--kernels") + 1] == str(tmp_path / "a_opt")
    assert summary.split()[1:4] == [os.path.join(REPO, "bench", "profile_kernels.py"),
                                    "summarize", str(tmp_path / "prof" / "profile.ncu-rep")]
    with_tests = _dry_run("--profile", "--bench", "--dry-run", str(tmp_path))
    assert [c.split()[0] if c.startswith("ncu ") else _what(c) for c in with_tests] == [
        "pytest", "ncu", "profile_kernels.py",
        "bench_optimizer.py", "bench_fsdp.py", "summary.py"]


def test_kernels_of_another_compiler_stop_the_run_first(tmp_path):
    # The fake modules record no source key: carried kernels this package
    # would not take. The check runs before the runtime is built (no GPU or
    # CUDA toolkit is needed to fail it).
    _module(tmp_path, "a_opt", ["adamw_step"])
    env = dict(os.environ, COAT_RUNTIME_BUILD=str(tmp_path / "never-built"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    r = subprocess.run(["bash", SCRIPT, str(tmp_path)], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 1
    assert "1 of 1 compiled modules were not compiled by this package's compiler" in r.stderr
    assert str(tmp_path / "a_opt" / "manifest.json") in r.stderr
    assert not (tmp_path / "never-built").exists()


def test_shards_split_the_test_files_between_them(tmp_path):
    _module(tmp_path, "a_opt", ["adamw_step"])
    every = sorted(f for f in os.listdir(os.path.join(REPO, "test", "python"))
                   if f.startswith("test_") and f.endswith(".py"))
    parts = []
    for i in (1, 2, 3):
        env = dict(os.environ, COAT_TEST_SHARD=f"{i}/3")
        (cmd,) = _dry_run("--dry-run", str(tmp_path), env=env)
        parts.append([os.path.basename(w) for w in cmd.split() if w.endswith(".py")])
    assert all(parts) and sorted(sum(parts, [])) == every
    assert parts[0][:2] == [every[0], every[3]]
    (whole,) = _dry_run("--dry-run", str(tmp_path))
    assert whole.endswith(os.path.join(REPO, "test", "python"))
    for bad in ("0/2", "3/2", "1", "a/b"):
        r = subprocess.run(["bash", SCRIPT, "--dry-run", str(tmp_path)], capture_output=True,
                           text=True, env=dict(os.environ, COAT_TEST_SHARD=bad))
        assert r.returncode == 2 and "COAT_TEST_SHARD must be i/n" in r.stderr, bad


def test_a_stalled_test_prints_its_stacks(tmp_path):
    """pytest's faulthandler dumps every thread of a test that outlives
    COAT_TEST_STALL_S (default 240 s), so a run that hangs says where."""
    _module(tmp_path, "a_opt", ["adamw_step"])
    (cmd,) = _dry_run("--dry-run", str(tmp_path))
    assert "-o faulthandler_timeout=240" in cmd
    (cmd,) = _dry_run("--dry-run", str(tmp_path), env=dict(os.environ, COAT_TEST_STALL_S="90"))
    assert "-o faulthandler_timeout=90" in cmd
    for bad in ("0", "-5", "1.5", "x", ""):
        r = subprocess.run(["bash", SCRIPT, "--dry-run", str(tmp_path)], capture_output=True,
                           text=True, env=dict(os.environ, COAT_TEST_STALL_S=bad))
        if bad == "":  # unset and empty both mean the default
            assert r.returncode == 0 and "faulthandler_timeout=240" in r.stdout
            continue
        assert r.returncode == 2 and "COAT_TEST_STALL_S must be a positive" in r.stderr, bad
