"""FP8AdamW bookkeeping that needs no compiled kernel: flat buffers, padding,
parameter re-pointing, gradient views, validation and state_dict round trips.
The numerics run in test_optim_kernels.py once compiled kernels exist."""

import io

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from coat import _dtypes  # noqa: E402
from coat.optim import FP8AdamW  # noqa: E402


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Linear(3, 130))


def make(params, **kw):
    return FP8AdamW(params, kernels=[], **kw)  # no kernels: bookkeeping only


def test_flat_buffers_padding_and_repointing():
    m = model()
    before = [p.detach().clone() for p in m.parameters()]
    opt = make(m.parameters(), group_size=128)
    (b,) = opt.buckets
    sizes = [p.numel() for p in m.parameters()]  # 15, 3, 390, 130
    assert b.offsets == [0, 128, 256, 768]
    assert b.numel == 1024 and b.param.numel() == 1024
    for p, o, want in zip(m.parameters(), b.offsets, before):
        assert torch.equal(p, want)  # values kept
        assert p.data_ptr() == b.param.data_ptr() + 4 * o  # aliases the flat buffer
        assert p.grad is None  # no gradient buffer until the first gradient
    assert b.grad is None and not b.persistent
    pad = torch.ones(1024, dtype=torch.bool)
    for o, n in zip(b.offsets, sizes):
        pad[o:o + n] = False
    assert torch.count_nonzero(b.param[pad]) == 0
    st = b.state
    assert st[("m", "codes")].dtype == _dtypes.torch_code_dtype("e4m3")
    assert st[("m", "scale")].shape == (8,) and torch.count_nonzero(st[("m", "scale")]) == 0
    assert torch.all(st[("v", "k")] == 1) and torch.all(st[("v", "c")] == 1)


def test_per_moment_expand_and_formats():
    m = model()
    opt = make(m.parameters(), expand=(True, False), v_format="E5M2")
    (b,) = opt.buckets
    assert ("m", "k") in b.state and ("v", "k") not in b.state
    assert b.state[("v", "codes")].dtype == _dtypes.torch_code_dtype("e5m2")
    assert set(opt.state[next(m.parameters())]) == {
        "step", "exp_avg", "scale_exp_avg", "expand_exp_avg", "sqrt_minmax_exp_avg",
        "exp_avg_sq", "scale_exp_avg_sq"}


def test_buckets_split_by_group_and_dtype():
    a = torch.nn.Parameter(torch.randn(10))
    b = torch.nn.Parameter(torch.randn(10, dtype=torch.bfloat16))
    c = torch.nn.Parameter(torch.randn(3))
    opt = make([{"params": [a, b]}, {"params": [c], "lr": 0.1}])
    keys = [(bk.group, bk.dtype, len(bk.params)) for bk in opt.buckets]
    assert keys == [(0, "f32", 1), (0, "bf16", 1), (1, "f32", 1)]
    d = torch.nn.Parameter(torch.randn(4))
    opt.add_param_group({"params": [d]})
    assert opt.buckets[-1].params[0] is d and opt.param_groups[-1]["lr"] == 1e-3


def test_backward_accumulates_into_the_flat_grad_buffer():
    m = model()
    opt = make(m.parameters())
    (b,) = opt.buckets
    x = torch.randn(4, 5)
    m(x).sum().backward()  # the hooks allocate the buffer and copy the gradients in
    w = m[1].weight
    assert b.grad is not None and b.grad.numel() == 1024
    assert w.grad.data_ptr() == b.grad.data_ptr() + 4 * 256
    first = w.grad.clone()
    m(x).sum().backward()  # a second micro-batch accumulates into the view in place
    assert w.grad.data_ptr() == b.grad.data_ptr() + 4 * 256
    assert torch.allclose(w.grad, 2 * first)
    pad = torch.ones(1024, dtype=torch.bool)
    for o, p in zip(b.offsets, m.parameters()):
        pad[o:o + p.numel()] = False
    assert torch.count_nonzero(b.grad[pad]) == 0  # padding stays zero
    opt.zero_grad(set_to_none=False)  # zeroed in place, views kept
    assert torch.count_nonzero(b.grad) == 0
    assert w.grad is not None and w.grad.data_ptr() == b.grad.data_ptr() + 4 * 256
    opt.zero_grad()  # set_to_none=True: the buffer is freed
    assert b.grad is None and all(p.grad is None for p in m.parameters())
    m(x).sum().backward()
    assert torch.equal(w.grad, first) and w.grad.data_ptr() == b.grad.data_ptr() + 4 * 256


def test_replaced_or_missing_grads_are_reattached():
    m = model()
    opt = make(m.parameters())
    (b,) = opt.buckets
    m(torch.randn(4, 5)).sum().backward()
    w = m[1].weight
    fresh = torch.randn_like(w)
    w.grad = fresh.clone()  # replaced by someone else
    assert w.grad.data_ptr() != b.grad.data_ptr() + 4 * 256
    b.grad.fill_(7.0)
    m[0].bias.grad = None
    opt._attach_grads(b)
    assert w.grad.data_ptr() == b.grad.data_ptr() + 4 * 256
    assert torch.equal(w.grad, fresh)
    assert torch.count_nonzero(m[0].bias.grad) == 0  # None counts as a zero gradient
    # Without a buffer (after zero_grad): allocated, None grads zero.
    opt.zero_grad()
    w.grad = fresh.clone()
    opt._attach_grads(b)
    assert torch.equal(w.grad, fresh) and w.grad.data_ptr() == b.grad.data_ptr() + 4 * 256
    assert torch.count_nonzero(b.grad) == torch.count_nonzero(fresh)


def test_torch_zero_grad_then_backward_lands_in_the_buffer():
    """model.zero_grad(set_to_none=True) (torch's, not ours) drops the views;
    the next backward's gradients are copied into the buffer again."""
    m = model()
    opt = make(m.parameters())
    (b,) = opt.buckets
    x = torch.randn(4, 5)
    m(x).sum().backward()
    want = [p.grad.clone() for p in m.parameters()]
    m.zero_grad(set_to_none=True)
    m(x).sum().backward()
    for p, o, g in zip(m.parameters(), b.offsets, want):
        assert p.grad.data_ptr() == b.grad.data_ptr() + 4 * o and torch.equal(p.grad, g)


def test_persistent_grads_keep_the_old_layout():
    m = model()
    opt = make(m.parameters(), persistent_grads=True)
    (b,) = opt.buckets
    assert b.persistent and b.grad is not None
    for p, o in zip(m.parameters(), b.offsets):
        assert p.grad.data_ptr() == b.grad.data_ptr() + 4 * o
    m(torch.randn(4, 5)).sum().backward()
    assert torch.count_nonzero(b.grad) > 0
    opt.zero_grad(set_to_none=True)  # persistent: zeroed in place, views kept
    assert torch.count_nonzero(b.grad) == 0
    assert m[1].weight.grad.data_ptr() == b.grad.data_ptr() + 4 * 256


@pytest.mark.parametrize("bad, message", [
    (lambda: torch.nn.Parameter(torch.randn(3, dtype=torch.float64)),
     "parameter 1 (shape (3,)): dtype torch.float64 is not supported"),
    (lambda: torch.nn.Parameter(torch.randn(4, 3).t()),
     "parameter 1 (shape (3, 4)): parameter is not contiguous"),
    (lambda: torch.nn.Parameter(torch.randn(3, device="meta")),
     "parameter 1 (shape (3,)): on meta, but earlier parameters are on cpu"),
])
def test_rejects_unsupported_parameters(bad, message):
    with pytest.raises(ValueError) as e:
        make([torch.nn.Parameter(torch.randn(2)), bad()])
    assert message in str(e.value)


def test_rejects_sparse_gradients():
    p = torch.nn.Parameter(torch.randn(4))
    p.grad = torch.sparse_coo_tensor(torch.tensor([[0]]), torch.tensor([1.0]), (4,))
    with pytest.raises(ValueError, match="parameter 0 .*sparse gradients"):
        make([p])


def test_hyperparameter_validation():
    with pytest.raises(ValueError, match="beta parameter at index 1"):
        make([torch.nn.Parameter(torch.randn(2))], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="mode must be"):
        make([torch.nn.Parameter(torch.randn(2))], mode="fast")


def test_step_without_kernels_fails_cleanly_and_changes_nothing():
    m = model()
    opt = make(m.parameters())
    before = [p.detach().clone() for p in m.parameters()]
    with pytest.raises(RuntimeError, match="no compiled adamw_step kernel"):
        opt.step()
    assert opt.group_steps() == [0]
    assert all(torch.equal(a, p) for a, p in zip(before, m.parameters()))


def scramble(opt, seed):
    g = torch.Generator().manual_seed(seed)
    for b in opt.buckets:
        for (mom, field), buf in b.state.items():
            if field == "codes":
                _dtypes.codes_as_uint8(buf).copy_(
                    torch.randint(0, 256, buf.shape, generator=g, dtype=torch.uint8))
            else:
                buf.copy_(torch.rand(buf.shape, generator=g) * 3)
    opt._steps[0] = 41


def test_state_dict_round_trip_is_bit_exact():
    m1 = model()
    opt1 = make(m1.parameters(), lr=0.01)
    scramble(opt1, 1)
    opt1.param_groups[0]["lr"] = 0.123  # e.g. set by an LR scheduler
    buf = io.BytesIO()
    torch.save(opt1.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf)

    m2 = model()
    opt2 = make(m2.parameters())
    opt2.load_state_dict(sd)
    assert opt2.group_steps() == [41]
    assert opt2.param_groups[0]["lr"] == 0.123
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        s1, s2 = opt1.state[p1], opt2.state[p2]
        assert set(s1) == set(s2)
        for k in s1:
            if k == "step":
                assert float(s2[k]) == 41.0
            elif "exp_avg" == k or "exp_avg_sq" == k:
                assert torch.equal(_dtypes.codes_as_uint8(s1[k]), _dtypes.codes_as_uint8(s2[k]))
            else:
                assert torch.equal(s1[k].view(torch.int32), s2[k].view(torch.int32)), k
    # loaded state lives in opt2's flat buffers (the views were copied into)
    b2 = opt2.buckets[0]
    assert torch.equal(_dtypes.codes_as_uint8(b2.state[("m", "codes")][:15]),
                       _dtypes.codes_as_uint8(opt1.buckets[0].state[("m", "codes")][:15]))


def test_state_dict_per_param_layout_follows_torch_convention():
    m = model()
    opt = make(m.parameters())
    sd = opt.state_dict()
    w = m[1].weight  # 390 elements -> 4 groups of 128
    st = sd["state"][2]
    assert st["exp_avg"].shape == w.shape and st["scale_exp_avg"].shape == (4,)
    assert sd["param_groups"][0]["params"] == [0, 1, 2, 3]
    assert sd["coat"]["config"]["group_size"] == 128


def test_load_state_dict_rejects_other_configs():
    m = model()
    sd = make(m.parameters()).state_dict()
    with pytest.raises(ValueError, match="saved with"):
        make(model().parameters(), group_size=64).load_state_dict(sd)
    with pytest.raises(ValueError, match="not an FP8AdamW state_dict"):
        make(model().parameters()).load_state_dict(
            torch.optim.AdamW(model().parameters()).state_dict())


def test_dequantized_state_of_initial_state_is_zero():
    m = model()
    opt = make(m.parameters())
    d = opt.dequantized_state(m[1].weight)
    assert torch.count_nonzero(d["exp_avg"]) == 0 and torch.count_nonzero(d["exp_avg_sq"]) == 0


@pytest.mark.filterwarnings("ignore:Detected call of")
def test_lr_scheduler_drives_param_groups():
    m = model()
    opt = make(m.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    opt._steps[0] += 1  # what step() does, without a kernel
    sched.step()
    assert opt.param_groups[0]["lr"] == 0.5
    args = opt.launch_arguments(opt.buckets[0], 1)
    assert args["lr"] == 0.5 and args["beta2"] == 0.999 and args["step"] == 1.0


def test_stochastic_rounding_seeds_differ_per_bucket_and_shard_not_per_replica():
    from coat.optim._layout import Rounding
    r = Rounding(params=True, seed=Rounding.SEED_LIMIT - 1)
    seeds = {(b, s): r.bucket_seed(b, s) for b in range(4) for s in range(8)}
    assert len(set(seeds.values())) == len(seeds)  # every bucket and shard its own
    assert all(0 <= v < Rounding.SEED_LIMIT for v in seeds.values())
    assert r.bucket_seed(2, 5) == Rounding(moments=True, seed=r.seed).bucket_seed(2, 5)


def test_fp8adamw_draws_a_seed_only_for_stochastic_rounding():
    torch.manual_seed(0)
    want = torch.rand(3)
    torch.manual_seed(0)
    FP8AdamW([torch.nn.Parameter(torch.ones(4))])
    assert torch.equal(torch.rand(3), want)  # round to nearest: generator untouched
    torch.manual_seed(0)
    a = FP8AdamW([torch.nn.Parameter(torch.ones(4))], stochastic_moments=True).rounding.seed
    torch.manual_seed(0)
    b = FP8AdamW([torch.nn.Parameter(torch.ones(4))], stochastic_moments=True).rounding.seed
    assert a == b  # reproducible under torch.manual_seed
