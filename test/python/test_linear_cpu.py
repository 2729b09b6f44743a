"""The CPU twins of coat-lower-linear's GEMMs (examples/linear/fp8_linear.mlir,
compiled by ctest's compile-examples) against a float64 reference that
decodes the FP8 operands with the reference library: every kind and output
(bf16, f32, 1x16 FP8 codes + bf16 scales), bias, block scaling, on ragged
shapes and adversarial operands (zeros, the largest codes, one-row and
one-column problems); the bias epilogue also bit for bit against the
reference library where the sums are exact, NaN and infinite biases
included. The twin sums in f32 in K order, so it must match the
exact sum to f32 rounding of the sum; the GPU tests (test_linear_gpu.py)
check the kernels against the same decoded math."""

import os

import ml_dtypes
import numpy as np
import pytest

import coat
from coat import _paths, reference as ref
from conftest import REPO
from kernel_io import assert_codes_equal, assert_values_equal, compiled_kernels

if not ref.is_available():
    pytest.skip("libcoat_reference.so is not built", allow_module_level=True)

KERNELS = [k for k in compiled_kernels(("linear",)) if "fp8_linear" in k.spec.name]
pytestmark = pytest.mark.skipif(
    not KERNELS, reason="no compiled GEMM CPU twins (ctest's compile-examples makes them)")

FP8MAX = {"e4m3": 448.0, "e5m2": 57344.0}
SHAPES = [(1, 16, 16), (3, 17, 32), (33, 48, 40), (130, 70, 272)]  # m, n, k
CASES = ["random", "zeros", "extreme"]


def codes(rng, shape, fmt, case):
    x = (rng.standard_normal(shape) * np.exp(rng.uniform(-3, 3, shape))).astype(np.float32)
    if case == "zeros":
        x[: shape[0] // 2] = 0
    elif case == "extreme":
        x = np.where(rng.uniform(size=shape) < 0.5, -FP8MAX[fmt], FP8MAX[fmt]).astype(np.float32)
    q = ref.fp8_encode(x * np.float32(FP8MAX[fmt] / max(np.abs(x).max(), 1e-30)), fmt)
    return q.reshape(shape)


def operands(kernel, m, n, k, case, rng):
    cfg = kernel.config
    a = codes(rng, (m, k), cfg["a"], case)
    b = codes(rng, (n, k), cfg["b"], "random" if case == "zeros" else case)
    args = dict(a=a.reshape(-1), b=b.reshape(-1), m=m, n=n, k=k)
    da = ref.fp8_decode(a, cfg["a"]).astype(np.float64)
    db = ref.fp8_decode(b, cfg["b"]).astype(np.float64)
    if cfg["scaling"] == "block":
        kb, nb = -(-k // 128), -(-n // 128)
        sa = rng.uniform(0.5, 2, (m, kb)).astype(np.float32)
        sb = rng.uniform(0.5, 2, (nb, kb)).astype(np.float32)
        args.update(a_scale=sa.reshape(-1), b_scale=sb.reshape(-1), n_blocks=nb, k_blocks=kb)
        want = np.zeros((m, n))
        mag = np.zeros((m, n))
        for j in range(kb):
            sl = slice(128 * j, 128 * (j + 1))
            s = sa[:, j:j + 1].astype(np.float64) * np.repeat(sb[:, j], 128)[:n][None, :]
            want += (da[:, sl] @ db[:, sl].T) * s
            mag += (np.abs(da[:, sl]) @ np.abs(db[:, sl]).T) * s
    else:
        sa = np.array([0.37], np.float32)
        sb = np.array([1.9], np.float32)
        args.update(a_scale=sa, b_scale=sb)
        s = np.float64(np.float32(sa[0] * sb[0]))
        want = (da @ db.T) * s
        mag = (np.abs(da) @ np.abs(db).T) * s
    if cfg["bias"]:
        bias = rng.standard_normal(n).astype(np.float32)
        dtype = next(a.dtype for a in kernel.spec.args if a.name == "bias")
        if dtype == "bf16":
            bias = ref.bf16_round(bias)
        args["bias"] = bias.astype(ml_dtypes.bfloat16 if dtype == "bf16" else np.float32)
        want = want + bias
        mag = mag + np.abs(bias)
    if cfg.get("addend"):
        addend = ref.bf16_round((rng.standard_normal((m, n)) * mag.max()).astype(np.float32))
        args["addend"] = addend.reshape(-1).astype(ml_dtypes.bfloat16)
        want = want + addend
        mag = mag + np.abs(addend)
    return args, want, mag


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.spec.name)
def test_gemm_twin(kernel, shape, case):
    if kernel.spec.name.endswith("_n256"):  # compiled for N = 256
        shape = (shape[0], 256, shape[2])
    check_twin(kernel, shape, case)


def test_tma_epilogue_twin_writes_out_as_a_buffer(tmp_path):
    """With coat-lower-linear{epilogue=tma} `out` is a tensormap in the
    manifest (a TMA store on the GPU); the twin takes the same buffer as a
    memref of its element type, which the runtime sizes from the map's dims."""
    tool = _paths.find_coat_opt()
    if tool is None:
        pytest.skip("coat-opt is not built")
    from coat.toolchain import Toolchain
    Toolchain(coat_opt=tool).compile_file(
        os.path.join(REPO, "examples", "linear", "fp8_linear.mlir"), tmp_path,
        gpu=False, linear_options="epilogue=tma")
    mod = coat.load(str(tmp_path))
    mapped = [mod[k.name] for k in mod.manifest.kernels
              if k.op == "linear" and any(a.name == "out" and a.kind == "tensormap"
                                          for a in k.args)]
    # Every bf16/f32 result: per-tensor and block-scaled, with and without
    # (f32 or bf16) bias, with an addend.
    assert len(mapped) == 11, [k.spec.name for k in mapped]
    for kernel in mapped:
        n = 256 if kernel.spec.name.endswith("_n256") else 48
        check_twin(kernel, (33, n, 40), "random")


def check_twin(kernel, shape, case):
    m, n, k = shape
    cfg = kernel.config
    rng = np.random.default_rng(m * 1000 + n + k)
    args, want, mag = operands(kernel, m, n, k, case, rng)
    # f32 accumulation in K order: each of the k additions rounds once.
    tol = mag * (k + 4) * 2.0 ** -24
    if cfg["out"] in FP8MAX:
        out = np.full(m * n, 0x55, np.uint8)
        scale = np.full(m * -(-n // 16), np.nan, ml_dtypes.bfloat16)
        kernel.launch(out=out, out_scale=scale, **args)
        groups = -(-n // 16)
        s = scale.astype(np.float32).reshape(m, groups)
        # The group scale is bf16((max|acc| + 1e-10) / fp8max) of the f32 results.
        padded = np.zeros((m, groups * 16))
        padded[:, :n] = want
        amax = np.abs(padded).reshape(m, groups, 16).max(axis=2)
        want_s = ref.bf16_round(((amax + 1e-10) / FP8MAX[cfg["out"]]).astype(np.float32))
        assert np.allclose(s, want_s, rtol=2.0 ** -7, atol=0), "group scales"
        # Codes of acc / s_f32 (the unrounded scale): within one FP8 step.
        got = ref.fp8_decode(out, cfg["out"]).reshape(m, n)
        s_f32 = np.repeat((amax + 1e-10) / FP8MAX[cfg["out"]], 16, axis=1)[:, :n]
        ideal = want / s_f32
        step = 2.0 ** -(3 if cfg["out"] == "e4m3" else 2)
        err = np.abs(got - ideal)
        bound = np.maximum(np.abs(ideal) * step, 2.0 ** -9 if cfg["out"] == "e4m3" else 2.0 ** -16)
        bound += tol / s_f32
        assert (err <= bound).all(), f"codes off by more than one FP8 step: max {err.max()}"
        return
    dtype = np.float32 if cfg["out"] == "f32" else ml_dtypes.bfloat16
    out = np.full(m * n, np.nan, dtype)
    kernel.launch(out=out, **args)
    got = out.astype(np.float64).reshape(m, n)
    assert not np.isnan(got).any(), "unwritten or NaN outputs"
    if cfg["out"] == "bf16":
        tol = tol + np.abs(want) * 2.0 ** -8  # one bf16 rounding
    bad = np.abs(got - want) > tol
    assert not bad.any(), (f"{bad.sum()} of {m * n} differ beyond f32 summation error, first "
                           f"{np.argwhere(bad)[0]}: {got[bad][0]!r} vs {want[bad][0]!r}")


# --- The addend, bit for bit --------------------------------------------------

ADDEND_KERNELS = [k for k in KERNELS if k.config.get("addend")]


@pytest.mark.parametrize("m,k", [(1, 16), (33, 40), (130, 272)])
@pytest.mark.parametrize("kernel", ADDEND_KERNELS, ids=lambda k: k.spec.name)
def test_addend_summed_before_the_one_rounding(kernel, m, k):
    """bf16(acc * (s_A * s_B) + addend): the product and the sum each an f32
    operation, one rounding to bf16, with zeros, infinities, NaN and an
    overflowing sum in the addend (exact operands: the accumulator is the
    same in any order)."""
    n = 256 if kernel.spec.name.endswith("_n256") else 48
    rng = np.random.default_rng(m + k)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32) / 2
    b = rng.integers(-4, 5, (n, k)).astype(np.float32) / 2
    acc = a @ b.T
    addend = ref.bf16_round((rng.standard_normal((m, n)) * 64).astype(np.float32))
    flat = addend.reshape(-1)
    flat[::7] = 0
    flat[1::11] = np.inf
    flat[2::13] = -np.inf
    flat[3::17] = np.nan
    flat[4::19] = ref.bf16_round(np.array([3e38], np.float32))[0]
    sa, sb = np.float32(0.375), np.float32(1.875)
    args = dict(a=ref.fp8_encode(a, kernel.config["a"]).reshape(-1),
                b=ref.fp8_encode(b, "e4m3").reshape(-1), m=m, n=n, k=k,
                a_scale=np.array([sa]), b_scale=np.array([sb]),
                addend=addend.reshape(-1).astype(ml_dtypes.bfloat16))
    with np.errstate(over="ignore", invalid="ignore"):
        want = ref.bf16_round((acc * (sa * sb)).astype(np.float32) + addend)
    out = np.full(m * n, np.nan, ml_dtypes.bfloat16)
    kernel.launch(out=out, **args)
    assert_values_equal(out.astype(np.float32).reshape(m, n), want, "addend epilogue")


# --- The bias epilogue, bit for bit -----------------------------------------

BIAS_KERNELS = [k for k in KERNELS
                if k.config["bias"] and k.config["scaling"] == "per_tensor"]


def exact_operands(rng, m, n, k):
    """E4M3 codes of small multiples of 1/2: every product and partial sum
    is exact in f32, so the accumulator is the same in any order."""
    a = rng.integers(-4, 5, (m, k)).astype(np.float32) / 2
    b = rng.integers(-4, 5, (n, k)).astype(np.float32) / 2
    return ref.fp8_encode(a, "e4m3"), ref.fp8_encode(b, "e4m3"), a @ b.T


def adversarial_bias(rng, n, dtype):
    bias = (rng.standard_normal(n) * 8).astype(np.float32)
    bias[:: 7] = 0
    bias[1:: 11] = np.inf
    bias[2:: 13] = -np.inf
    bias[3:: 17] = np.nan
    bias[4:: 19] = 3e38  # the sum may overflow to inf
    return ref.bf16_round(bias) if dtype == "bf16" else bias


@pytest.mark.parametrize("shape", [(1, 16, 16), (33, 48, 40), (130, 80, 272)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kernel", BIAS_KERNELS, ids=lambda k: k.spec.name)
def test_bias_epilogue_matches_reference_library(kernel, shape):
    """acc * (s_A * s_B) + bias in f32 (the library's linear_bias_epilogue),
    then one bf16 rounding, or the 1x16 quantization of those values (the
    library's quantize per_group<16>, bf16 scales): the bias is added before
    the group maxima."""
    m, n, k = shape
    cfg = kernel.config
    rng = np.random.default_rng(m + n + k)
    a, b, acc = exact_operands(rng, m, n, k)
    sa, sb = np.float32(0.37), np.float32(1.9)
    bdtype = next(x.dtype for x in kernel.spec.args if x.name == "bias")
    bias = adversarial_bias(rng, n, bdtype)
    args = dict(a=a.reshape(-1), b=b.reshape(-1), m=m, n=n, k=k,
                a_scale=np.array([sa]), b_scale=np.array([sb]),
                bias=bias.astype(ml_dtypes.bfloat16 if bdtype == "bf16" else np.float32))
    with np.errstate(over="ignore"):
        want = ref.linear_bias_epilogue(acc, sa * sb, bias)
    if cfg["out"] in FP8MAX:
        out = np.full(m * n, 0x55, np.uint8)
        scale = np.full(m * -(-n // 16), np.nan, ml_dtypes.bfloat16)
        kernel.launch(out=out, out_scale=scale, **args)
        codes, scales = ref.quantize_per_group(want, 16, cfg["out"], bf16_scale=True)
        assert_codes_equal(out, codes, cfg["out"], "codes")
        np.testing.assert_array_equal(scale.astype(np.float32).reshape(-1),
                                      scales.reshape(-1))
        return
    dtype = np.float32 if cfg["out"] == "f32" else ml_dtypes.bfloat16
    out = np.full(m * n, np.nan, dtype)
    kernel.launch(out=out, **args)
    if cfg["out"] == "bf16":
        want = ref.bf16_round(want)
    assert_values_equal(out.astype(np.float32), want, "outputs")


def test_scaled_mm_picks_a_kernel_for_the_bias_dtype():
    """coat.linear.scaled_mm looks kernels up by the bias's dtype: a bf16
    bias takes a bf16-bias kernel, or an f32-bias one (widened exactly); an
    f32 bias never a bf16-bias kernel."""
    from coat.linear import find_kernel

    mod = KERNELS[0].module

    def bias_of(k):
        return next((a.dtype for a in k.spec.args if a.name == "bias"), None)

    assert bias_of(find_kernel("e4m3", "e4m3", "bf16", False, mod)) is None
    assert bias_of(find_kernel("e4m3", "e4m3", "bf16", "f32", mod)) == "f32"
    assert bias_of(find_kernel("e4m3", "e4m3", "bf16", "bf16", mod)) == "bf16"
    assert bias_of(find_kernel("e4m3", "e4m3", "bf16", True, mod)) in ("f32", "bf16")
    assert bias_of(find_kernel("e4m3", "e4m3", "e4m3", "bf16", mod)) == "bf16"
    with pytest.raises(ValueError, match=r"e4m3 x e4m3 -> e4m3 with bias \(f32\)"):
        find_kernel("e4m3", "e4m3", "e4m3", "f32", mod)


def test_scaled_mm_never_picks_a_kernel_whose_epilogue_reads_more():
    """A GEMM with an addend (or rotary tables) computes something other
    than the product: scaled_mm's lookup passes over it, whatever order the
    module lists its kernels in, and says so when nothing else is there."""
    from coat.linear import find_kernel, reads_more_than_a_gemm

    mod = KERNELS[0].module
    summed = [k for k in mod.kernels.values() if k.spec.config.get("addend")]
    assert summed, "examples/linear/fp8_linear.mlir compiles dgrads with an addend"
    assert all(reads_more_than_a_gemm(k.spec.config) for k in summed)
    assert reads_more_than_a_gemm({"rope_head_dim": 64, "rope_rotated_heads": 36})
    assert not reads_more_than_a_gemm({"bias": True})
    # The summed kernels first: a lookup by formats and bias alone would
    # take one of them.
    import copy
    first = copy.copy(mod)
    first.kernels = dict(sorted(mod.kernels.items(),
                                key=lambda kv: not kv[1].spec.config.get("addend")))
    k = find_kernel("e5m2", "e4m3", "bf16", False, first)
    assert not k.spec.config.get("addend") and k.spec.config["kind"] == "dgrad"
