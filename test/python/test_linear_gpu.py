"""coat-lower-linear's FP8 GEMM (per-tensor E4M3 x E4M3 -> bf16) on the GPU,
checked against an fp32 reference that decodes the FP8 operands and against
torch._scaled_mm (cuBLASLt), on tile-multiple and ragged shapes.

Kernels come from $COAT_LINEAR_KERNELS (folders holding a manifest.json, ':'
separated) or are compiled from examples/linear/fp8_linear.mlir with coat-opt.
Skips, with the reason, without CUDA, a Hopper GPU, the runtime or kernels."""

import os
import tempfile

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import coat  # noqa: E402
from coat import _paths  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = os.path.join(REPO, "examples", "linear", "fp8_linear.mlir")


def linear_kernel_dirs():
    env = os.environ.get("COAT_LINEAR_KERNELS")
    if env:
        return [d for d in env.split(":") if d]
    if not _paths.find_coat_opt():
        return []
    from coat.toolchain import Toolchain

    out = tempfile.mkdtemp(prefix="coat-linear-")
    Toolchain().compile_file(SPEC, out, cpu=False)
    return [out]


def skip_reason():
    if not torch.cuda.is_available():
        return "CUDA is not available"
    if torch.cuda.get_device_capability() < (9, 0):
        return "needs a Hopper GPU (sm_90a wgmma)"
    if not hasattr(torch, "float8_e4m3fn"):
        return "torch has no float8_e4m3fn"
    return None


REASON = skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


@pytest.fixture(scope="module")
def kernels():
    dirs = linear_kernel_dirs()
    if not dirs:
        pytest.skip("no FP8 GEMM kernels: set COAT_LINEAR_KERNELS or build coat-opt")
    out = []
    for d in dirs:
        mod = coat.load(d)
        out += [mod[k.name] for k in mod.manifest.kernels if k.op == "linear"]
    if not out:
        pytest.skip(f"no op=linear kernel in {dirs}")
    return out


def quantize(x):
    """Per-tensor E4M3 as COAT does it: s = (max|x| + 1e-10) / 448."""
    s = (x.abs().max().float() + 1e-10) / 448.0
    return (x / s).to(torch.float8_e4m3fn), s.reshape(1).float()


def run(kernel, x8, w8, sx, sw):
    m, k = x8.shape
    n = w8.shape[0]
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x8.device)
    kernel.launch(n=n, a=x8, b=w8, out=out, a_scale=sx, b_scale=sw, m=m, k=k)
    return out


SHAPES = [
    (128, 256, 128),     # one tile
    (256, 512, 1024),    # tile multiples, several K steps (pipeline wraps)
    (512, 768, 2048),
    (300, 200, 256),     # M, N not tile multiples
    (257, 333, 4112),    # odd N (scalar stores), K tail (TMA zero fill)
    (1, 1, 16),          # smallest
    (1000, 1000, 528),
]


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_matches_decoded_fp32_reference(kernels, m, n, k):
    torch.manual_seed(m * 7 + n * 3 + k)
    x = torch.randn(m, k, device="cuda") * 3.0
    w = torch.randn(n, k, device="cuda") * 0.05
    x8, sx = quantize(x)
    w8, sw = quantize(w)
    ref = (x8.float() @ w8.float().t()) * (sx * sw)
    tol = 1e-2 * ref.abs().max().item() + 1e-6
    for kern in kernels:
        y = run(kern, x8, w8, sx, sw)
        torch.cuda.synchronize()
        err = (y.float() - ref).abs()
        # bf16 output rounding (2^-9 relative) plus Hopper's FP8 tensor-core
        # accumulation, which keeps fewer than fp32's bits (no periodic
        # promotion, as in COAT's Triton GEMM): bounded per element by 1% of
        # the element plus 0.5% of the largest output.
        bad = err > (ref.abs() * 1e-2 + tol * 0.5)
        rel = ((y.float() - ref).norm() / ref.norm()).item()
        assert rel <= 5e-3, f"{kern.name} {m}x{n}x{k}: relative error {rel:.3g}"
        assert not bad.any(), (
            f"{kern.name} {m}x{n}x{k}: {int(bad.sum())} of {y.numel()} elements off, "
            f"max err {err.max().item():.4g} (ref max {ref.abs().max().item():.4g})")


@pytest.mark.parametrize("m,n,k", [s for s in SHAPES if s[1] % 16 == 0 and s[2] % 16 == 0])
def test_matches_torch_scaled_mm(kernels, m, n, k):
    torch.manual_seed(1 + m + n + k)
    x8, sx = quantize(torch.randn(m, k, device="cuda"))
    w8, sw = quantize(torch.randn(n, k, device="cuda"))
    try:
        want = torch._scaled_mm(x8, w8.t(), scale_a=sx.reshape(()), scale_b=sw.reshape(()),
                                out_dtype=torch.bfloat16)
    except RuntimeError as e:  # cuBLASLt shape limits
        pytest.skip(f"torch._scaled_mm rejects {m}x{n}x{k}: {e}")
    for kern in kernels:
        y = run(kern, x8, w8, sx, sw)
        torch.cuda.synchronize()
        torch.testing.assert_close(y.float(), want.float(), rtol=1.6e-2,
                                   atol=1e-2 * want.float().abs().max().item())


def test_zero_scales_and_outputs_untouched_outside(kernels):
    """Elements past M x N are never written (ragged edge tiles)."""
    m, n, k = 130, 258, 256
    x8, sx = quantize(torch.randn(m, k, device="cuda"))
    w8, sw = quantize(torch.randn(n, k, device="cuda"))
    for kern in kernels:
        big = torch.full((m * n + 4096,), 7.0, dtype=torch.bfloat16, device="cuda")
        out = big[: m * n].view(m, n)
        kern.launch(n=n, a=x8, b=w8, out=out, a_scale=sx, b_scale=sw, m=m, k=k)
        torch.cuda.synchronize()
        assert (big[m * n:] == 7.0).all(), f"{kern.name} wrote past the output"
