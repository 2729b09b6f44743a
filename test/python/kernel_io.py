"""Buffers and comparisons shared by the kernel numerics tests: inputs on the
CPU (numpy, for the CPU twins) or the GPU (torch), outputs pre-filled with
garbage, and bitwise comparisons that treat NaN as one value."""

import ml_dtypes
import numpy as np

from coat import artifacts, reference as ref

try:
    import torch

    HAVE_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    torch, HAVE_CUDA = None, False

DEVICES = ["cpu"] + (["cuda"] if HAVE_CUDA else [])
SHAPES = [(1, 16), (3, 48), (257, 80), (1000, 1040)]
CASES = ["random", "zeros", "nonfinite", "denormal", "wide", "equal"]
NAN_MASK = {"e4m3": 0x7F, "e5m2": 0x7C}


def compiled_kernels(ops, *, cpu_twin=True):
    """The compiled kernels whose manifest `op` is in `ops`, from every folder
    coat searches ($COAT_KERNELS, then the build's demo output), keeping only
    those with a CPU twin unless `cpu_twin` is False."""
    out = []
    for mod in artifacts.modules():
        out += [k for k in mod.kernels.values()
                if k.spec.op in ops and (k.spec.cpu_symbol or not cpu_twin)]
    return out


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
    """An output buffer filled with garbage (NaN, or code 0x55); a
    finiteness flag (i32) zeroed, as callers must give it."""
    if dtype == "i32":
        if device == "cuda":
            return torch.zeros(shape, dtype=torch.int32, device="cuda")
        return np.zeros(shape, np.int32)
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


def flag_buffers(kernel, device):
    """A zeroed finiteness flag (coat.finite_flag: an i32 word, 16-byte
    aligned) for each `finite_<result>` argument the kernel has."""
    names = [a.name for a in kernel.spec.memrefs if a.name.startswith("finite_")]
    if device == "cuda":
        return {n: torch.zeros(4, dtype=torch.int32, device="cuda")[:1] for n in names}
    return {n: np.zeros(4, np.int32)[:1] for n in names}


def assert_flags(flags, stored):
    """Each flag is set exactly where its result (name -> the stored values
    as f32) holds a NaN or an infinity."""
    for name, flag in flags.items():
        got = int(np.asarray(flag.cpu() if hasattr(flag, "cpu") else flag)[0])
        values = np.asarray(stored[name[len("finite_"):]], np.float32)
        want = not np.isfinite(values).all()
        assert bool(got) == want, f"{name} = {got}, the result {'holds' if want else 'has no'} NaN/Inf"
