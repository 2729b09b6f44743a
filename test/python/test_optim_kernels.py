"""FP8AdamW numerics through the REAL compiled adamw_step kernels (CPU twin,
and the GPU kernel where CUDA is available). Skipped, with the reason, until
the compiler produces them (scripts/demo.sh -> build/demo, or $COAT_KERNELS)."""

import io
import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from coat import artifacts  # noqa: E402
from coat.optim import FP8AdamW  # noqa: E402


def compiled_modules():
    return [m for m in artifacts.modules() if m.find(op="adamw_step")]


MODULES = compiled_modules()
needs_kernels = pytest.mark.skipif(
    not MODULES, reason="no compiled adamw_step kernels: run scripts/demo.sh (writes build/demo) "
                        "or set COAT_KERNELS")


def configs():
    out = []
    for m in MODULES:
        for k in m.find(op="adamw_step"):
            c = k.config
            if c.get("param") == "f32":
                out.append(dict(m_format=c["m"]["format"], v_format=c["v"]["format"],
                                expand=(bool(c["m"]["expand"]), bool(c["v"]["expand"])),
                                group_size=int(c["group_size"]), mode=c["mode"],
                                expand_min=int(c.get("expand_min", 16)),
                                stochastic_moments=bool(c["stochastic_moments"])))
    return out or [dict()]


def model(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(33, 17), torch.nn.Linear(17, 5)).to(device)


def devices():
    out = ["cpu"]
    if torch.cuda.is_available():
        out.append("cuda")
    return out


@needs_kernels
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("cfg", configs())
def test_first_step_matches_torch_adamw(device, cfg):
    # Step 1 uses the unquantized m', v' (both start at 0), so the parameter
    # update equals torch.optim.AdamW's up to f32 rounding.
    ref, ours = model(device), model(device)
    o_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    o_ours = FP8AdamW(ours.parameters(), lr=1e-2, weight_decay=0.1, kernels=MODULES, **cfg)
    x = torch.randn(8, 33, device=device)
    for mdl in (ref, ours):
        mdl(x).square().mean().backward()
    o_ref.step()
    o_ours.step()
    for a, b in zip(ref.parameters(), ours.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)


@needs_kernels
@pytest.mark.parametrize("device", devices())
def test_training_tracks_torch_adamw_and_resumes_bit_exactly(device):
    ref, ours, resumed = model(device), model(device), model(device)
    o_ref = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    o_ours = FP8AdamW(ours.parameters(), lr=1e-3, kernels=MODULES)
    torch.manual_seed(1)
    xs = [torch.randn(8, 33, device=device) for _ in range(12)]
    snapshot = None
    for i, x in enumerate(xs):
        for mdl, opt in ((ref, o_ref), (ours, o_ours)):
            opt.zero_grad()
            mdl(x).square().mean().backward()
            opt.step()
        if i == 5:
            buf = io.BytesIO()
            torch.save({"model": ours.state_dict(), "opt": o_ours.state_dict()}, buf)
            snapshot = buf.getvalue()
    for a, b in zip(ref.parameters(), ours.parameters()):
        torch.testing.assert_close(b, a, rtol=0.05, atol=2e-4)  # FP8 moments: close, not equal
    sd = torch.load(io.BytesIO(snapshot))
    resumed.load_state_dict(sd["model"])
    o_res = FP8AdamW(resumed.parameters(), lr=1e-3, kernels=MODULES)
    o_res.load_state_dict(sd["opt"])
    for x in xs[6:]:
        o_res.zero_grad()
        resumed(x).square().mean().backward()
        o_res.step()
    for a, b in zip(ours.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def bf16_kernel(**flags):
    want = {"param": "bf16", "stochastic_param": False, "stochastic_moments": False, **flags}
    return any(m.find(op="adamw_step", **want) for m in MODULES)


@needs_kernels
@pytest.mark.parametrize("device", devices())
def test_stochastic_rounding_of_bf16_params_does_not_stall_small_updates(device):
    """Updates of a quarter of a bf16 ulp: round to nearest leaves the
    parameters where they are; stochastic rounding moves them, on average,
    as far as the f32 parameters move (here within 3% over 64 steps of 4096
    elements)."""
    if not bf16_kernel(stochastic_param=True):
        pytest.skip("no compiled bf16 adamw_step kernel with stochastic_param")
    n, steps = 4096, 64

    def run(dtype, **opts):
        p = torch.nn.Parameter(torch.ones(n, device=device, dtype=dtype))
        opt = FP8AdamW([p], lr=2 ** -9 / 4, weight_decay=0.0, kernels=MODULES, **opts)
        for _ in range(steps):
            p.grad = torch.ones_like(p)  # Adam's update: lr each step
            opt.step()
        return p.detach().float()

    moved32 = 1 - run(torch.float32).mean().item()
    nearest = run(torch.bfloat16)
    stochastic = run(torch.bfloat16, stochastic_params=True, seed=5)
    assert moved32 == pytest.approx(steps * 2 ** -11, rel=1e-3)
    assert torch.equal(nearest, torch.ones(n, device=device))
    assert 1 - stochastic.mean().item() == pytest.approx(moved32, rel=0.03)
    # Every value is a bf16 neighbour of the path: 1 or below by whole ulps.
    assert set(torch.unique(stochastic).tolist()) <= {1 - k * 2 ** -8 for k in range(64)}


@needs_kernels
@pytest.mark.parametrize("device", devices())
def test_stochastic_rounding_is_reproducible_from_the_seed_and_resumes(device):
    """The same seed gives the same run; another seed another one; a run
    resumed from a state_dict continues bit for bit (the seed is saved)."""
    if not bf16_kernel(stochastic_param=True, stochastic_moments=True):
        pytest.skip("no compiled bf16 adamw_step kernel with stochastic rounding")

    def make(seed):
        torch.manual_seed(0)
        mdl = torch.nn.Linear(64, 48).to(device=device, dtype=torch.bfloat16)
        opt = FP8AdamW(mdl.parameters(), lr=1e-3, kernels=MODULES, stochastic_params=True,
                       stochastic_moments=True, seed=seed)
        return mdl, opt

    torch.manual_seed(3)
    xs = [torch.randn(16, 64, device=device, dtype=torch.bfloat16) for _ in range(8)]

    def train(mdl, opt, batches):
        for x in batches:
            opt.zero_grad()
            mdl(x).float().square().mean().backward()
            opt.step()

    (a, oa), (b, ob), (c, oc) = make(7), make(7), make(8)
    train(a, oa, xs[:4])
    buf = io.BytesIO()
    torch.save({"model": a.state_dict(), "opt": oa.state_dict()}, buf)
    train(a, oa, xs[4:])
    train(b, ob, xs)
    train(c, oc, xs)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not all(torch.equal(p, q) for p, q in zip(a.parameters(), c.parameters()))
    sd = torch.load(io.BytesIO(buf.getvalue()))
    r, orr = make(123)  # the saved seed replaces this one
    r.load_state_dict(sd["model"])
    orr.load_state_dict(sd["opt"])
    train(r, orr, xs[4:])
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), r.parameters()))


def test_stochastic_rounding_options_are_checked():
    with pytest.raises(ValueError, match="mode='fixed'"):
        FP8AdamW([torch.nn.Parameter(torch.ones(4))], stochastic_moments=True, mode="reference")
    with pytest.raises(ValueError, match="seed"):
        FP8AdamW([torch.nn.Parameter(torch.ones(4))], stochastic_params=True, seed=-1)


def test_kernels_of_manifests_without_rounding_keys_round_to_nearest(tmp_path):
    """A manifest written before stochastic rounding existed (no
    stochastic_* config keys) serves the round-to-nearest configuration and
    no stochastic one."""
    src = next((os.path.dirname(m.manifest.path) for m in MODULES
                if m.find(op="adamw_step", param="f32", stochastic_moments=True)), None)
    if src is None:
        pytest.skip("no compiled module with a stochastic-rounding adamw_step kernel")
    for f in os.listdir(src):
        shutil.copy(os.path.join(src, f), tmp_path / f)
    doc = json.loads((tmp_path / "manifest.json").read_text())
    doc["kernels"] = [k for k in doc["kernels"] if not k["config"].get("stochastic_param")
                      and not k["config"].get("stochastic_moments")]
    for k in doc["kernels"]:
        del k["config"]["stochastic_param"], k["config"]["stochastic_moments"]
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    p = torch.nn.Parameter(torch.ones(300))
    assert FP8AdamW([p], kernels=str(tmp_path)).kernel_for("f32", "cpu")
    sr = FP8AdamW([p], kernels=str(tmp_path), stochastic_moments=True, seed=1)
    with pytest.raises(RuntimeError, match="no compiled adamw_step kernel"):
        sr.kernel_for("f32", "cpu")
