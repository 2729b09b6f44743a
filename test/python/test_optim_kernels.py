"""FP8AdamW numerics through the REAL compiled adamw_step kernels (CPU twin,
and the GPU kernel where CUDA is available). Skipped, with the reason, until
the compiler produces them (scripts/demo.sh -> build/demo, or $COAT_KERNELS)."""

import io

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import coat  # noqa: E402
from coat import _paths  # noqa: E402
from coat.optim import FP8AdamW  # noqa: E402


def compiled_modules():
    mods = []
    for d in _paths.default_kernel_dirs():
        try:
            mods.append(coat.load(d))
        except coat.ManifestError:
            pass
    return [m for m in mods if m.find(op="adamw_step")]


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
                                expand_min=int(c.get("expand_min", 16))))
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
