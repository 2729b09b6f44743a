"""coat.nn.linear_cross_entropy (the LM head fused with its loss, chunked)
against torch's unfused ``F.cross_entropy((hidden @ weight.T).float(),
targets, ignore_index=...)``, and its use by coat.llama once converted.

Both sides are compared with the same math in float64 (from the same bf16
hidden states and the weight as given). The fused path rounds the logits
to bf16 (as torch's bf16 LM head does) and the gradient softmax - onehot
to bf16 before its two GEMMs; per-chunk weight gradients are bf16 GEMM
outputs summed in f32. Tolerances (measured errors are 3-10x below):
the loss within 2e-3 relative of float64, the gradients of hidden and
weight within a relative L2 error of 1e-2 and a cosine of 0.9999, and
never more than twice torch's own bf16-path error plus 1e-3.

CPU tensors run the program's CPU twin; with CUDA the same checks run the
GPU kernel (the kernel path: cuBLAS for the GEMMs), on the kernels coat
finds ($COAT_KERNELS, build/demo) or compiles.
"""

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()

import torch.nn.functional as F  # noqa: E402

from coat import artifacts, programs  # noqa: E402
from coat.nn import linear_cross_entropy  # noqa: E402
from coat.nn.cross_entropy import default_chunk_tokens  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
IGNORE = -100
N, H, V = 37, 64, 1001


@pytest.fixture(scope="module", autouse=True)
def compiled():
    """The program of every vocabulary and ignore_index used here (found,
    or compiled where coat-opt is); skips without."""
    try:
        for vocab, ignore in ((V, IGNORE), (V, 0), (17, IGNORE)):
            artifacts.program(programs.CrossEntropyConfig(vocab, ignore))
    except artifacts.ArtifactNotFound as e:
        pytest.skip(f"no compiled cross-entropy program: {e}")


def inputs(device, weight_dtype=torch.bfloat16, n=N, vocab=V, seed=0, ignored=0.2):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, H, generator=g).bfloat16()
    w = (torch.randn(vocab, H, generator=g) * (2.0 / H ** 0.5)).to(weight_dtype)
    t = torch.randint(0, vocab, (n,), generator=g)
    t[torch.rand(n, generator=g) < ignored] = IGNORE
    return h.to(device), w.to(device), t.to(device)


def grads_of(fn, h, w, t, **kw):
    h = h.detach().clone().requires_grad_()
    w = w.detach().clone().requires_grad_()
    loss = fn(h, w, t, **kw)
    loss.backward()
    return loss.detach(), h.grad, w.grad


def torch_unfused(h, w, t, ignore_index=IGNORE):
    logits = (h @ w.t().to(h.dtype)).float()
    return F.cross_entropy(logits.reshape(-1, w.shape[0]), t.reshape(-1),
                           ignore_index=ignore_index)


def float64_math(h, w, t, ignore_index=IGNORE):
    logits = h.double() @ w.double().t()
    return F.cross_entropy(logits.reshape(-1, w.shape[0]), t.reshape(-1),
                           ignore_index=ignore_index)


def rel(a, b):
    a, b = a.double().reshape(-1), b.double().reshape(-1)
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def cos(a, b):
    a, b = a.double().reshape(-1), b.double().reshape(-1)
    return (a @ b / (a.norm() * b.norm()).clamp_min(1e-30)).item()


def check(h, w, t, ignore_index=IGNORE, **kw):
    got = grads_of(linear_cross_entropy, h, w, t, ignore_index=ignore_index, **kw)
    want = grads_of(float64_math, h.cpu(), w.cpu(), t.cpu(), ignore_index=ignore_index)
    base = grads_of(torch_unfused, h, w, t, ignore_index=ignore_index)
    loss, gh, gw = (x.cpu() for x in got)
    assert loss.dtype == torch.float32 and loss.shape == ()
    assert gh.dtype == h.dtype and gh.shape == h.shape
    assert gw.dtype == w.dtype and gw.shape == w.shape
    lerr = abs(loss.double().item() - want[0].item()) / abs(want[0].item())
    assert lerr <= 2e-3, (loss, want[0])
    for name, a, b, c in (("hidden", gh, want[1], base[1]), ("weight", gw, want[2], base[2])):
        e, e_torch = rel(a, b), rel(c.cpu(), b)
        assert e <= 1e-2 and cos(a, b) >= 0.9999, (name, e, cos(a, b))
        assert e <= 2 * e_torch + 1e-3, (name, e, e_torch)
    return got


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("chunk", [None, 1, 5, 16, 100])
def test_matches_unfused_loss_and_gradients(device, chunk):
    """Chunks of one token, an odd size whose last chunk is partial, one
    that divides nothing, one larger than the batch, the default."""
    h, w, t = inputs(device)
    check(h, w, t, chunk_tokens=chunk)


@pytest.mark.parametrize("device", DEVICES)
def test_chunking_changes_no_loss_row(device):
    """Each token's loss and gradient row do not depend on the chunk (the
    program's order is per row): the loss is the same to f32 summation, the
    hidden gradient to the bit."""
    h, w, t = inputs(device)
    a = grads_of(linear_cross_entropy, h, w, t, chunk_tokens=1)
    b = grads_of(linear_cross_entropy, h, w, t, chunk_tokens=100)
    torch.testing.assert_close(a[0], b[0], rtol=1e-6, atol=0)
    assert torch.equal(a[1], b[1])


@pytest.mark.parametrize("device", DEVICES)
def test_f32_master_weight(device):
    """An f32 weight: its bf16 copy feeds the GEMMs, its gradient is f32."""
    h, w, t = inputs(device, weight_dtype=torch.float32)
    _, _, gw = check(h, w, t, chunk_tokens=7)
    assert gw.dtype == torch.float32


@pytest.mark.parametrize("device", DEVICES)
def test_batch_dims_and_no_ignored(device):
    h, w, t = inputs(device, ignored=0.0)
    check(h.reshape(1, N, H), w, t.reshape(1, N), chunk_tokens=8)


@pytest.mark.parametrize("device", DEVICES)
def test_other_ignore_index(device):
    h, w, t = inputs(device, ignored=0.0)
    t[::4] = 0
    check(h, w, t, ignore_index=0, chunk_tokens=9)


@pytest.mark.parametrize("device", DEVICES)
def test_all_ignored_is_nan_with_zero_gradients(device):
    """As torch's mean over no tokens: NaN loss, zero gradients."""
    h, w, t = inputs(device)
    t[:] = IGNORE
    loss, gh, gw = grads_of(linear_cross_entropy, h, w, t, chunk_tokens=10)
    ref = grads_of(torch_unfused, h, w, t)
    assert torch.isnan(loss) and torch.isnan(ref[0])
    assert torch.equal(gh, torch.zeros_like(gh)) and torch.equal(gw, torch.zeros_like(gw))
    assert torch.equal(ref[1], torch.zeros_like(ref[1]))


@pytest.mark.parametrize("device", DEVICES)
def test_grad_output_scales_both_gradients(device):
    h, w, t = inputs(device)
    a = grads_of(linear_cross_entropy, h, w, t)
    b = grads_of(lambda *x, **k: 3.0 * linear_cross_entropy(*x, **k), h, w, t)
    torch.testing.assert_close(b[1].float(), 3.0 * a[1].float(), rtol=2 ** -7, atol=0)
    torch.testing.assert_close(b[2].float(), 3.0 * a[2].float(), rtol=2 ** -7, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_keeps_no_logits_for_the_backward(device):
    """Nothing of [tokens, vocab] is saved for the backward: the two
    gradients (tokens x hidden, vocab x hidden) and a count."""
    h, w, t = inputs(device)
    h = h.detach().requires_grad_()
    w = w.detach().requires_grad_()
    saved = []

    def pack(x):
        saved.append(tuple(x.shape))
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        loss = linear_cross_entropy(h, w, t, chunk_tokens=8)
    # The two gradients are intermediates kept on the node, handed over by
    # its backward; the count is saved.
    assert saved == [()], saved
    assert [tuple(g.shape) for g in loss.grad_fn.grads] == [(N, H), (V, H)]
    loss.backward()
    assert loss.grad_fn.grads is None  # handed over, not kept

    # The unfused loss keeps logits-sized tensors: what the check would see.
    unfused = []
    with torch.autograd.graph.saved_tensors_hooks(
            lambda x: unfused.append(tuple(x.shape)) or x, lambda x: x):
        torch_unfused(h, w, t)
    assert any(V in s and N in s for s in unfused), unfused


@pytest.mark.parametrize("device", DEVICES)
def test_backward_runs_once(device):
    h, w, t = inputs(device)
    h = h.detach().requires_grad_()
    loss = linear_cross_entropy(h, w, t)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="linear_cross_entropy: its backward ran already"):
        loss.backward()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gradient_is_scaled_in_place_in_blocks(monkeypatch, dtype):
    """The backward's scaling, a block of rows at a time over the forward's
    buffer, gives the bits of the whole-tensor formula (a partial last
    block included)."""
    from coat.nn import cross_entropy

    g = (torch.randn(37, 24) * 1e3).to(dtype)
    g[5, 3] = float("inf")
    g[6, 0] = float("nan")
    scale = torch.tensor(1 / 3.0)
    want = (g.float() * scale).to(dtype)
    monkeypatch.setattr(cross_entropy, "_SCALE_BLOCK_BYTES", 4 * 24 * 5)  # 5 rows a block
    buf = g.clone()
    got = cross_entropy._scale_in_place(buf, scale)
    assert got.data_ptr() == buf.data_ptr()
    assert torch.equal(got.view(-1).view(torch.int16 if dtype == torch.bfloat16
                                         else torch.int32),
                       want.view(-1).view(torch.int16 if dtype == torch.bfloat16
                                          else torch.int32))


def test_bad_targets_raise_on_cpu():
    h, w, t = inputs("cpu")
    t[3] = V
    with pytest.raises(ValueError, match=r"target 1001 of token 3 is outside \[0, 1001\)"):
        linear_cross_entropy(h, w, t)
    t[3] = -5
    with pytest.raises(ValueError, match="target -5 of token 3"):
        linear_cross_entropy(h, w, t)


def test_shape_errors():
    h, w, t = inputs("cpu")
    with pytest.raises(ValueError, match="weight is \\[vocab, hidden\\]"):
        linear_cross_entropy(h, w.t(), t)
    with pytest.raises(ValueError, match="36 targets for 37 tokens"):
        linear_cross_entropy(h, w, t[1:])
    with pytest.raises(ValueError, match="chunk_tokens must be positive"):
        linear_cross_entropy(h, w, t, chunk_tokens=0)


def test_default_chunk_is_at_most_128_mib_of_logits():
    for vocab in (17, 32000, 50257, 128256, 151936):
        c = default_chunk_tokens(vocab)
        assert c >= 1 and c * vocab * 2 <= 128 << 20 < (c + 1) * vocab * 2
    assert default_chunk_tokens(32000) == 2097


def test_small_vocab_odd_rows():
    """A 17-class head (rows never aligned to 16 bytes)."""
    h, w, t = inputs("cpu", vocab=17, n=23)
    check(h, w, t, chunk_tokens=6)


# --------------------------------------------------------------------------
# coat.llama with the fused loss
# --------------------------------------------------------------------------

def test_program_config_names_and_text():
    cfg = programs.CrossEntropyConfig(32000)
    assert cfg.name == "coat_cross_entropy_v32000"
    assert "{coat.writable}" in cfg.text() and "ignore_index" not in cfg.text()
    other = programs.CrossEntropyConfig(32000, ignore_index=0)
    assert other.name == "coat_cross_entropy_v32000_ig0"
    assert "ignore_index = 0" in other.text()
    assert programs.CrossEntropyConfig(17, -1).name == "coat_cross_entropy_v17_igm1"
    with pytest.raises(ValueError, match="vocab = 0"):
        programs.CrossEntropyConfig(0).text()


def test_llama_forward_uses_the_fused_loss_when_set():
    """coat.llama's forward(tokens, targets) calls coat_loss with the final
    hidden states and the LM head's weight; the loss is the unfused one to
    rounding, and no logits are kept."""
    from coat import llama
    from coat.nn.convert import FusedLoss

    cfg = llama.LlamaConfig(vocab=17, hidden=64, ffn=160, layers=1, heads=4, kv_heads=4)
    torch.manual_seed(0)
    model = llama.LlamaForCausalLM(cfg).bfloat16()
    tokens = torch.randint(0, 17, (2, 9))
    targets = torch.randint(0, 17, (2, 9))
    targets[0, :3] = IGNORE
    want = model(tokens, targets)
    model.coat_loss = FusedLoss(17)
    got = model(tokens, targets)
    assert abs(got.item() - want.item()) <= 2e-3 * abs(want.item())
    got.backward()
    assert model.lm_head.weight.grad is not None


@pytest.mark.parametrize("device", DEVICES)
def test_without_gradients_the_loss_alone(device, monkeypatch):
    """Under no_grad (an evaluation) the loss is the same and no gradient
    GEMM runs: each chunk makes its logits only."""
    from coat.nn import cross_entropy

    h, w, t = inputs(device)
    want = linear_cross_entropy(h.clone().requires_grad_(), w, t, chunk_tokens=8)
    calls = []
    real = cross_entropy.fused_forward

    def counting(*args, **kw):
        out = real(*args, **kw)
        calls.append(out[2] is None and out[3] is None)
        return out

    monkeypatch.setattr(cross_entropy, "_no_grad_outside_graphs", counting)
    with torch.no_grad():
        got = linear_cross_entropy(h, w, t, chunk_tokens=8)
    assert calls == [True]
    torch.testing.assert_close(got, want.detach(), rtol=1e-6, atol=0)
    assert linear_cross_entropy(h, w, t, chunk_tokens=8).requires_grad is False


def test_weight_gradient_is_summed_by_the_gemm_where_torch_can():
    """From torch 2.8 on CUDA the chunks' g.T @ h go straight into the f32
    sum (addmm with an f32 result of bf16 operands); the CUDA cases above
    check its values, this that the path is taken where it exists."""
    from coat.nn import cross_entropy
    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    assert cross_entropy._ADDMM_OUT_DTYPE == (version >= (2, 8))
