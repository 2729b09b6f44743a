"""The one place that maps manifest dtype strings to numpy/torch dtypes and
holds the FP8 formats' facts on the Python side.

FP8 facts come from the manifest when it has a ``formats`` section (written by
``coat-compile-artifact`` from ``coat/Numerics/Fp8.h``, see docs/manifest.md);
``FALLBACK_FP8`` mirrors that header for code that runs before any manifest is
loaded, and ``test/python/test_dtypes.py`` checks the mirror against the header
so the two cannot drift.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional

import numpy as np

try:  # optional: numpy-side bf16/fp8 dtypes
    import ml_dtypes as _ml
except ImportError:  # pragma: no cover - exercised only without ml_dtypes
    _ml = None


@dataclasses.dataclass(frozen=True)
class Fp8Format:
    """Facts about one FP8 format (mirrors coat::Fp8Traits)."""

    name: str  # "e4m3" / "e5m2"
    mlir_type: str  # "f8E4M3FN" / "f8E5M2"
    exponent_bits: int
    mantissa_bits: int
    exponent_bias: int
    has_infinity: bool
    max_finite: float
    min_normal: float
    min_subnormal: float

    @property
    def nan_code(self) -> int:
        """The positive quiet-NaN code the kernels store (0x7F for both)."""
        return 0x7F

    def decode_table(self) -> np.ndarray:
        """float32[256]: the value of every code (NaN/Inf per the format)."""
        codes = np.arange(256, dtype=np.int64)
        sign = np.where(codes & 0x80, -1.0, 1.0)
        e = (codes >> self.mantissa_bits) & ((1 << self.exponent_bits) - 1)
        m = codes & ((1 << self.mantissa_bits) - 1)
        frac = m / float(1 << self.mantissa_bits)
        normal = (1.0 + frac) * np.exp2(e - self.exponent_bias)
        sub = frac * np.exp2(1 - self.exponent_bias)
        val = sign * np.where(e == 0, sub, normal)
        emax = (1 << self.exponent_bits) - 1
        if self.has_infinity:  # IEEE-like: top exponent is Inf/NaN
            val = np.where((e == emax) & (m == 0), sign * np.inf, val)
            val = np.where((e == emax) & (m != 0), np.nan, val)
        else:  # "fn": only S.1111.111 is NaN
            val = np.where((e == emax) & (m == (1 << self.mantissa_bits) - 1), np.nan, val)
        return val.astype(np.float32)


# Mirror of coat/Numerics/Fp8.h getFp8Traits (checked by a test).
FALLBACK_FP8: Dict[str, Fp8Format] = {
    "e4m3": Fp8Format("e4m3", "f8E4M3FN", 4, 3, 7, False, 448.0, 0.015625, 0.001953125),
    "e5m2": Fp8Format("e5m2", "f8E5M2", 5, 2, 15, True, 57344.0, 6.103515625e-05,
                      1.52587890625e-05),
}

FP8_NAMES = ("e4m3", "e5m2")

# Element size of every manifest dtype (docs/manifest.md).
ITEMSIZE: Dict[str, int] = {
    "f32": 4, "bf16": 2, "f16": 2, "e4m3": 1, "e5m2": 1, "i32": 4, "i64": 8,
}
MEMREF_DTYPES = tuple(ITEMSIZE)
SCALAR_DTYPES = ("i64", "i32", "f32")


def normalize_fp8_name(fmt: str) -> str:
    """"E4M3"/"e4m3"/"f8E4M3FN" -> "e4m3" (and the same for e5m2)."""
    s = str(fmt)
    for f in FALLBACK_FP8.values():
        if s.lower() == f.name or s == f.mlir_type:
            return f.name
    raise ValueError(f"unknown FP8 format {fmt!r} (expected one of {FP8_NAMES})")


# ---- numpy ---------------------------------------------------------------

def numpy_dtypes(d: str) -> tuple:
    """numpy dtypes accepted for a manifest dtype (first = preferred)."""
    base = {"f32": (np.float32,), "f16": (np.float16,), "i32": (np.int32,), "i64": (np.int64,)}
    if d in base:
        return tuple(np.dtype(t) for t in base[d])
    if d == "bf16":
        return (np.dtype(_ml.bfloat16),) if _ml is not None else ()
    if d == "e4m3":
        extra = (np.dtype(_ml.float8_e4m3fn),) if _ml is not None else ()
        return (np.dtype(np.uint8),) + extra
    if d == "e5m2":
        extra = (np.dtype(_ml.float8_e5m2),) if _ml is not None else ()
        return (np.dtype(np.uint8),) + extra
    raise ValueError(f"unknown manifest dtype {d!r}")


# ---- torch ---------------------------------------------------------------

def _torch():
    import torch  # noqa: WPS433 - torch is optional

    return torch


def torch_has_fp8() -> bool:
    torch = _torch()
    return hasattr(torch, "float8_e4m3fn") and hasattr(torch, "float8_e5m2")


def torch_code_dtype(fmt: str):
    """The torch dtype FP8 codes are stored in: the float8 dtype when this
    torch has it (>= 2.1), else uint8 (torch 1.13 on Debian)."""
    torch = _torch()
    name = normalize_fp8_name(fmt)
    if torch_has_fp8():
        return torch.float8_e4m3fn if name == "e4m3" else torch.float8_e5m2
    return torch.uint8


def torch_dtypes(d: str) -> tuple:
    """torch dtypes accepted for a manifest dtype (first = preferred)."""
    torch = _torch()
    table = {"f32": (torch.float32,), "bf16": (torch.bfloat16,), "f16": (torch.float16,),
             "i32": (torch.int32,), "i64": (torch.int64,)}
    if d in table:
        return table[d]
    if d in FP8_NAMES:
        code = torch_code_dtype(d)
        return (code,) if code == torch.uint8 else (code, torch.uint8)
    raise ValueError(f"unknown manifest dtype {d!r}")


def manifest_dtype_of_torch(dtype) -> Optional[str]:
    """"f32"/"bf16" for the parameter dtypes the optimizer supports, else None."""
    torch = _torch()
    return {torch.float32: "f32", torch.bfloat16: "bf16"}.get(dtype)


def codes_as_uint8(t):
    """A uint8 view of FP8 codes stored as float8 or uint8 (no copy)."""
    torch = _torch()
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def decode_fp8(codes, fmt: Fp8Format):
    """float32 values of FP8 codes (torch tensor of float8 or uint8 codes)."""
    torch = _torch()
    table = torch.from_numpy(fmt.decode_table()) if _numpy_ok() else torch.tensor(
        fmt.decode_table().tolist(), dtype=torch.float32)
    table = table.to(codes.device)
    return table[codes_as_uint8(codes).long()]


def _numpy_ok() -> bool:
    torch = _torch()
    try:
        torch.from_numpy(np.zeros(1, np.float32))
        return True
    except Exception:  # torch built against another numpy ABI
        return False
