#!/usr/bin/env python3
"""Compiles every example under examples/ through coat-opt and prints a summary.

For each `.mlir` that holds kernel-spec functions this produces, in the output
directory: `<module>.ptx` and `<module>.cubin` for sm_90a, `coat_cpu.so` with
the CPU twins, and one `manifest.json` describing both (docs/manifest.md).
The pipelines themselves live in the `coat` Python package.
"""
import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from coat import toolchain  # noqa: E402
from coat.compiler import CompileError  # noqa: E402,F401


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
