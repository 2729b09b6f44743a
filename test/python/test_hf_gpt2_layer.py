"""A converted GPT-2 block (coat.hf.layer.GPT2DecoderLayer) on the CPU twins
of its programs, without transformers: stand-in modules with transformers'
class names, structure and call signature (transformers 5's GPT2Block:
hidden_states, past_key_values, attention_mask, encoder_hidden_states, ...,
which GPT2Model passes by position; it returns the hidden states), whose own forward is an fp32 reference written
from the layout: Conv1D computes x @ weight + bias with an [in, out] weight,
c_attn's output is q, k and v side by side, LayerNorms with bias, the tanh
form of GELU (gelu_new), sequential residual, no rotary embedding. The
converted layer takes eager_attention_forward from the module its
attention's class lives in (this one here, which scales the scores from the
module's scale_attn_weights and scale_attn_by_inverse_layer_idx as
transformers' GPT-2 does; modeling_gpt2 in a real model). test_hf.py runs
real GPT2LMHeadModel models on the GPU host.

Tolerances as for GPT-NeoX's layer (test_hf_neox_layer.py): the branch
within a relative L2 error of 0.08 of fp32 and at cosine >= 0.99, every
gradient at cosine >= 0.98, their median >= 0.99; every GEMM operand is FP8.
A layer's output cannot tell GELU's forms apart (they differ by 5e-4 at
most, the FP8 roundings by far more): that the tanh form runs is checked on
the GELU kernels of the compiled MLP program, against the reference
library's tanh and exact forms (test_flow_kernel_numerics's checks).
"""

import copy
import importlib
import math

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()
nn = torch.nn

import coat  # noqa: E402
from coat import artifacts  # noqa: E402
from hf_layer_testing import Cache, Config, assert_matches, cosine, output_and_grads, rel  # noqa: E402,E501
from hf_layer_testing import convert as convert_copy  # noqa: E402
from coat.hf import UnsupportedLayer, inspect_layer  # noqa: E402
from coat.hf.layer import GPT2DecoderLayer, layer_programs  # noqa: E402

convert_module = importlib.import_module("coat.nn.convert")
pytestmark = pytest.mark.usefixtures("hf_attention_dispatch")

HIDDEN, HEADS, FFN = 64, 4, 256
D = HIDDEN // HEADS
EPS = 1e-5
FWD_TOL, FWD_COS, GRAD_COS, GRAD_COS_MEDIAN = 0.08, 0.99, 0.98, 0.99


# -- transformers' modules, as stand-ins -----------------------------------

class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: weight [in, out], bias [out]
    (weights at torch.nn.Linear's scale, std 1/sqrt(3 in); random biases)."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * (3 * nx) ** -0.5)
        self.bias = nn.Parameter(torch.randn(nf) * 0.2)

    def forward(self, x):
        return x @ self.weight + self.bias


class NewGELUActivation(nn.Module):
    """gelu_new, written from its formula."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


ACTIVATIONS = {"gelu_new": NewGELUActivation, "gelu_pytorch_tanh": lambda: nn.GELU("tanh"),
               "gelu": nn.GELU, "relu": nn.ReLU}


def eager_attention_forward(module, query, key, value, attention_mask, **kwargs):
    """GPT-2's eager attention: the scale from the module's options (any
    ``scaling`` passed is not read), causal here (the queries are the last
    keys; a real model's mask comes from the model), [b, s, heads, d]."""
    scores = query.float() @ key.float().transpose(-1, -2)
    if module.scale_attn_weights:
        scores = scores / value.size(-1) ** 0.5
    if module.scale_attn_by_inverse_layer_idx:
        scores = scores / float(module.layer_idx + 1)
    q_len, k_len = query.shape[-2], key.shape[-2]
    causal = torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
    weights = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    out = (weights @ value.float()).to(value.dtype)
    return out.transpose(1, 2), weights


class GPT2Attention(nn.Module):
    def __init__(self, config, layer_idx=None):
        super().__init__()
        self.config = config
        self.embed_dim = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.embed_dim // self.num_heads
        self.split_size = self.embed_dim
        self.scale_attn_weights = config.scale_attn_weights
        self.is_cross_attention = False
        self.scale_attn_by_inverse_layer_idx = config.scale_attn_by_inverse_layer_idx
        self.layer_idx = layer_idx
        self.reorder_and_upcast_attn = config.reorder_and_upcast_attn
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)
        self.is_causal = True


class GPT2MLP(nn.Module):
    def __init__(self, inner, config):
        super().__init__()
        self.c_fc = Conv1D(inner, config.hidden_size)
        self.c_proj = Conv1D(config.hidden_size, inner)
        self.act = ACTIVATIONS[config.activation_function]()
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPT2Block(nn.Module):
    """transformers 5's GPT2Block's modules and call signature; forward: the
    fp32 reference."""

    def __init__(self, config, layer_idx=None):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.attn = GPT2Attention(config, layer_idx)
        self.ln_2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        if config.add_cross_attention:
            self.crossattention = GPT2Attention(config, layer_idx)
            self.ln_cross_attn = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        self.mlp = GPT2MLP(config.n_inner, config)

    def forward(self, hidden_states, past_key_values=None, attention_mask=None,
                encoder_hidden_states=None, encoder_attention_mask=None, use_cache=False,
                **kwargs) -> torch.Tensor:
        x, attn = hidden_states, self.attn
        b, s, _ = x.shape
        q, k, v = (t.view(b, s, HEADS, D).transpose(1, 2)
                   for t in attn.c_attn(self.ln_1(x)).split(HIDDEN, dim=-1))
        if past_key_values is not None:
            k, v = past_key_values.update(k, v, attn.layer_idx)
        a, _ = eager_attention_forward(attn, q, k, v, None)
        h = x + attn.c_proj(a.reshape(b, s, -1))
        return h + self.mlp(self.ln_2(h))


def _tuple_forward(self, hidden_states, *args, **kwargs) -> tuple:
    return (GPT2Block.forward(self, hidden_states, *args, **kwargs),)


#: A release whose block returns a tuple (of the same class name).
TupleGPT2Block = type("GPT2Block", (GPT2Block,), {"forward": _tuple_forward})


def gpt2_config(**kw):
    cfg = dict(hidden_size=HIDDEN, num_attention_heads=HEADS, n_inner=FFN,
               layer_norm_epsilon=EPS, activation_function="gelu_new", resid_pdrop=0.0,
               attn_pdrop=0.0, scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False,
               reorder_and_upcast_attn=False, add_cross_attention=False,
               _attn_implementation="eager")
    cfg.update(kw)
    return Config(**cfg)


def gpt2_block(seed=0, layer_idx=0, cls=GPT2Block, **kw):
    torch.manual_seed(seed)
    block = cls(gpt2_config(**kw), layer_idx)
    with torch.no_grad():  # norms that matter (Conv1D's biases are random already)
        for norm in (block.ln_1, block.ln_2):
            norm.weight.normal_(1.0, 0.2)
            norm.bias.normal_(0.0, 0.2)
    return block


def _convert(block, qual="transformer.h.0"):
    return convert_copy(block, qual)


def inputs(batch=2, seq=16, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, seq, HIDDEN, generator=g), torch.randn(batch, seq, HIDDEN,
                                                                     generator=g)


def check(got, want):
    assert_matches(got, want, FWD_TOL, FWD_COS, GRAD_COS, GRAD_COS_MEDIAN)


# -- the converted block ----------------------------------------------------

@pytest.mark.parametrize("act", ["gelu_new", "gelu"])
def test_converted_block_matches_the_fp32_block(cpu_cache, act):
    """Both GELU forms; every Conv1D parameter gets its gradient in its own
    [in, out] shape."""
    block = gpt2_block(activation_function=act)
    x, dy = inputs()
    conv = _convert(block)
    assert isinstance(conv, GPT2DecoderLayer) and not conv.tuple_output
    mlp = conv.configs[2]
    assert mlp.approximate == ("tanh" if act == "gelu_new" else "none")
    assert mlp.name.endswith("_tanh") == (act == "gelu_new")
    got = output_and_grads(conv, x, dy, None)
    for name, p in conv.named_parameters():
        assert got[1][name].shape == p.shape, name
    check(got, output_and_grads(block, x, dy, None))


def test_conv1d_weights_are_read_transposed(cpu_cache):
    """The programs take the [out, in] transpose of each Conv1D weight: the
    same block with the weights read untransposed (as square matrices,
    c_proj's) is far off."""
    block = gpt2_block()
    x, dy = inputs()
    got = output_and_grads(_convert(block), x, dy, None)
    other = copy.deepcopy(block)
    with torch.no_grad():
        other.attn.c_proj.weight.copy_(other.attn.c_proj.weight.t().clone())
    with pytest.raises(AssertionError):
        check(got, output_and_grads(other, x, dy, None))


def test_the_mlp_program_computes_the_tanh_form(cpu_cache):
    """gelu_new's tanh form reaches the kernels: the compiled MLP program's
    GELU kernels record approximate = "tanh" and compute the library's tanh
    form, and the same checks against the exact (erf) form fail."""
    pytest.importorskip("ml_dtypes", reason="the kernel checks need ml_dtypes")
    flow = pytest.importorskip("test_flow_kernel_numerics",
                               reason="the reference library is not built")
    spec = inspect_layer("transformer.h.0", gpt2_block())
    assert spec.gelu_approximate == "tanh"
    program = artifacts.program(layer_programs(spec)[2])
    gelus = [k for k in program.module.kernels.values() if k.spec.op in ("gelu", "gelu_grad")]
    assert {k.spec.op for k in gelus} == {"gelu", "gelu_grad"}
    for kernel in gelus:
        assert kernel.config.get("approximate") == "tanh", kernel.name
        flow.check(kernel, "cpu", (256, 64), "random", seed=0)
        with pytest.raises(AssertionError, match="off by more than the tolerance"):
            flow.check(kernel, "cpu", (256, 64), "random", seed=0, approximate="none")


@pytest.mark.parametrize("scale_weights,inverse_idx,want", [
    (True, False, D ** -0.5), (True, True, D ** -0.5 / 4), (False, False, 1.0),
    (False, True, 1 / 4)])
def test_the_scale_reaches_the_attention_function(cpu_cache, monkeypatch, scale_weights,
                                                  inverse_idx, want):
    """Attention functions other than GPT-2's eager one take the scale as
    ``scaling``: the converted block passes GPT2Attention's (1/sqrt(head_dim)
    with scale_attn_weights, divided by layer_idx + 1 with
    scale_attn_by_inverse_layer_idx; layer 3 here), the mask it was given and
    the model's dropout probability (0 outside training)."""
    block = gpt2_block(layer_idx=3, scale_attn_weights=scale_weights,
                       scale_attn_by_inverse_layer_idx=inverse_idx)
    conv = _convert(block)
    assert (conv.spec.scale_attn_weights, conv.spec.scale_attn_by_inverse_layer_idx) == \
        (scale_weights, inverse_idx)
    seen = {}

    def spy(module, q, k, v, mask, **kwargs):
        seen.update(kwargs, module=module, mask=mask)
        return eager_attention_forward(module, q, k, v, None)

    monkeypatch.setattr(conv, "_family_module", type("M", (), {
        "eager_attention_forward": staticmethod(spy)}))
    mask = torch.zeros(2, 1, 16, 16)
    with torch.no_grad():
        conv(inputs()[0], None, mask, position_ids=torch.arange(16)[None])
    assert seen["module"] is conv.attn and seen["mask"] is mask
    assert seen["scaling"] == pytest.approx(want)
    assert seen["dropout"] == 0.0 and "position_ids" in seen


@pytest.mark.parametrize("options", [dict(scale_attn_by_inverse_layer_idx=True),
                                     dict(scale_attn_weights=False)])
def test_attention_scale_options_match_the_fp32_block(cpu_cache, options):
    """The stand-in's eager attention scales from the module's options (as
    transformers' GPT-2 did before it took ``scaling``)."""
    block = gpt2_block(layer_idx=2, **options)
    x, dy = inputs()
    check(output_and_grads(_convert(block), x, dy, None), output_and_grads(block, x, dy, None))


def test_converted_block_keeps_the_parameters_and_the_state_dict(cpu_cache):
    block = gpt2_block()
    before = {k: v.clone() for k, v in block.state_dict().items()}
    conv = _convert(block)
    assert list(conv.state_dict()) == list(before)
    for k, v in conv.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert "family=GPT-2" in repr(conv) and "gelu=tanh" in repr(conv)


def test_kv_cache_decoding_matches_the_full_sequence(cpu_cache):
    """The prefix, then the rest with the cache: the block updates the cache
    under its attention's layer index (with the cache position, as GPT-2
    does), and the later tokens see the earlier ones."""
    block = gpt2_block(layer_idx=3)
    conv = _convert(block)
    x, _ = inputs(batch=1, seq=32)
    with torch.no_grad():
        want = block(x)
        cache = Cache()
        conv(x[:, :16], cache, None, cache_position=torch.arange(16), use_cache=True)
        got = conv(x[:, 16:], past_key_values=cache, cache_position=torch.arange(16, 32),
                   use_cache=True)
        alone = conv(x[:, 16:])
    assert list(cache.kv) == [3] and cache.kv[3][0].shape == (1, HEADS, 32, D)
    assert torch.equal(cache.cache_kwargs["cache_position"], torch.arange(16, 32))
    tail = want[:, 16:] - x[:, 16:]
    assert cosine(got - x[:, 16:], tail) >= FWD_COS
    assert rel(alone - x[:, 16:], tail) > 2 * rel(got - x[:, 16:], tail)


def test_a_tuple_returning_block_gets_a_tuple(cpu_cache):
    conv = _convert(gpt2_block(cls=TupleGPT2Block))
    assert conv.tuple_output
    x, _ = inputs()
    out = conv(x)
    assert isinstance(out, tuple) and len(out) == 1 and out[0].shape == x.shape


def test_what_the_converted_block_cannot_take_is_named(cpu_cache):
    conv = _convert(gpt2_block())
    x, _ = inputs()
    name = r"GPT2DecoderLayer transformer.h.0"
    with pytest.raises(ValueError, match=name + r": hidden_states must be \[batch, seq"):
        conv(x[0])
    with pytest.raises(ValueError, match=name + ": output_attentions is not available"):
        conv(x, output_attentions=True)
    with pytest.raises(ValueError, match=name + ": head_mask is not available"):
        conv(x, head_mask=torch.ones(HEADS))
    with pytest.raises(ValueError, match=name + r": encoder_hidden_states \(cross-attention\)"):
        conv(x, None, None, x)  # by position, as GPT2Model passes them
    with pytest.raises(ValueError, match=name + ": called with two different KV caches"):
        conv(x, Cache(), cache=Cache())  # the cache under both of transformers' names


class GPT2LMHeadModel(nn.Module):
    """transformers' module tree: wte, wpe, h, ln_f under transformer,
    lm_head."""

    def __init__(self, layers=2):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(128, HIDDEN)
        self.transformer.wpe = nn.Embedding(64, HIDDEN)
        self.transformer.h = nn.ModuleList(gpt2_block(seed=i, layer_idx=i)
                                           for i in range(layers))
        self.transformer.ln_f = nn.LayerNorm(HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, 128, bias=False)


def test_coat_convert_takes_a_gpt2_model(cpu_cache, monkeypatch):
    """Its blocks convert; its embeddings, final norm (ln_f) and LM head stay
    in high precision by default."""
    monkeypatch.setattr(convert_module, "_is_hf", lambda module: True)
    model = GPT2LMHeadModel()
    keys = list(model.state_dict())
    coat.convert(model)
    report = model.coat_report
    assert list(report.converted) == ["transformer.h.0", "transformer.h.1"]
    assert report.converted["transformer.h.0"] == (
        "GPT-2 layer, 3 programs (coat_norm_linear_ln_h64_o192_b, "
        "coat_linear_residual_i64_h64_b, coat_gelu_mlp_ln_h64_f256_b_tanh)")
    assert set(report.kept) == {"transformer.ln_f", "lm_head"}
    assert all(isinstance(b, GPT2DecoderLayer) for b in model.transformer.h)
    assert list(model.state_dict()) == keys


def test_unsupported_blocks_are_refused_at_conversion(monkeypatch):
    monkeypatch.setattr(convert_module, "_is_hf", lambda module: True)
    model = GPT2LMHeadModel(layers=1)
    model.transformer.h[0] = gpt2_block(resid_pdrop=0.1)
    with pytest.raises(ValueError, match=r"transformer.h.0.attn.resid_dropout: dropout 0.1"):
        coat.convert(model)
    with pytest.raises(UnsupportedLayer, match="reorder_and_upcast_attn"):
        inspect_layer("transformer.h.0", gpt2_block(reorder_and_upcast_attn=True))
