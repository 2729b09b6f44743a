#!/usr/bin/env python3
"""Compiles the kernel set of a model config ahead of time (where LLVM is),
for coat.nn on a GPU host without it:

  .venv/bin/python scripts/compile_model.py --hidden 1024 --ffn 2816 --out DIR

writes DIR/<block name>/ (PTX, cubin, CPU twins, manifest.json with the
block's launch plan). Put DIR/<block name> on COAT_KERNELS there, or pass it
as MLPBlock(..., kernels=...).
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from coat import programs, toolchain  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--ffn", type=int, required=True)
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--out", required=True)
    ap.add_argument("--coat-opt", default=None)
    args = ap.parse_args()
    cfg = programs.MLPBlockConfig(hidden=args.hidden, ffn=args.ffn, eps=args.eps)
    cfg.check()
    out = Path(args.out) / cfg.name
    out.mkdir(parents=True, exist_ok=True)
    src = out / f"{cfg.name}.mlir"
    src.write_text(programs.mlp_block(cfg))
    toolchain.Toolchain(coat_opt=args.coat_opt).compile_program(src, out)
    print(f"{cfg.name} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
