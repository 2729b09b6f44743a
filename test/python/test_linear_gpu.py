"""coat-lower-linear's FP8 GEMMs on the GPU: every kind (forward, dgrad,
wgrad), E4M3/E5M2 operand pairs, bf16/f32 outputs, bias, the 1x16
quantized output, and the DeepSeek-style block-scaled kernels (1x128 x
128x128 f32 scales, COAT.md §4.4), checked against an fp32 reference that
decodes the FP8 operands and against torch._scaled_mm (cuBLASLt), on
tile-multiple, ragged and adversarial (zero, max-magnitude) inputs.

Kernels come from $COAT_LINEAR_KERNELS (folders holding a manifest.json, ':'
separated; every linear kernel in them is tested, so several lowering
configurations can be checked at once) or are compiled from
examples/linear/fp8_linear.mlir with coat-opt. Skips, with the reason,
without CUDA, a Hopper GPU, the runtime or kernels."""

import os
import tempfile

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import coat  # noqa: E402
from coat import _paths  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = os.path.join(REPO, "examples", "linear", "fp8_linear.mlir")
FP8 = {"e4m3": getattr(torch, "float8_e4m3fn", None), "e5m2": getattr(torch, "float8_e5m2", None)}
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
SCALE_EPS = 1e-10  # COAT.md §1.2, activations


def linear_kernel_dirs():
    env = os.environ.get("COAT_LINEAR_KERNELS")
    if env:
        return [d for d in env.split(":") if d]
    if not _paths.find_coat_opt():
        return []
    from coat.toolchain import Toolchain

    out = tempfile.mkdtemp(prefix="coat-linear-")
    Toolchain().compile_file(SPEC, out, cpu=False)
    return [out]


def skip_reason():
    if not torch.cuda.is_available():
        return "CUDA is not available"
    if torch.cuda.get_device_capability() < (9, 0):
        return "needs a Hopper GPU (sm_90a wgmma)"
    if FP8["e4m3"] is None or FP8["e5m2"] is None:
        return "torch has no float8 dtypes"
    return None


REASON = skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


@pytest.fixture(scope="module")
def kernels():
    dirs = linear_kernel_dirs()
    if not dirs:
        pytest.skip("no FP8 GEMM kernels: set COAT_LINEAR_KERNELS or build coat-opt")
    out = []
    for d in dirs:
        mod = coat.load(d)
        out += [mod[k.name] for k in mod.manifest.kernels if k.op == "linear"]
    if not out:
        pytest.skip(f"no op=linear kernel in {dirs}")
    return out


def pick(kernels, **want):
    """The kernels whose manifest config matches `want` (skips if none);
    per-tensor ones without an addend or a rope in the epilogue unless
    `scaling`, `addend` or `rope_head_dim` says otherwise."""
    want.setdefault("scaling", "per_tensor")
    want.setdefault("addend", None)
    want.setdefault("rope_head_dim", None)
    got = [k for k in kernels if all(k.spec.config.get(key) == v for key, v in want.items())]
    if not got:
        pytest.skip(f"no linear kernel with {want}")
    return got


def tag(kern):
    c = kern.spec.config
    return (f"{kern.spec.name}[{c['tile'][0]}x{c['tile'][1]} s{c['stages']} "
            f"wg{c['warpgroups']}{' ws' if c.get('warp_specialized') else ''}]")


def quantize(x, fmt="e4m3"):
    """Per-tensor FP8 as COAT does it: s = (max|x| + 1e-10) / fp8max."""
    s = (x.abs().max().float() + SCALE_EPS) / FP8_MAX[fmt]
    # bf16-exact, so kernels that read bf16 scales (those of model programs)
    # see the same scale as those reading f32.
    s = s.bfloat16().float()
    return (x / s).clamp(-FP8_MAX[fmt], FP8_MAX[fmt]).to(FP8[fmt]), s.reshape(1).float()


def as_dtype(kern, name):
    return next((a.dtype for a in kern.spec.args if a.name == name), None)


def as_scale_arg(kern, name, s):
    """`s` in the dtype the kernel's scale argument has (exactly)."""
    dtype = as_dtype(kern, name)
    t = s.bfloat16() if dtype == "bf16" else s.float()
    assert torch.equal(t.float(), s.float()), f"{name} {s} is not exact in {dtype}"
    return t


def reference(a8, b8, sa, sb, bias=None):
    """Decoded FP8 operands, fp32 accumulation, scales once after K."""
    ref = (a8.float() @ b8.float().t()) * (sa * sb)
    return ref if bias is None else ref + bias.float()


def launch_out(kern, out, **args):
    """kern.launch(out=out, ...). A TMA-stored `out` (coat-lower-linear
    {epilogue=tma}) is a tensormap, whose rows must be 16-byte aligned: for
    other N the runtime must refuse the launch with that reason, and the
    case is skipped once that is checked."""
    tma = any(a.name == "out" and a.kind == "tensormap" for a in kern.spec.args)
    # A GEMM whose result a program returns flags NaN/Inf it stores.
    flag = None
    if any(a.name == "finite_out" for a in kern.spec.args):
        flag = args["finite_out"] = torch.zeros(4, dtype=torch.int32, device=out.device)[:1]
    if tma and out.shape[-1] * out.element_size() % 16:
        with pytest.raises(Exception, match=r"not a multiple of 16 \(TMA\)"):
            kern.launch(out=out, **args)
        pytest.skip(f"{tag(kern)}: a TMA-stored out refuses N = {out.shape[-1]} (checked)")
    kern.launch(out=out, **args)
    if flag is not None:
        torch.cuda.synchronize()
        assert bool(flag.item()) == (not torch.isfinite(out).all().item()), \
            f"{tag(kern)}: finiteness flag {flag.item()}"


def launch(kern, a8, b8, sa, sb, bias=None, out=None):
    m, k = a8.shape
    n = b8.shape[0]
    c = kern.spec.config
    args = dict(n=n, a=a8, b=b8, a_scale=as_scale_arg(kern, "a_scale", sa),
                b_scale=as_scale_arg(kern, "b_scale", sb), m=m, k=k)
    if bias is not None:
        args["bias"] = bias
    if c["out"] in FP8:
        codes = torch.full((m, n), float("nan"), device=a8.device).to(FP8[c["out"]])
        scales = torch.full((m, -(-n // 16)), float("nan"), dtype=torch.bfloat16,
                            device=a8.device)
        kern.launch(out=codes, out_scale=scales, **args)
        torch.cuda.synchronize()
        return codes, scales
    if out is None:
        dtype = torch.float32 if c["out"] == "f32" else torch.bfloat16
        out = torch.full((m, n), float("nan"), dtype=dtype, device=a8.device)
    launch_out(kern, out, **args)
    torch.cuda.synchronize()
    return out


def check_close(kern, y, ref, what):
    """bf16/f32 output rounding plus Hopper's FP8 tensor-core accumulation,
    which keeps fewer than fp32's bits (no periodic promotion, as in COAT's
    Triton GEMM): per element 1% of the element plus 0.5% of the largest
    output, 0.5% in norm. Every element must be written (outputs start NaN)."""
    assert not torch.isnan(y).any(), f"{tag(kern)} {what}: unwritten (NaN) outputs"
    err = (y.float() - ref).abs()
    tol = 5e-3 * ref.abs().max().item() + 1e-6
    bad = err > ref.abs() * 1e-2 + tol
    rel = ((y.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    assert rel <= 5e-3 or ref.norm() == 0, f"{tag(kern)} {what}: relative error {rel:.3g}"
    assert not bad.any(), (
        f"{tag(kern)} {what}: {int(bad.sum())} of {y.numel()} elements off, "
        f"max err {err.max().item():.4g} (ref max {ref.abs().max().item():.4g})")


SHAPES = [
    (128, 256, 128),     # one tile
    (256, 512, 1024),    # tile multiples, several K steps (pipeline wraps)
    (512, 768, 2048),
    (300, 200, 256),     # M, N not tile multiples
    (257, 333, 4112),    # odd N (scalar stores), K tail (TMA zero fill)
    (1, 1, 16),          # smallest
    (1000, 1000, 528),
    (2048, 2304, 1024),  # more tiles than multiprocessors: persistent loop
]

# (kind, a format, b format, output) of the kernels in examples/linear.
VARIANTS = [
    ("forward", "e4m3", "e4m3", "bf16"),
    ("dgrad", "e5m2", "e4m3", "bf16"),
    ("wgrad", "e5m2", "e4m3", "f32"),
]


@pytest.mark.parametrize("kind,fa,fb,out", VARIANTS)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_matches_decoded_fp32_reference(kernels, kind, fa, fb, out, m, n, k):
    torch.manual_seed(m * 7 + n * 3 + k)
    a8, sa = quantize(torch.randn(m, k, device="cuda") * 3.0, fa)
    b8, sb = quantize(torch.randn(n, k, device="cuda") * 0.05, fb)
    ref = reference(a8, b8, sa, sb)
    for kern in pick(kernels, kind=kind, a=fa, b=fb, out=out, bias=False):
        check_close(kern, launch(kern, a8, b8, sa, sb), ref, f"{kind} {m}x{n}x{k}")


@pytest.mark.parametrize("kind,fa,fb,out", VARIANTS)
@pytest.mark.parametrize("m,n,k", [s for s in SHAPES if s[1] % 16 == 0 and s[2] % 16 == 0])
def test_matches_torch_scaled_mm(kernels, kind, fa, fb, out, m, n, k):
    torch.manual_seed(1 + m + n + k)
    a8, sa = quantize(torch.randn(m, k, device="cuda"), fa)
    b8, sb = quantize(torch.randn(n, k, device="cuda"), fb)
    dtype = torch.float32 if out == "f32" else torch.bfloat16
    try:
        want = torch._scaled_mm(a8, b8.t(), scale_a=sa.reshape(()), scale_b=sb.reshape(()),
                                out_dtype=dtype)
    except RuntimeError as e:  # cuBLASLt shape and format limits
        pytest.skip(f"torch._scaled_mm rejects {fa}x{fb} {m}x{n}x{k}: {e}")
    for kern in pick(kernels, kind=kind, a=fa, b=fb, out=out, bias=False):
        y = launch(kern, a8, b8, sa, sb)
        torch.testing.assert_close(y.float(), want.float(), rtol=1.6e-2,
                                   atol=1e-2 * want.float().abs().max().item())


def bias_arg(kern, bias):
    """`bias` in the dtype of the kernel's bias argument (a model's is bf16)."""
    return bias.bfloat16() if as_dtype(kern, "bias") == "bf16" else bias.float()


@pytest.mark.parametrize("m,n,k", [(128, 256, 128), (300, 200, 256), (257, 333, 4112)])
def test_bias_added_in_f32(kernels, m, n, k):
    torch.manual_seed(11 + m)
    a8, sa = quantize(torch.randn(m, k, device="cuda"))
    b8, sb = quantize(torch.randn(n, k, device="cuda"))
    bias = torch.randn(n, device="cuda") * 4.0
    for kern in pick(kernels, kind="forward", bias=True, out="bf16"):
        b = bias_arg(kern, bias)
        check_close(kern, launch(kern, a8, b8, sa, sb, bias=b),
                    reference(a8, b8, sa, sb, b), f"bias {m}x{n}x{k}")


@pytest.mark.parametrize("m,n,k", [(128, 256, 256), (300, 208, 512), (257, 336, 4112),
                                   (1, 16, 16)])
def test_bias_epilogue_bit_exact_on_exact_sums(kernels, m, n, k):
    """Small-integer operands make the accumulator exact in any order, so
    with a bias (zeros, infinities, NaN and a sum that overflows among
    random values) the outputs must be the reference library's bit for bit:
    acc * (s_A * s_B) + bias in f32 (coat_ref_linear_bias_epilogue), rounded
    to bf16, or quantized 1x16 (bias before the group maxima)."""
    from coat import reference as cref

    if not cref.is_available():
        pytest.skip("libcoat_reference.so is not built (COAT_REFERENCE_LIB)")
    torch.manual_seed(17 + m + n)
    a8 = torch.randint(-3, 4, (m, k), device="cuda").float().to(FP8["e4m3"])
    b8 = torch.randint(-2, 3, (n, k), device="cuda").float().to(FP8["e4m3"])
    acc = (a8.float() @ b8.float().t()).cpu().numpy()
    sa = torch.tensor([0.375], device="cuda")
    sb = torch.tensor([1.875], device="cuda")
    bias = torch.randn(n) * 8
    bias[::7] = 0
    bias[1::11] = float("inf")
    bias[2::13] = -float("inf")
    bias[3::17] = float("nan")
    bias[4::19] = 3e38
    for kern in pick(kernels, kind="forward", bias=True):
        c = kern.spec.config
        if c["out"] not in ("bf16", "e4m3"):
            continue
        b = bias_arg(kern, bias)
        want = cref.linear_bias_epilogue(acc, 0.375 * 1.875, b.float().numpy())
        got = launch(kern, a8, b8, sa, sb, bias=b.cuda())
        what = f"{tag(kern)} {m}x{n}x{k}"
        if c["out"] == "bf16":
            want = torch.from_numpy(want).bfloat16().float()
            got = got.float().cpu()
            same = (got == want) | (got.isnan() & want.isnan())
            assert same.all(), f"{what}: {int((~same).sum())} outputs differ"
            continue
        codes, scales = got
        q, s = cref.quantize_per_group(want, 16, "e4m3", bf16_scale=True)
        assert torch.equal(scales.float().cpu(), torch.from_numpy(s).float()), \
            f"{what}: group scales differ"
        got_codes = codes.cpu().view(torch.uint8).numpy().reshape(-1)
        nan = (q.reshape(-1) & 0x7F) == 0x7F
        assert ((got_codes & 0x7F) == 0x7F).tolist() == nan.tolist(), f"{what}: NaN codes differ"
        assert (got_codes[~nan] == q.reshape(-1)[~nan]).all(), f"{what}: codes differ"


@pytest.mark.parametrize("m,n,k", [(128, 256, 256), (300, 256, 512), (257, 256, 4112),
                                   (1, 256, 16), (300, 200, 256), (257, 333, 4112)])
def test_addend_summed_before_the_one_rounding(kernels, m, n, k):
    """A dgrad with an addend (coat-fuse-linear-sum). Small-integer operands
    make the accumulator exact in any order, so the output must be
    bf16(acc * (s_A * s_B) + addend), the sum in f32 and one rounding, bit
    for bit, with zeros, infinities, NaN and an overflowing sum in the
    addend; nothing past M x N is written, and the addend is not changed."""
    torch.manual_seed(23 + m + n)
    a8 = torch.randint(-3, 4, (m, k), device="cuda").float().to(FP8["e5m2"])
    b8 = torch.randint(-2, 3, (n, k), device="cuda").float().to(FP8["e4m3"])
    acc = a8.float().cpu() @ b8.float().cpu().t()
    sa = torch.tensor([0.375], device="cuda")
    sb = torch.tensor([1.875], device="cuda")
    addend = (torch.randn(m, n) * 64).bfloat16()
    flat = addend.view(-1)
    flat[::7] = 0
    flat[1::11] = float("inf")
    flat[2::13] = -float("inf")
    flat[3::17] = float("nan")
    flat[4::19] = 3.3e38
    # Host f32: the product, then the sum, each rounded once (IEEE).
    want = (acc * torch.tensor(0.375 * 1.875)).float() + addend.float()
    want = want.bfloat16().float()
    ran = False
    for kern in pick(kernels, kind="dgrad", addend=True, out="bf16"):
        static_n = kern.spec.name.endswith("_n256")
        if static_n and n != 256:
            continue
        ran = True
        c = addend.cuda()
        big = torch.full((m * n + 4096,), 7.0, dtype=torch.bfloat16, device="cuda")
        out = big[: m * n].view(m, n)
        a = dict(n=n, a=a8, b=b8, a_scale=as_scale_arg(kern, "a_scale", sa),
                 b_scale=as_scale_arg(kern, "b_scale", sb), m=m, k=k, addend=c)
        launch_out(kern, out, **a)
        torch.cuda.synchronize()
        got = out.float().cpu()
        same = (got == want) | (got.isnan() & want.isnan())
        what = f"{tag(kern)} {m}x{n}x{k}"
        assert same.all(), f"{what}: {int((~same).sum())} outputs differ"
        assert (big[m * n:] == 7.0).all(), f"{what}: wrote past the output"
        assert torch.equal(c.cpu().view(torch.int16), addend.view(torch.int16)), \
            f"{what}: the addend changed"
    if not ran:
        pytest.skip(f"no addend kernel takes N = {n}")


@pytest.mark.parametrize("m,n,k", [(256, 256, 1024), (1000, 333, 528)])
def test_addend_sums_two_gemms(kernels, m, n, k):
    """What the fused sum replaces: the first dgrad's bf16 result as the
    addend of the second gives the sum of both products within the GEMM
    tolerance."""
    torch.manual_seed(29 + m)
    a1, s1 = quantize(torch.randn(m, k, device="cuda"), "e5m2")
    a2, s2 = quantize(torch.randn(m, k, device="cuda"), "e5m2")
    w1, t1 = quantize(torch.randn(n, k, device="cuda"))
    w2, t2 = quantize(torch.randn(n, k, device="cuda"))
    plain = [kk for kk in pick(kernels, kind="dgrad", out="bf16")
             if not kk.spec.config.get("addend") and kk.spec.config["a"] == "e5m2"]
    if not plain:
        pytest.skip("no plain dgrad kernel")
    y1 = launch(plain[0], a1, w1, s1, t1)
    ref = reference(a1, w1, s1, t1) + reference(a2, w2, s2, t2)
    for kern in pick(kernels, kind="dgrad", addend=True, out="bf16"):
        if kern.spec.name.endswith("_n256") and n != 256:
            continue
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        launch_out(kern, out, n=n, a=a2, b=w2, a_scale=as_scale_arg(kern, "a_scale", s2),
                   b_scale=as_scale_arg(kern, "b_scale", t2), m=m, k=k, addend=y1)
        torch.cuda.synchronize()
        check_close(kern, out, ref, f"sum {m}x{n}x{k}")


@pytest.mark.parametrize("kind,fa,fb,out", VARIANTS)
def test_adversarial_inputs(kernels, kind, fa, fb, out):
    """Zeros, all max-magnitude codes, and one huge row among tiny ones."""
    m, n, k = 193, 272, 400
    maxv = FP8_MAX[fa], FP8_MAX[fb]
    cases = {
        "zeros": (torch.zeros(m, k, device="cuda"), torch.zeros(n, k, device="cuda")),
        "max-magnitude": (torch.full((m, k), maxv[0], device="cuda"),
                          -torch.full((n, k), maxv[1], device="cuda")),
    }
    spread = torch.randn(m, k, device="cuda") * 1e-3
    spread[5] = maxv[0] * torch.sign(torch.randn(k, device="cuda"))
    cases["outlier-row"] = (spread, torch.randn(n, k, device="cuda"))
    for name, (a, b) in cases.items():
        a8 = a.clamp(-maxv[0], maxv[0]).to(FP8[fa])
        b8 = b.clamp(-maxv[1], maxv[1]).to(FP8[fb])
        sa = torch.tensor([2.0 ** -10], device="cuda")
        sb = torch.tensor([2.0 ** -9], device="cuda")
        ref = reference(a8, b8, sa, sb)
        for kern in pick(kernels, kind=kind, a=fa, b=fb, out=out, bias=False):
            y = launch(kern, a8, b8, sa, sb)
            if name == "zeros":
                assert (y.float() == 0).all(), f"{tag(kern)}: zeros in, nonzero out"
            else:
                check_close(kern, y, ref, name)


def test_outputs_untouched_outside(kernels):
    """Elements past M x N are never written (ragged edge tiles)."""
    m, n, k = 130, 258, 256
    a8, sa = quantize(torch.randn(m, k, device="cuda"))
    b8, sb = quantize(torch.randn(n, k, device="cuda"))
    for kern in pick(kernels, kind="forward", out="bf16", bias=False):
        big = torch.full((m * n + 4096,), 7.0, dtype=torch.bfloat16, device="cuda")
        launch(kern, a8, b8, sa, sb, out=big[: m * n].view(m, n))
        assert (big[m * n:] == 7.0).all(), f"{tag(kern)} wrote past the output"


# --- 1x16 quantized output (COAT.md §4.1) ---

def round_to_e4m3(x):
    """Round-to-nearest-even onto the E4M3 grid, saturating at 448, as PTX
    cvt.rn.satfinite does. (torch's float8_e4m3fn cast is not a reference
    here: on the H200 it rounded exact ties such as 304 -> 288, where RNE
    gives 320.) The E4M3 step is 2^(e-3) for binade e >= -6."""
    _, exp = torch.frexp(x.abs().clamp_min(2.0 ** -6))
    step = torch.ldexp(torch.ones_like(x), (exp - 1 - 3).to(torch.int32))
    return (torch.round(x / step) * step).clamp(-448.0, 448.0)


def quantize_groups_reference(acc):
    """COAT's GEMM epilogue on an f32 result (E4M3 output): per 1x16 group
    of a row, s = (max|acc| + 1e-10) / 448 in f32, code values =
    RNE-satfinite(acc / s), stored scale bf16(s). Columns past N count as 0
    in the maximum. Returns (code values, bf16 scales, f32 scales)."""
    # On the host: the CPU's f32 division is IEEE, like the kernel's.
    device, acc = acc.device, acc.cpu()
    m, n = acc.shape
    groups = -(-n // 16)
    padded = torch.zeros(m, groups * 16)
    padded[:, :n] = acc
    g = padded.view(m, groups, 16)
    s = (g.abs().amax(dim=2) + SCALE_EPS) / FP8_MAX["e4m3"]
    q = round_to_e4m3(g / s[:, :, None])
    return (q.view(m, groups * 16)[:, :n].to(device), s.to(torch.bfloat16).to(device),
            s.to(device))


@pytest.mark.parametrize("m,n,k", [(128, 256, 256), (300, 208, 512), (257, 200, 4112),
                                   (1, 16, 16), (1024, 1536, 1024)])
def test_quantized_output_bit_exact_on_exact_sums(kernels, m, n, k):
    """Small-integer operands make every partial sum exact in any accumulator,
    so scales must equal the reference bit for bit and codes value for value."""
    torch.manual_seed(3 + m + n)
    a8 = torch.randint(-3, 4, (m, k), device="cuda").float().to(FP8["e4m3"])
    b8 = torch.randint(-2, 3, (n, k), device="cuda").float().to(FP8["e4m3"])
    one = torch.ones(1, device="cuda")
    acc = a8.float() @ b8.float().t()
    q_ref, s_ref, _ = quantize_groups_reference(acc)
    for kern in pick(kernels, kind="forward", out="e4m3", bias=False):
        codes, scales = launch(kern, a8, b8, one, one)
        assert torch.equal(scales, s_ref), (
            f"{tag(kern)} {m}x{n}x{k}: {int((scales != s_ref).sum())} group scales differ")
        # Compared as values: an exact cancellation may give -0 on one side.
        diff = codes.float() != q_ref
        pairs = list(zip(q_ref[diff][:4].tolist(), codes.float()[diff][:4].tolist(),
                         acc[diff][:4].tolist()))
        assert not diff.any(), (f"{tag(kern)} {m}x{n}x{k}: {int(diff.sum())} codes differ "
                                f"(want, got, acc): {pairs}")


@pytest.mark.parametrize("m,n,k", [(256, 512, 1024), (300, 200, 256), (2048, 2304, 1024)])
def test_quantized_output_dequantizes_to_reference(kernels, m, n, k):
    """Random inputs: scales within the accumulation error of the reference,
    dequantized values within half an FP8 step of the group maximum."""
    torch.manual_seed(5 + m + n + k)
    a8, sa = quantize(torch.randn(m, k, device="cuda") * 2.0)
    b8, sb = quantize(torch.randn(n, k, device="cuda") * 0.1)
    ref = reference(a8, b8, sa, sb)
    _, _, s32 = quantize_groups_reference(ref)
    for kern in pick(kernels, kind="forward", out="e4m3", bias=False):
        codes, scales = launch(kern, a8, b8, sa, sb)
        assert not torch.isnan(scales.float()).any(), f"{tag(kern)}: unwritten scales"
        assert not torch.isnan(codes.float()).any(), f"{tag(kern)}: unwritten or NaN codes"
        torch.testing.assert_close(scales.float(), s32, rtol=1.5e-2, atol=1e-12)
        groups = scales.shape[1]
        deq = codes.float().view(m, -1)
        expanded = scales.float().repeat_interleave(16, dim=1)[:, :n]
        deq = deq * expanded
        step = expanded * 448.0 * 2.0 ** -4  # half an E4M3 step at the group maximum
        err = (deq - ref).abs()
        bad = err > step + 1e-2 * ref.abs()
        assert not bad.any(), (f"{tag(kern)} {m}x{n}x{k}: {int(bad.sum())} of {deq.numel()} "
                               f"dequantized values off (groups per row {groups})")


def test_quantized_output_zeros_and_saturation(kernels):
    """All-zero rows give scale bf16(1e-10/448) and zero codes; a single
    huge element per group lands on the largest finite code."""
    m, n, k = 64, 64, 32
    a = torch.zeros(m, k, device="cuda")
    a[: m // 2] = 448.0
    a8 = a.to(FP8["e4m3"])
    b8 = torch.full((n, k), 448.0, device="cuda").to(FP8["e4m3"])
    one = torch.ones(1, device="cuda")
    acc = a8.float() @ b8.float().t()
    q_ref, s_ref, _ = quantize_groups_reference(acc)
    for kern in pick(kernels, kind="forward", out="e4m3", bias=False):
        codes, scales = launch(kern, a8, b8, one, one)
        assert torch.equal(scales, s_ref), f"{tag(kern)}: scales differ"
        assert torch.equal(codes.float(), q_ref), f"{tag(kern)}: codes differ"
        assert (codes[: m // 2].float() == 448.0).all()
        assert (codes[m // 2:].float() == 0.0).all()


def test_scaled_mm_api_matches_torch(kernels):
    """coat.linear.scaled_mm takes torch._scaled_mm's arguments (b column-major)
    and picks the compiled kernel by formats, output dtype and bias."""
    from coat.linear import scaled_mm

    mods = {id(k.module): k.module for k in kernels}
    mod = next(m for m in mods.values()
               if any(k.spec.config.get("out") == "bf16" and not k.spec.config.get("bias")
                      and k.spec.config.get("a") == "e4m3"
                      and as_dtype(k, "a_scale") == "f32" for k in m.kernels.values()))
    torch.manual_seed(0)
    m, n, k = 300, 528, 256
    a8, sa = quantize(torch.randn(m, k, device="cuda"))
    w8, sb = quantize(torch.randn(n, k, device="cuda"))
    y = scaled_mm(a8, w8.t(), sa, sb, out_dtype=torch.bfloat16, module=mod)
    want = torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    assert y.shape == (m, n) and y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), want.float(), rtol=2e-2, atol=2e-2)
    with pytest.raises(ValueError, match="column-major"):
        scaled_mm(a8, w8.t().contiguous(), sa, sb, module=mod)
    with pytest.raises(ValueError, match="inner dimensions"):
        scaled_mm(a8, w8[:, :128].t(), sa, sb, module=mod)
    with pytest.raises(ValueError, match="no compiled GEMM"):
        scaled_mm(a8.view(torch.float8_e5m2), w8.t().view(torch.float8_e5m2), sa, sb,
                  module=mod)


# --- DeepSeek-style block scaling (COAT.md §4.4) ---

BLOCK = 128


def quantize_rows_1x128(x, fmt="e4m3"):
    """1x128 groups along K (the last group may be partial): s = (max|x| +
    1e-10) / fp8max per group, f32. Returns codes [M, K] and s [M, ceil(K/128)]."""
    m, k = x.shape
    kb = -(-k // BLOCK)
    pad = torch.zeros(m, kb * BLOCK, device=x.device)
    pad[:, :k] = x
    g = pad.view(m, kb, BLOCK)
    s = (g.abs().amax(dim=2) + SCALE_EPS) / FP8_MAX[fmt]
    q = (g / s[:, :, None]).clamp(-FP8_MAX[fmt], FP8_MAX[fmt]).view(m, kb * BLOCK)[:, :k]
    return q.contiguous().to(FP8[fmt]), s.contiguous()


def quantize_blocks_128x128(x, fmt="e4m3"):
    """128x128 blocks (edge blocks partial). Returns codes [N, K] and s
    [ceil(N/128), ceil(K/128)], f32."""
    n, k = x.shape
    nb, kb = -(-n // BLOCK), -(-k // BLOCK)
    pad = torch.zeros(nb * BLOCK, kb * BLOCK, device=x.device)
    pad[:n, :k] = x
    g = pad.view(nb, BLOCK, kb, BLOCK)
    s = (g.abs().amax(dim=(1, 3)) + SCALE_EPS) / FP8_MAX[fmt]
    q = (g / s[:, None, :, None]).clamp(-FP8_MAX[fmt], FP8_MAX[fmt])
    return q.view(nb * BLOCK, kb * BLOCK)[:n, :k].contiguous().to(FP8[fmt]), s.contiguous()


def block_reference(a8, b8, sa, sb, bias=None):
    """The formula itself: Y[i, j] = sum_kb sa[i, kb] * sb[j // 128, kb] *
    sum_{k in kb} A[i, k] * B[j, k], with decoded operands, in float64."""
    m, k = a8.shape
    n = b8.shape[0]
    a, b = a8.float().double(), b8.float().double()
    sbn = sb.double().repeat_interleave(BLOCK, dim=0)[:n]  # [n, kb]
    y = torch.zeros(m, n, dtype=torch.float64, device=a8.device)
    for kb in range(-(-k // BLOCK)):
        sl = slice(kb * BLOCK, min(k, (kb + 1) * BLOCK))
        part = a[:, sl] @ b[:, sl].t()
        y += part * sa.double()[:, kb, None] * sbn[None, :, kb]
    if bias is not None:
        y += bias.double()
    return y.float()


def launch_block(kern, a8, b8, sa, sb, bias=None, out=None):
    m, k = a8.shape
    n = b8.shape[0]
    args = dict(n=n, a=a8, b=b8, a_scale=sa, b_scale=sb, m=m, k=k,
                n_blocks=-(-n // BLOCK), k_blocks=-(-k // BLOCK))
    if bias is not None:
        args["bias"] = bias
    if out is None:
        dtype = torch.float32 if kern.spec.config["out"] == "f32" else torch.bfloat16
        out = torch.full((m, n), float("nan"), dtype=dtype, device=a8.device)
    launch_out(kern, out, **args)
    torch.cuda.synchronize()
    return out


BLOCK_SHAPES = SHAPES + [
    (129, 130, 144),     # two K slices, the second 16 wide; N spans 2 weight blocks
    (64, 384, 8192),     # long K: 64 promotions per tile
]
BLOCK_VARIANTS = [("forward", "bf16"), ("dgrad", "bf16"), ("wgrad", "f32")]


@pytest.mark.parametrize("kind,out", BLOCK_VARIANTS)
@pytest.mark.parametrize("m,n,k", BLOCK_SHAPES)
def test_block_scaled_matches_formula(kernels, kind, out, m, n, k):
    """Random operands with scales spread over 2^-8..2^8 per block, so a
    kernel applying one scale per tile or per tensor fails. Tolerance as for
    the per-tensor kinds (check_close)."""
    torch.manual_seed(17 + m * 5 + n + k)
    a8, sa = quantize_rows_1x128(torch.randn(m, k, device="cuda") * 3.0)
    b8, sb = quantize_blocks_128x128(torch.randn(n, k, device="cuda") * 0.05)
    sa = sa * torch.exp2(torch.randint(-8, 9, sa.shape, device="cuda").float())
    sb = sb * torch.exp2(torch.randint(-8, 9, sb.shape, device="cuda").float())
    ref = block_reference(a8, b8, sa, sb)
    for kern in pick(kernels, kind=kind, scaling="block", out=out, bias=False):
        check_close(kern, launch_block(kern, a8, b8, sa, sb), ref,
                    f"block {kind} {m}x{n}x{k}")


@pytest.mark.parametrize("m,n,k", [(128, 128, 128), (300, 200, 256), (257, 333, 4112)])
def test_block_scaled_bias(kernels, m, n, k):
    torch.manual_seed(23 + m)
    a8, sa = quantize_rows_1x128(torch.randn(m, k, device="cuda"))
    b8, sb = quantize_blocks_128x128(torch.randn(n, k, device="cuda"))
    bias = (torch.randn(n, device="cuda") * 4.0).to(torch.bfloat16)
    ref = block_reference(a8, b8, sa, sb, bias)
    for kern in pick(kernels, kind="forward", scaling="block", bias=True):
        check_close(kern, launch_block(kern, a8, b8, sa, sb, bias=bias), ref,
                    f"block bias {m}x{n}x{k}")


def test_block_scaled_adversarial(kernels):
    """Zero blocks (codes 0, scale 0 or eps), max-magnitude blocks (all codes
    +-448 with scales up to 2^20), and scales that change by 2^40 from one K
    slice to the next: every output finite, as the formula says."""
    m, n, k = 300, 333, 1040  # ragged M, N (3 weight blocks), K tail of 16
    kb, nb = -(-k // BLOCK), -(-n // BLOCK)
    torch.manual_seed(29)
    a = torch.randn(m, k, device="cuda") * 100
    b = torch.randn(n, k, device="cuda") * 100
    a[:, :BLOCK] = 448.0                      # max codes, first K slice
    b[:BLOCK, :BLOCK] = -448.0
    a[7] = 0.0                                # a zero row
    a[:, 3 * BLOCK:4 * BLOCK] = 0.0           # a zero K slice of A
    b[BLOCK:2 * BLOCK, 5 * BLOCK:6 * BLOCK] = 0.0  # a zero weight block
    a8 = a.clamp(-448, 448).to(FP8["e4m3"])
    b8 = b.clamp(-448, 448).to(FP8["e4m3"])
    sa = torch.exp2(torch.randint(-20, 21, (m, kb), device="cuda").float())
    sb = torch.exp2(torch.randint(-20, 21, (nb, kb), device="cuda").float())
    sa[:, 0] = 2.0 ** 20
    sb[0, 0] = 2.0 ** 20 / 4
    sa[:, 3] = 0.0                            # scale 0 on the zero slice
    sb[1, 5] = 0.0
    ref = block_reference(a8, b8, sa, sb)
    assert torch.isfinite(ref).all()
    for kern in pick(kernels, kind="forward", scaling="block", out="bf16", bias=False):
        y = launch_block(kern, a8, b8, sa, sb)
        assert torch.isfinite(y.float()).all(), f"{tag(kern)}: non-finite outputs"
        assert (y[7] == 0).all(), f"{tag(kern)}: zero row gave nonzero outputs"
        check_close(kern, y, ref, "block adversarial")
    zeros8 = torch.zeros(m, k, device="cuda").to(FP8["e4m3"])
    for kern in pick(kernels, kind="forward", scaling="block", out="bf16", bias=False):
        y = launch_block(kern, zeros8, b8, torch.zeros_like(sa), sb)
        assert (y.float() == 0).all(), f"{tag(kern)}: zeros in, nonzero out"


def test_block_scaled_outputs_untouched_outside(kernels):
    m, n, k = 130, 258, 272
    a8, sa = quantize_rows_1x128(torch.randn(m, k, device="cuda"))
    b8, sb = quantize_blocks_128x128(torch.randn(n, k, device="cuda"))
    for kern in pick(kernels, kind="forward", scaling="block", out="bf16", bias=False):
        big = torch.full((m * n + 4096,), 7.0, dtype=torch.bfloat16, device="cuda")
        launch_block(kern, a8, b8, sa, sb, out=big[: m * n].view(m, n))
        assert (big[m * n:] == 7.0).all(), f"{tag(kern)} wrote past the output"


def test_block_scaled_rejects_wrong_scale_extents(kernels):
    """The manifest sizes the scale buffers (m*k_blocks, n_blocks*k_blocks)."""
    m, n, k = 128, 256, 384
    a8, sa = quantize_rows_1x128(torch.randn(m, k, device="cuda"))
    b8, sb = quantize_blocks_128x128(torch.randn(n, k, device="cuda"))
    for kern in pick(kernels, kind="forward", scaling="block", out="bf16", bias=False):
        with pytest.raises(ValueError, match="argument 'b_scale'"):
            launch_block(kern, a8, b8, sa, sb[:, :2].contiguous())
