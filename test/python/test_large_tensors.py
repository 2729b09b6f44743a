"""Numerics at the edges of size (issue #14, item 4): every kernel family on
its smallest tensors, and tensors of more than 2^31 elements.

tiny (CPU twin, and GPU where CUDA is available): each family's own numerics
check, imported from its numerics test module so the bounds are the same,
on one element, one group or one row: AdamW on n = 1 and n = 17 (one partial
group) for four steps; the activation kernels (per-group quantize among
them) on 1x16 and one wide row; the scale kernel on one element; the
pointwise flow kernels on (1, 16); the norms on one row of 16 and of their
widest width. A kernel compiled into several demo modules with the same op,
config and launch shape runs once. scripts/gpu_check.sh --sanitize runs
these under compute-sanitizer (-k tiny). AdamW differs from its numerics
test in one respect: that test asks for >= 99% exact codes and 95% of the
groups' metadata within a tight bound; over 1 or 17 elements a fraction
means "all", which the GPU's log-domain powers do not promise, so here
every code must be within one FP8 step of the library's and the metadata
within the loose bound; the parameters within the same tolerance.

large (GPU only; skipped without CUDA or with less than ~40 GiB free):
tensors of more than 2^31 elements, so that an index or a size held in 32
bits anywhere between the Python binding, the runtime's launch arithmetic
(lib/Runtime/LaunchArgs.cpp) and the kernels' index math shows: per-group
1x16 quantize bf16 -> e4m3 on (2^21 + 1) x 1024, the scale kernel over
2^31 + 17 maxima with the unique maximum at the last element and at element
2^31 + 3, one FP8 AdamW step on 2^31 + 77 f32 parameters, and silu on
(2^21 + 1) x 1024 FP8 codes. Outputs start as garbage that a finite input
never produces (NaN codes, NaN scales; for AdamW, group scales of 0 that
non-zero gradients replace), checked on the GPU over the whole tensor, so
every element must have been written; the first and last 32 rows (the last
one past element 2^31), or AdamW's first and last three groups, are checked
against the reference library run on just those rows or groups (every op
here is local to a row or group). Each takes well under a second on an
H200 after the start, and at most ~24 GiB. Nothing on the way refuses these sizes: the binding and the
runtime take n, rows and cols as 64-bit integers and refuse only grids of
more than 2^31 - 1 blocks, which a launch-check test (no memory needed)
asserts with the runtime's error. Inputs are made on the GPU with torch and
freed after each test. Select these with -k "large and not tiny": the module
name holds "large", so -k large alone selects every test here.
"""

import gc
import json

import numpy as np
import pytest

from coat import reference as ref, runtime

if not ref.is_available():
    pytest.skip("libcoat_reference.so is not built", allow_module_level=True)

# The families' numerics tests: their kernels, inputs and checks.
import test_activation_kernel_numerics as act  # noqa: E402
import test_adamw_kernel_numerics as adamw  # noqa: E402
import test_flow_kernel_numerics as flow  # noqa: E402
import test_norm_kernel_numerics as norms  # noqa: E402
import test_scale_kernel_numerics as scales  # noqa: E402
from kernel_io import (DEVICES, HAVE_CUDA, NAN_MASK, assert_codes_equal,  # noqa: E402
                       assert_values_equal, codes_of, empty, hp_values, shape_for, sync,
                       torch)

GiB = 1 << 30
LARGE_FREE_GIB = 40
# 2^31 + 1024 elements as rows x cols: the last row starts at element 2^31.
ROWS, COLS = 2 ** 21 + 1, 1024
N_SCALES = 2 ** 31 + 17  # a partial last vector of 4 maxima
N_ADAMW = 2 ** 31 + 77  # a partial last group of 77


def distinct(kernels):
    """One kernel per op, config, arguments and launch shape."""
    seen, out = set(), []
    for k in kernels:
        s = k.spec
        key = (s.op, json.dumps(dict(s.config), sort_keys=True, default=str),
               tuple((a.name, a.dtype, a.extent) for a in s.args), s.block,
               s.elements_per_block)
        if key not in seen:
            seen.add(key)
            out.append(k)
    return out


def has_gpu_binary(kernel):
    return kernel.spec.cubin is not None or kernel.spec.ptx is not None


def needs_gpu_binary(kernel, device):
    if device == "cuda" and not has_gpu_binary(kernel):
        pytest.skip("module has no GPU binary")


def ids(k):
    return k.name


# ---- AdamW: the numerics test's bounds, without the fractions ---------------

def check_adamw(kernel, got, want, what):
    """Codes within one FP8 step (NaN codes equal), group metadata within 2%,
    parameters within the numerics test's tolerance."""
    for name in ("m", "v"):
        fmt = kernel.config[name]["format"]
        codes, lib_codes = codes_of(got[f"{name}_codes"]), want[f"{name}_codes"]
        mask = NAN_MASK[fmt]
        nan_l = (lib_codes & mask) == mask
        assert np.array_equal((codes & mask) == mask, nan_l), f"{what} {name}: NaN codes differ"
        d = adamw.code_steps(codes, lib_codes, fmt)[~nan_l]
        assert d.max(initial=0) <= 1, f"{what} {name}: a code is {d.max()} FP8 steps off"
        for key in ("scale", "k", "c"):
            if f"{name}_{key}" not in want:
                continue
            a = np.asarray(got[f"{name}_{key}"], np.float32)
            b = want[f"{name}_{key}"]
            with np.errstate(invalid="ignore", divide="ignore"):
                rel = np.abs(a - b) / np.maximum(np.abs(b), 1e-30)
            rel = np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0.0, rel)
            assert not rel.size or rel.max() <= 2e-2, (
                f"{what}: {name}_{key} off by {rel.max():.3g}")
    p_out, p_lib = np.asarray(got["param"], np.float32), want["param"]
    finite = np.isfinite(p_lib)
    assert np.array_equal(finite, np.isfinite(p_out)), f"{what}: non-finite params differ"
    scale = np.abs(p_lib[finite]).max(initial=0)
    tol = (2 ** -7 if kernel.config["param"] == "bf16" else 1e-6) * scale
    err = np.abs(p_out[finite] - p_lib[finite]).max(initial=0)
    assert err <= tol, f"{what}: params off by {err:.3g} (tolerance {tol:.3g})"


# ---- tiny --------------------------------------------------------------------

TINY_ADAMW = distinct(adamw.KERNELS)
TINY_ACT = distinct(act.KERNELS)
TINY_SCALES = distinct(scales.KERNELS)
TINY_FLOW = distinct(flow.KERNELS)
TINY_NORMS = distinct(norms.KERNELS)
TINY_CASES = ["random", "zeros", "nonfinite"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", ["random", "wide"])
@pytest.mark.parametrize("n", [1, 17])
@pytest.mark.parametrize("kernel", TINY_ADAMW, ids=ids)
def test_tiny_adamw_matches_reference_library(kernel, n, case, device):
    needs_gpu_binary(kernel, device)
    for t, got, want in adamw.run(kernel, device, n, case, steps=4, seed=n):
        check_adamw(kernel, got, want, f"n = {n}, step {t}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", TINY_CASES)
@pytest.mark.parametrize("kernel", TINY_ACT, ids=ids)
def test_tiny_activation_kernel_on_one_row(kernel, case, device):
    """1x16 (widened to one group of G) and one row of 1040 (widened to a
    multiple of G): one lane group, and one partial block."""
    needs_gpu_binary(kernel, device)
    for i, cols in enumerate((16, 1040)):
        shape = shape_for(kernel, 1, cols)
        try:
            act.CHECKS[kernel.spec.op](kernel, device, shape, case,
                                       seed=100 * i + TINY_CASES.index(case))
        except AssertionError as e:
            raise AssertionError(f"shape 1x{shape[1]}: {e}") from None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", scales.CASES)
@pytest.mark.parametrize("kernel", TINY_SCALES, ids=ids)
def test_tiny_scale_kernel_on_one_element(kernel, case, device):
    """Two launches on one workspace, as in the scale kernels' test."""
    needs_gpu_binary(kernel, device)
    scales.test_scale_kernel(kernel, 1, case, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", TINY_CASES)
@pytest.mark.parametrize("kernel", TINY_FLOW, ids=ids)
def test_tiny_flow_kernel_on_one_group(kernel, case, device):
    needs_gpu_binary(kernel, device)
    flow.check(kernel, device, shape_for(kernel, 1, 16), case, seed=TINY_CASES.index(case))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", TINY_CASES)
@pytest.mark.parametrize("kernel", TINY_NORMS, ids=ids)
def test_tiny_norm_kernel_on_one_row(kernel, case, device):
    """One row of 16 and one of the kernel's widest rows (max_cols): a
    block with one row in use, and the partial-sum path with rows = 1."""
    needs_gpu_binary(kernel, device)
    run = norms.run_backward if kernel.spec.op.endswith("_grad") else norms.run_forward
    for i, cols in enumerate(sorted({16, kernel.config["max_cols"]})):
        try:
            run(kernel, device, (1, cols), case, seed=100 * i + TINY_CASES.index(case))
        except AssertionError as e:
            raise AssertionError(f"shape 1x{cols}: {e}") from None


# ---- large -------------------------------------------------------------------

@pytest.fixture
def big():
    """The test's CUDA tensors, by name (the kernel arguments), held only
    here: emptied, and torch's cache released, after the test, also when it
    fails (a failing test's frame outlives it in the traceback). Skips
    without CUDA or ~40 GiB of free GPU memory."""
    if not HAVE_CUDA:
        pytest.skip("needs CUDA (tensors of more than 2^31 elements on the GPU)")
    free, _ = torch.cuda.mem_get_info()
    if free < LARGE_FREE_GIB * GiB:
        pytest.skip(f"needs ~{LARGE_FREE_GIB} GiB of free GPU memory, "
                    f"{free / GiB:.1f} GiB free")
    tensors = {}
    yield tensors
    tensors.clear()
    gc.collect()
    torch.cuda.empty_cache()


def generator(seed):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    return g


def torch_float(dtype):
    return {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]


def first_kernel(kernels, what, pred):
    k = next((k for k in kernels if pred(k) and has_gpu_binary(k)), None)
    if k is None:
        pytest.skip(f"no compiled {what} with a GPU binary")
    return k


def quantize_kernel():
    return first_kernel(
        act.KERNELS, "per-group 1x16 bf16 -> e4m3 quantize kernel",
        lambda k: k.spec.op == "quantize" and k.config.get("scaling") == "per_group"
        and k.spec.group_size == 16 and k.config["input"] == "bf16"
        and k.config["format"] == "e4m3")


def adamw_kernel():
    # mode=fixed with f32 parameters, no gradient scale; expanded moments
    # first (they use every group array).
    ks = sorted(adamw.KERNELS, key=lambda k: not (k.config["m"]["expand"]
                                                  and k.config["v"]["expand"]))
    return first_kernel(ks, "adamw_step kernel with f32 parameters",
                        lambda k: k.config["param"] == "f32" and k.config["mode"] == "fixed"
                        and not k.config["stochastic_moments"]
                        and not k.config.get("grad_scale"))


def silu_kernel():
    def fp8_in_fp8_out(k):
        a = flow.args_of(k)
        return (k.spec.op == "silu" and set(a) >= {"x", "x_scale", "y", "y_scale"}
                and a["x"].dtype in NAN_MASK and a["y"].dtype in NAN_MASK)
    return first_kernel(flow.KERNELS, "silu kernel (FP8 in, FP8 out)", fp8_in_fp8_out)


def scale_kernels():
    """One reduce_scales kernel per input dtype."""
    by_input = {}
    for k in distinct(scales.KERNELS):
        if has_gpu_binary(k):
            by_input.setdefault(k.config["input"], k)
    return list(by_input.values())


# The first rows, and the last ones across element 2^31 (enough elements
# that the flow test's 0.1% allowance of one-step codes is not a handful).
CHECKED_ROWS = [(0, 32), (ROWS - 32, ROWS)]


def assert_all_written(codes, scales_, fmt):
    """Outputs were filled with NaN codes and NaN scales (empty() of a
    float): any left means a part of the tensor the kernel never wrote."""
    assert not bool(torch.isnan(scales_).any()), "scales left unwritten (NaN garbage)"
    mask = NAN_MASK[fmt]
    assert not bool(((codes & mask) == mask).any()), "codes left unwritten (NaN garbage)"


def test_large_quantize_per_group_past_2_31_elements(big):
    """~6.3 GiB (and 4 GiB of temporaries for the coverage check)."""
    kernel = quantize_kernel()
    cfg, G = kernel.config, kernel.spec.group_size
    fmt, sdt = cfg["format"], cfg["scale"]
    big["input"] = torch.randn((ROWS, COLS), generator=generator(14), device="cuda",
                               dtype=torch.bfloat16)
    big["codes"] = torch.full((ROWS, COLS), NAN_MASK[fmt], dtype=torch.uint8, device="cuda")
    big["scale"] = empty((ROWS, COLS // G), sdt, "cuda")
    kernel.launch(**big, rows=ROWS, cols=COLS)
    sync("cuda")
    assert_all_written(big["codes"], big["scale"], fmt)
    for r0, r1 in CHECKED_ROWS:
        what = f"rows {r0}..{r1 - 1} (from element {r0 * COLS})"
        x = hp_values(big["input"][r0:r1], "bf16").reshape(r1 - r0, COLS)
        want_codes, want_scales = ref.quantize_per_group(x, G, fmt, bf16_scale=sdt == "bf16")
        assert_codes_equal(big["codes"][r0:r1], want_codes, fmt, f"{what}: codes")
        assert_values_equal(hp_values(big["scale"][r0:r1], sdt), want_scales,
                            f"{what}: scales")


@pytest.mark.parametrize("kernel", scale_kernels(), ids=ids)
def test_large_scale_kernel_finds_the_maximum_past_2_31(big, kernel):
    """8 GiB of f32 (4 GiB of bf16) maxima in [0, 1) and one larger value:
    at the last element (alone in its vector of 4), then at 2^31 + 3."""
    cfg = kernel.config
    n = N_SCALES
    big["maxima"] = torch.rand(n, generator=generator(17), device="cuda",
                               dtype=torch_float(cfg["input"]))
    big["workspace"] = torch.zeros(2, dtype=torch.int32, device="cuda")
    for pos, peak in ((n - 1, 1000.0), (2 ** 31 + 3, 1536.0)):
        big["maxima"][pos] = peak
        big["scale"] = torch.full((1,), float("nan"), dtype=torch_float(cfg["scale"]),
                                  device="cuda")
        kernel.launch(**big, n=n)
        sync("cuda")
        got = scales.read_scalar(big["scale"], cfg["scale"])
        # The expected scale depends on the maximum alone (exact in bf16).
        want = scales.expected(kernel, np.array([peak], np.float32))
        if cfg["scale"] == "bf16":
            want = ref.bf16_round(np.array([want], np.float32))[0]
        assert np.float32(got).view(np.uint32) == np.float32(want).view(np.uint32), (
            f"maximum {peak} at element {pos}: scale {got!r}, expected {want!r}")
        ws = big["workspace"].cpu().numpy()
        assert not ws.any(), f"maximum at element {pos}: workspace left at {ws}"
        big["maxima"][pos] = 0.5


def test_large_adamw_step_past_2_31_params(big):
    """One step from the initial state on 2^31 + 77 f32 parameters: ~20.4
    GiB (24 GiB while the gradient is made). The first group and the last
    three (the last one partial) against the library on just those groups
    (a group's update depends on that group only)."""
    kernel = adamw_kernel()
    cfg = kernel.config
    G, n = int(cfg["group_size"]), N_ADAMW
    groups = -(-n // G)
    gen = generator(77)
    big["param"] = torch.randn(n, generator=gen, device="cuda")
    # The numerics test's gradients: N(0, 1) * exp(U(-10, 2)).
    big["grad"] = torch.randn(n, generator=gen, device="cuda")
    big["grad"].mul_(torch.empty(n, device="cuda").uniform_(-10, 2, generator=gen).exp_())
    # COAT's initial moments: codes 0, s = 0, k = 1, c = 1.
    for name in ("m", "v"):
        big[f"{name}_codes"] = torch.zeros(n, dtype=torch.uint8, device="cuda")
        big[f"{name}_scale"] = torch.zeros(groups, device="cuda")
        if cfg[name]["expand"]:
            big[f"{name}_k"] = torch.ones(groups, device="cuda")
            big[f"{name}_c"] = torch.ones(groups, device="cuda")
    slices = [(0, G), ((groups - 3) * G, n)]
    before = {s: (big["param"][s[0]:s[1]].cpu().numpy(), big["grad"][s[0]:s[1]].cpu().numpy())
              for s in slices}
    kernel.launch(step=1.0, **adamw.HP, **big)
    sync("cuda")
    # Every group has non-zero gradients, so a positive scale once written.
    for name in ("m", "v"):
        assert bool((big[f"{name}_scale"] > 0).all()), f"{name}: group scales left at 0"
    for a, b in slices:
        p, g = before[(a, b)]
        lib = {name: ref.init_moment(b - a, G, bool(cfg[name]["expand"])) for name in ("m", "v")}
        ref.adamw_step(p, g, lib["m"], lib["v"], step=1, **adamw.HP,
                       m_format=cfg["m"]["format"], v_format=cfg["v"]["format"],
                       group_size=G, expand_min=int(cfg["expand_min"]),
                       max_k=float(cfg["max_k"]), mode=cfg["mode"])
        want = {"param": p}
        got = {"param": big["param"][a:b].cpu().numpy()}
        for name, state in lib.items():
            for key, arr in state.items():
                want[f"{name}_{key}"] = arr
                lo, hi = (a, b) if key == "codes" else (a // G, -(-b // G))
                got[f"{name}_{key}"] = big[f"{name}_{key}"][lo:hi].cpu().numpy()
        check_adamw(kernel, got, want, f"elements {a}..{b - 1}")


def assert_fp8_result_near_library(y, codes, scales_, fmt, sdt, G, what):
    """The flow test's bound for ops with special functions on the GPU:
    scales within one bf16 ulp of the library's; codes those of the
    library's values under the kernel's scales, except at most 0.1% (and 2)
    one FP8 step away; NaN codes where the library's are NaN."""
    _, want_scales = ref.quantize_per_group(y, G, fmt, bf16_scale=sdt == "bf16")
    flow.assert_close(scales_, want_scales, np.zeros(scales_.size), f"{what}: scales")
    s = np.repeat(scales_.reshape(-1), G).reshape(y.shape)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        want = ref.fp8_encode(y / s, fmt)
    got = codes_of(codes).reshape(y.shape)
    mask = NAN_MASK[fmt]
    nan_w = (want & mask) == mask
    assert np.array_equal((got & mask) == mask, nan_w), f"{what}: NaN codes differ"
    step = np.abs(flow.code_order(got, fmt) - flow.code_order(want, fmt))[~nan_w]
    assert step.max(initial=0) <= 1, f"{what}: codes more than one FP8 step away"
    assert np.count_nonzero(step) <= max(2, step.size // 1000), \
        f"{what}: {np.count_nonzero(step)} codes one FP8 step away"


def test_large_silu_past_2_31_elements(big):
    """FP8 codes with 1x16 scales in, FP8 codes with scales out: ~4.5 GiB
    (and 4 GiB of temporaries)."""
    kernel = silu_kernel()
    args, G = flow.args_of(kernel), kernel.spec.group_size
    fmt_x, fmt_y = args["x"].dtype, args["y"].dtype
    sdt_x, sdt_y = args["x_scale"].dtype, args["y_scale"].dtype
    gen = generator(2)
    big["x"] = torch.empty((ROWS, COLS), dtype=torch.uint8, device="cuda").random_(generator=gen)
    mask = NAN_MASK[fmt_x]
    big["x"].masked_fill_((big["x"] & mask) == mask, 0)  # finite codes: finite results
    big["x_scale"] = torch.empty((ROWS, COLS // G), device="cuda").uniform_(
        -8, 2, generator=gen).exp_().to(torch_float(sdt_x))
    big["y"] = torch.full((ROWS, COLS), NAN_MASK[fmt_y], dtype=torch.uint8, device="cuda")
    big["y_scale"] = empty((ROWS, COLS // G), sdt_y, "cuda")
    kernel.launch(**big, rows=ROWS, cols=COLS)
    sync("cuda")
    assert_all_written(big["y"], big["y_scale"], fmt_y)
    for r0, r1 in CHECKED_ROWS:
        what = f"rows {r0}..{r1 - 1} (from element {r0 * COLS})"
        x = ref.dequantize(codes_of(big["x"][r0:r1]),
                           hp_values(big["x_scale"][r0:r1], sdt_x).reshape(r1 - r0, COLS // G),
                           "per_group", fmt_x, group_size=G)
        assert_fp8_result_near_library(ref.silu_fwd(x), big["y"][r0:r1],
                                       hp_values(big["y_scale"][r0:r1], sdt_y),
                                       fmt_y, sdt_y, G, what)


def test_large_sizes_pass_the_runtime_launch_checks():
    """The runtime's checks and launch arithmetic (coat_rt_check_launch:
    lib/Runtime/LaunchArgs.cpp, no memory touched) accept the sizes above,
    and refuse, with a clear error, a size whose grid needs more than
    2^31 - 1 blocks. Needs the runtime library (the CUDA driver), not a GPU
    with free memory."""
    try:
        rt = runtime._RuntimeLib.get()
    except runtime.RuntimeError_ as e:
        pytest.skip(f"libcoat_runtime.so not loadable here: {str(e)[:200]}")

    def check(kernel, n, **scalars):
        scalars.setdefault("n", n)
        values = [float(scalars[a.name]) for a in kernel.spec.scalars]
        ptrs = [16 * (i + 1) for i in range(len(kernel.spec.memrefs))]  # aligned, never read
        rt.check_launch(kernel.module._gpu()[1], kernel.name, n, ptrs, values)

    hp = dict(step=1.0, **adamw.HP)
    launched = [(quantize_kernel(), ROWS * COLS, dict(rows=ROWS, cols=COLS)),
                (silu_kernel(), ROWS * COLS, dict(rows=ROWS, cols=COLS)),
                (adamw_kernel(), N_ADAMW, hp)]
    launched += [(k, N_SCALES, {}) for k in scale_kernels()]
    for kernel, n, scalars in launched:
        check(kernel, n, **scalars)
        # Up to the largest grid the runtime allows: 2^31 - 1 blocks.
        most = (2 ** 31 - 1) * kernel.spec.elements_per_block
        if "cols" in scalars:
            rows = most // COLS
            check(kernel, rows * COLS, rows=rows, cols=COLS)
        else:
            check(kernel, most, **scalars)
    kernel = adamw_kernel()
    too_many = 2 ** 31 * kernel.spec.elements_per_block
    with pytest.raises(runtime.RuntimeError_, match="more than gridDim.x allows"):
        check(kernel, too_many, **hp)
