"""What coat.convert reads from a Hugging Face decoder layer: the family's
structure and every hyperparameter the compiled programs depend on, taken
from the modules themselves (and their config), never assumed.

A layer is accepted only when each part is one whose numerics the programs
reproduce: a known decoder-layer class, RMSNorm classes that compute
``weight * x / rms(x)`` (Gemma's ``1 + weight`` would not), a SwiGLU MLP with
SiLU; for OLMo-1, its LayerNorm without parameters (probed for its eps); for
GPT-NeoX, ``torch.nn.LayerNorm`` with weight and bias, the fused q/k/v
projection, and a non-gated MLP; for GPT-2, those LayerNorms and
transformers' ``Conv1D`` projections ([in, out] weights with a bias;
c_attn's output is q, k and v stacked); for both, GELU in the form the
config names (exact, or the tanh form of ``gelu_new``), checked on probe
values.
Anything else raises :class:`UnsupportedLayer` naming the module and the
missing feature, so nothing silently keeps BF16 or runs with the wrong
hyperparameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

#: Decoder-layer classes by family. Their attention, MLP and norms are
#: checked part by part below; the class name only admits the layout.
PRE_NORM_LAYERS = {
    "LlamaDecoderLayer": "Llama",
    "MistralDecoderLayer": "Mistral",
    "Qwen2DecoderLayer": "Qwen2",
    "Qwen3DecoderLayer": "Qwen3",
    "OlmoDecoderLayer": "OLMo",
}
#: Pre-norm layers whose norms are LayerNorms without parameters (OLMo-1):
#: Llama's layout otherwise, and OLMo's optional clip_qkv.
NONAFFINE_NORM_LAYERS = {"OlmoDecoderLayer"}
POST_NORM_LAYERS = {"Olmo2DecoderLayer": "OLMo2"}
#: LayerNorm, one fused q/k/v projection, GELU MLP, (parallel) residual.
NEOX_LAYERS = {"GPTNeoXLayer": "GPT-NeoX"}
#: LayerNorm, Conv1D projections (q, k, v stacked in c_attn's output), GELU
#: MLP, sequential residual; absolute position embeddings (outside the
#: blocks), no RoPE.
GPT2_LAYERS = {"GPT2Block": "GPT-2"}

#: RMSNorm classes computing ``weight * (x / sqrt(mean(x^2) + eps))``
#: (OLMo2 multiplies before the cast back, Llama after: both are the same
#: function of the bf16 input up to that rounding).
RMS_NORMS = {"LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "Olmo2RMSNorm",
             "RMSNorm"}

#: LayerNorm classes without parameters, computing ``(x - mean(x)) /
#: sqrt(var(x) + eps)`` in f32, each with the eps its forward uses where the
#: module does not store one: transformers' OlmoLayerNorm passes eps=1e-5 to
#: F.layer_norm and keeps only ``normalized_shape``. The eps is checked
#: against what the module computes (:func:`nonaffine_layer_norm_eps`).
NONAFFINE_LAYER_NORMS = {"OlmoLayerNorm": 1e-5}

#: Features a decoder layer may have that no program expresses, by the
#: attribute that reveals them.
_UNSUPPORTED_FEATURES = {
    "block_sparse_moe": "mixture-of-experts MLP",
    "experts": "mixture-of-experts MLP",
    "cross_attn": "cross-attention",
    "encoder_attn": "cross-attention",
    "crossattention": "cross-attention",
}


class UnsupportedLayer(ValueError):
    """A decoder layer (or a part of one) the compiled programs cannot express."""


@dataclass(frozen=True)
class LayerSpec:
    """One decoder layer as the programs see it."""

    family: str
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    #: eps of the norm before attention (pre-norm) or after it (OLMo2)
    attn_norm_eps: float
    mlp_norm_eps: float
    #: "pre": x + attn(norm(x)); "post" (OLMo2): x + norm(attn(x))
    norm_placement: str = "pre"
    #: "none", "head" (Qwen3: RMSNorm over each head) or "full" (OLMo2:
    #: over the whole q and k projections); applied in the attention core
    qk_norm: str = "none"
    #: biases of the q/k/v projections (Qwen2; ``attention_bias``), added in
    #: the GEMM's epilogue, and of the o-projection (``attention_bias``)
    qkv_bias: bool = False
    o_bias: bool = False
    #: "rmsnorm" (weight) or "layernorm" (GPT-NeoX: weight and bias; OLMo-1:
    #: neither, ``norm_affine`` False)
    norm: str = "rmsnorm"
    #: "swiglu" (gate, up, down) or "gelu" (GPT-NeoX: up, exact GELU, down)
    mlp: str = "swiglu"
    #: biases of the MLP's projections (GPT-NeoX: both or neither)
    mlp_bias: bool = False
    #: "separate": q, k and v projections stacked [q; k; v]; "fused_per_head"
    #: (GPT-NeoX's query_key_value): rows [heads, (q, k, v), head_dim]
    qkv_layout: str = "separate"
    #: the leading columns of each head that RoPE rotates; 0: all head_dim
    rotary_dim: int = 0
    #: GPT-NeoX's use_parallel_residual: x + attn(ln1(x)) + mlp(ln2(x))
    #: rather than h = x + attn(ln1(x)); h + mlp(ln2(h))
    parallel_residual: bool = False
    #: whether the norms have parameters (False: OLMo-1's LayerNorm)
    norm_affine: bool = True
    #: OLMo's clip_qkv: q, k and v clamped to [-clip_qkv, clip_qkv] after
    #: the projections, before RoPE (in the attention core); None: no clamp
    clip_qkv: Optional[float] = None
    #: GELU's form in a "gelu" MLP, as torch names it: "none" (exact, erf)
    #: or "tanh" (GPT-2's gelu_new)
    gelu_approximate: str = "none"
    #: "rotary" (RoPE in the attention) or "absolute" (GPT-2: position
    #: embeddings added before the first layer; none in the layers)
    positions: str = "rotary"
    #: GPT-2's attention scale: 1/sqrt(head_dim) with scale_attn_weights,
    #: further divided by layer_idx + 1 with scale_attn_by_inverse_layer_idx
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False

    @property
    def q_features(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_features(self) -> int:
        return self.kv_heads * self.head_dim


def _where(qual: str, path: str) -> str:
    return f"{qual}.{path}" if qual else path


def _linear(qual: str, owner: torch.nn.Module, name: str, *, bias_ok: bool = False):
    mod = getattr(owner, name, None)
    where = _where(qual, name)
    if not isinstance(mod, torch.nn.Linear):
        raise UnsupportedLayer(f"{where} is {type(mod).__name__}, not a torch.nn.Linear")
    if mod.bias is not None and not bias_ok:
        raise UnsupportedLayer(f"{where} has a bias; the compiled programs of this layer take "
                               "bias-free projections")
    return mod


def norm_eps(qual: str, norm: Optional[torch.nn.Module]) -> float:
    """The eps of an RMSNorm module, under whichever name its class uses."""
    if norm is None:
        raise UnsupportedLayer(f"{qual}: missing")
    cls = type(norm).__name__
    if cls not in RMS_NORMS:
        raise UnsupportedLayer(f"{qual} is {cls}, not an RMSNorm whose numerics the programs "
                               f"reproduce ({', '.join(sorted(RMS_NORMS))})")
    eps = None
    for attr in ("variance_epsilon", "eps", "epsilon"):
        eps = getattr(norm, attr, None)
        if eps is not None:
            break
    if eps is None:
        raise UnsupportedLayer(f"{qual} ({cls}) does not say its eps")
    w = getattr(norm, "weight", None)
    if not isinstance(w, torch.nn.Parameter) or w.dim() != 1:
        raise UnsupportedLayer(f"{qual} ({cls}) has no 1-D weight Parameter")
    if getattr(norm, "bias", None) is not None:
        raise UnsupportedLayer(f"{qual} ({cls}) has a bias")
    return float(eps)


def layer_norm_eps(qual: str, norm: Optional[torch.nn.Module]) -> float:
    """The eps of a torch.nn.LayerNorm with weight and bias over one
    dimension (what coat.layernorm computes)."""
    if norm is None:
        raise UnsupportedLayer(f"{qual}: missing")
    cls = type(norm).__name__
    if not isinstance(norm, torch.nn.LayerNorm):
        raise UnsupportedLayer(f"{qual} is {cls}, not a torch.nn.LayerNorm")
    if len(norm.normalized_shape) != 1:
        raise UnsupportedLayer(f"{qual} ({cls}) normalises over {tuple(norm.normalized_shape)}, "
                               "not one dimension")
    if not isinstance(norm.weight, torch.nn.Parameter) or \
            not isinstance(getattr(norm, "bias", None), torch.nn.Parameter):
        raise UnsupportedLayer(f"{qual} ({cls}) has no weight and bias (elementwise_affine, "
                               "bias); the programs' LayerNorm takes both")
    return float(norm.eps)


def _probe_input(width: int) -> torch.Tensor:
    """Rows whose spread is comparable to a norm's eps (and rows where it is
    not), off zero mean: [6, width] f32."""
    g = torch.Generator().manual_seed(0)
    spread = torch.tensor([1e-3, 2e-3, 4e-3, 1e-2, 0.1, 1.0])[:, None]
    return (torch.randn(6, width, generator=g) + 2.0) * spread


def nonaffine_layer_norm_eps(qual: str, norm: Optional[torch.nn.Module], width: int) -> float:
    """The eps of a LayerNorm without parameters over ``width`` features
    (OLMo-1's): the module's own (``eps``, ``variance_epsilon`` or
    ``epsilon``) where it stores one, else the one its class is known to use
    (:data:`NONAFFINE_LAYER_NORMS`); either way checked by running the
    module on rows whose spread is comparable to eps, so a module computing
    anything else (another eps, an RMSNorm, an affine transform) is refused
    rather than converted with the wrong numerics."""
    if norm is None:
        raise UnsupportedLayer(f"{qual}: missing")
    cls = type(norm).__name__
    if cls not in NONAFFINE_LAYER_NORMS:
        raise UnsupportedLayer(f"{qual} is {cls}, not a LayerNorm without parameters whose "
                               f"numerics the programs reproduce "
                               f"({', '.join(sorted(NONAFFINE_LAYER_NORMS))})")
    params = [n for n, _ in norm.named_parameters()]
    if params:
        raise UnsupportedLayer(f"{qual} ({cls}) has parameters ({', '.join(params)}); the "
                               "converted layer's LayerNorm here takes none")
    shape = tuple(getattr(norm, "normalized_shape", ()) or ())
    if shape != (width,):
        raise UnsupportedLayer(f"{qual} ({cls}) normalises over {shape}, not the {width} "
                               "hidden features")
    eps = None
    for attr in ("eps", "variance_epsilon", "epsilon"):
        eps = getattr(norm, attr, None)
        if eps is not None:
            break
    eps = float(NONAFFINE_LAYER_NORMS[cls] if eps is None else eps)
    x = _probe_input(width)
    try:
        with torch.no_grad(), torch.autocast("cpu", enabled=False):
            got = norm(x).float().cpu()
    except Exception as e:  # noqa: BLE001 - any failure: not what the program computes
        raise UnsupportedLayer(f"{qual} ({cls}) could not be probed on CPU f32 rows "
                               f"({type(e).__name__}: {e})") from None
    want = torch.nn.functional.layer_norm(x, (width,), None, None, eps)
    if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-3, atol=1e-4):
        raise UnsupportedLayer(f"{qual} ({cls}) does not compute a LayerNorm without "
                               f"parameters with eps {eps:g} (checked on probe rows); the "
                               "program would compute another function")
    return eps


def _clip_qkv(where: str, value) -> Optional[float]:
    if value is None:
        return None
    try:
        clip = float(value)
    except (TypeError, ValueError):
        clip = float("nan")
    if not clip > 0 or clip == float("inf"):
        raise UnsupportedLayer(f"{where}: clip_qkv {value!r}; the converted layer clamps q, k "
                               "and v to [-clip_qkv, clip_qkv], a positive number")
    return clip


def _dropout_p(qual: str, module) -> float:
    """The probability of a dropout given as a module or a number."""
    if module is None:
        return 0.0
    if isinstance(module, torch.nn.Dropout):
        return float(module.p)
    if isinstance(module, (int, float)):
        return float(module)
    raise UnsupportedLayer(f"{qual} is {type(module).__name__}, not a dropout probability")


#: GPT-2 and GPT-NeoX activations (activation_function, hidden_act) by the
#: GELU form the program computes for them (coat.gelu's approximate): exact
#: "gelu", and the tanh form of "gelu_new" and "gelu_pytorch_tanh" (torch's
#: gelu(approximate="tanh")). Others ("gelu_fast", "quick_gelu", "relu",
#: ...) are refused.
GELU_FORMS = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}


def _gelu_form(where: str, act: Optional[str], module: Optional[torch.nn.Module]) -> str:
    """The GELU form of activation ``act`` (:data:`GELU_FORMS`), checked on
    the activation module itself where there is one: run on probe values,
    it must compute that form (erf and tanh differ by up to 5e-4 there), so
    a module that computes another function is refused."""
    if act not in GELU_FORMS:
        raise UnsupportedLayer(f"{where}: activation {act!r}; the GELU MLP program computes "
                               "exact GELU ('gelu') or its tanh form ('gelu_new', "
                               "'gelu_pytorch_tanh')")
    form = GELU_FORMS[act]
    if module is None:
        return form
    x = torch.linspace(-6.0, 6.0, 241)
    try:
        with torch.no_grad(), torch.autocast("cpu", enabled=False):
            got = module(x).float().cpu()
    except Exception as e:  # noqa: BLE001 - any failure: not what the program computes
        raise UnsupportedLayer(f"{where}.act ({type(module).__name__}) could not be probed on "
                               f"CPU f32 values ({type(e).__name__}: {e})") from None
    want = torch.nn.functional.gelu(x, approximate=form)
    if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-5, atol=2e-5):
        raise UnsupportedLayer(f"{where}.act ({type(module).__name__}) does not compute GELU's "
                               f"{'exact' if form == 'none' else form} form, which activation "
                               f"{act!r} names (checked on probe values)")
    return form


def _conv1d(qual: str, owner: torch.nn.Module, name: str):
    """transformers' Conv1D ``name`` of ``owner``: an [in, out] weight and
    an [out] bias, ``x @ weight + bias``."""
    mod = getattr(owner, name, None)
    where = _where(qual, name)
    cls = type(mod).__name__
    w, b = getattr(mod, "weight", None), getattr(mod, "bias", None)
    if cls != "Conv1D" or not isinstance(w, torch.nn.Parameter) or w.dim() != 2:
        raise UnsupportedLayer(f"{where} is {cls}, not transformers' Conv1D (an [in, out] "
                               "weight)")
    if not isinstance(b, torch.nn.Parameter) or tuple(b.shape) != (w.shape[1],):
        raise UnsupportedLayer(f"{where} (Conv1D) has no bias of its {w.shape[1]} outputs")
    return mod


def _attention_flag(where: str, attn, config, name: str, default: bool) -> bool:
    """A GPT-2 attention option: the config's (which the attention module
    copies); the module's own where the config has none. Where both say and
    differ, refused."""
    mine, theirs = getattr(attn, name, None), getattr(config, name, None)
    if mine is not None and theirs is not None and bool(mine) != bool(theirs):
        raise UnsupportedLayer(f"{where}: {name} is {mine!r} on the module, {theirs!r} in its "
                               "config")
    value = theirs if theirs is not None else mine
    return default if value is None else bool(value)


def _gpt2_spec(qual: str, layer: torch.nn.Module) -> LayerSpec:
    """A GPT2Block: ln_1, attn (c_attn: q, k and v stacked; c_proj), ln_2,
    mlp (c_fc, GELU, c_proj), all Conv1D with biases, sequential residual.
    The attention core and its dropout stay the model's, at the scale
    scale_attn_weights and scale_attn_by_inverse_layer_idx give."""
    cls = type(layer).__name__
    attn = getattr(layer, "attn", None)
    mlp = getattr(layer, "mlp", None)
    if attn is None or mlp is None:
        raise UnsupportedLayer(f"{qual} ({cls}) has no attn or mlp")
    at, ml = _where(qual, "attn"), _where(qual, "mlp")
    config = getattr(attn, "config", None)
    if getattr(attn, "is_cross_attention", False) or _config_value(config, "add_cross_attention"):
        raise UnsupportedLayer(f"{qual} ({cls}) has a cross-attention (add_cross_attention), "
                               "which the compiled programs do not express")
    if _attention_flag(at, attn, config, "reorder_and_upcast_attn", False):
        raise UnsupportedLayer(f"{at}: reorder_and_upcast_attn (the f32, reordered attention "
                               "scores of GPT2Attention) is not supported; the converted layer "
                               "runs the model's attention function")
    heads = getattr(attn, "num_heads", None) or _config_value(config, "num_attention_heads",
                                                               "n_head")
    head_dim = getattr(attn, "head_dim", None)
    if heads is None or head_dim is None:
        raise UnsupportedLayer(f"{at} does not say its head count and head_dim (num_heads, "
                               "head_dim)")
    c_attn, c_proj = _conv1d(at, attn, "c_attn"), _conv1d(at, attn, "c_proj")
    hidden = c_attn.weight.shape[0]
    if heads * head_dim != hidden or c_attn.weight.shape[1] != 3 * hidden or \
            tuple(c_proj.weight.shape) != (hidden, hidden):
        raise UnsupportedLayer(f"{at}: c_attn ({tuple(c_attn.weight.shape)}) and c_proj "
                               f"({tuple(c_proj.weight.shape)}) do not match {heads} heads of "
                               f"{head_dim} (pruned heads are not supported)")
    if getattr(attn, "pruned_heads", None):
        raise UnsupportedLayer(f"{at}: pruned heads are not supported")
    c_fc, c_out = _conv1d(ml, mlp, "c_fc"), _conv1d(ml, mlp, "c_proj")
    ffn = c_fc.weight.shape[1]
    if c_fc.weight.shape[0] != hidden or tuple(c_out.weight.shape) != (ffn, hidden):
        raise UnsupportedLayer(f"{ml}: projection shapes do not form a {hidden} -> {ffn} -> "
                               f"{hidden} MLP")
    form = _gelu_form(ml, _config_value(config, "activation_function"),
                      getattr(mlp, "act", None))
    # The residual dropouts would sit inside the programs; the attention's
    # runs in the model's attention function, as before.
    for where, dropout in ((f"{at}.resid_dropout", getattr(attn, "resid_dropout", None)),
                           (f"{ml}.dropout", getattr(mlp, "dropout", None))):
        p = _dropout_p(where, dropout)
        if p != 0.0:
            raise UnsupportedLayer(f"{where}: dropout {p}; the converted layer has no residual "
                                   "dropout (resid_pdrop must be 0)")
    e1 = layer_norm_eps(_where(qual, "ln_1"), getattr(layer, "ln_1", None))
    e2 = layer_norm_eps(_where(qual, "ln_2"), getattr(layer, "ln_2", None))
    return LayerSpec(family=GPT2_LAYERS[cls], hidden=hidden, ffn=ffn, heads=heads,
                     kv_heads=heads, head_dim=head_dim, attn_norm_eps=e1, mlp_norm_eps=e2,
                     qkv_bias=True, o_bias=True, norm="layernorm", mlp="gelu", mlp_bias=True,
                     gelu_approximate=form, positions="absolute",
                     scale_attn_weights=_attention_flag(at, attn, config,
                                                        "scale_attn_weights", True),
                     scale_attn_by_inverse_layer_idx=_attention_flag(
                         at, attn, config, "scale_attn_by_inverse_layer_idx", False))


def _neox_rotary_dim(config, head_dim: int, get=None) -> int:
    """rotary_ndims of a GPT-NeoX attention: int(head_dim * the partial
    rotary factor), the factor under whichever name the config has it
    (``rope_parameters["partial_rotary_factor"]`` since transformers 5,
    which takes it from ``rotary_pct`` where that is given; ``rotary_pct``
    before; 0.25 when neither says)."""
    get = get or (lambda k: getattr(config, k, None))
    params = get("rope_parameters")
    factor = params.get("partial_rotary_factor") if isinstance(params, dict) else None
    for name in ("rotary_pct", "partial_rotary_factor"):
        if factor is None:
            factor = get(name)
    return int(head_dim * (0.25 if factor is None else float(factor)))


def _neox_spec(qual: str, layer: torch.nn.Module) -> LayerSpec:
    """A GPTNeoXLayer: LayerNorms with bias, the fused query_key_value and
    dense projections, the dense_h_to_4h / dense_4h_to_h MLP with GELU."""
    cls = type(layer).__name__
    attn = getattr(layer, "attention", None)
    mlp = getattr(layer, "mlp", None)
    if attn is None or mlp is None:
        raise UnsupportedLayer(f"{qual} ({cls}) has no attention or mlp")
    at, ml = _where(qual, "attention"), _where(qual, "mlp")
    config = getattr(attn, "config", None)
    heads = _config_value(config, "num_attention_heads")
    head_dim = getattr(attn, "head_size", None)
    if heads is None or head_dim is None:
        raise UnsupportedLayer(f"{at} does not say its head count and head size "
                               "(config.num_attention_heads, head_size)")
    qkv = _linear(at, attn, "query_key_value", bias_ok=True)
    dense = _linear(at, attn, "dense", bias_ok=True)
    hidden = qkv.in_features
    if qkv.out_features != 3 * heads * head_dim or dense.in_features != heads * head_dim or \
            dense.out_features != hidden:
        raise UnsupportedLayer(f"{at}: query_key_value ({qkv.in_features} -> "
                               f"{qkv.out_features}) and dense ({dense.in_features} -> "
                               f"{dense.out_features}) do not match {heads} heads of {head_dim}")
    rotary_dim = getattr(attn, "rotary_ndims", None)
    if rotary_dim is None:
        rotary_dim = _neox_rotary_dim(config, head_dim)
    if not 0 < rotary_dim <= head_dim or rotary_dim % 2:
        raise UnsupportedLayer(f"{at}: rotary_ndims {rotary_dim}; the converted layer takes a "
                               f"positive even number of rotary columns, at most head_size "
                               f"{head_dim}")

    up = _linear(ml, mlp, "dense_h_to_4h", bias_ok=True)
    down = _linear(ml, mlp, "dense_4h_to_h", bias_ok=True)
    ffn = up.out_features
    if up.in_features != hidden or down.in_features != ffn or down.out_features != hidden:
        raise UnsupportedLayer(f"{ml}: projection shapes do not form a {hidden} -> {ffn} -> "
                               f"{hidden} MLP")
    if (up.bias is None) != (down.bias is None):
        raise UnsupportedLayer(f"{ml}: one of dense_h_to_4h and dense_4h_to_h has a bias, the "
                               "other not; the GELU MLP program takes both or neither")
    form = _gelu_form(ml, _config_value(config, "hidden_act"), getattr(mlp, "act", None))

    dropouts = {f"{at}.attention_dropout": getattr(attn, "attention_dropout", None),
                _where(qual, "post_attention_dropout"): getattr(layer, "post_attention_dropout",
                                                                None),
                _where(qual, "post_mlp_dropout"): getattr(layer, "post_mlp_dropout", None)}
    for where, dropout in dropouts.items():
        p = _dropout_p(where, dropout)
        if p != 0.0:
            raise UnsupportedLayer(f"{where}: dropout {p}; the converted layer has no dropout "
                                   "(attention_dropout and hidden_dropout must be 0)")
    parallel = getattr(layer, "use_parallel_residual", None)
    if parallel is None:
        parallel = _config_value(config, "use_parallel_residual")
    if parallel is None:
        raise UnsupportedLayer(f"{qual} ({cls}) does not say use_parallel_residual")
    e1 = layer_norm_eps(_where(qual, "input_layernorm"), getattr(layer, "input_layernorm", None))
    e2 = layer_norm_eps(_where(qual, "post_attention_layernorm"),
                        getattr(layer, "post_attention_layernorm", None))
    return LayerSpec(family=NEOX_LAYERS[cls], hidden=hidden, ffn=ffn, heads=heads,
                     kv_heads=heads, head_dim=head_dim, attn_norm_eps=e1, mlp_norm_eps=e2,
                     qkv_bias=qkv.bias is not None, o_bias=dense.bias is not None,
                     norm="layernorm", mlp="gelu", mlp_bias=up.bias is not None,
                     gelu_approximate=form, qkv_layout="fused_per_head",
                     rotary_dim=rotary_dim, parallel_residual=bool(parallel))


def _config_value(config, *names):
    for n in names:
        v = getattr(config, n, None)
        if v is not None:
            return v
    return None


def inspect_layer(qual: str, layer: torch.nn.Module) -> LayerSpec:
    """The LayerSpec of the Hugging Face decoder layer ``layer`` (named
    ``qual`` in the model), or UnsupportedLayer saying what is missing."""
    cls = type(layer).__name__
    for attr, feature in _UNSUPPORTED_FEATURES.items():
        if hasattr(layer, attr) or hasattr(getattr(layer, "mlp", None), attr):
            raise UnsupportedLayer(f"{qual} ({cls}) has a {feature} ({attr}), which the "
                                   "compiled programs do not express")
    if cls in NEOX_LAYERS:
        return _neox_spec(qual, layer)
    if cls in GPT2_LAYERS:
        return _gpt2_spec(qual, layer)
    if cls in PRE_NORM_LAYERS:
        family, placement = PRE_NORM_LAYERS[cls], "pre"
    elif cls in POST_NORM_LAYERS:
        family, placement = POST_NORM_LAYERS[cls], "post"
    else:
        known = sorted(set(PRE_NORM_LAYERS) | set(POST_NORM_LAYERS) | set(NEOX_LAYERS) |
                       set(GPT2_LAYERS))
        raise UnsupportedLayer(f"{qual} is {cls}; coat.convert converts {', '.join(known)} "
                               "(keep it in high precision with filter_fn)")
    attn = getattr(layer, "self_attn", None)
    mlp = getattr(layer, "mlp", None)
    if attn is None or mlp is None:
        raise UnsupportedLayer(f"{qual} ({cls}) has no self_attn or mlp")
    config = getattr(attn, "config", None)
    at = _where(qual, "self_attn")

    heads = _config_value(config, "num_attention_heads")
    kv_heads = _config_value(config, "num_key_value_heads") or heads
    head_dim = getattr(attn, "head_dim", None)
    if heads is None or head_dim is None:
        raise UnsupportedLayer(f"{at} does not say its head count and head_dim "
                               "(config.num_attention_heads, head_dim)")
    q = _linear(at, attn, "q_proj", bias_ok=True)
    k = _linear(at, attn, "k_proj", bias_ok=True)
    v = _linear(at, attn, "v_proj", bias_ok=True)
    o = _linear(at, attn, "o_proj", bias_ok=True)
    biases = [m.bias is not None for m in (q, k, v)]
    if any(biases) and not all(biases):
        raise UnsupportedLayer(f"{at}: some of the q/k/v projections have biases, some not; "
                               "the stacked projection takes all or none")
    hidden = q.in_features
    if q.out_features != heads * head_dim or k.out_features != kv_heads * head_dim or \
            v.out_features != kv_heads * head_dim:
        raise UnsupportedLayer(f"{at}: projections {q.out_features}/{k.out_features}/"
                               f"{v.out_features} rows do not match {heads} heads, "
                               f"{kv_heads} kv heads of {head_dim}")

    qk_norm = "none"
    if hasattr(attn, "q_norm") or hasattr(attn, "k_norm"):
        # Applied by the model's own modules in the attention core: only
        # their kind matters here.
        norm_eps(_where(at, "q_norm"), getattr(attn, "q_norm", None))
        norm_eps(_where(at, "k_norm"), getattr(attn, "k_norm", None))
        width = attn.q_norm.weight.shape[0]
        if width == head_dim:
            qk_norm = "head"
        elif width == heads * head_dim:
            qk_norm = "full"
        else:
            raise UnsupportedLayer(f"{at}.q_norm normalises {width} features, neither a head "
                                   f"({head_dim}) nor all of q ({heads * head_dim})")

    ml = _where(qual, "mlp")
    gate, up, down = (_linear(ml, mlp, n) for n in ("gate_proj", "up_proj", "down_proj"))
    act = _config_value(getattr(mlp, "config", None) or config, "hidden_act", "hidden_activation")
    if act not in ("silu", "swish"):
        raise UnsupportedLayer(f"{ml}: activation {act!r}; the gated MLP program computes "
                               "silu(gate) * up")
    ffn = gate.out_features
    if up.out_features != ffn or gate.in_features != hidden or down.in_features != ffn or \
            down.out_features != hidden:
        raise UnsupportedLayer(f"{ml}: projection shapes do not form a {hidden} -> {ffn} -> "
                               f"{hidden} MLP")

    extra = {}
    if cls in NONAFFINE_NORM_LAYERS:
        # OLMo-1: LayerNorms without parameters; clip_qkv clamps q, k and v
        # after the projections (the converted layer does it in the
        # attention core, where RoPE then runs too).
        e1 = nonaffine_layer_norm_eps(_where(qual, "input_layernorm"),
                                      getattr(layer, "input_layernorm", None), hidden)
        e2 = nonaffine_layer_norm_eps(_where(qual, "post_attention_layernorm"),
                                      getattr(layer, "post_attention_layernorm", None), hidden)
        extra = dict(norm="layernorm", norm_affine=False,
                     clip_qkv=_clip_qkv(f"{at} (config.clip_qkv)",
                                        _config_value(config, "clip_qkv")))
    elif placement == "pre":
        e1 = norm_eps(_where(qual, "input_layernorm"), getattr(layer, "input_layernorm", None))
        e2 = norm_eps(_where(qual, "post_attention_layernorm"),
                      getattr(layer, "post_attention_layernorm", None))
    else:
        e1 = norm_eps(_where(qual, "post_attention_layernorm"),
                      getattr(layer, "post_attention_layernorm", None))
        e2 = norm_eps(_where(qual, "post_feedforward_layernorm"),
                      getattr(layer, "post_feedforward_layernorm", None))
    return LayerSpec(family=family, hidden=hidden, ffn=ffn, heads=heads, kv_heads=kv_heads,
                     head_dim=head_dim, attn_norm_eps=e1, mlp_norm_eps=e2,
                     norm_placement=placement, qk_norm=qk_norm, qkv_bias=all(biases),
                     o_bias=o.bias is not None, **extra)


#: model_type -> (family, norm placement, QK-norm kind), for configs read
#: without transformers (ahead-of-time compilation on a host with LLVM).
CONFIG_FAMILIES = {
    "llama": ("Llama", "pre", "none"),
    "mistral": ("Mistral", "pre", "none"),
    "qwen2": ("Qwen2", "pre", "none"),  # q/k/v biases always
    "qwen3": ("Qwen3", "pre", "head"),
    "olmo2": ("OLMo2", "post", "full"),
    "olmo": ("OLMo", "pre", "none"),  # LayerNorms without parameters, clip_qkv
    "gpt_neox": ("GPT-NeoX", "pre", "none"),  # read by _neox_spec_from_config
    "gpt2": ("GPT-2", "pre", "none"),  # read by _gpt2_spec_from_config
}


def _neox_spec_from_config(get) -> LayerSpec:
    """GPT-NeoX's LayerSpec from its config (GPTNeoXConfig's names and
    defaults: attention_bias True, use_parallel_residual True, rotary 0.25,
    hidden_act "gelu", layer_norm_eps 1e-5)."""
    family = "GPT-NeoX"
    hidden, heads = get("hidden_size"), get("num_attention_heads")
    if hidden % heads:
        raise UnsupportedLayer(f"{family} config: hidden_size {hidden} is not a multiple of "
                               f"num_attention_heads {heads}")
    head_dim = hidden // heads
    form = _gelu_form(f"{family} config", get("hidden_act", "gelu"), None)
    for name in ("attention_dropout", "hidden_dropout"):
        p = get(name) or 0.0
        if p != 0.0:
            raise UnsupportedLayer(f"{family} config: {name} {p}; the converted layer has no "
                                   "dropout")
    rotary_dim = _neox_rotary_dim(None, head_dim, get)
    if not 0 < rotary_dim <= head_dim or rotary_dim % 2:
        raise UnsupportedLayer(f"{family} config: {rotary_dim} rotary columns; the converted "
                               "layer takes a positive even number, at most the head size "
                               f"{head_dim}")
    attention_bias = get("attention_bias")
    attention_bias = True if attention_bias is None else bool(attention_bias)
    parallel = get("use_parallel_residual")
    eps = get("layer_norm_eps")
    eps = 1e-5 if eps is None else float(eps)
    return LayerSpec(family=family, hidden=hidden, ffn=get("intermediate_size"), heads=heads,
                     kv_heads=heads, head_dim=head_dim, attn_norm_eps=eps, mlp_norm_eps=eps,
                     qkv_bias=attention_bias, o_bias=attention_bias, norm="layernorm",
                     mlp="gelu", mlp_bias=True, gelu_approximate=form,
                     qkv_layout="fused_per_head",
                     rotary_dim=rotary_dim,
                     parallel_residual=True if parallel is None else bool(parallel))


def _gpt2_spec_from_config(get) -> LayerSpec:
    """GPT-2's LayerSpec from its config (GPT2Config's names and defaults:
    n_inner 4 * n_embd, activation_function "gelu_new", layer_norm_epsilon
    1e-5, resid_pdrop 0.1, scale_attn_weights True, the other options
    False)."""
    family = "GPT-2"
    hidden = get("n_embd") or get("hidden_size")
    heads = get("n_head") or get("num_attention_heads")
    if hidden % heads:
        raise UnsupportedLayer(f"{family} config: n_embd {hidden} is not a multiple of n_head "
                               f"{heads}")
    act = get("activation_function") or "gelu_new"
    if act not in GELU_FORMS:
        raise UnsupportedLayer(f"{family} config: activation {act!r}; the GELU MLP program "
                               "computes exact GELU ('gelu') or its tanh form ('gelu_new', "
                               "'gelu_pytorch_tanh')")
    if get("add_cross_attention"):
        raise UnsupportedLayer(f"{family} config: add_cross_attention; cross-attention is not "
                               "supported")
    if get("reorder_and_upcast_attn"):
        raise UnsupportedLayer(f"{family} config: reorder_and_upcast_attn is not supported")
    p = get("resid_pdrop")
    p = 0.1 if p is None else float(p)
    if p != 0.0:
        raise UnsupportedLayer(f"{family} config: resid_pdrop {p}; the converted layer has no "
                               "residual dropout")
    eps = get("layer_norm_epsilon")
    scale = get("scale_attn_weights")
    return LayerSpec(family=family, hidden=hidden, ffn=get("n_inner") or 4 * hidden,
                     heads=heads, kv_heads=heads, head_dim=hidden // heads,
                     attn_norm_eps=1e-5 if eps is None else float(eps),
                     mlp_norm_eps=1e-5 if eps is None else float(eps), qkv_bias=True,
                     o_bias=True, norm="layernorm", mlp="gelu", mlp_bias=True,
                     gelu_approximate=GELU_FORMS[act], positions="absolute",
                     scale_attn_weights=True if scale is None else bool(scale),
                     scale_attn_by_inverse_layer_idx=bool(
                         get("scale_attn_by_inverse_layer_idx")))


def spec_from_config(config) -> LayerSpec:
    """The LayerSpec every decoder layer of a model with this ``transformers``
    config (an object or the dict of its config.json) gets, without building
    the model: what scripts/compile_model.py --hf-config compiles ahead of
    time. The GPU tests check it against :func:`inspect_layer` of each
    family's layers."""
    get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
    model_type = get("model_type")
    if model_type not in CONFIG_FAMILIES:
        raise UnsupportedLayer(f"model_type {model_type!r}; coat.convert converts "
                               f"{', '.join(sorted(CONFIG_FAMILIES))}")
    if model_type == "gpt_neox":
        return _neox_spec_from_config(get)
    if model_type == "gpt2":
        return _gpt2_spec_from_config(get)
    family, placement, qk_norm = CONFIG_FAMILIES[model_type]
    hidden, heads = get("hidden_size"), get("num_attention_heads")
    kv_heads = get("num_key_value_heads") or heads
    head_dim = get("head_dim") or hidden // heads
    if get("mlp_bias"):
        raise UnsupportedLayer(f"{family} config: MLP projections with biases (mlp_bias) are "
                               "not supported")
    attention_bias = bool(get("attention_bias"))
    act = get("hidden_act")
    if act not in ("silu", "swish"):
        raise UnsupportedLayer(f"{family} config: activation {act!r}; the gated MLP program "
                               "computes silu(gate) * up")
    extra = {}
    if model_type == "olmo":
        # OlmoConfig has no norm eps: OlmoLayerNorm's is fixed.
        eps = NONAFFINE_LAYER_NORMS["OlmoLayerNorm"]
        extra = dict(norm="layernorm", norm_affine=False,
                     clip_qkv=_clip_qkv(f"{family} config", get("clip_qkv")))
    else:
        eps = float(get("rms_norm_eps"))
    return LayerSpec(family=family, hidden=hidden, ffn=get("intermediate_size"), heads=heads,
                     kv_heads=kv_heads, head_dim=head_dim, attn_norm_eps=eps, mlp_norm_eps=eps,
                     norm_placement=placement, qk_norm=qk_norm,
                     qkv_bias=attention_bias or model_type == "qwen2", o_bias=attention_bias,
                     **extra)
