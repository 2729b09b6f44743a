"""coat.nn.Linear(bias=True): the compiled program coat_linear_i<in>_o<out>_b
(coat.programs.LinearConfig(bias=True)) under autograd, on its CPU twins.

The reference is the host numerics library (coat.reference), not torch: it
quantizes x and W per-tensor to E4M3 and the output gradient to E5M2 with
COAT's bf16-rounded scales, decodes the codes, multiplies them exactly
(float64), applies the GEMM epilogue (``acc * (s_a * s_b) + bias`` in f32,
linear_bias_epilogue) and rounds to bf16; the bias gradient is the output
gradient's f32 column sum (bias_grad) rounded to bf16. The twins sum in f32
in their own order, so each value may differ from the exact product by the
f32 summation error of its dot product (at most K * 2^-23 of the sum of
|products|, times the scales) and then by one bf16 rounding step; nothing
looser. test_nn_modules.py checks the same module against fp32 autograd
(relative L2 0.2, the FP8 error itself).

Adversarial inputs: zeros (the output is the bias exactly, W's gradient
exactly zero), a zero output gradient (every gradient exactly zero), token
counts that are not a multiple of the padding (1, 21, 33: the module pads to
coat.nn.TOKEN_MULTIPLE rows with zeros, which must not reach the bias
gradient), large and tiny magnitudes (per-tensor scales absorb them),
outliers that push the other values into E4M3's subnormals, and values that
overflow or are not finite (the kernels' finiteness flags raise).
"""

import hashlib

import numpy as np
import pytest

from conftest import torch_or_skip

torch = torch_or_skip()

import coat.nn as cnn  # noqa: E402
from coat import programs, reference as ref  # noqa: E402

IN, OUT = 64, 96

needs_reference = pytest.mark.skipif(not ref.is_available(),
                                     reason="libcoat_reference.so is not built")


def make(seed, dtype=torch.float32):
    torch.manual_seed(seed)
    lin = cnn.Linear(IN, OUT, bias=True, dtype=dtype)
    with torch.no_grad():
        lin.bias.add_(0.5 * torch.randn(OUT, generator=torch.Generator().manual_seed(seed)))
    return lin


def run(lin, x, dy):
    """y, dx, dW, db of one step (f32 tensors), x and dy as given."""
    xc = x.clone().requires_grad_()
    y = lin(xc)
    lin.zero_grad(set_to_none=True)
    y.backward(dy)
    return [t.detach().float() for t in (y, xc.grad, lin.weight.grad, lin.bias.grad)]


def bf16(t):
    return t.bfloat16().float()


def _decoded(a, fmt):
    codes, scale = ref.quantize_per_tensor(a, fmt, bf16_scale=True)
    return ref.fp8_decode(codes, fmt).astype(np.float64), np.float32(scale.reshape(-1)[0])


def _gemm(a, sa, b, sb, bias):
    """bf16(a @ b^T * (sa * sb) + bias) from decoded codes, and the slack of
    an f32 sum in another order."""
    scale = np.float32(sa * sb)
    acc = (a @ b.T).astype(np.float32)
    with np.errstate(over="ignore"):
        out = ref.bf16_round(ref.linear_bias_epilogue(acc, scale, bias))
    slack = 2.0 ** -23 * a.shape[1] * (np.abs(a) @ np.abs(b).T) * float(scale)
    return out, slack


def fp8_reference(lin, x, dy):
    """(value, slack) for y, dx, dW and db as the program computes them,
    from the bf16 values the module reads (x and dy 2-D)."""
    xs = bf16(x).numpy()
    w = bf16(lin.weight.detach()).numpy()
    b = bf16(lin.bias.detach()).numpy()
    g = bf16(dy).numpy()
    xq, sx = _decoded(xs, "e4m3")
    wq, sw = _decoded(w, "e4m3")
    gq, sg = _decoded(g, "e5m2")
    y = _gemm(xq, sx, wq, sw, b)
    dx = _gemm(gq, sg, wq.T, sw, np.zeros(IN, np.float32))
    dw = _gemm(gq.T, sg, xq.T, sx, np.zeros(IN, np.float32))
    db = (ref.bf16_round(ref.bias_grad(g, 1)),
          2.0 ** -23 * g.shape[0] * np.abs(g).sum(0))
    return [y, dx, dw, db]


def bf16_ulp(v):
    e = np.floor(np.log2(np.maximum(np.abs(v), 2.0 ** -126)))
    return 2.0 ** (e - 7)


def assert_matches(name, got, want, slack):
    got = got.numpy()
    assert got.shape == want.shape, (name, got.shape, want.shape)
    err = np.abs(got.astype(np.float64) - want)
    bound = bf16_ulp(np.maximum(np.abs(got), np.abs(want))) + slack
    bad = ~(err <= bound)
    assert not bad.any(), (f"{name}: {bad.sum()} of {bad.size} values off the FP8 reference, "
                           f"worst at {np.unravel_index(np.argmax(err - bound), err.shape)}: "
                           f"got {got[bad][:4]}, want {want[bad][:4]}")


def inputs(case, tokens, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, IN, generator=g) + 0.5
    dy = torch.randn(tokens, OUT, generator=g)
    if case == "zeros":
        x.zero_()
    elif case == "zero_grad":
        dy.zero_()
    elif case == "large":
        x, dy = x * 2.0 ** 14, dy * 2.0 ** 12
    elif case == "tiny":
        x, dy = x * 2.0 ** -20, dy * 2.0 ** -24
    elif case == "outliers":
        x[:: 5, :: 7] = 3000.0
        dy[:: 3, :: 11] = -5000.0
    return bf16(x), bf16(dy)


CASES = ["random", "zeros", "zero_grad", "large", "tiny", "outliers"]


@needs_reference
@pytest.mark.parametrize("tokens", [1, 16, 21, 33, 300])
@pytest.mark.parametrize("case", CASES)
def test_matches_the_fp8_reference(cpu_cache, case, tokens):
    lin = make(tokens)
    if case == "large":
        with torch.no_grad():
            lin.bias.mul_(2.0 ** 14)
    x, dy = inputs(case, tokens, seed=100 + tokens)
    got = run(lin, x, dy)
    want = fp8_reference(lin, x, dy)
    for name, g, (w, slack) in zip(("y", "dx", "dweight", "dbias"), got, want):
        assert_matches(f"{case}, {tokens} tokens: {name}", g, w, slack)
    y, dx, dw, db = got
    b = bf16(lin.bias.detach())
    if case == "zeros":
        assert torch.equal(y, b.expand(tokens, OUT)), "a zero input gives the bias"
        assert torch.equal(dw, torch.zeros_like(dw))
    if case == "zero_grad":
        for g in (dx, dw, db):
            assert torch.equal(g, torch.zeros_like(g))
    if case in ("random", "large"):
        # The bias shows: the reference without it is off almost everywhere.
        (wy, slack) = want[0]
        off = np.abs(y.numpy() - (wy - b.numpy())) > bf16_ulp(wy) + slack
        assert off.mean() > 0.9, off.mean()


@pytest.mark.parametrize("shape", [(1,), (16,), (3, 7), (300,), (2, 5, 13)])
def test_bias_gradient_is_the_token_sum(cpu_cache, shape):
    """An all-ones output gradient: every entry of the bias gradient is the
    token count, exactly (the padding rows add nothing)."""
    lin = make(7)
    x = torch.randn(*shape, IN)
    y = lin(x)
    assert y.shape == (*shape, OUT)
    y.backward(torch.ones_like(y))
    tokens = int(np.prod(shape))
    assert lin.bias.grad.dtype == torch.float32
    assert torch.equal(lin.bias.grad, torch.full((OUT,), float(tokens))), lin.bias.grad[:4]


@pytest.mark.parametrize("tokens", [16, 21])
def test_gradients_of_x_and_w_are_the_bias_free_layers(cpu_cache, tokens):
    """Biased and bias-free programs share everything but the epilogue's add
    and the bias gradient: dx and dW are the same bits, and the forward
    differs from the bias-free one plus the bias by the two bf16 roundings."""
    lin = make(11)
    plain = cnn.Linear(IN, OUT)
    with torch.no_grad():
        plain.weight.copy_(lin.weight)
    x, dy = inputs("random", tokens, seed=5)
    y, dx, dw, _ = run(lin, x, dy)
    xc = x.clone().requires_grad_()
    y0 = plain(xc)
    y0.backward(dy)
    assert torch.equal(dx, xc.grad) and torch.equal(dw, plain.weight.grad)
    # y = bf16(acc s + b), y0 = bf16(acc s): half a step of each apart.
    y0 = y0.detach().double()
    err = (y.double() - (y0 + bf16(lin.bias.detach()).double())).abs().numpy()
    assert (err <= (bf16_ulp(y.numpy()) + bf16_ulp(y0.numpy())) / 2).all()


def test_non_finite_values_raise(cpu_cache, monkeypatch):
    """Every value the program returns (the bias gradient included) is
    flagged by the kernel that writes it; a NaN or an infinity in the
    input, the bias, the output gradient, or an overflowing product raises
    NonFiniteError naming the Linear and the value."""
    from coat.nn import _autograd

    lin = make(13)
    prog = lin.program
    flagged = {prog.outputs[i][0] for i in prog.flagged}
    returned = {prog.outputs[i][0] for i in _autograd.returned_outputs(prog)}
    grads = {v for v, phase, g in prog.outputs if phase == "backward" and g is not None}
    assert returned | grads <= flagged
    checked = []
    monkeypatch.setattr(_autograd, "_check_finite", lambda x, what, phase: checked.append(what))
    x, dy = inputs("random", 21, seed=3)
    run(lin, x, dy)
    assert checked == [], checked  # every value had its kernel's flag
    monkeypatch.undo()

    bad = x.clone()
    bad[4, 9] = float("nan")
    with pytest.raises(cnn.NonFiniteError, match="Linear forward output"):
        lin(bad)
    huge = torch.full_like(x, 3e38)
    with pytest.raises(cnn.NonFiniteError, match="Linear forward output"):
        lin(huge)
    bad_dy = dy.clone()
    bad_dy[20, 3] = float("inf")
    y = lin(x.clone().requires_grad_())
    with pytest.raises(cnn.NonFiniteError, match="Linear gradient of input"):
        y.backward(bad_dy)
    with torch.no_grad():
        lin.bias[5] = float("inf")
    with pytest.raises(cnn.NonFiniteError, match="Linear forward output"):
        lin(x)


def test_parameters_match_torch_linear(cpu_cache):
    """Names, shapes, state_dict keys and repr of torch.nn.Linear; a torch
    layer's state_dict loads (and the reverse); the bias starts uniform in
    +-1/sqrt(in_features) as torch's does."""
    lin = cnn.Linear(IN, OUT, bias=True)
    ref_lin = torch.nn.Linear(IN, OUT)
    assert [n for n, _ in lin.named_parameters()] == ["weight", "bias"]
    assert list(lin.state_dict()) == list(ref_lin.state_dict()) == ["weight", "bias"]
    assert lin.bias.shape == (OUT,) and lin.bias.dtype == torch.float32
    assert lin.bias.abs().max() <= IN ** -0.5 and lin.bias.abs().max() > 0
    assert "bias=True" in repr(lin)
    lin.load_state_dict(ref_lin.state_dict())
    assert torch.equal(lin.bias, ref_lin.bias) and torch.equal(lin.weight, ref_lin.weight)
    torch.nn.Linear(IN, OUT).load_state_dict(lin.state_dict())
    assert lin.config == programs.LinearConfig(IN, OUT, bias=True)
    assert lin.program.name == "coat_linear_i64_o96_b"

    plain = cnn.Linear(IN, OUT)
    assert plain.bias is None and "bias=False" in repr(plain)
    assert list(plain.state_dict()) == list(torch.nn.Linear(IN, OUT, bias=False).state_dict())
    assert plain.program.name == "coat_linear_i64_o96"

    half = cnn.Linear(IN, OUT, bias=True, dtype=torch.bfloat16)
    x = torch.randn(5, IN, dtype=torch.bfloat16, requires_grad=True)
    y = half(x)
    y.backward(torch.ones_like(y))
    assert y.dtype == torch.bfloat16 and half.bias.grad.dtype == torch.bfloat16
    assert torch.equal(half.bias.grad, torch.full((OUT,), 5.0, dtype=torch.bfloat16))


def test_bias_free_program_is_unchanged():
    """bias=False keeps the program text from before the module took a
    bias, byte for byte: compiled kernels keep their source keys."""
    text = programs.LinearConfig(IN, OUT).text()
    assert programs.LinearConfig(IN, OUT, bias=False).text() == text
    assert hashlib.sha256(text.encode()).hexdigest() == (
        "96ddeee96f6f998209c20eec3908c1cba4002bce0c2c6e464d31de264ddb70de")
    biased = programs.LinearConfig(IN, OUT, bias=True)
    assert biased.name == "coat_linear_i64_o96_b" != programs.LinearConfig(IN, OUT).name
    assert "coat.bias_grad %dy" in biased.text()
    assert "{coat.grad_of = 2 : i64}" in biased.text()
