#!/usr/bin/env python3
"""A whole MLP block, forward and backward, run from its compiled launch
plan (coat.nn.MLPBlock: RMSNorm, gate/up, SiLU, SwiGLU product, down,
residual) against the same math in BF16 eager PyTorch autograd, timed in the
same run, both launched eagerly and both replayed from CUDA graphs
(coat.nn.capture_step); and the activation memory each keeps between forward
and backward (torch.cuda.memory_allocated after the forward, inputs and
weights excluded).

  python bench/bench_block.py [--tokens 4096 8192] [--hidden 1024 --ffn 2816]

Kernels: the block's compiled program on COAT_KERNELS or under build/demo
(scripts/demo.sh compiles hidden 1024, ffn 2816). Times are medians of 10
samples of 20 back-to-back steps (bench/_timing.py).
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import measure, record  # noqa: E402

import coat.nn as cnn  # noqa: E402


def bf16_block(h, wn, wg, wu, wd, eps):
    x = h.float()
    x = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).to(torch.bfloat16) * wn
    g = torch.nn.functional.linear(x, wg)
    u = torch.nn.functional.linear(x, wu)
    return h + torch.nn.functional.linear(torch.nn.functional.silu(g) * u, wd)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=2816)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_block: CUDA is not available")
        return 1
    block = cnn.MLPBlock(args.hidden, args.ffn, device="cuda", dtype=torch.bfloat16)
    ws = [block.norm.weight, block.gate_proj.weight, block.up_proj.weight,
          block.down_proj.weight]
    print_header(args, len(block.program.steps), torch.cuda.get_device_name())
    for t in args.tokens:
        h = torch.randn(t, args.hidden, device="cuda").bfloat16().requires_grad_()
        dy = torch.randn_like(h)

        def ours():
            block(h).backward(dy)

        def ref():
            bf16_block(h, *ws, block.config.eps).backward(dy)

        def activation_bytes(fwd):
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            y = fwd()
            torch.cuda.synchronize()
            used = torch.cuda.memory_allocated() - base - y.numel() * y.element_size()
            del y
            return used / 2**20

        t_ours, t_ref = measure(ours), measure(ref)
        m_ours = activation_bytes(lambda: block(h))
        m_ref = activation_bytes(lambda: bf16_block(h, *ws, block.config.eps))
        record("block", f"MLPBlock fwd+bwd H={args.hidden} F={args.ffn}", f"{t} tokens", t_ours,
               anchor="BF16 eager autograd", anchor_timing=t_ref, act_mib=m_ours,
               anchor_act_mib=m_ref)
        print_row(t, t_ours.median, t_ref.median, m_ours, m_ref)
        # Both steps replayed from CUDA graphs (coat.nn.capture_step): no
        # per-kernel host launch cost on either side.
        g_ours = cnn.capture_step(ours, reset_grads=[h, *ws]).replay
        g_ref = cnn.capture_step(ref, reset_grads=[h, *ws]).replay
        t_gours, t_gref = measure(g_ours), measure(g_ref)
        record("block", f"MLPBlock fwd+bwd H={args.hidden} F={args.ffn}, CUDA graph",
               f"{t} tokens", t_gours, anchor="BF16 autograd, CUDA graph", anchor_timing=t_gref)
        print_row(f"{t}, graphed", t_gours.median, t_gref.median, m_ours, m_ref)
    return 0


def print_header(args, launches, device):
    print(f"# MLP block H={args.hidden} F={args.ffn}, forward + backward, "
          f"{launches} launches per step ({device})")
    print("| tokens | ours ms | BF16 eager ms | speedup | ours act. MiB | BF16 act. MiB | "
          "memory ratio |")
    print("|---|---|---|---|---|---|---|")


def print_row(t, t_ours, t_ref, m_ours, m_ref):
    print(f"| {t} | {t_ours:.3f} | {t_ref:.3f} | {t_ref / t_ours:.2f}x | {m_ours:.1f} | "
          f"{m_ref:.1f} | {m_ours / m_ref:.2f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
