"""The compiled rotary-embedding kernels of examples/flow/rope.mlir
(coat.rope, coat.rope_grad; CPU twin in CI, GPU kernel where CUDA is
available) against the host reference library, on random and adversarial
inputs and odd token counts.

The kernels and the library evaluate the same formulas in f32, each product
and each sum one IEEE operation (no fused multiply-add on either target),
and round once to the result type, so every value must match bit for bit
(NaN as "NaN or not": its sign may differ between x86 and the GPU). Heads
past the rotated ones hold the input's bits: copied by the out-of-place
kernels, untouched by the in-place ones. Fused epilogue maxima must equal the
maxima of the stored values, per 1x16 group.

The library's formulas are checked against Hugging Face's rotate_half form
in test/Unit/ActivationsTest.cpp and test_reference.py; here the tables are
the cos and sin of real angles (halves equal, as Hugging Face makes them)
or independent random values (halves unequal: a kernel that read the wrong
half would pass with Hugging Face's tables).
"""

import numpy as np
import pytest

from coat import reference as ref
from kernel_io import (DEVICES, assert_flags, compiled_kernels, empty, flag_buffers,  # noqa: E402
                       hp_array, hp_values, sync)

if not ref.is_available():
    pytest.skip("libcoat_reference.so is not built", allow_module_level=True)

KERNELS = compiled_kernels(("rope", "rope_grad"))
pytestmark = pytest.mark.skipif(
    not KERNELS, reason="no compiled rope kernels (ctest's compile-examples makes them)")

ROWS = [1, 3, 16, 17, 257, 1000]
CASES = ["random", "angles", "zeros", "nonfinite", "denormal", "wide"]


def values(rng, shape, case):
    """f32 inputs for `case`."""
    x = (rng.standard_normal(shape) * np.exp(rng.uniform(-4, 4, shape))).astype(np.float32)
    if case == "zeros":
        x[:, : shape[1] // 2] = 0
        x[::2] = -0.0
    elif case == "nonfinite":
        flat = x.reshape(-1)
        flat[::97] = np.nan
        flat[5::211] = np.inf
        flat[7::307] = -np.inf
    elif case == "denormal":
        x *= np.float32(1e-39)
    elif case == "wide":
        x *= np.exp(rng.uniform(-30, 30, shape)).astype(np.float32)
        x.reshape(-1)[::13] = np.float32(3e38)  # products overflow to inf
    return x


def tables(rng, rows, d, case):
    """cos and sin [rows, d]: of angles (Hugging Face's, halves equal) or
    random (halves unequal)."""
    if case == "angles":
        ang = rng.uniform(-1e4, 1e4, (rows, d // 2)).astype(np.float32)
        ang = np.concatenate([ang, ang], axis=1)
        return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    c = values(rng, (rows, d), "random" if case in ("zeros", "nonfinite") else case)
    s = values(rng, (rows, d), "random")
    if case == "nonfinite":
        c[1::5, 3] = np.nan
        s[2::7, -1] = np.inf
    return c, s


def round_to(x, dtype):
    return ref.bf16_round(x) if dtype == "bf16" else np.asarray(x, np.float32)


def bits(x):
    """f32 bits with every NaN made one NaN."""
    x = np.asarray(x, np.float32).copy()
    x[np.isnan(x)] = np.nan
    return x.view(np.uint32)


def assert_bits_equal(got, want, what):
    got, want = bits(got).reshape(want.shape), bits(want)
    bad = np.argwhere(got != want)
    assert bad.size == 0, (f"{what}: {len(bad)} values differ, first at {tuple(bad[0])}: "
                           f"{got.view(np.float32)[tuple(bad[0])]!r} vs "
                           f"{want.view(np.float32)[tuple(bad[0])]!r}")


def check(kernel, device, rows, case, seed):
    cfg = kernel.config
    args = {a.name: a for a in kernel.spec.memrefs}
    d, cols, rotated = cfg["head_dim"], cfg["cols"], cfg["rotated_heads"]
    x_name, cos_name, sin_name = cfg["operands"]
    (y_name,) = cfg["results"]
    rng = np.random.default_rng(seed)
    x = round_to(values(rng, (rows, cols), case), args[x_name].dtype)
    c, s = tables(rng, rows, d, case)
    c, s = round_to(c, args[cos_name].dtype), round_to(s, args[sin_name].dtype)
    launch = {x_name: hp_array(x, args[x_name].dtype, device),
              cos_name: hp_array(c, args[cos_name].dtype, device),
              sin_name: hp_array(s, args[sin_name].dtype, device)}
    if cfg["in_place"]:
        assert y_name == x_name and len(args[x_name].bind) == 2
    else:
        launch[y_name] = empty((rows * cols,), args[y_name].dtype, device)
    maxima = [n for n in args if n.endswith("_absmax")]
    G = cfg.get("group_size", 0)
    for name in maxima:
        launch[name] = empty((rows * cols // G,), "f32", device)
    flags = flag_buffers(kernel, device)
    kernel.launch(**launch, **flags, rows=rows, cols=cols)
    sync(device)
    assert_flags(flags, {y_name: hp_values(launch[y_name], args[y_name].dtype)})

    fn = ref.rope_fwd if kernel.spec.op == "rope" else ref.rope_bwd
    with np.errstate(invalid="ignore", over="ignore"):
        want = round_to(fn(x, c, s, rotated), args[y_name].dtype)
    got = hp_values(launch[y_name], args[y_name].dtype).reshape(rows, cols)
    assert_bits_equal(got, want, "result")
    # The heads that are not rotated keep the input's bits exactly.
    assert bits(got[:, rotated * d:]).tobytes() == bits(x[:, rotated * d:]).tobytes()
    for name in maxima:
        m = np.fmax.reduce(np.abs(want).reshape(-1, G), axis=1, initial=np.float32(0))
        assert_bits_equal(hp_values(launch[name], "f32"), m, name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_rope_kernel_matches_the_library(kernel, case, device):
    if device == "cuda" and kernel.spec.cubin is None and kernel.spec.ptx is None:
        pytest.skip("module has no GPU binary")
    for i, rows in enumerate(ROWS):
        try:
            check(kernel, device, rows, case, seed=100 * i + CASES.index(case))
        except AssertionError as e:
            raise AssertionError(f"{rows} rows: {e}") from None


def test_examples_cover_both_ops_in_place_and_maxima():
    """examples/flow/rope.mlir has d = 64 and 128, grouped-query column
    counts, in-place kernels, fused maxima, f32 values."""
    cfgs = [(k.spec.op, k.config) for k in KERNELS]
    assert {op for op, _ in cfgs} == {"rope", "rope_grad"}
    assert {c["head_dim"] for _, c in cfgs} >= {64, 128}
    assert any(c["in_place"] for _, c in cfgs) and any(not c["in_place"] for _, c in cfgs)
    assert any("group_size" in c for _, c in cfgs)
    assert any(c["in_place"] and "group_size" in c for _, c in cfgs)
    assert any(c["cols"] // c["head_dim"] - c["rotated_heads"] < c["rotated_heads"] // 2
               for _, c in cfgs)  # fewer k/v heads than q heads


@pytest.mark.parametrize("kernel", KERNELS[:1], ids=lambda k: k.name)
def test_launch_rejects_another_row_length_or_table(kernel):
    """The row length is compiled in (config.cols), the tables are
    [rows, head_dim]: a launch that disagrees is refused, not run."""
    cfg = kernel.config
    d, cols = cfg["head_dim"], cfg["cols"]
    args = {a.name: a for a in kernel.spec.memrefs}

    def buffers(rows, cols, table_rows):
        out = {}
        for name, a in args.items():
            n = table_rows * d if name in ("cos", "sin") else rows * cols
            out[name] = empty((n,), a.dtype, "cpu")
        return out

    with pytest.raises(ValueError, match="differs from the kernel's cols"):
        kernel.launch(**buffers(4, cols + d, 4), rows=4, cols=cols + d)
    with pytest.raises(ValueError, match="cos"):
        kernel.launch(**buffers(4, cols, 3), rows=4, cols=cols)
