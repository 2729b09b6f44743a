"""scripts/compile_variants.py and scripts/gpu_ab.py, the A/B of compiled
variants against the demo kernels: variant specs are checked, each variant's
tests run on it alone, and each varied module's benchmark gets the demo
module first and its variants after (the plan, through --dry-run)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

from coat import _paths, artifacts


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "scripts", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_variant_specs_are_parsed_and_checked(tmp_path):
    cv = _load("compile_variants")
    (tmp_path / "opt").mkdir()
    (tmp_path / "opt" / "adamw.mlir").write_text("")
    v = cv.parse_variant("e8=opt/adamw.mlir:lower=elements-per-thread=8 block-size=256;"
                         "activation=flat-min-ctas=6", tmp_path)
    assert v == dict(name="e8", example="opt/adamw.mlir", module="adamw",
                     options={"lower": "elements-per-thread=8 block-size=256",
                              "activation": "flat-min-ctas=6"})
    for bad, why in [("e8:opt/adamw.mlir", "is not NAME=EXAMPLE.mlir"),
                     ("e8=opt/adamw.mlir:optimizer=x=1", "does not start with one of"),
                     ("e8=opt/adamw.mlir:lower=a=1;lower=b=2", "lower given twice"),
                     ("e8=opt/none.mlir:lower=a=1", "does not exist")]:
        with pytest.raises(ValueError, match=why):
            cv.parse_variant(bad, tmp_path)


def test_a_variant_that_does_not_compile_is_reported_and_the_others_indexed(tmp_path):
    if not _paths.find_coat_opt():
        pytest.skip("coat-opt is not built")
    r = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "compile_variants.py"),
                        "--out", str(tmp_path), "--jobs", "1",
                        "ok=activations/scales.mlir:activation=flat-min-ctas=2",
                        "bad=activations/scales.mlir:activation=flat-min-ctas=99"],
                       capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "bad          FAILED" in r.stdout
    assert "flat-min-ctas must be in [0, 32], got 99" in r.stdout
    assert list(json.loads((tmp_path / "variants.json").read_text())) == ["ok"]
    assert (tmp_path / "ok" / "manifest.json").is_file()


def _variant(root, name, module, ops):
    d = root / name
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps(
        {"kernels": [{"name": f"{name}_{op}", "op": op} for op in ops]}))
    return dict(name=name, example=f"x/{module}.mlir", module=module, options={})


def test_the_plan_tests_each_variant_alone_then_benchmarks_each_module(tmp_path):
    variants = tmp_path / "variants"
    index = {v["name"]: v for v in [
        _variant(variants, "e16", "adamw", ["adamw_step"]),
        _variant(variants, "e8", "adamw", ["adamw_step"]),
        _variant(variants, "g1", "norms", ["rmsnorm", "rmsnorm_grad", "norm_grad_reduce"]),
        _variant(variants, "s2", "scales", ["reduce_scales"]),
        _variant(variants, "staged", "fp8_linear", ["linear"])]}
    (variants / "variants.json").write_text(json.dumps(index))
    demo = tmp_path / "demo"
    out = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "gpu_ab.py"),
                          "--dry-run", "--only", "fwd", str(demo), str(variants)],
                         capture_output=True, text=True, check=True).stdout
    cmds = [l[2:] for l in out.splitlines() if l.startswith("+ ")]
    tests, benches = cmds[:5], cmds[5:]
    assert [c.split()[0] for c in tests] == [f"COAT_KERNELS={variants / n}" for n in index]
    assert all("COAT_KERNELS_ONLY=1" in c for c in tests)
    assert all(c.endswith("-k cuda") for c in tests[:4])
    # Every GEMM test is a GPU test: none is filtered out.
    assert tests[4].endswith("test_linear_gpu.py")
    assert "test_adamw_kernel_numerics.py" in tests[0]
    assert "test_norm_kernel_numerics.py" in tests[2]
    assert "test_scale_kernel_numerics.py" in tests[3]
    # The GEMM tests read their kernels from COAT_LINEAR_KERNELS.
    assert "test_linear_gpu.py" in tests[4]
    assert f"COAT_LINEAR_KERNELS={variants / 'staged'}" in tests[4].split()
    assert len(benches) == 3
    opt = benches[0].split()
    assert opt[1].endswith("bench_optimizer.py") and "--only" not in opt
    assert opt[opt.index("--kernels") + 1:] == [str(demo / "adamw"), str(variants / "e16"),
                                                str(variants / "e8")]
    norms = benches[1].split()
    assert norms[1].endswith("bench_norms.py")
    assert norms[norms.index("--kernels") + 1:norms.index("--kernels") + 3] == [
        str(demo / "norms"), str(variants / "g1")]
    assert norms[-2:] == ["--only", "fwd"] and "--no-torch" in norms
    # The GEMM benchmark too: the demo module and the variant, in that order.
    gemm = benches[2].split()
    assert gemm[0] == "COAT_LINEAR_KERNELS=" + os.pathsep.join(
        [str(demo / "fp8_linear"), str(variants / "staged")])
    assert gemm[2].endswith("bench_linear.py") and "--kernels" not in gemm
    # The scale benchmark times one fixed kernel: said, not run.
    assert "scales: the scales benchmark times fixed kernels" in out


def test_a_selection_of_variants_runs_alone(tmp_path):
    variants = tmp_path / "variants"
    index = {v["name"]: v for v in [
        _variant(variants, "e8", "adamw", ["adamw_step"]),
        _variant(variants, "g1", "norms", ["rmsnorm"])]}
    (variants / "variants.json").write_text(json.dumps(index))
    script = os.path.join(REPO, "scripts", "gpu_ab.py")
    out = subprocess.run([sys.executable, script, "--dry-run", "--variants", "g1",
                          str(tmp_path / "demo"), str(variants)],
                         capture_output=True, text=True, check=True).stdout
    cmds = [l[2:] for l in out.splitlines() if l.startswith("+ ")]
    assert len(cmds) == 2 and all("e8" not in c and "adamw" not in c for c in cmds)
    bad = subprocess.run([sys.executable, script, "--dry-run", "--variants", "g2",
                          str(tmp_path / "demo"), str(variants)], capture_output=True, text=True)
    assert bad.returncode != 0 and "has no variant g2" in bad.stderr


def test_kernels_only_leaves_the_demo_output_out(tmp_path, monkeypatch):
    variant = tmp_path / "variant"
    demo_module = tmp_path / "build" / "demo" / "adamw"
    for d in (variant, demo_module):
        d.mkdir(parents=True)
        (d / "manifest.json").write_text("{}")
    monkeypatch.setenv("COAT_BUILD_DIR", str(tmp_path / "build"))
    monkeypatch.setenv("COAT_KERNELS", str(variant))
    monkeypatch.delenv("COAT_KERNELS_ONLY", raising=False)
    assert artifacts.search_path()[:2] == [str(variant), str(demo_module)]
    monkeypatch.setenv("COAT_KERNELS_ONLY", "1")
    assert artifacts.search_path() == [str(variant)]
