"""Programs with biased projections (coat.programs: NormLinearConfig,
LinearConfig and LinearResidualConfig with bias=True, GeluMLPConfig), run
from their launch plans against fp32 torch autograd of the same math from
the same bf16 values, every gradient included. GPT-NeoX's programs among
them: LayerNorm + the fused q/k/v projection (NormLinearConfig(norm=
"layernorm")), and the GELU MLP whose norm reads another input than the
stream it adds to (GeluMLPConfig(residual="separate"): the parallel
residual), whose stream passes the incoming gradient through exactly.

On CPU tensors the programs run their CPU twins (compiled here with
coat-opt); on CUDA tensors the kernels scripts/compile_examples.py compiled
for the demo configurations (a Qwen2-style q/k/v projection, GPT-NeoX-style
LayerNorm + q/k/v projection, LayerNorm + GELU MLP with either residual;
$COAT_KERNELS or build/demo).

Tolerances. The forward passes through FP8 roundings (E4M3 per-tensor norm
output or input, weights; 1x16 up projection and per-tensor GELU output in
the MLP), so its output (the branch y - h where a residual passes h) must
be within a relative L2 error of 0.1 of fp32 and point the same way
(cosine >= 0.99). Gradients go through E5M2 copies (two mantissa bits):
cosine >= 0.99 each, bias gradients included. Measured over 5 token counts
(16 to 304) and 4 seeds per program on the CPU twins: forward errors up to
0.053 and cosines down to 0.9937 (the GELU MLPs), 0.031 and 0.996 for the
single projections. The bias gradient of a program's own output gradient is that
gradient's f32 column sum rounded to bf16 once, so it must also match
torch's to a bf16 rounding. The bias is large enough that the same check
against the math without it fails: a bias the kernels dropped or added
twice would show.
"""

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()

from coat import artifacts, programs  # noqa: E402

FWD_TOL = 0.1
COS = 0.99


def layer_norm(x, w, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def gelu(x):
    return torch.nn.functional.gelu(x)  # exact erf, as coat.gelu


class Case:
    """A program config, its forward inputs (bf16, in the program's argument
    order) and the fp32 math: `math(*inputs)` gives the program's first
    output. `residual`: that output is h + branch (input 0 is h)."""

    def __init__(self, cfg, shapes, math, residual=False, bias_of_dy=(), telling_bias=None):
        self.cfg, self.shapes, self.math, self.residual = cfg, shapes, math, residual
        self.bias_of_dy = bias_of_dy  # inputs whose gradient is sum(dy)
        # A bias input the output must be seen to depend on (default: the
        # last of bias_of_dy).
        self.telling_bias = max(bias_of_dy) if telling_bias is None else telling_bias


def cases():
    H, O, I, F = 64, 192, 96, 160
    nl = programs.NormLinearConfig(H, O, bias=True)
    lin = programs.LinearConfig(H, 128, bias=True)
    lr = programs.LinearResidualConfig(H, I, bias=True)
    mlp_ln = programs.GeluMLPConfig(H, F)
    mlp_rms = programs.GeluMLPConfig(H, F, norm="rmsnorm")
    nl_ln = programs.NormLinearConfig(H, O, bias=True, norm="layernorm")
    nl_ln_nobias = programs.NormLinearConfig(H, O, norm="layernorm")
    mlp_sep = programs.GeluMLPConfig(H, F, residual="separate")
    mlp_rms_sep = programs.GeluMLPConfig(H, F, norm="rmsnorm", residual="separate")
    eps = 1e-5
    return {
        "norm_linear": Case(nl, [("T", H), (H,), (O, H), (O,)],
                            lambda h, wn, w, b: rms_norm(h, wn, eps) @ w.t() + b,
                            bias_of_dy=(3,)),
        "linear": Case(lin, [("T", H), (128, H), (128,)],
                       lambda x, w, b: x @ w.t() + b, bias_of_dy=(2,)),
        "linear_residual": Case(lr, [("T", I), ("T", H), (I, H), (I,)],
                                lambda h, a, w, b: h + a @ w.t() + b, residual=True,
                                bias_of_dy=(3,)),
        "gelu_mlp_layernorm": Case(
            mlp_ln, [("T", H), (H,), (H,), (F, H), (F,), (H, F), (H,)],
            lambda h, wn, bn, wu, bu, wd, bd:
                h + gelu(layer_norm(h, wn, bn, eps) @ wu.t() + bu) @ wd.t() + bd,
            residual=True, bias_of_dy=(6,)),
        "gelu_mlp_rmsnorm": Case(
            mlp_rms, [("T", H), (H,), (F, H), (F,), (H, F), (H,)],
            lambda h, wn, wu, bu, wd, bd:
                h + gelu(rms_norm(h, wn, eps) @ wu.t() + bu) @ wd.t() + bd,
            residual=True, bias_of_dy=(5,)),
        "norm_linear_layernorm": Case(
            nl_ln, [("T", H), (H,), (H,), (O, H), (O,)],
            lambda h, wn, bn, w, b: layer_norm(h, wn, bn, eps) @ w.t() + b, bias_of_dy=(4,)),
        # attention_bias=False: the norm's bias must still show.
        "norm_linear_layernorm_no_bias": Case(
            nl_ln_nobias, [("T", H), (H,), (H,), (O, H)],
            lambda h, wn, bn, w: layer_norm(h, wn, bn, eps) @ w.t(), telling_bias=2),
        # Input 0 is the stream h, input 1 the norm's input x.
        "gelu_mlp_separate_residual": Case(
            mlp_sep, [("T", H), ("T", H), (H,), (H,), (F, H), (F,), (H, F), (H,)],
            lambda h, x, wn, bn, wu, bu, wd, bd:
                h + gelu(layer_norm(x, wn, bn, eps) @ wu.t() + bu) @ wd.t() + bd,
            residual=True, bias_of_dy=(7,)),
        "gelu_mlp_rmsnorm_separate_residual": Case(
            mlp_rms_sep, [("T", H), ("T", H), (H,), (F, H), (F,), (H, F), (H,)],
            lambda h, x, wn, wu, bu, wd, bd:
                h + gelu(rms_norm(x, wn, eps) @ wu.t() + bu) @ wd.t() + bd,
            residual=True, bias_of_dy=(6,)),
    }


CASES = cases()
# What scripts/compile_examples.py compiles for the GPU.
GPU_CASES = ["norm_linear", "gelu_mlp_layernorm", "norm_linear_layernorm",
             "gelu_mlp_separate_residual"]


def make_inputs(case, tokens, seed, device):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, shape in enumerate(case.shapes):
        shape = tuple(tokens if d == "T" else d for d in shape)
        if "T" in case.shapes[i]:
            x = torch.randn(shape, generator=g)
        elif len(shape) == 2:  # a weight: unit-variance outputs
            x = torch.randn(shape, generator=g) / shape[1] ** 0.5
        else:  # norm weights around 1, norm biases and projection biases
            x = 1.0 + 0.2 * torch.randn(shape, generator=g)
        out.append(x.bfloat16().to(device))
    return out


def run_program(prog, inputs, dout):
    """The program's forward on `inputs` (its non-gradient arguments in
    order), then its backward from `dout`, the gradient of its first output.
    Returns (first output, the gradient of each input or None)."""
    forward = [v for v, role, _ in prog.inputs if role != "gradient"]
    env = dict(zip(forward, inputs))
    prog.run(env, "forward")
    y = env[prog.outputs[0][0]]
    for vid, role, grad_of in prog.inputs:
        if role == "gradient":
            assert grad_of == 0, "the programs take the gradient of their first output"
            env[vid] = dout
    prog.run(env, "backward")
    grads = {grad_of: env[vid] for vid, phase, grad_of in prog.outputs
             if phase == "backward" and grad_of is not None}
    return y, [grads.get(v) for v in forward]


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def cos(a, b):
    a, b = a.float().reshape(-1), b.float().reshape(-1)
    return (a @ b / (a.norm() * b.norm()).clamp_min(1e-30)).item()


def check(name, tokens, seed, device):
    case = CASES[name]
    prog = artifacts.program(case.cfg)
    inputs = make_inputs(case, tokens, seed, device)
    # The first output is [T, the last bias's length] (h's shape where a
    # residual adds it).
    g = torch.Generator().manual_seed(seed + 1000)
    dout = torch.randn(tokens, case.shapes[-1][0], generator=g).bfloat16().to(device)
    y, grads = run_program(prog, inputs, dout)

    leaves = [x.detach().cpu().float().requires_grad_() for x in inputs]
    want = case.math(*leaves)
    want.backward(dout.cpu().float())
    y = y.cpu().float()
    h = leaves[0].detach() if case.residual else 0
    branch, want_branch = y - h, want.detach() - h
    errs = {"output": rel(branch, want_branch)}
    cosines = {"output": cos(branch, want_branch)}
    for i, (got, leaf) in enumerate(zip(grads, leaves)):
        assert got is not None, f"{name}: no gradient for input {i}"
        assert got.shape == leaf.shape and got.dtype == torch.bfloat16, (i, got.shape, got.dtype)
        got, ref = got.cpu().float(), leaf.grad
        if case.residual and i == 0:
            # The residual passes dout through: compare the rest.
            got, ref = got - dout.cpu().float(), ref - dout.cpu().float()
        if ref.norm() == 0:  # h of a lone residual: passed through exactly
            assert (got == 0).all(), f"{name}: input {i}: the residual's gradient is not dout"
            continue
        cosines[f"d{i}"] = cos(got, ref)
        if i in case.bias_of_dy:
            # sum over tokens of the incoming gradient: one bf16 rounding.
            errs[f"d{i}"] = rel(got, ref)
            assert errs[f"d{i}"] <= 2.0 ** -8, f"{name}: bias gradient {i}: {errs}"
    bad = {k: round(v, 4) for k, v in cosines.items() if not v >= COS}
    assert not bad, f"{name}, {tokens} tokens: cosines below {COS}: {bad} (all: {cosines})"
    assert errs["output"] <= FWD_TOL, f"{name}, {tokens} tokens: forward {errs}"
    # The tolerance sees the bias: the math without it is far off.
    bias = case.telling_bias
    unbiased = [x.detach() if j != bias else torch.zeros_like(x.detach())
                for j, x in enumerate(leaves)]
    off = rel(branch, case.math(*unbiased) - h)
    assert off > 2 * FWD_TOL, f"{name}: the output does not tell the bias ({off:.3f})"
    return errs, cosines


@pytest.mark.parametrize("tokens,seed", [(16, 0), (48, 1), (80, 2)])
@pytest.mark.parametrize("name", list(CASES))
def test_cpu_twins_match_fp32_autograd(cpu_cache, name, tokens, seed):
    check(name, tokens, seed, "cpu")


def test_bias_free_programs_are_unchanged():
    """bias=False gives the text of the configs without a bias field, so
    artifacts compiled before keep their source keys."""
    nl = programs.NormLinearConfig(1024, 3072, 1e-6)
    assert nl == programs.NormLinearConfig(1024, 3072, 1e-6, bias=False)
    for cfg in (nl, programs.LinearConfig(64, 128), programs.LinearResidualConfig(64, 96)):
        text = cfg.text()
        assert "bias" not in text and "%b" not in text, cfg
        assert not cfg.name.endswith("_b")
        biased = type(cfg)(**{**cfg.__dict__, "bias": True})
        assert biased.name == cfg.name + "_b"
        assert "coat.bias_grad" in biased.text()


def test_default_norm_and_residual_keep_names_and_texts():
    """norm="rmsnorm" (NormLinearConfig) and residual="input" (GeluMLPConfig)
    are the programs from before those fields, by name and text: compiled
    kernels keep their names and source keys."""
    nl = programs.NormLinearConfig(64, 192, bias=True)
    assert nl == programs.NormLinearConfig(64, 192, bias=True, norm="rmsnorm")
    assert nl.name == "coat_norm_linear_h64_o192_b"
    assert "coat.rmsnorm " in nl.text() and "layernorm" not in nl.text()
    ln = programs.NormLinearConfig(64, 192, bias=True, norm="layernorm")
    assert ln.name == "coat_norm_linear_ln_h64_o192_b"
    assert "coat.layernorm " in ln.text() and "rmsnorm" not in ln.text()
    mlp = programs.GeluMLPConfig(64, 160)
    assert mlp == programs.GeluMLPConfig(64, 160, residual="input")
    assert mlp.name == "coat_gelu_mlp_ln_h64_f160_b"
    sep = programs.GeluMLPConfig(64, 160, residual="separate")
    assert sep.name == "coat_gelu_mlp_ln_h64_f160_b_separate_residual"
    assert "%x: tensor<?x64xbf16>" in sep.text() and "%x" not in mlp.text()
    assert "coat.residual_add_grad" in mlp.text()
    assert "coat.residual_add_grad" not in sep.text()
    with pytest.raises(ValueError, match="norm 'batchnorm' is not rmsnorm or layernorm"):
        programs.NormLinearConfig(64, 192, norm="batchnorm").text()
    with pytest.raises(ValueError, match="residual 'both' is not input or separate"):
        programs.GeluMLPConfig(64, 160, residual="both").text()


def test_separate_residual_tells_the_stream_from_the_norm_input(cpu_cache):
    """The check of the separate-residual MLP fails against the math with h
    and x swapped: the program's norm reads x, its residual adds h."""
    case = CASES["gelu_mlp_separate_residual"]
    swapped = Case(case.cfg, case.shapes,
                   lambda h, x, *ws: case.math(x, h, *ws), residual=True,
                   bias_of_dy=case.bias_of_dy)
    CASES["swapped"] = swapped
    try:
        with pytest.raises(AssertionError):
            check("swapped", 48, 1, "cpu")
    finally:
        del CASES["swapped"]


def test_gelu_mlp_takes_the_tanh_form_of_gelu():
    """approximate="tanh" (GPT-2's gelu_new): both GELU ops of the program
    take it, and it is part of the name and the text (so of the content
    key); the exact form keeps the program as it was."""
    exact = programs.GeluMLPConfig(64, 160)
    tanh = programs.GeluMLPConfig(64, 160, approximate="tanh")
    assert exact == programs.GeluMLPConfig(64, 160, approximate="none")
    assert tanh.name == "coat_gelu_mlp_ln_h64_f160_b_tanh" and tanh != exact
    text = tanh.text()
    assert 'coat.gelu %up_q {approximate = "tanh"} :' in text
    assert 'coat.gelu_grad %up_q, %dact {approximate = "tanh"} :' in text
    assert text.replace(' {approximate = "tanh"}', "").replace(tanh.name, exact.name) == \
        exact.text()
    with pytest.raises(ValueError, match="approximate 'erf' is not none or tanh"):
        programs.GeluMLPConfig(64, 160, approximate="erf").text()


def test_gelu_mlp_rejects_an_unknown_norm():
    with pytest.raises(ValueError, match="norm 'batchnorm' is not layernorm or rmsnorm"):
        programs.GeluMLPConfig(64, 160, norm="batchnorm").text()
    with pytest.raises(ValueError, match="multiple of the group size"):
        programs.GeluMLPConfig(64, 100).text()


def test_incoming_gradient_is_read_once_for_scale_and_bias(cpu_cache):
    """The bias gradient of an incoming gradient is summed in the kernel
    that takes its maxima (coat-outline-kernels): no separate bias-gradient
    call reads dy; in the MLP the up projection's, whose gradient a GELU
    kernel produces, has a kernel of its own."""
    for name, fused, alone in (("norm_linear", 1, 0), ("linear", 1, 0),
                               ("linear_residual", 1, 0), ("gelu_mlp_layernorm", 1, 1),
                               ("norm_linear_layernorm", 1, 0),
                               ("gelu_mlp_separate_residual", 1, 1)):
        prog = artifacts.program(CASES[name].cfg)
        kinds = [s.spec.split("_k", 1)[1].split("_", 1)[1] for s in prog.steps
                 if "bias_grad" in s.spec]
        assert kinds.count("absmax_bias_grad") == fused, (name, kinds)
        assert kinds.count("bias_grad") == alone, (name, kinds)
        for s in prog.steps:
            if "bias_grad" in s.spec:
                assert s.phase == "backward"
                assert [k.spec.op for k in s.kernels] == ["bias_grad", "bias_grad_reduce"]


def cuda_or_skip(name):
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")
    try:
        artifacts.program(CASES[name].cfg)
    except RuntimeError as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("tokens,seed", [(16, 3), (304, 4), (2048, 5)])
@pytest.mark.parametrize("name", GPU_CASES)
def test_cuda_kernels_match_fp32_autograd(name, tokens, seed):
    cuda_or_skip(name)
    check(name, tokens, seed, "cuda")
