#!/usr/bin/env python3
"""The second stage of group scaling on the H200: the scale kernel of
examples/activations/scales.mlir (max of a producer's partial maxima, then
(max + eps) / fp8max rounded to bf16, on the device) against the torch
equivalent COAT runs (torch.max over the scale tensor, then the division),
timed in the same run.

    python3 bench/bench_scales.py --kernels DIR

Sizes are the partial-maxima tensors of the Llama MLP example (1x16 maxima of
4096x4096 and 4096x11008 tensors) and of 16384x11008. Ideal = bytes read at
the copy bandwidth measured in the same run. Times are medians of
CUDA-graph replays (bench/_timing.py).
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import coat  # noqa: E402
from _timing import copy_bandwidth, copy_ideal, measure, pct_of_copy, record  # noqa: E402
from bench_activations import anchor_compile  # noqa: E402

SHAPES = {"4096x4096/16": 4096 * 256, "4096x11008/16": 4096 * 688,
          "16384x11008/16": 16384 * 688}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", nargs="+", required=True)
    args = ap.parse_args()
    kernels = []
    for d in args.kernels:
        mod = coat.load(d)
        kernels += [k for k in mod.kernels.values()
                    if k.spec.op == "reduce_scales" and "e4m3_sbf16" in k.spec.name]
    if not kernels:
        sys.exit("no e4m3/bf16 scale kernel in " + " ".join(args.kernels))
    kern = kernels[0]
    bw = copy_bandwidth()
    print(f"copy bandwidth (read + write): {bw / 1e12:.2f} TB/s")
    print_header()
    for name, n in SHAPES.items():
        p = torch.rand(n, device="cuda") * 10
        out = torch.empty(1, dtype=torch.bfloat16, device="cuda")
        ws = torch.zeros(2, dtype=torch.int32, device="cuda")
        t = measure(lambda: kern.launch(maxima=p, scale=out, workspace=ws, n=n), graph=True)
        ref = anchor_compile(lambda x: ((x.max() + 1e-10) / 448.0).to(torch.bfloat16))
        ref(p)
        t_ref = measure(lambda: ref(p), graph=True)
        want = ((p.max() + 1e-10) / 448.0).to(torch.bfloat16)
        assert out.item() == want.item(), (out.item(), want.item())
        pct = pct_of_copy(n * 4, t.median, bw)
        record("scales", kern.name, f"maxima of {name}", t, pct_ideal=pct, ideal=copy_ideal(bw),
               anchor="torch max + division", anchor_timing=t_ref)
        print_row(name, n, t.median, pct, t_ref.median)


def print_header():
    print(f"{'maxima of':16s} {'entries':>9s} {'coat us':>8s} {'% ideal':>8s} "
          f"{'torch us':>9s} {'speedup':>8s}")


def print_row(name, n, t, pct, t_ref):
    print(f"{name:16s} {n:9d} {t * 1e3:8.1f} {pct:7.1f}% {t_ref * 1e3:9.1f} {t_ref / t:7.2f}x",
          flush=True)


if __name__ == "__main__":
    main()
