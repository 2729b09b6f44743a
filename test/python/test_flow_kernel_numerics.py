"""The compiled pointwise precision-flow kernels of examples/flow (CPU twin in
CI, GPU kernel where CUDA is available) against the host reference library,
on random and adversarial inputs and odd shapes.

Each kernel is checked generically from its manifest record: FP8 operands get
1xG codes + scales made by the library's quantizer (so NaN codes, infinite and
denormal scales occur), high-precision operands get bf16 values; the library
computes the op's f32 math (reference.silu_fwd ... on the dequantized values)
and from it the expected results: high-precision values rounded to their
dtype, 1xG FP8 codes + bf16 scales (reference.quantize_per_group), and the
epilogue maxima (max |stored value| per group).

The kernels compute the scales exactly as the library does and divide by
them with a correctly rounded division (one IEEE reciprocal per group and a
Markstein correction: the IEEE quotient's FP8 codes), so ops without special
functions (swiglu_mul, residual_add and their gradients) must match bit for
bit on both targets, as must the CPU twins of kernels compiled with
exact-math=true (manifest config math = "exact"): those evaluate each formula
in the library's order with IEEE division and call the same libm expf/erff.

The SwiGLU with its SiLU folded in (swiglu, swiglu_grad: coat-fuse-silu)
derives silu(gate) and its 1xG copy in registers. Its check takes that copy
from the module's own silu kernel (compiled with the same options, itself
checked against the library here) run on the gate: the fused kernel must
give what the unfused pair gives, so the product and the up gradient match
the library's product of that copy bit for bit, and the gate's gradient
(silu_grad of the library's dy * x2 rounded to bf16) is held to silu_grad's
tolerance.

GELU and its gradient come in both forms (the manifest's approximate =
"tanh": the library's gelu_tanh functions, libm tanhf in the exact CPU
twins).

Ops with special functions (silu, gelu and their gradients) differ from the
library: by a few f32 ulps on the GPU with exact-math (libdevice
__nv_expf/__nv_erff/__nv_tanhf), and on both targets with the default fast formulas
(math = "fast": ex2/rcp and erfc as t exp(P(t) - z^2)) by at most 2^-16.0
relative, or 2^-21.0 * (1 + |x|) * |dy| absolute for the derivatives, before
rounding (coat-lower-pointwise's description derives these bounds). Near the
zero of 1 + erf(x) and of the derivatives that error is amplified by
cancellation. There a value passes if it is within one bf16 ulp of the
library's, or within 16 * 2^-23 * |dy| * (1 + |x|) = 2^-19 * |dy| * (1 + |x|)
of it (dy = 1 in the forward ops). A 1xG FP8 result must have scales within
one bf16 ulp, and codes equal to cvt(y_library / scale_kernel) except for at
most 0.1% (and at least 2) that are one FP8 step away. NaN and infinity must
match exactly everywhere. NaN codes are compared as "NaN or not": the sign of
a NaN made by arithmetic differs between x86 and the GPU.
"""

from pathlib import Path

import numpy as np
import pytest

import coat
from coat import _paths, reference as ref

if not ref.is_available():
    pytest.skip("libcoat_reference.so is not built", allow_module_level=True)

from kernel_io import (compiled_kernels, CASES, DEVICES, NAN_MASK, activation,  # noqa: E402
                       assert_codes_equal, assert_flags, assert_values_equal, codes_of,
                       empty, flag_buffers, hp_array, hp_values, sync, torch)

# f32 math of each op on the dequantized operands (and the kernel's manifest
# config: GELU's form, approximate) -> the values of each result (a quantized
# copy of a result has the same values).
MATH = {
    "silu": lambda v, c: {"y": ref.silu_fwd(v["x"])},
    "silu_grad": lambda v, c: dict.fromkeys(("dx", "dx_q"), ref.silu_bwd(v["x"], v["dy"])),
    "gelu": lambda v, c: {"y": ref.gelu_fwd(v["x"], c.get("approximate", "none"))},
    "gelu_grad": lambda v, c: dict.fromkeys(("dx", "dx_q"), ref.gelu_bwd(
        v["x"], v["dy"], c.get("approximate", "none"))),
    "swiglu_mul": lambda v, c: {"y": ref.swiglu_mul_fwd(v["x1"], v["x2"])},
    "swiglu_mul_grad": lambda v, c: dict(zip(("dx1", "dx2"), ref.swiglu_mul_bwd(
        v["x1"], v["x2"], v["dy"])), dx2_q=ref.swiglu_mul_bwd(v["x1"], v["x2"], v["dy"])[1]),
    # x1: the copy of silu(gate) the module's silu kernel writes (check()).
    "swiglu": lambda v, c: {"y": ref.swiglu_mul_fwd(v["x1"], v["x2"])},
    "swiglu_grad": lambda v, c: swiglu_grad(v),
    "residual_add": lambda v, c: dict.fromkeys(
        ("sum", "sum_q"), ref.residual_add_bwd(v["residual"], v["branch"])),
    "residual_add_grad": lambda v, c: dict.fromkeys(("sum", "sum_q"),
                                                    ref.residual_add_bwd(v["a"], v["b"])),
}
# Ops whose GPU kernel calls a special function (expf, erff): see the docstring.
SPECIAL_FUNCTIONS = {"silu", "silu_grad", "gelu", "gelu_grad"}
# Products with the SiLU folded in: result -> (its x, its dy) where it is
# held to silu_grad's tolerance; the other results are exact.
FUSED_SILU = {"swiglu": {}, "swiglu_grad": {"dgate": lambda v: (v["gate"], v["dy_x2"])}}
#: The manifest config a fused kernel and its module's silu kernel share.
SILU_OPTIONS = ("math", "ex2", "division")


def swiglu_grad(v):
    dx1, dx2 = ref.swiglu_mul_bwd(v["x1"], v["x2"], v["dy"])
    v["dy_x2"] = ref.bf16_round(dx1)  # as the unfused product stored dlhs
    return {"dgate": ref.silu_bwd(v["gate"], v["dy_x2"]), "dx2": dx2}
SHAPES = [(1, 16), (3, 48), (256, 64), (257, 80), (1000, 1040)]


KERNELS = compiled_kernels(MATH)
pytestmark = pytest.mark.skipif(
    not KERNELS, reason="no compiled flow kernels (ctest's compile-examples makes them)")


def args_of(kernel):
    return {a.name: a for a in kernel.spec.memrefs}


def to_device(a, device):
    return torch.from_numpy(a).cuda() if device == "cuda" else a


def make_operands(kernel, shape, case, seed, device):
    """(kernel arguments, f32 values the op sees) for every operand; FP8
    operands are 1xG (the ops' verifiers require it)."""
    args, G = args_of(kernel), kernel.spec.group_size
    launch, values = {}, {}
    for i, name in enumerate(kernel.config["operands"]):
        rng = np.random.default_rng(seed * 7 + i)
        a = args[name]
        if a.dtype in NAN_MASK:  # FP8 codes + scales
            fmt, scale = a.dtype, args[name + "_scale"]
            bf16_scale = scale.dtype == "bf16"
            x = activation(rng, shape, case, False)
            codes, scales = ref.quantize_per_group(x, G, fmt, bf16_scale=bf16_scale)
            if case == "nonfinite":
                codes.reshape(-1)[3::101] = NAN_MASK[fmt]  # NaN codes in finite groups
            values[name] = ref.dequantize(codes, scales, "per_group", fmt, group_size=G)
            launch[name] = to_device(codes, device)
            launch[name + "_scale"] = hp_array(scales.reshape(-1), scale.dtype, device)
        else:
            x = activation(rng, shape, case, a.dtype == "bf16")
            values[name] = x
            launch[name] = hp_array(x, a.dtype, device)
    return launch, values


def silu_copy(kernel, launch, shape, device):
    """silu(gate) as a silu kernel with the fused kernel's options writes it
    (1xG codes + scales), dequantized: its module's, else any compiled one
    (a model's module has none left: coat-fuse-silu folded them)."""
    candidates = list(kernel.module.kernels.values()) + compiled_kernels({"silu"})
    silu = next((k for k in candidates if k.spec.op == "silu"
                 and all(k.config.get(o) == kernel.config.get(o) for o in SILU_OPTIONS)), None)
    assert silu is not None, f"{kernel.name}: no compiled silu kernel with its options"
    rows, cols = shape
    G = kernel.spec.group_size
    args = args_of(silu)
    out = {"y": empty(shape, args["y"].dtype, device),
           "y_scale": empty((rows * cols // G,), args["y_scale"].dtype, device)}
    silu.launch(x=launch["gate"], x_scale=launch["gate_scale"], **out,
                **flag_buffers(silu, device), rows=rows, cols=cols)
    sync(device)
    codes = codes_of(out["y"]).reshape(shape)
    scales = hp_values(out["y_scale"], args["y_scale"].dtype)
    return ref.dequantize(codes, scales, "per_group", args["y"].dtype, group_size=G)


def round_to(x, dtype):
    return ref.bf16_round(x) if dtype == "bf16" else np.asarray(x, np.float32)


def group_maxima(x, G):
    return np.fmax.reduce(np.abs(x).reshape(-1, G), axis=1, initial=np.float32(0))


def bf16_order(x):
    """bf16 values -> integers in value order (adjacent values differ by 1)."""
    bits = ref.bf16_encode(x).astype(np.int32)
    return np.where(bits & 0x8000, -(bits & 0x7FFF), bits)


def assert_close(got, want, slack, what):
    """Equal non-finites; elsewhere within one bf16 ulp or `slack`."""
    got, want = np.asarray(got, np.float32).reshape(-1), np.asarray(want, np.float32).reshape(-1)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{what}: NaNs differ"
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf]), f"{what}: infinities differ"
    ok = nan | inf | (np.abs(bf16_order(got) - bf16_order(want)) <= 1)
    ok |= np.abs(got.astype(np.float64) - want) <= slack.reshape(-1)
    bad = np.flatnonzero(~ok)
    assert bad.size == 0, (f"{what}: {bad.size} values off by more than the tolerance, "
                           f"first at {bad[0]}: {got[bad[0]]!r} vs {want[bad[0]]!r}")


def code_order(codes, fmt):
    c = np.asarray(codes).astype(np.int32)
    mag = c & 0x7F
    return np.where(c & 0x80, -mag, mag)


def check(kernel, device, shape, case, seed, approximate=None):
    """``approximate``: the library's GELU form to compare with in place of
    the one the manifest records (the checks must tell the forms apart)."""
    rows, cols = shape
    G, op, cfg = kernel.spec.group_size, kernel.spec.op, kernel.config
    args = args_of(kernel)
    launch, values = make_operands(kernel, shape, case, seed, device)
    if op in FUSED_SILU:
        values["x1"] = silu_copy(kernel, launch, shape, device)
    math = MATH[op](values, cfg if approximate is None else dict(cfg, approximate=approximate))
    outputs = {}
    for name in cfg["results"]:
        a = args[name]
        outputs[name] = empty(shape, a.dtype, device)
        if name + "_scale" in args:
            outputs[name + "_scale"] = empty((rows * cols // G,), args[name + "_scale"].dtype,
                                             device)
    maxima = [a for a in args if a.endswith("_absmax")]
    for name in maxima:
        outputs[name] = empty((rows * cols // G,), "f32", device)
    flags = flag_buffers(kernel, device)
    kernel.launch(**launch, **outputs, **flags, rows=rows, cols=cols)
    sync(device)
    assert_flags(flags, {name[len("finite_"):]: hp_values(outputs[name[len("finite_"):]],
                                                          args[name[len("finite_"):]].dtype)
                         for name in flags})

    inexact = device == "cuda" or cfg.get("math", "exact") == "fast"

    def slack_of(x, dy):
        with np.errstate(invalid="ignore", over="ignore"):
            return 16 * 2.0 ** -23 * np.abs(dy.astype(np.float64)) * (1 + np.abs(x))

    for name in cfg["results"]:
        a, y = args[name], math[name]
        tolerant = inexact and (op in SPECIAL_FUNCTIONS or name in FUSED_SILU.get(op, {}))
        if tolerant and op in FUSED_SILU:
            slack = slack_of(*FUSED_SILU[op][name](values))
        elif tolerant:
            x = next(v for n, v in values.items() if n in ("x", "x1"))
            slack = slack_of(x, values.get("dy", np.ones_like(x)))
        if a.dtype in NAN_MASK:
            sdt = args[name + "_scale"].dtype
            want_codes, want_scales = ref.quantize_per_group(y, G, a.dtype,
                                                             bf16_scale=sdt == "bf16")
            got_scales = hp_values(outputs[name + "_scale"], sdt)
            if not tolerant:
                assert_codes_equal(outputs[name], want_codes, a.dtype, f"{name} codes")
                assert_values_equal(got_scales, want_scales, f"{name} scales")
                continue
            assert_close(got_scales, want_scales, np.zeros(got_scales.size), f"{name} scales")
            # Codes of the library's values under the kernel's scales.
            s = np.repeat(got_scales, G).reshape(shape)
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                want = ref.fp8_encode(y / s, a.dtype)
            got = codes_of(outputs[name]).reshape(shape)
            m = NAN_MASK[a.dtype]
            nan_w = (want & m) == m
            assert np.array_equal((got & m) == m, nan_w), f"{name}: NaN codes differ"
            step = np.abs(code_order(got, a.dtype) - code_order(want, a.dtype))[~nan_w]
            assert step.max(initial=0) <= 1, f"{name}: codes more than one FP8 step away"
            assert np.count_nonzero(step) <= max(2, step.size // 1000), \
                f"{name}: {np.count_nonzero(step)} codes one FP8 step away"
            continue
        want = round_to(y, a.dtype)
        got = hp_values(outputs[name], a.dtype)
        if tolerant:
            assert_close(got, want, slack, name)
        else:
            assert_values_equal(got, want, name)
        for mname in (n for n in maxima if n.startswith(name + "_absmax")):
            got_max = hp_values(outputs[mname], "f32")
            if tolerant:
                # The maximum of values that may each be off by the tolerance.
                assert_close(got_max, group_maxima(got, G), np.zeros(got_max.size), mname)
                assert_close(got_max, group_maxima(want, G),
                             group_maxima(slack, G), mname + " vs the library")
            else:
                assert_values_equal(got_max, group_maxima(want, G), mname)
    if op == "residual_add" and "sum_q" in args:
        # The library's fused add_fwd: the same bf16 stream and 1xG copy
        # (the programs' residual adds write the stream alone).
        total, codes, scales = ref.residual_add_fwd(values["residual"], values["branch"], G,
                                                    args["sum_q"].dtype)
        assert_values_equal(hp_values(outputs["sum"], "bf16"), ref.bf16_decode(total),
                            "sum vs residual_add_fwd")
        assert_codes_equal(outputs["sum_q"], codes, args["sum_q"].dtype,
                           "sum_q vs residual_add_fwd")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_flow_kernel_matches_reference_library(kernel, case, device):
    if device == "cuda" and kernel.spec.cubin is None and kernel.spec.ptx is None:
        pytest.skip("module has no GPU binary")
    for i, shape in enumerate(SHAPES):
        try:
            check(kernel, device, shape, case, seed=100 * i + CASES.index(case))
        except AssertionError as e:
            raise AssertionError(f"shape {shape[0]}x{shape[1]}: {e}") from None


# Variants of examples/flow/pointwise.mlir whose special-function CPU twins
# are checked too: option string -> the manifest config they must record.
# exact-math=true follows the library's formulas and libm, so its twins must
# match bit for bit; soft-exp2=true evaluates coat-expand-soft-exp2's 2^x
# (what coat-gpu-to-binary puts in place of the SFU's ex2, within 1.36 ulp:
# test/Unit/SoftExp2Test.cpp) and must meet the fast forms' bounds, which
# assume the SFU's 2 ulp; reciprocal-division=true quantizes FP8 results by
# RN(1/s), within 1.5 ulp of the quotient, which the code tolerance covers
# ("division" is recorded by the kernels with FP8 results only).
VARIANTS = {"exact-math=true": {"math": "exact"},
            "soft-exp2=true": {"math": "fast", "ex2": "fma"},
            "reciprocal-division=true": {"math": "fast", "division": "reciprocal"}}


def records(kernel, key, value):
    # Recorded by kernels that derive scales: FP8 results, or a fused SiLU.
    if key == "division" and kernel.spec.op not in FUSED_SILU and not any(
            n + "_scale" in args_of(kernel) for n in kernel.config["results"]):
        return key not in kernel.config
    return kernel.config.get(key) == value


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant_cpu_kernels(request, tmp_path_factory):
    from coat import toolchain
    from coat.compiler import CompileError
    try:
        tc = toolchain.Toolchain()
    except CompileError as e:
        pytest.skip(str(e))
    out = tmp_path_factory.mktemp("pointwise_variant")
    src = Path(_paths.REPO_DIR) / "examples" / "flow" / "pointwise.mlir"
    tc.compile_file(src, out, gpu=False, pointwise_options=request.param)
    kernels = [k for k in coat.load(out).kernels.values()
               if (k.spec.op in SPECIAL_FUNCTIONS or k.spec.op in FUSED_SILU)
               and k.spec.cpu_symbol]
    want = VARIANTS[request.param]
    assert kernels and all(records(k, key, v) for k in kernels for key, v in want.items())
    assert any(all(k.config.get(key) == v for key, v in want.items()) for k in kernels)
    return kernels


@pytest.mark.parametrize("case", CASES)
def test_variant_cpu_twins_match_the_library(variant_cpu_kernels, case):
    for kernel in variant_cpu_kernels:
        for i, shape in enumerate(SHAPES[:4]):
            try:
                check(kernel, "cpu", shape, case, seed=100 * i + CASES.index(case))
            except AssertionError as e:
                raise AssertionError(f"{kernel.name} {shape[0]}x{shape[1]}: {e}") from None


def test_every_flow_op_has_a_kernel():
    """examples/flow covers every pointwise op of COAT's flow, GELU and its
    gradient in both forms."""
    assert {k.spec.op for k in KERNELS} == set(MATH)
    assert {(k.spec.op, k.config.get("approximate", "none")) for k in KERNELS
            if k.spec.op.startswith("gelu")} == {
        (op, form) for op in ("gelu", "gelu_grad") for form in ref.GELU_APPROXIMATIONS}


@pytest.mark.parametrize("op", ["gelu", "gelu_grad"])
def test_the_tanh_form_is_not_the_exact_one(op):
    """The checks tell GELU's forms apart: a tanh-form kernel (CPU twin)
    passes against the library's tanh form and fails against its exact
    (erf) form, which differs by more than the tolerance (the tails below
    x = -3, the derivative near x = -2)."""
    kernel = next((k for k in KERNELS if k.spec.op == op
                   and k.config.get("approximate") == "tanh"), None)
    if kernel is None:
        pytest.skip(f"no compiled tanh-form {op} kernel")
    check(kernel, "cpu", (256, 64), "random", seed=0)
    with pytest.raises(AssertionError, match="off by more than the tolerance"):
        check(kernel, "cpu", (256, 64), "random", seed=0, approximate="none")


@pytest.mark.parametrize("kernel", KERNELS[:1], ids=lambda k: k.name)
def test_launch_rejects_cols_not_a_multiple_of_the_group(kernel):
    G = kernel.spec.group_size
    args = {a.name: empty((a.extent_for(3 * G),), a.dtype, "cpu")
            for a in kernel.spec.memrefs}
    with pytest.raises(ValueError, match="multiple of the group"):
        kernel.launch(**args, rows=G, cols=3)


def test_the_fused_silu_is_requantized(monkeypatch):
    """The SwiGLU check tells the 1xG copy of silu(gate) from silu(gate)
    itself: the fused kernel (CPU twin) fails against the product of the
    unquantized SiLU."""
    kernel = next((k for k in KERNELS if k.spec.op == "swiglu"), None)
    if kernel is None:
        pytest.skip("no compiled swiglu kernel")
    check(kernel, "cpu", (256, 64), "random", seed=0)
    G, args = kernel.spec.group_size, args_of(kernel)

    def unquantized(kernel, launch, shape, device):
        gate = ref.dequantize(codes_of(launch["gate"]).reshape(shape),
                              hp_values(launch["gate_scale"], args["gate_scale"].dtype),
                              "per_group", args["gate"].dtype, group_size=G)
        return ref.silu_fwd(gate)

    monkeypatch.setitem(globals(), "silu_copy", unquantized)
    with pytest.raises(AssertionError):
        check(kernel, "cpu", (256, 64), "random", seed=0)
