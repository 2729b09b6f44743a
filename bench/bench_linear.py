"""FP8 GEMM (per-tensor E4M3 x E4M3 -> bf16): coat-lower-linear's kernels vs
torch._scaled_mm (cuBLASLt, the anchor) measured in the same run, for every
compiled lowering configuration, plus the 1x16-quantized-output kernel.
Prints a table last: TFLOP/s of each and the ratio ours / cuBLASLt, and per
shape the best configuration.

Kernels: $COAT_LINEAR_KERNELS (':'-separated folders with a manifest.json,
e.g. one per set of coat-lower-linear options), or compiled from
examples/linear/fp8_linear.mlir with coat-opt (default options)."""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402

import coat  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 11008, 4096),
          (8192, 4096, 11008), (16384, 14336, 4096)]  # M, N, K


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


def time_ms(fn, warmup=10, iters=50):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def config_tag(spec):
    c = spec.config
    sched = "ws" if c.get("warp_specialized") else "plain"
    return f"{c['tile'][0]}x{c['tile'][1]} s{c['stages']} wg{c['warpgroups']} {sched}"


def main():
    if not torch.cuda.is_available():
        print("bench_linear: CUDA is not available")
        return 1
    gemms, quantized = [], []
    for d in kernel_dirs():
        mod = coat.load(d)
        for k in mod.manifest.kernels:
            c = k.config
            if k.op != "linear" or c.get("kind") != "forward" or c.get("bias"):
                continue
            if c.get("a") != "e4m3" or c.get("b") != "e4m3":
                continue
            if c.get("out") == "bf16":
                gemms.append((config_tag(k), mod[k.name]))
            elif c.get("out") == "e4m3":
                quantized.append((config_tag(k) + " q16", mod[k.name]))
    rows, best = [], []
    for m, n, k in SHAPES:
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
        t_ref = time_ms(cublas)
        want = cublas().float()
        shape_rows = []
        for tag, kern in gemms:
            def ours():
                kern.launch(n=n, a=x8, b=w8, out=out, a_scale=sx, b_scale=sw, m=m, k=k)
            t = time_ms(ours)
            err = ((out.float() - want).abs().max() / want.abs().max()).item()
            shape_rows.append((f"{m}x{n}x{k}", tag, flop / t / 1e9, flop / t_ref / 1e9,
                               t_ref / t, f"{err:.2e}"))
        for tag, kern in quantized:
            def ours_q():
                kern.launch(n=n, a=x8, b=w8, out=codes, out_scale=scales, a_scale=sx,
                            b_scale=sw, m=m, k=k)
            t = time_ms(ours_q)
            deq = codes.float() * scales.float().repeat_interleave(16, dim=1)[:, :n]
            err = ((deq - want).abs().max() / want.abs().max()).item()
            shape_rows.append((f"{m}x{n}x{k}", tag, flop / t / 1e9, flop / t_ref / 1e9,
                               t_ref / t, f"{err:.2e}"))
        rows += shape_rows
        plain = [r for r in shape_rows if not r[1].endswith("q16")]
        if plain:
            best.append(max(plain, key=lambda r: r[2]))
        t_ref2 = time_ms(cublas)
        print(f"# {m}x{n}x{k}: cuBLASLt {flop / t_ref / 1e9:.1f} then {flop / t_ref2 / 1e9:.1f} "
              f"TFLOP/s (run-to-run spread)", flush=True)
    print(f"# FP8 GEMM e4m3 x e4m3, per-tensor scales, {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}, {time.strftime('%Y-%m-%d')}; mean of 50 after 10 warm-up")
    header = (f"| {'M x N x K':18} | {'ours':28} | {'ours TFLOP/s':>12} | {'cuBLASLt TFLOP/s':>16} "
              f"| {'ratio':>6} | {'max rel err':>11} |")
    rule = f"|{'-' * 20}|{'-' * 30}|{'-' * 14}|{'-' * 18}|{'-' * 8}|{'-' * 13}|"
    print(header)
    print(rule)
    for shape, tag, ours, ref, ratio, err in rows:
        print(f"| {shape:18} | {tag:28} | {ours:12.1f} | {ref:16.1f} | {ratio:6.3f} | {err:>11} |")
    print("\n# best bf16-output configuration per shape")
    print(header)
    print(rule)
    for shape, tag, ours, ref, ratio, err in best:
        print(f"| {shape:18} | {tag:28} | {ours:12.1f} | {ref:16.1f} | {ratio:6.3f} | {err:>11} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
