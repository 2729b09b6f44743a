"""The programs of blocks that normalise after each sublayer (OLMo2):
``h + rmsnorm(W a)`` (LinearNormResidualConfig) and ``h +
rmsnorm(W_down(silu(W_gate h) * W_up h))`` (PostNormMLPConfig), run through
their compiled kernels (CPU twins, and the GPU where there is one) under
autograd, against fp32 autograd of the same formulas.

Tolerance as in test_nn.py: relative L2 error at most 0.2 for the branch
output (y - h) and every gradient (dh - dout: the residual passes dout
through), since every GEMM operand is FP8. A miswired gradient (say gate and
up swapped) is far outside it: checked below.
"""

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()

import coat.nn as cnn  # noqa: E402
from coat import artifacts, programs  # noqa: E402

TOL = 0.2
EPS = 1e-6
H, I, F = 64, 96, 160


def devices():
    out = ["cpu"]
    if torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0):
        out.append("cuda")
    return out


def program_or_skip(cfg):
    """Skips only where the program can be neither found nor compiled; a
    compile error fails."""
    try:
        return artifacts.program(cfg)
    except artifacts.ArtifactNotFound as e:
        pytest.skip(str(e))


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def run(cfg, inputs, dout, device):
    """Output and input gradients of the compiled program on ``device``."""
    prog = program_or_skip(cfg)
    xs = [t.to(device).bfloat16().requires_grad_() for t in inputs]
    (y,) = cnn._RunProgram.apply(prog, cfg.name, *xs)
    y.backward(dout.to(device).bfloat16())
    return [y.detach().float().cpu()] + [x.grad.float().cpu() for x in xs]


def reference(fn, inputs, dout):
    xs = [t.bfloat16().float().requires_grad_() for t in inputs]
    y = fn(*xs)
    y.backward(dout.bfloat16().float())
    return [y.detach()] + [x.grad for x in xs]


def check(got, want, names, h, dout):
    # The branch (output minus stream) and the gradient of h minus the
    # pass-through: what the program computes, not what it copies.
    got[0], want[0] = got[0] - h.bfloat16().float(), want[0] - h.bfloat16().float()
    got[1], want[1] = got[1] - dout.bfloat16().float(), want[1] - dout.bfloat16().float()
    for name, g, w in zip(names, got, want):
        assert rel(g, w) <= TOL, (name, rel(g, w))


def linear_norm_residual_inputs(tokens, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(tokens, H, generator=g), torch.randn(tokens, I, generator=g),
            torch.randn(H, I, generator=g) * I ** -0.5, 1 + 0.2 * torch.randn(H, generator=g)]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("tokens", [16, 48])
def test_linear_norm_residual_matches_fp32(cpu_cache, device, tokens):
    cfg = programs.LinearNormResidualConfig(I, H, EPS)
    inputs = linear_norm_residual_inputs(tokens, seed=tokens)
    dout = torch.randn(tokens, H, generator=torch.Generator().manual_seed(1))
    got = run(cfg, inputs, dout, device)
    want = reference(lambda h, a, w, wn: h + rmsnorm(a @ w.t(), wn), inputs, dout)
    check(got, want, ["y", "dh", "da", "dW", "dw_norm"], inputs[0], dout)


def postnorm_mlp_inputs(tokens, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(tokens, H, generator=g),
            torch.randn(F, H, generator=g) * H ** -0.5, torch.randn(F, H, generator=g) * H ** -0.5,
            torch.randn(H, F, generator=g) * F ** -0.5, 1 + 0.2 * torch.randn(H, generator=g)]


def postnorm_mlp(h, wg, wu, wd, wn):
    m = torch.nn.functional.silu(h @ wg.t()) * (h @ wu.t())
    return h + rmsnorm(m @ wd.t(), wn)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("tokens", [16, 64])
def test_postnorm_mlp_matches_fp32(cpu_cache, device, tokens):
    cfg = programs.PostNormMLPConfig(H, F, EPS)
    inputs = postnorm_mlp_inputs(tokens, seed=tokens)
    dout = torch.randn(tokens, H, generator=torch.Generator().manual_seed(2))
    got = run(cfg, inputs, dout, device)
    want = reference(postnorm_mlp, inputs, dout)
    check(got, want, ["y", "dh", "dW_gate", "dW_up", "dW_down", "dw_norm"], inputs[0], dout)


def test_the_tolerance_tells_gate_from_up(cpu_cache):
    """The same check against a reference with gate and up swapped fails."""
    cfg = programs.PostNormMLPConfig(H, F, EPS)
    inputs = postnorm_mlp_inputs(32, seed=7)
    dout = torch.randn(32, H, generator=torch.Generator().manual_seed(3))
    got = run(cfg, inputs, dout, "cpu")
    want = reference(lambda h, wg, wu, wd, wn: postnorm_mlp(h, wu, wg, wd, wn), inputs, dout)
    with pytest.raises(AssertionError):
        check(got, want, ["y", "dh", "dW_gate", "dW_up", "dW_down", "dw_norm"], inputs[0], dout)


def test_configs_check_their_features():
    with pytest.raises(ValueError, match="inner = 72 must be a positive multiple of the "
                                         "group size 16"):
        programs.LinearNormResidualConfig(72, 64).text()
    with pytest.raises(ValueError, match="ffn = 8"):
        programs.PostNormMLPConfig(64, 8).text()
