"""A converted OLMo-1 layer (coat.hf.layer.DecoderLayer of an
OlmoDecoderLayer) on the CPU twins of its programs, without transformers:
stand-in modules with transformers 5's class names, structure and call
signature, whose own forward is an fp32 reference written from OLMo's
definition (LayerNorms without parameters at eps 1e-5, q/k/v projections
clamped to [-clip_qkv, clip_qkv] where the config says, Llama's RoPE,
grouped-query attention, sequential residuals, SwiGLU MLP). The converted
layer takes apply_rotary_pos_emb and eager_attention_forward from the module
its attention's class lives in (this one, here; transformers'
modeling_olmo in a real model), and transformers' attention dispatch where
transformers is installed (a stand-in of it where not). test_hf.py runs
real OlmoForCausalLM models on the GPU host.

Tolerances: the layer's branch (output minus input) within a relative L2
error of 0.12 of fp32 and at cosine >= 0.99; every gradient (the input's
minus the incoming gradient, which the residual passes through) at cosine
>= 0.98 (0.96 with clip_qkv), their median >= 0.99. Every GEMM operand is
FP8. Measured here (3 layer seeds x 2 input seeds each): forward errors
0.082-0.096 (0.055-0.063 with attention biases), which is the SwiGLU MLP
block's own error (test_layernorm_programs.py: up to 0.108; GPT-NeoX's GELU
layer measures 0.045); gradient cosines 0.9896 and up, medians 0.992 and
up; with clip_qkv the lowest 0.974-0.983 (q, k or v projection weights: FP8
rounding moves values across the clamp's edges, where the clamp's gradient
switches). The stream's rows have means of their own, as hidden states do,
so the same checks against the layer with RMSNorms in place of its
LayerNorms (what the Llama programs would compute) fail by far (forward
errors 0.56-0.95), as do those against the layer without its clip_qkv where
the clamp bites (forward errors 0.17-0.22, lowest gradient cosines
0.88-0.90).
"""

import copy
import importlib

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()
nn = torch.nn
F = torch.nn.functional

import coat  # noqa: E402
from hf_layer_testing import (Config, assert_cached_decoding, assert_matches,  # noqa: E402
                               eager_attention_forward, output_and_grads, rotate_half)
from hf_layer_testing import convert as convert_copy  # noqa: E402
from coat.hf.layer import DecoderLayer  # noqa: E402

# (coat.nn's convert function hides the module of that name)
convert_module = importlib.import_module("coat.nn.convert")
pytestmark = pytest.mark.usefixtures("hf_attention_dispatch")

# head_dim 32: the attention-input program rotates q and k itself (half a
# head a multiple of the group size).
HIDDEN, HEADS, KV_HEADS, FFN = 128, 4, 2, 256
D = HIDDEN // HEADS
FWD_TOL, FWD_COS, GRAD_COS, GRAD_COS_MEDIAN = 0.12, 0.99, 0.98, 0.99
GRAD_COS_CLIPPED = 0.96
#: clamps about a fifth of q, k and v in these layers (checked below)
CLIP = 0.9


# -- what the converted layer takes from the family's module ---------------

def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    q_type, k_type = q.dtype, k.dtype
    q_embed = q * cos + rotate_half(q) * sin
    k_embed = k * cos + rotate_half(k) * sin
    return q_embed.to(q_type), k_embed.to(k_type)


class OlmoLayerNorm(nn.Module):
    """transformers' OlmoLayerNorm: no parameters, eps 1e-5 in its forward."""

    def __init__(self, hidden_size):
        super().__init__()
        self.normalized_shape = (hidden_size,)

    def forward(self, hidden_states):
        orig_dtype = hidden_states.dtype
        return F.layer_norm(hidden_states.to(torch.float32), self.normalized_shape, None, None,
                            eps=1e-5).to(orig_dtype)


class OlmoAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = config.attention_dropout
        self.is_causal = True
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * D, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * D, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * D, bias=bias)
        self.o_proj = nn.Linear(config.num_attention_heads * D, config.hidden_size, bias=bias)


class OlmoMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class OlmoDecoderLayer(nn.Module):
    """transformers' OlmoDecoderLayer's modules; forward: the fp32 reference
    (5.x's call signature, the hidden states returned alone)."""

    def __init__(self, config, layer_idx=0):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.self_attn = OlmoAttention(config, layer_idx)
        self.mlp = OlmoMLP(config)
        self.input_layernorm = OlmoLayerNorm(config.hidden_size)
        self.post_attention_layernorm = OlmoLayerNorm(config.hidden_size)

    def forward(self, hidden_states, attention_mask=None, position_ids=None,
                past_key_values=None, use_cache=False, cache_position=None,
                position_embeddings=None, **kwargs) -> torch.Tensor:
        x, attn = hidden_states, self.self_attn
        b, s, _ = x.shape
        n = self.input_layernorm(x)
        q, k, v = attn.q_proj(n), attn.k_proj(n), attn.v_proj(n)
        clip = attn.config.clip_qkv
        if clip is not None:
            q, k, v = (t.clamp(-clip, clip) for t in (q, k, v))
        q, k, v = (t.view(b, s, -1, D).transpose(1, 2) for t in (q, k, v))
        q, k = apply_rotary_pos_emb(q, k, *position_embeddings)
        if past_key_values is not None:
            k, v = past_key_values.update(k, v, attn.layer_idx)
        a, _ = eager_attention_forward(attn, q, k, v, None, attn.scaling)
        h = x + attn.o_proj(a.reshape(b, s, -1))
        return h + self.mlp(self.post_attention_layernorm(h))


def olmo_config(clip_qkv=None, attention_bias=False):
    return Config(hidden_size=HIDDEN, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                   intermediate_size=FFN, hidden_act="silu", clip_qkv=clip_qkv,
                   attention_bias=attention_bias, attention_dropout=0.0,
                   _attn_implementation="eager")


def olmo_layer(clip_qkv=None, attention_bias=False, seed=0):
    torch.manual_seed(seed)
    layer = OlmoDecoderLayer(olmo_config(clip_qkv, attention_bias))
    if attention_bias:
        with torch.no_grad():  # biases that matter
            for lin in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj,
                        layer.self_attn.o_proj):
                lin.bias.normal_(0.0, 0.2)
    return layer


class RMSNormInstead(nn.Module):
    """The wrong norm: no mean subtracted (what the Llama programs do)."""

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)


def rotary_tables(seq, batch=1):
    inv = 1.0 / 10000 ** (torch.arange(0, D, 2).float() / D)
    ang = torch.outer(torch.arange(seq).float(), inv)
    ang = torch.cat([ang, ang], dim=-1).expand(batch, seq, D)
    return ang.cos(), ang.sin()


def _convert(layer, qual="model.layers.0"):
    return convert_copy(layer, qual)


def check(got, want, grad_cos=GRAD_COS):
    assert_matches(got, want, FWD_TOL, FWD_COS, grad_cos, GRAD_COS_MEDIAN)


def inputs(batch=2, seq=16, seed=1):
    """Hidden states whose rows have means of their own, an incoming
    gradient and the rotary tables."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, seq, HIDDEN, generator=g) + \
        1.5 * torch.randn(batch, seq, 1, generator=g)
    return x, torch.randn(batch, seq, HIDDEN, generator=g), rotary_tables(seq, batch)


def with_rms_norms(layer):
    other = copy.deepcopy(layer)
    other.input_layernorm = RMSNormInstead()
    other.post_attention_layernorm = RMSNormInstead()
    return other


@pytest.mark.parametrize("attention_bias", [False, True])
def test_converted_layer_matches_the_fp32_layer(cpu_cache, attention_bias):
    layer = olmo_layer(attention_bias=attention_bias)
    x, dy, tables = inputs()
    conv = _convert(layer)
    assert isinstance(conv, DecoderLayer) and conv.rope_in_program and not conv.tuple_output
    bias = "_b" if attention_bias else ""
    assert [c.name for c in conv.configs] == [
        f"coat_norm_linear_ln_noaffine_h128_o256{bias}_rope6x32",
        f"coat_linear_residual_i128_h128{bias}", "coat_mlp_ln_noaffine_h128_f256"]
    got = output_and_grads(conv, x, dy, tables)
    check(got, output_and_grads(layer, x, dy, tables))
    # The same layer with RMSNorms, from the same weights, is outside the
    # tolerance: the programs subtract each row's mean.
    with pytest.raises(AssertionError):
        check(got, output_and_grads(with_rms_norms(layer), x, dy, tables))


def test_clip_qkv_clamps_q_k_and_v_before_the_rotation(cpu_cache):
    """With clip_qkv the attention core clamps the projections and rotates
    them (the program does not); the result matches OLMo's, and not the
    same layer without the clamp."""
    layer = olmo_layer(clip_qkv=CLIP)
    x, dy, tables = inputs()
    with torch.no_grad():
        n = layer.input_layernorm(x)
        qkv = torch.cat([p(n) for p in (layer.self_attn.q_proj, layer.self_attn.k_proj,
                                         layer.self_attn.v_proj)], dim=-1)
    clamped = (qkv.abs() > CLIP).float().mean().item()
    assert 0.1 < clamped < 0.4, clamped
    conv = _convert(layer)
    assert not conv.rope_in_program and conv.spec.clip_qkv == CLIP
    assert conv.configs[0].name == "coat_norm_linear_ln_noaffine_h128_o256"
    assert "clip_qkv=0.9" in repr(conv)
    got = output_and_grads(conv, x, dy, tables)
    check(got, output_and_grads(layer, x, dy, tables), GRAD_COS_CLIPPED)
    unclipped = copy.deepcopy(layer)
    unclipped.self_attn.config = olmo_config(clip_qkv=None)
    with pytest.raises(AssertionError):
        check(got, output_and_grads(unclipped, x, dy, tables), GRAD_COS_CLIPPED)


def test_converted_layer_keeps_the_parameters_and_the_state_dict(cpu_cache):
    layer = olmo_layer()
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    conv = _convert(layer)
    assert list(conv.state_dict()) == list(before)
    for k, v in conv.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert "family=OLMo" in repr(conv) and "rope_in_program=True" in repr(conv)


@pytest.mark.parametrize("clip_qkv", [None, CLIP])
def test_kv_cache_decoding_matches_the_full_sequence(cpu_cache, clip_qkv):
    """The prefix, then the rest with the cache: the layer updates the
    cache under its layer index, and the later tokens see the earlier
    ones."""
    layer = olmo_layer(clip_qkv=clip_qkv)
    layer.self_attn.layer_idx = 3
    x, _, tables = inputs(batch=1, seq=32)
    assert_cached_decoding(layer, _convert(layer), x, tables, "past_key_values", 3,
                           (1, KV_HEADS, 32, D), FWD_COS)


class OlmoModel(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.embed_tokens = nn.Embedding(128, HIDDEN)
        self.layers = nn.ModuleList(olmo_layer(seed=i) for i in range(layers))
        self.norm = OlmoLayerNorm(HIDDEN)


class OlmoForCausalLM(nn.Module):
    """transformers' module tree: model.{embed_tokens, layers, norm},
    lm_head."""

    def __init__(self, layers=2):
        super().__init__()
        self.model = OlmoModel(layers)
        self.lm_head = nn.Linear(HIDDEN, 128, bias=False)


def test_coat_convert_takes_an_olmo_model(cpu_cache, monkeypatch):
    """Its layers convert; its embedding, final norm (which has no
    parameters) and LM head stay in high precision."""
    monkeypatch.setattr(convert_module, "_is_hf", lambda module: True)
    model = OlmoForCausalLM()
    keys = list(model.state_dict())
    coat.convert(model)
    report = model.coat_report
    assert list(report.converted) == ["model.layers.0", "model.layers.1"]
    assert report.converted["model.layers.0"] == (
        "OLMo layer, 3 programs (coat_norm_linear_ln_noaffine_h128_o256_rope6x32, "
        "coat_linear_residual_i128_h128, coat_mlp_ln_noaffine_h128_f256)")
    assert set(report.kept) == {"lm_head"}
    assert isinstance(model.model.norm, OlmoLayerNorm)
    assert all(isinstance(layer, DecoderLayer) for layer in model.model.layers)
    assert list(model.state_dict()) == keys


def test_a_layer_whose_norm_computes_something_else_is_refused(cpu_cache):
    """The norm's eps is checked against what it computes: an OlmoLayerNorm
    that uses another eps than it says (here: none, so 1e-5) is named."""
    class OtherEps(OlmoLayerNorm):
        def forward(self, hidden_states):
            return F.layer_norm(hidden_states.float(), self.normalized_shape, None, None,
                                eps=1e-3).to(hidden_states.dtype)

    layer = olmo_layer()
    layer.post_attention_layernorm = type("OlmoLayerNorm", (OtherEps,), {})(HIDDEN)
    with pytest.raises(ValueError, match=r"model.layers.0.post_attention_layernorm "
                                         r"\(OlmoLayerNorm\) does not compute a LayerNorm "
                                         r"without parameters with eps 1e-05"):
        convert_module._hf_layer("model.layers.0", layer, None)
