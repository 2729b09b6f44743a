#!/usr/bin/env python3
"""Norm kernels of the FP8 precision flow (coat-lower-norms: RMSNorm and
LayerNorm, forward with fused partial maxima, backward with dweight/dbias)
on the GPU against torch.compile equivalents timed in the same run, with the
device-to-device copy bandwidth measured in the same run as the ceiling.

  python bench/bench_norms.py --kernels DIR [DIR ...] [--shapes 8192x8192 ...]

DIR is a compiled module holding examples/flow/norms.mlir (scripts/
compile_examples.py output, e.g. build/demo/norms). For every form (op,
affine, output type) and shape the kernel with the smallest max_cols that
fits the row is timed (per DIR; rows are labelled DIR/kernel when several
are given). "ideal" is the bytes that must move (x codes + group
scales, weight/bias, dy, y/dx, mean/rstd, partial maxima, dweight/dbias)
at the copy bandwidth; the backward's f32 dweight/dbias workspace is extra
traffic the kernel pays and is not counted as ideal, as is the second read
of x and dy by `_columns`. A backward with a weight is timed as all its
launches (rows, `_columns` where the column sums are separate, then
`_reduce`). Times are medians
of 10 samples of 20 back-to-back CUDA-graph replays (bench/_timing.py).
"""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import copy_bandwidth, copy_ideal, ideal_ms, pct_of_copy, record  # noqa: E402
from bench_activations import (anchor_compile, bench_parser, gpu_kernels,  # noqa: E402
                               time_with_anchor)
from coat.executor import default_partials  # noqa: E402

OPS = ("rmsnorm", "layernorm", "rmsnorm_grad", "layernorm_grad")
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
SIZE = {"f32": 4, "bf16": 2, "f16": 2, "e4m3": 1, "e5m2": 1}
G = 16


def form(k):
    """Kernels that compute the same thing (differing only in tuning)."""
    c = k.config
    return (k.spec.op, c.get("weight"), c.get("bias"), c.get("output", c.get("dx")),
            c.get("epilogue_absmax"))


def pick(kernels, cols):
    """(label, kernel): per compiled folder and form, the kernel with the
    smallest max_cols >= cols. Keyed by folder so that variants of one module
    (--kernels A B) are each timed."""
    best = {}
    for label, k in kernels:
        if cols % k.spec.group_size or cols > k.config["max_cols"]:
            continue
        key = (label[: -len(k.name)], form(k))
        if key not in best or k.config["max_cols"] < best[key][1].config["max_cols"]:
            best[key] = (label, k)
    return list(best.values())


def setup(k, rows, cols, partials):
    """(launch thunk, torch.compile thunk, ideal bytes)."""
    cfg = k.config
    dev = "cuda"
    n = rows * cols
    codes = torch.randint(0, 0x70, (rows, cols), dtype=torch.uint8, device=dev)
    codes[:, ::2] |= 0x80  # both signs
    sdt = DTYPES[cfg["scale"]]
    scales = torch.full((rows, cols // G), 0.01, device=dev).to(sdt)
    wdt = DTYPES.get(cfg.get("weight", ""), None)
    w = (1 + 0.1 * torch.randn(cols, device=dev)).to(wdt) if wdt else None
    b = (0.1 * torch.randn(cols, device=dev)).to(wdt) if cfg.get("bias") and wdt else None
    layer = cfg["norm"] == "layer"
    eps = float(cfg["eps"])
    nbytes = n + scales.numel() * scales.element_size()
    nbytes += sum(t.numel() * t.element_size() for t in (w, b) if t is not None)
    args = dict(x_codes=codes, x_scale=scales)
    if w is not None:
        args["weight"] = w

    def xf(codes, scales):
        return (codes.view(torch.float8_e4m3fn).float().view(rows, -1, G)
                * scales.float().view(rows, -1, 1)).view(rows, cols)

    if not k.spec.op.endswith("_grad"):
        odt = DTYPES[cfg["output"]]
        if b is not None:
            args["bias"] = b
        y = torch.empty(rows, cols, dtype=odt, device=dev)
        args["y"] = y
        stats = 2 if layer else 1
        if layer:
            args["mean"] = torch.empty(rows, device=dev)
        args["rstd"] = torch.empty(rows, device=dev)
        if cfg["epilogue_absmax"]:
            args["absmax"] = torch.empty(rows, cols // G, device=dev)
            nbytes += 4 * n // G
        nbytes += n * SIZE[cfg["output"]] + 4 * rows * stats

        def launch():
            k.launch(**args, rows=rows, cols=cols)

        def ref(codes, scales, w, b):
            x = xf(codes, scales)
            if layer:
                mean = x.mean(-1, keepdim=True)
                x = x - mean
            rstd = torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
            y = x * rstd
            if w is not None:
                y = y * w.float()
            if b is not None:
                y = y + b.float()
            y = y.to(odt)
            m = y.abs().view(rows, -1, G).amax(-1).float()
            return (y, rstd, m) + ((mean,) if layer else ())
        fn = anchor_compile(ref)
        return launch, (lambda: fn(codes, scales, w, b)), nbytes

    gdt = DTYPES[cfg["grad"]]
    dy = torch.randn(rows, cols, device=dev).to(gdt)
    rstd = torch.rand(rows, device=dev) + 0.5
    mean = torch.randn(rows, device=dev) * 0.1 if layer else None
    if mean is not None:
        args["mean"] = mean
    args["rstd"] = rstd
    args["dy"] = dy
    args["dx"] = torch.empty(rows, cols, dtype=DTYPES[cfg["dx"]], device=dev)
    nbytes += 2 * n * SIZE[cfg["grad"]] + 4 * rows * (2 if layer else 1)
    if cfg.get("epilogue_absmax"):
        args["absmax"] = torch.empty(rows, cols // G, device=dev)
        nbytes += 4 * n // G
    scalars = dict(rows=rows, cols=cols)
    red = None
    if w is not None:
        # The program executor's choice (one wave of row teams), unless
        # --partials-per-sm asks for a fixed count.
        p = (default_partials(k, rows, torch.cuda.current_device()) if partials is None
             else min(rows, partials * cfg["rows_per_block"]))
        args["dweight_partial"] = torch.empty(p, cols, device=dev)
        rargs = dict(dweight_partial=args["dweight_partial"],
                     dweight=torch.empty(cols, dtype=wdt, device=dev))
        nbytes += cols * SIZE[cfg["weight"]]
        if cfg["bias"]:
            args["dbias_partial"] = torch.empty(p, cols, device=dev)
            rargs.update(dbias_partial=args["dbias_partial"],
                         dbias=torch.empty(cols, dtype=wdt, device=dev))
            nbytes += cols * SIZE[cfg["weight"]]
        scalars["partials"] = p
        red = k.module[k.name + "_reduce"]
    # Separate column sums: the row kernel takes neither the workspace nor
    # partials; `_columns` fills the workspace.
    sep = k.config.get("column_sums") == "separate"
    cols_k = k.module[k.name + "_columns"] if sep else None
    row_args = {a: v for a, v in {**args, **scalars}.items()
                if a in {x.name for x in k.spec.args}}
    if sep:
        col_args = {a: v for a, v in {**args, **scalars}.items()
                    if a in {x.name for x in cols_k.spec.args}}

    def launch():
        k.launch(**row_args)
        if cols_k is not None:
            cols_k.launch(**col_args)
        if red is not None:
            red.launch(n=cols, **rargs, cols=cols, partials=scalars["partials"])

    def ref(codes, scales, w, rstd, mean, dy):
        x = xf(codes, scales)
        if mean is not None:
            x = x - mean[:, None]
        xh = x * rstd[:, None]
        g = dy.float()
        wdy = g * w.float() if w is not None else g
        c1 = (xh * wdy).mean(-1, keepdim=True)
        if layer:
            dx = (wdy - (xh * c1 + wdy.mean(-1, keepdim=True))) * rstd[:, None]
        else:
            dx = (wdy - xh * c1) * rstd[:, None]
        out = [dx.to(gdt)]
        if w is not None:
            out.append((g * xh).sum(0).to(w.dtype))
            if cfg["bias"]:
                out.append(g.sum(0).to(w.dtype))
        return out
    fn = anchor_compile(ref)
    return launch, (lambda: fn(codes, scales, w, rstd, mean, dy)), nbytes


def print_table(rows_out, bw):
    print()
    print(f"ideal = bytes read + written at {bw / 1e12:.2f} TB/s (copy, same run); "
          "ratio = torch.compile time / coat time; us = median of the repeats")
    hdr = (f"{'kernel':36s} {'shape':>12s} {'ideal us':>9s} {'coat us':>9s} {'GB/s':>7s} "
           f"{'coat %':>7s} {'torch us':>9s} {'torch %':>8s} {'ratio':>7s}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows_out:
        t = (f"{r['torch_ms'] * 1e3:9.1f} {r['torch_pct']:7.1f}% {r['speedup']:6.2f}x"
             if r["torch_ms"] else f"{'-':>9s} {'-':>8s} {'-':>7s}")
        print(f"{r['kernel']:36s} {r['shape']:>12s} {r['ideal_ms'] * 1e3:9.1f} "
              f"{r['coat_ms'] * 1e3:9.1f} {r['coat_gbs']:7.0f} {r['coat_pct']:6.1f}% {t}")


def main():
    ap = bench_parser(__doc__)
    ap.add_argument("--partials-per-sm", type=int, default=0,
                    help="backward: dweight workspace rows = this x SMs x rows per CTA "
                         "(0: one wave of the row kernel, as programs run it)")
    args = ap.parse_args()
    kernels = gpu_kernels(args, OPS, "norm")
    bw = copy_bandwidth()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"copy bandwidth (read + write): {bw / 1e12:.2f} TB/s on "
          f"{torch.cuda.get_device_name()} ({sms} SMs)")
    rows_out = []
    for s in args.shapes:
        m, n = (int(v) for v in s.split("x"))
        for label, k in pick(kernels, n):
            launch, tref, nbytes = setup(k, m, n, (args.partials_per_sm * sms
                                                   if args.partials_per_sm else None))
            t, ta = time_with_anchor(launch, lambda: tref, label, args.no_torch)
            ms, t_ms = t.median, (ta.median if ta else None)
            row = dict(kernel=label, op=k.spec.op, shape=f"{m}x{n}", bytes=nbytes,
                       ideal_ms=ideal_ms(nbytes, bw), coat_ms=ms,
                       coat_pct=pct_of_copy(nbytes, ms, bw), coat_gbs=nbytes / ms / 1e6,
                       torch_ms=t_ms, torch_pct=pct_of_copy(nbytes, t_ms, bw) if t_ms else None,
                       speedup=(t_ms / ms) if t_ms else None, graph=t.graph)
            rows_out.append(row)
            record("norms", label, row["shape"], t, pct_ideal=row["coat_pct"],
                   ideal=copy_ideal(bw), anchor="torch.compile", anchor_timing=ta,
                   anchor_pct=row["torch_pct"])
            print(f"{label:36s} {m:>6d}x{n:<6d} coat {ms * 1e3:9.1f} us "
                  f"{row['coat_gbs']:7.0f} GB/s ({row['coat_pct']:5.1f}%)"
                  + (f"  torch.compile {t_ms * 1e3:9.1f} us ({row['torch_pct']:5.1f}%)"
                     if t_ms else ""), flush=True)
    print_table(rows_out, bw)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(copy_bandwidth=bw, rows=rows_out), indent=1))


if __name__ == "__main__":
    main()
