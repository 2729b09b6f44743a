#!/usr/bin/env python3
"""Compiles the kernel set of a model config ahead of time (where LLVM is),
for coat.nn on a GPU host without it:

  .venv/bin/python scripts/compile_model.py --hidden 1024 --ffn 2816 --out DIR
  .venv/bin/python scripts/compile_model.py --hidden 1024 --ffn 2816 --heads 16 --out DIR

writes DIR/<program name>/ (PTX, cubin, CPU twins, manifest.json with the
program's launch plan) for the MLP block, and with --heads for the whole
decoder layer (attention input and output programs too). Put DIR on
COAT_KERNELS there (coat.nn searches its sub-folders), or pass a folder as
MLPBlock(..., kernels=...).
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
    ap.add_argument("--heads", type=int, default=None,
                    help="also the attention programs of a decoder layer")
    ap.add_argument("--kv-heads", type=int, default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--coat-opt", default=None)
    args = ap.parse_args()
    if args.heads:
        try:
            configs = programs.decoder_layer_configs(args.hidden, args.ffn, args.heads,
                                                     args.kv_heads or args.heads, args.eps)
        except ValueError as e:
            ap.error(str(e))
    else:
        configs = [programs.MLPBlockConfig(hidden=args.hidden, ffn=args.ffn, eps=args.eps)]
    tools = toolchain.Toolchain(coat_opt=args.coat_opt)
    for cfg in configs:
        cfg.check()
        out = Path(args.out) / cfg.name
        out.mkdir(parents=True, exist_ok=True)
        src = out / f"{cfg.name}.mlir"
        src.write_text(cfg.text())
        tools.compile_program(src, out)
        print(f"{cfg.name} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
