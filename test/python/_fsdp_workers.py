"""Process bodies of test_fsdp.py, started with torch.multiprocessing.spawn
(one process per rank, file:// rendezvous, no torchrun). Each rank asserts
what it checks; rank 0 also writes a JSON summary the test prints."""

from __future__ import annotations

import copy
import json
import math
import os

import torch
import torch.distributed as dist

G = 128
LR, WD = 1e-2, 0.1


def _init(rank: int, world: int, device: str, store: str):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank,
                            world_size=world)
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device, (world,)), torch.device(device, rank) if device == "cuda" \
        else torch.device("cpu")


def _batches(n: int, vocab: int, device, seed: int = 7):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (4, 33), generator=gen).to(device) for _ in range(n)]


def _state_equal(o1, p1, o2, p2) -> bool:
    from coat import _dtypes

    s1, s2 = o1.state[p1], o2.state[p2]
    for k, a in s1.items():
        b = s2[k]
        if a.dtype == torch.float32:
            if not torch.equal(a, b):
                return False
        elif not torch.equal(_dtypes.codes_as_uint8(a), _dtypes.codes_as_uint8(b)):
            return False
    return True


def _train_step(model, opt, tokens):
    opt.zero_grad()
    loss = model.loss(tokens)
    loss.backward()
    opt.step()
    return float(loss)


def run_compare(rank: int, world: int, device: str, store: str, ckpt_dir: str, out: str,
                steps: int = 6) -> None:
    """FSDP2 + FP8AdamW against the same model without FSDP + FP8AdamW, the
    unsharded optimizer fed the FSDP run's (gathered) gradients, so that only
    the optimizer's grouping can differ; then the sharded (DCP) and full
    optimizer state_dict round trips."""
    mesh, dev = _init(rank, world, device, store)
    try:
        _compare(rank, world, mesh, dev, ckpt_dir, out, steps)
    finally:
        dist.destroy_process_group()


def _compare(rank, world, mesh, dev, ckpt_dir, out, steps):
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions, get_optimizer_state_dict, set_optimizer_state_dict)
    import torch.distributed.checkpoint as dcp

    from coat import _dist, _dtypes
    from coat._tiny_llama import TinyLlama, shard
    from coat.optim import FP8AdamW

    torch.manual_seed(0)
    init = TinyLlama(mlp_bias=True).to(dev)
    ref = copy.deepcopy(init)
    shared = shard(copy.deepcopy(init), mesh)   # FSDP storage shared with the optimizer
    staged = shard(copy.deepcopy(init), mesh)   # local shards copied in/out each step
    o_ref = FP8AdamW(ref.parameters(), lr=LR, weight_decay=WD)
    o_sh = FP8AdamW(shared.parameters(), lr=LR, weight_decay=WD)
    o_st = FP8AdamW(staged.parameters(), lr=LR, weight_decay=WD)
    nparams = len(list(shared.parameters()))
    n_shared = o_sh.share_fsdp_storage(shared)
    assert n_shared == nparams, f"share_fsdp_storage placed {n_shared} of {nparams} parameters"
    assert all(o_sh._slot_holds(b, i) for b in o_sh.buckets for i in range(len(b.params)))
    assert not any(o_st._slot_holds(b, i) for b in o_st.buckets for i in range(len(b.params))
                   if b.local_numel(i))

    names = [n for n, _ in ref.named_parameters()]
    aligned = {n: _dist.group_layout_matches_unsharded(tuple(p.shape), world, G)
               for n, p in ref.named_parameters()}
    batches = _batches(steps + 4, 320, dev)
    log = {"world": world, "device": str(dev), "steps": steps, "aligned": aligned,
           "max_abs_diff_unaligned": [], "max_abs_diff_aligned": [], "loss_fsdp": [],
           "loss_ref": [], "max_grad_diff": []}
    for t in range(steps):
        for m, o in ((shared, o_sh), (staged, o_st)):
            o.zero_grad()
        l_sh = shared.loss(batches[t])
        l_sh.backward()
        staged.loss(batches[t]).backward()
        o_ref.zero_grad()
        l_ref = ref.loss(batches[t])
        l_ref.backward()
        gdiff = 0.0
        with torch.no_grad():
            for pr, ps in zip(ref.parameters(), shared.parameters()):
                full = ps.grad.full_tensor()
                gdiff = max(gdiff, float((full - pr.grad).abs().max()))
                pr.grad.copy_(full)  # the unsharded optimizer sees the FSDP run's gradient
        o_sh.step()
        o_st.step()
        o_ref.step()
        d_al = d_un = 0.0
        for name, pr, psh, pst in zip(names, ref.parameters(), shared.parameters(),
                                      staged.parameters()):
            full_sh, full_st = psh.full_tensor().detach(), pst.full_tensor().detach()
            assert torch.equal(full_sh, full_st), \
                f"step {t + 1}: {name}: shared-storage and staged FSDP runs differ"
            d = float((full_sh - pr.detach()).abs().max())
            if aligned[name] or t == 0:
                # Step 1 uses the unquantized moments: no grouping effect at all.
                assert d == 0.0, f"step {t + 1}: {name} (aligned={aligned[name]}) differs " \
                                 f"from the unsharded run by {d}"
            if aligned[name]:
                d_al = max(d_al, d)
            else:
                d_un = max(d_un, d)
        log["max_abs_diff_aligned"].append(d_al)
        log["max_abs_diff_unaligned"].append(d_un)
        log["loss_fsdp"].append(float(l_sh))
        log["loss_ref"].append(float(l_ref))
        log["max_grad_diff"].append(gdiff)
    # Documented bound for shards that split groups (docs/fsdp.md).
    bound = 0.1 * LR * (steps - 1)
    assert max(log["max_abs_diff_unaligned"]) <= bound, (log["max_abs_diff_unaligned"], bound)
    if world == 1:
        assert max(log["max_abs_diff_unaligned"]) == 0.0

    # ---- full (unsharded) state_dict: gathered to rank 0 on the CPU -------------
    full = get_optimizer_state_dict(shared, o_sh, options=StateDictOptions(
        full_state_dict=True, cpu_offload=True))
    if rank == 0:
        path = os.path.join(ckpt_dir, "optim_full.pt")
        torch.save(full, path)
        full = torch.load(path, weights_only=False)
        for name, p in ref.named_parameters():
            st = full["state"][name]
            assert st["exp_avg"].dtype == torch.uint8 and tuple(st["exp_avg"].shape) == \
                tuple(p.shape), (name, st["exp_avg"].dtype, st["exp_avg"].shape)
            if aligned[name] and -(-p.shape[0] // world) * world == p.shape[0]:
                # Whole groups, no shard padding: the gathered state IS the
                # unsharded optimizer's state.
                mine = o_ref.state[p]
                for key, v in mine.items():
                    if key == "step":
                        assert int(st["step"]) == steps
                    elif v.dtype == torch.float32:
                        assert torch.equal(st[key], v.cpu()), (name, key)
                    else:
                        assert torch.equal(st[key], _dtypes.codes_as_uint8(v).cpu()), (name, key)
    else:
        assert full == {} or not full.get("state"), "cpu_offload full state lives on rank 0"
        full = {}
    fresh = shard(copy.deepcopy(init), mesh)
    o_fr = FP8AdamW(fresh.parameters(), lr=LR, weight_decay=WD)
    o_fr.share_fsdp_storage(fresh)
    set_optimizer_state_dict(fresh, o_fr, optim_state_dict=full, options=StateDictOptions(
        full_state_dict=True, broadcast_from_rank0=True))
    with torch.no_grad():
        for pf, ps in zip(fresh.parameters(), shared.parameters()):
            pf.copy_(ps)
    for pf, ps in zip(fresh.parameters(), shared.parameters()):
        assert _state_equal(o_fr, pf, o_sh, ps), "full state_dict round trip is not bit-exact"
    assert o_fr.group_steps() == o_sh.group_steps()

    # ---- sharded state_dict through torch.distributed.checkpoint ----------------
    sd = get_optimizer_state_dict(shared, o_sh)
    devices = {_dist.local_tensor(t).device for st in sd["state"].values()
               for t in st.values() if isinstance(t, torch.Tensor) and t.dim() > 0}
    assert devices == {dev}, f"state tensors on {devices}; DCP needs one device ({dev})"
    some = next(iter(sd["state"].values()))
    assert _dist.is_dtensor(some["exp_avg"]) and some["exp_avg"].dtype == torch.uint8
    dcp.save({"optim": sd}, checkpoint_id=os.path.join(ckpt_dir, "dcp"))
    again = shard(copy.deepcopy(init), mesh)
    o_ag = FP8AdamW(again.parameters(), lr=LR, weight_decay=WD)   # staged
    target = get_optimizer_state_dict(again, o_ag)
    dcp.load({"optim": target}, checkpoint_id=os.path.join(ckpt_dir, "dcp"))
    set_optimizer_state_dict(again, o_ag, optim_state_dict=target)
    with torch.no_grad():
        for pa, ps in zip(again.parameters(), shared.parameters()):
            pa.copy_(ps)
    for pa, ps in zip(again.parameters(), shared.parameters()):
        assert _state_equal(o_ag, pa, o_sh, ps), "sharded (DCP) round trip is not bit-exact"
    assert o_ag.group_steps() == o_sh.group_steps()

    # ---- resumed runs continue bit-exactly ----------------------------------------
    for t in range(steps, steps + 3):
        for m, o in ((shared, o_sh), (fresh, o_fr), (again, o_ag)):
            _train_step(m, o, batches[t])
    for ps, pf, pa in zip(shared.parameters(), fresh.parameters(), again.parameters()):
        a = ps.full_tensor()
        assert torch.equal(a, pf.full_tensor()), "resumed from full state_dict diverged"
        assert torch.equal(a, pa.full_tensor()), "resumed from sharded state_dict diverged"

    # ---- world size 1: the full state_dict loads into a non-FSDP optimizer -------
    if world == 1:
        plain = copy.deepcopy(ref)
        o_pl = FP8AdamW(plain.parameters(), lr=LR, weight_decay=WD)
        o_pl.load_state_dict(full)
        for pp, pr in zip(plain.parameters(), ref.parameters()):
            assert _state_equal(o_pl, pp, o_ref, pr), "W=1 full state differs from unsharded"
    log["state_dict"] = "full+sharded bit-exact, resumed runs equal"
    if rank == 0:
        with open(out, "w") as f:
            json.dump(log, f)


def run_validation(rank: int, world: int, device: str, store: str, out: str) -> None:
    """Bad inputs raise clear errors: unsupported placements, mixed meshes,
    loading into another shard layout."""
    mesh, dev = _init(rank, world, device, store)
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor

        from coat.optim import FP8AdamW

        errors = {}

        def expect(tag, fn, match):
            try:
                fn()
            except ValueError as e:
                assert match in str(e), (tag, str(e))
                errors[tag] = str(e)
                return
            raise AssertionError(f"{tag}: no ValueError")

        w = torch.nn.Parameter(distribute_tensor(torch.randn(256, 64, device=dev), mesh,
                                                 [Shard(1)]))
        expect("shard1", lambda: FP8AdamW([w]), "Shard(0)")
        a = torch.nn.Parameter(distribute_tensor(torch.randn(256, 64, device=dev), mesh,
                                                 [Shard(0)]))
        other = init_device_mesh(dev.type, (world,), mesh_dim_names=("other",))
        b = torch.nn.Parameter(distribute_tensor(torch.randn(128, device=dev), other,
                                                 [Replicate()]))
        if other != mesh:
            expect("mixed_mesh", lambda: FP8AdamW([a, b]), "one mesh")
        # A DTensor parameter steps; its replicated copy as well.
        r = torch.nn.Parameter(distribute_tensor(torch.randn(300, device=dev), mesh,
                                                 [Replicate()]))
        opt = FP8AdamW([a, r], lr=1e-2)
        a.grad = distribute_tensor(torch.ones(256, 64, device=dev), mesh, [Shard(0)])
        r.grad = distribute_tensor(torch.ones(300, device=dev), mesh, [Replicate()])
        before = a.full_tensor().clone()
        # One bucket of a sharded and a replicated parameter: the norm counts
        # every shard once and the replica once.
        norm = opt.clip_grad_norm_(1e9)
        assert abs(float(norm) - math.sqrt(256 * 64 + 300)) <= 1e-3, float(norm)
        opt.step()
        assert not torch.equal(a.full_tensor(), before), "DTensor parameter did not move"
        sd = opt.state_dict()
        # The same state refuses a parameter of another shape (another layout).
        c = torch.nn.Parameter(distribute_tensor(torch.randn(200, 64, device=dev), mesh,
                                                 [Shard(0)]))
        r2 = torch.nn.Parameter(distribute_tensor(torch.randn(300, device=dev), mesh,
                                                  [Replicate()]))
        expect("layout", lambda: FP8AdamW([c, r2], lr=1e-2).load_state_dict(sd),
               "same shard layout")
        if rank == 0:
            with open(out, "w") as f:
                json.dump({"errors": errors}, f)
    finally:
        dist.destroy_process_group()


def run_regroup(rank: int, world: int, device: str, store: str, out: str) -> None:
    """FP8 state moved between world sizes where every shard is whole 1x128
    groups (with shard padding: empty tail groups on the last rank): the
    sharded run's state, gathered whole, loads into the unsharded
    optimizer as the unsharded run's state, and the unsharded run's state
    loads into the sharded optimizer, which then steps as the sharded run
    does. Where a shard splits a group the load is refused."""
    mesh, dev = _init(rank, world, device, store)
    try:
        from torch.distributed.tensor import Shard, distribute_tensor

        from coat import _dist
        from coat.optim import FP8AdamW

        shapes = [(3, 256), (256,), (5, 128), (64, 128)]
        assert all(_dist.group_layout_matches_unsharded(s, world, G) for s in shapes)
        gen = torch.Generator().manual_seed(3)
        init = [torch.randn(s, generator=gen) for s in shapes]

        def sharded(ts):
            return [torch.nn.Parameter(distribute_tensor(t.to(dev), mesh, [Shard(0)]))
                    for t in ts]

        dist_p, plain_p = sharded(init), [torch.nn.Parameter(t.clone().to(dev)) for t in init]
        o_dist = FP8AdamW(dist_p, lr=LR, weight_decay=WD)
        o_plain = FP8AdamW(plain_p, lr=LR, weight_decay=WD)

        def step(params, opt, grads):
            for p, g in zip(params, grads):
                p.grad = (distribute_tensor(g.to(dev), mesh, [Shard(0)])
                          if _dist.is_dtensor(p) else g.to(dev))
            opt.step()

        for _ in range(3):
            grads = [torch.randn(s, generator=gen) for s in shapes]
            step(dist_p, o_dist, grads)
            step(plain_p, o_plain, grads)
        for pd, pp in zip(dist_p, plain_p):
            assert torch.equal(pd.full_tensor(), pp.detach()), "sharded and plain runs differ"

        # The sharded state, gathered whole, into an unsharded optimizer.
        sd = o_dist.state_dict()
        whole = {"param_groups": sd["param_groups"], "coat": sd["coat"],
                 "state": {k: {n: (v.full_tensor() if _dist.is_dtensor(v) else v)
                               for n, v in st.items()} for k, st in sd["state"].items()}}
        fresh_plain = [torch.nn.Parameter(p.detach().clone()) for p in plain_p]
        o_fp = FP8AdamW(fresh_plain, lr=LR, weight_decay=WD)
        o_fp.load_state_dict(whole)
        for a, b in zip(fresh_plain, plain_p):
            assert _state_equal(o_fp, a, o_plain, b), "sharded -> unsharded is not bit-exact"

        # The unsharded state into the sharded optimizer; both step on.
        fresh_dist = sharded([p.detach().cpu() for p in plain_p])
        o_fd = FP8AdamW(fresh_dist, lr=LR, weight_decay=WD)
        o_fd.load_state_dict(o_plain.state_dict())
        grads = [torch.randn(s, generator=gen) for s in shapes]
        step(fresh_dist, o_fd, grads)
        step(dist_p, o_dist, grads)
        for a, b in zip(fresh_dist, dist_p):
            assert torch.equal(a.full_tensor(), b.full_tensor()), \
                "unsharded -> sharded does not continue as the sharded run"
        assert o_fd.group_steps() == o_dist.group_steps()

        # A shard splitting a group (100 elements over 2 ranks: 50 each).
        errors = {}
        if world > 1:
            odd = torch.randn(100, generator=gen)
            o_odd = FP8AdamW([torch.nn.Parameter(odd.clone().to(dev))], lr=LR)
            step(o_odd.param_groups[0]["params"], o_odd, [torch.randn(100, generator=gen)])
            o_split = FP8AdamW(sharded([odd]), lr=LR)
            try:
                o_split.load_state_dict(o_odd.state_dict())
            except ValueError as e:
                errors["split"] = str(e)
            else:
                raise AssertionError("a state whose groups a shard would split loaded")
        if rank == 0:
            with open(out, "w") as f:
                json.dump({"errors": errors}, f)
    finally:
        dist.destroy_process_group()


def run_clip(rank: int, world: int, device: str, store: str, out: str, steps: int = 4) -> None:
    """FP8AdamW.clip_grad_norm_ on the FSDP2 model against
    torch.nn.utils.clip_grad_norm_ on the unsharded model fed the FSDP run's
    (gathered) gradients, then a step of each: the total norm over the whole
    model (every rank's shards), and parameters that stay together."""
    mesh, dev = _init(rank, world, device, store)
    try:
        from coat._tiny_llama import TinyLlama, shard
        from coat.optim import FP8AdamW

        max_norm = 0.05  # below the model's gradient norm: clips
        torch.manual_seed(0)
        init = TinyLlama(mlp_bias=True).to(dev)
        ref = copy.deepcopy(init)
        sharded = shard(copy.deepcopy(init), mesh)
        o_ref = FP8AdamW(ref.parameters(), lr=LR, weight_decay=WD)
        o_sh = FP8AdamW(sharded.parameters(), lr=LR, weight_decay=WD)
        log = {"world": world, "device": str(dev), "norm": [], "torch_norm": [],
               "max_abs_diff": []}
        for tokens in _batches(steps, 320, dev):
            o_sh.zero_grad()
            o_ref.zero_grad()
            sharded.loss(tokens).backward()
            ref.loss(tokens).backward()
            with torch.no_grad():
                for pr, ps in zip(ref.parameters(), sharded.parameters()):
                    pr.grad.copy_(ps.grad.full_tensor())
            norm = float(o_sh.clip_grad_norm_(max_norm))
            want = float(torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm))
            assert want > max_norm and abs(norm - want) <= 1e-5 * want, (norm, want)
            o_sh.step()
            o_ref.step()
            diff = 0.0
            with torch.no_grad():
                for pr, ps in zip(ref.parameters(), sharded.parameters()):
                    full = ps.full_tensor()
                    diff = max(diff, float((full - pr).abs().max()))
                    pr.copy_(full)  # the next step from the same parameters
            # An ulp of the factor moves an FP8 moment code by a step at most.
            assert diff <= LR / 8, diff
            log["norm"].append(norm)
            log["torch_norm"].append(want)
            log["max_abs_diff"].append(diff)
        if rank == 0:
            with open(out, "w") as f:
                json.dump(log, f)
    finally:
        dist.destroy_process_group()


class _WorldMesh:
    """A one-dimensional mesh over the default process group (no DeviceMesh
    needed)."""

    def get_group(self, dim: int):
        assert dim == 0
        return dist.group.WORLD


def run_total_norm(rank: int, world: int, device: str, store: str, out: str) -> None:
    """coat._dist.total_norm over gloo ranks: the parts of sharded tensors are
    reduced over their mesh dimension, whole tensors counted once."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world)
    try:
        from coat import _dist

        gen = torch.Generator().manual_seed(0)  # the same tensors on every rank
        sharded = [torch.randn(world, 37, generator=gen) * 10 ** i for i in range(3)]
        whole = torch.randn(70, generator=gen)
        everything = torch.cat([t.reshape(-1) for t in sharded] + [whole])
        for p in (2.0, 1.0, 3.0, math.inf):
            parts = {0: [torch.linalg.vector_norm(t[rank], p) for t in sharded],
                     None: [torch.linalg.vector_norm(whole, p)]}
            got = _dist.total_norm(parts, _WorldMesh(), p, "cpu")
            want = torch.linalg.vector_norm(everything, p)
            assert torch.allclose(got, want, rtol=1e-5, atol=0), (p, float(got), float(want))
        if rank == 0:
            with open(out, "w") as f:
                json.dump({"world": world, "ok": True}, f)
    finally:
        dist.destroy_process_group()
