"""The compiled scale kernels of examples/activations/scales.mlir (the second
stage of group scaling: max of partial maxima, then (max + eps) / fp8max
rounded to the scale type) against numpy, on the CPU twin in CI and on the GPU
where CUDA is available.

The GPU kernel reduces across CTAs through a two-word workspace that it must
leave at zero; every case launches twice on the same workspace, so a kernel
that forgot to clear it would fail the second launch (a larger stale maximum
from the first input, or a wrong CTA count).
"""

import numpy as np
import pytest

from coat import reference as ref
from kernel_io import compiled_kernels  # noqa: E402

if not ref.is_available():
    pytest.skip("libcoat_reference.so is not built", allow_module_level=True)

try:
    import torch

    HAVE_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    torch, HAVE_CUDA = None, False


KERNELS = compiled_kernels(("reduce_scales",), cpu_twin=False)
pytestmark = pytest.mark.skipif(
    not KERNELS, reason="no compiled scale kernels (ctest's compile-examples makes them)")

DEVICES = ["cpu"] + (["cuda"] if HAVE_CUDA else [])
# One element, a partial vector, one CTA's worth +- 1, many CTAs with a tail.
SIZES = [1, 7, 16384, 16385, 2_818_049]
CASES = ["random", "zeros", "nan", "inf", "denormal", "max_last"]
FP8MAX = {"e4m3": 448.0, "e5m2": 57344.0}


def maxima(n, case, rng):
    x = np.abs(rng.standard_normal(n) * np.exp(rng.uniform(-10, 10, n))).astype(np.float32)
    if case == "zeros":
        x[:] = 0
    elif case == "nan":
        x[rng.integers(0, n)] = np.nan
    elif case == "inf":
        x[rng.integers(0, n)] = np.inf
    elif case == "denormal":
        x *= np.float32(1e-40)
    elif case == "max_last":
        x[-1] = np.float32(3e38)  # the maximum sits in the masked tail
    return x


def expected(kernel, x):
    """numpy's version of the kernel's arithmetic: the maximum, or the scale
    derivation (max + eps) / fp8max for the FP8 format the manifest says the
    scale is for (kernel names are not a contract: outlined kernels are named
    by position, e.g. llama_mlp_block_k22_scale_from_maxima)."""
    m = np.max(x) if x.size else np.float32(0)  # np.max propagates NaN
    cfg = kernel.config
    if "format" not in cfg:
        return np.float32(m)
    s = (np.float32(m) + np.float32(cfg["eps"])) / np.float32(FP8MAX[cfg["format"]])
    return np.float32(s)


def test_scale_kernels_record_their_format():
    """Every kernel whose name says it derives a scale records which FP8
    format the scale is for, with that format's largest value and COAT's
    activation epsilon (COAT.md §1.2)."""
    derived = [k for k in KERNELS if "scale_from_maxima" in k.spec.name]
    assert derived, "no scale_from_maxima kernels compiled"
    for k in derived:
        cfg = k.config
        assert cfg.get("format") in FP8MAX, f"{k.spec.name}: config {dict(cfg)}"
        assert cfg["fp8max"] == FP8MAX[cfg["format"]], k.spec.name
        assert np.float32(cfg["eps"]) == np.float32(1e-10), k.spec.name


def as_input(x, dtype, device):
    if dtype == "bf16":
        bits = ref.bf16_encode(x)
        t = torch.from_numpy(bits.view(np.int16)) if device == "cuda" else None
        return t.cuda().view(torch.bfloat16) if t is not None else bits.view(np.uint16).view(
            __import__("ml_dtypes").bfloat16)
    return torch.from_numpy(x).cuda() if device == "cuda" else x


def read_scalar(a, dtype):
    if torch is not None and isinstance(a, torch.Tensor):
        a = a.cpu()
        a = a.view(torch.int16).numpy().view(np.uint16) if dtype == "bf16" else a.numpy()
    elif dtype == "bf16":
        a = np.asarray(a).view(np.uint16)
    return ref.bf16_decode(a)[0] if dtype == "bf16" else np.float32(np.asarray(a)[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.spec.name)
def test_scale_kernel(kernel, n, case, device):
    if device == "cpu" and not kernel.spec.cpu_symbol:
        pytest.skip("no CPU twin")
    cfg = kernel.config
    rng = np.random.default_rng(n)
    ws = (torch.zeros(2, dtype=torch.int32, device="cuda") if device == "cuda"
          else np.zeros(2, np.int32))
    for launch in range(2):
        x = maxima(n, case if launch else "random", rng)
        if cfg["input"] == "bf16":
            x = ref.bf16_round(x)
        want = expected(kernel, x)
        if cfg["scale"] == "bf16":
            want = ref.bf16_round(np.array([want], np.float32))[0]
        out = (torch.full((1,), float("nan"), device="cuda",
                          dtype=torch.float32 if cfg["scale"] == "f32" else torch.bfloat16)
               if device == "cuda" else np.full(1, np.nan, np.float32 if cfg["scale"] == "f32"
                                                else __import__("ml_dtypes").bfloat16))
        kernel.launch(maxima=as_input(x, cfg["input"], device), scale=out, workspace=ws, n=n)
        if device == "cuda":
            torch.cuda.synchronize()
        got = read_scalar(out, cfg["scale"])
        if np.isnan(want):
            assert np.isnan(got), f"launch {launch}: expected NaN, got {got!r}"
        else:
            assert np.float32(got).view(np.uint32) == np.float32(want).view(np.uint32), (
                f"launch {launch}: {got!r} vs {want!r}")
        ws_now = ws.cpu().numpy() if device == "cuda" else ws
        assert not ws_now.any(), f"launch {launch}: workspace left at {ws_now}"
