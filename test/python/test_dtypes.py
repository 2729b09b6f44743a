"""The Python mirror of the FP8 facts matches coat/Numerics/Fp8.h, and the
code decoder matches the formats' definitions."""

import math
import os
import re

import numpy as np
import pytest

from coat import _dtypes

from conftest import REPO


def test_fallback_mirror_matches_fp8_header():
    text = open(os.path.join(REPO, "include", "coat", "Numerics", "Fp8.h")).read()
    inits = re.findall(r"Fp8Traits\{([^}]*)\}", text)
    assert len(inits) == 2, "Fp8.h changed shape; update this test and _dtypes.FALLBACK_FP8"
    for init in inits:
        f = [x.strip() for x in init.replace("\n", " ").split(",")]
        name = f[0].strip('"')
        mirror = _dtypes.FALLBACK_FP8[name]
        assert mirror.mlir_type == f[1].strip('"')
        assert (mirror.exponent_bits, mirror.mantissa_bits, mirror.exponent_bias) == tuple(
            int(x) for x in f[2:5])
        assert mirror.has_infinity == (f[5] == "true")
        assert [mirror.max_finite, mirror.min_normal, mirror.min_subnormal] == [
            float(x.rstrip("f")) for x in f[6:9]]


@pytest.mark.parametrize("name", ["e4m3", "e5m2"])
def test_decode_table_limits(name):
    fmt = _dtypes.FALLBACK_FP8[name]
    t = fmt.decode_table()
    finite = t[np.isfinite(t)]
    assert finite.max() == fmt.max_finite and finite.min() == -fmt.max_finite
    assert t[1] == fmt.min_subnormal
    assert math.isnan(t[fmt.nan_code])
    assert np.isinf(t).any() == fmt.has_infinity


def test_decode_table_matches_ml_dtypes():
    ml = pytest.importorskip("ml_dtypes")
    codes = np.arange(256, dtype=np.uint8)
    for name, mdt in (("e4m3", ml.float8_e4m3fn), ("e5m2", ml.float8_e5m2)):
        want = codes.view(mdt).astype(np.float32)
        got = _dtypes.FALLBACK_FP8[name].decode_table()
        np.testing.assert_array_equal(got, want)


def test_format_names():
    assert _dtypes.normalize_fp8_name("E4M3") == "e4m3"
    assert _dtypes.normalize_fp8_name("f8E5M2") == "e5m2"
    with pytest.raises(ValueError, match="unknown FP8 format"):
        _dtypes.normalize_fp8_name("e3m4")
