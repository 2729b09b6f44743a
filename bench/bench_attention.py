#!/usr/bin/env python3
"""Causal attention (forward + backward) of the trained shapes under each of
torch's SDPA backends, timed in the same run: the converted model's
attention is torch's, so the backend it runs on is a lever on the step.
The anchor is the backend torch picks by itself (flash where it applies);
the ceiling is the BF16 dense peak (causal FLOPs: half the square).

  python bench/bench_attention.py [--shapes tinyllama 100m 7b]

Each row: one backend's forward + backward, median of 10 samples of 5
back-to-back calls (bench/_timing.py), and its largest difference from the
default backend's output and input gradients (bf16 rounding, not a check).
"""

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import BF16_PEAK_TFLOPS, measure, pct_of_peak, ratio, record, tflops  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_llama.py"

#: (batch, tokens) of each configuration's side-by-side training run
#: (docs/training.md); the heads come from the example's CONFIGS.
RUNS = {"100m": (16, 1024), "tinyllama": (8, 2048), "7b": (4, 2048)}
BACKENDS = {"default": None, "flash": SDPBackend.FLASH_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}


def shape(name):
    """(batch, tokens, query heads, key/value heads, head dim) of run `name`."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_train_llama", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    cfg = example.CONFIGS[name]
    return (*RUNS[name], cfg.heads, cfg.kv_heads, cfg.head_dim)


def causal_flop(b, s, h, d):
    """Forward + backward FLOPs of causal attention: QK^T and PV forward
    (2 GEMMs), five GEMMs backward, each over half the s x s square."""
    return 7 * 2 * b * h * s * s * d / 2


def step(q, k, v, dout, backend):
    gqa = q.shape[1] != k.shape[1]

    def run():
        for t in (q, k, v):
            t.grad = None
        if backend is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        o.backward(dout)
        return o
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(RUNS), choices=list(RUNS))
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    for name in args.shapes:
        b, s, h, hkv, d = shape(name)
        q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dout = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
        flop = causal_flop(b, s, h, d)
        ref = step(q, k, v, dout, None)
        o_ref = ref()
        g_ref = [t.grad.clone() for t in (q, k, v)]
        base = measure(ref, inner=5)
        for label, backend in BACKENDS.items():
            fn = step(q, k, v, dout, backend)
            try:
                o = fn()
                t = base if backend is None else measure(fn, inner=5)
            except RuntimeError as e:  # the backend does not take this shape here
                print(f"{name:9} {label:9} not available: {str(e).splitlines()[0][:90]}")
                continue
            diff = max(float((o - o_ref).abs().max()),
                       *(float((x.grad - g).abs().max()) for x, g in zip((q, k, v), g_ref)))
            pct = pct_of_peak(flop, t.median, BF16_PEAK_TFLOPS)
            record("attention", label, (b, s, h, hkv, d), t, pct_ideal=pct,
                   ideal="bf16 peak", anchor="sdpa default", anchor_timing=base)
            rows.append((name, label, t.median, tflops(flop, t.median), pct,
                         ratio(base.median, t.median), diff))
    print("| shape | backend | ms (fwd+bwd) | TFLOP/s | % of BF16 peak | default/this | max diff |")
    print("|---|---|---|---|---|---|---|")
    for name, label, ms, tf, pct, r, diff in rows:
        print(f"| {name} | {label} | {ms:.3f} | {tf:.0f} | {pct:.1f} | {r:.2f}x | {diff:.3g} |")


if __name__ == "__main__":
    main()
