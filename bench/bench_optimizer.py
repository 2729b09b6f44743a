#!/usr/bin/env python3
"""FP8 AdamW step time on the GPU against torch.optim.AdamW(fused=True),
timed in the same run, with the copy bandwidth measured in the same run as the
ceiling.

  python bench/bench_optimizer.py --kernels DIR [DIR ...] [--params 537e6]

Each DIR is a compiled module (coat.compile / scripts/compile_examples.py);
every adamw_step kernel (f32 or bf16 parameters) in it is timed on one flat tensor of --params
elements. A Llama-1B-shaped parameter list is then stepped through
coat.optim.FP8AdamW (one launch per step) and through torch's fused AdamW,
and FP8AdamW's step after global gradient-norm clipping, its own
clip_grad_norm_ (the factor applied in the step's kernel) against
torch.nn.utils.clip_grad_norm_ (a pass that rewrites the gradients).
Finally 100 steps of a synthetic problem compare FP8AdamW with fp32 AdamW.
Prints a table last; --json writes all figures. Times are medians of 20
CUDA-event-timed steps after 3 warm-up steps (bench/_timing.py).
"""

import argparse
import json
import math
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import coat  # noqa: E402
from _timing import copy_bandwidth, copy_ideal, measure, pct_of_copy, record  # noqa: E402
from coat.optim import FP8AdamW  # noqa: E402

HP = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)


# One CUDA-event pair per step, as torch's optimizer step is timed in training.
STEP = dict(warmup=3, repeats=20, inner=1)
ANCHOR = "torch AdamW fused"


HP_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def dtype_bytes(dtype):
    return {"f32": 4, "bf16": 2, "f16": 2, "e4m3": 1, "e5m2": 1, "i64": 8}[dtype]


def kernel_bytes_per_param(spec):
    """Bytes that must move per parameter: every buffer is read once, and all
    but the gradient are written once (docs/manifest.md args)."""
    G = spec.group_size
    total = 0.0
    for a in spec.memrefs:
        if a.extent not in ("n", "groups"):
            continue  # a fixed extent (the gradient scale): nothing per parameter
        per = dtype_bytes(a.dtype) * (1.0 if a.extent == "n" else 1.0 / G)
        total += per * (1 if a.name == "grad" else 2)
    return total


def kernel_buffers(spec, n):
    G = spec.group_size
    groups = -(-n // G)
    bufs = {}
    torch.manual_seed(0)
    for a in spec.memrefs:
        ext = {"n": n, "groups": groups}.get(a.extent)
        if a.name == "grad_scale":
            bufs[a.name] = torch.full((), 0.5, device="cuda")  # a clipping factor
        elif a.name == "param":
            bufs[a.name] = torch.randn(ext, device="cuda").to(HP_DTYPES[a.dtype])
        elif a.name == "grad":
            bufs[a.name] = (torch.randn(ext, device="cuda") * 1e-3).to(HP_DTYPES[a.dtype])
        elif a.name.endswith("_codes"):
            bufs[a.name] = torch.zeros(ext, dtype=torch.uint8, device="cuda").view(
                torch.float8_e4m3fn if a.dtype == "e4m3" else torch.float8_e5m2)
        else:
            init = {"scale": 0.0, "k": 1.0, "c": 1.0}[a.name.split("_")[-1]]
            bufs[a.name] = torch.full((ext,), init, device="cuda")
    return bufs


def bench_kernels(dirs, n, copy_bw, anchor, rows, out):
    for d in dirs:
        mod = coat.load(d)
        for k in mod.find(op="adamw_step"):
            bufs = kernel_buffers(k.spec, n)
            # Stochastic rounding kernels take the seed of their random bits.
            seed = {"seed": 1234} if any(a.name == "seed" for a in k.spec.args) else {}
            step = [0]

            def run():
                step[0] += 1
                k.launch(step=float(step[0]), **HP, **bufs, **seed)

            t = measure(run, **STEP)
            ms = t.median
            bpp = kernel_bytes_per_param(k.spec)
            bw = bpp * n / (ms * 1e-3)
            pct = pct_of_copy(bpp * n, ms, copy_bw)
            label = f"{k.name} [{Path(d).name}]"
            rows.append((label, ms, bpp, bw / 1e12, pct, anchor.median / ms))
            out["kernels"].append(dict(name=k.name, dir=str(d), ms=ms, bytes_per_param=bpp,
                                       tbps=bw / 1e12, pct_copy=pct, config=k.config))
            record("optimizer", label, f"{n / 1e6:.0f}M params", t, pct_ideal=pct,
                   ideal=copy_ideal(copy_bw), anchor=ANCHOR, anchor_timing=anchor,
                   anchor_pct=pct_of_copy(28 * n, anchor.median, copy_bw))
            del bufs
            torch.cuda.empty_cache()


def twin_overheads(out, flags, key):
    """Each kernel with one of ``flags`` set against its twin (the same config
    with those flags off, from the same kernel directory) of the same run;
    stored under ``key``."""
    found = []
    for e in out["kernels"]:
        if not any(e["config"].get(f) for f in flags):
            continue
        want = dict(e["config"], **{f: False for f in flags})
        twin = next((t for t in out["kernels"]
                     if t["config"] == want and t["dir"] == e["dir"]), None)
        if twin is not None:
            found.append(dict(name=e["name"], ms=e["ms"], twin=twin["name"],
                              twin_ms=twin["ms"], extra=e["ms"] / twin["ms"] - 1))
    out[key] = found
    return found


def stochastic_overheads(out):
    """Each stochastic-rounding kernel's time against its round-to-nearest
    twin."""
    return twin_overheads(out, ("stochastic_param", "stochastic_moments"),
                          "stochastic_overhead")


def grad_scale_overheads(out):
    """Each kernel that takes a gradient scale against its twin without."""
    return twin_overheads(out, ("grad_scale",), "grad_scale_overhead")


def bench_torch_fused(n, copy_bw, rows, out):
    p = torch.nn.Parameter(torch.randn(n, device="cuda"))
    p.grad = torch.randn(n, device="cuda") * 1e-3
    opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, fused=True)
    t = measure(opt.step, **STEP)
    ms = t.median
    bw = 28 * n / (ms * 1e-3)
    rows.append(("torch.optim.AdamW(fused=True), fp32", ms, 28.0, bw / 1e12,
                 pct_of_copy(28 * n, ms, copy_bw), 1.0))
    out["torch_fused_ms"] = ms
    del opt, p
    torch.cuda.empty_cache()
    return t


def llama_1b_shapes():
    d, ff, layers, vocab = 2048, 5632, 22, 32000  # TinyLlama-1.1B
    shapes = [(vocab, d)]
    for _ in range(layers):
        shapes += [(d, d), (256, d), (256, d), (d, d), (ff, d), (ff, d), (d, ff), (d,), (d,)]
    shapes += [(d,), (vocab, d)]
    return shapes


def bench_llama(dirs, copy_bw, rows, out):
    shapes = llama_1b_shapes()
    n = sum(math.prod(s) for s in shapes)
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, device="cuda") * 0.02) for s in shapes]
    # Persistent gradient buffers: one bucket (one launch), .grad views from the start.
    opt = FP8AdamW(params, lr=1e-3, weight_decay=0.01, kernels=[coat.load(d) for d in dirs],
                   persistent_grads=True)
    for p in params:
        p.grad.copy_(torch.randn_like(p) * 1e-3)
    t = measure(opt.step, **STEP)
    del opt, params
    torch.cuda.empty_cache()
    params = [torch.nn.Parameter(torch.randn(s, device="cuda") * 0.02) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    ref = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, fused=True)
    t_ref = measure(ref.step, **STEP)
    ms, ms_ref = t.median, t_ref.median
    rows.append((f"FP8AdamW, Llama-1B shapes ({len(shapes)} tensors, {n / 1e9:.2f}B)", ms,
                 float("nan"), float("nan"), float("nan"), ms_ref / ms))
    rows.append(("torch fused AdamW, Llama-1B shapes", ms_ref, 28.0, 28 * n / ms_ref / 1e9,
                 pct_of_copy(28 * n, ms_ref, copy_bw), 1.0))
    out["llama_fp8_ms"] = ms
    out["llama_torch_ms"] = ms_ref
    out["llama_params"] = n
    record("optimizer", "FP8AdamW (one launch)",
           f"Llama-1B shapes, {len(shapes)} tensors, {n / 1e9:.2f}B", t, anchor=ANCHOR,
           anchor_timing=t_ref, anchor_pct=pct_of_copy(28 * n, ms_ref, copy_bw))
    del ref, params
    torch.cuda.empty_cache()
    bench_clipping(dirs, shapes, rows, out)
    torch.cuda.empty_cache()  # what the clipping's optimizer held


def bench_clipping(dirs, shapes, rows, out, max_norm=1e-3):
    """A step after global gradient-norm clipping (max_norm below the
    gradients' norm, so it clips), Llama-1B shapes, persistent gradients:
    FP8AdamW.clip_grad_norm_ (a norm per bucket; the factor goes to the
    step's kernel) against torch.nn.utils.clip_grad_norm_ (foreach norms,
    then a multiply that rewrites every gradient) before the same step."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, device="cuda") * 0.02) for s in shapes]
    opt = FP8AdamW(params, lr=1e-3, weight_decay=0.01, kernels=[coat.load(d) for d in dirs],
                   persistent_grads=True)
    for p in params:
        p.grad.copy_(torch.randn_like(p) * 1e-3)

    def fused():
        opt.clip_grad_norm_(max_norm)
        opt.step()

    def separate():
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        opt.step()

    t_fused = measure(fused, **STEP)
    t_torch = measure(separate, **STEP)
    ms, ms_ref = t_fused.median, t_torch.median
    rows.append(("FP8AdamW clip_grad_norm_ + step, Llama-1B shapes", ms,
                 float("nan"), float("nan"), float("nan"), ms_ref / ms))
    rows.append(("torch clip_grad_norm_ + FP8AdamW step, Llama-1B", ms_ref,
                 float("nan"), float("nan"), float("nan"), 1.0))
    out["clip_fused_ms"] = ms
    out["clip_torch_ms"] = ms_ref
    record("optimizer", "FP8AdamW clip_grad_norm_ + step", "Llama-1B shapes", t_fused,
           anchor="torch clip_grad_norm_ + FP8AdamW step", anchor_timing=t_torch)


def fidelity(dirs, out, steps=100, n=1 << 22):
    """Parameters after `steps` of FP8AdamW vs fp32 AdamW on the same gradient
    trajectory: ||p_fp8 - p_fp32|| / ||p_fp32 - p_0||."""
    torch.manual_seed(0)
    p0 = torch.randn(n, device="cuda") * 0.02
    a = torch.nn.Parameter(p0.clone())
    b = torch.nn.Parameter(p0.clone())
    opt_a = torch.optim.AdamW([a], lr=1e-3, weight_decay=0.01)
    opt_b = FP8AdamW([b], lr=1e-3, weight_decay=0.01, kernels=[coat.load(d) for d in dirs],
                     persistent_grads=True)
    scale = torch.exp(torch.randn(n, device="cuda") * 2)  # per-coordinate gradient scale
    for t in range(steps):
        g = (torch.randn(n, device="cuda") + 0.1) * scale * 1e-3
        a.grad = g.clone()
        b.grad.copy_(g)
        opt_a.step()
        opt_b.step()
    rel = ((b - a).norm() / (a - p0).norm()).item()
    out["fidelity_rel_update_error"] = rel
    return rel


def print_table(out, rows, copy_bw, rel):
    print(f"\nGPU: {out['gpu']}   copy bandwidth (read+write): {copy_bw / 1e12:.2f} TB/s")
    print(f"{out['params'] / 1e6:.0f}M fp32 parameters unless noted; ratio = torch fused time / "
          "ours; ms = median of the steps\n")
    print(f"{'what':58s} {'ms':>8s} {'B/param':>8s} {'TB/s':>6s} {'%copy':>6s} {'ratio':>6s}")
    for label, ms, bpp, tbps, pct, ratio in rows:
        print(f"{label[:58]:58s} {ms:8.3f} {bpp:8.3f} {tbps:6.2f} {pct:6.1f} {ratio:6.2f}")
    for o in out.get("stochastic_overhead", []):
        print(f"stochastic rounding: {o['name']} {o['ms']:.3f} ms against {o['twin']} "
              f"{o['twin_ms']:.3f} ms: {100 * o['extra']:+.1f}%")
    for o in out.get("grad_scale_overhead", []):
        print(f"gradient scale: {o['name']} {o['ms']:.3f} ms against {o['twin']} "
              f"{o['twin_ms']:.3f} ms: {100 * o['extra']:+.1f}%")
    print(f"\nFP8AdamW vs fp32 AdamW after 100 steps: relative parameter error "
          f"{rel:.4f} of the update norm")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kernels", nargs="+", required=True)
    ap.add_argument("--params", type=float, default=537e6)
    ap.add_argument("--json")
    args = ap.parse_args()
    n = int(args.params)
    out = {"gpu": torch.cuda.get_device_name(), "params": n, "kernels": []}
    copy_bw = copy_bandwidth()
    out["copy_tbps"] = copy_bw / 1e12
    rows = []
    anchor = bench_torch_fused(n, copy_bw, rows, out)
    bench_kernels(args.kernels, n, copy_bw, anchor, rows, out)
    stochastic_overheads(out)
    grad_scale_overheads(out)
    bench_llama(args.kernels, copy_bw, rows, out)
    rel = fidelity(args.kernels, out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    print_table(out, rows, copy_bw, rel)


if __name__ == "__main__":
    main()
