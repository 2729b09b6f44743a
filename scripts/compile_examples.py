#!/usr/bin/env python3
"""Compiles every example under examples/ through coat-opt and prints a summary.

For each `.mlir` that holds kernel-spec functions this produces, in the output
directory: `<module>.ptx` and `<module>.cubin` for sm_90a, `coat_cpu.so` with
the CPU twins, and one `manifest.json` describing both (docs/manifest.md).
The pipelines themselves live in the `coat` Python package.

Examples written before granularity resolution (they hold `coat.quantize_auto`,
e.g. examples/llama_mlp/mlp_block.mlir) are model-level programs, not kernel
specs: they are checked by running coat-mixed-granularity and
coat-group-scaling, and the granularity chosen for each quantized value is
printed.
"""
import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from coat import toolchain  # noqa: E402
from coat.compiler import CompileError  # noqa: E402,F401


GRANULARITY_PASSES = ["-coat-mixed-granularity", "-coat-group-scaling"]
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
    programs = [e for e in examples if is_unresolved_program(e)]
    examples = [e for e in examples if e not in programs]
    for src in programs:
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
    rows = []
    for src in examples:
        out = Path(args.out) / src.stem
        out.mkdir(parents=True, exist_ok=True)
        for old in out.iterdir():
            old.unlink()
        produced = tc.compile_file(src, out, chip=args.chip,
                                   features=args.features)
        manifest = json.loads((out / "manifest.json").read_text())
        for k in manifest["kernels"]:
            rows.append((src.relative_to(args.examples), k["name"],
                         "gpu" in k, "cpu" in k))
        print(f"{src.relative_to(args.examples)} -> {out}")
        for p in produced:
            print(f"  {p.name:32s} {p.stat().st_size:>9d} bytes")
    print()
    print(f"{'example':28s} {'kernel':44s} gpu  cpu")
    for ex, name, gpu, cpu in rows:
        print(f"{str(ex):28s} {name:44s} {'yes' if gpu else 'no ':4s} "
              f"{'yes' if cpu else 'no'}")
    print(f"\n{len(rows)} kernels from {len(examples)} examples "
          f"(target {args.chip}{args.features.replace('+', ' ')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
