#!/usr/bin/env python3
"""Compiles every example under examples/ through coat-opt and prints a summary.

For each `.mlir` that holds kernel-spec functions this produces, in the output
directory: `<module>.ptx` and `<module>.cubin` for sm_90a, `coat_cpu.so` with
the CPU twins, and one `manifest.json` describing both (docs/manifest.md).
The pipelines themselves live in the `coat` Python package.

Examples written before granularity resolution (they hold `coat.quantize_auto`,
e.g. examples/llama_mlp/mlp_block.mlir) are model-level programs, not kernel
specs: coat-mixed-granularity and coat-group-scaling resolve them (the
granularity chosen for each quantized value is printed),
coat-recompute-activations derives activations again in the backward
rather than keep them, coat-outline-kernels cuts them into kernel specs (the launch sequence is
printed; the outlined program is written to `<out>/<name>/program.mlir`), and
coat-compile-artifact compiles those like any other example, with the
program's launch plan.
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from coat import programs, toolchain  # noqa: E402
from coat.compiler import CompileError  # noqa: E402,F401


OUTLINE_PASSES = list(toolchain.PROGRAM_PASSES)  # the program pipeline, one place
GRANULARITY_PASSES = OUTLINE_PASSES[:-1]
# Generated block programs compiled with the examples (the kernels that
# coat.nn and the training example use; tokens are a run-time extent).
MODEL_BLOCKS = [*programs.decoder_layer_configs(hidden=1024, ffn=2816, heads=16, kv_heads=16),
                # The attention input that leaves q and k to PyTorch (the
                # head sizes the rotation kernel cannot take, and tests).
                programs.decoder_layer_configs(hidden=1024, ffn=2816, heads=16, kv_heads=16,
                                               rope=False)[0],
                # The attention input that gives q/k/v again in the backward
                # (DecoderLayer(recompute_attention_inputs=True)).
                programs.decoder_layer_configs(hidden=1024, ffn=2816, heads=16, kv_heads=16,
                                               recompute_output=True)[0],
                # The attention input and MLP that keep their backward GEMMs'
                # FP8 operands (coat.convert(keep_gemm_operands=True)), and
                # the attention input with both options.
                *programs.decoder_layer_configs(hidden=1024, ffn=2816, heads=16, kv_heads=16,
                                                keep_gemm_operands=True)[::2],
                programs.decoder_layer_configs(hidden=1024, ffn=2816, heads=16, kv_heads=16,
                                               recompute_output=True,
                                               keep_gemm_operands=True)[0],
                # The attention output that reads attention's kept output
                # (DecoderLayer(reuse_attention_output=True)).
                programs.decoder_layer_configs(hidden=1024, ffn=2816, heads=16, kv_heads=16,
                                               reuse_attention_output=True)[1],
                programs.LinearConfig(1024, 2816),
                # coat.nn.Linear(bias=True) at the demo size (the module tests).
                programs.LinearConfig(1024, 2816, bias=True), programs.NormConfig(1024),
                programs.NormConfig(1024, "layernorm", bias=True),
                # 8192 columns: its backward takes the column sums separately.
                programs.NormConfig(8192, "layernorm", bias=True),
                # Biased projections (Qwen2's q/k/v; GPT-NeoX/GPT-2 MLPs;
                # GPT-NeoX's LayerNorm + q/k/v and its parallel residual's
                # MLP), small: the GPU program tests run them.
                programs.NormLinearConfig(64, 192, bias=True),
                programs.GeluMLPConfig(64, 160, bias=True),
                programs.NormLinearConfig(64, 192, bias=True, norm="layernorm"),
                programs.GeluMLPConfig(64, 160, bias=True, residual="separate"),
                # OLMo-1's LayerNorm without parameters before the q/k/v
                # projection and the SwiGLU MLP, small: the GPU program
                # tests run them (test_layernorm_programs.py).
                programs.NormLinearConfig(64, 192, norm="layernorm", norm_affine=False),
                programs.MLPBlockConfig(64, 160, norm="layernorm", norm_affine=False),
                # The LM head's loss (coat.cross_entropy) at the vocabularies of
                # the big models and odd small ones (the numerics tests), 256
                # (coat.llama's default) and 320 (the tiny test model), and
                # another ignore_index (test_cross_entropy_numerics.py,
                # test_linear_cross_entropy.py).
                *(programs.CrossEntropyConfig(v) for v in (17, 256, 320, 1001, 32000, 50257,
                                                           128256, 151936)),
                programs.CrossEntropyConfig(17, ignore_index=0),
                programs.CrossEntropyConfig(1001, ignore_index=0)]
_REMARK = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):\d+: remark: (?P<text>.*)$")
_NAME = re.compile(r"(%[\w.$-]+)\s*=\s*coat\.quantize_auto")


def is_unresolved_program(src: Path) -> bool:
    """A program before granularity resolution, not a kernel spec."""
    return "coat.quantize_auto" in src.read_text()


def granularity_summary(coat_opt: str, src: Path):
    """Runs the activation passes on `src`; returns (choices, fused maxima)
    where choices are (value, choice) from coat-mixed-granularity's remarks
    and fused maxima counts the `coat.absmax ... epilogue` ops of
    coat-group-scaling. Raises on a pass failure."""
    proc = subprocess.run([coat_opt, str(src), *GRANULARITY_PASSES,
                           "-mlir-print-op-on-diagnostic=false"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"coat-opt {' '.join(GRANULARITY_PASSES)} failed on "
                           f"{src}:\n{proc.stderr}")
    lines = src.read_text().splitlines()
    choices = []
    for line in proc.stderr.splitlines():
        m = _REMARK.match(line)
        if not m:
            continue
        n = _NAME.search(lines[int(m["line"]) - 1])
        choices.append((n.group(1) if n else f"line {m['line']}", m["text"]))
    fused = len(re.findall(r"coat\.absmax .* epilogue", proc.stdout))
    return choices, fused


_CALL = re.compile(r"= call @([\w$.-]+)\(|^\s*call @([\w$.-]+)\(")


def run_passes(coat_opt: str, src: Path, passes, out: Path = None) -> str:
    """Runs coat-opt `passes` on `src`; returns (or writes) the result."""
    cmd = [coat_opt, str(src), *passes, "-mlir-print-op-on-diagnostic=false"]
    if out is not None:
        cmd += ["-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"coat-opt {' '.join(passes)} failed on {src}:\n"
                           f"{proc.stderr}")
    return proc.stdout


def kernel_schedule(coat_opt: str, src: Path):
    """The kernels a program launches, in order (coat-outline-kernels)."""
    text = run_passes(coat_opt, src, OUTLINE_PASSES)
    names = []
    for line in text.splitlines():
        m = _CALL.search(line)
        if m:
            names.append(m.group(1) or m.group(2))
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--coat-opt", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--chip", default="sm_90a")
    ap.add_argument("--features", default="+ptx80")
    args = ap.parse_args()

    tc = toolchain.Toolchain(coat_opt=args.coat_opt)
    examples = sorted(Path(args.examples).rglob("*.mlir"))
    programs_ = [e for e in examples if is_unresolved_program(e)]
    for src in list(programs_):
        choices, fused = granularity_summary(tc.coat_opt, src)
        print(f"{src.relative_to(args.examples)}: granularity "
              f"({' '.join(GRANULARITY_PASSES)})")
        width = max((len(v) for v, _ in choices), default=0)
        for value, remark in choices:
            # "<choice>; <consumers>[; <consumers>]; <format>: <why>"
            parts = remark.split("; ")
            print(f"  {value:{width}s}  {parts[0]}")
            for why in parts[1:]:
                print(f"  {'':{width}s}    {why}")
        print(f"  {len(choices)} quantized values resolved; {fused} per-tensor "
              f"scales from maxima fused into their producers\n")
        schedule = kernel_schedule(tc.coat_opt, src)
        print(f"{src.relative_to(args.examples)}: {len(schedule)} kernel launches "
              f"({' '.join(OUTLINE_PASSES)}), "
              f"{len(set(schedule))} distinct kernels")
        for i, name in enumerate(schedule):
            print(f"  {i:3d}  {name}")
        print()
    # Block programs generated from model configs (coat.programs): the
    # kernel sets that coat.nn runs, token count dynamic.
    for cfg in MODEL_BLOCKS:
        src = Path(args.out) / "programs" / f"{cfg.name}.mlir"
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(cfg.text())
        programs_.append(src)
    rows = []

    def shown(src: Path) -> Path:
        try:
            return src.relative_to(args.examples)
        except ValueError:  # a generated program
            return src.relative_to(args.out)

    def compile_one(src: Path):
        out = Path(args.out) / src.stem
        out.mkdir(parents=True, exist_ok=True)
        for old in out.iterdir():
            old.unlink()
        compile = tc.compile_program if src in programs_ else tc.compile_file
        produced = compile(src, out, chip=args.chip, features=args.features)
        return out, produced

    examples = [e for e in examples if e not in programs_] + programs_
    # Each example compiles in its own coat-opt/ptxas subprocesses: run them
    # side by side, report in order.
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(compile_one, examples))
    for src, (out, produced) in zip(examples, results):
        manifest = json.loads((out / "manifest.json").read_text())
        for k in manifest["kernels"]:
            rows.append((shown(src), k["name"],
                         "gpu" in k, "cpu" in k))
        plans = manifest.get("programs", [])
        print(f"{shown(src)} -> {out}"
              + "".join(f"  (program {p['name']}: {len(p['steps'])} calls, "
                        f"{sum(s['phase'] == 'forward' for s in p['steps'])} forward, "
                        f"{len(p['saved'])} values saved for the backward)"
                        for p in plans))
        for p in produced:
            print(f"  {p.name:32s} {p.stat().st_size:>9d} bytes")
    print()
    wide = max([len(r[1]) for r in rows] + [6])
    exw = max([len(str(r[0])) for r in rows] + [7])
    print(f"{'example':{exw}s} {'kernel':{wide}s} gpu  cpu")
    for ex, name, gpu, cpu in rows:
        print(f"{str(ex):{exw}s} {name:{wide}s} {'yes' if gpu else 'no ':4s} "
              f"{'yes' if cpu else 'no'}")
    print(f"\n{len(rows)} kernels from {len(examples)} examples "
          f"(target {args.chip}{args.features.replace('+', ' ')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
