#!/usr/bin/env python3
"""Activation quantization kernels (coat-lower-activations) on the GPU against
torch.compile equivalents timed in the same run, with the device-to-device
copy bandwidth measured in the same run as the ceiling.

  python bench/bench_activations.py --kernels DIR [DIR ...] [--shapes 8192x8192 ...]

Each DIR is a compiled module (scripts/compile_examples.py output, e.g.
build/demo/quantize); every quantize / dequantize / absmax /
quantize_transpose / quantize_transposed_only / requantize kernel in it
(per-group, per-tensor and 128x128 per-block)
is timed on each shape (with several DIRs, e.g. variants compiled with other
coat-lower-activations options, rows are labelled DIR/kernel). "ideal" is the bytes
that must move (every buffer read or written once: inputs, codes, scales, the
transposed copy) at the copy bandwidth; "%" is ideal time / measured time.
Prints one line per measurement as it goes and a table last; --json writes
all figures. Times are medians of 10 samples of 20 back-to-back CUDA-graph
replays (bench/_timing.py).
"""

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import coat  # noqa: E402
from _timing import copy_bandwidth, copy_ideal, ideal_ms, measure, pct_of_copy, record  # noqa: E402

OPS = ("quantize", "quantize_transpose", "quantize_transposed_only", "dequantize", "absmax",
       "requantize")
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
# getattr: a torch without FP8 dtypes still imports the script (--help, tests).
FP8 = {"e4m3": getattr(torch, "float8_e4m3fn", None), "e5m2": getattr(torch, "float8_e5m2", None)}
FP8MAX = {"e4m3": 448.0, "e5m2": 57344.0}
SIZE = {"f32": 4, "bf16": 2, "f16": 2, "e4m3": 1, "e5m2": 1}


def buffers(kernel, rows, cols):
    """Arguments of one launch, and the bytes they hold (read + written)."""
    spec, cfg = kernel.spec, kernel.config
    n = rows * cols
    args, nbytes = {}, 0
    for a in spec.memrefs:
        extent = a.extent_for(n, {"rows": rows, "cols": cols})
        if a.dtype in DTYPES:
            t = torch.randn(extent, device="cuda").to(DTYPES[a.dtype])
            if a.name in ("scale", "input_scale"):
                t = torch.full((extent,), 0.01, device="cuda").to(DTYPES[a.dtype])
        else:  # FP8 codes as bytes; input codes are random finite values
            t = torch.randint(0, 0x70, (extent,), dtype=torch.uint8, device="cuda")
        args[a.name] = t
        nbytes += extent * SIZE.get(a.dtype, 4)
    if "scale" in args and cfg.get("scaling") == "per_tensor" and spec.op != "dequantize":
        args["scale"].fill_(0.01)
    return args, nbytes



def bench_parser(doc):
    """The options every kernel benchmark takes."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", nargs="+", required=True)
    ap.add_argument("--shapes", nargs="+", default=["8192x8192", "16384x4096", "16384x11008"])
    ap.add_argument("--only", default="", help="substring filter on kernel names")
    ap.add_argument("--no-torch", action="store_true", help="skip the torch.compile anchors")
    ap.add_argument("--json")
    return ap


def gpu_kernels(args, ops, what):
    """(label, kernel) for the kernels of `ops` with a GPU binary in the
    compiled folders of --kernels (filtered by --only); labels are DIR/kernel
    when several folders (variants of one module) are compared. Exits
    without a GPU or without kernels."""
    if not torch.cuda.is_available():
        sys.exit(f"benchmarking {what} kernels needs a CUDA device")
    out = []
    for d in args.kernels:
        mod = coat.load(d)
        prefix = Path(d).name + "/" if len(args.kernels) > 1 else ""
        out += [(prefix + k.name, k) for k in mod.kernels.values()
                if k.spec.op in ops and (k.spec.cubin or k.spec.ptx) and args.only in k.name]
    if not out:
        sys.exit(f"no {what} kernels with a GPU binary in " + " ".join(args.kernels))
    return out


def anchor_compile(fn):
    """torch.compile for an in-run anchor. Each anchor is a fresh closure of
    one code object, which dynamo would recompile past its default limit of
    8 and then silently run eagerly; lift the limit so every anchor is the
    compiled code it claims to be."""
    import torch._dynamo

    cfg = torch._dynamo.config
    for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(cfg, knob):
            setattr(cfg, knob, max(getattr(cfg, knob), 4096))
    return torch.compile(fn, dynamic=False)

def torch_equivalent(kernel, args, rows, cols):
    """The same computation as a torch.compile'd function of the same buffers."""
    spec, cfg = kernel.spec, kernel.config
    G = spec.group_size
    op = spec.op
    if op in ("quantize", "quantize_transpose", "quantize_transposed_only", "absmax"):
        x = args["input"].view(rows, cols)
    if op == "absmax":
        def f(x):
            return x.view(-1, G).abs().amax(-1).float()
        fn = anchor_compile(f)
        return lambda: fn(x)
    fmt = cfg["format"]
    fp8, fmax = FP8[fmt], FP8MAX[fmt]
    sdt = DTYPES[cfg["scale"]]
    if cfg.get("scaling") == "per_block":
        B, eps = cfg["block"], cfg["eps"]
        if rows % B or cols % B:
            raise ValueError(f"the torch anchor needs {B}-multiples")
        transpose = op == "quantize_transpose"

        def f(x):
            xb = x.float().view(rows // B, B, cols // B, B)
            s = ((xb.abs().amax(dim=(1, 3)) + eps) / fmax).to(sdt)
            q = (xb / s.float()[:, None, :, None]).clamp(-fmax, fmax).to(fp8)
            q = q.view(rows, cols)
            return (q, s, q.t().contiguous(), s.t().contiguous()) if transpose else (q, s)
        fn = torch.compile(f)
        return lambda: fn(x)
    if op == "quantize" and cfg["scaling"] == "per_group":
        def f(x):
            xf = x.float().view(-1, G)
            s = ((xf.abs().amax(-1, keepdim=True) + 1e-10) / fmax).to(sdt)
            q = (xf / s.float()).clamp(-fmax, fmax).to(fp8)
            return q.view(rows, cols), s.view(rows, cols // G)
        fn = anchor_compile(f)
        return lambda: fn(x)
    if op in ("quantize", "quantize_transpose", "quantize_transposed_only"):
        s = args["scale"]

        def f(x, s):
            q = (x.float() / s.float()).clamp(-fmax, fmax).to(fp8)
            if op == "quantize_transposed_only":
                return q.t().contiguous()
            return (q, q.t().contiguous()) if op == "quantize_transpose" else q
        fn = anchor_compile(f)
        return lambda: fn(x, s)
    if op == "requantize":
        codes = args["input"].view(FP8[cfg["input"]]).view(rows, cols)
        gs, s = args["input_scale"], args["scale"]

        def f(q, gs, s):
            y = q.float().view(-1, G) * gs.float().view(-1, 1)
            return (y / s.float()).clamp(-fmax, fmax).to(fp8).view(rows, cols)
        fn = anchor_compile(f)
        return lambda: fn(codes, gs, s)
    # dequantize
    codes = args["codes"].view(fp8).view(rows, cols)
    s = args["scale"]
    out_dt = DTYPES[cfg["output"]]
    if cfg["scaling"] == "per_group":
        def f(q, s):
            y = q.float().view(-1, G) * s.float().view(-1, 1)
            return y.to(out_dt).view(rows, cols)
    else:
        def f(q, s):
            return (q.float() * s.float()).to(out_dt)
    fn = anchor_compile(f)
    return lambda: fn(codes, s)


def time_with_anchor(launch, anchor, label, no_torch=False):
    """Timings (graph-replayed) of a kernel launch and of its torch.compile
    anchor; `anchor` makes the anchor's callable. The anchor's Timing is None
    when skipped or when it fails (reported)."""
    t = measure(launch, graph=True)
    ta = None
    if not no_torch:
        try:
            ta = measure(anchor(), graph=True)
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"  torch.compile anchor failed for {label}: {e}")
    return t, ta


def print_table(rows, bw):
    print()
    print(f"ideal = bytes read + written at {bw / 1e12:.2f} TB/s (copy, same run); "
          "speedup = torch.compile ms / coat ms; ms = median of the repeats")
    hdr = (f"{'kernel':40s} {'shape':>12s} {'ideal ms':>9s} {'coat ms':>9s} {'coat %':>7s} "
           f"{'torch ms':>9s} {'torch %':>8s} {'speedup':>8s}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        t = (f"{r['torch_ms']:9.4f} {r['torch_pct']:7.1f}% {r['speedup']:7.2f}x"
             if r["torch_ms"] else f"{'-':>9s} {'-':>8s} {'-':>8s}")
        print(f"{r['kernel']:40s} {r['shape']:>12s} {r['ideal_ms']:9.4f} {r['coat_ms']:9.4f} "
              f"{r['coat_pct']:6.1f}% {t}" + ("" if r["graph"] else "  (no graph)"))


def main():
    args = bench_parser(__doc__).parse_args()
    kernels = gpu_kernels(args, OPS, "activation")
    bw = copy_bandwidth()
    print(f"copy bandwidth (read + write): {bw / 1e12:.2f} TB/s on {torch.cuda.get_device_name()}")
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
                       ideal_ms=ideal_ms(nbytes, bw), coat_ms=ms,
                       coat_pct=pct_of_copy(nbytes, ms, bw), torch_ms=t_ms,
                       torch_pct=pct_of_copy(nbytes, t_ms, bw) if t_ms else None,
                       speedup=(t_ms / ms) if t_ms else None, graph=t.graph)
            rows.append(row)
            record("activations", label, row["shape"], t, pct_ideal=row["coat_pct"],
                   ideal=copy_ideal(bw), anchor="torch.compile", anchor_timing=ta,
                   anchor_pct=row["torch_pct"])
            print(f"{label:40s} {m:>6d}x{n:<6d} coat {ms:8.4f} ms ({row['coat_pct']:5.1f}%)"
                  + (f"  torch.compile {t_ms:8.4f} ms ({row['torch_pct']:5.1f}%)" if t_ms else ""),
                  flush=True)

    print_table(rows, bw)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(copy_bandwidth=bw, rows=rows), indent=2))


if __name__ == "__main__":
    main()
