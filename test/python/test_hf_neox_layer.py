"""A converted GPT-NeoX layer (coat.hf.layer.GPTNeoXDecoderLayer) on the CPU
twins of its programs, without transformers: stand-in modules with
transformers' class names, structure and call signature, whose own forward
is an fp32 reference written from the layout (query_key_value's rows are
[heads, (q, k, v), head_dim]; the first rotary_ndims columns of q and k
rotate; the parallel residual is x + attn(ln1(x)) + mlp(ln2(x)), the
sequential h = x + attn(ln1(x)); h + mlp(ln2(h))). The converted layer
takes apply_rotary_pos_emb and eager_attention_forward from the module its
attention's class lives in (this one, here; transformers' modeling_gpt_neox
in a real model), and transformers' attention dispatch where transformers is
installed (a stand-in of it where not). test_hf.py runs real
GPTNeoXForCausalLM models on the GPU host.

Tolerances: the layer's branch (output minus input) within a relative L2
error of 0.08 of fp32 and at cosine >= 0.99; every gradient (the input's
minus the incoming gradient, which the residual passes through) at cosine
>= 0.98, their median >= 0.99. Every GEMM operand is FP8. Measured here
(3 seeds, either wiring): forward errors 0.043-0.045, gradient cosines
0.994 and up. The same checks against the other residual wiring from the
same weights fail (forward errors 0.14-0.15, some gradient at 0.94-0.955):
they see which input the MLP's norm reads.
"""

import copy
import importlib

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()
nn = torch.nn

import coat  # noqa: E402
from hf_layer_testing import (Config, assert_cached_decoding, assert_matches,  # noqa: E402
                               eager_attention_forward, output_and_grads, rotate_half)
from hf_layer_testing import convert as convert_copy  # noqa: E402
from coat.hf.layer import GPTNeoXDecoderLayer  # noqa: E402

# (coat.nn's convert function hides the module of that name)
convert_module = importlib.import_module("coat.nn.convert")
pytestmark = pytest.mark.usefixtures("hf_attention_dispatch")

HIDDEN, HEADS, FFN, ROTARY_PCT = 64, 4, 256, 0.25
D = HIDDEN // HEADS
EPS = 1e-5
FWD_TOL, FWD_COS, GRAD_COS, GRAD_COS_MEDIAN = 0.08, 0.99, 0.98, 0.99


# -- what the converted layer takes from the family's module ---------------

def apply_rotary_pos_emb(q, k, cos, sin):
    """Rotates the first cos.shape[-1] columns of each head of q and k
    ([batch, heads, seq, head_dim]; tables [batch, seq, rotary columns])."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    r = cos.shape[-1]

    def rotate(t):
        part = t[..., :r]
        return torch.cat([part * cos + rotate_half(part) * sin, t[..., r:]], dim=-1)

    return rotate(q), rotate(k)


class GPTNeoXAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.head_size = config.hidden_size // config.num_attention_heads
        self.rotary_ndims = int(self.head_size * config.rotary_pct)
        self.scaling = self.head_size ** -0.5
        self.attention_dropout = 0.0
        self.layer_idx = layer_idx
        self.query_key_value = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)


class GPTNeoXMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense_h_to_4h = nn.Linear(config.hidden_size, config.intermediate_size)
        self.dense_4h_to_h = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act = nn.GELU()

    def forward(self, x):
        return self.dense_4h_to_h(self.act(self.dense_h_to_4h(x)))


class GPTNeoXLayer(nn.Module):
    """transformers' GPTNeoXLayer's modules; forward: the fp32 reference,
    with the projection's rows taken apart per head explicitly."""

    def __init__(self, config, layer_idx=0):
        super().__init__()
        self.use_parallel_residual = config.use_parallel_residual
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(config.hidden_size,
                                                     eps=config.layer_norm_eps)
        self.post_attention_dropout = nn.Dropout(0.0)
        self.post_mlp_dropout = nn.Dropout(0.0)
        self.attention = GPTNeoXAttention(config, layer_idx)
        self.mlp = GPTNeoXMLP(config)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, use_cache=False,
                layer_past=None, cache_position=None, position_embeddings=None, **kwargs):
        x, attn = hidden_states, self.attention
        b, s, hidden = x.shape
        w = attn.query_key_value.weight.view(HEADS, 3, D, hidden)
        bias = attn.query_key_value.bias.view(HEADS, 3, D)
        n = self.input_layernorm(x)
        q, k, v = (torch.einsum("bsh,ndh->bnsd", n, w[:, j]) + bias[:, j, None, :]
                   for j in range(3))
        q, k = apply_rotary_pos_emb(q, k, *position_embeddings)
        if layer_past is not None:
            k, v = layer_past.update(k, v, attn.layer_idx)
        a, _ = eager_attention_forward(attn, q, k, v, None, attn.scaling)
        h = x + attn.dense(a.reshape(b, s, -1))
        if self.use_parallel_residual:
            return h + self.mlp(self.post_attention_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))


def _tuple_forward(self, hidden_states, **kwargs):
    outputs = (GPTNeoXLayer.forward(self, hidden_states, **kwargs),)
    return outputs


#: A release whose layer returns a tuple (of the same class name).
TupleGPTNeoXLayer = type("GPTNeoXLayer", (GPTNeoXLayer,), {"forward": _tuple_forward})


def neox_config(parallel=True, act="gelu"):
    return Config(hidden_size=HIDDEN, num_attention_heads=HEADS, intermediate_size=FFN,
                   rotary_pct=ROTARY_PCT, layer_norm_eps=EPS, hidden_act=act,
                   use_parallel_residual=parallel, _attn_implementation="eager")


def neox_layer(parallel=True, seed=0, cls=GPTNeoXLayer, act="gelu"):
    torch.manual_seed(seed)
    layer = cls(neox_config(parallel, act))
    if act == "gelu_new":  # transformers' NewGELUActivation: the tanh form
        layer.mlp.act = nn.GELU(approximate="tanh")
    with torch.no_grad():  # norms and biases that matter
        for norm in (layer.input_layernorm, layer.post_attention_layernorm):
            norm.weight.normal_(1.0, 0.2)
            norm.bias.normal_(0.0, 0.2)
        for lin in (layer.attention.query_key_value, layer.attention.dense,
                    layer.mlp.dense_h_to_4h, layer.mlp.dense_4h_to_h):
            lin.bias.normal_(0.0, 0.2)
    return layer


def rotary_tables(seq, batch=1):
    r = int(D * ROTARY_PCT)
    inv = 1.0 / 10000 ** (torch.arange(0, r, 2).float() / r)
    ang = torch.outer(torch.arange(seq).float(), inv)
    ang = torch.cat([ang, ang], dim=-1).expand(batch, seq, r)
    return ang.cos(), ang.sin()


def _convert(layer, qual="gpt_neox.layers.0"):
    return convert_copy(layer, qual)


def check(got, want):
    assert_matches(got, want, FWD_TOL, FWD_COS, GRAD_COS, GRAD_COS_MEDIAN)


def inputs(batch=2, seq=16, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, seq, HIDDEN, generator=g),
            torch.randn(batch, seq, HIDDEN, generator=g), rotary_tables(seq, batch))


@pytest.mark.parametrize("parallel", [True, False])
def test_converted_layer_matches_the_fp32_layer(cpu_cache, parallel):
    layer = neox_layer(parallel)
    x, dy, tables = inputs()
    conv = _convert(layer)
    assert isinstance(conv, GPTNeoXDecoderLayer) and not conv.tuple_output
    assert [c.name for c in conv.configs][2].endswith("_separate_residual") == parallel
    got = output_and_grads(conv, x, dy, tables)
    check(got, output_and_grads(layer, x, dy, tables))
    # The other wiring, from the same weights, is outside the tolerance.
    other = copy.deepcopy(layer)
    other.use_parallel_residual = not parallel
    with pytest.raises(AssertionError):
        check(got, output_and_grads(other, x, dy, tables))


def test_gelu_new_layer_runs_the_tanh_form(cpu_cache):
    """hidden_act "gelu_new" converts to the tanh-form GELU program and
    matches its fp32 layer; against the exact (erf) form the GELU MLP's
    program differs (by name), and a config that says gelu_new over an
    exact GELU module, or another activation, is refused by name."""
    layer = neox_layer(act="gelu_new")
    x, dy, tables = inputs()
    conv = _convert(layer)
    assert conv.configs[2].name.endswith("_tanh")
    assert not _convert(neox_layer()).configs[2].name.endswith("_tanh")
    check(output_and_grads(conv, x, dy, tables), output_and_grads(layer, x, dy, tables))
    lying = neox_layer(act="gelu_new")
    lying.mlp.act = nn.GELU()
    with pytest.raises(coat.hf.UnsupportedLayer, match=r"layers\.0\.mlp\.act .*does not "
                                                       r"compute GELU's tanh form"):
        _convert(lying)
    with pytest.raises(coat.hf.UnsupportedLayer, match=r"layers\.0\.mlp: activation "
                                                       r"'gelu_fast'"):
        _convert(neox_layer(act="gelu_fast"))


def test_converted_layer_keeps_the_parameters_and_the_state_dict(cpu_cache):
    layer = neox_layer()
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    conv = _convert(layer)
    assert list(conv.state_dict()) == list(before)
    for k, v in conv.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert "rotary_dim=4, parallel_residual=True" in repr(conv)


def test_kv_cache_decoding_matches_the_full_sequence(cpu_cache):
    """The prefix, then the rest with the cache: the layer updates the
    cache under its layer index, and the later tokens see the earlier
    ones."""
    layer = neox_layer()
    layer.attention.layer_idx = 3
    x, _, tables = inputs(batch=1, seq=32)
    assert_cached_decoding(layer, _convert(layer), x, tables, "layer_past", 3,
                           (1, HEADS, 32, D), FWD_COS)


def test_a_tuple_returning_layer_gets_a_tuple(cpu_cache):
    layer = neox_layer(cls=TupleGPTNeoXLayer)
    conv = _convert(layer)
    assert conv.tuple_output
    x, _, tables = inputs()
    out = conv(x, position_embeddings=tables)
    assert isinstance(out, tuple) and len(out) == 1 and out[0].shape == x.shape


def test_what_the_converted_layer_cannot_take_is_named(cpu_cache):
    conv = _convert(neox_layer())
    x, _, (cos, sin) = inputs()
    name = r"GPTNeoXDecoderLayer gpt_neox.layers.0"
    with pytest.raises(ValueError, match=name + ": called without position_embeddings"):
        conv(x)
    with pytest.raises(ValueError, match=name + ": head_mask is not available"):
        conv(x, position_embeddings=(cos, sin), head_mask=torch.ones(HEADS))
    with pytest.raises(ValueError, match=name + ": output_attentions is not available"):
        conv(x, position_embeddings=(cos, sin), output_attentions=True)
    full = rotary_tables(16, 2)[0].new_ones(2, 16, D)
    with pytest.raises(ValueError, match=name + ": rotary tables of 16 columns, the layer "
                                                "rotates 4"):
        conv(x, position_embeddings=(full, full))


class GPTNeoXForCausalLM(nn.Module):
    """transformers' module tree: embed_in, layers, final_layer_norm under
    gpt_neox, embed_out."""

    def __init__(self, layers=2):
        super().__init__()
        self.gpt_neox = nn.Module()
        self.gpt_neox.embed_in = nn.Embedding(128, HIDDEN)
        self.gpt_neox.layers = nn.ModuleList(neox_layer(seed=i) for i in range(layers))
        self.gpt_neox.final_layer_norm = nn.LayerNorm(HIDDEN)
        self.embed_out = nn.Linear(HIDDEN, 128, bias=False)


def test_coat_convert_takes_a_gpt_neox_model(cpu_cache, monkeypatch):
    """Its layers convert; its embedding, final norm and LM head (GPT-NeoX's
    names) stay in high precision by default."""
    monkeypatch.setattr(convert_module, "_is_hf", lambda module: True)
    model = GPTNeoXForCausalLM()
    keys = list(model.state_dict())
    coat.convert(model)
    report = model.coat_report
    assert list(report.converted) == ["gpt_neox.layers.0", "gpt_neox.layers.1"]
    assert report.converted["gpt_neox.layers.0"] == (
        "GPT-NeoX layer, 3 programs (coat_norm_linear_ln_h64_o192_b, "
        "coat_linear_residual_i64_h64_b, coat_gelu_mlp_ln_h64_f256_b_separate_residual)")
    assert set(report.kept) == {"gpt_neox.final_layer_norm", "embed_out"}
    assert all(isinstance(layer, GPTNeoXDecoderLayer) for layer in model.gpt_neox.layers)
    assert list(model.state_dict()) == keys
