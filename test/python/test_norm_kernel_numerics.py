"""The compiled norm kernels of examples/flow/norms.mlir (coat-lower-norms;
CPU twin in CI, GPU kernel where CUDA is available) against the host
reference library, on random and adversarial inputs and odd shapes.

Bounds. The kernels and the library compute the same f32 formulas with
IEEE division and sqrt, but add the row sums in a different order (the
library left to right over H terms; the GPU kernel 16-element group sums,
then a thread's K slots, then a log2(T) butterfly and the warps in order;
the CPU twin group sums left to right). The rounding error of a recursive
sum of nonnegative-weighted terms is at most depth * u * sum(|terms|), with
u = 2^-24 and depth the longest chain of additions, so two orders differ by
at most (depth_kernel + depth_ref) * u * sum(|terms|), with depth_ref = H and
depth_kernel <= G + H/G + log2(1024) + 4. Every tolerance below is that sum
bound pushed through the formula (a relative error e of the sum under the
square root is e/2 in rstd), plus a few u for the remaining operations and
one unit in the last place of a bf16 output (the two values may round to
neighbouring bf16 numbers). Statistics (rstd, mean) are f32 and are checked
at that bound; the fused partial maxima must equal, bit for bit, the maxima
of the values the kernel wrote.
"""


import ml_dtypes
import numpy as np
import pytest

from coat import reference as ref
from kernel_io import (assert_flags, compiled_kernels, flag_buffers, hp_array,  # noqa: E402
                       hp_values)

if not ref.is_available():
    pytest.skip("libcoat_reference.so is not built", allow_module_level=True)

OPS = ("rmsnorm", "layernorm", "rmsnorm_grad", "layernorm_grad")
U = 2.0 ** -24
BF16_ULP = 2.0 ** -7  # a bf16 step relative to the value (8 significant bits)


KERNELS = compiled_kernels(OPS)
pytestmark = pytest.mark.skipif(
    not KERNELS, reason="no compiled norm kernels (ctest's compile-examples makes them)")

try:
    import torch

    HAVE_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    torch, HAVE_CUDA = None, False

DEVICES = ["cpu"] + (["cuda"] if HAVE_CUDA else [])
SHAPES = [(1, 16), (3, 48), (257, 80), (1000, 1040), (7, 16384)]
CASES = ["random", "zeros", "nonfinite", "denormal", "equal", "huge"]
G = 16


# ---- buffers ---------------------------------------------------------------

def garbage(shape, dtype, device):
    """An output buffer full of NaN, so unwritten elements show."""
    return hp_array(np.full(shape, np.nan, np.float32), dtype, device)


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def round_to(x, dtype):
    return ref.bf16_round(x) if dtype == "bf16" else np.asarray(x, np.float32)


# ---- inputs ----------------------------------------------------------------

def launch_backward(kernel, args, rargs, rows, cols, partials):
    """A backward's kernels in launch order: the row kernel, `_columns`
    where the manifest says the column sums are separate (fused and shared
    ones are the row kernel's), `_reduce` where there is a weight. Each
    takes the arguments its ABI names."""
    scalars = dict(rows=rows, cols=cols, partials=partials)
    device = "cuda" if getattr(args["dy"], "is_cuda", False) else "cpu"
    flags = {}  # finite_<result> of the kernels that flag their results

    def call(k, n=None, **given):
        names = {a.name for a in k.spec.args}
        flags.update(flag_buffers(k, device))
        given.update({f: flags[f] for f in flag_buffers(k, device)})
        k.launch(n=n, **{name: v for name, v in given.items() if name in names})
    call(kernel, **args, **scalars)
    if rargs is None:
        return flags
    if kernel.config["column_sums"] == "separate":
        call(kernel.module[kernel.name + "_columns"], **args, **scalars)
    else:
        assert kernel.config["column_sums"] in ("fused", "shared"), kernel.config
    call(kernel.module[kernel.name + "_reduce"], n=cols, **rargs, cols=cols,
         partials=partials)
    return flags


def fp8_input(rng, shape, case):
    """(codes, bf16 group scales, dequantized f32 values)."""
    rows, cols = shape
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(3)
    x += rng.standard_normal((rows, 1)).astype(np.float32)  # a row offset for LayerNorm
    codes, scales = ref.quantize_per_group(x, G, "e4m3", bf16_scale=True)
    codes = np.asarray(codes, np.uint8).reshape(shape).copy()
    scales = np.asarray(scales, np.float32).reshape(rows, cols // G).copy()
    if case == "zeros":
        codes[::2] = 0  # whole zero rows
        codes[:, : cols // 2] = 0
    elif case == "nonfinite":
        codes.reshape(-1)[5::97] = 0x7F  # E4M3 NaN
        scales.reshape(-1)[3::11] = np.inf  # inf * code (NaN for code 0)
    elif case == "denormal":
        scales[...] = ref.bf16_round(np.full(scales.shape, 1e-39, np.float32))
    elif case == "equal":
        codes[...] = codes[:, :1]
        scales[...] = scales[:, :1]
    elif case == "huge":
        scales[...] = ref.bf16_round(np.full(scales.shape, 1e30, np.float32))
    x = ref.fp8_decode(codes, "e4m3") * np.repeat(scales, G, axis=1)
    return codes, scales, x.astype(np.float32)


def column(rng, cols, dtype, around):
    return round_to((around + 0.5 * rng.standard_normal(cols)).astype(np.float32), dtype)


# ---- checks ----------------------------------------------------------------

def depth(cols):
    """Additions in the longest chain of the kernel's and the library's sums."""
    return (G + cols // G + 10 + 4) + cols


def assert_close(got, want, tol, what):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape, what
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), (
        f"{what}: NaN positions differ ({np.isnan(got).sum()} vs {nan.sum()})")
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf]), f"{what}: infinities differ"
    fin = ~nan & ~inf
    err = np.abs(got[fin].astype(np.float64) - want[fin])
    tol = np.broadcast_to(tol, want.shape)[fin]
    # Where the bound itself overflows (sums beyond f32), demand equal values.
    tol = np.where(np.isfinite(tol), tol, 0.0)
    bad = np.flatnonzero(~(err <= tol))
    assert bad.size == 0, (f"{what}: {bad.size} values beyond the bound, first: "
                           f"{got[fin][bad[0]]!r} vs {want[fin][bad[0]]!r} "
                           f"(bound {tol[bad[0]]:.3g})")


def out_ulp(dtype):
    return BF16_ULP if dtype == "bf16" else U


def check_partial_maxima(absmax, y, rows, cols):
    """The fused maxima are those of the values written (NaN skipped)."""
    want = np.fmax.reduce(np.abs(y).reshape(rows, cols // G, G), axis=2,
                          initial=np.float32(0))
    got = np.asarray(absmax, np.float32).reshape(rows, cols // G)
    assert np.array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32)), \
        "partial maxima differ from the maxima of the written values"


def depth_kernel(cols):
    return G + cols // G + 10 + 4


def stat_bounds(x, cols, layer, d, eps):
    """Bounds on the errors of mean and rstd of sums `d` additions deep
    (the kernel's `eps`, f32):
    (exact mean, exact rstd (f64), |mean error|, |rstd error|). The mean's
    error e enters the variance as e^2; drstd = rstd^3/2 * dvar."""
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        mean = x64.mean(axis=1) if layer else np.zeros(x.shape[0])
        m_err = d * U * np.abs(x64).sum(axis=1) / cols + U * np.abs(mean) if layer \
            else np.zeros(x.shape[0])
        var = ((x64 - mean[:, None]) ** 2).mean(axis=1)
        var_err = (d * U + 4 * U) * var + (2 * m_err) ** 2 + 2 * m_err * np.abs(
            x64 - mean[:, None]).mean(axis=1)
        rstd = 1 / np.sqrt(var + np.float64(eps))
        r_err = 0.5 * rstd ** 3 * var_err + 4 * U * rstd
    return mean, rstd, m_err, r_err


def run_forward(kernel, device, shape, case, seed):
    cfg, rows, cols = kernel.config, *shape
    rng = np.random.default_rng(seed)
    codes, scales, x = fp8_input(rng, shape, case)
    rms = cfg["norm"] == "rms"
    wdt = cfg.get("weight")
    w = column(rng, cols, wdt, 1.0) if wdt else None
    b = column(rng, cols, wdt, 0.0) if cfg["bias"] else None
    odt = cfg["output"]
    codes_buf = torch.from_numpy(codes).cuda() if device == "cuda" else codes.copy()
    args = dict(x_codes=codes_buf, x_scale=hp_array(scales, cfg["scale"], device))
    if w is not None:
        args["weight"] = hp_array(w, wdt, device)
    if b is not None:
        args["bias"] = hp_array(b, wdt, device)
    args["y"] = garbage(shape, odt, device)
    if not rms:
        args["mean"] = garbage((rows,), "f32", device)
    args["rstd"] = garbage((rows,), "f32", device)
    if cfg["epilogue_absmax"]:
        args["absmax"] = garbage((rows, cols // G), "f32", device)
    flags = flag_buffers(kernel, device)
    kernel.launch(**args, **flags, rows=rows, cols=cols)
    sync(device)
    y = hp_values(args["y"], odt).reshape(shape)
    assert_flags(flags, {"y": y})
    rstd = hp_values(args["rstd"], "f32")
    eps = np.float32(cfg["eps"])
    if rms:
        want_y, want_rstd = ref.rmsnorm_fwd(x, w, eps)
        mean = want_mean = None
    else:
        want_y, want_mean, want_rstd = ref.layernorm_fwd(x, w, b, eps)
        mean = hp_values(args["mean"], "f32")
    layer = not rms
    # The statistics: within the kernel's own bound of the exact (f64)
    # values, and within both bounds of the library's.
    exact_mean, exact_rstd, m_err_k, r_err_k = stat_bounds(x, cols, layer, depth_kernel(cols),
                                                           eps)
    _, _, m_err, r_err = stat_bounds(x, cols, layer, depth(cols), eps)
    # (Rows whose f32 sums overflow are compared with the library only.)
    with np.errstate(over="ignore", invalid="ignore"):
        sums_fit = np.sum(np.abs(x.astype(np.float64)) ** 2, axis=1) < 1e38
    fin = np.isfinite(exact_rstd) & np.isfinite(r_err_k) & np.isfinite(want_rstd) & sums_fit
    assert_close(rstd[fin], exact_rstd[fin].astype(np.float32), r_err_k[fin], "rstd (exact)")
    assert_close(rstd, want_rstd, r_err, "rstd")
    if layer:
        fin = np.isfinite(exact_mean) & np.isfinite(m_err_k) & sums_fit
        assert_close(mean[fin], exact_mean[fin].astype(np.float32), m_err_k[fin], "mean (exact)")
        assert_close(mean, want_mean, m_err, "mean")
    with np.errstate(over="ignore", invalid="ignore"):
        wy = np.abs(w if w is not None else 1.0)
        r_rel = (r_err / np.abs(want_rstd))[:, None]
        y_tol = np.abs(want_y) * (r_rel + out_ulp(odt) + 6 * U)
        if layer:
            y_tol = y_tol + (m_err * np.abs(want_rstd))[:, None] * wy * (1 + r_rel)
            if b is not None:
                y_tol = y_tol + np.abs(b) * 4 * U
    # Rounding to the output type first (the kernel stores rounded values).
    assert_close(y, round_to(want_y, odt), y_tol, "y")
    if cfg["epilogue_absmax"]:
        check_partial_maxima(hp_values(args["absmax"], "f32"), y, rows, cols)


def run_backward(kernel, device, shape, case, seed):
    cfg, rows, cols = kernel.config, *shape
    rng = np.random.default_rng(seed)
    codes, scales, x = fp8_input(rng, shape, case)
    rms = cfg["norm"] == "rms"
    wdt = cfg.get("weight")
    w = column(rng, cols, wdt, 1.0) if wdt else None
    gdt = cfg["grad"]
    dy = round_to(rng.standard_normal(shape).astype(np.float32), gdt)
    eps = np.float32(cfg["eps"])
    if rms:
        _, rstd = ref.rmsnorm_fwd(x, w, eps)
        mean = None
        want_dx, want_dw = ref.rmsnorm_bwd(x, w, dy, eps)
        want_db = None
    else:
        _, mean, rstd = ref.layernorm_fwd(x, w, None, eps)
        want_dx, want_dw, want_db = ref.layernorm_bwd(x, w, dy, eps)
    partials = min(rows, 5 if device == "cpu" else 264)
    codes_buf = torch.from_numpy(codes).cuda() if device == "cuda" else codes.copy()
    args = dict(x_codes=codes_buf, x_scale=hp_array(scales, cfg["scale"], device))
    if w is not None:
        args["weight"] = hp_array(w, wdt, device)
    if mean is not None:
        args["mean"] = hp_array(mean, "f32", device)
    args["rstd"] = hp_array(rstd, "f32", device)
    args["dy"] = hp_array(dy, gdt, device)
    args["dx"] = garbage(shape, cfg["dx"], device)
    if cfg["epilogue_absmax"]:
        args["absmax"] = garbage((rows, cols // G), "f32", device)
    rargs = None
    if w is not None:
        args["dweight_partial"] = garbage((partials, cols), "f32", device)
        rargs = dict(dweight_partial=args["dweight_partial"],
                     dweight=garbage((cols,), wdt, device))
        if cfg["bias"]:
            args["dbias_partial"] = garbage((partials, cols), "f32", device)
            rargs.update(dbias_partial=args["dbias_partial"],
                         dbias=garbage((cols,), wdt, device))
    flags = launch_backward(kernel, args, rargs, rows, cols, partials)
    sync(device)
    dx = hp_values(args["dx"], cfg["dx"]).reshape(shape)
    stored = {"dx": dx}
    if rargs is not None:
        stored.update({n: hp_values(rargs[n], wdt) for n in ("dweight", "dbias") if n in rargs})
    assert_flags(flags, stored)

    with np.errstate(over="ignore", invalid="ignore"):
        xh = ((x - (0 if mean is None else mean[:, None])) * rstd[:, None]).astype(np.float64)
        wdy = (dy * (1.0 if w is None else w)).astype(np.float64)
        s = depth(cols) * U
        c1 = s * np.sum(np.abs(xh * wdy), axis=1) / cols  # |error of mean(xh*w*dy)|
        c2 = s * np.sum(np.abs(wdy), axis=1) / cols if not rms else 0 * c1
        dot = np.abs(np.sum(xh * wdy, axis=1) / cols)
        dx_tol = (np.abs(want_dx) * (out_ulp(cfg["dx"]) + 4 * U)
                  + rstd[:, None] * (np.abs(xh) * c1[:, None] + c2[:, None]
                                     + 8 * U * (np.abs(wdy) + np.abs(xh) * dot[:, None])))
    assert_close(dx, round_to(want_dx, cfg["dx"]), dx_tol, "dx")
    if cfg["epilogue_absmax"]:
        check_partial_maxima(hp_values(args["absmax"], "f32"), dx, rows, cols)
    if w is None:
        return
    with np.errstate(over="ignore", invalid="ignore"):
        col_tol = (rows + 2 * 8 + partials) * U
        dw_tol = (col_tol * np.sum(np.abs(dy * xh), axis=0)
                  + np.abs(want_dw) * (out_ulp(wdt) + U))
    assert_close(hp_values(rargs["dweight"], wdt), round_to(want_dw, wdt), dw_tol, "dweight")
    if cfg["bias"]:
        db_tol = col_tol * np.sum(np.abs(dy), axis=0) + np.abs(want_db) * (out_ulp(wdt) + U)
        assert_close(hp_values(rargs["dbias"], wdt), round_to(want_db, wdt), db_tol, "dbias")


def fits(kernel, shape):
    return shape[1] <= kernel.config["max_cols"]


def shapes_for(kernel):
    """SHAPES that fit the kernel, then its widest row and one three groups
    narrower (every slot of a thread in use; the last ones masked)."""
    widest = kernel.config["max_cols"]
    shapes = [s for s in SHAPES if fits(kernel, s)]
    for extra in [(5, widest), (3, widest - 3 * G)]:
        if extra[1] > 0 and extra not in shapes:
            shapes.append(extra)
    return shapes


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_norm_kernel_matches_reference_library(kernel, case, device):
    if device == "cuda" and kernel.spec.cubin is None and kernel.spec.ptx is None:
        pytest.skip("module has no GPU binary")
    run = run_backward if kernel.spec.op.endswith("_grad") else run_forward
    for i, shape in enumerate(shapes_for(kernel)):
        try:
            run(kernel, device, shape, case, seed=100 * i + CASES.index(case))
        except AssertionError as e:
            raise AssertionError(f"shape {shape[0]}x{shape[1]}: {e}") from None


def grad_kernels_with_weights():
    return [k for k in KERNELS if k.spec.op.endswith("_grad") and "weight" in k.config]


@pytest.mark.skipif(not HAVE_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("kernel", grad_kernels_with_weights(), ids=lambda k: k.name)
def test_column_sums_are_deterministic_and_match_the_cpu_twin(kernel):
    """Same partials -> bitwise the same dweight on every run and on both
    targets (the same additions in the same order, no atomics)."""
    rows, cols = 1000, min(1040, kernel.config["max_cols"])
    rng = np.random.default_rng(7)
    codes, scales, x = fp8_input(rng, (rows, cols), "random")
    wdt, gdt = kernel.config["weight"], kernel.config["grad"]
    w = column(rng, cols, wdt, 1.0)
    dy = round_to(rng.standard_normal((rows, cols)).astype(np.float32), gdt)
    rms = kernel.config["norm"] == "rms"
    mean = None if rms else ref.layernorm_fwd(x, w, None)[1]
    rstd = ref.rmsnorm_fwd(x, w)[1] if rms else ref.layernorm_fwd(x, w, None)[2]
    partials = 37
    results = []
    for device in ("cpu", "cuda", "cuda"):
        args = dict(x_codes=torch.from_numpy(codes).cuda() if device == "cuda" else codes.copy(),
                    x_scale=hp_array(scales, "bf16", device), weight=hp_array(w, wdt, device),
                    rstd=hp_array(rstd, "f32", device), dy=hp_array(dy, gdt, device),
                    dx=garbage((rows, cols), gdt, device),
                    dweight_partial=garbage((partials, cols), "f32", device))
        if mean is not None:
            args["mean"] = hp_array(mean, "f32", device)
        if kernel.config["bias"]:
            args["dbias_partial"] = garbage((partials, cols), "f32", device)
        if kernel.config["epilogue_absmax"]:
            args["absmax"] = garbage((rows, cols // G), "f32", device)
        dw = garbage((cols,), wdt, device)
        rargs = dict(dweight_partial=args["dweight_partial"], dweight=dw)
        if kernel.config["bias"]:
            rargs.update(dbias_partial=args["dbias_partial"], dbias=garbage((cols,), wdt, device))
        launch_backward(kernel, args, rargs, rows, cols, partials)
        sync(device)
        results.append(hp_values(dw, wdt).view(np.uint32).copy())
    assert np.array_equal(results[1], results[2]), "two GPU runs differ"
    assert np.array_equal(results[0], results[1]), "GPU and CPU twin differ"


def test_default_partials_are_a_wave_of_row_teams_on_the_gpu():
    """Programs size a backward's column-sum workspace as one wave of its
    row kernel's teams on the GPU (CTAs resident at once x teams a CTA),
    256 teams' worth of CTAs on the CPU; never more than the rows."""
    from coat.executor import default_partials

    grads = [k for k in grad_kernels_with_weights() if k.config["column_sums"] != "separate"]
    if not grads:
        pytest.skip("no backward with its column sums in the row kernel compiled")
    for k in grads:
        per_block = k.config["rows_per_block"]
        assert default_partials(k, 10 ** 6) == 256 * per_block
        assert default_partials(k, 5) == 5
    if not HAVE_CUDA:
        return
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for k in grads:
        blocks = k.resident_blocks()
        assert blocks % sms == 0 and 1 <= blocks // sms <= 32, (k.name, blocks, sms)
        # A CTA's threads and dynamic shared memory bound the wave.
        threads = k.config["threads_per_row"] * k.config["rows_per_block"]
        assert blocks // sms <= 2048 // threads, (k.name, blocks)
        assert default_partials(k, 10 ** 6, 0) == blocks * k.config["rows_per_block"]


def test_launch_rejects_rows_wider_than_the_kernel():
    narrow = [k for k in KERNELS if k.spec.op == "rmsnorm" and k.config["max_cols"] < 16384]
    if not narrow:
        pytest.skip("no narrow rmsnorm kernel compiled")
    k = narrow[0]
    rows, cols = 2, k.config["max_cols"] + G
    args = {a.name: np.zeros(a.extent_for(rows * cols, dict(rows=rows, cols=cols)),
                             {"e4m3": np.uint8, "bf16": ml_dtypes.bfloat16,
                              "i32": np.int32}.get(a.dtype, np.float32))
            for a in k.spec.memrefs}
    with pytest.raises(ValueError, match="max_cols"):
        k.launch(**args, rows=rows, cols=cols)
