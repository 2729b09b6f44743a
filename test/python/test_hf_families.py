"""coat.hf.families without transformers: what is read from a decoder layer
(eps under each name, head_dim, kv heads, QK-norm kind, norm placement,
biases) and what is refused, on stand-in modules that have the structure
and class names of transformers' layers; spec_from_config on config dicts;
the programs a spec gets (coat.hf.layer.layer_programs). test_hf.py runs the
real models where transformers is installed."""

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()
nn = torch.nn

from coat.hf import UnsupportedLayer, inspect_layer, spec_from_config  # noqa: E402
from coat.hf.layer import layer_programs  # noqa: E402


def named(cls_name, base=nn.Module):
    """A class of that name (inspect_layer admits layers and norms by name)."""
    return type(cls_name, (base,), {})


class Config:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def norm(cls_name, width, eps_attr="variance_epsilon", eps=1e-6, bias=False):
    m = named(cls_name)()
    m.weight = nn.Parameter(torch.ones(width))
    setattr(m, eps_attr, eps)
    if bias:
        m.bias = nn.Parameter(torch.zeros(width))
    return m


def layer(family="Llama", hidden=64, ffn=160, heads=4, kv_heads=2, head_dim=None,
          qkv_bias=False, o_bias=False, qk_norm=None, post=False, act="silu", eps=1e-6,
          eps_attr="variance_epsilon", norm_cls=None):
    d = head_dim or hidden // heads
    config = Config(num_attention_heads=heads, num_key_value_heads=kv_heads, hidden_act=act)
    attn = named(f"{family}Attention")()
    attn.config, attn.head_dim = config, d
    attn.q_proj = nn.Linear(hidden, heads * d, bias=qkv_bias)
    attn.k_proj = nn.Linear(hidden, kv_heads * d, bias=qkv_bias)
    attn.v_proj = nn.Linear(hidden, kv_heads * d, bias=qkv_bias)
    attn.o_proj = nn.Linear(heads * d, hidden, bias=o_bias)
    norm_cls = norm_cls or f"{family}RMSNorm"
    if qk_norm == "head":
        attn.q_norm, attn.k_norm = norm(norm_cls, d, eps=eps), norm(norm_cls, d, eps=eps)
    elif qk_norm == "full":
        attn.q_norm = norm(norm_cls, heads * d, eps=eps)
        attn.k_norm = norm(norm_cls, kv_heads * d, eps=eps)
    mlp = named(f"{family}MLP")()
    mlp.config = config
    mlp.gate_proj = nn.Linear(hidden, ffn, bias=False)
    mlp.up_proj = nn.Linear(hidden, ffn, bias=False)
    mlp.down_proj = nn.Linear(ffn, hidden, bias=False)
    out = named(f"{family}DecoderLayer")()
    out.self_attn, out.mlp = attn, mlp
    if post:
        out.post_attention_layernorm = norm(norm_cls, hidden, eps_attr, eps)
        out.post_feedforward_layernorm = norm(norm_cls, hidden, eps_attr, 2 * eps)
    else:
        out.input_layernorm = norm(norm_cls, hidden, eps_attr, eps)
        out.post_attention_layernorm = norm(norm_cls, hidden, eps_attr, 2 * eps)
    return out


def test_a_llama_layer_is_read_whole():
    spec = inspect_layer("model.layers.3", layer())
    assert (spec.family, spec.hidden, spec.ffn, spec.heads, spec.kv_heads, spec.head_dim) == \
        ("Llama", 64, 160, 4, 2, 16)
    # Each norm's eps, the second's doubled here: they are read, not assumed.
    assert (spec.attn_norm_eps, spec.mlp_norm_eps) == (1e-6, 2e-6)
    assert (spec.norm_placement, spec.qk_norm, spec.qkv_bias, spec.o_bias) == \
        ("pre", "none", False, False)


@pytest.mark.parametrize("attr", ["variance_epsilon", "eps", "epsilon"])
def test_eps_is_read_under_each_name(attr):
    assert inspect_layer("l", layer(eps_attr=attr, eps=3e-5)).attn_norm_eps == 3e-5


def test_head_dim_comes_from_the_attention_not_hidden_over_heads():
    spec = inspect_layer("l", layer(family="Qwen3", hidden=64, heads=4, kv_heads=2,
                                    head_dim=32, qk_norm="head"))
    assert spec.head_dim == 32 and spec.q_features == 128 and spec.qk_norm == "head"
    norm_linear = layer_programs(spec)[0]
    assert norm_linear.out == (4 + 2 * 2) * 32
    # A QK-norm runs before the rotation, in the attention core: the program
    # does not rotate.
    assert not norm_linear.rope


def test_olmo2_norms_after_each_sublayer_and_full_qk_norm():
    spec = inspect_layer("l", layer(family="Olmo2", post=True, qk_norm="full", kv_heads=4,
                                    norm_cls="Olmo2RMSNorm"))
    assert (spec.family, spec.norm_placement, spec.qk_norm) == ("OLMo2", "post", "full")
    names = [c.name for c in layer_programs(spec)]
    assert names == ["coat_linear_i64_o192", "coat_linear_norm_residual_i64_h64",
                     "coat_postnorm_mlp_h64_f160"]


def test_qwen2_biases_go_into_the_programs():
    spec = inspect_layer("l", layer(family="Qwen2", qkv_bias=True))
    assert spec.qkv_bias and not spec.o_bias
    first, second, _ = layer_programs(spec)
    assert first.bias and not second.bias
    spec = inspect_layer("l", layer(qkv_bias=True, o_bias=True))  # attention_bias
    assert layer_programs(spec)[1].bias


def test_rope_is_in_the_program_where_the_head_size_allows():
    # head_dim 64: d/2 a multiple of 16.
    assert layer_programs(inspect_layer("l", layer(hidden=256, heads=4, kv_heads=4)))[0].rope
    # head_dim 16: the attention core rotates.
    assert not layer_programs(inspect_layer("l", layer()))[0].rope


@pytest.mark.parametrize("make,match", [
    (lambda: named("GPTNeoXLayer")(), "is GPTNeoXLayer; coat.convert converts"),
    (lambda: layer(act="gelu"), "activation 'gelu'"),
    (lambda: layer(norm_cls="GemmaRMSNorm"), "GemmaRMSNorm, not an RMSNorm whose numerics"),
    (lambda: layer(family="Mixtral"), "MixtralDecoderLayer; coat.convert converts"),
])
def test_what_the_programs_cannot_express_is_named(make, match):
    with pytest.raises(UnsupportedLayer, match=match):
        inspect_layer("model.layers.0", make())


def test_refusals_name_the_module_and_the_feature():
    moe = layer()
    moe.block_sparse_moe = nn.Module()
    with pytest.raises(UnsupportedLayer, match=r"model.layers.0 \(LlamaDecoderLayer\) has a "
                                               r"mixture-of-experts MLP"):
        inspect_layer("model.layers.0", moe)
    mixed = layer()
    mixed.self_attn.k_proj = nn.Linear(64, 32, bias=True)
    with pytest.raises(UnsupportedLayer, match="some of the q/k/v projections have biases"):
        inspect_layer("model.layers.0", mixed)
    biased_mlp = layer()
    biased_mlp.mlp.up_proj = nn.Linear(64, 160, bias=True)
    with pytest.raises(UnsupportedLayer, match=r"model.layers.0.mlp.up_proj has a bias"):
        inspect_layer("model.layers.0", biased_mlp)
    biased_norm = layer()
    biased_norm.input_layernorm = norm("LlamaRMSNorm", 64, bias=True)
    with pytest.raises(UnsupportedLayer, match=r"model.layers.0.input_layernorm .* has a bias"):
        inspect_layer("model.layers.0", biased_norm)
    olmo_o_bias = inspect_layer("l", layer(family="Olmo2", post=True, o_bias=True,
                                           norm_cls="Olmo2RMSNorm"))
    with pytest.raises(UnsupportedLayer, match="o-projection bias before the post-attention"):
        layer_programs(olmo_o_bias)


def config(model_type, **kw):
    base = dict(model_type=model_type, hidden_size=64, intermediate_size=160,
                num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
                hidden_act="silu")
    base.update(kw)
    return base


@pytest.mark.parametrize("model_type,family,qk_norm,placement,bias", [
    ("llama", "Llama", "none", "pre", False), ("mistral", "Mistral", "none", "pre", False),
    ("qwen2", "Qwen2", "none", "pre", True), ("qwen3", "Qwen3", "head", "pre", False),
    ("olmo2", "OLMo2", "full", "post", False)])
def test_spec_from_config(model_type, family, qk_norm, placement, bias):
    spec = spec_from_config(config(model_type))
    assert (spec.family, spec.qk_norm, spec.norm_placement, spec.qkv_bias) == \
        (family, qk_norm, placement, bias)
    assert (spec.hidden, spec.ffn, spec.heads, spec.kv_heads, spec.head_dim) == \
        (64, 160, 4, 2, 16)
    assert spec.attn_norm_eps == spec.mlp_norm_eps == 1e-6
    # An object with attributes reads the same as the dict.
    assert spec_from_config(Config(**config(model_type))) == spec


def test_spec_from_config_reads_head_dim_and_refuses_what_it_cannot_take():
    assert spec_from_config(config("qwen3", head_dim=32)).head_dim == 32
    assert spec_from_config(config("llama", num_key_value_heads=None)).kv_heads == 4
    with pytest.raises(UnsupportedLayer, match="model_type 'gpt_neox'"):
        spec_from_config(config("gpt_neox"))
    with pytest.raises(UnsupportedLayer, match="mlp_bias"):
        spec_from_config(config("llama", mlp_bias=True))
    with pytest.raises(UnsupportedLayer, match="activation 'gelu_pytorch_tanh'"):
        spec_from_config(config("llama", hidden_act="gelu_pytorch_tanh"))
