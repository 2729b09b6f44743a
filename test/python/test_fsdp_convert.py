"""A converted model (coat.convert + coat.optim.FP8AdamW) under PyTorch FSDP2:
fully_shard per decoder layer and on the root, the compiled programs
reading the weights FSDP gathers (docs/fsdp.md, "A converted model").

- World size 2 on the CPU (gloo, CPU twins) against one process that runs
  both ranks' micro-batches of each step and averages their gradients:
  losses, gradients and parameters equal bit for bit at every step. The
  reduce-scatter sums two terms (either order gives the same float) and
  halves them (exact), every other value is computed from the same bits,
  and every shard holds whole 1x128 optimizer groups. One layer gathers its
  weights in bf16 (MixedPrecisionPolicy), one makes its attention inputs
  again in the backward, with the same bits.
- World size 4: the reduce-scatter adds four terms in its own order, so
  gradients agree to the last bits (bound and measurement in the test).
- The sharded (torch.distributed.checkpoint) and the full checkpoints of
  model and optimizer saved at world size 2 load at world size 1 (into the
  FSDP2 model, and the full one into the model without FSDP) bit-exactly,
  and every resumed run continues as the world-2 run did, bit for bit.
- World size 1 on a GPU (NCCL) against the same process's run without FSDP.
- Clear errors where FSDP2 is applied where the programs cannot read whole
  weights, and where a weight's storage is gone in the backward.

The distributed cases skip, with the reason, without FSDP2 (torch < 2.6,
e.g. CI's 1.13), without compiled kernels, and without the GPU for the
CUDA case. Each spawns one process per rank (_fsdp_convert_workers.py)."""

import os

import pytest

from conftest import skip_unless_fsdp_runs, torch_or_skip

torch = torch_or_skip()

import _fsdp_convert_workers as workers  # noqa: E402
import coat  # noqa: E402
from coat import llama  # noqa: E402

STEPS, MORE = 2, 1  # steps before the checkpoints, steps after


def _spawn(fn, world, tmp, *args):
    import torch.multiprocessing as mp

    os.environ["NCCL_NVLS_ENABLE"] = "0"  # children inherit it: NVLink multicast off
    out = str(tmp / f"{fn}.pt")
    mp.spawn(getattr(workers, fn), args=(world, *args, out), nprocs=world, join=True)
    return torch.load(out, weights_only=False)


def _differences(a, b):
    """The names whose tensors are not bitwise equal, with the largest
    absolute difference."""
    assert a.keys() == b.keys()
    return {n: float((a[n].double() - b[n].double()).abs().max()) for n in a
            if not torch.equal(a[n], b[n])}


@pytest.fixture(scope="module")
def ws2(cpu_cache, tmp_path_factory):
    """The world-size-2 CPU run with its checkpoints, and the reference."""
    skip_unless_fsdp_runs("cpu", 2)
    tmp = tmp_path_factory.mktemp("fsdp_convert")
    ckpt = tmp / "ckpt"
    ckpt.mkdir()
    # Also compiles the programs, before the ranks look for them.
    ref = workers.reference("cpu", torch.device("cpu"), STEPS + MORE, 2)
    run = _spawn("run_fsdp", 2, tmp, "cpu", str(tmp / "store"), str(ckpt), STEPS, MORE, False)
    return run["fsdp"], ref, ckpt, tmp


def test_world_size_2_matches_one_process_bit_for_bit(ws2):
    fsdp, ref, _, _ = ws2
    assert all(fsdp["resharded"]), "the layers kept their gathered weights after the forward"
    for t in range(STEPS + MORE):
        assert fsdp["loss"][t] == ref["loss"][t], (t, fsdp["loss"][t], ref["loss"][t])
        grads = _differences(fsdp["grad"][t], ref["grad"][t])
        assert not grads, f"step {t + 1}: gradients differ: {grads}"
        params = _differences(fsdp["param"][t], ref["param"][t])
        assert not params, f"step {t + 1}: parameters differ: {params}"
    assert all(g.abs().sum() > 0 for g in fsdp["grad"][0].values())


def test_world_size_4_gradients_within_the_summation_order(cpu_cache, tmp_path):
    """Four ranks: the reduce-scatter adds four gradients in another order
    than the one process accumulates them, so a gradient may differ in its
    last bits. Bound: 1e-6 of the tensor's largest gradient element (about
    8 f32 ulps of it); measured on the CPU: at most 7e-8 of it. The losses
    come from the same bits on the same data: equal. (One step only: from
    step 2 on the norm weights' shards, 64 elements, are not whole 1x128
    optimizer groups, docs/fsdp.md.)"""
    skip_unless_fsdp_runs("cpu", 4)
    ref = workers.reference("cpu", torch.device("cpu"), 1, 4)
    fsdp = _spawn("run_fsdp", 4, tmp_path, "cpu", str(tmp_path / "store"), "", 1, 0,
                  False)["fsdp"]
    assert fsdp["loss"][0] == ref["loss"][0]
    worst = {}
    for n, want in ref["grad"][0].items():
        d = float((fsdp["grad"][0][n] - want).abs().max() / want.abs().max())
        worst[n] = d
    print("world size 4, step 1: |gradient difference| / max |gradient|:",
          {n: f"{d:.1e}" for n, d in worst.items() if d})
    assert max(worst.values()) <= 1e-6, worst


def test_checkpoints_saved_at_2_load_at_1_and_training_continues(ws2):
    fsdp, _, ckpt, tmp = ws2
    saved = torch.load(ckpt / "full.pt", weights_only=False)
    log = _spawn("run_resume", 1, tmp, "cpu", str(tmp / "store1"), str(ckpt), STEPS, MORE, 2)
    assert set(log["loaded"]) == {"dcp", "full", "plain"}
    for how, loaded in log["loaded"].items():
        assert not _differences(loaded["model"], saved["model"]), how
        for name, state in saved["optim"]["state"].items():
            mine = loaded["optim"][name]
            for key, want in state.items():
                if key in ("step", "coat_layout"):
                    continue
                assert torch.equal(mine[key], want), (how, name, key)
    for how in log["loss"]:
        for t in range(MORE):
            assert log["loss"][how][t] == fsdp["loss"][STEPS + t], (how, t)
            diff = _differences(log["param"][how][t], fsdp["param"][STEPS + t])
            assert not diff, f"{how}: resumed step {t + 1} differs: {diff}"


def test_cuda_world_size_1_matches_the_run_without_fsdp(tmp_path):
    """On one GPU (NCCL): the FSDP2 run (which also saves both checkpoints)
    against the same model without FSDP in the same process. World size 1
    reduces nothing, so the runs agree bit for bit where the GPU's kernels
    are deterministic; attention's backward (torch SDPA) may not be. The
    test asserts step 1 (the loss within 1e-6, every gradient within 1e-2
    relative L2, from the same weights and data) and prints, per step,
    whether losses, gradients and parameters are bitwise equal."""
    skip_unless_fsdp_runs("cuda", 1)
    from coat import artifacts, programs

    cfg = llama.LlamaConfig(**workers.CONFIGS["cuda"])
    try:
        for c in (*programs.decoder_layer_configs(cfg.hidden, cfg.ffn, cfg.heads, cfg.kv_heads,
                                                   cfg.eps),
                  *programs.decoder_layer_configs(cfg.hidden, cfg.ffn, cfg.heads, cfg.kv_heads,
                                                   cfg.eps, recompute_output=True)[:1],
                  programs.CrossEntropyConfig(cfg.vocab)):
            artifacts.program(c)
    except RuntimeError as e:
        pytest.skip(str(e))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    run = _spawn("run_fsdp", 1, tmp_path, "cuda", str(tmp_path / "store"), str(ckpt), STEPS,
                 MORE, True)
    fsdp, ref = run["fsdp"], run["reference"]
    assert all(fsdp["resharded"])
    (a,), (b,) = fsdp["loss"][0], ref["loss"][0]
    assert abs(a - b) <= 1e-6 * abs(b), (a, b)
    for n, want in ref["grad"][0].items():
        got = fsdp["grad"][0][n]
        rel = float((got - want).float().norm() / want.float().norm().clamp_min(1e-30))
        assert rel <= 1e-2, (n, rel)
    for t in range(STEPS + MORE):
        print(f"world size 1 on the GPU, step {t + 1}: bitwise equal to the run without FSDP: "
              f"loss {fsdp['loss'][t] == ref['loss'][t]}, "
              f"gradients {not _differences(fsdp['grad'][t], ref['grad'][t])}, "
              f"parameters {not _differences(fsdp['param'][t], ref['param'][t])}")


def test_a_weight_freed_before_the_backward_is_an_error(cpu_cache):
    """What FSDP2 does to a layer's gathered weights after the forward
    (their storage resized to 0), done by hand with nothing to gather them
    again: the backward names the layer instead of reading freed memory.
    (The MLP program's backward reads its norm weight again; it keeps FP8
    copies of the projections' weights from the forward.)"""
    for dtype in (torch.float32, torch.bfloat16):  # a derived bf16 copy; the weight itself
        model = workers.build("cpu", "cpu").to(dtype)
        loss = workers.loss_of(model, workers.batches(1, 1, model.config.vocab)[0][0])
        w = model.model.layers[0].post_attention_layernorm.weight
        storage = w.untyped_storage() if hasattr(w, "untyped_storage") else w.storage()
        storage.resize_(0)
        with pytest.raises(RuntimeError, match=r"DecoderLayer model\.layers\.0 .*no storage"):
            loss.backward()


def test_a_sharded_weight_in_the_forward_is_an_error(cpu_cache, monkeypatch):
    """A weight still a DTensor when a converted layer runs (fully_shard on
    a part of the layer, whose own forward never runs, or tensor
    parallelism) is refused by name before any program reads it (DTensors
    faked here: the gloo case below has real ones)."""
    from coat import _dist

    cfg = llama.LlamaConfig(vocab=256, hidden=64, ffn=160, layers=1, heads=4, kv_heads=2)
    model = coat.convert(llama.LlamaForCausalLM(cfg))
    w = model.model.layers[0].mlp.up_proj.weight
    w.placements = ("Shard(dim=0)",)
    monkeypatch.setattr(_dist, "is_dtensor", lambda t: t is w)
    x = torch.randint(0, cfg.vocab, (2, 9))
    with pytest.raises(ValueError, match=r"DecoderLayer model\.layers\.0: parameter "
                                         r"mlp\.up_proj\.weight is a DTensor"):
        model(x[:, :-1], x[:, 1:])
    from coat.nn import linear_cross_entropy

    monkeypatch.setattr(_dist, "is_dtensor", lambda t: t is model.lm_head.weight)
    with pytest.raises(ValueError, match="lm_head alone"):
        linear_cross_entropy(torch.randn(4, 64), model.lm_head.weight, torch.zeros(4).long())


def test_fully_shard_inside_a_converted_layer_is_an_error(cpu_cache, tmp_path):
    skip_unless_fsdp_runs("cpu", 1)
    # Compiles the fused loss's program (coat.convert looks for it) here,
    # not in the rank; the errors come before any layer program is needed.
    workers.build("cpu", "cpu")
    errors = _spawn("run_misplaced", 1, tmp_path, "cpu", str(tmp_path / "store"))
    assert "fully_shard was applied to mlp inside it" in errors["mlp"]
    assert "fully_shard was applied to self_attn.q_proj inside it" in errors["q_proj"]
    assert "lm_head alone" in errors["lm_head"]
