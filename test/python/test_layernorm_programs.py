"""Programs whose pre-norm is a LayerNorm, with or without parameters:
the attention input (NormLinearConfig(norm="layernorm", norm_affine=False),
with and without the q/k/v bias and RoPE) and the SwiGLU MLP block
(MLPBlockConfig(norm="layernorm"), with weight and bias or, with
norm_affine=False, none: OLMo-1's LayerNorm). Run through their compiled
kernels under autograd (the CPU twins here, compiled with coat-opt; on a
Hopper GPU the small ones scripts/compile_examples.py compiles) against fp32
torch autograd of the same formulas from the same bf16 values.

Tolerances. The attention input as test_bias_programs.py's: the output
within a relative L2 error of 0.1 of fp32 and at cosine >= 0.99, every
gradient at cosine >= 0.99. The MLP block passes through more FP8 roundings
(1x16 gate, up and SiLU, the per-tensor SwiGLU product): its branch (output
minus the stream) within 0.15 and at cosine >= 0.985, every gradient (the
stream's minus the incoming gradient, which the residual passes through) at
cosine >= 0.985. Measured on the CPU twins over 4 token counts (16 to 304)
and 4 seeds: the attention inputs' forward errors up to 0.068 and cosines
down to 0.9966; the MLP blocks' 0.108 and 0.990 (the RMSNorm MLP block on
the same inputs: 0.090 and 0.993). The inputs' rows have means of their own
(as hidden states do), so the same check against the math with an RMSNorm in
place of the LayerNorm (no mean subtracted) fails by far (forward errors
0.69 and up), and so does the affine program checked against the math
without its parameters: checked below.
"""

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()

import coat.nn as cnn  # noqa: E402
from coat import artifacts, programs  # noqa: E402

#: (forward error, cosine) bounds of the attention input and the MLP block
NORM_LINEAR_TOL = (0.1, 0.99)
MLP_TOL = (0.15, 0.985)
H, O, F = 64, 192, 160
EPS = 1e-5
# With RoPE: head_dim 32 (half a head a multiple of the group size), 4 q
# heads and 2 each of k and v: 6 rotated heads of the 8.
ROPE_H, ROPE_D, ROPE_HEADS = 128, 32, 6
ROPE_O = 8 * ROPE_D


def layer_norm(x, eps=EPS, w=None, b=None):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


def rms_norm(x, eps=EPS, w=None, b=None):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


def swiglu(x, wg, wu, wd):
    return (torch.nn.functional.silu(x @ wg.t()) * (x @ wu.t())) @ wd.t()


def rope(y, cos, sin, heads=ROPE_HEADS, d=ROPE_D):
    """Hugging Face's rotate_half RoPE of the first ``heads`` heads."""
    qk = y[:, :heads * d].reshape(y.shape[0], heads, d)
    rot = torch.cat([-qk[..., d // 2:], qk[..., :d // 2]], dim=-1)
    qk = qk * cos[:, None, :] + rot * sin[:, None, :]
    return torch.cat([qk.reshape(y.shape[0], heads * d), y[:, heads * d:]], dim=1)


class Case:
    """A config, its forward inputs' shapes in argument order ("T": the
    token count; "tables": RoPE's cos and sin, f32, no gradient) and the
    fp32 math of its first output from those inputs, given the norm
    function to use (``norm(x, w=..., b=...)``)."""

    def __init__(self, cfg, shapes, math, residual=False):
        self.cfg, self.shapes, self.math, self.residual = cfg, shapes, math, residual
        self.fwd_tol, self.cos = MLP_TOL if residual else NORM_LINEAR_TOL


def cases():
    nl = programs.NormLinearConfig
    mlp = programs.MLPBlockConfig
    plain = dict(norm="layernorm", norm_affine=False)
    rotary = dict(rope_head_dim=ROPE_D, rope_heads=ROPE_HEADS)
    return {
        "norm_linear": Case(nl(H, O, EPS, **plain), [("T", H), (O, H)],
                            lambda norm, h, w: norm(h) @ w.t()),
        "norm_linear_bias": Case(nl(H, O, EPS, bias=True, **plain), [("T", H), (O, H), (O,)],
                                 lambda norm, h, w, b: norm(h) @ w.t() + b),
        "norm_linear_rope": Case(nl(ROPE_H, ROPE_O, EPS, **rotary, **plain),
                                 [("T", ROPE_H), (ROPE_O, ROPE_H), "tables"],
                                 lambda norm, h, w, cos, sin: rope(norm(h) @ w.t(), cos, sin)),
        "mlp": Case(mlp(H, F, EPS, **plain), [("T", H), (F, H), (F, H), (H, F)],
                    lambda norm, h, wg, wu, wd: h + swiglu(norm(h), wg, wu, wd), residual=True),
        "mlp_affine": Case(mlp(H, F, EPS, norm="layernorm"),
                           [("T", H), (H,), (H,), (F, H), (F, H), (H, F)],
                           lambda norm, h, wn, bn, wg, wu, wd:
                               h + swiglu(norm(h, w=wn, b=bn), wg, wu, wd), residual=True),
    }


CASES = cases()
# What scripts/compile_examples.py compiles for the GPU.
GPU_CASES = ["norm_linear", "mlp"]


def make_inputs(case, tokens, seed):
    """bf16 inputs (f32 tables): stream rows with means of their own,
    weights giving unit-variance outputs, norm weights around 1 and biases
    around 0."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for shape in case.shapes:
        if shape == "tables":
            inv = 1.0 / 10000 ** (torch.arange(0, ROPE_D, 2).float() / ROPE_D)
            ang = torch.outer(torch.arange(tokens).float(), inv)
            ang = torch.cat([ang, ang], dim=-1)
            out += [ang.cos(), ang.sin()]
            continue
        dims = tuple(tokens if d == "T" else d for d in shape)
        if "T" in shape:
            x = torch.randn(dims, generator=g) + 1.5 * torch.randn(tokens, 1, generator=g)
        elif len(dims) == 2:
            x = torch.randn(dims, generator=g) / dims[1] ** 0.5
        else:
            x = 0.2 * torch.randn(dims, generator=g) + (1.0 if len(out) == 1 else 0.0)
        out.append(x.bfloat16())
    return out


def run(case, inputs, dout, device):
    """The program's first output and the gradient of every bf16 input."""
    prog = artifacts.program(case.cfg)
    xs = [x.to(device).requires_grad_(x.dtype == torch.bfloat16) for x in inputs]
    (y,) = cnn._RunProgram.apply(prog, case.cfg.name, *xs)
    y.backward(dout.to(device))
    return y.detach().cpu().float(), [x.grad.cpu().float() for x in xs if x.requires_grad]


def reference(case, inputs, dout, norm=layer_norm, drop_affine=False):
    """fp32 autograd of the case's math (with ``norm``; ``drop_affine``:
    the norm's weight and bias left out)."""
    leaves = [x.detach().float().requires_grad_(x.dtype == torch.bfloat16) for x in inputs]

    def norm_fn(x, w=None, b=None):
        return norm(x) if drop_affine else norm(x, w=w, b=b)

    y = case.math(norm_fn, *leaves)
    y.backward(dout.float())
    return y.detach(), [x.grad for x in leaves if x.requires_grad]


def cos(a, b):
    a, b = a.reshape(-1), b.reshape(-1)
    return (a @ b / (a.norm() * b.norm()).clamp_min(1e-30)).item()


def rel(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def compare(case, got, want, h, dout):
    """Forward error and the cosine of the branch and of every gradient."""
    (y, grads), (want_y, want_grads) = got, want
    if case.residual:
        y, want_y = y - h, want_y - h
        grads[0], want_grads[0] = grads[0] - dout, want_grads[0] - dout
    cosines = {"output": cos(y, want_y)}
    # (A reference that leaves an input out gives it no gradient.)
    cosines.update({f"d{i}": cos(g, w) for i, (g, w) in enumerate(zip(grads, want_grads))
                    if w is not None})
    return rel(y, want_y), cosines


def check(case, got, want, h, dout):
    err, cosines = compare(case, got, want, h, dout)
    bad = {k: round(v, 4) for k, v in cosines.items() if not v >= case.cos}
    assert not bad, f"cosines below {case.cos}: {bad} (all: {cosines})"
    assert err <= case.fwd_tol, f"forward error {err:.4f}"


def inputs_and_dout(case, tokens, seed):
    inputs = make_inputs(case, tokens, seed)
    out = case.cfg.hidden if case.residual else case.cfg.out
    g = torch.Generator().manual_seed(seed + 1000)
    return inputs, torch.randn(tokens, out, generator=g).bfloat16()


@pytest.mark.parametrize("tokens,seed", [(16, 0), (48, 1), (80, 2)])
@pytest.mark.parametrize("name", list(CASES))
def test_cpu_twins_match_fp32_autograd(cpu_cache, name, tokens, seed):
    case = CASES[name]
    inputs, dout = inputs_and_dout(case, tokens, seed)
    got = run(case, inputs, dout, "cpu")
    check(case, got, reference(case, inputs, dout), inputs[0].float(), dout.float())


@pytest.mark.parametrize("name", ["norm_linear", "norm_linear_rope", "mlp"])
def test_the_check_tells_a_layernorm_from_an_rmsnorm(cpu_cache, name):
    """The LayerNorm subtracts each row's mean: the same check against the
    math without it (an RMSNorm, what the Llama programs compute) fails."""
    case = CASES[name]
    inputs, dout = inputs_and_dout(case, 48, 1)
    got = run(case, inputs, dout, "cpu")
    h, dy = inputs[0].float(), dout.float()
    check(case, got, reference(case, inputs, dout), h, dy)
    with pytest.raises(AssertionError):
        check(case, got, reference(case, inputs, dout, norm=rms_norm), h, dy)


def test_the_check_tells_the_affine_norm_from_the_plain_one(cpu_cache):
    """The affine program's norm weight and bias show: the check against
    the math without them fails."""
    case = CASES["mlp_affine"]
    inputs, dout = inputs_and_dout(case, 48, 1)
    got = run(case, inputs, dout, "cpu")
    h, dy = inputs[0].float(), dout.float()
    err, _ = compare(case, got, reference(case, inputs, dout, drop_affine=True), h, dy)
    assert err > 2 * case.fwd_tol, err


def test_names_and_arguments_tell_the_norms_apart():
    """Each norm has a name of its own (RMSNorm keeps the names from before
    the option); the LayerNorm without parameters takes no norm argument
    and returns no norm gradient."""
    nl = programs.NormLinearConfig
    names = {nl(H, O).name, nl(H, O, norm="layernorm").name,
             nl(H, O, norm="layernorm", norm_affine=False).name}
    assert names == {"coat_norm_linear_h64_o192", "coat_norm_linear_ln_h64_o192",
                     "coat_norm_linear_ln_noaffine_h64_o192"}
    mlp = programs.MLPBlockConfig
    assert mlp(H, F) == mlp(H, F, norm="rmsnorm", norm_affine=True)
    assert [mlp(H, F).name, mlp(H, F, norm="layernorm").name,
            mlp(H, F, norm="layernorm", norm_affine=False).name] == [
        "coat_mlp_h64_f160", "coat_mlp_ln_h64_f160", "coat_mlp_ln_noaffine_h64_f160"]
    plain = mlp(H, F, norm="layernorm", norm_affine=False).text()
    assert "coat.layernorm %h_q eps = 1.000000e-05\n" in plain
    assert "%dx_norm = coat.layernorm_grad %h_q, %mean, %rstd, %dln\n" in plain
    assert "%w_norm" not in plain and "%b_norm" not in plain and "rmsnorm" not in plain
    text = nl(H, O, norm="layernorm", norm_affine=False, bias=True).text()
    assert "%w_norm" not in text and "%dh = coat.layernorm_grad" in text
    # W is argument 1 and its bias 2: the gradients say so.
    assert "tensor<192x64xbf16> {coat.grad_of = 1 : i64}" in text
    assert "tensor<192xbf16> {coat.grad_of = 2 : i64}" in text
    for cfg in (mlp(H, F, norm="layernorm", norm_affine=False), mlp(H, F, norm="layernorm"),
                nl(H, O, norm="layernorm", norm_affine=False)):
        assert cfg.text().count("coat.grad_of") == 1 + sum(
            1 for line in cfg.text().splitlines() if "{coat.weight}" in line) + 1


@pytest.mark.parametrize("make,match", [
    (lambda: programs.NormLinearConfig(H, O, norm_affine=False),
     "NormLinearConfig: norm_affine=False needs norm='layernorm'"),
    (lambda: programs.MLPBlockConfig(H, F, norm_affine=False),
     "MLPBlockConfig: norm_affine=False needs norm='layernorm'"),
    (lambda: programs.MLPBlockConfig(H, F, norm="batchnorm"),
     "MLPBlockConfig: norm 'batchnorm' is not rmsnorm or layernorm"),
])
def test_configs_refuse_what_they_cannot_compute(make, match):
    with pytest.raises(ValueError, match=match):
        make().text()


@pytest.mark.parametrize("tokens,seed", [(16, 3), (304, 4), (2048, 5)])
@pytest.mark.parametrize("name", GPU_CASES)
def test_cuda_kernels_match_fp32_autograd(name, tokens, seed):
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")
    case = CASES[name]
    try:
        artifacts.program(case.cfg)
    except RuntimeError as e:
        pytest.skip(str(e))
    inputs, dout = inputs_and_dout(case, tokens, seed)
    got = run(case, inputs, dout, "cuda")
    check(case, got, reference(case, inputs, dout), inputs[0].float(), dout.float())
