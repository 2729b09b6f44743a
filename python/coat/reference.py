"""numpy view of the host reference numerics (libcoat_reference.so).

The C++ library (include/coat/Numerics/Reference.h, C ABI in ReferenceCApi.h)
is the oracle for every numerics test; this module only translates numpy
arrays to its C interface. Nothing here re-implements a formula.

The library is found through, in order: the ``path`` given to :func:`load`,
``$COAT_REFERENCE_LIB``, then ``<build>/lib/libcoat_reference.so`` for
``$COAT_BUILD_DIR`` and every ``build*/`` folder of the repository.
"""

from __future__ import annotations

import ctypes
import glob
import os
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from ._paths import REPO_DIR, build_dirs
from .programs import GELU_APPROXIMATIONS

ABI_VERSION = 4
LIBRARY_NAME = "libcoat_reference.so"

# Ids of ReferenceCApi.h.
_FORMATS = {"e4m3": 0, "f8E4M3FN": 0, "e5m2": 1, "f8E5M2": 1}
_DTYPES = {"f32": 0, "bf16": 1}
_KINDS = {"per_tensor": 0, "per_group": 1, "flat_group": 2, "per_block": 3}
_MODES = {"fixed": 0, "reference": 1}
_STOCHASTIC_PARAM, _STOCHASTIC_MOMENTS = 1, 2


class ReferenceError(RuntimeError):
    """A call into the reference library was rejected (bad arguments)."""


class LibraryNotFound(FileNotFoundError):
    """libcoat_reference.so is not built (ninja coat_reference)."""


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------

_lib: Optional[ctypes.CDLL] = None

_p = ctypes.c_void_p
_i32, _i64, _u64, _f32 = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_float

_SIGNATURES = {
    "coat_ref_abi_version": (_i32, []),
    "coat_ref_last_error": (ctypes.c_char_p, []),
    "coat_ref_fp8_encode": (_i32, [_p, _i64, _i32, _i32, _p]),
    "coat_ref_fp8_decode": (_i32, [_p, _i64, _i32, _p]),
    "coat_ref_bf16_encode": (None, [_p, _i64, _p]),
    "coat_ref_bf16_decode": (None, [_p, _i64, _p]),
    "coat_ref_num_scales": (_i64, [_p, _i32, _i32, _i64, _i64, _i64]),
    "coat_ref_scale_shape": (_i32, [_p, _i32, _i32, _i64, _i64, _i64, _p]),
    "coat_ref_quantize": (_i32, [_p, _p, _i32, _i32, _i64, _i64, _i64, _i32, _f32,
                                 _i32, _i32, _p, _p]),
    "coat_ref_dequantize": (_i32, [_p, _p, _p, _i32, _i32, _i64, _i64, _i64, _i32, _p]),
    "coat_ref_quantize_with_scale": (_i32, [_p, _i64, _f32, _i32, _i32, _p]),
    "coat_ref_two_stage_tensor_scale": (_i32, [_p, _p, _i32, _i64, _i32, _f32, _i32, _p]),
    "coat_ref_moment_quantize": (_i32, [_p, _i64, _i32, _i32, _i32, _i64, _i64, _f32,
                                        _i32, _p, _p, _p, _p]),
    "coat_ref_moment_dequantize": (_i32, [_p, _p, _p, _p, _i64, _i32, _i32, _i32, _i64,
                                          _p]),
    "coat_ref_shuffle_min": (_f32, [_p, _i64]),
    "coat_ref_shuffle_max": (_f32, [_p, _i64]),
    "coat_ref_adamw_step": (_i32, [_i64, _i32, _p, _i32, _p,
                                   _p, _p, _p, _p, _i32, _i32,
                                   _p, _p, _p, _p, _i32, _i32,
                                   _i64, _i64, _f32, _i32,
                                   _f32, _f32, _f32, _f32, _f32, _f32, _f32, _i32, _u64]),
    "coat_ref_silu_fwd": (None, [_p, _i64, _p]),
    "coat_ref_silu_bwd": (None, [_p, _p, _i64, _p]),
    "coat_ref_gelu_fwd": (None, [_p, _i64, _p]),
    "coat_ref_gelu_bwd": (None, [_p, _p, _i64, _p]),
    "coat_ref_gelu_tanh_fwd": (None, [_p, _i64, _p]),
    "coat_ref_gelu_tanh_bwd": (None, [_p, _p, _i64, _p]),
    "coat_ref_swiglu_mul_fwd": (None, [_p, _p, _i64, _p]),
    "coat_ref_swiglu_mul_bwd": (None, [_p, _p, _p, _i64, _p, _p]),
    "coat_ref_rmsnorm_fwd": (None, [_p, _p, _i64, _i64, _f32, _p, _p]),
    "coat_ref_rmsnorm_bwd": (None, [_p, _p, _p, _i64, _i64, _f32, _p, _p]),
    "coat_ref_layernorm_fwd": (None, [_p, _p, _p, _i64, _i64, _f32, _p, _p, _p]),
    "coat_ref_layernorm_bwd": (None, [_p, _p, _p, _i64, _i64, _f32, _p, _p, _p]),
    "coat_ref_residual_add_fwd": (_i32, [_p, _p, _i64, _i64, _i64, _i32, _p, _p, _p]),
    "coat_ref_linear_bias_epilogue": (None, [_p, _i64, _i64, _f32, _p, _p]),
    "coat_ref_bias_grad": (_i32, [_p, _i64, _i64, _i64, _p]),
    "coat_ref_rope_fwd": (_i32, [_p, _p, _p, _i64, _i64, _i64, _i64, _p]),
    "coat_ref_rope_bwd": (_i32, [_p, _p, _p, _i64, _i64, _i64, _i64, _p]),
    "coat_ref_cross_entropy": (_i32, [_p, _p, _i64, _i64, _i64, _i64, _p, _p]),
}


def library_candidates(path: Optional[str] = None) -> list:
    """Where :func:`load` looks, in order."""
    if path:
        return [path]
    env = os.environ.get("COAT_REFERENCE_LIB")
    if env:
        return [env]
    dirs = list(build_dirs())
    dirs += sorted(d for d in glob.glob(os.path.join(REPO_DIR, "build*")) if os.path.isdir(d))
    seen, out = set(), []
    for d in dirs:
        cand = os.path.join(d, "lib", LIBRARY_NAME)
        if cand not in seen:
            seen.add(cand)
            out.append(cand)
    return out


def load(path: Optional[str] = None) -> ctypes.CDLL:
    """Loads (once) and returns the library; raises LibraryNotFound."""
    global _lib
    if _lib is not None and path is None:
        return _lib
    for cand in library_candidates(path):
        if os.path.isfile(cand):
            lib = ctypes.CDLL(cand)
            # The version first: an older library lacks newer functions.
            lib.coat_ref_abi_version.restype = _i32
            lib.coat_ref_abi_version.argtypes = []
            if lib.coat_ref_abi_version() != ABI_VERSION:
                raise ReferenceError(
                    f"{cand}: ABI version {lib.coat_ref_abi_version()}, expected {ABI_VERSION}")
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _lib = lib
            return lib
    raise LibraryNotFound("libcoat_reference.so not found; build it with "
                          "`ninja -C build coat_reference` or set COAT_REFERENCE_LIB. Looked in: "
                          + ", ".join(library_candidates(path)))


def is_available() -> bool:
    try:
        load()
        return True
    except LibraryNotFound:
        return False


# --------------------------------------------------------------------------
# Argument helpers
# --------------------------------------------------------------------------

def _check(rc: int) -> None:
    if rc != 0:
        raise ReferenceError(load().coat_ref_last_error().decode())


def _ptr(a: Optional[np.ndarray]):
    return None if a is None else a.ctypes.data_as(ctypes.c_void_p)


def _f32(x) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32)


def _format_id(fmt: str) -> int:
    try:
        return _FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown FP8 format {fmt!r}; use 'e4m3' or 'e5m2'") from None


def _mode_id(mode: str) -> int:
    try:
        return _MODES[mode]
    except KeyError:
        raise ValueError(f"mode must be 'fixed' or 'reference', got {mode!r}") from None


def _shape_arg(shape: Sequence[int]) -> np.ndarray:
    return np.array(list(shape) or [0], dtype=np.int64)


def _in_place(a: np.ndarray, dtype, name: str) -> np.ndarray:
    """adamw_step writes through these arrays: they must already be right."""
    if not isinstance(a, np.ndarray) or a.dtype != dtype or not a.flags.c_contiguous \
            or not a.flags.writeable:
        raise TypeError(f"{name} must be a writeable C-contiguous {np.dtype(dtype).name} array")
    return a


def _float_storage(a: np.ndarray, name: str, writable: bool) -> Tuple[int, np.ndarray]:
    """float32 -> f32; uint16 or ml_dtypes.bfloat16 -> bf16 bits."""
    if a.dtype == np.float32:
        dtype_id = _DTYPES["f32"]
    elif a.dtype == np.uint16 or a.dtype.name == "bfloat16":
        dtype_id = _DTYPES["bf16"]
    else:
        raise TypeError(f"{name} must be float32, uint16 (bf16 bits) or bfloat16, got {a.dtype}")
    if not a.flags.c_contiguous or (writable and not a.flags.writeable):
        raise TypeError(f"{name} must be a {'writeable ' if writable else ''}C-contiguous array")
    return dtype_id, a


# --------------------------------------------------------------------------
# Conversions
# --------------------------------------------------------------------------

def fp8_encode(x, fmt: str = "e4m3", saturate: bool = True) -> np.ndarray:
    """uint8 codes, RNE; saturate=True is PTX cvt.rn.satfinite, False torch .to()."""
    x = _f32(x)
    out = np.empty(x.shape, dtype=np.uint8)
    _check(load().coat_ref_fp8_encode(_ptr(x), x.size, _format_id(fmt), int(saturate),
                                      _ptr(out)))
    return out


def fp8_decode(codes, fmt: str = "e4m3") -> np.ndarray:
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    out = np.empty(codes.shape, dtype=np.float32)
    _check(load().coat_ref_fp8_decode(_ptr(codes), codes.size, _format_id(fmt), _ptr(out)))
    return out


def bf16_encode(x) -> np.ndarray:
    """uint16 bf16 bit patterns, round to nearest even."""
    x = _f32(x)
    out = np.empty(x.shape, dtype=np.uint16)
    load().coat_ref_bf16_encode(_ptr(x), x.size, _ptr(out))
    return out


def bf16_decode(bits) -> np.ndarray:
    bits = np.ascontiguousarray(bits, dtype=np.uint16)
    out = np.empty(bits.shape, dtype=np.float32)
    load().coat_ref_bf16_decode(_ptr(bits), bits.size, _ptr(out))
    return out


def bf16_round(x) -> np.ndarray:
    """float32 values rounded to bf16 precision."""
    return bf16_decode(bf16_encode(x))


# --------------------------------------------------------------------------
# Quantizers
# --------------------------------------------------------------------------

def scale_shape(shape: Sequence[int], kind: str, group_size: int = 0,
                block: Tuple[int, int] = (0, 0)) -> Tuple[int, ...]:
    """coat::scaleShape for a static shape."""
    shape_arr = _shape_arg(shape)
    out = np.zeros(max(len(shape), 1), dtype=np.int64)
    rank = load().coat_ref_scale_shape(_ptr(shape_arr), len(shape), _KINDS[kind], group_size,
                                       block[0], block[1], _ptr(out))
    if rank < 0:
        raise ReferenceError(load().coat_ref_last_error().decode())
    return tuple(int(d) for d in out[:rank])


def quantize(x, kind: str, fmt: str = "e4m3", *, group_size: int = 0,
             block: Tuple[int, int] = (0, 0), eps: float = 1e-10, bf16_scale: bool = False,
             saturate: bool = True) -> Tuple[np.ndarray, np.ndarray]:
    """(codes, scales) with scales shaped as coat::scaleShape; COAT's convention
    s = (absmax + eps)/fp8max (optionally bf16-rounded), q = cvt(x / s)."""
    x = _f32(x)
    sshape = scale_shape(x.shape, kind, group_size, block)
    codes = np.empty(x.shape, dtype=np.uint8)
    scales = np.empty(sshape, dtype=np.float32)
    shape_arr = _shape_arg(x.shape)
    _check(load().coat_ref_quantize(_ptr(x), _ptr(shape_arr), x.ndim, _KINDS[kind], group_size,
                                    block[0], block[1], _format_id(fmt), eps, int(bf16_scale),
                                    int(saturate), _ptr(codes), _ptr(scales)))
    return codes, scales


def quantize_per_tensor(x, fmt: str = "e4m3", **kw):
    return quantize(x, "per_tensor", fmt, **kw)


def quantize_per_group(x, group_size: int, fmt: str = "e4m3", **kw):
    """1xG groups along the innermost dimension (G must divide it)."""
    return quantize(x, "per_group", fmt, group_size=group_size, **kw)


def quantize_flat_group(x, group_size: int, fmt: str = "e4m3", **kw):
    """G consecutive elements of the flattened tensor; partial last group."""
    return quantize(x, "flat_group", fmt, group_size=group_size, **kw)


def quantize_per_block(x, block_rows: int, block_cols: int, fmt: str = "e4m3", **kw):
    """RxC blocks of the two innermost dimensions; partial edge blocks."""
    return quantize(x, "per_block", fmt, block=(block_rows, block_cols), **kw)


def dequantize(codes, scales, kind: str, fmt: str = "e4m3", *, group_size: int = 0,
               block: Tuple[int, int] = (0, 0)) -> np.ndarray:
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    scales = _f32(scales)
    expected = scale_shape(codes.shape, kind, group_size, block)
    if scales.size != int(np.prod(expected)):
        raise ValueError(f"scales has {scales.size} entries, expected shape {expected}")
    out = np.empty(codes.shape, dtype=np.float32)
    shape_arr = _shape_arg(codes.shape)
    _check(load().coat_ref_dequantize(_ptr(codes), _ptr(scales), _ptr(shape_arr), codes.ndim,
                                      _KINDS[kind], group_size, block[0], block[1],
                                      _format_id(fmt), _ptr(out)))
    return out


def quantize_with_scale(x, scale: float, fmt: str = "e4m3", saturate: bool = True) -> np.ndarray:
    """codes = cvt(x / scale) with a given scale (COAT's fp8_division)."""
    x = _f32(x)
    codes = np.empty(x.shape, dtype=np.uint8)
    _check(load().coat_ref_quantize_with_scale(_ptr(x), x.size, float(scale), _format_id(fmt),
                                               int(saturate), _ptr(codes)))
    return codes


def two_stage_tensor_scale(x, group_size: int, fmt: str = "e4m3", eps: float = 1e-10,
                           bf16_scale: bool = True) -> float:
    """COAT's group-scaling per-tensor scale: max of the 1xG (bf16) group scales."""
    x = _f32(x)
    shape_arr = _shape_arg(x.shape)
    out = np.zeros(1, dtype=np.float32)
    _check(load().coat_ref_two_stage_tensor_scale(_ptr(x), _ptr(shape_arr), x.ndim, group_size,
                                                  _format_id(fmt), eps, int(bf16_scale),
                                                  _ptr(out)))
    return float(out[0])


# --------------------------------------------------------------------------
# Optimizer moments and the AdamW step
# --------------------------------------------------------------------------

def num_groups(n: int, group_size: int) -> int:
    return int(np.prod(scale_shape((n,), "flat_group", group_size))) if n else 0


def init_moment(n: int, group_size: int = 128, expand: bool = True) -> Dict[str, np.ndarray]:
    """A moment in COAT's initial state: codes 0, s = 0, k = 1, c = 1."""
    g = num_groups(n, group_size)
    state = {"codes": np.zeros(n, dtype=np.uint8), "scale": np.zeros(g, dtype=np.float32)}
    if expand:
        state["k"] = np.ones(g, dtype=np.float32)
        state["c"] = np.ones(g, dtype=np.float32)
    return state


def moment_quantize(x, fmt: str = "e4m3", expand: bool = True, signed: bool = True,
                    group_size: int = 128, expand_min: int = 16, max_k: float = 16.0,
                    mode: str = "fixed") -> Dict[str, np.ndarray]:
    """Re-quantizes a flat f32 moment (Dynamic Range Expansion when expand)."""
    x = _f32(x).reshape(-1)
    st = init_moment(x.size, group_size, expand)
    _check(load().coat_ref_moment_quantize(_ptr(x), x.size, _format_id(fmt), int(expand),
                                           int(signed), group_size, expand_min, max_k,
                                           _mode_id(mode), _ptr(st["codes"]), _ptr(st["scale"]),
                                           _ptr(st.get("k")), _ptr(st.get("c"))))
    return st


def moment_dequantize(codes, scale, k=None, c=None, fmt: str = "e4m3", signed: bool = True,
                      group_size: int = 128) -> np.ndarray:
    """x = sgn(y)|y|^(1/k) c with y = f32(q) s (plain moment when k is None)."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8).reshape(-1)
    expand = k is not None
    scale = _f32(scale)
    k = _f32(k) if expand else None
    c = _f32(c) if expand else None
    if scale.size < num_groups(codes.size, group_size):
        raise ValueError("scale has fewer entries than groups")
    out = np.empty(codes.size, dtype=np.float32)
    _check(load().coat_ref_moment_dequantize(_ptr(codes), _ptr(scale), _ptr(k), _ptr(c),
                                             codes.size, _format_id(fmt), int(expand),
                                             int(signed), group_size, _ptr(out)))
    return out


def shuffle_min(lane_start) -> float:
    """The official kernel's partly zero-skipping group min over |x| lane values."""
    lanes = _f32(lane_start).reshape(-1)
    out = float(load().coat_ref_shuffle_min(_ptr(lanes), lanes.size))
    if np.isnan(out):
        _check(int(bool(load().coat_ref_last_error())))
    return out


def shuffle_max(lane_start) -> float:
    lanes = _f32(lane_start).reshape(-1)
    out = float(load().coat_ref_shuffle_max(_ptr(lanes), lanes.size))
    if np.isnan(out):
        _check(int(bool(load().coat_ref_last_error())))
    return out


def adamw_step(param: np.ndarray, grad, m: Dict[str, np.ndarray], v: Dict[str, np.ndarray], *,
               step: float, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
               eps: float = 1e-8, weight_decay: float = 1e-2, m_format: str = "e4m3",
               v_format: str = "e4m3", group_size: int = 128, expand_min: int = 16,
               max_k: float = 16.0, mode: str = "fixed", stochastic_param: bool = False,
               stochastic_moments: bool = False, seed: int = 0,
               grad_scale: float = 1.0) -> None:
    """One FP8 AdamW step per docs/optimizer-numerics.md, in place.

    param: float32, or bf16 as uint16 bits / ml_dtypes.bfloat16 (updated in
    place). m, v: dicts from :func:`init_moment` (``codes``, ``scale`` and, for
    an expanded moment, ``k`` and ``c``), updated in place. ``step`` is t,
    already incremented. ``stochastic_param`` (bf16 params) and
    ``stochastic_moments`` round those results stochastically with the random
    bits of ``seed`` (docs/optimizer-numerics.md §5). Each gradient is
    multiplied by ``grad_scale`` in f32 as it is loaded (global clipping's
    factor; not rounded to the gradient's dtype).
    """
    param_id, param = _float_storage(param, "param", writable=True)
    grad = np.ascontiguousarray(grad)
    if grad.dtype == np.float64:
        grad = grad.astype(np.float32)
    grad_id, grad = _float_storage(grad, "grad", writable=False)
    n = param.size
    if grad.size != n:
        raise ValueError(f"grad has {grad.size} elements, param {n}")
    groups = num_groups(n, group_size)

    def moment(state, name):
        expand = "k" in state
        codes = _in_place(state["codes"], np.uint8, f"{name}['codes']")
        arrays = [_in_place(state[key], np.float32, f"{name}[{key!r}]")
                  for key in (("scale", "k", "c") if expand else ("scale",))]
        if codes.size != n or any(a.size != groups for a in arrays):
            raise ValueError(f"{name}: expected {n} codes and {groups} entries per group array")
        k = arrays[1] if expand else None
        c = arrays[2] if expand else None
        return codes, arrays[0], k, c, expand

    mc, ms, mk, mcc, mexp = moment(m, "m")
    vc, vs, vk, vcc, vexp = moment(v, "v")
    _check(load().coat_ref_adamw_step(
        n, param_id, _ptr(param), grad_id, _ptr(grad),
        _ptr(mc), _ptr(ms), _ptr(mk), _ptr(mcc), _format_id(m_format), int(mexp),
        _ptr(vc), _ptr(vs), _ptr(vk), _ptr(vcc), _format_id(v_format), int(vexp),
        group_size, expand_min, max_k, _mode_id(mode),
        step, lr, beta1, beta2, eps, weight_decay, grad_scale,
        (_STOCHASTIC_PARAM if stochastic_param else 0)
        | (_STOCHASTIC_MOMENTS if stochastic_moments else 0), int(seed) & (2**64 - 1)))


# --------------------------------------------------------------------------
# Activation operators (COAT.md §3.4), f32 in and out
# --------------------------------------------------------------------------

NORM_EPS = 1e-5


def _unary(fn_name: str, x) -> np.ndarray:
    x = _f32(x)
    y = np.empty_like(x)
    getattr(load(), fn_name)(_ptr(x), x.size, _ptr(y))
    return y


def _binary(fn_name: str, a, b) -> np.ndarray:
    a, b = _f32(a), _f32(b)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch {a.shape} vs {b.shape}")
    y = np.empty_like(a)
    getattr(load(), fn_name)(_ptr(a), _ptr(b), a.size, _ptr(y))
    return y


def silu_fwd(x) -> np.ndarray:
    return _unary("coat_ref_silu_fwd", x)


def silu_bwd(x, g) -> np.ndarray:
    return _binary("coat_ref_silu_bwd", x, g)


def _gelu_fn(approximate: str, direction: str) -> str:
    if approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"approximate {approximate!r} is not one of {GELU_APPROXIMATIONS}")
    return f"coat_ref_gelu{'_tanh' if approximate == 'tanh' else ''}_{direction}"


def gelu_fwd(x, approximate: str = "none") -> np.ndarray:
    """GELU in the form ``approximate`` names (as torch does): "none", exact
    ``x (1 + erf(x / sqrt 2)) / 2``; "tanh", ``x (1 + t) / 2`` with ``t =
    tanh(sqrt(2 / pi) (x + 0.044715 x^3))`` (GPT-2's gelu_new), each
    evaluated in f32 by the library."""
    return _unary(_gelu_fn(approximate, "fwd"), x)


def gelu_bwd(x, g, approximate: str = "none") -> np.ndarray:
    return _binary(_gelu_fn(approximate, "bwd"), x, g)


def swiglu_mul_fwd(x1, x2) -> np.ndarray:
    return _binary("coat_ref_swiglu_mul_fwd", x1, x2)


def swiglu_mul_bwd(x1, x2, g) -> Tuple[np.ndarray, np.ndarray]:
    x1, x2, g = _f32(x1), _f32(x2), _f32(g)
    g1, g2 = np.empty_like(x1), np.empty_like(x1)
    load().coat_ref_swiglu_mul_bwd(_ptr(x1), _ptr(x2), _ptr(g), x1.size, _ptr(g1), _ptr(g2))
    return g1, g2


def _rows(x: np.ndarray) -> Tuple[int, int]:
    cols = x.shape[-1]
    return x.size // cols, cols


def rmsnorm_fwd(x, w, eps: float = NORM_EPS) -> Tuple[np.ndarray, np.ndarray]:
    """(y, rstd per row) over the last dimension."""
    x, w = _f32(x), _f32(w)
    rows, cols = _rows(x)
    y, rstd = np.empty_like(x), np.empty(x.shape[:-1], dtype=np.float32)
    load().coat_ref_rmsnorm_fwd(_ptr(x), _ptr(w), rows, cols, eps, _ptr(y), _ptr(rstd))
    return y, rstd


def rmsnorm_bwd(x, w, dy, eps: float = NORM_EPS) -> Tuple[np.ndarray, np.ndarray]:
    """(dx, dw)."""
    x, w, dy = _f32(x), _f32(w), _f32(dy)
    rows, cols = _rows(x)
    dx, dw = np.empty_like(x), np.empty(cols, dtype=np.float32)
    load().coat_ref_rmsnorm_bwd(_ptr(x), _ptr(w), _ptr(dy), rows, cols, eps, _ptr(dx), _ptr(dw))
    return dx, dw


def layernorm_fwd(x, w=None, b=None, eps: float = NORM_EPS):
    """(y, mean, rstd); w=None means no affine transform."""
    x = _f32(x)
    w = None if w is None else _f32(w)
    b = None if b is None else _f32(b)
    rows, cols = _rows(x)
    y = np.empty_like(x)
    mean = np.empty(x.shape[:-1], dtype=np.float32)
    rstd = np.empty(x.shape[:-1], dtype=np.float32)
    load().coat_ref_layernorm_fwd(_ptr(x), _ptr(w), _ptr(b), rows, cols, eps, _ptr(y),
                                  _ptr(mean), _ptr(rstd))
    return y, mean, rstd


def layernorm_bwd(x, w, dy, eps: float = NORM_EPS):
    """(dx, dw, db); dw and db are None without affine (w=None)."""
    x, dy = _f32(x), _f32(dy)
    w = None if w is None else _f32(w)
    rows, cols = _rows(x)
    dx = np.empty_like(x)
    dw = None if w is None else np.empty(cols, dtype=np.float32)
    db = None if w is None else np.empty(cols, dtype=np.float32)
    load().coat_ref_layernorm_bwd(_ptr(x), _ptr(w), _ptr(dy), rows, cols, eps, _ptr(dx),
                                  _ptr(dw), _ptr(db))
    return dx, dw, db


def residual_add_fwd(residual, branch, group_size: int = 16, fmt: str = "e4m3"):
    """(sum as bf16 bits, 1xG FP8 codes of the f32 sum, bf16-valued scales)."""
    r, b = _f32(residual), _f32(branch)
    rows, cols = _rows(r)
    total = np.empty(r.shape, dtype=np.uint16)
    codes = np.empty(r.shape, dtype=np.uint8)
    scales = np.empty(scale_shape(r.shape, "per_group", group_size), dtype=np.float32)
    _check(load().coat_ref_residual_add_fwd(_ptr(r), _ptr(b), rows, cols, group_size,
                                            _format_id(fmt), _ptr(total), _ptr(codes),
                                            _ptr(scales)))
    return total, codes, scales


def residual_add_bwd(a, b) -> np.ndarray:
    """The f32 sum of two residual-stream gradients (COAT's add_bwd, §3.4);
    its bf16 copy and per-tensor E5M2 copy derive from it. IEEE f32 addition,
    as the library's residual_add_fwd computes its sum."""
    a, b = _f32(a), _f32(b)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch {a.shape} vs {b.shape}")
    with np.errstate(over="ignore"):  # overflow to inf is the answer
        return np.add(a, b, dtype=np.float32)



# --------------------------------------------------------------------------
# Linear layers with a bias (coat.linear forward, coat.bias_grad)
# --------------------------------------------------------------------------

def linear_bias_epilogue(acc, scale: float, bias) -> np.ndarray:
    """``acc * scale + bias`` in f32, each operation rounded: what a forward
    GEMM with a bias holds before it rounds to bf16 or quantizes 1x16.
    ``acc`` is the [rows, cols] f32 accumulator, ``bias`` has ``cols``
    entries."""
    acc, bias = _f32(acc), _f32(bias)
    rows, cols = _rows(acc)
    if bias.size != cols:
        raise ValueError(f"bias has {bias.size} entries, the accumulator {cols} columns")
    out = np.empty_like(acc)
    load().coat_ref_linear_bias_epilogue(_ptr(acc), rows, cols, float(scale), _ptr(bias),
                                         _ptr(out))
    return out


def bias_grad(dy, partials: int) -> np.ndarray:
    """The f32 column sums of ``dy`` [rows, cols] in the kernels' order
    (coat/Numerics/ColumnSums.h) with ``partials`` partial sums."""
    dy = _f32(dy)
    rows, cols = _rows(dy)
    db = np.empty(cols, dtype=np.float32)
    _check(load().coat_ref_bias_grad(_ptr(dy), rows, cols, int(partials), _ptr(db)))
    return db
def _rope(fn_name: str, x, cos, sin, rotated_heads: int) -> np.ndarray:
    x, cos, sin = _f32(x), _f32(cos), _f32(sin)
    if x.ndim != 2 or cos.ndim != 2 or cos.shape != sin.shape or cos.shape[0] != x.shape[0]:
        raise ValueError(f"rope: x [rows, cols] and tables [rows, head_dim] of one shape, got "
                         f"{x.shape}, {cos.shape}, {sin.shape}")
    y = np.empty_like(x)
    _check(getattr(load(), fn_name)(_ptr(x), _ptr(cos), _ptr(sin), x.shape[0], x.shape[1],
                                    cos.shape[1], rotated_heads, _ptr(y)))
    return y


def rope_fwd(x, cos, sin, rotated_heads: int) -> np.ndarray:
    """coat.rope in f32: the first `rotated_heads` heads (of cos.shape[1]
    columns) of each row of x rotated by that row's tables (Hugging Face
    layout), the other columns copied."""
    return _rope("coat_ref_rope_fwd", x, cos, sin, rotated_heads)


def rope_bwd(dy, cos, sin, rotated_heads: int) -> np.ndarray:
    """coat.rope_grad in f32: the gradient of rope_fwd's input."""
    return _rope("coat_ref_rope_bwd", dy, cos, sin, rotated_heads)


# --------------------------------------------------------------------------
# Softmax cross-entropy (coat.cross_entropy)
# --------------------------------------------------------------------------

def cross_entropy(logits_bits, targets, ignore_index: int = -100, threads: int = 32):
    """coat.cross_entropy of [rows, vocab] bf16 logits, given as their uint16
    bits (``bf16_encode``), and int64 ``targets``: (f32 loss per row, bf16
    bits of the gradient softmax - onehot), summed in the order of a team of
    ``threads`` (the kernel's ``config.threads``). Ignored rows give 0 and a
    zero gradient; a target outside [0, vocab) otherwise gives NaNs."""
    x = np.ascontiguousarray(logits_bits, dtype=np.uint16)
    if x.ndim != 2:
        raise ValueError(f"cross_entropy: logits must be [rows, vocab], got shape {x.shape}")
    t = np.ascontiguousarray(targets, dtype=np.int64)
    if t.shape != (x.shape[0],):
        raise ValueError(f"cross_entropy: {t.shape} targets for {x.shape[0]} rows")
    loss = np.empty(x.shape[0], dtype=np.float32)
    grad = np.empty_like(x)
    _check(load().coat_ref_cross_entropy(_ptr(x), _ptr(t), x.shape[0], x.shape[1],
                                         int(ignore_index), int(threads), _ptr(loss),
                                         _ptr(grad)))
    return loss, grad
