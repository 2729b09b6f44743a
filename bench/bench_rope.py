#!/usr/bin/env python3
"""Rotary-embedding kernels (coat.rope, coat.rope_grad; coat-lower-pointwise)
on the GPU against what a decoder layer ran before them, timed in the same
run: eager coat.llama.apply_rope of q and k (the attention core's rotation,
on [1, heads, tokens, d] views of the q|k|v matrix), and torch.compile of
the kernel's own computation. The device-to-device copy bandwidth, measured
in the same run, is the ceiling.

  python bench/bench_rope.py --kernels DIR [DIR ...] [--tokens 4096 16384]

Each DIR is a compiled module (scripts/compile_examples.py output, e.g.
build/demo/rope). "ideal" is the bytes that must move at the copy bandwidth:
in place, q and k read and written once; out of place, the whole matrix;
plus the tables and any 1x16 maxima. "%" is ideal time / measured time;
speedups are anchor time / ours. Times are medians of 10 samples of 20
back-to-back CUDA-graph replays (bench/_timing.py).
"""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import copy_bandwidth, copy_ideal, measure, pct_of_copy, record  # noqa: E402
from bench_activations import SIZE, anchor_compile, bench_parser, gpu_kernels  # noqa: E402

from coat.llama import apply_rope  # noqa: E402

OPS = ("rope", "rope_grad")
TORCH = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def buffers(kernel, tokens):
    """Arguments of one launch and the bytes the kernel must move. The
    tables are of real angles, so that replays in place keep rotating the
    same magnitudes."""
    cfg = kernel.config
    d, cols, rotated = cfg["head_dim"], cfg["cols"], cfg["rotated_heads"]
    angles = torch.rand(tokens, d // 2, device="cuda").repeat(1, 2) * 1e3
    table = {"cos": angles.cos(), "sin": angles.sin()}
    args, nbytes = {}, 0
    for a in kernel.spec.memrefs:
        n = tokens * d if a.name in table else a.extent_for(tokens * cols)
        t = table[a.name].reshape(-1) if a.name in table else torch.randn(n, device="cuda")
        args[a.name] = t.to(TORCH[a.dtype])
        moved = n
        if cfg["in_place"] and a.name == cfg["operands"][0]:
            moved = 2 * tokens * rotated * d  # q and k, read and written
        nbytes += moved * SIZE[a.dtype]
    return args, nbytes


def eager_anchor(kernel, args, tokens):
    """The attention core's eager rotation of q and k (forward), or the
    rope_grad formula in eager torch ops (backward)."""
    cfg = kernel.config
    d, cols, rotated = cfg["head_dim"], cfg["cols"], cfg["rotated_heads"]
    x = args[cfg["operands"][0]].view(1, tokens, cols)
    cos, sin = args["cos"].view(tokens, d), args["sin"].view(tokens, d)
    if kernel.spec.op == "rope":
        heads = [rotated - rotated // 2, rotated // 2]  # any split into q and k heads
        q, k, _ = x.split([heads[0] * d, heads[1] * d, cols - rotated * d], dim=-1)
        q = q.view(1, tokens, heads[0], d).transpose(1, 2)
        k = k.view(1, tokens, heads[1], d).transpose(1, 2)
        return lambda: (apply_rope(q, cos, sin), apply_rope(k, cos, sin))
    return lambda: rope_grad_math(x.view(tokens, cols), cos, sin, rotated,
                                  cfg.get("group_size", 0))


def rope_grad_math(dy, cos, sin, rotated, group):
    """dx = dy cos - rotate_half(dy sin) on the rotated heads, the rest
    copied, and the 1x16 maxima of the bf16 result."""
    t, cols = dy.shape
    d = cos.shape[1]
    h = dy[:, : rotated * d].float().view(t, rotated, d)
    g = h * sin[:, None, :]
    rot = torch.cat([g[..., d // 2:], -g[..., : d // 2]], dim=-1)
    dx = torch.cat([(h * cos[:, None, :] + rot).view(t, rotated * d).to(dy.dtype),
                    dy[:, rotated * d:]], dim=1)
    return (dx, dx.view(-1, group).abs().amax(-1).float()) if group else (dx,)


def compiled_anchor(kernel, args, tokens):
    """The kernel's computation (same inputs and outputs) under torch.compile."""
    cfg = kernel.config
    d, cols, rotated = cfg["head_dim"], cfg["cols"], cfg["rotated_heads"]
    x = args[cfg["operands"][0]].view(tokens, cols)
    cos, sin = args["cos"].view(tokens, d), args["sin"].view(tokens, d)
    group = cfg.get("group_size", 0)

    def forward(x, cos, sin):
        h = x[:, : rotated * d].float().view(tokens, rotated, d)
        rot = torch.cat([-h[..., d // 2:], h[..., : d // 2]], dim=-1)
        y = (h * cos[:, None, :] + rot * sin[:, None, :]).view(tokens, rotated * d).to(x.dtype)
        y = torch.cat([y, x[:, rotated * d:]], dim=1)
        return (y, y.view(-1, group).abs().amax(-1).float()) if group else (y,)

    if kernel.spec.op == "rope":
        fn = anchor_compile(forward)
    else:
        fn = anchor_compile(lambda dy, c, s: rope_grad_math(dy, c, s, rotated, group))
    return lambda: fn(x, cos, sin)


def timed(make, label, what):
    try:
        return measure(make(), graph=True)
    except Exception as e:  # noqa: BLE001 - report and go on
        print(f"  {what} anchor failed for {label}: {e}")
        return None


def print_table(rows, bw):
    print()
    print(f"ideal = bytes that must move at {bw / 1e12:.2f} TB/s (copy, same run); "
          "speedup = anchor time / coat time; us = median of the repeats")
    hdr = (f"{'kernel':36s} {'tokens':>7s} {'MB':>7s} {'coat us':>9s} {'coat %':>7s} "
           f"{'eager us':>9s} {'speedup':>8s} {'compile us':>11s} {'speedup':>8s}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        def col(us, speedup, width):
            return (f"{us:{width}.1f} {speedup:7.2f}x" if us else f"{'-':>{width}s} {'-':>8s}")
        print(f"{r['kernel']:36s} {r['tokens']:7d} {r['bytes'] / 1e6:7.1f} {r['coat_us']:9.1f} "
              f"{r['coat_pct']:6.1f}% {col(r['eager_us'], r['eager_speedup'], 9)} "
              f"{col(r['compile_us'], r['compile_speedup'], 11)}")


def main():
    ap = bench_parser(__doc__)
    ap.add_argument("--tokens", nargs="+", type=int, default=[4096, 16384])
    args = ap.parse_args()
    kernels = gpu_kernels(args, OPS, "rope")
    bw = copy_bandwidth()
    print(f"copy bandwidth (read + write): {bw / 1e12:.2f} TB/s on "
          f"{torch.cuda.get_device_name()}")
    rows = []
    for label, k in kernels:
        for tokens in args.tokens:
            bufs, nbytes = buffers(k, tokens)
            t = measure(lambda: k.launch(rows=tokens, cols=k.config["cols"], **bufs),
                        graph=True)
            te = timed(lambda: eager_anchor(k, bufs, tokens), label, "eager")
            tc = None if args.no_torch else timed(lambda: compiled_anchor(k, bufs, tokens),
                                                  label, "torch.compile")
            ms = t.median
            row = dict(kernel=label, op=k.spec.op, tokens=tokens, bytes=nbytes,
                       coat_us=ms * 1e3, coat_pct=pct_of_copy(nbytes, ms, bw),
                       eager_us=te.median * 1e3 if te else None,
                       eager_speedup=te.median / ms if te else None,
                       compile_us=tc.median * 1e3 if tc else None,
                       compile_speedup=tc.median / ms if tc else None)
            rows.append(row)
            record("rope", label, f"{tokens}x{k.config['cols']}", t, pct_ideal=row["coat_pct"],
                   ideal=copy_ideal(bw), anchor="eager apply_rope" if k.spec.op == "rope"
                   else "eager", anchor_timing=te)
            print(f"{label:36s} {tokens:>7d} coat {row['coat_us']:8.1f} us "
                  f"({row['coat_pct']:5.1f}%)", flush=True)
    print_table(rows, bw)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(copy_bandwidth=bw, rows=rows), indent=2))


if __name__ == "__main__":
    main()
