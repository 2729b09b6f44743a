"""FP8AdamW(master_weights=True): bf16 parameters with f32 master copies, on
CPU tensors through the compiled CPU twins (skipped without them) and, where
there is a GPU, on CUDA tensors through the kernels, with layers wide enough
that each bucket spans many blocks.

The independent reference is FP8AdamW on f32 parameters, itself checked
against the host library (test_adamw_kernel_numerics.py): a bf16 model
whose parameters and gradients hold the same values as an f32 model's must
give, step after step, masters bit-equal to the f32 parameters, bf16
parameters equal to those rounded to nearest, and the same FP8 moments. The
gradients are made bf16 values by construction (the f32 model's gradient is
rounded to bf16 before its step), as the bf16 model's are."""

import copy

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from coat import _dtypes, artifacts  # noqa: E402
from coat.optim import FP8AdamW  # noqa: E402
from test_optim_grads import Stack  # noqa: E402

MODULES = [m for m in artifacts.modules() if m.find(op="adamw_step", master=True)]
needs_kernels = pytest.mark.skipif(
    not MODULES, reason="no compiled adamw_step kernels with a master copy: run "
                        "scripts/demo.sh (writes build/demo) or set COAT_KERNELS")

COMMON = dict(lr=1e-2, weight_decay=0.1, bucket_mb=None)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
#: Layer width per device: on the GPU about a million elements a bucket.
WIDTH = {"cpu": 64, "cuda": 512}


def models(seed=0, device="cpu"):
    """A bf16 Stack and an f32 one with the same (bf16) values."""
    torch.manual_seed(seed)
    low = Stack(width=WIDTH[device], dtype=torch.bfloat16).to(device)
    return low, copy.deepcopy(low).float()


def optimizers(master=True, seed=0, device="cpu"):
    """The bf16 model with its FP8AdamW (masters or not) and the f32 model
    with its own."""
    low, full = models(seed, device)
    return (low, FP8AdamW(low.parameters(), master_weights=master, kernels=MODULES, **COMMON),
            full, FP8AdamW(full.parameters(), kernels=MODULES, **COMMON))


def grads_of(model, x):
    model.zero_grad(set_to_none=True)
    model(x.to(next(model.parameters()).dtype)).float().square().mean().backward()


def bits(t):
    return t.detach().contiguous().view(torch.int32 if t.dtype == torch.float32 else torch.int16)


def assert_equivalent(low, opt_low, full, opt_full):
    """The bf16 model with masters against the f32 model, bit for bit."""
    for (name, p), q in zip(low.named_parameters(), full.parameters()):
        master = opt_low.state[p]["master_param"]
        assert torch.equal(bits(master), bits(q)), name
        assert torch.equal(bits(p), bits(q.to(torch.bfloat16))), name
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(_dtypes.codes_as_uint8(opt_low.state[p][key]),
                               _dtypes.codes_as_uint8(opt_full.state[q][key])), (name, key)
        for key in ("scale_exp_avg", "scale_exp_avg_sq"):
            assert torch.equal(bits(opt_low.state[p][key]), bits(opt_full.state[q][key])), \
                (name, key)


def step_both(low, opt_low, full, opt_full, x, clip=None):
    grads_of(low, x)
    grads_of(full, x)
    # The f32 model takes the bf16 model's gradients (as f32 values).
    for p, q in zip(low.parameters(), full.parameters()):
        if p.grad is not None:
            q.grad.copy_(p.grad.float())
    if clip is not None:
        opt_low.clip_grad_norm_(clip)
        opt_full.clip_grad_norm_(clip)
    opt_low.step()
    opt_full.step()


def batch(gen, device):
    return torch.randn(8, WIDTH[device], generator=gen).to(device)


@needs_kernels
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("clip", [None, 0.02])
def test_master_steps_equal_f32_steps(clip, device):
    low, opt_low, full, opt_full = optimizers(device=device)
    gen = torch.Generator().manual_seed(1)
    for _ in range(6):
        step_both(low, opt_low, full, opt_full, batch(gen, device), clip)
        assert_equivalent(low, opt_low, full, opt_full)
    # The masters moved by less than a bf16 ulp somewhere: they are not the
    # bf16 parameters (else the test would not tell the two apart).
    assert any(not torch.equal(opt_low.state[p]["master_param"], p.float())
               for p in low.parameters())


@needs_kernels
@pytest.mark.parametrize("device", DEVICES)
def test_param_dtype_keeps_the_f32_start(device):
    """param_dtype=torch.bfloat16: f32 parameters (values between bf16
    grid points) become bf16 ones, their masters the f32 values bit for bit,
    and the steps are the f32 model's."""
    torch.manual_seed(0)
    full = Stack(width=WIDTH[device]).to(device)
    low = copy.deepcopy(full)
    opt_low = FP8AdamW(low.parameters(), master_weights=True, param_dtype=torch.bfloat16,
                       kernels=MODULES, **COMMON)
    opt_full = FP8AdamW(full.parameters(), kernels=MODULES, **COMMON)
    assert all(p.dtype == torch.bfloat16 for p in low.parameters())
    # Off the grid: a cast-first model would have started elsewhere.
    assert any(not torch.equal(q, q.to(torch.bfloat16).float()) for q in full.parameters())
    assert_equivalent(low, opt_low, full, opt_full)
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        step_both(low, opt_low, full, opt_full, batch(gen, device))
        assert_equivalent(low, opt_low, full, opt_full)


def test_param_dtype_checks():
    _, full = models()
    with pytest.raises(ValueError, match="needs master_weights=True"):
        FP8AdamW(full.parameters(), param_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="param_dtype must be torch.bfloat16"):
        FP8AdamW(full.parameters(), master_weights=True, param_dtype=torch.float16)
    full(torch.randn(2, 64)).sum().backward()
    with pytest.raises(ValueError, match="has an f32 gradient"):
        FP8AdamW(full.parameters(), master_weights=True, param_dtype=torch.bfloat16)


@needs_kernels
def test_bf16_steps_without_masters_differ():
    """Without masters the same bf16 model rounds every step's update
    (the test above would fail on it)."""
    low, opt_low, full, opt_full = optimizers(master=False)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        step_both(low, opt_low, full, opt_full, torch.randn(8, 64, generator=gen))
    assert any(not torch.equal(p, q.to(torch.bfloat16))
               for p, q in zip(low.parameters(), full.parameters()))


@needs_kernels
@pytest.mark.parametrize("device", DEVICES)
def test_in_place_change_reaches_the_master(device):
    low, opt_low, full, opt_full = optimizers(device=device)
    gen = torch.Generator().manual_seed(2)
    step_both(low, opt_low, full, opt_full, batch(gen, device))
    # Something outside the optimizer sets a weight (e.g. the model's
    # load_state_dict); the f32 model gets the same bf16 values.
    with torch.no_grad():
        new = torch.randn_like(low.layers[1].weight)
        low.layers[1].weight.copy_(new)
        full.layers[1].weight.copy_(new.float())
    step_both(low, opt_low, full, opt_full, batch(gen, device))
    assert_equivalent(low, opt_low, full, opt_full)


@needs_kernels
def test_state_dict_round_trip_keeps_masters():
    low, opt, full, opt_full = optimizers()
    gen = torch.Generator().manual_seed(3)
    for _ in range(2):
        step_both(low, opt, full, opt_full, torch.randn(8, 64, generator=gen))
    saved_model = copy.deepcopy(low.state_dict())
    saved = copy.deepcopy(opt.state_dict())
    assert all("master_param" in st for st in saved["state"].values())
    # Resume: a fresh model and optimizer, the model's state first.
    torch.manual_seed(9)
    again = Stack(dtype=torch.bfloat16)
    again.load_state_dict(saved_model)
    opt2 = FP8AdamW(again.parameters(), master_weights=True, kernels=MODULES, **COMMON)
    opt2.load_state_dict(saved)
    for p, q in zip(low.parameters(), again.parameters()):
        assert torch.equal(bits(opt.state[p]["master_param"]), bits(opt2.state[q]["master_param"]))
    x = torch.randn(8, 64, generator=gen)
    step_both(again, opt2, full, opt_full, x)
    assert_equivalent(again, opt2, full, opt_full)


@needs_kernels
def test_state_without_masters_loads():
    """A state_dict saved without masters (or by a bf16 optimizer without
    them) loads: the masters are the parameters' values."""
    low, _ = models()
    plain = FP8AdamW(low.parameters(), kernels=MODULES, **COMMON)
    saved = copy.deepcopy(plain.state_dict())
    low2, _ = models()
    opt = FP8AdamW(low2.parameters(), master_weights=True, kernels=MODULES, **COMMON)
    opt.load_state_dict(saved)
    for p in low2.parameters():
        assert torch.equal(opt.state[p]["master_param"], p.float())
    # The other way round: masters this optimizer does not keep.
    with pytest.raises(ValueError, match="master_param"):
        plain.load_state_dict(opt.state_dict())


def test_master_weights_checks():
    low, full = models()
    with pytest.raises(ValueError, match="master_weights and stochastic_params"):
        FP8AdamW(low.parameters(), master_weights=True, stochastic_params=True)
    # f32 parameters are their own master: nothing kept.
    opt = FP8AdamW(full.parameters(), master_weights=True, kernels=MODULES or None, **COMMON)
    assert all("master_param" not in opt.state[p] for p in full.parameters())
    opt = FP8AdamW(low.parameters(), master_weights=True, kernels=MODULES or None, **COMMON)
    for p in low.parameters():
        master = opt.state[p]["master_param"]
        assert master.dtype == torch.float32 and master.shape == p.shape
        assert torch.equal(master, p.float())
