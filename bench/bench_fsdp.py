#!/usr/bin/env python3
"""FP8AdamW vs torch.optim.AdamW(fused=True) under the same FSDP2 setup:
optimizer-state memory per GPU and optimizer step time (docs/fsdp.md).

One process per rank (torch.multiprocessing spawn, file:// rendezvous);
any world size, default: every visible GPU. A Llama-shaped model
(coat._tiny_llama) is fully_shard-ed per block; one forward/backward fills
the sharded gradients, then each optimizer's step() is timed alone with CUDA
events (median of --iters after --warmup). Rows:

- torch AdamW fused   the anchor, fp32 exp_avg / exp_avg_sq
- FP8AdamW shared     share_fsdp_storage(model): FSDP's shards live in the
                      optimizer's flat buffer, nothing is copied
- FP8AdamW staged     local shards copied into the flat buffer and back
                      around each launch (the flat param buffer is extra)

"state" is the optimizer's own tensors on this rank (FP8 codes + group
metadata; + the staging copy for "staged"); "alloc" is the growth of
torch.cuda.memory_allocated over construction and the first step.

  python3 bench/bench_fsdp.py [--world-size N] [--hidden 2048 --layers 8 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)
from _timing import Timing, measure, record  # noqa: E402


def _optimizer_state_bytes(opt) -> int:
    from coat import _dist
    from coat.optim import FP8AdamW

    if isinstance(opt, FP8AdamW):
        n = sum(t.numel() * t.element_size() for b in opt.buckets for t in b.state.values())
        staged = sum(b.local_numel(i) * b.param.element_size() for b in opt.buckets
                     for i in range(len(b.params))
                     if b.layouts[i] is not None and not opt._slot_holds(b, i))
        return n + (sum(b.param.numel() * b.param.element_size() for b in opt.buckets)
                    if staged else 0)
    n = 0
    for st in opt.state.values():
        for t in st.values():
            if hasattr(t, "numel"):
                t = _dist.local_tensor(t)
                n += t.numel() * t.element_size()
    return n


def _worker(rank, world, args, store, out):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from coat._tiny_llama import TinyLlama, shard
    from coat.optim import FP8AdamW

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{store}",
                            rank=rank, world_size=world)
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    mesh = init_device_mesh(args.device, (world,))
    rows = []
    try:
        for name in ("torch AdamW fused", "FP8AdamW shared", "FP8AdamW staged"):
            torch.manual_seed(0)
            model = shard(TinyLlama(args.vocab, args.hidden, args.layers, args.heads,
                                    args.inter).to(dev), mesh)
            nlocal = sum(p.to_local().numel() for p in model.parameters())
            if cuda:
                torch.cuda.synchronize()
            base = torch.cuda.memory_allocated(dev) if cuda else 0
            if name.startswith("torch"):
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
            else:
                opt = FP8AdamW(model.parameters(), lr=1e-4)
                if name.endswith("shared"):
                    opt.share_fsdp_storage(model)
            tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device=dev)
            model.loss(tokens).backward()
            opt.step()
            if cuda:
                torch.cuda.synchronize()
            alloc = (torch.cuda.memory_allocated(dev) - base) if cuda else 0
            t = measure(opt.step, warmup=args.warmup, repeats=args.iters, inner=1, cuda=cuda)
            rows.append({"optimizer": name, "params_local": nlocal,
                         "state_bytes": _optimizer_state_bytes(opt), "alloc_bytes": alloc,
                         "step_ms": t.median, "step_samples": list(t.samples)})
            del opt, model
            if cuda:
                torch.cuda.empty_cache()
        if rank == 0:
            with open(out, "w") as f:
                json.dump(rows, f)
    finally:
        dist.destroy_process_group()


def print_table(rows, world, gpu, torch_version, args):
    print(f"FSDP2 optimizer step, world size {world}, {gpu}, torch {torch_version}, "
          f"model hidden {args.hidden} x {args.layers} layers "
          f"({rows[0]['params_local'] / 1e6:.1f}M params per rank); step ms = median")
    anchor = rows[0]
    print(f"{'optimizer':<20} {'state MiB/rank':>15} {'B/param':>8} {'alloc MiB':>10} "
          f"{'step ms':>8} {'vs fused':>9}")
    for r in rows:
        print(f"{r['optimizer']:<20} {r['state_bytes'] / 2**20:>15.1f} "
              f"{r['state_bytes'] / r['params_local']:>8.3f} {r['alloc_bytes'] / 2**20:>10.1f} "
              f"{r['step_ms']:>8.3f} {r['step_ms'] / anchor['step_ms']:>8.2f}x")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world-size", type=int, default=None)
    ap.add_argument("--device", choices=["cuda", "cpu"], default=None)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--inter", type=int, default=5504)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", help="also write the rows as JSON here")
    args = ap.parse_args(argv)

    import torch
    import torch.multiprocessing as mp

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    world = args.world_size or (torch.cuda.device_count() if args.device == "cuda" else 1)
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        mp.spawn(_worker, args=(world, args, os.path.join(tmp, "store"), out), nprocs=world)
        with open(out) as f:
            rows = json.load(f)
    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print_table(rows, world, gpu, torch.__version__, args)
    anchor = Timing(tuple(rows[0]["step_samples"]))
    for r in rows[1:]:
        record("fsdp", r["optimizer"], f"world {world}, {r['params_local'] / 1e6:.0f}M params/rank",
               Timing(tuple(r["step_samples"])), anchor=rows[0]["optimizer"],
               anchor_timing=anchor, device=gpu, state_mib=r["state_bytes"] / 2**20,
               anchor_state_mib=rows[0]["state_bytes"] / 2**20)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"world": world, "device": gpu, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
