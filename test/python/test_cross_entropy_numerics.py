"""The softmax cross-entropy (coat.cross_entropy, coat-lower-cross-entropy):
the host reference against float64 math, and the compiled program (its CPU
twin in CI, its GPU kernel where CUDA is) against the reference bit for bit.

The reference follows the op's definition: per row, the online (max, sum of
2^((x - max) log2 e)) over the row's aligned 8-element chunks as a team of
`threads` takes them, the team's pairs combined by warp butterflies and
then in warp order, loss = (max - x[t]) + ln(sum), gradient = e^(x - max) /
sum - onehot, rounded once to bf16 (coat/Numerics/SoftExp2.h, SoftLog.h
give exp and ln identically on every target). So kernel, twin and library
agree exactly, NaN positions included (NaN payloads are not compared).

Against float64 (the math, not the order): a finite loss within 1e-5 +
2e-6 |max - x[t]| (the soft exp2's and ln's ulps, the f32 product
d * log2 e, the f32 sum of up to 152k terms), the gradient within a bf16
rounding (2^-8 relative) plus 1e-5 of the element's softmax (the f32
error of p before p - 1 at the target). Special rows as torch's
cross_entropy has them: a NaN or +inf logit, or only -inf ones, make the
loss and the whole gradient row NaN; -inf logits elsewhere contribute 0;
an ignored row is 0 with a zero gradient; a target outside [0, V) gives
NaN (torch raises; coat.nn checks its targets before the call).

Vocabularies: the four of the big models (32000, 50257, 128256, 151936)
and odd small ones (17, 1001). Row counts are at least 9 where V is odd, so
that rows start at every offset modulo 8 (partial first and last chunks).
"""

import numpy as np
import pytest

from coat import reference as ref

if not ref.is_available():
    pytest.skip("libcoat_reference.so is not built", allow_module_level=True)

from kernel_io import DEVICES  # noqa: E402

VOCABS = [17, 1001, 32000, 50257, 128256, 151936]
CASES = ["random", "equal", "wide", "tiny", "neginf", "nan", "posinf", "allneginf",
         "ignored", "bad_target"]
IGNORE = -100


def rows_for(vocab):
    return 11 if vocab % 8 else 3


def make(case, rows, vocab, seed):
    """(f32 logits exact in bf16 [rows, vocab], int64 targets [rows])."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, vocab)).astype(np.float32) * 3
    t = rng.integers(0, vocab, rows).astype(np.int64)
    if case == "equal":
        x[:] = 1.5
        x[-1] = -7.0
    elif case == "wide":
        x *= np.exp(rng.uniform(-4, 6, (rows, 1))).astype(np.float32)  # |x| up to ~1e3
        x[0, t[0]] = 3e38
    elif case == "tiny":
        x *= np.float32(1e-30)
    elif case == "neginf":
        x[:, ::3] = -np.inf
        t[0] = 0  # an infinitely unlikely target: +inf loss
    elif case == "nan":
        x[0, vocab // 2] = np.nan
        x[rows // 2, -1] = np.nan
    elif case == "posinf":
        x[1, 0] = np.inf
    elif case == "allneginf":
        x[0] = -np.inf
    elif case == "ignored":
        t[::2] = IGNORE
        x[0, 0] = np.nan  # an ignored row is 0 whatever it holds
        t[0] = IGNORE
    elif case == "bad_target":
        t[0] = vocab
        t[1] = -1
    x = ref.bf16_round(x)
    return x, t


def float64_math(x, t):
    """torch's cross_entropy per row in float64 (None: targets out of range
    give NaN), and softmax - onehot."""
    x = x.astype(np.float64)
    rows, vocab = x.shape
    loss = np.full(rows, np.nan)
    grad = np.full_like(x, np.nan)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for r in range(rows):
            if t[r] == IGNORE:
                loss[r], grad[r] = 0.0, 0.0
                continue
            if not 0 <= t[r] < vocab:
                continue
            m = np.max(x[r])
            e = np.exp(x[r] - m)
            s = e.sum()
            loss[r] = m + np.log(s) - x[r, t[r]]
            grad[r] = e / s
            grad[r, t[r]] -= 1.0
    return loss, grad


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("vocab", [17, 1001, 32000])
@pytest.mark.parametrize("threads", [32, 256])
def test_reference_matches_float64(vocab, case, threads):
    x, t = make(case, rows_for(vocab), vocab, seed=vocab)
    loss, gbits = ref.cross_entropy(ref.bf16_encode(x), t, IGNORE, threads)
    grad = ref.bf16_decode(gbits)
    want_loss, want_grad = float64_math(x, t)
    assert np.array_equal(np.isnan(loss), np.isnan(want_loss)), (loss, want_loss)
    fin = np.isfinite(want_loss)
    assert np.array_equal(np.isinf(loss), np.isinf(want_loss))
    xs = x.astype(np.float64)
    spread = np.array([abs(np.max(xs[r]) - xs[r, t[r]]) if fin[r] and t[r] != IGNORE else 0.0
                       for r in range(len(t))])
    err = np.abs(loss[fin] - want_loss[fin])
    assert np.all(err <= 1e-5 + 2e-6 * spread[fin]), (err, loss, want_loss)
    assert np.array_equal(np.isnan(grad), np.isnan(want_grad))
    ok = ~np.isnan(want_grad)
    p = want_grad + (np.arange(x.shape[1])[None, :] == t[:, None])
    tol = 2.0 ** -8 * np.abs(want_grad) + 1e-5 * np.abs(p) + 1e-37
    gerr = np.abs(grad.astype(np.float64) - want_grad)
    assert np.all(gerr[ok] <= tol[ok]), float(np.max(gerr[ok] - tol[ok]))
    ignored = t == IGNORE
    assert np.all(loss[ignored] == 0) and np.all(grad[ignored] == 0)


def test_reference_order_depends_on_threads():
    """The team size is part of the order: the sums of a long row differ in
    their last bits between 32 and 1024 threads (so tests must pass the
    kernel's), while the values agree to rounding."""
    x, t = make("random", 3, 32000, seed=1)
    a, _ = ref.cross_entropy(ref.bf16_encode(x), t, IGNORE, 32)
    b, _ = ref.cross_entropy(ref.bf16_encode(x), t, IGNORE, 1024)
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_reference_rejects_bad_extents():
    with pytest.raises(ref.ReferenceError, match="multiple of 32"):
        ref.cross_entropy(np.zeros((1, 8), np.uint16), np.zeros(1, np.int64), IGNORE, 48)


# --------------------------------------------------------------------------
# The compiled program against the reference
# --------------------------------------------------------------------------

torch = pytest.importorskip("torch", reason="torch is not installed")

from coat import artifacts, programs  # noqa: E402
from coat.executor import FLAG_WORDS  # noqa: E402


def program_or_skip(vocab, ignore_index=IGNORE):
    try:
        return artifacts.program(programs.CrossEntropyConfig(vocab, ignore_index))
    except artifacts.ArtifactNotFound as e:
        pytest.skip(f"no compiled cross-entropy program: {e}")


def run_program(prog, x, t, device):
    """(loss f32, gradient bf16 bits, flags of loss and gradient, threads)
    of the program's one call on logits ``x`` and targets ``t``."""
    bits = ref.bf16_encode(x)
    logits = torch.from_numpy(bits.view(np.int16)).to(device).view(torch.bfloat16)
    targets = torch.from_numpy(t).to(device)
    flags = torch.zeros(FLAG_WORDS * len(prog.outputs), dtype=torch.int32, device=device)
    ids = [v for v, _, _ in prog.inputs]
    env = prog.run({ids[0]: logits, ids[1]: targets}, "forward", flags=flags)
    loss, grad = env[prog.outputs[0][0]], env[prog.outputs[1][0]]
    # The gradient is written over the logits: one buffer of [T, V].
    assert grad.data_ptr() == logits.data_ptr()
    kernel = prog.steps[0].kernels[0]
    words = flags.cpu().numpy()[::FLAG_WORDS]
    return (loss.cpu().numpy(), grad.view(torch.int16).cpu().numpy().view(np.uint16),
            words, kernel.config["threads"])


def assert_bits_equal(got, want, what):
    """bf16 bits or f32 values equal, NaN to NaN."""
    if got.dtype == np.uint16:
        nan_g, nan_w = (got & 0x7FFF) > 0x7F80, (want & 0x7FFF) > 0x7F80
    else:
        nan_g, nan_w = np.isnan(got), np.isnan(want)
        got, want = got.view(np.uint32), want.view(np.uint32)
    assert np.array_equal(nan_g, nan_w), f"{what}: NaNs differ"
    bad = np.flatnonzero((got != want) & ~nan_w)
    assert bad.size == 0, f"{what}: {bad.size} differ, first at {bad[0]}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("vocab", VOCABS)
def test_program_matches_reference(vocab, case, device):
    prog = program_or_skip(vocab)
    x, t = make(case, rows_for(vocab), vocab, seed=vocab + 7)
    loss, gbits, flags, threads = run_program(prog, x, t, device)
    want_loss, want_bits = ref.cross_entropy(ref.bf16_encode(x), t, IGNORE, threads)
    assert_bits_equal(loss, want_loss, f"{device} loss")
    assert_bits_equal(gbits.reshape(want_bits.shape), want_bits, f"{device} gradient")
    # The flags say whether a loss or a gradient element is NaN or infinite.
    want_grad = ref.bf16_decode(want_bits)
    assert bool(flags[0]) == (not np.all(np.isfinite(want_loss))), flags
    assert bool(flags[1]) == (not np.all(np.isfinite(want_grad))), flags


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows", [0, 1, 2, 9])
def test_program_row_counts(rows, device):
    """No rows (no launch), one row, and short batches of an odd vocabulary."""
    prog = program_or_skip(1001)
    x, t = make("random", max(rows, 1), 1001, seed=rows)
    x, t = x[:rows], t[:rows]
    loss, gbits, _, threads = run_program(prog, x, t, device)
    want_loss, want_bits = ref.cross_entropy(ref.bf16_encode(x), t, IGNORE, threads)
    assert_bits_equal(loss, want_loss, "loss")
    assert_bits_equal(gbits.reshape(want_bits.shape), want_bits, "gradient")


@pytest.mark.parametrize("device", DEVICES)
def test_program_other_ignore_index(device):
    """ignore_index is part of the program: 0 ignores class 0's rows."""
    prog = program_or_skip(17, ignore_index=0)
    x, t = make("random", 11, 17, seed=3)
    t[::3] = 0
    loss, gbits, _, threads = run_program(prog, x, t, device)
    want_loss, want_bits = ref.cross_entropy(ref.bf16_encode(x), t, 0, threads)
    assert_bits_equal(loss, want_loss, "loss")
    assert_bits_equal(gbits.reshape(want_bits.shape), want_bits, "gradient")
    assert np.all(loss[::3] == 0)
