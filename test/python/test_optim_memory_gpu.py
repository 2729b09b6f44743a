"""FP8AdamW's gradient memory on the GPU (skipped without CUDA or compiled
adamw_step kernels): lazy gradient buffers leave nothing allocated between
steps, stepping in the backward lowers the step's peak by about the model's
gradient, both give the same bits as the persistent layout, and a CUDA graph
(coat.nn.capture_step) that accumulates into lazy buffers keeps them.

  COAT_KERNELS=build/demo python -m pytest test/python/test_optim_memory_gpu.py -v -s

The printed lines give the measured bytes (nothing here is a target)."""

import copy

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from coat import _dtypes, artifacts  # noqa: E402
from coat.optim import FP8AdamW  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

MODULES = [m for m in artifacts.modules() if m.find(op="adamw_step")]
if not MODULES:
    pytest.skip("no compiled adamw_step kernels: run scripts/demo.sh (writes build/demo) or set "
                "COAT_KERNELS", allow_module_level=True)

WIDTH, LAYERS = 1024, 8  # 8 x 1024 x 1024 bf16 weights: 2 MiB each, 16 MiB of gradient
LAYER_MB = WIDTH * WIDTH * 2 / 2**20


def stack(seed=0):
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS)]
    return torch.nn.Sequential(*layers).to(device="cuda", dtype=torch.bfloat16)


def grad_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


def loss_of(model, x):
    return model(x).float().square().mean()


def step(model, opt, x):
    opt.zero_grad()
    loss_of(model, x).backward()
    opt.step()


def allocated():
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def test_lazy_buffers_hold_nothing_between_steps():
    x = torch.randn(16, WIDTH, device="cuda", dtype=torch.bfloat16)
    loss_of(stack(), x).backward()  # cuBLAS's workspace and the like, before measuring
    held = {}
    for persistent in (False, True):
        model = stack()
        before = allocated()
        opt = FP8AdamW(model.parameters(), lr=1e-3, kernels=MODULES, persistent_grads=persistent,
                       bucket_mb=2 * LAYER_MB)
        for _ in range(2):
            step(model, opt, x)
        opt.zero_grad()
        held[persistent] = allocated() - before
        if not persistent:
            assert all(b.grad is None for b in opt.buckets)
            assert all(p.grad is None for p in model.parameters())
        print(f"persistent_grads={persistent}: {held[persistent]} bytes held between steps "
              f"(optimizer state and flat parameters; gradient {grad_bytes(model)})")
        del model, opt
    g = grad_bytes(stack())
    assert abs(held[True] - held[False] - g) <= 0.02 * g


def peak_of_backward(model, opt, x):
    opt.zero_grad()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss_of(model, x).backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    opt.step()
    return peak


def test_step_in_backward_lowers_the_peak_and_gives_the_same_bits():
    x = torch.randn(16, WIDTH, device="cuda", dtype=torch.bfloat16)
    a, b = stack(), stack()
    common = dict(lr=1e-3, weight_decay=0.1, kernels=MODULES, bucket_mb=LAYER_MB)
    oa = FP8AdamW(a.parameters(), **common)
    ob = FP8AdamW(b.parameters(), step_in_backward=True, **common)
    peaks = {}
    for t in range(3):
        peaks["after"] = peak_of_backward(a, oa, x)
        peaks["in backward"] = peak_of_backward(b, ob, x)
        for pa, pb in zip(a.parameters(), b.parameters()):
            assert torch.equal(pa, pb), f"step {t + 1}"
        for pa, pb in zip(a.parameters(), b.parameters()):
            for k, v in oa.state[pa].items():
                w = ob.state[pb][k]
                assert torch.equal(_dtypes.codes_as_uint8(v), _dtypes.codes_as_uint8(w)) \
                    if v.element_size() == 1 else torch.equal(v, w), k
    g = grad_bytes(a)
    print(f"backward peak above the step's start: step after {peaks['after']}, "
          f"step in backward {peaks['in backward']} bytes (gradient {g})")
    # One bucket a layer: at most a couple of layers' gradients at once.
    assert peaks["in backward"] <= peaks["after"] - g // 2


def test_capture_step_keeps_lazy_buffers_and_matches_eager_steps():
    from coat.nn import capture_step

    eager, graphed = stack(), stack()
    oe = FP8AdamW(eager.parameters(), lr=1e-3, kernels=MODULES)
    og = FP8AdamW(graphed.parameters(), lr=1e-3, kernels=MODULES)
    x = torch.zeros(16, WIDTH, device="cuda", dtype=torch.bfloat16)
    # Warm-up steps of the capture run the backward twice: start from zero.
    replay = capture_step(lambda: loss_of(graphed, x).backward())
    assert all(bk.pinned and bk.grad is not None for bk in og.buckets)
    torch.manual_seed(5)
    for _ in range(3):
        batch = torch.randn(16, WIDTH, device="cuda", dtype=torch.bfloat16)
        oe.zero_grad()
        loss_of(eager, batch).backward()
        og.zero_grad()  # set_to_none=True: a pinned buffer is zeroed, not freed
        assert all(bk.grad is not None for bk in og.buckets)
        x.copy_(batch)
        replay.replay()
        # The replay's gradient, in the buffer the optimizer steps on (a
        # stale or lost gradient would differ entirely).
        for pe, pg in zip(eager.parameters(), graphed.parameters()):
            torch.testing.assert_close(pg.grad, pe.grad, rtol=2e-2, atol=1e-6)
        oe.step()
        og.step()
    moved = max(float((pe - pg).abs().max()) for pe, pg in
                zip(eager.parameters(), graphed.parameters()))
    print(f"largest parameter difference, eager against graphed, after 3 steps: {moved}")
    assert moved <= 3e-3  # lr 1e-3: within one update a step


def test_step_in_backward_refuses_a_capture():
    from coat.nn import capture_step

    model = stack()
    opt = FP8AdamW(model.parameters(), lr=1e-3, kernels=MODULES, step_in_backward=True)
    x = torch.randn(16, WIDTH, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="capturing the backward"):
        # (one warm-up: a second backward without step() would be refused first)
        capture_step(lambda: loss_of(model, x).backward(), warmup=1)
    assert opt.group_steps() == [1]  # the warm-up's step, not the capture's
