"""FP8AdamW under PyTorch FSDP2 (fully_shard, DTensor parameters); see
docs/fsdp.md. Each distributed case spawns one process per rank
(torch.multiprocessing, file:// rendezvous) running _fsdp_workers.py:

- the FSDP2 run equals the unsharded FP8AdamW run bit for bit on every
  tensor whose shards are whole 1x128 groups (all of them at world size 1),
  and within 0.1*lr per step after the first on the others;
- FSDP storage shared with the optimizer and staged local shards give the
  same bits;
- the full (gathered, cpu_offload) and the sharded (torch.distributed
  .checkpoint) optimizer state_dicts round-trip bit-exactly and the resumed
  runs continue identically (COAT issue #20: the unsharded save fails there).

Skips, with the reason, without FSDP2 (torch < 2.6, e.g. CI's 1.13), without
compiled kernels, and where the GPUs for a world size are missing."""

import json
import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from conftest import skip_unless_fsdp_runs  # noqa: E402
from coat import _dist  # noqa: E402


def test_shard_group_alignment_rule():
    # Shards start at multiples of ceil(rows/world)*cols elements.
    assert _dist.padded_shard_numel((256, 256), 2) == 128 * 256
    assert _dist.padded_shard_numel((5, 100), 2) == 300
    assert _dist.padded_shard_numel((688,), 2) == 344
    assert _dist.group_layout_matches_unsharded((688,), 1, 128)
    assert not _dist.group_layout_matches_unsharded((688,), 2, 128)
    assert _dist.group_layout_matches_unsharded((688, 256), 2, 128)
    assert _dist.group_layout_matches_unsharded((256, 688), 2, 128)
    assert not _dist.group_layout_matches_unsharded((5, 100), 2, 128)


def _spawn(fn, world, device, tmp_path, *extra):
    import torch.multiprocessing as mp

    import _fsdp_workers  # noqa: F401  (importable in the children: sys.path travels)

    os.environ["NCCL_NVLS_ENABLE"] = "0"  # children inherit it: NVLink multicast off
    out = str(tmp_path / "result.json")
    store = str(tmp_path / "store")
    mp.spawn(getattr(_fsdp_workers, fn), args=(world, device, store, *extra, out),
             nprocs=world, join=True)
    with open(out) as f:
        return json.load(f)


CASES = [("cuda", 1), ("cuda", 2), ("cpu", 1), ("cpu", 2)]


@pytest.mark.parametrize("device,world", CASES, ids=[f"{d}-ws{w}" for d, w in CASES])
def test_fsdp2_matches_unsharded_and_state_dict_round_trips(device, world, tmp_path):
    skip_unless_fsdp_runs(device, world)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    log = _spawn("run_compare", world, device, tmp_path, str(ckpt))
    print(json.dumps({k: log[k] for k in ("world", "device", "max_abs_diff_aligned",
                                          "max_abs_diff_unaligned", "max_grad_diff")}))
    assert log["steps"] == len(log["max_abs_diff_aligned"])
    assert max(log["max_abs_diff_aligned"]) == 0.0
    for a, b in zip(log["loss_fsdp"], log["loss_ref"]):
        assert abs(a - b) <= 1e-3 * abs(b), (log["loss_fsdp"], log["loss_ref"])
    if world == 1:
        assert max(log["max_abs_diff_unaligned"]) == 0.0
    else:
        assert not all(log["aligned"].values()), "the model should have unaligned shards"


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_bad_dtensor_inputs_raise(device, tmp_path):
    skip_unless_fsdp_runs(device, 1)
    log = _spawn("run_validation", 1, device, tmp_path)
    assert {"shard1", "layout"} <= set(log["errors"])


@pytest.mark.parametrize("device,world", [("cpu", 2), ("cuda", 2)], ids=["cpu-ws2", "cuda-ws2"])
def test_fp8_state_moves_between_world_sizes_where_shards_are_whole_groups(device, world,
                                                                          tmp_path):
    """Saved at world size 2, loaded unsharded, and back, bit-exactly, for
    shards of whole 1x128 groups (shard padding included); refused with a
    ValueError where a shard would split a group (docs/fsdp.md)."""
    skip_unless_fsdp_runs(device, world)
    log = _spawn("run_regroup", world, device, tmp_path)
    assert "whole 1x128 groups" in log["errors"]["split"]


@pytest.mark.parametrize("device,world", CASES, ids=[f"{d}-ws{w}" for d, w in CASES])
def test_fsdp2_global_clipping_matches_torch_clip(device, world, tmp_path):
    """FP8AdamW.clip_grad_norm_ over FSDP2 shards: the whole model's norm (as
    torch's clip of the gathered gradients gives it, to 1e-5), and steps
    within an FP8 code step of torch's clip followed by step()."""
    skip_unless_fsdp_runs(device, world)
    log = _spawn("run_clip", world, device, tmp_path)
    print(json.dumps(log))
    assert len(log["norm"]) == 4


def test_total_norm_reduces_shards_over_their_mesh_dimension(tmp_path):
    """The reduction behind clip_grad_norm_ for DTensor parameters, on two
    gloo ranks (no FSDP2 needed): the norm of every rank's shards and of the
    replicated tensors once, for the 1-, 2-, 3- and inf-norms."""
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("gloo is not available in this torch")
    assert _spawn("run_total_norm", 2, "cpu", tmp_path)["ok"]
