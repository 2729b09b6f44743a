#!/usr/bin/env python3
"""On a GPU host: the A/B of scripts/compile_variants.py's output against the
demo kernels it varies.

  python3 scripts/gpu_ab.py [--no-tests] [--no-bench] [--only SUBSTR] [--variants A,B]
      [--dry-run] DEMO_DIR VARIANTS_DIR

First each variant's GPU numerics tests run on it alone (COAT_KERNELS=the
variant, COAT_KERNELS_ONLY=1); then, per varied demo module, its family's
benchmark times the module and all its variants in one run (rows labelled
by directory), and bench/summary.py prints the rows of every family as one
table. --only is passed to the benchmarks that filter kernels by name;
--variants runs the named variants only (to split an A/B over several
device calls). The
exit status is 1 when a variant's tests or a benchmark fail. COAT_RUNTIME_LIB is built
from lib/Runtime when unset; COAT_REFERENCE_LIB as for gpu_check.sh.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class Family:
    """`kernels_env`: the variable naming the kernel directories that the
    family's tests (and, without `--kernels`, its benchmark) read;
    `gpu_cases`: the pytest -k expression of its GPU cases (empty: all of
    them are)."""

    def __init__(self, name, ops, test, bench=None, bench_args=(), filters=False,
                 kernels_env="COAT_KERNELS", gpu_cases="cuda"):
        self.name, self.ops, self.test = name, set(ops), test
        self.bench, self.bench_args, self.filters = bench, list(bench_args), filters
        self.kernels_env, self.gpu_cases = kernels_env, gpu_cases


# Which numerics tests and which benchmark serve a module, by its ops. The
# scale benchmark times a fixed kernel, not a list of directories; the GEMM
# tests and benchmark take theirs from COAT_LINEAR_KERNELS.
FAMILIES = [
    Family("optimizer", ["adamw_step"], "test_adamw_kernel_numerics.py", "bench_optimizer.py"),
    Family("activations", ["quantize", "quantize_transpose", "quantize_transposed_only",
                           "dequantize", "absmax", "requantize"],
           "test_activation_kernel_numerics.py", "bench_activations.py", ["--no-torch"], True),
    Family("norms", ["rmsnorm", "layernorm", "rmsnorm_grad", "layernorm_grad"],
           "test_norm_kernel_numerics.py", "bench_norms.py", ["--no-torch"], True),
    Family("flow", ["silu", "gelu", "swiglu_mul", "residual_add", "silu_grad", "gelu_grad",
                    "swiglu_mul_grad", "residual_add_grad"],
           "test_flow_kernel_numerics.py", "bench_flow.py", ["--no-torch"], True),
    Family("scales", ["reduce_scales"], "test_scale_kernel_numerics.py"),
    Family("linear", ["linear"], "test_linear_gpu.py", "bench_linear.py",
           kernels_env="COAT_LINEAR_KERNELS", gpu_cases=""),
]


def family_of(kernel_dir: Path) -> Family:
    ops = {k["op"] for k in json.loads((kernel_dir / "manifest.json").read_text())["kernels"]}
    for f in FAMILIES:
        if f.ops & ops:
            return f
    raise SystemExit(f"{kernel_dir}: no family has tests for its ops ({', '.join(sorted(ops))})")


def plan(demo: Path, variants_dir: Path, tests=True, bench=True, only="", names=()):
    """(what, command, extra environment) of the whole A/B, in order; with
    `names`, of those variants only."""
    index = variants_dir / "variants.json"
    if not index.is_file():
        raise SystemExit(f"{index} does not exist: run scripts/compile_variants.py first")
    variants = json.loads(index.read_text())
    unknown = sorted(set(names) - set(variants))
    if unknown:
        raise SystemExit(f"{index} has no variant {', '.join(unknown)} "
                         f"(it has {', '.join(variants)})")
    if names:
        variants = {n: v for n, v in variants.items() if n in names}
    steps, by_module = [], {}
    for name, v in variants.items():
        vdir = variants_dir / name
        fam = family_of(vdir)
        by_module.setdefault(v["module"], []).append(vdir)
        if tests:
            env = {"COAT_KERNELS": str(vdir), "COAT_KERNELS_ONLY": "1"}
            env[fam.kernels_env] = str(vdir)
            steps.append((f"test {name}",
                          [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(REPO / "test" / "python" / fam.test),
                           *(["-k", fam.gpu_cases] if fam.gpu_cases else [])], env))
    if bench:
        for module, vdirs in by_module.items():
            fam = family_of(vdirs[0])
            if fam.bench is None:
                print(f"# {module}: the {fam.name} benchmark times fixed kernels; no A/B",
                      flush=True)
                continue
            args = [*fam.bench_args, *(["--only", only] if only and fam.filters else [])]
            dirs = [str(demo / module), *map(str, vdirs)]
            cmd = [sys.executable, str(REPO / "bench" / fam.bench)]
            if fam.kernels_env == "COAT_KERNELS":
                steps.append((f"bench {module}", [*cmd, "--kernels", *dirs, *args], {}))
            else:
                steps.append((f"bench {module}", [*cmd, *args],
                              {fam.kernels_env: os.pathsep.join(dirs)}))
    return steps


def ensure_runtime():
    if os.environ.get("COAT_RUNTIME_LIB"):
        return
    build = Path(tempfile.mkdtemp(prefix="coat-runtime."))
    for cmd in (["cmake", "-S", str(REPO / "lib" / "Runtime"), "-B", str(build),
                 "-DCMAKE_BUILD_TYPE=Release"], ["cmake", "--build", str(build), "-j"]):
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    os.environ["COAT_RUNTIME_LIB"] = str(next(build.rglob("libcoat_runtime.so")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("demo", type=Path)
    ap.add_argument("variants_dir", type=Path, metavar="variants")
    ap.add_argument("--no-tests", action="store_true")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--variants", default="", help="comma-separated variant names")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    names = [n for n in args.variants.split(",") if n] if args.variants else []
    steps = plan(args.demo.resolve(), args.variants_dir.resolve(), not args.no_tests,
                 not args.no_bench, args.only, names)
    if args.dry_run:
        for what, cmd, env in steps:
            print("+ " + " ".join(f"{k}={v}" for k, v in env.items()) + (" " if env else "")
                  + " ".join(cmd))
        return 0
    ensure_runtime()
    os.environ.setdefault("PYTHONPATH", str(REPO / "python"))
    results = os.environ.setdefault("COAT_BENCH_RESULTS",
                                    tempfile.mkstemp(prefix="coat-ab.")[1])
    failed = []
    for what, cmd, env in steps:
        print(f"== {what}", flush=True)
        rc = subprocess.run(cmd, env=dict(os.environ, **env)).returncode
        if rc != 0:
            failed.append(what)
    subprocess.run([sys.executable, str(REPO / "bench" / "summary.py"), results])
    if failed:
        print("failed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
