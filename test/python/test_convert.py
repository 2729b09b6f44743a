"""coat.convert and coat.nn.DecoderLayer: a Llama decoder layer as three
compiled programs (RMSNorm + q/k/v GEMM, o-projection + residual, MLP block)
around BF16 attention, checked against fp32 autograd of coat.llama's layer
with the same weights, gradient by gradient.

Tolerance as in test_nn.py: relative L2 error at most 0.2 for the layer's
branch output (y - x) and every gradient (dx - dy for the input: the residual
passes dy through). Measured on CPU: about 0.1. The same check fails for a
reference with q and k swapped, so it tells wirings apart.

CPU tests compile the tiny config's programs into a temporary cache with
coat-opt; CUDA tests use the 100m config of examples/train_llama.py, compiled
by scripts/compile_model.py and found through $COAT_KERNELS.
"""

import copy

import pytest

from conftest import captured_and_eager_steps, torch_or_skip

torch = torch_or_skip()

import coat  # noqa: E402
import coat.nn as cnn  # noqa: E402
from coat import artifacts, llama, programs  # noqa: E402

TOL = 0.2
TINY = llama.LlamaConfig(vocab=256, hidden=64, ffn=160, layers=2, heads=4, kv_heads=2)
CUDA_CFG = llama.LlamaConfig(vocab=256, hidden=1024, ffn=2816, layers=2, heads=16,
                             kv_heads=16)


def cuda_or_skip(cfg):
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")
    try:
        for c in programs.decoder_layer_configs(cfg.hidden, cfg.ffn, cfg.heads, cfg.kv_heads,
                                                cfg.eps):
            artifacts.program(c)
    except RuntimeError as e:
        pytest.skip(str(e))


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def random_layer(cfg, seed, device):
    torch.manual_seed(seed)
    layer = llama.DecoderLayer(cfg).to(device)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if p.dim() == 2:
                p.normal_(std=p.shape[1] ** -0.5)
            else:
                p.add_(0.2 * torch.randn_like(p))
    return layer


def converted(layer, cfg):
    """The same layer inside a one-layer model, converted, and the new layer."""
    holder = torch.nn.Module()
    holder.layers = torch.nn.ModuleList([copy.deepcopy(layer)])
    coat.convert(holder)
    return holder.layers[0]


def check_layer(cfg, layer, batch, seq, device, seed=0):
    torch.manual_seed(seed)
    new = converted(layer, cfg)
    assert isinstance(new, cnn.DecoderLayer)
    cos, sin = llama.rope_tables(cfg, seq, device)
    x = torch.randn(batch, seq, cfg.hidden, device=device).bfloat16().float()
    dy = torch.randn_like(x)
    xc = x.clone().requires_grad_()
    y = new(xc, cos, sin)
    y.backward(dy)
    xr = x.clone().requires_grad_()
    yr = layer(xr, cos, sin)
    yr.backward(dy)
    errs = {"output": rel(y - x, (yr - x).detach()), "dx": rel(xc.grad - dy, xr.grad - dy)}
    ref_params = dict(layer.named_parameters())
    for name, p in new.named_parameters():
        assert p.grad is not None and p.grad.dtype == p.dtype, name
        errs[name] = rel(p.grad, ref_params[name].grad)
    bad = {k: round(v, 4) for k, v in errs.items() if not v <= TOL}
    assert not bad, f"relative errors above {TOL}: {bad} (all: {errs})"
    # The tolerance tells wirings apart: gate and up swapped change the
    # output, and no projection's gradient passes for its neighbour's.
    swapped = copy.deepcopy(layer)
    mlp = swapped.mlp
    mlp.gate_proj.weight, mlp.up_proj.weight = mlp.up_proj.weight, mlp.gate_proj.weight
    ys = swapped(x, cos, sin)
    assert rel(y - x, (ys - x).detach()) > 2 * TOL
    grads = dict(new.named_parameters())
    for a, b in (("self_attn.q_proj.weight", "self_attn.o_proj.weight"),
                 ("mlp.gate_proj.weight", "mlp.up_proj.weight")):
        assert rel(grads[a].grad, ref_params[b].grad) > 2 * TOL, (a, b)
    return errs


@pytest.mark.parametrize("batch,seq", [(2, 24), (1, 7), (3, 16)])
def test_cpu_decoder_layer_matches_fp32_autograd(cpu_cache, batch, seq):
    check_layer(TINY, random_layer(TINY, batch * seq, "cpu"), batch, seq, "cpu")


@pytest.mark.parametrize("batch,seq", [(2, 256), (1, 1000)])
def test_cuda_decoder_layer_matches_fp32_autograd(batch, seq):
    cuda_or_skip(CUDA_CFG)
    check_layer(CUDA_CFG, random_layer(CUDA_CFG, seq, "cuda"), batch, seq, "cuda")


def test_cpu_layer_checks_no_gradient_it_passes_through(cpu_cache, monkeypatch):
    """The o-projection program returns its incoming gradient as its input's
    (the residual): no reduction checks that tensor again, and a NaN in it
    is still reported, by the flags of the kernels that read it."""
    from coat.nn import _autograd

    new = converted(random_layer(TINY, 5, "cpu"), TINY)
    cos, sin = llama.rope_tables(TINY, 8, "cpu")
    x = torch.randn(2, 8, TINY.hidden).requires_grad_()
    checked = []
    real = _autograd._check_finite
    monkeypatch.setattr(_autograd, "_check_finite",
                        lambda t, what, phase: (checked.append(what), real(t, what, phase)))
    new(x, cos, sin).backward(torch.randn(2, 8, TINY.hidden))
    assert not [w for w in checked if "gradient" in w], checked
    dy = torch.randn(2, 8, TINY.hidden)
    dy[1, 3, 5] = float("nan")
    with pytest.raises(cnn.NonFiniteError, match="gradient of input"):
        new(x, cos, sin).backward(dy)


def test_cuda_decoder_layer_step_replays_from_a_cuda_graph():
    """coat.nn.capture_step on a converted layer (three programs around
    eager RoPE and SDPA): a replay on new data gives the eager step's output
    and gradients on that data."""
    cuda_or_skip(CUDA_CFG)
    batch, seq = 2, 128
    new = converted(random_layer(CUDA_CFG, 3, "cuda"), CUDA_CFG)
    cos, sin = llama.rope_tables(CUDA_CFG, seq, "cuda")
    x = torch.randn(batch, seq, CUDA_CFG.hidden, device="cuda").requires_grad_()
    names, (replayed,), eager, _ = captured_and_eager_steps(
        new, lambda t: new(t, cos, sin), x, torch.randn_like(x))
    for name, a, b in zip(names, replayed, eager):
        assert rel(a, b) <= 1e-2, name


def test_convert_keeps_parameter_names_and_state_dict(cpu_cache):
    torch.manual_seed(1)
    ref = llama.LlamaForCausalLM(TINY)
    model = copy.deepcopy(ref)
    params_before = {n: p for n, p in model.named_parameters()}
    coat.convert(model)
    assert sum(isinstance(m, cnn.DecoderLayer) for m in model.modules()) == TINY.layers
    assert list(model.state_dict()) == list(ref.state_dict())
    # The converted layers hold the very Parameters of the original layers.
    assert all(p is params_before[n] for n, p in model.named_parameters())
    model.load_state_dict(ref.state_dict())
    x = torch.randint(0, TINY.vocab, (2, 16))
    loss, loss_ref = model(x, x), ref(x, x)
    assert abs(float(loss) - float(loss_ref)) < 0.02 * float(loss_ref)


def test_convert_fuses_the_lm_head_with_its_loss(cpu_cache):
    """A coat.llama model gets coat.nn.linear_cross_entropy as its loss (the
    report says so); fused_loss=False, or no program of its vocabulary,
    keeps the unfused loss, the latter with a warning."""
    from coat.nn import cross_entropy

    model = coat.convert(llama.LlamaForCausalLM(TINY))
    assert model.coat_loss is not None and model.coat_loss.vocab == TINY.vocab
    assert model.coat_report.loss.startswith("fused with lm_head")
    assert "loss: fused" in str(model.coat_report)
    calls = []
    real = cross_entropy.fused_forward
    try:
        cross_entropy.fused_forward = lambda *a, **k: calls.append(1) or real(*a, **k)
        x = torch.randint(0, TINY.vocab, (2, 9))
        model(x[:, :-1], x[:, 1:]).backward()
    finally:
        cross_entropy.fused_forward = real
    assert calls and model.lm_head.weight.grad is not None

    kept = coat.convert(llama.LlamaForCausalLM(TINY), fused_loss=False)
    assert kept.coat_loss is None and kept.coat_report.loss.startswith("unfused")

    def missing(*a, **k):
        raise coat.artifacts.ArtifactNotFound("none here")

    real_program = coat.artifacts.program
    try:
        coat.artifacts.program = lambda cfg, folder=None: (
            missing() if "cross_entropy" in cfg.name else real_program(cfg, folder))
        with pytest.warns(UserWarning, match="no compiled coat_cross_entropy_v256"):
            plain = coat.convert(llama.LlamaForCausalLM(TINY))
    finally:
        coat.artifacts.program = real_program
    assert plain.coat_loss is None and "materialises" in plain.coat_report.loss


def test_convert_then_fp8adamw_trains(cpu_cache):
    """The whole recipe in two lines on CPU tensors (CPU twins): the loss on
    a fixed batch goes down over a few steps."""
    torch.manual_seed(2)
    model = llama.LlamaForCausalLM(TINY)
    coat.convert(model)
    try:
        opt = coat.optim.FP8AdamW(model.parameters(), lr=3e-3)
        x = torch.randint(0, TINY.vocab, (4, 32))
        losses = []
        for _ in range(6):
            loss = model(x[:, :-1], x[:, 1:])
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(float(loss))
    except RuntimeError as e:
        if "kernel" in str(e).lower():
            pytest.skip(f"no FP8AdamW kernels: {e}")
        raise
    assert losses[-1] < losses[0] - 0.05, losses


def test_convert_refuses_what_it_cannot_take(cpu_cache):
    model = llama.LlamaForCausalLM(TINY)
    model.extra = torch.nn.Linear(8, 8)
    with pytest.raises(ValueError, match=r"coat.convert: extra \(Linear\) is outside"):
        coat.convert(copy.deepcopy(model))
    coat.convert(copy.deepcopy(model), keep=("embed_tokens", "norm", "lm_head", "extra"))

    biased = llama.LlamaForCausalLM(TINY)
    biased.model.layers[1].self_attn.v_proj.bias = torch.nn.Parameter(torch.zeros(32))
    with pytest.raises(ValueError, match=r"model.layers.1.self_attn.v_proj has a bias"):
        coat.convert(biased)

    odd = llama.LlamaConfig(vocab=256, hidden=72, ffn=160, layers=1, heads=4, kv_heads=4)
    with pytest.raises(ValueError, match=r"coat.convert: model.layers.0: .*hidden = 72"):
        coat.convert(llama.LlamaForCausalLM(odd))

    with pytest.raises(ValueError, match="no decoder layer found"):
        coat.convert(torch.nn.Sequential(torch.nn.Linear(16, 16)))


def test_layer_input_errors_name_the_layer(cpu_cache):
    model = llama.LlamaForCausalLM(TINY)
    coat.convert(model)
    layer = model.model.layers[0]
    cos, sin = llama.rope_tables(TINY, 8, "cpu")
    with pytest.raises(ValueError, match=r"DecoderLayer model.layers.0: input must be"):
        layer(torch.randn(8, TINY.hidden), cos, sin)
    with pytest.raises(ValueError, match=r"DecoderLayer model.layers.0: input has 32 features"):
        layer(torch.randn(1, 8, 32), cos, sin)


def test_attention_keeps_no_view_of_the_fused_projection(monkeypatch):
    """SDPA saves its inputs for the backward (the flash kernels keep them as
    given). A converted layer slices q, k and v from one fused projection:
    none of what reaches SDPA may share its storage, or the whole projection
    (3 tokens x hidden bf16 without grouped queries) would stay alive until
    the backward."""
    seen = []
    real = llama._sdpa

    def recording_sdpa(q, k, v):
        seen.extend((q, k, v))
        return real(q, k, v)

    monkeypatch.setattr(llama, "_sdpa", recording_sdpa)
    b, s, heads, kv_heads, d = 2, 8, 4, 2, 16
    qkv = torch.randn(b, s, (heads + 2 * kv_heads) * d).bfloat16().requires_grad_()
    q, k, v = qkv.split([heads * d, kv_heads * d, kv_heads * d], dim=-1)
    cos, sin = llama.rope_tables(llama.LlamaConfig(hidden=heads * d, heads=heads), s, "cpu")
    out = llama.attention_core(q, k, v, cos, sin, heads, kv_heads)
    out.float().sum().backward()
    assert len(seen) == 3
    fused = qkv.storage().data_ptr()
    assert [t.storage().data_ptr() == fused for t in seen] == [False] * 3
    assert qkv.grad is not None and torch.isfinite(qkv.grad.float()).all()


def test_filter_fn_keeps_layers_and_the_report_says_why(cpu_cache):
    model = llama.LlamaForCausalLM(TINY)
    model.extra = torch.nn.Linear(8, 8)
    coat.convert(model, filter_fn=lambda fqn, mod: fqn not in ("model.layers.1", "extra"))
    report = model.coat_report
    assert list(report.converted) == ["model.layers.0"]
    assert report.converted["model.layers.0"].startswith("Llama layer, 3 programs")
    assert report.kept["model.layers.1"] == "filter_fn"
    assert report.kept["extra"] == "filter_fn"
    assert report.kept["lm_head"].startswith("keep=")
    assert isinstance(model.model.layers[0], cnn.DecoderLayer)
    assert type(model.model.layers[1]) is llama.DecoderLayer
    assert "kept (filter_fn)" in str(report)


def test_norm_eps_is_read_under_either_name(cpu_cache):
    model = llama.LlamaForCausalLM(TINY)
    for layer in model.model.layers:
        for norm in (layer.input_layernorm, layer.post_attention_layernorm):
            del norm.eps
            norm.variance_epsilon = 1e-6
    coat.convert(model)
    assert all(layer.configs[0].eps == 1e-6 for layer in model.model.layers)

    model = llama.LlamaForCausalLM(TINY)
    model.model.layers[0].post_attention_layernorm.eps = 1e-6
    with pytest.raises(ValueError, match=r"model.layers.0: the two norms have different eps"):
        coat.convert(model)
