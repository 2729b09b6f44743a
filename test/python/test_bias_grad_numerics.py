"""The bias-gradient kernels of coat-lower-bias-grad (examples/linear/
bias_grad.mlir, and the programs' fused maxima + bias-gradient kernels; CPU
twin in CI, GPU kernel where CUDA is available) against the host reference
library, bit for bit.

db[c] is the f32 sum of dy[:, c] in the order of coat/Numerics/ColumnSums.h
(the library's coat_ref_bias_grad with the kernel's `partials`), rounded
once to the result type, so kernel, twin and library agree exactly on every
input, NaN and infinities included. As an oracle that does not share that
order, finite sums are also checked against a float64 sum, within the f32
rounding of the kernels' additions (rows + partials + 8 of them, at most).
Where the kernel also writes the 1x16 maxima of dy (an incoming gradient's,
fused into the same read), they must be those of every absmax kernel:
max |x| per group, NaN skipped, an all-NaN group 0.
"""

import numpy as np
import pytest

from coat import reference as ref

if not ref.is_available():
    pytest.skip("libcoat_reference.so is not built", allow_module_level=True)

from kernel_io import (DEVICES, activation, assert_flags, assert_values_equal,  # noqa: E402
                       compiled_kernels, flag_buffers,
                       hp_array, hp_values, sync)

KERNELS = compiled_kernels(("bias_grad",))
pytestmark = pytest.mark.skipif(
    not KERNELS, reason="no compiled bias-gradient kernels (ctest's compile-examples makes them)")

# Token counts that are no multiple of the 32 rows a partial takes (nor of
# 8 rows in flight); feature counts 16 * odd, and more columns than a CTA
# covers (1024 bf16 / 512 f32), ragged.
SHAPES = [(1, 16), (33, 48), (100, 80), (257, 144), (1000, 528), (300, 2064)]
CASES = ["random", "zeros", "nonfinite", "denormal", "wide", "equal"]
U = 2.0 ** -24


def example_kernels():
    """One kernel per configuration (the programs repeat the examples')."""
    seen, out = set(), []
    for k in KERNELS:
        c = k.config
        key = (c["grad"], c["dbias"], c["absmax"], c["group_size"], c["rows_per_partial"])
        if key not in seen:
            seen.add(key)
            out.append(k)
    return out


def on_gpu(kernel, device):
    if device == "cuda" and kernel.spec.cubin is None and kernel.spec.ptx is None:
        pytest.skip("module has no GPU binary")


def nan_buffer(n, dtype, device):
    """An output or workspace full of NaN, so unwritten elements show."""
    return hp_array(np.full(n, np.nan, np.float32), dtype, device)


def run(kernel, dy, device):
    """Both launches over `dy` ([rows, cols] f32 values exact in the kernel's
    dtype). Returns (db as f32 values, the maxima or None, partials)."""
    c = kernel.config
    rows, cols = dy.shape
    partials = -(-rows // c["rows_per_partial"])
    ws = nan_buffer(partials * cols, "f32", device)
    args = dict(dy=hp_array(dy.reshape(-1), c["grad"], device), dbias_partial=ws,
                rows=rows, cols=cols, partials=partials)
    if c["absmax"]:
        args["absmax"] = nan_buffer(rows * cols // c["group_size"], "f32", device)
    kernel.launch(**args)
    db = nan_buffer(cols, c["dbias"], device)
    reduce = kernel.module[kernel.name + "_reduce"]
    flags = flag_buffers(reduce, device)
    reduce.launch(n=cols, dbias_partial=ws, dbias=db, cols=cols, partials=partials, **flags)
    sync(device)
    assert_flags(flags, {"dbias": hp_values(db, c["dbias"])})
    maxima = hp_values(args["absmax"], "f32") if c["absmax"] else None
    return hp_values(db, c["dbias"]), maxima, partials


def rounded(x, dtype):
    return ref.bf16_round(x) if dtype == "bf16" else x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kernel", example_kernels(), ids=lambda k: k.name)
def test_bias_grad_matches_reference_library(kernel, case, device):
    on_gpu(kernel, device)
    c = kernel.config
    for i, (rows, cols) in enumerate(SHAPES):
        rng = np.random.default_rng(1000 * i + CASES.index(case))
        dy = activation(rng, (rows, cols), case, bf16=c["grad"] == "bf16")
        db, maxima, partials = run(kernel, dy, device)
        what = f"{rows}x{cols}"
        assert_values_equal(db, rounded(ref.bias_grad(dy, partials), c["dbias"]),
                            f"{what}: dbias")
        if maxima is not None:
            G = c["group_size"]
            want = np.fmax.reduce(np.abs(dy).reshape(-1, G), axis=1, initial=np.float32(0))
            assert_values_equal(maxima, want, f"{what}: 1x{G} maxima")
        if case in ("random", "zeros", "denormal", "equal"):
            exact = dy.astype(np.float64).sum(axis=0)
            bound = np.abs(dy).astype(np.float64).sum(axis=0) * (rows + partials + 8) * U
            if c["dbias"] == "bf16":
                bound += np.abs(exact) * 2.0 ** -8 + 2.0 ** -133  # one bf16 rounding
            err = np.abs(db.astype(np.float64) - exact)
            assert (err <= bound).all(), (f"{what}: dbias off the float64 sum by "
                                          f"{err.max():.3g} (bound {bound[err.argmax()]:.3g})")


@pytest.mark.parametrize("device", DEVICES)
def test_order_is_the_documented_one(device):
    """Sums near 2^24, where adding 1 rounds away, tell orders apart: a
    column of 2^24 (row 0) and 32 ones (rows 1..32) sums to 2^24 in row
    order, while the kernels' order (partial p: rows p, p + 33, ...; eight
    strided runs over the 33 partials, then the runs) keeps 28 of the ones:
    2^24 + 28. Every kernel must give the library's value."""
    rows = 33 * 32  # 33 partials of 32 rows
    col = np.zeros(rows, np.float32)
    col[0] = 2.0 ** 24
    col[1:33] = 1.0  # partials 1..32 hold a 1 each
    for kernel in example_kernels():
        on_gpu(kernel, device)
        c = kernel.config
        if c["rows_per_partial"] != 32:
            continue
        cols = c["group_size"]
        dy = np.repeat(col[:, None], cols, axis=1)
        db, _, partials = run(kernel, dy, device)
        want = ref.bias_grad(dy, partials)
        assert partials == 33
        assert want[0] == np.float32(2.0 ** 24 + 28)  # not the row-order 2^24
        assert_values_equal(db, rounded(want, c["dbias"]), kernel.name)


@pytest.mark.parametrize("device", DEVICES)
def test_no_tokens_give_a_zero_gradient(device):
    """rows = 0: no partials, no launch of the partial kernel's grid on the
    GPU, and the reduction writes zeros."""
    for kernel in example_kernels():
        on_gpu(kernel, device)
        c = kernel.config
        cols = 4 * c["group_size"]
        db = nan_buffer(cols, c["dbias"], device)
        ws = nan_buffer(0, "f32", device)
        args = dict(dy=nan_buffer(0, c["grad"], device), dbias_partial=ws, rows=0, cols=cols,
                    partials=0)
        if c["absmax"]:
            args["absmax"] = nan_buffer(0, "f32", device)
        kernel.launch(**args)
        kernel.module[kernel.name + "_reduce"].launch(n=cols, dbias_partial=ws, dbias=db,
                                                     cols=cols, partials=0)
        sync(device)
        got = hp_values(db, c["dbias"])
        assert (got == 0).all() and not np.signbit(got).any(), kernel.name


@pytest.mark.skipif("cuda" not in DEVICES, reason="CUDA is not available")
def test_gpu_is_deterministic_and_matches_the_cpu_twin():
    """The same bits on every run and on both targets, at a size with many
    CTAs along both grid dimensions."""
    rng = np.random.default_rng(5)
    for kernel in example_kernels():
        on_gpu(kernel, "cuda")
        c = kernel.config
        dy = activation(rng, (4099, 4112), "random", bf16=c["grad"] == "bf16")
        first = run(kernel, dy, "cuda")
        again = run(kernel, dy, "cuda")
        twin = run(kernel, dy, "cpu")
        assert_values_equal(first[0], again[0], f"{kernel.name}: run to run")
        assert_values_equal(first[0], twin[0], f"{kernel.name}: GPU and CPU twin")
        if c["absmax"]:
            assert_values_equal(first[1], twin[1], f"{kernel.name}: maxima")


def test_launch_rejects_columns_off_the_vector():
    """cols must be a multiple of the kernel's group (whole 16-byte loads,
    whole maxima groups): the launch says so instead of reading past rows."""
    kernel = example_kernels()[0]
    c = kernel.config
    G = c["group_size"]
    cols = G + c["lane_elements"] // 2
    args = dict(dy=nan_buffer(2 * cols, c["grad"], "cpu"),
                dbias_partial=nan_buffer(cols, "f32", "cpu"), rows=2, cols=cols, partials=1)
    if c["absmax"]:
        args["absmax"] = nan_buffer(2, "f32", "cpu")
    with pytest.raises(Exception, match=f"not a multiple of the group size {G}"):
        kernel.launch(**args)


def test_fused_maxima_equal_the_absmax_kernels():
    """The 1x16 maxima written beside the bias gradient are, bit for bit,
    those of the activation family's absmax kernel on the same input (the
    scale of dy's E5M2 copy must not depend on whether its kernel also sums
    the bias)."""
    fused = [k for k in example_kernels() if k.config["absmax"]]
    plain = [k for k in compiled_kernels(("absmax",))
             if k.spec.group_size == 16 and k.config.get("input") == "bf16"]
    if not fused or not plain:
        pytest.skip("no fused or no standalone bf16 1x16 absmax kernel compiled")
    rng = np.random.default_rng(9)
    for case in ("random", "nonfinite", "wide"):
        dy = activation(rng, (257, 528), case, bf16=True)
        _, maxima, _ = run(fused[0], dy, "cpu")
        out = nan_buffer(257 * 528 // 16, "f32", "cpu")
        plain[0].launch(input=hp_array(dy.reshape(-1), "bf16", "cpu"), absmax=out,
                        rows=257, cols=528)
        assert_values_equal(maxima, hp_values(out, "f32"), case)
