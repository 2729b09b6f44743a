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

import numpy as np
import pytest

from coat import reference as ref

if not ref.is_available():
    pytest.skip("libcoat_reference.so is not built", allow_module_level=True)

from kernel_io import (compiled_kernels, CASES, DEVICES, SHAPES, activation,  # noqa: E402
                       assert_codes_equal, assert_values_equal, empty, hp_array,
                       hp_values, shape_for, sync, torch)

OPS = ("quantize", "quantize_transpose", "quantize_transposed_only", "dequantize", "absmax",
       "requantize")
KERNELS = compiled_kernels(OPS)
pytestmark = pytest.mark.skipif(
    not KERNELS, reason="no compiled activation kernels (ctest's compile-examples makes them)")


# Tile kernels (quantize + transpose, per_block) also run on shapes with whole
# 16-byte rows of q and q^T (their vector path) and on odd ones.
TILE_SHAPES = [(256, 384), (272, 144), (129, 131), (130, 1)]


def check_quantize_block(kernel, device, shape, x):
    """per_block<BxB>: codes and the [ceil(rows/B), ceil(cols/B)] f32 (or
    bf16) block scales, and for quantize_transpose q^T and the transposed
    scale matrix."""
    cfg = kernel.config
    fmt, in_dtype, B = cfg["format"], cfg["input"], cfg["block"]
    rows, cols = shape
    want_codes, want_scales = ref.quantize_per_block(
        x, B, B, fmt, bf16_scale=cfg["scale"] == "bf16", eps=np.float32(cfg["eps"]))
    codes = empty(shape, fmt, device)
    scales = empty(want_scales.shape, cfg["scale"], device)
    bufs = dict(input=hp_array(x, in_dtype, device), codes=codes, scale=scales)
    transposed = kernel.spec.op == "quantize_transpose"
    if transposed:
        bufs["codes_t"] = empty((cols, rows), fmt, device)
        bufs["scale_t"] = empty(want_scales.shape[::-1], cfg["scale"], device)
    kernel.launch(**bufs, rows=rows, cols=cols)
    sync(device)
    assert_codes_equal(codes, want_codes, fmt, "codes")
    assert_values_equal(hp_values(scales, cfg["scale"]), want_scales, "block scales")
    if transposed:
        assert_codes_equal(bufs["codes_t"], want_codes.reshape(rows, cols).T, fmt,
                           "transposed codes")
        assert_values_equal(hp_values(bufs["scale_t"], cfg["scale"]), want_scales.T,
                            "transposed block scales")


def check_quantize(kernel, device, shape, case, seed):
    cfg = kernel.config
    fmt, in_dtype, bf16_scale = cfg["format"], cfg["input"], cfg["scale"] == "bf16"
    rows, cols = shape
    x = activation(np.random.default_rng(seed), shape, case, in_dtype == "bf16")
    if cfg["scaling"] == "per_block":
        check_quantize_block(kernel, device, shape, x)
        return
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
    s = ref.two_stage_tensor_scale(x, 16 if cols % 16 == 0 else 1, fmt, bf16_scale=bf16_scale)
    scale = hp_array(np.array([s], np.float32), cfg["scale"], device)
    want = ref.quantize_with_scale(x, s, fmt)
    codes = empty(shape, fmt, device)
    if kernel.spec.op == "quantize":
        kernel.launch(input=hp_array(x, in_dtype, device), scale=scale, codes=codes,
                      rows=rows, cols=cols)
        sync(device)
        assert_codes_equal(codes, want, fmt, "codes")
        return
    # quantize_transpose writes both layouts, quantize_transposed_only q^T alone.
    bufs = dict(input=hp_array(x, in_dtype, device), scale=scale,
                codes_t=empty((cols, rows), fmt, device))
    both = kernel.spec.op == "quantize_transpose"
    if both:
        bufs["codes"] = codes
    kernel.launch(**bufs, rows=rows, cols=cols)
    sync(device)
    if both:
        assert_codes_equal(codes, want, fmt, "codes")
    assert_codes_equal(bufs["codes_t"], want.reshape(rows, cols).T, fmt, "transposed codes")


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


def check_requantize(kernel, device, shape, case, seed):
    """1xG codes (the library's quantization of an activation) to per-tensor
    codes with a given scale: the library's dequantize, then its division by
    the scale. The scale is the group scales' maximum, as
    coat-outline-kernels derives it, and a third of it (codes saturate)."""
    cfg = kernel.config
    src, fmt, G = cfg["input"], cfg["format"], kernel.spec.group_size
    rows, cols = shape
    x = activation(np.random.default_rng(seed), shape, case, bf16=True)
    codes, scales = ref.quantize_per_group(x, G, src, bf16_scale=cfg["input_scale"] == "bf16")
    values = ref.dequantize(codes, scales, "per_group", src, group_size=G)
    top = np.fmax.reduce(scales.reshape(-1), initial=np.float32(0))
    for s in (top, top / np.float32(3)):
        if cfg["scale"] == "bf16":
            s = ref.bf16_round(np.array([s], np.float32))[0]
        out = empty(shape, fmt, device)
        c = torch.from_numpy(codes).cuda() if device == "cuda" else codes.copy()
        kernel.launch(input=c, input_scale=hp_array(scales.reshape(-1), cfg["input_scale"], device),
                      scale=hp_array(np.array([s], np.float32), cfg["scale"], device), codes=out,
                      rows=rows, cols=cols)
        sync(device)
        assert_codes_equal(out, ref.quantize_with_scale(values, s, fmt), fmt,
                           f"codes (scale {s!r})")


CHECKS = {"quantize": check_quantize, "quantize_transpose": check_quantize,
          "quantize_transposed_only": check_quantize,
          "dequantize": check_dequantize, "absmax": check_absmax,
          "requantize": check_requantize}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_kernel_matches_reference_library(kernel, case, device):
    if device == "cuda" and kernel.spec.cubin is None and kernel.spec.ptx is None:
        pytest.skip("module has no GPU binary")
    tiled = "tile" in kernel.config
    for i, (rows, cols) in enumerate(SHAPES + (TILE_SHAPES if tiled else [])):
        shape = shape_for(kernel, rows, cols)
        try:
            CHECKS[kernel.spec.op](kernel, device, shape, case, seed=100 * i + CASES.index(case))
        except AssertionError as e:
            raise AssertionError(f"shape {shape[0]}x{shape[1]}: {e}") from None


@pytest.mark.parametrize("kernel", [k for k in KERNELS if k.spec.group_size][:1],
                         ids=lambda k: k.name)
def test_launch_rejects_inconsistent_shapes(kernel):
    G = kernel.spec.group_size
    args = {a.name: empty((a.extent_for(2 * G),), a.dtype, "cpu")
            for a in kernel.spec.memrefs}
    with pytest.raises(ValueError, match="rows \\* cols"):
        kernel.launch(**args, rows=3, cols=G)
