"""The converted model of test_fsdp_convert.py and its runs: a single-process
reference, the FSDP2 run (one process per rank, started with
torch.multiprocessing.spawn, file:// rendezvous) that saves checkpoints
midway, and the run that resumes from them at another world size.

Data parallelism: rank r of a step takes micro-batch r of that step. The
reference takes every micro-batch of a step one after the other,
accumulates the gradients and divides them by the count, which is what the
ranks' reduce-scatter (an average) gives."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

LR, WD = 1e-2, 0.1
BATCH, SEQ = 2, 16

#: hidden 256 shards every parameter into whole 1x128 optimizer groups at
#: world size 2 (the norm weights too: 128 elements a rank), so FP8AdamW's
#: groups are those of the unsharded run (docs/fsdp.md). The CUDA size is
#: the one scripts/compile_examples.py compiles (its recompute variant too).
CONFIGS = {
    "cpu": dict(vocab=256, hidden=256, ffn=256, layers=2, heads=4, kv_heads=2),
    "cuda": dict(vocab=256, hidden=1024, ffn=2816, layers=2, heads=16, kv_heads=16),
}


def batches(steps: int, world: int, vocab: int, seed: int = 11):
    """Token blocks [BATCH, SEQ + 1] per step and rank (the targets are the
    tokens shifted by one)."""
    g = torch.Generator().manual_seed(seed)
    return [[torch.randint(0, vocab, (BATCH, SEQ + 1), generator=g) for _ in range(world)]
            for _ in range(steps)]


def build(kind: str, device) -> torch.nn.Module:
    """The converted coat.llama model, the same on every rank. The first
    layer makes its attention inputs again in the backward (a second read
    of the gathered weights there)."""
    import coat
    from coat import llama

    torch.manual_seed(0)
    model = llama.LlamaForCausalLM(llama.LlamaConfig(**CONFIGS[kind])).to(device)
    coat.convert(model)
    model.model.layers[0].recompute_attention_inputs = True
    return model


def shard(model: torch.nn.Module, mesh) -> torch.nn.Module:
    """fully_shard per decoder layer, then the root (the embedding, final
    norm and LM head). The second layer all-gathers its weights in bf16
    (the precision the programs read them in); the others in f32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    layers = model.model.layers
    fully_shard(layers[0], mesh=mesh)
    fully_shard(layers[1], mesh=mesh, mp_policy=MixedPrecisionPolicy(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False))
    fully_shard(model, mesh=mesh)
    return model


def loss_of(model, tokens):
    tokens = tokens.to(next(model.parameters()).device)
    return model(tokens[:, :-1], tokens[:, 1:])


def full(t: torch.Tensor) -> torch.Tensor:
    """A parameter or gradient as one CPU tensor (gathered from a DTensor)."""
    from coat import _dist

    if _dist.is_dtensor(t):
        t = t.full_tensor()
    return t.detach().cpu().clone()


def accumulated_step(model, opt, micro_batches):
    """One optimizer step over ``micro_batches`` run one after the other, the
    gradients averaged: the single-process counterpart of a data-parallel
    step. Returns the micro-batches' losses and the averaged gradients."""
    losses = []
    for tokens in micro_batches:
        loss = loss_of(model, tokens)
        loss.backward()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        for p in model.parameters():
            p.grad.div_(len(micro_batches))
    grads = {n: full(p.grad) for n, p in model.named_parameters()}
    opt.step()
    opt.zero_grad()
    return losses, grads


def reference(kind: str, device, steps: int, world: int):
    """The single-process run: per step the micro-batches' losses, the
    averaged gradients and the parameters after the step."""
    from coat.optim import FP8AdamW

    model = build(kind, device)
    opt = FP8AdamW(model.parameters(), lr=LR, weight_decay=WD)
    log = {"loss": [], "grad": [], "param": []}
    for xs in batches(steps, world, model.config.vocab):
        losses, grads = accumulated_step(model, opt, xs)
        log["loss"].append(losses)
        log["grad"].append(grads)
        log["param"].append({n: full(p) for n, p in model.named_parameters()})
    return log


def _init(rank: int, world: int, device: str, store: str):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if device == "cuda" else "gloo",
                            init_method=f"file://{store}", rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh

    return (init_device_mesh(device, (world,)),
            torch.device("cuda", rank) if device == "cuda" else torch.device("cpu"))


def _gathered_losses(loss: torch.Tensor, world: int):
    out = [torch.zeros_like(loss) for _ in range(world)]
    dist.all_gather(out, loss.detach().contiguous())
    return [float(x) for x in out]


def run_fsdp(rank: int, world: int, device: str, store: str, ckpt: str, steps: int,
             more: int, reference_too: bool, out: str) -> None:
    """``steps`` data-parallel steps of the FSDP2 model (FP8AdamW holding
    FSDP's shard storage), a sharded (DCP) and a full checkpoint of model
    and optimizer in the folder ``ckpt`` (none if empty), then ``more``
    steps. Rank 0 writes per step the ranks'
    losses, the gathered gradients and parameters (and, with
    ``reference_too``, the single-process run on this device)."""
    mesh, dev = _init(rank, world, device, store)
    try:
        _fsdp(rank, world, device, mesh, dev, ckpt, steps, more, reference_too, out)
    finally:
        dist.destroy_process_group()


def _fsdp(rank, world, kind, mesh, dev, ckpt, steps, more, reference_too, out):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions, get_model_state_dict, get_optimizer_state_dict)

    from coat import _dist
    from coat.optim import FP8AdamW

    ref = reference(kind, dev, steps + more, world) if reference_too and rank == 0 else None
    model = shard(build(kind, dev), mesh)
    opt = FP8AdamW(model.parameters(), lr=LR, weight_decay=WD)
    shared = opt.share_fsdp_storage(model)
    assert shared == len(list(model.parameters())), shared
    log = {"loss": [], "grad": [], "param": [], "resharded": []}
    q = model.model.layers[0].self_attn.q_proj
    for t, xs in enumerate(batches(steps + more, world, model.config.vocab)):
        loss = loss_of(model, xs[rank])
        # After the forward the layers hold their shards again: the
        # backward reads weights FSDP gathers once more.
        log["resharded"].append(_dist.is_dtensor(q.weight))
        loss.backward()
        log["loss"].append(_gathered_losses(loss, world))
        log["grad"].append({n: full(p.grad) for n, p in model.named_parameters()})
        opt.step()
        opt.zero_grad()
        log["param"].append({n: full(p) for n, p in model.named_parameters()})
        if t + 1 == steps and ckpt:
            dcp.save({"model": get_model_state_dict(model),
                      "optim": get_optimizer_state_dict(model, opt)},
                     checkpoint_id=os.path.join(ckpt, "dcp"))
            whole = StateDictOptions(full_state_dict=True, cpu_offload=True)
            msd = get_model_state_dict(model, options=whole)
            osd = get_optimizer_state_dict(model, opt, options=whole)
            if rank == 0:
                torch.save({"model": msd, "optim": osd}, os.path.join(ckpt, "full.pt"))
    if rank == 0:
        torch.save({"fsdp": log, "reference": ref}, out)


def run_resume(rank: int, world: int, device: str, store: str, ckpt: str, first: int,
               more: int, saved_world: int, out: str) -> None:
    """Loads the checkpoints run_fsdp saved after step ``first`` (at world
    size ``saved_world``) into this world size: the sharded one into the
    FSDP2 model, the full one into the FSDP2 model and into the model
    without FSDP. Each continues for ``more`` steps on the saved run's data
    (all of its micro-batches, accumulated). Rank 0 writes what was loaded
    and the runs."""
    mesh, dev = _init(rank, world, device, store)
    try:
        _resume(rank, world, device, mesh, dev, ckpt, first, more, saved_world, out)
    finally:
        dist.destroy_process_group()


def _state_of(model, opt):
    """Parameters and optimizer state by parameter name, whole, on the CPU."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions, get_model_state_dict, get_optimizer_state_dict)

    whole = StateDictOptions(full_state_dict=True, cpu_offload=True)
    osd = get_optimizer_state_dict(model, opt, options=whole)
    return {"model": {k: full(v) for k, v in get_model_state_dict(model, options=whole).items()},
            "optim": {name: {k: full(v) for k, v in st.items() if isinstance(v, torch.Tensor)}
                      for name, st in osd["state"].items()}}


def _resume(rank, world, kind, mesh, dev, ckpt, first, more, saved_world, out):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
        set_model_state_dict, set_optimizer_state_dict)

    from coat.optim import FP8AdamW

    def saved():  # fresh each time: loading from rank 0 replaces its entries
        return torch.load(os.path.join(ckpt, "full.pt"), weights_only=False)

    runs = {}
    # The sharded checkpoint into the FSDP2 model (staged local shards).
    model = shard(build(kind, dev), mesh)
    opt = FP8AdamW(model.parameters(), lr=LR, weight_decay=WD)
    sd = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)}
    dcp.load(sd, checkpoint_id=os.path.join(ckpt, "dcp"))
    set_model_state_dict(model, sd["model"])
    set_optimizer_state_dict(model, opt, optim_state_dict=sd["optim"])
    runs["dcp"] = (model, opt)
    # The full checkpoint into the FSDP2 model, from rank 0.
    model = shard(build(kind, dev), mesh)
    opt = FP8AdamW(model.parameters(), lr=LR, weight_decay=WD)
    opt.share_fsdp_storage(model)
    bcast = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, saved()["model"] if rank == 0 else {}, options=bcast)
    set_optimizer_state_dict(model, opt, optim_state_dict=saved()["optim"] if rank == 0 else {},
                             options=bcast)
    runs["full"] = (model, opt)
    # The full checkpoint into the model without FSDP (one process's run).
    if rank == 0:
        model = build(kind, dev)
        opt = FP8AdamW(model.parameters(), lr=LR, weight_decay=WD)
        model.load_state_dict(saved()["model"])
        set_optimizer_state_dict(model, opt, optim_state_dict=saved()["optim"],
                                 options=StateDictOptions(full_state_dict=True))
        runs["plain"] = (model, opt)
    log = {"loaded": {}, "loss": {}, "param": {}}
    for name, (model, opt) in runs.items():
        log["loaded"][name] = _state_of(model, opt) if name != "plain" else {
            "model": {k: full(v) for k, v in model.state_dict().items()},
            "optim": _plain_optim_state(model, opt)}
        log["loss"][name], log["param"][name] = [], []
    data = batches(first + more, saved_world, CONFIGS[kind]["vocab"])[first:]
    for xs in data:
        for name, (model, opt) in runs.items():
            # The saved run's micro-batches, split over this run's ranks
            # (whose reduce-scatter averages), or all of them.
            mine = xs if name == "plain" else xs[rank::world]
            losses = []
            for tokens in mine:
                loss = loss_of(model, tokens)
                loss.backward()
                losses.append(loss.detach())
            with torch.no_grad():
                for p in model.parameters():
                    p.grad.div_(len(mine))
            opt.step()
            opt.zero_grad()
            log["loss"][name].append([float(x) for x in losses])
            log["param"][name].append({n: full(p) for n, p in model.named_parameters()})
    if rank == 0:
        torch.save(log, out)


def _plain_optim_state(model, opt):
    """FP8AdamW's state of a model without FSDP by parameter name, codes as
    uint8 (the layout of the full checkpoint's)."""
    from coat import _dtypes

    names = {p: n for n, p in model.named_parameters()}
    return {names[p]: {k: (v.detach().cpu().clone() if v.dtype == torch.float32
                           else _dtypes.codes_as_uint8(v).cpu().clone())
                       for k, v in st.items() if isinstance(v, torch.Tensor) and k != "step"}
            for p, st in opt.state.items()}


def run_misplaced(rank: int, world: int, device: str, store: str, out: str) -> None:
    """fully_shard where the programs would get sharded weights: on a part
    of a converted layer (its mlp, its q projection), whose own forward
    never runs, and on the LM head alone, whose weight the fused loss reads
    in the model's forward. Rank 0 writes each error's text."""
    mesh, dev = _init(rank, world, device, store)
    try:
        from torch.distributed.fsdp import fully_shard

        import coat
        from coat import llama

        cfg = llama.LlamaConfig(**CONFIGS[device])
        errors = {}
        for part in ("mlp", "q_proj", "lm_head"):
            model = coat.convert(llama.LlamaForCausalLM(cfg).to(dev))
            layer = model.model.layers[0]
            fully_shard({"mlp": layer.mlp, "q_proj": layer.self_attn.q_proj,
                         "lm_head": model.lm_head}[part], mesh=mesh)
            fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            tokens = torch.randint(0, cfg.vocab, (2, 9))
            try:
                loss_of(model, tokens).backward()
            except ValueError as e:
                errors[part] = str(e)
        if rank == 0:
            torch.save(errors, out)
    finally:
        dist.destroy_process_group()
