"""FP8AdamW's gradient memory on CPU tensors: buckets split by size, gradient
buffers that exist only from a step's first gradient to zero_grad, and the
optimizer step in the backward (step_in_backward), which must give the same
bits as step() after the backward for the same gradients -- per-bucket
clipping, gradient accumulation (no_step) and parameters without a gradient
included. The numerics run through the compiled CPU twins (skipped without
them); the bookkeeping needs no kernel. GPU memory: test_optim_memory_gpu.py."""

import copy
import gc

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from coat import _dtypes, artifacts  # noqa: E402
from coat.optim._layout import split_by_bytes  # noqa: E402
from coat.optim._grads import grad_owner  # noqa: E402
from coat.optim import FP8AdamW, owns_grad  # noqa: E402

MODULES = [m for m in artifacts.modules() if m.find(op="adamw_step")]
needs_kernels = pytest.mark.skipif(
    not MODULES, reason="no compiled adamw_step kernels: run scripts/demo.sh (writes build/demo) "
                        "or set COAT_KERNELS")

#: 64x64 f32 weights are 16 KiB: a 20 KiB cap gives each layer its own bucket.
SMALL_MB = 20 / 1024


class Stack(torch.nn.Module):
    """Linear layers in a chain, and a parameter no backward reaches."""

    def __init__(self, layers=4, width=64, dtype=torch.float32):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))
        self.unused = torch.nn.Parameter(torch.randn(40))
        self.to(dtype)

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def models(dtype=torch.float32, seed=0, **kw):
    torch.manual_seed(seed)
    a = Stack(dtype=dtype, **kw)
    return a, copy.deepcopy(a)


def loss_of(model, x):
    return model(x.to(next(model.parameters()).dtype)).float().square().mean()


def assert_same_state(o1, m1, o2, m2):
    assert o1.group_steps() == o2.group_steps()
    for (name, p1), p2 in zip(m1.named_parameters(), m2.parameters()):
        assert torch.equal(p1, p2), name
        s1, s2 = o1.state[p1], o2.state[p2]
        for k in s1:
            a, b = s1[k], s2[k]
            if a.dtype == torch.float32:
                assert torch.equal(a.view(torch.int32), b.view(torch.int32)), (name, k)
            else:
                assert torch.equal(_dtypes.codes_as_uint8(a), _dtypes.codes_as_uint8(b)), (name, k)


# ---- buckets and buffers (no kernel) ---------------------------------------------------


def test_split_by_bytes():
    assert split_by_bytes([10, 10, 10], 4, None) == [[0, 1, 2]]
    assert split_by_bytes([10, 10, 10], 4, 80) == [[0, 1], [2]]
    assert split_by_bytes([30, 5, 5, 30], 4, 80) == [[0], [1, 2], [3]]  # 30*4 > 80: alone
    assert split_by_bytes([], 4, 80) == []


def test_buckets_are_split_by_size_in_parameter_order():
    m, _ = models()
    opt = FP8AdamW(m.parameters(), kernels=[], bucket_mb=SMALL_MB)
    params = list(m.parameters())
    # `unused` (the module's own parameter comes first), then a weight (4096
    # elements, 16 KiB) and a bias (64, padded to 128) per layer
    assert [len(b.params) for b in opt.buckets] == [3, 2, 2, 2]
    assert [p for b in opt.buckets for p in b.params] == params
    assert [b.index for b in opt.buckets] == [0, 1, 2, 3]
    one = FP8AdamW(models()[0].parameters(), kernels=[], bucket_mb=None)
    assert len(one.buckets) == 1
    # Persistent buffers gain nothing from a split: one bucket, one launch.
    kept = FP8AdamW(models()[0].parameters(), kernels=[], bucket_mb=SMALL_MB,
                    persistent_grads=True)
    assert len(kept.buckets) == 1 and kept.buckets[0].persistent


def test_bad_memory_options_raise():
    p = [torch.nn.Parameter(torch.randn(4))]
    with pytest.raises(ValueError, match="bucket_mb must be positive"):
        FP8AdamW(p, kernels=[], bucket_mb=0)
    with pytest.raises(ValueError, match="bucket_max_norm must be positive"):
        FP8AdamW(p, kernels=[], bucket_max_norm=-1.0)
    with pytest.raises(ValueError, match="choose one"):
        FP8AdamW(p, kernels=[], step_in_backward=True, persistent_grads=True)


def held(opt):
    return sum(b.grad is not None for b in opt.buckets)


def test_buffers_appear_bucket_by_bucket_and_go_with_zero_grad():
    m, _ = models()
    opt = FP8AdamW(m.parameters(), kernels=[], bucket_mb=SMALL_MB)
    seen = []
    # Sampled as the backward passes each layer's output on to the layer's
    # own backward: the later layers' buckets hold their gradients by then,
    # the earlier ones none yet.
    h = torch.randn(8, 64)
    for i, layer in enumerate(m.layers):
        h = torch.tanh(layer(h))
        if i < len(m.layers) - 1:
            h.register_hook(lambda g: seen.append(held(opt)))
    assert held(opt) == 0  # nothing during the forward
    h.square().mean().backward()
    assert seen == [1, 2, 3]
    assert held(opt) == 4  # the first bucket: `unused`, and layer 0's weight and bias
    assert m.unused.grad is None
    opt.zero_grad()
    assert held(opt) == 0 and all(p.grad is None for p in m.parameters())


def test_torch_zero_grad_frees_the_buffers_too():
    """A lazy buffer lives as long as some .grad views it: torch's
    Module.zero_grad(set_to_none=True) (what the Hugging Face Trainer
    calls) frees it as the optimizer's zero_grad does."""
    m, _ = models()
    opt = FP8AdamW(m.parameters(), kernels=[], bucket_mb=SMALL_MB)
    loss_of(m, torch.randn(2, 64)).backward()
    assert held(opt) == 4
    m.zero_grad(set_to_none=True)
    gc.collect()
    assert held(opt) == 0
    loss_of(m, torch.randn(2, 64)).backward()
    assert held(opt) == 4
    for b in opt.buckets:
        for i, p in enumerate(b.params):
            if p.grad is not None:
                assert p.grad.data_ptr() == b.grad.data_ptr() + 4 * b.offsets[i]
    m.zero_grad(set_to_none=False)  # zeroed in place: the views stay, so do the buffers
    assert held(opt) == 4


def test_owner_is_the_newest_optimizer_and_hooks_die_with_it():
    m, _ = models()
    old = FP8AdamW(m.parameters(), kernels=[])
    assert all(owns_grad(p) for p in m.parameters())
    new = FP8AdamW(m.parameters(), kernels=[])
    loss_of(m, torch.randn(2, 64)).backward()
    assert held(new) == 1 and held(old) == 0  # the old optimizer's hooks stand down
    del old, new
    gc.collect()
    assert not any(grad_owner(p) for p in m.parameters())
    m.zero_grad()
    loss_of(m, torch.randn(2, 64)).backward()  # no optimizer: torch's own gradients
    assert m.layers[0].weight.grad is not None


def test_parameters_that_do_not_require_grad_get_no_hook():
    m, _ = models()
    m.unused.requires_grad_(False)
    opt = FP8AdamW(m.parameters(), kernels=[], bucket_mb=SMALL_MB)
    assert [b.expected for b in opt.buckets] == [2, 2, 2, 2]


# ---- numerics through the CPU twins ----------------------------------------------------


def make_pair(dtype, **kw):
    m1, m2 = models(dtype)
    # one bucket per layer, whatever the dtype
    mb = SMALL_MB * torch.tensor([], dtype=dtype).element_size() / 4
    common = dict(lr=3e-2, weight_decay=0.1, kernels=MODULES, bucket_mb=mb, **kw)
    o1 = FP8AdamW(m1.parameters(), **common)
    o2 = FP8AdamW(m2.parameters(), step_in_backward=True, **common)
    return m1, o1, m2, o2


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("clip", [None, 0.005], ids=["noclip", "clip"])
def test_step_in_backward_is_bit_exact_with_step_after_backward(dtype, clip):
    m1, o1, m2, o2 = make_pair(dtype, bucket_max_norm=clip)
    torch.manual_seed(1)
    for t in range(4):
        x = torch.randn(16, 64)
        for g in (*o1.param_groups, *o2.param_groups):
            g["lr"] = 3e-2 / (t + 1)  # a schedule, set before the backward
        o1.zero_grad()
        loss_of(m1, x).backward()
        o1.step()
        o2.zero_grad()
        loss_of(m2, x).backward()
        # The layers' buckets were stepped in the backward and their
        # gradients freed; the bucket holding `unused` (never reached) waits.
        assert [b.stepped for b in o2.buckets] == [False, True, True, True]
        assert [b.grad is None for b in o2.buckets] == [False, True, True, True]
        o2.step()
        assert held(o2) == 0 and all(p.grad is None for p in m2.parameters())
        assert_same_state(o1, m1, o2, m2)
    assert not torch.equal(m1.layers[0].weight, models(dtype)[0].layers[0].weight)


@needs_kernels
def test_per_bucket_clipping_clips_each_bucket_to_its_norm():
    m1, o1, _, _ = make_pair(torch.float32)
    o1.bucket_max_norm = 0.015
    x = torch.randn(16, 64)
    loss_of(m1, x).backward()
    grads = [b.grad.clone() for b in o1.buckets]
    norms = [float(g.norm()) for g in grads]
    assert min(norms) < 0.015 < max(norms)  # clips some buckets, not all
    for b in o1.buckets:
        o1._clip(b)
    for g, b, n in zip(grads, o1.buckets, norms):
        want = g * min(1.0, 0.015 / (n + 1e-6))
        torch.testing.assert_close(b.grad, want, rtol=1e-6, atol=0)


@needs_kernels
@pytest.mark.parametrize("micro", [1, 3])
def test_gradient_accumulation_with_no_step(micro):
    m1, o1, m2, o2 = make_pair(torch.bfloat16)
    torch.manual_seed(2)
    for t in range(3):
        xs = [torch.randn(8, 64) for _ in range(micro)]
        o1.zero_grad()
        for x in xs:
            loss_of(m1, x).backward()
        o1.step()
        o2.zero_grad()
        for x in xs[:-1]:
            with o2.no_step():
                loss_of(m2, x).backward()
            assert not any(b.stepped for b in o2.buckets)
        loss_of(m2, xs[-1]).backward()
        o2.step()
        assert_same_state(o1, m1, o2, m2)


@needs_kernels
def test_step_without_the_backward_stepping_steps_everything():
    """After backwards under no_step only, step() steps every bucket on the
    accumulated gradients, as step() after a backward does."""
    m1, o1, m2, o2 = make_pair(torch.float32)
    x = torch.randn(8, 64)
    loss_of(m1, x).backward()
    o1.step()
    with o2.no_step():
        loss_of(m2, x).backward()
    o2.step()
    assert_same_state(o1, m1, o2, m2)
    o1.zero_grad()
    o1.step()  # no gradients at all: a zero-gradient step for every bucket
    o2.step()
    assert_same_state(o1, m1, o2, m2)


@needs_kernels
def test_two_backwards_without_step_raise():
    _, _, m2, o2 = make_pair(torch.float32)
    loss_of(m2, torch.randn(4, 64)).backward()
    with pytest.raises(RuntimeError, match="twice without a step"):
        loss_of(m2, torch.randn(4, 64)).backward()


@needs_kernels
def test_bucketing_does_not_change_the_numbers():
    """Round to nearest: a bucket's launch is per group of 128, so how the
    parameters are split into buckets changes no bit."""
    torch.manual_seed(0)
    a = Stack()
    b = copy.deepcopy(a)
    oa = FP8AdamW(a.parameters(), lr=1e-2, kernels=MODULES, bucket_mb=None)
    ob = FP8AdamW(b.parameters(), lr=1e-2, kernels=MODULES, bucket_mb=SMALL_MB)
    for _ in range(3):
        x = torch.randn(8, 64)
        for mdl, o in ((a, oa), (b, ob)):
            o.zero_grad()
            loss_of(mdl, x).backward()
            o.step()
    assert_same_state(oa, a, ob, b)


def test_a_missing_kernel_in_the_backward_changes_nothing():
    m, _ = models()
    opt = FP8AdamW(m.parameters(), kernels=[], step_in_backward=True, bucket_mb=SMALL_MB)
    before = [p.detach().clone() for p in m.parameters()]
    with pytest.raises(RuntimeError, match="no compiled adamw_step kernel"):
        loss_of(m, torch.randn(4, 64)).backward()
    assert opt.group_steps() == [0] and opt._cycle is None
    assert all(torch.equal(a, p) for a, p in zip(before, m.parameters()))


def test_dtensor_parameters_are_refused_with_step_in_backward(monkeypatch):
    """FSDP2 parameters keep their persistent buffer; stepping them in the
    backward is refused by name (DTensors faked: no FSDP2 in every torch)."""
    from types import SimpleNamespace

    from coat import _dist, optim

    p = torch.nn.Parameter(torch.randn(4))
    p._local_tensor = p.detach()
    monkeypatch.setattr(_dist, "is_dtensor", lambda t: t is p)
    monkeypatch.setattr(_dist, "shard_layout", lambda name, t: SimpleNamespace(mesh="mesh"))
    with pytest.raises(ValueError, match="parameter 0 .*step_in_backward takes plain tensors"):
        optim.FP8AdamW([p], kernels=[], step_in_backward=True)


def test_a_buffer_a_capture_accumulates_into_is_kept(monkeypatch):
    """A bucket whose buffer a CUDA graph captured (capture faked: no GPU
    here) is pinned: held by the optimizer, zeroed in place by zero_grad."""
    from coat.optim import _grads as _optim_grads

    m, _ = models()
    opt = FP8AdamW(m.parameters(), kernels=[], bucket_mb=SMALL_MB)
    monkeypatch.setattr(_optim_grads, "_capturing", lambda device: True)
    loss_of(m, torch.randn(2, 64)).backward()  # allocates while "capturing"
    assert [b.pinned for b in opt.buckets] == [True] * 4
    addresses = [b.grad.data_ptr() for b in opt.buckets]
    monkeypatch.setattr(_optim_grads, "_capturing", lambda device: False)
    m.zero_grad(set_to_none=True)
    opt.zero_grad()
    gc.collect()
    assert [b.grad.data_ptr() for b in opt.buckets] == addresses
    assert all(torch.count_nonzero(b.grad) == 0 for b in opt.buckets)
    loss_of(m, torch.randn(2, 64)).backward()
    assert [b.grad.data_ptr() for b in opt.buckets] == addresses
    assert m.layers[0].weight.grad.data_ptr() == addresses[0] + 4 * opt.buckets[0].offsets[1]


def test_step_in_backward_refuses_a_capture(monkeypatch):
    from coat.optim import _grads as _optim_grads

    m, _ = models()
    opt = FP8AdamW(m.parameters(), kernels=[], step_in_backward=True)
    monkeypatch.setattr(_optim_grads, "_capturing", lambda device: True)
    with pytest.raises(RuntimeError, match="capturing the backward"):
        loss_of(m, torch.randn(2, 64)).backward()
    assert opt.group_steps() == [0]
