#!/usr/bin/env python3
"""Pointwise precision-flow kernels (coat-lower-pointwise) on the GPU against
torch.compile equivalents timed in the same run, with the device-to-device
copy bandwidth measured in the same run as the ceiling.

  python bench/bench_flow.py --kernels DIR [DIR ...] [--shapes 8192x8192 ...]

Each DIR is a compiled module (scripts/compile_examples.py output, e.g.
build/demo/pointwise). "ideal" is the bytes that must move (every argument
buffer read or written once: codes, bf16 scales, bf16 values, f32 maxima) at
the copy bandwidth (docs/anchors.md: ~4.27 TB/s on the H200, 4.8 TB/s
datasheet; both are printed); "%" is ideal time / measured time, GB/s the
bytes over the measured time, speedup = torch.compile time / ours. Times are
medians of 10 samples of 20 back-to-back CUDA-graph replays (bench/_timing.py).
"""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import copy_bandwidth, copy_ideal, ideal_ms, pct_of_copy, record  # noqa: E402
from bench_activations import (SIZE, anchor_compile, bench_parser, gpu_kernels,  # noqa: E402
                               time_with_anchor)

OPS = ("silu", "silu_grad", "gelu", "gelu_grad", "swiglu_mul", "swiglu_mul_grad",
       "swiglu", "swiglu_grad", "residual_add", "residual_add_grad")
# getattr: a torch without FP8 dtypes still imports the script (--help, tests).
FP8 = {"e4m3": getattr(torch, "float8_e4m3fn", None), "e5m2": getattr(torch, "float8_e5m2", None)}
FP8MAX = {"e4m3": 448.0, "e5m2": 57344.0}
DATASHEET_BW = 4.8e12


def buffers(kernel, rows, cols):
    """Arguments of one launch (inputs: finite codes, scales 0.01, N(0,1)
    values) and the bytes they hold."""
    spec = kernel.spec
    n = rows * cols
    args, nbytes = {}, 0
    for a in spec.memrefs:
        extent = a.extent_for(n)
        if a.dtype in FP8:
            t = torch.randint(0, 0x70, (extent,), dtype=torch.uint8, device="cuda")
        elif a.name.endswith("_scale"):
            t = torch.full((extent,), 0.01, device="cuda").to(torch.bfloat16
                                                               if a.dtype == "bf16" else
                                                               torch.float32)
        else:
            t = torch.randn(extent, device="cuda").to(torch.bfloat16 if a.dtype == "bf16"
                                                      else torch.float32)
        args[a.name] = t
        nbytes += extent * SIZE[a.dtype]
    return args, nbytes


def torch_equivalent(kernel, args, rows, cols):
    """The same computation (dequantize, math, outputs in the kernel's
    formats, epilogue maxima) as one torch.compile'd function."""
    spec, cfg = kernel.spec, kernel.config
    G, op = spec.group_size, spec.op
    arg = {a.name: a for a in spec.memrefs}

    def requantized(y):
        """y's 1xG E4M3 copy (bf16 scales), read back."""
        yg = y.view(-1, G)
        s = ((yg.abs().amax(-1, keepdim=True) + 1e-10) / FP8MAX["e4m3"]).bfloat16().float()
        q = (yg / s).clamp(-FP8MAX["e4m3"], FP8MAX["e4m3"]).to(FP8["e4m3"])
        return (q.float() * s).view(y.shape)

    def math(v):
        if op in ("swiglu", "swiglu_grad"):  # the SiLU folded in (silu_gate)
            s = torch.sigmoid(v["gate"])
            x1 = requantized(v["gate"] * s)
            if op == "swiglu":
                return [x1 * v["x2"]]
            g1 = (v["dy"] * v["x2"]).bfloat16().float()
            return [g1 * (s + v["gate"] * s * (1 - s)), v["dy"] * x1]
        if op in ("silu", "silu_grad"):
            s = torch.sigmoid(v["x"])
            return [v["x"] * s] if op == "silu" else [v["dy"] * (s + v["x"] * s * (1 - s))]
        if op in ("gelu", "gelu_grad"):
            cdf = (1 + torch.erf(v["x"] / 2 ** 0.5)) / 2
            if op == "gelu":
                return [v["x"] * cdf]
            pdf = v["x"] * torch.exp(-(v["x"] * v["x"]) / 2) / (2 * torch.pi) ** 0.5
            return [v["dy"] * (cdf + pdf)]
        if op == "swiglu_mul":
            return [v["x1"] * v["x2"]]
        if op == "swiglu_mul_grad":
            return [v["dy"] * v["x2"], v["dy"] * v["x1"]]
        a, b = list(v.values())
        return [a + b]

    results = cfg["results"]

    def f(*ins):
        v = dict(zip(cfg["operands"], ins))
        ys = math(v)
        outs = []
        for i, name in enumerate(results):
            y = ys[min(i, len(ys) - 1)]
            a = arg[name]
            if a.dtype in FP8:
                yg = y.view(-1, G)
                s = ((yg.abs().amax(-1, keepdim=True) + 1e-10) / FP8MAX[a.dtype]).bfloat16()
                outs += [(yg / s.float()).clamp(-FP8MAX[a.dtype], FP8MAX[a.dtype])
                         .to(FP8[a.dtype]), s]
                continue
            stored = y.to(torch.bfloat16 if a.dtype == "bf16" else torch.float32)
            outs.append(stored)
            if name + "_absmax" in arg:
                outs.append(stored.view(-1, G).abs().amax(-1).float())
        return outs

    # Dequantization is part of the function (it reads the same bytes).
    ins = [(args[n], args.get(n + "_scale")) for n in cfg["operands"]]

    def operand(pair, name):
        t, s = pair
        a = arg[name]
        if a.dtype in FP8:
            q = t.view(FP8[a.dtype]).view(-1, G).float()
            return (q * s.float().view(-1, 1)).view(rows, cols)
        return t.view(rows, cols).float()

    def g(*pairs):
        return f(*[operand(p, n) for p, n in zip(pairs, cfg["operands"])])

    fn = anchor_compile(g)
    return lambda: fn(*ins)


def print_table(rows, bw):
    print()
    print(f"ideal = bytes read + written at {bw / 1e12:.2f} TB/s (copy, same run); "
          f"'% 4.8' against the datasheet; speedup = torch.compile time / coat time; "
          "us = median of the repeats")
    hdr = (f"{'kernel':36s} {'shape':>12s} {'MB':>7s} {'coat us':>9s} {'GB/s':>7s} "
           f"{'coat %':>7s} {'% 4.8':>6s} {'torch us':>9s} {'torch %':>8s} {'speedup':>8s}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        t = (f"{r['torch_us']:9.1f} {r['torch_pct']:7.1f}% {r['speedup']:7.2f}x"
             if r["torch_us"] else f"{'-':>9s} {'-':>8s} {'-':>8s}")
        print(f"{r['kernel']:36s} {r['shape']:>12s} {r['bytes'] / 1e6:7.1f} "
              f"{r['coat_us']:9.1f} {r['coat_gbs']:7.0f} {r['coat_pct']:6.1f}% "
              f"{r['datasheet_pct']:5.1f}% {t}" + ("" if r["graph"] else "  (no graph)"))


def main():
    ap = bench_parser(__doc__)
    args = ap.parse_args()
    kernels = gpu_kernels(args, OPS, "flow")
    bw = copy_bandwidth()
    print(f"copy bandwidth (read + write): {bw / 1e12:.2f} TB/s on "
          f"{torch.cuda.get_device_name()} (datasheet {DATASHEET_BW / 1e12:.1f} TB/s)")
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes]

    rows = []
    for label, k in kernels:
        for (m, n) in shapes:
            if k.spec.group_size and n % k.spec.group_size:
                continue
            bufs, nbytes = buffers(k, m, n)
            t, ta = time_with_anchor(lambda: k.launch(rows=m, cols=n, **bufs),
                                     lambda: torch_equivalent(k, bufs, m, n), label,
                                     args.no_torch)
            ms, t_ms = t.median, (ta.median if ta else None)
            row = dict(kernel=label, op=k.spec.op, shape=f"{m}x{n}", bytes=nbytes,
                       ideal_ms=ideal_ms(nbytes, bw), coat_us=ms * 1e3,
                       coat_gbs=nbytes / ms * 1e-6, coat_pct=pct_of_copy(nbytes, ms, bw),
                       datasheet_pct=pct_of_copy(nbytes, ms, DATASHEET_BW),
                       torch_us=t_ms * 1e3 if t_ms else None,
                       torch_pct=pct_of_copy(nbytes, t_ms, bw) if t_ms else None,
                       speedup=(t_ms / ms) if t_ms else None, graph=t.graph)
            rows.append(row)
            record("flow", label, row["shape"], t, pct_ideal=row["coat_pct"],
                   ideal=copy_ideal(bw), anchor="torch.compile", anchor_timing=ta,
                   anchor_pct=row["torch_pct"])
            print(f"{label:36s} {m:>6d}x{n:<6d} coat {row['coat_us']:8.1f} us "
                  f"({row['coat_pct']:5.1f}%)"
                  + (f"  torch.compile {row['torch_us']:8.1f} us ({row['torch_pct']:5.1f}%)"
                     if t_ms else ""), flush=True)

    print_table(rows, bw)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(copy_bandwidth=bw, rows=rows), indent=2))


if __name__ == "__main__":
    main()
