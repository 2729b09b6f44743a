#!/usr/bin/env python3
"""Compiles variants of the kernel-spec examples (the same source under other
pass options) for an A/B against the defaults on the GPU (scripts/gpu_ab.py).

  scripts/compile_variants.py --out build/variants \\
      'e8=optimizer/adamw.mlir:lower=elements-per-thread=8 block-size=256' \\
      'flat8=activations/quantize.mlir:activation=flat-min-ctas=8'

A variant is NAME=EXAMPLE:PASS=OPTIONS[;PASS=OPTIONS], EXAMPLE relative to
--examples, PASS one of the option groups of Toolchain.compile_file (lower,
activation, norms, pointwise, linear). Each is compiled, GPU kernels and CPU
twins, into OUT/NAME; OUT/variants.json records each variant's example, the
demo module it varies (build/demo/<example stem>) and its options.
"""
import argparse
import concurrent.futures
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from coat import toolchain  # noqa: E402
from coat._compile_error import CompileError  # noqa: E402

PASS_GROUPS = ("lower", "activation", "norms", "pointwise", "linear")
_KWARG = {"lower": "lower_options", "activation": "activation_options",
          "norms": "norm_options", "pointwise": "pointwise_options",
          "linear": "linear_options"}
_SPEC = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)=(?P<example>[^:]+\.mlir):(?P<opts>.+)$")


def parse_variant(text: str, examples: Path) -> dict:
    """One NAME=EXAMPLE:PASS=OPTIONS[;...] argument as a variants.json entry;
    ValueError says what is wrong with it."""
    m = _SPEC.match(text)
    if not m:
        raise ValueError(f"variant {text!r} is not NAME=EXAMPLE.mlir:PASS=OPTIONS[;PASS=OPTIONS]")
    options = {}
    for part in m["opts"].split(";"):
        group, sep, opts = part.partition("=")
        if not sep or group not in PASS_GROUPS:
            raise ValueError(f"variant {m['name']}: {part!r} does not start with one of "
                             f"{', '.join(g + '=' for g in PASS_GROUPS)}")
        if group in options:
            raise ValueError(f"variant {m['name']}: {group} given twice")
        options[group] = opts.strip()
    src = examples / m["example"]
    if not src.is_file():
        raise ValueError(f"variant {m['name']}: {src} does not exist")
    return dict(name=m["name"], example=m["example"], module=src.stem, options=options)


def main() -> int:
    repo = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--out", default=str(repo / "build" / "variants"))
    ap.add_argument("--examples", default=str(repo / "examples"))
    ap.add_argument("--coat-opt", default=None)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    try:
        variants = [parse_variant(v, Path(args.examples)) for v in args.variants]
    except ValueError as e:
        ap.error(str(e))
    names = [v["name"] for v in variants]
    if len(set(names)) != len(names):
        ap.error("variant names must differ")
    tc = toolchain.Toolchain(coat_opt=args.coat_opt or str(repo / "build" / "bin" / "coat-opt"))
    out = Path(args.out)

    def build(v):
        """None, or the first error lines of a variant that does not compile."""
        kwargs = {_KWARG[g]: o for g, o in v["options"].items()}
        try:
            tc.compile_file(Path(args.examples) / v["example"], out / v["name"], **kwargs)
        except CompileError as e:
            errors = [l for l in e.diagnostics.splitlines() if "error" in l]
            return "\n    ".join(errors[:3] or [str(e).splitlines()[0]])
        return None

    compiled = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for v, error in zip(variants, pool.map(build, variants)):
            opts = "; ".join(f"{g}: {o}" for g, o in v["options"].items())
            if error:
                print(f"{v['name']:12s} FAILED  ({opts})\n    {error}")
                continue
            compiled.append(v)
            print(f"{v['name']:12s} {v['example']}  ({opts})")
    # The variants that compiled join the index even when others failed.
    index = out / "variants.json"
    known = json.loads(index.read_text()) if index.is_file() else {}
    known.update({v["name"]: v for v in compiled})
    index.write_text(json.dumps(known, indent=1) + "\n")
    print(f"{len(compiled)} compiled; {len(known)} variants in {index}")
    return 0 if len(compiled) == len(variants) else 1


if __name__ == "__main__":
    sys.exit(main())
