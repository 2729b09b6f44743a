"""The compiled activation kernels of examples/activations (CPU twin in CI, GPU
kernel where CUDA is available) against the host reference library, on
random and adversarial inputs and odd shapes.

Both targets divide by the scale with an IEEE division (as the library does),
so FP8 codes and scales must be equal bit for bit. The one exception is the
sign of NaN codes: a NaN made by the arithmetic (inf/inf when a group holds an
infinity) is the negative default NaN on x86 and the positive canonical NaN on
the GPU, so NaN codes are compared as "NaN or not". (COAT's Triton kernels use
the approximate `div.full.f32`; they can differ from all of these by one FP8
step where x/s lands within an ulp of a rounding midpoint.)
"""

import ml_dtypes
import numpy as np
import pytest

import coat
from coat import _paths, reference as ref

if not ref.is_available():
    pytest.skip("libcoat_reference.so is not built", allow_module_level=True)

OPS = ("quantize", "quantize_transpose", "dequantize", "absmax")


def kernels():
    out = []
    for d in _paths.default_kernel_dirs():
        try:
            mod = coat.load(d)
        except coat.ManifestError:
            continue
        out += [k for k in mod.kernels.values() if k.spec.op in OPS and k.spec.cpu_symbol]
    return out


KERNELS = kernels()
pytestmark = pytest.mark.skipif(
    not KERNELS, reason="no compiled activation kernels (ctest's compile-examples makes them)")

try:
    import torch

    HAVE_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    torch, HAVE_CUDA = None, False

DEVICES = ["cpu"] + (["cuda"] if HAVE_CUDA else [])
SHAPES = [(1, 16), (3, 48), (257, 80), (1000, 1040)]
CASES = ["random", "zeros", "nonfinite", "denormal", "wide", "equal"]
NAN_MASK = {"e4m3": 0x7F, "e5m2": 0x7C}


def shape_for(kernel, rows, cols):
    """per_group<G> needs G | cols: widen cols to the next multiple of G."""
    g = kernel.spec.group_size
    if g and cols % g:
        cols = -(-cols // g) * g
    return rows, cols


def activation(rng, shape, case, bf16):
    rows, cols = shape
    x = (rng.standard_normal(shape) * np.exp(rng.uniform(-8, 8, shape))).astype(np.float32)
    if case == "zeros":
        x[:, : cols // 2] = 0  # whole zero groups, and an all-zero 1x16
        if rows == 1:
            x[:] = 0
    elif case == "nonfinite":
        flat = x.reshape(-1)
        flat[:: 97] = np.nan
        flat[5 :: 211] = np.inf
        flat[7 :: 307] = -np.inf
    elif case == "denormal":
        x *= np.float32(1e-39)  # f32 (and bf16) denormals, some exact zeros
    elif case == "wide":
        x *= np.exp(rng.uniform(-30, 30, shape)).astype(np.float32)
        x.reshape(-1)[::13] = np.float32(3e38)
    elif case == "equal":
        x = np.where(rng.uniform(size=shape) < 0.5, -0.3, 0.3).astype(np.float32)
    return ref.bf16_round(x) if bf16 else x


def hp_array(x, dtype, device):
    """f32 values (bf16-exact for bf16) -> a buffer of the manifest dtype."""
    if dtype == "bf16":
        bits = ref.bf16_encode(x)
        if device == "cuda":
            return torch.from_numpy(bits.view(np.int16)).cuda().view(torch.bfloat16)
        return bits.view(ml_dtypes.bfloat16)
    return torch.from_numpy(x.copy()).cuda() if device == "cuda" else x.copy()


def hp_values(a, dtype):
    """A buffer of the manifest dtype -> f32 values."""
    if torch is not None and isinstance(a, torch.Tensor):
        a = (a.view(torch.int16).cpu().numpy().view(np.uint16) if dtype == "bf16"
             else a.cpu().numpy())
    elif dtype == "bf16":
        a = a.view(np.uint16)
    return ref.bf16_decode(a) if dtype == "bf16" else np.asarray(a, dtype=np.float32)


def empty(shape, dtype, device):
    """An output buffer filled with garbage (NaN, or code 0x55)."""
    if device == "cuda":
        t = {"f32": torch.float32, "bf16": torch.bfloat16}.get(dtype)
        if t is None:
            return torch.full(shape, 0x55, dtype=torch.uint8, device="cuda")
        return torch.full(shape, float("nan"), dtype=t, device="cuda")
    if dtype in ("f32", "bf16"):
        return np.full(shape, np.nan, np.float32).astype(
            np.float32 if dtype == "f32" else ml_dtypes.bfloat16)
    return np.full(shape, 0x55, np.uint8)


def codes_of(a):
    if torch is not None and isinstance(a, torch.Tensor):
        a = a.cpu().numpy()
    return np.asarray(a).view(np.uint8)


def assert_codes_equal(got, want, fmt, what):
    got, want = codes_of(got).reshape(-1), np.asarray(want).reshape(-1)
    m = NAN_MASK[fmt]
    nan_g, nan_w = (got & m) == m, (want & m) == m
    assert np.array_equal(nan_g, nan_w), f"{what}: NaN codes differ"
    bad = np.flatnonzero((got != want) & ~nan_w)
    assert bad.size == 0, (f"{what}: {bad.size} codes differ, first at {bad[0]}: "
                           f"{got[bad[0]]:#04x} vs {want[bad[0]]:#04x}")


def assert_values_equal(got, want, what):
    """Bitwise as f32, NaNs equal to NaNs."""
    got, want = np.asarray(got, np.float32).reshape(-1), np.asarray(want, np.float32).reshape(-1)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{what}: NaNs differ"
    bad = np.flatnonzero((got.view(np.uint32) != want.view(np.uint32)) & ~nan)
    assert bad.size == 0, (f"{what}: {bad.size} values differ, first at {bad[0]}: "
                           f"{got[bad[0]]!r} vs {want[bad[0]]!r}")


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def check_quantize(kernel, device, shape, case, seed):
    cfg = kernel.config
    fmt, in_dtype, bf16_scale = cfg["format"], cfg["input"], cfg["scale"] == "bf16"
    rows, cols = shape
    x = activation(np.random.default_rng(seed), shape, case, in_dtype == "bf16")
    if cfg["scaling"] == "per_group":
        G = kernel.spec.group_size
        want_codes, want_scales = ref.quantize_per_group(x, G, fmt, bf16_scale=bf16_scale)
        codes = empty(shape, fmt, device)
        scales = empty((rows, cols // G), cfg["scale"], device)
        kernel.launch(input=hp_array(x, in_dtype, device), codes=codes, scale=scales,
                      rows=rows, cols=cols)
        sync(device)
        assert_codes_equal(codes, want_codes, fmt, "codes")
        assert_values_equal(hp_values(scales, cfg["scale"]), want_scales, "scales")
        return
    # A given per-tensor scale: COAT's group-scaling scale of this input.
    s = ref.two_stage_tensor_scale(x, 16, fmt, bf16_scale=bf16_scale)
    scale = hp_array(np.array([s], np.float32), cfg["scale"], device)
    want = ref.quantize_with_scale(x, s, fmt)
    codes = empty(shape, fmt, device)
    if kernel.spec.op == "quantize":
        kernel.launch(input=hp_array(x, in_dtype, device), scale=scale, codes=codes,
                      rows=rows, cols=cols)
        sync(device)
        assert_codes_equal(codes, want, fmt, "codes")
        return
    codes_t = empty((cols, rows), fmt, device)
    kernel.launch(input=hp_array(x, in_dtype, device), scale=scale, codes=codes,
                  codes_t=codes_t, rows=rows, cols=cols)
    sync(device)
    assert_codes_equal(codes, want, fmt, "codes")
    assert_codes_equal(codes_t, want.reshape(rows, cols).T, fmt, "transposed codes")


def check_dequantize(kernel, device, shape, case, seed):
    cfg = kernel.config
    fmt, out_dtype, scale_dtype = cfg["format"], cfg["output"], cfg["scale"]
    rows, cols = shape
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 256, size=shape, dtype=np.uint8)  # NaN/inf codes included
    if case == "zeros":
        codes[:] = 0
    per_group = cfg["scaling"] == "per_group"
    G = kernel.spec.group_size
    sshape = (rows, cols // G) if per_group else (1,)
    scales = np.exp(rng.uniform(-20, 20, sshape)).astype(np.float32)
    if case == "denormal":
        scales[...] = np.float32(1e-38)
    if case == "wide":
        scales[...] = np.float32(1e36)  # products overflow to inf
    if scale_dtype == "bf16":
        scales = ref.bf16_round(scales)
    kind = "per_group" if per_group else "per_tensor"
    want = ref.dequantize(codes, scales if per_group else scales.reshape(()), kind, fmt,
                          group_size=G if per_group else 0)
    if out_dtype == "bf16":
        want = ref.bf16_round(want)
    out = empty(shape, out_dtype, device)
    c = torch.from_numpy(codes).cuda() if device == "cuda" else codes.copy()
    kernel.launch(codes=c, scale=hp_array(scales.reshape(-1), scale_dtype, device), output=out,
                  rows=rows, cols=cols)
    sync(device)
    assert_values_equal(hp_values(out, out_dtype), want, "dequantized values")


def check_absmax(kernel, device, shape, case, seed):
    """Stage one of COAT's group scaling; stage two (the max over the small
    tensor, eps, fp8max, bf16) must give the library's per-tensor scale."""
    cfg = kernel.config
    G = kernel.spec.group_size
    rows, cols = shape
    x = activation(np.random.default_rng(seed), shape, case, cfg["input"] == "bf16")
    out = empty((rows, cols // G), "f32", device)
    kernel.launch(input=hp_array(x, cfg["input"], device), absmax=out, rows=rows, cols=cols)
    sync(device)
    got = hp_values(out, "f32")
    want = np.fmax.reduce(np.abs(x).reshape(-1, G), axis=1, initial=np.float32(0))
    assert_values_equal(got, want, "group maxima")
    for fmt, fp8max in (("e4m3", 448.0), ("e5m2", 57344.0)):
        amax = np.float32(got.max(initial=np.float32(0)))
        s = ref.bf16_round(np.array([(amax + np.float32(1e-10)) / np.float32(fp8max)],
                                    np.float32))[0]
        assert_values_equal(s, np.float32(ref.two_stage_tensor_scale(x, G, fmt)),
                            f"per-tensor scale ({fmt})")


CHECKS = {"quantize": check_quantize, "quantize_transpose": check_quantize,
          "dequantize": check_dequantize, "absmax": check_absmax}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_kernel_matches_reference_library(kernel, case, device):
    if device == "cuda" and kernel.spec.cubin is None and kernel.spec.ptx is None:
        pytest.skip("module has no GPU binary")
    for i, (rows, cols) in enumerate(SHAPES):
        shape = shape_for(kernel, rows, cols)
        try:
            CHECKS[kernel.spec.op](kernel, device, shape, case, seed=100 * i + CASES.index(case))
        except AssertionError as e:
            raise AssertionError(f"shape {shape[0]}x{shape[1]}: {e}") from None


@pytest.mark.parametrize("kernel", [k for k in KERNELS if k.spec.group_size][:1],
                         ids=lambda k: k.name)
def test_launch_rejects_inconsistent_shapes(kernel):
    G = kernel.spec.group_size
    args = {a.name: empty((a.extent_for(2 * G, G),), a.dtype, "cpu")
            for a in kernel.spec.memrefs}
    with pytest.raises(ValueError, match="rows \\* cols"):
        kernel.launch(**args, rows=3, cols=G)
