"""coat.nn.Linear (with and without a bias), RMSNorm and LayerNorm: one
compiled program each, checked against fp32 autograd of the same math from
the same bf16 values, gradient by gradient (test_nn_linear_bias.py checks
the biased Linear against the host FP8 reference too).

Tolerances (relative L2): the FP8 linear 0.2 (per-tensor E4M3 operands
forward, E5M2 output gradient; measured about 0.06 on CPU), the norms 0.1
(their input is a 1x16 E4M3 copy, the arithmetic f32; measured about 0.025).
Each check also fails against a wrong reference (a permuted weight, the
other norm), so the tolerances tell wirings apart.

CPU tests compile the programs into a temporary cache with coat-opt; CUDA
tests use the hidden-1024 programs that scripts/demo.sh compiles, and its
hidden-8192 LayerNorm (found through $COAT_KERNELS or build/demo).
"""


import pytest

from conftest import torch_or_skip

torch = torch_or_skip()

import coat.nn as cnn  # noqa: E402

F = torch.nn.functional


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def rms_ref(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


# Output features of the linear per input size: 1024 -> 2816 is what
# scripts/demo.sh compiles for the GPU.
LINEAR_OUT = {64: 96, 1024: 2816}

# name -> (module factory, fp32 reference, a wrong reference, tolerance)
CASES = {
    "linear": (lambda h, dev: cnn.Linear(h, LINEAR_OUT[h], device=dev),
               lambda x, ps: x @ ps[0].t(),
               lambda x, ps: x @ ps[0].flip(1).t(), 0.2),
    "linear_bias": (lambda h, dev: cnn.Linear(h, LINEAR_OUT[h], bias=True, device=dev),
                    lambda x, ps: x @ ps[0].t() + ps[1],
                    lambda x, ps: x @ ps[0].flip(1).t() + ps[1], 0.2),
    "rmsnorm": (lambda h, dev: cnn.RMSNorm(h, device=dev),
                lambda x, ps: rms_ref(x, ps[0]),
                lambda x, ps: F.layer_norm(x, x.shape[-1:], ps[0], None, 1e-5), 0.1),
    "layernorm": (lambda h, dev: cnn.LayerNorm(h, device=dev),
                  lambda x, ps: F.layer_norm(x, x.shape[-1:], ps[0], ps[1], 1e-5),
                  lambda x, ps: rms_ref(x, ps[0]) + ps[1], 0.1),
    "layernorm_nobias": (lambda h, dev: cnn.LayerNorm(h, bias=False, device=dev),
                         lambda x, ps: F.layer_norm(x, x.shape[-1:], ps[0], None, 1e-5),
                         lambda x, ps: rms_ref(x, ps[0]), 0.1),
}


def check_module(case, hidden, shape, device, seed):
    make, ref, wrong, tol = CASES[case]
    torch.manual_seed(seed)
    mod = make(hidden, device)
    with torch.no_grad():
        for p in mod.parameters():
            if p.dim() == 1:
                p.add_(0.2 * torch.randn_like(p))
    # A mean away from zero: RMSNorm and LayerNorm differ on it.
    x = (torch.randn(*shape, hidden, device=device) + 0.5).bfloat16().float()
    xc = x.clone().requires_grad_()
    y = mod(xc)
    assert y.shape == (*shape, y.shape[-1]) and y.dtype == x.dtype
    dy = torch.randn_like(y)
    y.backward(dy)
    xr = x.clone().requires_grad_()
    ps = [p.detach().float().clone().requires_grad_() for p in mod.parameters()]
    yr = ref(xr, ps)
    yr.backward(dy)
    errs = {"output": rel(y, yr), "dx": rel(xc.grad, xr.grad)}
    for (name, p), q in zip(mod.named_parameters(), ps):
        assert p.grad is not None and p.grad.dtype == p.dtype, name
        errs["d" + name] = rel(p.grad, q.grad)
    bad = {k: round(v, 4) for k, v in errs.items() if not v <= tol}
    assert not bad, f"{case}: relative errors above {tol}: {bad} (all: {errs})"
    assert rel(y, wrong(x, [p.detach().float() for p in mod.parameters()])) > 2 * tol
    return mod


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("shape", [(16,), (3, 7), (1, 1)])
def test_cpu_module_matches_fp32_autograd(cpu_cache, case, shape):
    check_module(case, 64, shape, "cpu", seed=len(shape) * 10 + shape[-1])


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_module_matches_fp32_autograd(case):
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")
    make = CASES[case][0]
    try:
        make(1024, "cuda").program
    except RuntimeError as e:
        pytest.skip(str(e))
    if case == "layernorm_nobias":
        pytest.skip("scripts/demo.sh compiles the LayerNorm with bias only")
    check_module(case, 1024, (4, 300), "cuda", seed=3)


def test_cuda_wide_layernorm_runs_its_shared_column_sums():
    """LayerNorm(8192) (scripts/demo.sh compiles it): its backward's row
    kernel takes dweight/dbias in shared memory (512 groups a row), so the
    program runs it and `_reduce` (config.of), and no `_columns`."""
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")
    try:
        prog = cnn.LayerNorm(8192, device="cuda").program
    except RuntimeError as e:
        pytest.skip(str(e))
    grads = [s for s in prog.steps if s.kernels[0].spec.op == "layernorm_grad"]
    assert len(grads) == 1, [s.spec for s in prog.steps]
    kernels = grads[0].kernels
    assert kernels[0].config["column_sums"] == "shared"
    assert [k.spec.op for k in kernels] == ["layernorm_grad", "norm_grad_reduce"]
    check_module("layernorm", 8192, (3, 100), "cuda", seed=5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_saved_activations_are_fp8(cpu_cache, case):
    """What the backward keeps of the token-sized input is FP8 (the linear's
    transposed per-tensor copy, the norms' 1x16 copy), never bf16."""
    mod = CASES[case][0](64, "cpu")
    prog = mod.program
    inputs = set(prog.input_ids())
    # Token-sized matrices ([T, n] or [n, T]); per-row statistics are [T].
    token_sized = [v for v in prog.saved if v not in inputs
                   and -1 in prog.values[v].shape and len(prog.values[v].shape) == 2]
    assert token_sized, f"{case}: the plan saves no activation"
    for v in token_sized:
        t = prog.values[v]
        assert t.kind == "qtensor" and t.dtype in ("e4m3", "e5m2"), (case, v, t)


def test_bad_configs_and_inputs_name_the_module(cpu_cache):
    with pytest.raises(ValueError, match="LinearConfig: inner = 40"):
        cnn.Linear(40, 64)
    with pytest.raises(ValueError, match="LinearConfig: out = 40"):
        cnn.Linear(64, 40, bias=True)
    with pytest.raises(ValueError, match="NormConfig: hidden = 10"):
        cnn.RMSNorm(10)
    lin = cnn.Linear(64, 96)
    with pytest.raises(ValueError, match="Linear: input has 32 features, the layer takes 64"):
        lin(torch.randn(4, 32))
    with pytest.raises(ValueError, match="RMSNorm: input dtype torch.float16"):
        cnn.RMSNorm(64)(torch.randn(4, 64).half())
