"""FP8 GEMM (per-tensor E4M3 x E4M3 -> bf16): coat-lower-linear's kernels vs
torch._scaled_mm (cuBLASLt, the anchor) measured in the same run. Prints a
table last: TFLOP/s of each and the ratio ours / cuBLASLt.

Kernels: $COAT_LINEAR_KERNELS (':'-separated folders with a manifest.json), or
compiled from examples/linear/fp8_linear.mlir with coat-opt."""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402

import coat  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 11008, 4096)]  # M, N, K


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


def time_ms(fn, warmup=5, iters=20):
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


def main():
    if not torch.cuda.is_available():
        print("bench_linear: CUDA is not available")
        return 1
    kernels = []
    for d in kernel_dirs():
        mod = coat.load(d)
        for k in mod.manifest.kernels:
            if k.op == "linear":
                c = k.config
                tag = f"{c['tile'][0]}x{c['tile'][1]} s{c['stages']} wg{c['warpgroups']}"
                kernels.append((tag, mod[k.name]))
    rows = []
    for m, n, k in SHAPES:
        torch.manual_seed(0)
        x8 = (torch.randn(m, k, device="cuda")).to(torch.float8_e4m3fn)
        w8 = (torch.randn(n, k, device="cuda") * 0.1).to(torch.float8_e4m3fn)
        sx = torch.tensor([0.5], device="cuda")
        sw = torch.tensor([0.25], device="cuda")
        out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        flop = 2.0 * m * n * k
        t_ref = time_ms(lambda: torch._scaled_mm(x8, w8.t(), scale_a=sx.reshape(()),
                                                 scale_b=sw.reshape(()),
                                                 out_dtype=torch.bfloat16))
        want = torch._scaled_mm(x8, w8.t(), scale_a=sx.reshape(()), scale_b=sw.reshape(()),
                                out_dtype=torch.bfloat16).float()
        for tag, kern in kernels:
            def ours():
                kern.launch(n=n, a=x8, b=w8, out=out, a_scale=sx, b_scale=sw, m=m, k=k)
            t = time_ms(ours)
            err = ((out.float() - want).abs().max() / want.abs().max()).item()
            rows.append((f"{m}x{n}x{k}", tag, flop / t / 1e9, flop / t_ref / 1e9,
                         t_ref / t, err))
    print(f"# FP8 GEMM e4m3 x e4m3 -> bf16, per-tensor scales, {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")
    print(f"| {'M x N x K':18} | {'ours':20} | {'ours TFLOP/s':>12} | {'cuBLASLt TFLOP/s':>16} "
          f"| {'ratio':>6} | {'max rel err':>11} |")
    print(f"|{'-' * 20}|{'-' * 22}|{'-' * 14}|{'-' * 18}|{'-' * 8}|{'-' * 13}|")
    for shape, tag, ours, ref, ratio, err in rows:
        print(f"| {shape:18} | {tag:20} | {ours:12.1f} | {ref:16.1f} | {ratio:6.3f} | {err:11.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
