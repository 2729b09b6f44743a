#!/usr/bin/env python3
"""The bias gradient on the GPU: the two kernels of coat-lower-bias-grad
(examples/linear/bias_grad.mlir; the f32 partial sums of 32 rows each, then
their reduction) against torch.compile of the same sum (dy.float().sum(0)
to bf16), timed in the same run; for the kernel that also writes dy's 1x16
maxima (an incoming gradient's, one read for both), against torch.compile of
the sum and the maxima together.

    python3 bench/bench_bias_grad.py --kernels DIR...

Shapes are a q/k/v, an MLP down and an MLP up projection's output gradient
at 4096 and 16384 tokens. Ideal = the bytes dy (and the maxima) move at the
copy bandwidth measured in the same run; the f32 workspace (1/16 of a bf16
dy, written and read once) is not in the ideal. Times are medians of
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

SHAPES = [(4096, 4096), (4096, 11008), (16384, 4096), (16384, 11008)]


def find(dirs):
    """The bf16 kernels, with and without maxima, once each."""
    found = {}
    for d in dirs:
        for k in coat.load(d).kernels.values():
            c = k.spec.config
            if k.spec.op == "bias_grad" and c.get("grad") == "bf16" and c.get("dbias") == "bf16":
                found.setdefault(bool(c.get("absmax")), k)
    return [found[m] for m in sorted(found)]


def launcher(kern, dy, rows, cols):
    c = kern.config
    partials = -(-rows // c["rows_per_partial"])
    ws = torch.empty(partials * cols, dtype=torch.float32, device="cuda")
    db = torch.empty(cols, dtype=torch.bfloat16, device="cuda")
    args = dict(dy=dy, dbias_partial=ws, rows=rows, cols=cols, partials=partials)
    maxima = None
    if c["absmax"]:
        maxima = torch.empty(rows * cols // c["group_size"], device="cuda")
        args["absmax"] = maxima
    reduce = kern.module[kern.name + "_reduce"]

    def run():
        kern.launch(**args)
        reduce.launch(n=cols, dbias_partial=ws, dbias=db, cols=cols, partials=partials)
    return run, db, maxima


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", nargs="+", required=True)
    args = ap.parse_args()
    kernels = find(args.kernels)
    if not kernels:
        sys.exit("no bf16 bias-gradient kernel in " + " ".join(args.kernels))
    bw = copy_bandwidth()
    print(f"copy bandwidth (read + write): {bw / 1e12:.2f} TB/s")
    print_header()
    for kern in kernels:
        fused = kern.config["absmax"]
        for rows, cols in SHAPES:
            dy = torch.randn(rows, cols, device="cuda").bfloat16()
            run, db, maxima = launcher(kern, dy, rows, cols)
            t = measure(run, graph=True)
            if fused:
                ref = anchor_compile(lambda x: (x.float().sum(0).bfloat16(),
                                                x.abs().view(rows, -1, 16).amax(-1).float()))
            else:
                ref = anchor_compile(lambda x: x.float().sum(0).bfloat16())
            want = ref(dy)
            t_ref = measure(lambda: ref(dy), graph=True)
            got_db = db.float()
            want_db = (want[0] if fused else want).float()
            torch.testing.assert_close(got_db, want_db, rtol=2 ** -7, atol=1e-2 * rows ** 0.5)
            if fused:
                assert torch.equal(maxima.view(rows, -1), want[1]), "maxima differ"
            nbytes = rows * cols * 2 + cols * 2 + (rows * cols // 16 * 4 if fused else 0)
            pct = pct_of_copy(nbytes, t.median, bw)
            what = "bias grad + 1x16 maxima" if fused else "bias grad"
            record("bias_grad", kern.name, f"{rows}x{cols}", t, pct_ideal=pct,
                   ideal=copy_ideal(bw), anchor="torch.compile " + what, anchor_timing=t_ref)
            print_row(what, f"{rows}x{cols}", t.median, pct, t_ref.median)


def print_header():
    print(f"{'':24s} {'dy':>12s} {'coat us':>8s} {'% ideal':>8s} {'torch us':>9s} "
          f"{'speedup':>8s}")


def print_row(what, shape, t, pct, t_ref):
    print(f"{what:24s} {shape:>12s} {t * 1e3:8.1f} {pct:7.1f}% {t_ref * 1e3:9.1f} "
          f"{t_ref / t:7.2f}x", flush=True)


if __name__ == "__main__":
    main()
