#!/usr/bin/env python3
"""The LM head's loss on the GPU, two tables in one run.

1. The `coat.cross_entropy` kernel (a row's loss and softmax - onehot,
   written over the logits) against torch.compile of the same two outputs
   from bf16 logits. Ideal = the bytes of one read and one write of the
   logits (plus targets and losses) at the copy bandwidth measured in the
   same run; the kernel reads each row twice, so rows that do not stay in
   cache cost a second read.
2. `coat.nn.linear_cross_entropy` (chunked LM head + loss, forward and
   backward) against the unfused `F.cross_entropy((h @ W.T).float(), t)`
   eagerly and under torch.compile: time per forward + backward, the
   bf16 GEMMs' share of the dense bf16 peak, and the peak memory above the
   inputs.

    python3 bench/bench_cross_entropy.py [--kernels DIR]

The programs come from --kernels or coat's search path (scripts/demo.sh
compiles the vocabularies below). Times are medians (bench/_timing.py).
"""
import argparse
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import (BF16_PEAK_TFLOPS, copy_bandwidth, copy_ideal, measure,  # noqa: E402
                     pct_of_copy, pct_of_peak, peak_ideal, record)
from bench_activations import anchor_compile  # noqa: E402

from coat import artifacts, programs  # noqa: E402
from coat.nn import linear_cross_entropy  # noqa: E402
from coat.nn._autograd import run_forward  # noqa: E402

KERNEL_SHAPES = [(8192, 32000), (4096, 50257), (4096, 128256), (2048, 151936)]
# (tokens, hidden, vocab): Llama-2-7B at 4 x 2048, TinyLlama at 8 x 2048,
# Llama-3-8B's vocabulary at 4 x 2048.
HEAD_SHAPES = [(8192, 4096, 32000), (16384, 2048, 32000), (8192, 4096, 128256)]
IGNORE = -100


def kernel_table(kernels, bw):
    print(f"\n{'coat.cross_entropy':18s} {'logits':>14s} {'coat us':>9s} {'% ideal':>8s} "
          f"{'torch us':>9s} {'speedup':>8s}")

    def anchor(x, t):
        xf = x.float()
        lse = torch.logsumexp(xf, -1)
        valid = t != IGNORE
        safe = torch.where(valid, t, 0)
        loss = torch.where(valid, lse - xf.gather(-1, safe[:, None])[:, 0], 0.0)
        g = torch.softmax(xf, -1) - F.one_hot(safe, x.shape[-1]).float()
        return loss, torch.where(valid[:, None], g, 0.0).bfloat16()

    ref = anchor_compile(anchor)
    for rows, vocab in KERNEL_SHAPES:
        program = artifacts.program(programs.CrossEntropyConfig(vocab, IGNORE), kernels)
        x = (torch.randn(rows, vocab, device="cuda") * 2).bfloat16()
        t = torch.randint(0, vocab, (rows,), device="cuda")
        t[::13] = IGNORE
        want_loss, want_grad = ref(x, t)
        work = x.clone()
        loss, grad = run_forward(program, "bench", [work, t])[0]
        torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(grad.float(), want_grad.float(), rtol=0, atol=2 ** -8)
        # In place: later calls take the previous gradient as logits, the
        # same work on other values.
        t_ours = measure(lambda: run_forward(program, "bench", [work, t]), inner=10)
        t_ref = measure(lambda: ref(x, t), inner=10)
        nbytes = rows * vocab * 2 * 2 + rows * (8 + 4)
        pct = pct_of_copy(nbytes, t_ours.median, bw)
        record("cross_entropy", program.name, f"{rows}x{vocab}", t_ours, pct_ideal=pct,
               ideal=copy_ideal(bw), anchor="torch.compile logsumexp + softmax - onehot",
               anchor_timing=t_ref)
        print(f"{'':18s} {f'{rows}x{vocab}':>14s} {t_ours.median * 1e3:9.1f} {pct:7.1f}% "
              f"{t_ref.median * 1e3:9.1f} {t_ref.median / t_ours.median:7.2f}x", flush=True)


def head_table(kernels):
    print(f"\n{'LM head + loss':18s} {'N x H x V':>18s} {'coat ms':>8s} {'% bf16':>7s} "
          f"{'GiB':>6s} {'eager ms':>9s} {'GiB':>6s} {'compiled ms':>12s} {'GiB':>6s}")

    def unfused(h, w, t):
        return F.cross_entropy((h @ w.t()).float(), t, ignore_index=IGNORE)

    compiled = anchor_compile(unfused)
    for n, hidden, vocab in HEAD_SHAPES:
        h = torch.randn(n, hidden, device="cuda").bfloat16().requires_grad_()
        w = (torch.randn(vocab, hidden, device="cuda") * hidden ** -0.5).bfloat16()
        w.requires_grad_()
        t = torch.randint(0, vocab, (n,), device="cuda")

        def step(loss_fn):
            def run():
                h.grad = w.grad = None
                loss_fn(h, w, t).backward()
            return run

        ours = step(lambda a, b, c: linear_cross_entropy(a, b, c, IGNORE, kernels=kernels))
        rows = []
        for fn in (ours, step(unfused), step(compiled)):
            fn()  # compiles, loads
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            fn()
            torch.cuda.synchronize()
            peak = (torch.cuda.max_memory_allocated() - base) / 2 ** 30
            rows.append((measure(fn, warmup=2, repeats=5, inner=3), peak))
        (t_ours, m_ours), (t_eager, m_eager), (t_comp, m_comp) = rows
        flop = 3 * 2 * n * hidden * vocab
        pct = pct_of_peak(flop, t_ours.median, BF16_PEAK_TFLOPS)
        record("linear_cross_entropy", "coat.nn.linear_cross_entropy",
               f"{n}x{hidden}x{vocab}", t_ours, pct_ideal=pct,
               ideal=peak_ideal(BF16_PEAK_TFLOPS),
               anchor="torch.compile F.cross_entropy((h @ W.T).float())",
               anchor_timing=t_comp, peak_gib=m_ours, anchor_peak_gib=m_comp,
               eager_ms=t_eager.median, eager_peak_gib=m_eager)
        print(f"{'':18s} {f'{n}x{hidden}x{vocab}':>18s} {t_ours.median:8.2f} {pct:6.1f}% "
              f"{m_ours:6.2f} {t_eager.median:9.2f} {m_eager:6.2f} {t_comp.median:12.2f} "
              f"{m_comp:6.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", default=None, metavar="DIR",
                    help="a folder of compiled programs (scripts/demo.sh's output), searched "
                         "before $COAT_KERNELS")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a GPU")
    if args.kernels:
        os.environ["COAT_KERNELS"] = os.pathsep.join(
            p for p in (args.kernels, os.environ.get("COAT_KERNELS")) if p)
    kernels = None  # each program is found by its source key on the search path
    bw = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}; copy bandwidth (read + write): "
          f"{bw / 1e12:.2f} TB/s")
    kernel_table(kernels, bw)
    head_table(kernels)


if __name__ == "__main__":
    main()
