"""coat.hf.families without transformers: what is read from a decoder layer
(eps under each name, head_dim, kv heads, QK-norm kind, norm placement,
biases; GPT-NeoX's LayerNorms, fused q/k/v, rotary columns, parallel
residual, activation and dropouts; GPT-2's Conv1D projections, GELU form
and attention scale options) and what is refused, on stand-in modules
that have the structure and class names of transformers' layers;
spec_from_config on config dicts; the programs a spec gets
(coat.hf.layer.layer_programs). test_hf.py runs the real models where
transformers is installed."""

import math

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()
nn = torch.nn

from coat.hf import LayerSpec, UnsupportedLayer, inspect_layer, spec_from_config  # noqa: E402
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
    (lambda: named("BloomBlock")(), "is BloomBlock; coat.convert converts"),
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
    with pytest.raises(UnsupportedLayer, match="model_type 'bloom'"):
        spec_from_config(config("bloom"))
    with pytest.raises(UnsupportedLayer, match="mlp_bias"):
        spec_from_config(config("llama", mlp_bias=True))
    with pytest.raises(UnsupportedLayer, match="activation 'gelu_pytorch_tanh'"):
        spec_from_config(config("llama", hidden_act="gelu_pytorch_tanh"))


# -- GPT-NeoX ----------------------------------------------------------------

def neox_layer(hidden=64, heads=4, ffn=256, rotary_pct=0.25, parallel=True, act="gelu",
               eps=1e-5, mlp_eps=2e-5, attention_bias=True, attention_dropout=0.0,
               hidden_dropout=0.0, with_rotary_ndims=True):
    """A stand-in GPTNeoXLayer (transformers' names; by default the second
    LayerNorm's eps differs so that each is seen to be read)."""
    d = hidden // heads
    config = Config(num_attention_heads=heads, hidden_act=act, use_parallel_residual=parallel,
                    rope_parameters={"partial_rotary_factor": rotary_pct},
                    attention_dropout=attention_dropout)
    attn = named("GPTNeoXAttention")()
    attn.config, attn.head_size = config, d
    if with_rotary_ndims:
        attn.rotary_ndims = int(d * rotary_pct)
    attn.attention_dropout = attention_dropout
    attn.query_key_value = nn.Linear(hidden, 3 * hidden, bias=attention_bias)
    attn.dense = nn.Linear(hidden, hidden, bias=attention_bias)
    mlp = named("GPTNeoXMLP")()
    mlp.dense_h_to_4h = nn.Linear(hidden, ffn)
    mlp.dense_4h_to_h = nn.Linear(ffn, hidden)
    mlp.act = nn.GELU()
    out = named("GPTNeoXLayer")()
    out.use_parallel_residual = parallel
    out.input_layernorm = nn.LayerNorm(hidden, eps=eps)
    out.post_attention_layernorm = nn.LayerNorm(hidden, eps=mlp_eps)
    out.post_attention_dropout = nn.Dropout(hidden_dropout)
    out.post_mlp_dropout = nn.Dropout(hidden_dropout)
    out.attention, out.mlp = attn, mlp
    return out


def test_a_gpt_neox_layer_is_read_whole():
    spec = inspect_layer("gpt_neox.layers.2", neox_layer())
    assert (spec.family, spec.hidden, spec.ffn, spec.heads, spec.kv_heads, spec.head_dim) == \
        ("GPT-NeoX", 64, 256, 4, 4, 16)
    assert (spec.attn_norm_eps, spec.mlp_norm_eps) == (1e-5, 2e-5)
    assert (spec.norm, spec.mlp, spec.qkv_layout, spec.rotary_dim, spec.parallel_residual) == \
        ("layernorm", "gelu", "fused_per_head", 4, True)
    assert (spec.qkv_bias, spec.o_bias, spec.mlp_bias, spec.qk_norm) == (True, True, True, "none")
    first, second, third = layer_programs(spec)
    assert [c.name for c in (first, second, third)] == [
        "coat_norm_linear_ln_h64_o192_b", "coat_linear_residual_i64_h64_b",
        "coat_gelu_mlp_ln_h64_f256_b_separate_residual"]
    # Partial rotary: the attention core rotates, not the program.
    assert not first.rope and first.norm == "layernorm"
    assert (first.eps, third.eps) == (1e-5, 2e-5)


@pytest.mark.parametrize("make,kept", [
    (lambda: layer(), [True, False, True]),
    (lambda: layer(family="Olmo2", post=True, qk_norm="full", kv_heads=4,
                   norm_cls="Olmo2RMSNorm"), [False, False, True]),
    (lambda: neox_layer(), [True, False, True]),
])
def test_keep_gemm_operands_reaches_the_programs_that_derive_them(make, kept):
    """layer_programs(keep_gemm_operands=True): each program that would
    derive its backward GEMMs' FP8 operands again (a pre-norm, an MLP)
    becomes its _kg variant; the others (whose operands come from their
    arguments) stay as they are."""
    spec = inspect_layer("l", make())
    plain, kg = layer_programs(spec), layer_programs(spec, keep_gemm_operands=True)
    assert [c.name.endswith("_kg") for c in kg] == kept
    for p, k, on in zip(plain, kg, kept):
        assert k.name == p.name + ("_kg" if on else "")
        assert ("coat.keep_gemm_operands = true" in k.text()) == on
        assert "coat.keep_gemm_operands" not in p.text()


def test_gpt_neox_sequential_residual_and_attention_bias_off():
    spec = inspect_layer("l", neox_layer(parallel=False, attention_bias=False))
    assert not spec.parallel_residual and not spec.qkv_bias and not spec.o_bias
    assert spec.mlp_bias  # the MLP's Linears always have biases
    assert [c.name for c in layer_programs(spec)] == [
        "coat_norm_linear_ln_h64_o192", "coat_linear_residual_i64_h64",
        "coat_gelu_mlp_ln_h64_f256_b"]


@pytest.mark.parametrize("rotary_pct,rotary_dim", [(0.25, 4), (0.5, 8), (1.0, 16)])
def test_gpt_neox_rotary_columns_from_the_attention_or_its_config(rotary_pct, rotary_dim):
    assert inspect_layer("l", neox_layer(rotary_pct=rotary_pct)).rotary_dim == rotary_dim
    # Without rotary_ndims (an older attention) the config says it.
    assert inspect_layer("l", neox_layer(rotary_pct=rotary_pct,
                                         with_rotary_ndims=False)).rotary_dim == rotary_dim
    legacy = neox_layer(with_rotary_ndims=False)
    legacy.attention.config = Config(**{**legacy.attention.config.__dict__,
                                        "rope_parameters": None, "rotary_pct": rotary_pct})
    assert inspect_layer("l", legacy).rotary_dim == rotary_dim


def neox_with(**parts):
    """A stand-in GPT-NeoX layer with some modules replaced (dotted paths)."""
    out = neox_layer()
    for path, mod in parts.items():
        owner, _, name = path.replace("__", ".").rpartition(".")
        setattr(out.get_submodule(owner) if owner else out, name, mod)
    return out


@pytest.mark.parametrize("make,match", [
    (lambda: neox_layer(act="gelu_new"),
     r"gpt_neox.layers.0.mlp.act \(GELU\) does not compute GELU's tanh form, which "
     r"activation 'gelu_new' names"),
    (lambda: neox_layer(act="gelu_fast"),
     r"gpt_neox.layers.0.mlp: activation 'gelu_fast'; the GELU MLP program computes exact"),
    (lambda: neox_layer(act="gelu_pytorch_tanh"), "GELU's tanh form, which activation "
                                                  "'gelu_pytorch_tanh' names"),
    (lambda: neox_layer(act="relu"), "activation 'relu'"),
    (lambda: neox_with(mlp__act=nn.GELU(approximate="tanh")),
     r"gpt_neox.layers.0.mlp.act \(GELU\) does not compute GELU's exact form"),
    (lambda: neox_layer(hidden_dropout=0.1),
     r"gpt_neox.layers.0.post_attention_dropout: dropout 0.1; the converted layer has no "
     r"dropout"),
    (lambda: neox_layer(attention_dropout=0.1),
     r"gpt_neox.layers.0.attention.attention_dropout: dropout 0.1"),
    (lambda: neox_with(attention__attention_dropout=nn.Dropout(0.2)),
     r"attention.attention_dropout: dropout 0.2"),
    (lambda: neox_with(input_layernorm=nn.LayerNorm(64, elementwise_affine=False)),
     r"gpt_neox.layers.0.input_layernorm \(LayerNorm\) has no weight and bias"),
    (lambda: neox_with(post_attention_layernorm=norm("LlamaRMSNorm", 64)),
     r"gpt_neox.layers.0.post_attention_layernorm is LlamaRMSNorm, not a torch.nn.LayerNorm"),
    (lambda: neox_with(mlp__dense_4h_to_h=nn.Linear(256, 64, bias=False)),
     "one of dense_h_to_4h and dense_4h_to_h has a bias"),
    (lambda: neox_with(attention__query_key_value=nn.Linear(64, 128)),
     r"gpt_neox.layers.0.attention: query_key_value \(64 -> 128\) and dense"),
    (lambda: neox_with(mlp__dense_h_to_4h=nn.Conv1d(64, 256, 1)),
     r"gpt_neox.layers.0.mlp.dense_h_to_4h is Conv1d, not a torch.nn.Linear"),
    (lambda: neox_with(attention__rotary_ndims=5),
     "rotary_ndims 5; the converted layer takes a positive even number of rotary columns"),
])
def test_what_gpt_neox_layers_the_programs_cannot_express_is_named(make, match):
    with pytest.raises(UnsupportedLayer, match=match):
        inspect_layer("gpt_neox.layers.0", make())


def neox_config(**kw):
    base = dict(model_type="gpt_neox", hidden_size=64, intermediate_size=256,
                num_attention_heads=4, rotary_pct=0.25, layer_norm_eps=1e-5,
                hidden_act="gelu", use_parallel_residual=True)
    base.update(kw)
    return base


@pytest.mark.parametrize("parallel,attention_bias", [(True, True), (False, False)])
def test_gpt_neox_spec_from_config_is_what_the_layer_says(parallel, attention_bias):
    # A config has one layer_norm_eps for both norms.
    want = inspect_layer("l", neox_layer(parallel=parallel, attention_bias=attention_bias,
                                         eps=1e-6, mlp_eps=1e-6))
    cfg = neox_config(layer_norm_eps=1e-6, use_parallel_residual=parallel,
                      attention_bias=attention_bias)
    assert spec_from_config(cfg) == want
    assert spec_from_config(Config(**cfg)) == want


def test_gpt_neox_spec_from_config_reads_every_name_of_the_rotary_factor():
    # transformers 5 saves rope_parameters; earlier releases rotary_pct.
    five = neox_config(rope_parameters={"rope_theta": 10000.0, "partial_rotary_factor": 0.5})
    del five["rotary_pct"]
    assert spec_from_config(five).rotary_dim == 8
    assert spec_from_config(neox_config(rotary_pct=1.0)).rotary_dim == 16
    # GPTNeoXConfig's defaults: rotary 0.25, parallel residual, biases.
    bare = {k: v for k, v in neox_config().items()
            if k not in ("rotary_pct", "use_parallel_residual", "layer_norm_eps")}
    spec = spec_from_config(bare)
    assert (spec.rotary_dim, spec.parallel_residual, spec.qkv_bias, spec.attn_norm_eps) == \
        (4, True, True, 1e-5)


@pytest.mark.parametrize("kw,match", [
    (dict(hidden_act="gelu_fast"), "GPT-NeoX config: activation 'gelu_fast'"),
    (dict(hidden_dropout=0.1), "GPT-NeoX config: hidden_dropout 0.1"),
    (dict(attention_dropout=0.1), "GPT-NeoX config: attention_dropout 0.1"),
    (dict(rotary_pct=0.1875), "GPT-NeoX config: 3 rotary columns; the converted layer takes "
                              "a positive even number"),
    (dict(rotary_pct=0.0), "GPT-NeoX config: 0 rotary columns"),
])
def test_gpt_neox_spec_from_config_refuses_what_the_programs_cannot_express(kw, match):
    with pytest.raises(UnsupportedLayer, match=match):
        spec_from_config(neox_config(**kw))


def test_a_swiglu_spec_with_neox_parts_is_refused():
    spec = inspect_layer("l", layer())
    with pytest.raises(UnsupportedLayer, match="a SwiGLU layer takes RMSNorm"):
        layer_programs(LayerSpec(**{**spec.__dict__, "norm": "layernorm"}))
    neox = inspect_layer("l", neox_layer())
    with pytest.raises(UnsupportedLayer, match="a GELU MLP layer takes pre-norm LayerNorms"):
        layer_programs(LayerSpec(**{**neox.__dict__, "norm": "rmsnorm"}))


# -- GPT-2 ---------------------------------------------------------------------

def conv1d(nx, nf, bias=True):
    """A stand-in of transformers' Conv1D: weight [in, out], bias [out]."""
    m = named("Conv1D")()
    m.nf = nf
    m.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
    m.bias = nn.Parameter(torch.zeros(nf)) if bias else None
    return m


class NewGELUActivation(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh((2 / math.pi) ** 0.5 * (x + 0.044715 * x ** 3)))


def gpt2_block(hidden=64, heads=4, ffn=256, act="gelu_new", act_module=None, eps=1e-5,
               mlp_eps=2e-5, resid_pdrop=0.0, attn_pdrop=0.1, layer_idx=2, **config_kw):
    """A stand-in GPT2Block (transformers' names; the second LayerNorm's eps
    differs so that each is seen to be read; attention dropout, which the
    model's attention function applies, is allowed)."""
    config = Config(num_attention_heads=heads, n_head=heads, activation_function=act,
                    scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False,
                    reorder_and_upcast_attn=False, add_cross_attention=False)
    config.__dict__.update(config_kw)
    attn = named("GPT2Attention")()
    attn.config, attn.num_heads, attn.head_dim = config, heads, hidden // heads
    attn.split_size, attn.layer_idx, attn.is_cross_attention = hidden, layer_idx, False
    for name in ("scale_attn_weights", "scale_attn_by_inverse_layer_idx",
                 "reorder_and_upcast_attn"):
        setattr(attn, name, getattr(config, name))
    attn.c_attn, attn.c_proj = conv1d(hidden, 3 * hidden), conv1d(hidden, hidden)
    attn.attn_dropout, attn.resid_dropout = nn.Dropout(attn_pdrop), nn.Dropout(resid_pdrop)
    mlp = named("GPT2MLP")()
    mlp.c_fc, mlp.c_proj = conv1d(hidden, ffn), conv1d(ffn, hidden)
    mlp.act = act_module if act_module is not None else {
        "gelu_new": NewGELUActivation(), "gelu_pytorch_tanh": nn.GELU(approximate="tanh"),
        "gelu": nn.GELU()}.get(act, nn.ReLU())
    mlp.dropout = nn.Dropout(resid_pdrop)
    out = named("GPT2Block")()
    out.ln_1, out.ln_2 = nn.LayerNorm(hidden, eps=eps), nn.LayerNorm(hidden, eps=mlp_eps)
    out.attn, out.mlp = attn, mlp
    return out


@pytest.mark.parametrize("act,form", [("gelu_new", "tanh"), ("gelu_pytorch_tanh", "tanh"),
                                      ("gelu", "none")])
def test_a_gpt2_block_is_read_whole(act, form):
    spec = inspect_layer("transformer.h.2", gpt2_block(act=act))
    assert (spec.family, spec.hidden, spec.ffn, spec.heads, spec.kv_heads, spec.head_dim) == \
        ("GPT-2", 64, 256, 4, 4, 16)
    assert (spec.attn_norm_eps, spec.mlp_norm_eps) == (1e-5, 2e-5)
    assert (spec.norm, spec.mlp, spec.qkv_layout, spec.rotary_dim, spec.parallel_residual,
            spec.positions) == ("layernorm", "gelu", "separate", 0, False, "absolute")
    assert (spec.qkv_bias, spec.o_bias, spec.mlp_bias, spec.gelu_approximate) == \
        (True, True, True, form)
    assert (spec.scale_attn_weights, spec.scale_attn_by_inverse_layer_idx) == (True, False)
    first, second, third = layer_programs(spec)
    tanh = "_tanh" if form == "tanh" else ""
    assert [c.name for c in (first, second, third)] == [
        "coat_norm_linear_ln_h64_o192_b", "coat_linear_residual_i64_h64_b",
        "coat_gelu_mlp_ln_h64_f256_b" + tanh]
    assert not first.rope and third.approximate == form and third.residual == "input"
    assert (first.eps, third.eps) == (1e-5, 2e-5)
    if form == "tanh":
        assert 'coat.gelu %up_q {approximate = "tanh"}' in third.text()
        assert '{approximate = "tanh"} :' in third.text().split("coat.gelu_grad")[1]
    else:
        assert "approximate" not in third.text()


def test_gelu_form_is_part_of_the_mlp_program():
    """The two forms are two programs: another name, another text (so
    another content key)."""
    tanh = layer_programs(inspect_layer("l", gpt2_block()))[2]
    exact = layer_programs(inspect_layer("l", gpt2_block(act="gelu")))[2]
    assert tanh != exact and tanh.name != exact.name and tanh.text() != exact.text()
    with pytest.raises(ValueError, match="approximate 'sigmoid' is not none or tanh"):
        type(tanh)(64, 256, approximate="sigmoid").text()


@pytest.mark.parametrize("name,value", [("scale_attn_weights", False),
                                        ("scale_attn_by_inverse_layer_idx", True)])
def test_gpt2_attention_scale_options_are_read(name, value):
    """Module and config alike; the attention function gets the scale they
    give (test_hf_gpt2_layer.py)."""
    assert getattr(inspect_layer("l", gpt2_block(**{name: value})), name) == value
    assert getattr(spec_from_config(gpt2_config(**{name: value})), name) == value
    other = gpt2_block()
    setattr(other.attn, name, value)  # the module says otherwise than its config
    with pytest.raises(UnsupportedLayer, match=f"l.attn: {name} is {value!r} on the module"):
        inspect_layer("l", other)


def gpt2_with(**parts):
    """A stand-in GPT-2 block with some modules replaced (dotted paths)."""
    out = gpt2_block()
    for path, mod in parts.items():
        owner, _, name = path.replace("__", ".").rpartition(".")
        setattr(out.get_submodule(owner) if owner else out, name, mod)
    return out


def _cross_attention():
    block = gpt2_block(add_cross_attention=True)
    block.crossattention = named("GPT2Attention")()
    return block


def _disagreeing_scale():
    block = gpt2_block()
    block.attn.scale_attn_weights = False
    return block


@pytest.mark.parametrize("make,match", [
    (lambda: gpt2_block(reorder_and_upcast_attn=True),
     r"transformer.h.0.attn: reorder_and_upcast_attn .* is not supported"),
    (_cross_attention, r"transformer.h.0 \(GPT2Block\) has a cross-attention"),
    (lambda: gpt2_block(add_cross_attention=True),
     r"transformer.h.0 \(GPT2Block\) has a cross-attention \(add_cross_attention\)"),
    (lambda: gpt2_block(act="gelu_fast"), r"transformer.h.0.mlp: activation 'gelu_fast'"),
    (lambda: gpt2_block(act="relu"), "activation 'relu'"),
    # The module computes the other form than its config names: caught by the probe.
    (lambda: gpt2_block(act_module=nn.GELU()),
     r"transformer.h.0.mlp.act \(GELU\) does not compute GELU's tanh form, which "
     r"activation 'gelu_new' names"),
    (lambda: gpt2_block(act="gelu", act_module=NewGELUActivation()),
     r"mlp.act \(NewGELUActivation\) does not compute GELU's exact form"),
    (lambda: gpt2_block(resid_pdrop=0.1),
     r"transformer.h.0.attn.resid_dropout: dropout 0.1; the converted layer has no residual "
     r"dropout"),
    (lambda: gpt2_with(mlp__dropout=nn.Dropout(0.2)), r"transformer.h.0.mlp.dropout: dropout"),
    (lambda: gpt2_with(attn__c_attn=nn.Linear(64, 192)),
     r"transformer.h.0.attn.c_attn is Linear, not transformers' Conv1D"),
    (lambda: gpt2_with(mlp__c_fc=conv1d(64, 256, bias=False)),
     r"transformer.h.0.mlp.c_fc \(Conv1D\) has no bias"),
    (lambda: gpt2_with(attn__c_attn=conv1d(64, 128)),
     r"transformer.h.0.attn: c_attn \(\(64, 128\)\) and c_proj"),
    (lambda: gpt2_with(mlp__c_proj=conv1d(128, 64)),
     "transformer.h.0.mlp: projection shapes do not form"),
    (lambda: gpt2_with(ln_2=norm("LlamaRMSNorm", 64)),
     r"transformer.h.0.ln_2 is LlamaRMSNorm, not a torch.nn.LayerNorm"),
    (_disagreeing_scale, r"attn: scale_attn_weights is False on the module, True in its config"),
])
def test_what_gpt2_blocks_the_programs_cannot_express_is_named(make, match):
    with pytest.raises(UnsupportedLayer, match=match):
        inspect_layer("transformer.h.0", make())


def gpt2_config(**kw):
    base = dict(model_type="gpt2", n_embd=64, n_head=4, n_inner=256, n_layer=2,
                layer_norm_epsilon=1e-5, activation_function="gelu_new", resid_pdrop=0.0,
                attn_pdrop=0.1, embd_pdrop=0.1)
    base.update(kw)
    return base


@pytest.mark.parametrize("kw", [{}, dict(activation_function="gelu")])
def test_gpt2_spec_from_config_is_what_the_block_says(kw):
    # A config has one layer_norm_epsilon for both norms.
    want = inspect_layer("l", gpt2_block(act=kw.get("activation_function", "gelu_new"),
                                         mlp_eps=1e-5, **{k: v for k, v in kw.items()
                                                          if k != "activation_function"}))
    cfg = gpt2_config(**kw)
    assert spec_from_config(cfg) == want
    assert spec_from_config(Config(**cfg)) == want


def test_gpt2_spec_from_config_takes_gpt2configs_defaults():
    # n_inner None: 4 * n_embd; the activation gelu_new; eps 1e-5.
    bare = {k: v for k, v in gpt2_config(n_inner=None).items()
            if k not in ("activation_function", "layer_norm_epsilon")}
    spec = spec_from_config(bare)
    assert (spec.ffn, spec.gelu_approximate, spec.attn_norm_eps, spec.scale_attn_weights) == \
        (256, "tanh", 1e-5, True)


@pytest.mark.parametrize("kw,match", [
    (dict(activation_function="gelu_fast"), "GPT-2 config: activation 'gelu_fast'"),
    (dict(add_cross_attention=True), "GPT-2 config: add_cross_attention"),
    (dict(reorder_and_upcast_attn=True), "GPT-2 config: reorder_and_upcast_attn"),
    (dict(resid_pdrop=0.1), "GPT-2 config: resid_pdrop 0.1"),
    (dict(resid_pdrop=None), "GPT-2 config: resid_pdrop 0.1"),  # GPT2Config's default
    (dict(n_head=5), "GPT-2 config: n_embd 64 is not a multiple of n_head 5"),
])
def test_gpt2_spec_from_config_refuses_what_the_programs_cannot_express(kw, match):
    cfg = {k: v for k, v in gpt2_config(**kw).items() if v is not None}
    with pytest.raises(UnsupportedLayer, match=match):
        spec_from_config(cfg)


def test_the_layer_output_kind_follows_the_installed_layer():
    """A converted layer returns what the layer it replaces returns: its
    annotation says, or without one (GPTNeoXLayer) its return statements."""
    from coat.hf.layer import _returns_tuple

    class Annotated(nn.Module):
        def forward(self, x) -> torch.Tensor:
            return (x,)

    class AnnotatedTuple(nn.Module):
        def forward(self, x) -> "tuple[torch.Tensor]":
            return x

    class ReturnsTuple(nn.Module):  # transformers 4.x's GPTNeoXLayer
        def forward(self, x, output_attentions=False):
            outputs = (x,)
            if output_attentions:
                outputs += (None,)
            return outputs

    class ReturnsTensor(nn.Module):  # 5.x's
        def forward(self, x):
            x = x + 1
            return x

    assert [_returns_tuple(c()) for c in (Annotated, AnnotatedTuple, ReturnsTuple,
                                           ReturnsTensor)] == [False, True, True, False]


# -- OLMo-1 ------------------------------------------------------------------

class OlmoLayerNorm(nn.Module):
    """transformers' OlmoLayerNorm: no parameters, eps 1e-5 in its forward
    (not stored); ``eps`` given: stored (a variant that says it); ``uses``:
    the eps its forward uses (by default the one it says, or 1e-5)."""

    def __init__(self, hidden_size, eps=None, uses=None):
        super().__init__()
        self.normalized_shape = (hidden_size,)
        self.uses = uses if uses is not None else 1e-5 if eps is None else eps
        if eps is not None:
            self.eps = eps

    def forward(self, x):
        return torch.nn.functional.layer_norm(x.float(), self.normalized_shape, None, None,
                                              eps=self.uses).to(x.dtype)


def olmo_layer(hidden=64, heads=4, kv_heads=2, clip_qkv=None, attention_bias=False, **norm_kw):
    """A stand-in OlmoDecoderLayer: Llama's layout, OlmoLayerNorms, the
    config's clip_qkv."""
    out = layer(family="Olmo", hidden=hidden, heads=heads, kv_heads=kv_heads,
                qkv_bias=attention_bias, o_bias=attention_bias)
    out.self_attn.config.clip_qkv = clip_qkv
    out.input_layernorm = OlmoLayerNorm(hidden, **norm_kw)
    out.post_attention_layernorm = OlmoLayerNorm(hidden, **norm_kw)
    return out


def test_an_olmo_layer_is_read_whole():
    spec = inspect_layer("model.layers.1", olmo_layer(hidden=256, heads=4, kv_heads=2))
    assert (spec.family, spec.hidden, spec.ffn, spec.heads, spec.kv_heads, spec.head_dim) == \
        ("OLMo", 256, 160, 4, 2, 64)
    assert (spec.norm, spec.norm_affine, spec.norm_placement, spec.clip_qkv) == \
        ("layernorm", False, "pre", None)
    # OlmoLayerNorm keeps no eps: the one its forward uses, checked by
    # running it.
    assert spec.attn_norm_eps == spec.mlp_norm_eps == 1e-5
    first, second, third = layer_programs(spec)
    assert [c.name for c in (first, second, third)] == [
        "coat_norm_linear_ln_noaffine_h256_o512_rope6x64", "coat_linear_residual_i256_h256",
        "coat_mlp_ln_noaffine_h256_f160"]
    assert (first.norm, first.norm_affine, third.norm, third.norm_affine) == \
        ("layernorm", False, "layernorm", False)
    assert first.eps == third.eps == 1e-5


def test_olmo_attention_bias_and_head_sizes_the_rotation_cannot_take():
    spec = inspect_layer("l", olmo_layer(attention_bias=True))
    assert spec.qkv_bias and spec.o_bias
    first, second, _ = layer_programs(spec)
    # head_dim 16: the attention core rotates.
    assert first.bias and second.bias and not first.rope
    assert first.name == "coat_norm_linear_ln_noaffine_h64_o128_b"


def test_olmo_norm_eps_is_read_where_the_module_says_it():
    spec = inspect_layer("l", olmo_layer(eps=1e-6))
    assert spec.attn_norm_eps == spec.mlp_norm_eps == 1e-6
    assert layer_programs(spec)[2].eps == 1e-6


def test_olmo_clip_qkv_is_read_and_leaves_the_rotation_to_the_attention_core():
    spec = inspect_layer("l", olmo_layer(hidden=256, clip_qkv=8))
    assert spec.clip_qkv == 8.0
    # The clamp comes before RoPE: the program does not rotate.
    assert not layer_programs(spec)[0].rope
    assert layer_programs(inspect_layer("l", olmo_layer(hidden=256)))[0].rope


def olmo_with(**parts):
    out = olmo_layer()
    for name, mod in parts.items():
        setattr(out, name, mod)
    return out


class AffineOlmoLayerNorm(OlmoLayerNorm):
    def __init__(self, hidden_size):
        super().__init__(hidden_size)
        self.weight = nn.Parameter(torch.ones(hidden_size))


@pytest.mark.parametrize("make,match", [
    (lambda: olmo_layer(uses=1e-6),
     r"model.layers.0.input_layernorm \(OlmoLayerNorm\) does not compute a LayerNorm without "
     r"parameters with eps 1e-05"),
    (lambda: olmo_layer(eps=1e-5, uses=1e-3), "does not compute a LayerNorm without"),
    (lambda: olmo_with(post_attention_layernorm=norm("LlamaRMSNorm", 64)),
     r"model.layers.0.post_attention_layernorm is LlamaRMSNorm, not a LayerNorm without "
     r"parameters"),
    (lambda: olmo_with(input_layernorm=nn.LayerNorm(64)),
     r"model.layers.0.input_layernorm is LayerNorm, not a LayerNorm without parameters"),
    (lambda: olmo_with(input_layernorm=type("OlmoLayerNorm", (AffineOlmoLayerNorm,), {})(64)),
     r"model.layers.0.input_layernorm \(OlmoLayerNorm\) has parameters \(weight\)"),
    (lambda: olmo_with(input_layernorm=OlmoLayerNorm(32)),
     r"model.layers.0.input_layernorm \(OlmoLayerNorm\) normalises over \(32,\), not the 64"),
    (lambda: olmo_layer(clip_qkv=-1.0),
     r"model.layers.0.self_attn \(config.clip_qkv\): clip_qkv -1.0; the converted layer "
     r"clamps"),
    (lambda: olmo_layer(clip_qkv=0),
     r"model.layers.0.self_attn \(config.clip_qkv\): clip_qkv 0"),
])
def test_what_olmo_layers_the_programs_cannot_express_is_named(make, match):
    with pytest.raises(UnsupportedLayer, match=match):
        inspect_layer("model.layers.0", make())


def test_olmo_activation_and_mlp_bias_are_refused_as_llamas_are():
    act = olmo_layer()
    act.mlp.config = Config(hidden_act="gelu")
    with pytest.raises(UnsupportedLayer, match=r"model.layers.0.mlp: activation 'gelu'"):
        inspect_layer("model.layers.0", act)
    biased = olmo_layer()
    biased.mlp.down_proj = nn.Linear(160, 64, bias=True)
    with pytest.raises(UnsupportedLayer, match=r"model.layers.0.mlp.down_proj has a bias"):
        inspect_layer("model.layers.0", biased)


def olmo_config(**kw):
    base = dict(model_type="olmo", hidden_size=64, intermediate_size=160,
                num_attention_heads=4, num_key_value_heads=2, hidden_act="silu",
                attention_bias=False, clip_qkv=None)
    base.update(kw)
    return base


@pytest.mark.parametrize("kw", [{}, dict(clip_qkv=8.0), dict(attention_bias=True),
                                dict(num_key_value_heads=None)])
def test_olmo_spec_from_config_is_what_the_layer_says(kw):
    cfg = olmo_config(**kw)
    want = inspect_layer("l", olmo_layer(kv_heads=cfg["num_key_value_heads"] or 4,
                                         clip_qkv=cfg["clip_qkv"],
                                         attention_bias=cfg["attention_bias"]))
    assert spec_from_config(cfg) == want
    assert spec_from_config(Config(**cfg)) == want
    # OlmoConfig has no norm eps: OlmoLayerNorm's fixed 1e-5.
    assert want.attn_norm_eps == 1e-5 and "rms_norm_eps" not in cfg


@pytest.mark.parametrize("kw,match", [
    (dict(hidden_act="gelu"), "OLMo config: activation 'gelu'"),
    (dict(clip_qkv=-2.0), "OLMo config: clip_qkv -2.0"),
    (dict(mlp_bias=True), "OLMo config: MLP projections with biases"),
])
def test_olmo_spec_from_config_refuses_what_the_programs_cannot_express(kw, match):
    with pytest.raises(UnsupportedLayer, match=match):
        spec_from_config(olmo_config(**kw))


def test_a_layernorm_without_parameters_takes_the_pre_norm_swiglu_layer_only():
    spec = inspect_layer("l", olmo_layer())
    with pytest.raises(UnsupportedLayer, match="normalises after each sublayer takes RMSNorms"):
        layer_programs(LayerSpec(**{**spec.__dict__, "norm_placement": "post"}))
    with pytest.raises(UnsupportedLayer, match=r"a GELU MLP layer takes pre-norm LayerNorms "
                                               r"\(weight and bias\)"):
        layer_programs(LayerSpec(**{**spec.__dict__, "mlp": "gelu"}))
    with pytest.raises(UnsupportedLayer, match="a SwiGLU layer takes RMSNorm"):
        layer_programs(LayerSpec(**{**spec.__dict__, "norm_affine": True}))
    llama = inspect_layer("l", layer())
    with pytest.raises(UnsupportedLayer, match="a SwiGLU layer takes RMSNorm"):
        layer_programs(LayerSpec(**{**llama.__dict__, "norm_affine": False}))
