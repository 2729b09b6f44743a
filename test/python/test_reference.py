"""Tests of python/coat/reference.py, the ctypes view of libcoat_reference.so.

The C++ unit tests (test/Unit/*Test.cpp) check the numerics themselves; these
check the binding (shapes, dtypes, in-place updates, error reporting) and
cross-check the FP8/bf16 conversions against ml_dtypes, an implementation
that shares no code with ours.
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))

from coat import reference as ref  # noqa: E402

if not ref.is_available():
    pytest.skip("libcoat_reference.so is not built (ninja -C build coat_reference, "
                "or set COAT_REFERENCE_LIB)", allow_module_level=True)

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None

needs_ml_dtypes = pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes is not installed")

ML_TYPES = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}


def random_f32(n, seed=0, low=-20, high=18):
    rng = np.random.default_rng(seed)
    mag = np.exp2(rng.uniform(low, high, n)).astype(np.float32)
    return np.where(rng.random(n) < 0.5, -mag, mag).astype(np.float32)


# --------------------------------------------------------------------------
# Conversions
# --------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_decode_all_codes_round_trip(fmt):
    codes = np.arange(256, dtype=np.uint8)
    values = ref.fp8_decode(codes, fmt)
    finite = np.isfinite(values)
    again = ref.fp8_encode(values[finite], fmt, saturate=False)
    np.testing.assert_array_equal(again, codes[finite])
    assert np.all(ref.fp8_encode(values[np.isnan(values)], fmt) == 0x7F)


@needs_ml_dtypes
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_decode_matches_ml_dtypes(fmt):
    codes = np.arange(256, dtype=np.uint8)
    ours = ref.fp8_decode(codes, fmt)
    theirs = codes.view(getattr(ml_dtypes, ML_TYPES[fmt])).astype(np.float32)
    np.testing.assert_array_equal(ours, theirs)  # NaN == NaN for assert_array_equal


@needs_ml_dtypes
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_non_saturating_encode_matches_ml_dtypes(fmt):
    # ml_dtypes rounds like torch .to(): RNE, overflow -> NaN (e4m3fn) / inf (e5m2).
    x = random_f32(200_000, seed=1)
    decoded = ref.fp8_decode(np.arange(256, dtype=np.uint8), fmt)
    finite = decoded[np.isfinite(decoded)]
    mids = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)
    x = np.concatenate([x, mids, np.nextafter(mids, np.float32(np.inf)),
                        np.nextafter(mids, np.float32(-np.inf))]).astype(np.float32)
    ours = ref.fp8_encode(x, fmt, saturate=False)
    theirs = x.astype(getattr(ml_dtypes, ML_TYPES[fmt])).view(np.uint8)
    ours_nan = np.isnan(ref.fp8_decode(ours, fmt))
    theirs_nan = np.isnan(theirs.view(getattr(ml_dtypes, ML_TYPES[fmt])).astype(np.float32))
    np.testing.assert_array_equal(ours_nan, theirs_nan)
    np.testing.assert_array_equal(ours[~ours_nan], theirs[~theirs_nan])


@pytest.mark.parametrize("fmt,max_code", [("e4m3", 0x7E), ("e5m2", 0x7B)])
def test_saturating_encode_clamps(fmt, max_code):
    x = np.array([1e30, -1e30, np.inf, -np.inf, np.nan, -np.nan], dtype=np.float32)
    np.testing.assert_array_equal(
        ref.fp8_encode(x, fmt),
        np.array([max_code, max_code | 0x80, max_code, max_code | 0x80, 0x7F, 0x7F], np.uint8))


def test_encode_keeps_shape():
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)
    assert ref.fp8_encode(x).shape == (2, 3, 4)
    assert ref.fp8_decode(ref.fp8_encode(x)).shape == (2, 3, 4)


@needs_ml_dtypes
def test_bf16_matches_ml_dtypes():
    x = random_f32(100_000, seed=2, low=-130, high=127)
    ours = ref.bf16_encode(x)
    theirs = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ref.bf16_round(x), theirs.view(ml_dtypes.bfloat16).astype(np.float32))


# --------------------------------------------------------------------------
# Quantizers
# --------------------------------------------------------------------------

def test_quantize_scale_shapes_follow_layout():
    x = np.random.default_rng(3).standard_normal((4, 6, 32)).astype(np.float32)
    assert ref.quantize_per_tensor(x)[1].shape == ()
    assert ref.quantize_per_group(x, 16)[1].shape == (4, 6, 2)
    assert ref.quantize_flat_group(x, 100)[1].shape == (8,)
    assert ref.quantize_per_block(x, 4, 5)[1].shape == (4, 2, 7)
    with pytest.raises(ref.ReferenceError, match="does not divide"):
        ref.quantize_per_group(x, 24)


def test_per_group_quantization_round_trip():
    x = np.random.default_rng(4).standard_normal((8, 64)).astype(np.float32)
    codes, scales = ref.quantize_per_group(x, 16, "e4m3", bf16_scale=True)
    np.testing.assert_array_equal(scales, ref.bf16_round(scales))
    absmax = np.abs(x).reshape(8, 4, 16).max(axis=-1)
    np.testing.assert_array_equal(scales, ref.bf16_round((absmax + np.float32(1e-10)) / np.float32(448)))
    back = ref.dequantize(codes, scales, "per_group", group_size=16)
    assert np.max(np.abs(back - x) / np.repeat(scales, 16, axis=-1)) <= 16  # half a step at 448
    np.testing.assert_allclose(back, x, rtol=0.07, atol=float(scales.max()) * 2**-9)


def test_two_stage_scale_equals_max_group_scale():
    x = np.random.default_rng(5).standard_normal((16, 128)).astype(np.float32) * 3
    s = ref.two_stage_tensor_scale(x, 16)
    _, group_scales = ref.quantize_per_group(x, 16, bf16_scale=True)
    assert s == group_scales.max()
    codes = ref.quantize_with_scale(x, s)
    assert codes.dtype == np.uint8 and codes.shape == x.shape


def test_all_zero_and_nan_groups():
    x = np.zeros(64, np.float32)
    x[40] = np.nan
    x[50] = 1.0
    codes, scales = ref.quantize_flat_group(x, 32)
    assert np.all(codes[:32] == 0)
    assert scales[0] == np.float32(1e-10) / np.float32(448)
    assert codes[40] == 0x7F and codes[50] == 0x7E


# --------------------------------------------------------------------------
# Optimizer
# --------------------------------------------------------------------------

def test_shuffle_min_quirks():
    lanes = np.full(128, 0.5, np.float32)
    assert ref.shuffle_min(lanes) == np.float32(0.5)
    lanes[7] = 0.01
    assert ref.shuffle_min(lanes) == np.float32(0.01)
    lanes[0] = 0.0
    assert ref.shuffle_min(lanes) == 0.0
    assert ref.shuffle_max(lanes) == np.float32(0.5)


def test_moment_round_trip_and_reference_zero_group():
    x = np.random.default_rng(6).standard_normal(300).astype(np.float32) * 1e-3
    st = ref.moment_quantize(x, group_size=128)
    back = ref.moment_dequantize(st["codes"], st["scale"], st["k"], st["c"], group_size=128)
    np.testing.assert_allclose(back, x, rtol=0.1, atol=1e-9)
    zeros = ref.moment_quantize(np.zeros(128, np.float32), mode="reference")
    assert np.isinf(zeros["k"][0]) and zeros["c"][0] == np.float32(1e-30)
    fixed = ref.moment_quantize(np.zeros(128, np.float32), mode="fixed")
    assert (fixed["scale"][0], fixed["k"][0], fixed["c"][0]) == (0.0, 1.0, 1.0)


def numpy_adamw(p, grads, lr, b1, b2, eps, wd):
    p = p.astype(np.float64).copy()
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        g = g.astype(np.float64)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        denom = (np.sqrt(v) / np.sqrt(1 - b2**t) + eps) * (1 - b1**t)
        p -= lr * (m / denom + wd * p)
    return p


@pytest.mark.parametrize("mode", ["fixed", "reference"])
def test_adamw_step_updates_in_place_and_tracks_fp64(mode):
    rng = np.random.default_rng(7)
    n, steps = 777, 20
    p0 = rng.standard_normal(n).astype(np.float32)
    scale = (10.0 ** rng.uniform(-3, 0, n)).astype(np.float32) * 0.01
    grads = [(scale * rng.standard_normal(n)).astype(np.float32) for _ in range(steps)]
    p = p0.copy()
    m, v = ref.init_moment(n), ref.init_moment(n)
    for t, g in enumerate(grads, start=1):
        ref.adamw_step(p, g, m, v, step=t, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                       weight_decay=0.01, mode=mode)
    assert m["codes"].any() and v["scale"].all() and np.any(m["k"] != 1)
    exact = numpy_adamw(p0, grads, 1e-3, 0.9, 0.999, 1e-8, 0.01)
    err = np.linalg.norm((p - p0) - (exact - p0)) / np.linalg.norm(exact - p0)
    assert err < 0.06, err


@needs_ml_dtypes
def test_adamw_step_bf16_params_and_plain_moments():
    n = 256
    p = np.linspace(-1, 1, n, dtype=np.float32).astype(ml_dtypes.bfloat16)
    p_bits = p.view(np.uint16).copy()
    g = (np.cos(np.arange(n, dtype=np.float32)) * 1e-2).astype(np.float32)
    m, v = ref.init_moment(n, 64, expand=False), ref.init_moment(n, 64, expand=False)
    ref.adamw_step(p, g.astype(ml_dtypes.bfloat16), m, v, step=1, group_size=64)
    assert not np.array_equal(p.view(np.uint16), p_bits)  # updated in place
    # Same step through uint16 bits gives identical bits.
    m2, v2 = ref.init_moment(n, 64, expand=False), ref.init_moment(n, 64, expand=False)
    ref.adamw_step(p_bits, g.astype(ml_dtypes.bfloat16).view(np.uint16), m2, v2, step=1,
                   group_size=64)
    np.testing.assert_array_equal(p.view(np.uint16), p_bits)
    np.testing.assert_array_equal(m["codes"], m2["codes"])
    assert "k" not in m


def test_adamw_step_rejects_bad_arguments():
    p = np.zeros(10, np.float32)
    m, v = ref.init_moment(10), ref.init_moment(10)
    with pytest.raises(ref.ReferenceError, match="power of two"):
        ref.adamw_step(p, np.zeros(10, np.float32), m, v, step=1, group_size=48)
    with pytest.raises(TypeError):
        ref.adamw_step(p.astype(np.float64), np.zeros(10), m, v, step=1)
    with pytest.raises(ValueError):
        ref.adamw_step(p, np.zeros(10, np.float32), m, v, step=1, mode="exact")


# --------------------------------------------------------------------------
# Activations
# --------------------------------------------------------------------------

def test_gelu_tanh_form_is_the_formula_and_not_erf():
    """approximate="tanh": torch's gelu(approximate="tanh") / GPT-2's gelu_new,
    forward and derivative against fp64 of the formula; it differs from the
    exact (erf) form by more than its own error."""
    x = np.linspace(-8, 8, 4001).astype(np.float32)
    g = np.random.default_rng(3).standard_normal(x.size).astype(np.float32)
    xd = x.astype(np.float64)
    t = np.tanh(np.sqrt(2 / np.pi) * (xd + 0.044715 * xd ** 3))
    y = 0.5 * xd * (1 + t)
    dy = g * (0.5 * (1 + t) + 0.5 * xd * (1 - t * t) * np.sqrt(2 / np.pi)
              * (1 + 3 * 0.044715 * xd ** 2))
    got = ref.gelu_fwd(x, approximate="tanh")
    np.testing.assert_allclose(got, y, rtol=1e-6, atol=1e-6)
    # (1 - t^2) cancels where |t| nears 1: absolute error ~ ulp(1) |x|^3.
    err = np.abs(ref.gelu_bwd(x, g, approximate="tanh") - dy)
    assert np.all(err <= 1e-5 * np.abs(dy) + 2e-6 * np.abs(g) * (1 + np.abs(xd) ** 3))
    assert np.abs(ref.gelu_fwd(x) - got).max() > 1e-4
    with pytest.raises(ValueError, match="approximate 'sigmoid'"):
        ref.gelu_fwd(x, approximate="sigmoid")


def test_activation_ops():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 32)).astype(np.float32)
    g = rng.standard_normal((4, 32)).astype(np.float32)
    sig = 1 / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(ref.silu_fwd(x), x * sig, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ref.silu_bwd(x, g), g * (sig + x * sig * (1 - sig)), rtol=1e-5,
                               atol=1e-6)
    assert ref.gelu_fwd(x).shape == x.shape and ref.gelu_bwd(x, g).shape == x.shape
    np.testing.assert_array_equal(ref.swiglu_mul_fwd(x, g), x * g)
    w = rng.standard_normal(32).astype(np.float32)
    y, rstd = ref.rmsnorm_fwd(x, w)
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    assert rstd.shape == (4,)
    dx, dw = ref.rmsnorm_bwd(x, w, g)
    assert dx.shape == x.shape and dw.shape == (32,)
    y, mean, rstd = ref.layernorm_fwd(x)
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-5)
    dx, dw, db = ref.layernorm_bwd(x, None, g)
    assert dw is None and db is None
    np.testing.assert_allclose(dx.sum(-1), 0, atol=1e-4)  # invariance to shifts
    total, codes, scales = ref.residual_add_fwd(x, g, group_size=16)
    np.testing.assert_array_equal(total, ref.bf16_encode(x + g))
    assert codes.shape == x.shape and scales.shape == (4, 2)


def test_shuffle_rejects_partial_warps():
    with pytest.raises(ref.ReferenceError, match="power of two"):
        ref.shuffle_min(np.ones(48, np.float32))
    # All-NaN lanes: fminf(NaN, 1e9) in the second stage lets the sentinel out.
    assert ref.shuffle_min(np.full(32, np.nan, np.float32)) == np.float32(1e9)


# --------------------------------------------------------------------------
# Linear layers with a bias
# --------------------------------------------------------------------------

def test_bias_grad_binding():
    rng = np.random.default_rng(3)
    dy = rng.standard_normal((37, 48)).astype(np.float32)
    db = ref.bias_grad(dy, partials=2)
    assert db.shape == (48,) and db.dtype == np.float32
    np.testing.assert_allclose(db, dy.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)
    # A [tokens, features] tensor of any leading shape: rows multiply out.
    np.testing.assert_array_equal(ref.bias_grad(dy.reshape(37, 1, 48), 2), db)
    with pytest.raises(ref.ReferenceError, match="partials >= 1"):
        ref.bias_grad(dy, partials=0)


def test_linear_bias_epilogue_binding():
    acc = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = ref.linear_bias_epilogue(acc, 0.5, np.array([1, -1, np.inf], np.float32))
    np.testing.assert_array_equal(out, [[1, -0.5, np.inf], [2.5, 1, np.inf]])
    with pytest.raises(ValueError, match="bias has 2 entries, the accumulator 3 columns"):
        ref.linear_bias_epilogue(acc, 1.0, np.zeros(2, np.float32))
def test_rope_binding_matches_the_formula_in_numpy():
    """rope_fwd / rope_bwd against numpy's f32 arithmetic of the formulas
    (y = x cos + rotate_half(x) sin; dx = dy cos - rotate_half(dy sin)),
    bit for bit: each product and sum is one IEEE f32 operation in both."""
    rng = np.random.default_rng(5)
    rows, d, heads, rotated = 5, 8, 3, 2
    x = rng.standard_normal((rows, heads * d)).astype(np.float32)
    cos = rng.standard_normal((rows, d)).astype(np.float32)
    sin = rng.standard_normal((rows, d)).astype(np.float32)

    def rotate_half(v):
        return np.concatenate([-v[:, d // 2:], v[:, :d // 2]], axis=1)

    want_y, want_dx = x.copy(), x.copy()
    for h in range(rotated):
        v = x[:, h * d:(h + 1) * d]
        want_y[:, h * d:(h + 1) * d] = v * cos + rotate_half(v) * sin
        want_dx[:, h * d:(h + 1) * d] = v * cos - rotate_half(v * sin)
    assert ref.rope_fwd(x, cos, sin, rotated).tobytes() == want_y.tobytes()
    assert ref.rope_bwd(x, cos, sin, rotated).tobytes() == want_dx.tobytes()
    with pytest.raises(ref.ReferenceError, match="not whole heads"):
        ref.rope_fwd(x[:, :20], cos, sin, 1)
    with pytest.raises(ValueError, match="tables"):
        ref.rope_fwd(x, cos[:4], sin[:4], 1)
