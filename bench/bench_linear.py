"""FP8 GEMM (per-tensor E4M3 x E4M3 -> bf16): coat-lower-linear's kernels vs
torch._scaled_mm (cuBLASLt, the anchor) measured in the same run, for every
compiled lowering configuration, plus the 1x16-quantized-output kernel.
Prints a table last: TFLOP/s of each and the ratio ours / cuBLASLt, and per
shape the best configuration.

Block-scaled kernels (scaling "block": 1x128 x 128x128 f32 scales, COAT.md
§4.4) get their own table at 4096^3, 8192^3 and 8192x11008x4096: TFLOP/s,
% of the 1979 TFLOP/s dense FP8 peak, and, where this torch has it, the
DeepSeek-style blockwise torch._scaled_mm (cuBLASLt, CUDA >= 12.9, sm_90) as
the anchor; otherwise the anchor column reads n/a. The error column is
against the dequantized fp32 product. `--only block` / `--only per_tensor`
runs one table.

Kernels: $COAT_LINEAR_KERNELS (':'-separated folders with a manifest.json,
e.g. one per set of coat-lower-linear options), or compiled from
examples/linear/fp8_linear.mlir with coat-opt (default options). A
configuration found in several folders is timed once, unless --per-folder
(kernels of the same options from two compilers, before and after)."""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)

import torch  # noqa: E402
from _timing import (FP8_PEAK_TFLOPS, measure, pct_of_peak, peak_ideal, record,  # noqa: E402
                     tflops)

import coat  # noqa: E402
from coat.linear import reads_more_than_a_gemm  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 11008, 4096),
          (8192, 4096, 11008), (16384, 14336, 4096)]  # M, N, K
#: Weight gradients of the training configs (M, N = the weight's out and in
#: features, K = the tokens of a step): few output tiles, a long K. The
#: 100m model's q/k/v, o, gate/up and down (16 x 1024 tokens), then
#: TinyLlama's (8 x 2048) and the 7B shape's q/k/v and down (4 x 2048).
WGRAD_SHAPES = [(3072, 1024, 16384), (1024, 1024, 16384), (2816, 1024, 16384),
                (1024, 2816, 16384), (2560, 2048, 16384), (2048, 2048, 16384),
                (5632, 2048, 16384), (2048, 5632, 16384), (12288, 4096, 8192),
                (4096, 11008, 8192)]
BLOCK_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 11008, 4096)]
BLOCK = 128


def kernel_dirs():
    env = os.environ.get("COAT_LINEAR_KERNELS")
    if env:
        return [d for d in env.split(":") if d]
    import tempfile

    from coat.toolchain import Toolchain

    out = tempfile.mkdtemp(prefix="coat-linear-")
    Toolchain().compile_file(os.path.join(os.path.dirname(HERE), "examples", "linear",
                                          "fp8_linear.mlir"), out, cpu=False)
    return [out]


def scale_args(kern, sa, sb):
    """The per-tensor scales in the dtypes the kernel reads (f32 for
    torch._scaled_mm-style kernels, bf16 for those of model programs)."""
    dtype = {a.name: a.dtype for a in kern.spec.args}
    conv = lambda s, name: s.bfloat16() if dtype[name] == "bf16" else s  # noqa: E731
    return dict(a_scale=conv(sa, "a_scale"), b_scale=conv(sb, "b_scale"))


# Five samples of 50 back-to-back launches after 10 warm-up launches.
GEMM = dict(warmup=10, repeats=5, inner=50)
TIMING_NOTE = "median of 5 x 50 launches after 10 warm-up"


def time_ms(fn):
    """Median ms per launch, and the Timing it comes from."""
    t = measure(fn, **GEMM)
    return t.median, t


def config_tag(spec):
    c = spec.config
    sched = "ws" if c.get("warp_specialized") else "plain"
    epilogue = c.get("epilogue", "direct")
    store = "" if epilogue == "direct" else f" {epilogue}"
    return f"{c['tile'][0]}x{c['tile'][1]} s{c['stages']} wg{c['warpgroups']} {sched}{store}"


def torch_blockwise(x8, w8, sa, sb):
    """torch._scaled_mm with DeepSeek-style scales, in the layouts cuBLASLt
    wants: s_A [M, K/128] outer-dim-major, s_B as [K/128 padded to 4, N/128]
    with stride (1, padded). Returns a callable, or the reason it is missing."""
    kb = sa.shape[1]
    l4 = -(-kb // 4) * 4
    sa_cm = sa.t().contiguous().t()
    sb_pad = torch.zeros(sb.shape[0], l4, device=sb.device)
    sb_pad[:, :kb] = sb
    sb_arg = sb_pad.t()

    def run():
        return torch._scaled_mm(x8, w8.t(), scale_a=sa_cm, scale_b=sb_arg,
                                out_dtype=torch.bfloat16)
    try:
        run()
        torch.cuda.synchronize()
    except (RuntimeError, TypeError, ValueError) as e:
        return None, str(e).splitlines()[0][:80]
    return run, None


def block_operands(m, n, k):
    """Random E4M3 operands of an M x N x K block-scaled GEMM, their 1x128
    and 128x128 f32 scales and a bf16 result: (x8, w8, sa, sb, out)."""
    kb, nb = -(-k // BLOCK), -(-n // BLOCK)
    x8 = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    w8 = (torch.randn(n, k, device="cuda") * 0.1).to(torch.float8_e4m3fn)
    sa = torch.rand(m, kb, device="cuda") * 0.02 + 0.01
    sb = torch.rand(nb, kb, device="cuda") * 0.02 + 0.01
    return x8, w8, sa, sb, torch.empty(m, n, dtype=torch.bfloat16, device="cuda")


def launch_block(kern, x8, w8, sa, sb, out):
    m, k = x8.shape
    kern.launch(n=w8.shape[0], a=x8, b=w8, out=out, a_scale=sa, b_scale=sb, m=m, k=k,
                n_blocks=sb.shape[0], k_blocks=sb.shape[1])


def bench_block(kernels):
    rows = []
    for m, n, k in BLOCK_SHAPES:
        torch.manual_seed(0)
        x8, w8, sa, sb, out = block_operands(m, n, k)
        flop = 2.0 * m * n * k
        xd = x8.float() * sa.repeat_interleave(BLOCK, dim=1)[:, :k]
        wd = w8.float() * sb.repeat_interleave(BLOCK, dim=0)[:n].repeat_interleave(
            BLOCK, dim=1)[:, :k]
        want = xd @ wd.t()
        del xd, wd
        anchor, why = torch_blockwise(x8, w8, sa, sb)
        t_ref, ref_timing = time_ms(anchor) if anchor else (None, None)
        ref_err = (((anchor().float() - want).abs().max() / want.abs().max()).item()
                   if anchor else None)
        for tag, kern in kernels:
            def ours():
                launch_block(kern, x8, w8, sa, sb, out)
            t, timing = time_ms(ours)
            err = ((out.float() - want).abs().max() / want.abs().max()).item()
            rows.append((f"{m}x{n}x{k}", tag, tflops(flop, t),
                         tflops(flop, t_ref) if t_ref else None,
                         t_ref / t if t_ref else None, f"{err:.2e}",
                         f"{ref_err:.2e}" if ref_err is not None else "n/a"))
            record("linear", f"block {tag}", f"{m}x{n}x{k}", timing,
                   pct_ideal=pct_of_peak(flop, t, FP8_PEAK_TFLOPS),
                   ideal=peak_ideal(FP8_PEAK_TFLOPS),
                   anchor="torch blockwise _scaled_mm" if anchor else None,
                   anchor_timing=ref_timing, max_rel_err=err)
        print(f"# {m}x{n}x{k}: blockwise torch._scaled_mm "
              + (f"{tflops(flop, t_ref):.1f} TFLOP/s" if t_ref else f"unavailable ({why})"),
              flush=True)
        del want
    print_block_table(rows, torch.cuda.get_device_name())


def print_block_table(rows, device):
    print(f"\n# FP8 GEMM e4m3 x e4m3, 1x128 x 128x128 f32 block scales -> bf16, "
          f"{device}, torch {torch.__version__}, "
          f"{time.strftime('%Y-%m-%d')}; {TIMING_NOTE}; "
          f"peak {FP8_PEAK_TFLOPS:.0f} TFLOP/s")
    header = (f"| {'M x N x K':18} | {'ours':28} | {'ours TFLOP/s':>12} | {'% peak':>6} "
              f"| {'torch blockwise TFLOP/s':>23} | {'ratio':>6} | {'ours err':>8} "
              f"| {'torch err':>9} |")
    print(header)
    print(f"|{'-' * 20}|{'-' * 30}|{'-' * 14}|{'-' * 8}|{'-' * 25}|{'-' * 8}|{'-' * 10}"
          f"|{'-' * 11}|")
    for shape, tag, ours, ref, ratio, err, ref_err in rows:
        ref_s = f"{ref:23.1f}" if ref else f"{'n/a':>23}"
        ratio_s = f"{ratio:6.3f}" if ratio else f"{'n/a':>6}"
        print(f"| {shape:18} | {tag:28} | {ours:12.1f} | {100 * ours / FP8_PEAK_TFLOPS:6.1f} "
              f"| {ref_s} | {ratio_s} | {err:>8} | {ref_err:>9} |")


def print_per_tensor_tables(rows, best, device):
    print(f"# FP8 GEMM e4m3 x e4m3, per-tensor scales, {device}, "
          f"torch {torch.__version__}, {time.strftime('%Y-%m-%d')}; {TIMING_NOTE}")
    header = (f"| {'M x N x K':18} | {'ours':28} | {'ours TFLOP/s':>12} | {'cuBLASLt TFLOP/s':>16} "
              f"| {'ratio':>6} | {'x bf16 mm':>9} | {'max rel err':>11} |")
    rule = f"|{'-' * 20}|{'-' * 30}|{'-' * 14}|{'-' * 18}|{'-' * 8}|{'-' * 11}|{'-' * 13}|"

    def table(title, rs):
        print(title)
        print(header)
        print(rule)
        for shape, tag, ours, ref, ratio, err, vs_bf16 in rs:
            print(f"| {shape:18} | {tag:28} | {ours:12.1f} | {ref:16.1f} | {ratio:6.3f} "
                  f"| {vs_bf16:9.3f} | {err:>11} |")
    table("# every configuration", rows)
    table("\n# best bf16-output configuration per shape (x bf16 mm: cuBLAS bf16 time / ours)",
          best)


def parse_shapes(texts):
    """`MxNxK` strings (or `wgrad`) as (M, N, K) tuples."""
    shapes = []
    for text in texts:
        if text == "wgrad":
            shapes += WGRAD_SHAPES
            continue
        parts = text.lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"shape {text!r} is not MxNxK with positive extents")
        shapes.append(tuple(int(p) for p in parts))
    return shapes


def forward_gemms(modules, per_folder=False):
    """The E4M3 x E4M3 forward GEMMs without a bias of `modules` ((folder,
    loaded module) pairs), as (tag, kernel) lists: bf16 results, 1x16 results
    and block-scaled bf16 results. Folders repeat kernels (a variant changes
    some of a module's kernels, programs embed the GEMMs), so a configuration
    is timed once; with `per_folder` once per folder, tagged with the
    folder's name (an A/B of kernels of the same options from two
    compilers)."""
    gemms, quantized, blocked = [], [], []
    seen = set()
    for folder, mod in modules:
        prefix = os.path.basename(os.path.normpath(folder)) + ": " if per_folder else ""
        for k in mod.manifest.kernels:
            c = k.config
            if k.op != "linear" or c.get("kind") != "forward" or c.get("bias"):
                continue
            # Epilogues that read more (an addend, rotary tables) are timed
            # by the step profile, not here.
            if reads_more_than_a_gemm(c):
                continue
            key = (folder if per_folder else None, json.dumps(c, sort_keys=True))
            if key in seen:
                continue
            seen.add(key)
            if c.get("a") != "e4m3" or c.get("b") != "e4m3":
                continue
            tag = prefix + config_tag(k)
            if c.get("scaling") == "block":
                if c.get("out") == "bf16":
                    blocked.append((tag, mod[k.name]))
                continue
            if c.get("out") == "bf16":
                gemms.append((tag, mod[k.name]))
            elif c.get("out") == "e4m3":
                quantized.append((tag + " q16", mod[k.name]))
    return gemms, quantized, blocked


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["per_tensor", "block"], default=None)
    ap.add_argument("--shapes", nargs="+", default=None, metavar="MxNxK",
                    help="per-tensor shapes to time instead of the defaults; "
                         "`wgrad` stands for the training configs' weight gradients")
    ap.add_argument("--per-folder", action="store_true",
                    help="time each folder's kernels, tagged with the folder, even "
                         "where another folder has the same configuration (an A/B "
                         "of two compilers' kernels)")
    args = ap.parse_args()
    try:
        shapes = parse_shapes(args.shapes) if args.shapes else SHAPES
    except ValueError as e:
        ap.error(str(e))
    if not torch.cuda.is_available():
        print("bench_linear: CUDA is not available")
        return 1
    gemms, quantized, blocked = forward_gemms(
        [(d, coat.load(d)) for d in kernel_dirs()], per_folder=args.per_folder)
    if args.only != "per_tensor":
        if blocked:
            bench_block(blocked)
        else:
            print("# no block-scaled forward bf16 kernel in the kernel folders")
        if args.only == "block":
            return 0
    rows, best = [], []
    for m, n, k in shapes:
        torch.manual_seed(0)
        x8 = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        w8 = (torch.randn(n, k, device="cuda") * 0.1).to(torch.float8_e4m3fn)
        sx = torch.tensor([0.5], device="cuda")
        sw = torch.tensor([0.25], device="cuda")
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        codes = torch.empty(m, n, dtype=torch.float8_e4m3fn, device="cuda")
        scales = torch.empty(m, -(-n // 16), dtype=torch.bfloat16, device="cuda")
        flop = 2.0 * m * n * k

        def cublas():
            return torch._scaled_mm(x8, w8.t(), scale_a=sx.reshape(()), scale_b=sw.reshape(()),
                                    out_dtype=torch.bfloat16)
        t_ref, ref_timing = time_ms(cublas)
        want = cublas().float()
        xb, wb = x8.to(torch.bfloat16), w8.to(torch.bfloat16)
        t_bf16, _ = time_ms(lambda: torch.mm(xb, wb.t()))
        del xb, wb
        shape_rows = []

        def add(tag, t, timing, err):
            shape_rows.append((f"{m}x{n}x{k}", tag, tflops(flop, t), tflops(flop, t_ref),
                               t_ref / t, f"{err:.2e}", t_bf16 / t))
            record("linear", tag, f"{m}x{n}x{k}", timing,
                   pct_ideal=pct_of_peak(flop, t, FP8_PEAK_TFLOPS),
                   ideal=peak_ideal(FP8_PEAK_TFLOPS), anchor="cuBLASLt _scaled_mm",
                   anchor_timing=ref_timing, max_rel_err=err, bf16_ratio=t_bf16 / t)

        for tag, kern in gemms:
            def ours():
                kern.launch(n=n, a=x8, b=w8, out=out, m=m, k=k, **scale_args(kern, sx, sw))
            t, timing = time_ms(ours)
            add(tag, t, timing, ((out.float() - want).abs().max() / want.abs().max()).item())
        for tag, kern in quantized:
            def ours_q():
                kern.launch(n=n, a=x8, b=w8, out=codes, out_scale=scales, m=m, k=k,
                            **scale_args(kern, sx, sw))
            t, timing = time_ms(ours_q)
            deq = codes.float() * scales.float().repeat_interleave(16, dim=1)[:, :n]
            add(tag, t, timing, ((deq - want).abs().max() / want.abs().max()).item())
        rows += shape_rows
        plain = [r for r in shape_rows if not r[1].endswith("q16")]
        if plain:
            best.append(max(plain, key=lambda r: r[2]))
        t_ref2, _ = time_ms(cublas)
        print(f"# {m}x{n}x{k}: cuBLASLt {tflops(flop, t_ref):.1f} then "
              f"{tflops(flop, t_ref2):.1f} TFLOP/s (run-to-run spread)", flush=True)
    print_per_tensor_tables(rows, best, torch.cuda.get_device_name())
    return 0


if __name__ == "__main__":
    sys.exit(main())
