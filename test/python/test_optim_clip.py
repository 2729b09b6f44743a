"""FP8AdamW.clip_grad_norm_: global gradient-norm clipping whose multiply
happens in the next step's kernel (the gradient scale of coat.adamw_step),
against torch.nn.utils.clip_grad_norm_ followed by step(), on CPU tensors
through the compiled CPU twins (skipped without them).

Tolerances. The clipping factor is torch's formula, clamp(max_norm / (norm +
1e-6), max=1), but the total norm is summed per bucket buffer instead of per
parameter, so for f32 gradients it (and the factor) may differ from torch's
in the last bits: the norms agree to 1e-6 relative. Given the same factor,
the fused step is bit-exact with multiplying f32 gradients in place and then
stepping (both form the f32 product g * s). With bf16 gradients torch's
norm and factor are bf16 and it rounds g * s to bf16, while the kernel takes
the f32 product of the f32 factor: the norms agree to bf16 precision and the
parameters drift apart by a bf16 ulp here and there (an FP8 moment code a
step apart), see test_clip_then_step_tracks_torch_clip_then_step."""

import copy
import json
import os
import shutil
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from coat import artifacts
from coat.optim import _grads as _optim_grads  # noqa: E402
from coat.optim import FP8AdamW  # noqa: E402
from test_optim_grads import SMALL_MB, Stack, assert_same_state, loss_of  # noqa: E402

MODULES = [m for m in artifacts.modules() if m.find(op="adamw_step")]
SCALED = [m for m in MODULES if m.find(op="adamw_step", grad_scale=True)]
needs_kernels = pytest.mark.skipif(
    not SCALED, reason="no compiled adamw_step kernels with grad_scale: run scripts/demo.sh "
                       "(writes build/demo) or set COAT_KERNELS")

MAX_NORM = 0.02  # well below the test model's gradient norm: clipping is active
LAYOUTS = {"buckets": dict(bucket_mb=SMALL_MB), "one-bucket": dict(bucket_mb=None),
           "persistent": dict(persistent_grads=True)}


def pair(dtype=torch.float32, seed=0, **kw):
    torch.manual_seed(seed)
    a = Stack(dtype=dtype)
    b = copy.deepcopy(a)
    common = dict(lr=1e-2, weight_decay=0.1, kernels=MODULES, **kw)
    return a, FP8AdamW(a.parameters(), **common), b, FP8AdamW(b.parameters(), **common)


def backward(model, opt, xs):
    opt.zero_grad()
    for x in xs:
        loss_of(model, x).backward()


def batches(steps, micro=1, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(8, 64, generator=gen) for _ in range(micro)] for _ in range(steps)]


def scale_grads(model, factor):
    """The clip's factor applied to ``model``'s gradients by hand (the
    unfused path the fused step is compared with)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(factor)


def scale_of(norm, max_norm=MAX_NORM):
    return torch.clamp(max_norm / (norm + 1e-6), max=1.0)


# ---- against torch's clip -------------------------------------------------------------


@needs_kernels
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("micro", [1, 3], ids=["one-backward", "accumulated"])
def test_fused_clip_is_bit_exact_with_scaling_f32_gradients_in_place(layout, micro):
    """The same factor applied in the kernel or to the gradients first: the
    same bits, over buckets, persistent buffers and gradient accumulation."""
    a, oa, b, ob = pair(**LAYOUTS[layout])
    for xs in batches(3, micro):
        backward(a, oa, xs)
        backward(b, ob, xs)
        norm = oa.clip_grad_norm_(MAX_NORM)
        assert float(norm) > MAX_NORM  # clips
        s = oa._grad_scale.clone()
        scale_grads(b, s)
        oa.step()
        ob.step()
        assert_same_state(oa, a, ob, b)


def same_gradients(a, b):
    """b's gradients := a's (the trajectories part by FP8 rounding; the
    comparison is of one step on the same gradients)."""
    with torch.no_grad():
        for p, q in zip(a.parameters(), b.parameters()):
            if p.grad is not None:
                q.grad.copy_(p.grad)


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_clip_then_step_tracks_torch_clip_then_step(dtype, layout):
    """opt.clip_grad_norm_ + step() against torch.nn.utils.clip_grad_norm_ +
    step() on the same gradients each step (module docstring: the norms to
    1e-6 relative for f32, the parameters to a small part of an update)."""
    a, oa, b, ob = pair(dtype, **LAYOUTS[layout])
    start = [p.detach().float().clone() for p in a.parameters()]
    for t, xs in enumerate(batches(4)):
        backward(a, oa, xs)
        backward(b, ob, xs)
        same_gradients(a, b)
        ours = oa.clip_grad_norm_(MAX_NORM)
        theirs = torch.nn.utils.clip_grad_norm_(b.parameters(), MAX_NORM)
        assert ours.dtype == torch.float32 and ours.shape == ()
        # bf16: torch's norm is a bf16 (of bf16 per-tensor norms).
        rtol = 1e-6 if dtype == torch.float32 else 2 ** -7
        torch.testing.assert_close(ours, theirs.float(), rtol=rtol, atol=0)
        oa.step()
        ob.step()
        # f32: an ulp of the factor can move an element's FP8 moment code by
        # a step, changing that element's update (lr 1e-2) by a few percent;
        # the rest agree to 1e-6. bf16: torch's factor is a bf16 of a bf16
        # norm, ours an f32, so the gradients differ by up to 2^-8 relative,
        # and the moments drift apart over the steps: by step 4 several
        # percent of the elements are an ulp or more off, on average under
        # 2% of an update.
        pa = torch.cat([p.detach().float().reshape(-1) for p in a.parameters()])
        pb = torch.cat([p.detach().float().reshape(-1) for p in b.parameters()])
        d = (pa - pb).abs()
        assert float(d.max()) <= 1e-2 / 8, f"step {t + 1}: {float(d.max())}"
        if dtype == torch.float32:
            assert float((d <= 1e-6).float().mean()) >= 0.99, f"step {t + 1}"
        else:
            assert float(d.mean()) <= 0.02 * 1e-2, f"step {t + 1}"
        with torch.no_grad():
            for p, q in zip(a.parameters(), b.parameters()):
                q.copy_(p)  # the next step from the same parameters
    moved = max(float((p.float() - s).abs().max()) for p, s in zip(a.parameters(), start))
    assert moved > 1e-2  # 4 steps of lr 1e-2


@needs_kernels
@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")], ids=["l2", "l1", "inf"])
def test_norm_types_match_torch(norm_type):
    a, oa, b, _ = pair(bucket_mb=SMALL_MB)
    (xs,) = batches(1)
    backward(a, oa, xs)
    backward(b, _, xs)
    ours = oa.clip_grad_norm_(MAX_NORM, norm_type=norm_type)
    theirs = torch.nn.utils.clip_grad_norm_(b.parameters(), MAX_NORM, norm_type=norm_type)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0)
    torch.testing.assert_close(oa._grad_scale, scale_of(theirs), rtol=1e-6, atol=0)


@needs_kernels
def test_a_norm_below_max_norm_leaves_the_step_unscaled():
    """clamp(..., max=1): a step after a clip that does not clip is the
    unclipped step, bit for bit."""
    a, oa, b, ob = pair()
    for xs in batches(2):
        backward(a, oa, xs)
        backward(b, ob, xs)
        norm = oa.clip_grad_norm_(1e3)
        assert float(norm) < 1e3 and float(oa._grad_scale) == 1.0
        oa.step()
        ob.step()
        assert_same_state(oa, a, ob, b)


# ---- when the scale applies -----------------------------------------------------------


@needs_kernels
def test_the_scale_serves_one_step_and_zero_grad_drops_it():
    """The next step() consumes the clip; a later step without a clip is
    unscaled; a clip followed by zero_grad applies to nothing."""
    a, oa, b, ob = pair()
    (x1,), (x2,), (x3,) = batches(3)
    backward(a, oa, x1)
    backward(b, ob, x1)
    oa.clip_grad_norm_(MAX_NORM)
    scale_grads(b, oa._grad_scale)
    oa.step()
    ob.step()
    for xs in (x2, x3):  # no clip: plain steps
        backward(a, oa, xs)
        backward(b, ob, xs)
        if xs is x3:
            oa.clip_grad_norm_(MAX_NORM)  # then dropped by the zero_grad below
            oa.zero_grad()
            ob.zero_grad()
            loss_of(a, xs[0]).backward()
            loss_of(b, xs[0]).backward()
        oa.step()
        ob.step()
        assert_same_state(oa, a, ob, b)


@needs_kernels
def test_a_clip_a_cuda_graph_captured_scales_every_later_step(monkeypatch):
    """Capture faked (no GPU here): a clip recorded in a graph arms every
    later step with the scale tensor the replays write, which keeps its
    address; zero_grad does not disarm it."""
    a, oa, b, ob = pair(persistent_grads=True)
    (x0,), (x1,), (x2,) = batches(3)
    backward(a, oa, x0)
    monkeypatch.setattr(_optim_grads, "_capturing", lambda device: True)
    oa.clip_grad_norm_(MAX_NORM)
    monkeypatch.setattr(_optim_grads, "_capturing", lambda device: False)
    scale = oa._grad_scale
    oa.zero_grad(set_to_none=False)
    for xs, s in ((x1, 0.25), (x2, 0.5)):
        backward(a, oa, xs)
        backward(b, ob, xs)
        scale.fill_(s)  # what a replay of the captured clip writes
        scale_grads(b, s)
        oa.step()
        ob.step()
        assert oa._grad_scale is scale
        assert_same_state(oa, a, ob, b)


def test_step_in_backward_refuses_global_clipping():
    m = Stack()
    opt = FP8AdamW(m.parameters(), kernels=[], step_in_backward=True)
    with pytest.raises(RuntimeError, match="bucket_max_norm"):
        opt.clip_grad_norm_(1.0)


def test_bad_norm_types_raise():
    opt = FP8AdamW(Stack().parameters(), kernels=[])
    for bad in (0.0, -2.0):
        with pytest.raises(ValueError, match="norm_type"):
            opt.clip_grad_norm_(1.0, norm_type=bad)


def test_the_norm_needs_no_kernel_and_counts_missing_gradients_as_zero():
    """The norm is over every gradient of the optimizer's parameters (those
    without one count as zero, as step() treats them); it runs before any
    kernel is needed."""
    m = Stack()
    opt = FP8AdamW(m.parameters(), kernels=[], bucket_mb=SMALL_MB)
    loss_of(m, torch.randn(4, 64)).backward()
    assert m.unused.grad is None
    ref = copy.deepcopy(m)
    for p, q in zip(m.parameters(), ref.parameters()):
        q.grad = None if p.grad is None else p.grad.clone()
    norm = opt.clip_grad_norm_(MAX_NORM)
    torch.testing.assert_close(norm, torch.nn.utils.clip_grad_norm_(ref.parameters(), 1e9),
                               rtol=1e-6, atol=0)
    assert m.unused.grad is not None and torch.count_nonzero(m.unused.grad) == 0
    # The gradients themselves are untouched until the step.
    for p, q in zip(m.parameters(), ref.parameters()):
        if q.grad is not None:
            assert torch.equal(p.grad, q.grad)


def test_non_finite_norms():
    m = Stack()
    opt = FP8AdamW(m.parameters(), kernels=[])
    loss_of(m, torch.randn(4, 64)).backward()
    with torch.no_grad():
        m.layers[1].weight.grad[0, 0] = float("inf")
    norm = opt.clip_grad_norm_(1.0)
    assert norm.isinf() and float(opt._grad_scale) == 0.0  # torch's rule: 1 / inf
    with pytest.raises(RuntimeError, match="non-finite"):
        opt.clip_grad_norm_(1.0, error_if_nonfinite=True)


# ---- with the other options ---------------------------------------------------------


@needs_kernels
def test_per_bucket_clipping_measures_the_globally_scaled_gradient():
    """bucket_max_norm after the global clip: each bucket's norm is taken of
    its gradient times the global factor, as clipping the globally clipped
    gradients again would."""
    a, oa, b, ob = pair(bucket_mb=SMALL_MB, bucket_max_norm=MAX_NORM / 3)
    for xs in batches(2):
        backward(a, oa, xs)
        backward(b, ob, xs)
        oa.clip_grad_norm_(MAX_NORM)
        scale_grads(b, oa._grad_scale)
        oa.step()
        ob.step()
        for p, q in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(p, q, rtol=0, atol=1e-6)


@pytest.fixture
def without_scaled_kernels(tmp_path):
    """A copy of a module holding the optimizer's kernels, less those that
    take grad_scale."""
    if not SCALED:
        pytest.skip("no compiled adamw_step kernels with grad_scale")
    src = os.path.dirname(SCALED[0].manifest.path)
    for f in os.listdir(src):
        shutil.copy(os.path.join(src, f), tmp_path / f)
    doc = json.loads((tmp_path / "manifest.json").read_text())
    doc["kernels"] = [k for k in doc["kernels"] if not k["config"].get("grad_scale")]
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    return str(tmp_path)


@needs_kernels
@pytest.mark.parametrize("moments", [False, True], ids=["params", "params-and-moments"])
def test_stochastic_bf16_parameters_clip_in_the_kernel(moments):
    """Stochastic rounding of bf16 parameters, alone (train_llama.py
    --param-dtype bf16-sr) or with the moments', has a kernel that scales
    the gradient as it loads it: clipping makes no pass over the buffers
    (which would warn) and the step's kernel is the scaled one."""
    torch.manual_seed(0)
    a = Stack(dtype=torch.bfloat16)
    opt = FP8AdamW(a.parameters(), lr=1e-2, kernels=MODULES, bucket_mb=SMALL_MB,
                   stochastic_params=True, stochastic_moments=moments, seed=3)
    k = opt.kernel_for("bf16", "cpu", grad_scale=True)
    assert k.config["grad_scale"] and k.config["stochastic_param"]
    assert bool(k.config.get("stochastic_moments")) == moments
    for xs in batches(2):
        backward(a, opt, xs)
        opt.clip_grad_norm_(MAX_NORM)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            opt.step()
    assert all(torch.isfinite(p).all() for p in a.parameters())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_without_a_scaled_kernel_the_buffers_are_scaled_in_place(without_scaled_kernels,
                                                                 dtype):
    """Kernels compiled before the gradient scale (or configurations none
    was compiled for): step() warns once and multiplies the buffers first,
    which for f32 gradients gives the fused step's bits."""
    torch.manual_seed(0)
    a = Stack(dtype=dtype)
    b = copy.deepcopy(a)
    oa = FP8AdamW(a.parameters(), lr=1e-2, kernels=without_scaled_kernels, bucket_mb=SMALL_MB)
    ob = FP8AdamW(b.parameters(), lr=1e-2, kernels=MODULES, bucket_mb=SMALL_MB)
    for t, xs in enumerate(batches(2)):
        backward(a, oa, xs)
        backward(b, ob, xs)
        oa.clip_grad_norm_(MAX_NORM)
        ob.clip_grad_norm_(MAX_NORM)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            oa.step()
        assert len(caught) == (1 if t == 0 else 0), [str(w.message) for w in caught]
        if t == 0:
            assert "grad_scale" in str(caught[0].message)
        ob.step()
        if dtype == torch.float32:
            assert_same_state(oa, a, ob, b)
        else:  # the in-place product is rounded to bf16, the kernel's is not
            # so a moment's code may land one FP8 step apart, which moves that
            # element's update (at most lr here) by up to about a quarter of
            # lr (measured on the GPU: 0.0017 at lr 0.01, 1 element of 4096).
            for p, q in zip(a.parameters(), b.parameters()):
                torch.testing.assert_close(p.float(), q.float(), rtol=2 ** -7, atol=1e-2 / 4)
