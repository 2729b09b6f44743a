"""A Hugging Face decoder layer converted in place: its norms and
projections run as compiled programs, its attention core stays the model's
own (rotary tables from the model's rotary module, its attention function,
masks, grouped queries, QK-norm, OLMo's clip_qkv, sliding windows, partial
rotary, GPT-2's attention scale, KV cache), in BF16 as in COAT.

The converted layer adopts the original layer's children under their own
names, so parameter names, buffers, the state_dict, ``save_pretrained`` and
an optimizer built afterwards see the same model; only ``forward`` changes.
It takes the installed ``transformers``' decoder-layer call signature.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from typing import List, Optional

import torch

from .. import programs
from ..nn._autograd import program_weight
from ..nn.modules import _ProgramModule, _check_devices, _module_name, _tokens_2d
from .families import LayerSpec, UnsupportedLayer

try:  # gradient checkpointing is enabled through this base class
    from transformers.modeling_layers import GradientCheckpointingLayer as _LayerBase
except Exception:  # noqa: BLE001 - transformers absent or older: plain modules
    _LayerBase = torch.nn.Module


def layer_programs(spec: LayerSpec, keep_gemm_operands: bool = False) -> List[object]:
    """The program configs of a layer: the attention input (norm and the
    stacked q/k/v projection), the attention output (o-projection and the
    residual) and the MLP block. ``keep_gemm_operands``: the programs that
    would derive their backward GEMMs' FP8 operands again keep them instead
    (:class:`coat.programs.MLPBlockConfig`'s)."""
    qkv = spec.q_features + 2 * spec.kv_features
    keep = dict(keep_gemm_operands=bool(keep_gemm_operands))
    if spec.mlp == "gelu":
        return _gelu_layer_programs(spec, qkv, keep)
    if (spec.norm, spec.norm_affine) not in (("rmsnorm", True), ("layernorm", False)) or \
            (spec.qkv_layout, spec.mlp_bias, spec.parallel_residual, spec.rotary_dim) != \
            ("separate", False, False, 0):
        raise UnsupportedLayer(f"{spec.family}: a SwiGLU layer takes RMSNorm (or a LayerNorm "
                               "without parameters), separate q/k/v projections, no MLP bias, "
                               "sequential residuals and full rotary")
    if spec.norm_placement == "pre":
        # q and k are rotated in the program unless something must come
        # first in the attention core (a QK-norm, OLMo's clip_qkv) or the
        # head size does not allow it.
        rotary = {}
        rope_heads = spec.heads + spec.kv_heads
        if spec.qk_norm == "none" and spec.clip_qkv is None and \
                programs.rope_fits(spec.hidden, qkv, spec.head_dim, rope_heads):
            rotary = dict(rope_head_dim=spec.head_dim, rope_heads=rope_heads)
        norm = dict(norm=spec.norm, norm_affine=spec.norm_affine)
        return [programs.NormLinearConfig(spec.hidden, qkv, spec.attn_norm_eps,
                                          bias=spec.qkv_bias, **rotary, **norm, **keep),
                programs.LinearResidualConfig(spec.q_features, spec.hidden, bias=spec.o_bias),
                programs.MLPBlockConfig(spec.hidden, spec.ffn, spec.mlp_norm_eps, **norm,
                                        **keep)]
    if spec.norm != "rmsnorm" or spec.clip_qkv is not None:
        raise UnsupportedLayer(f"{spec.family}: a layer that normalises after each sublayer "
                               "takes RMSNorms and no clip_qkv")
    if spec.o_bias:
        raise UnsupportedLayer(f"{spec.family}: an o-projection bias before the post-attention "
                               "norm is not supported")
    # The first two keep their GEMMs' operands anyway: those are their
    # inputs' FP8 copies, from arguments.
    return [programs.LinearConfig(spec.hidden, qkv, bias=spec.qkv_bias),
            programs.LinearNormResidualConfig(spec.q_features, spec.hidden, spec.attn_norm_eps),
            programs.PostNormMLPConfig(spec.hidden, spec.ffn, spec.mlp_norm_eps, **keep)]


def _gelu_layer_programs(spec: LayerSpec, qkv: int, keep: dict) -> List[object]:
    """GPT-NeoX and GPT-2: LayerNorm + the q/k/v GEMM (GPT-NeoX's rotary,
    partial, in the attention core), the attention's output projection +
    residual, LayerNorm + GELU MLP (GELU in the layer's form) + residual;
    with a parallel residual the MLP's norm reads the layer's input, not
    the stream after attention."""
    if spec.norm != "layernorm" or not spec.norm_affine or spec.norm_placement != "pre" or \
            spec.qk_norm != "none" or spec.clip_qkv is not None:
        raise UnsupportedLayer(f"{spec.family}: a GELU MLP layer takes pre-norm LayerNorms "
                               "(weight and bias), no QK-norm and no clip_qkv")
    return [programs.NormLinearConfig(spec.hidden, qkv, spec.attn_norm_eps, bias=spec.qkv_bias,
                                      norm="layernorm", **keep),
            programs.LinearResidualConfig(spec.q_features, spec.hidden, bias=spec.o_bias),
            programs.GeluMLPConfig(spec.hidden, spec.ffn, norm="layernorm", bias=spec.mlp_bias,
                                   eps=spec.mlp_norm_eps,
                                   residual="separate" if spec.parallel_residual else "input",
                                   approximate=spec.gelu_approximate, **keep)]


def _returns_tuple(layer: torch.nn.Module) -> bool:
    """Whether the installed transformers' layer returns a tuple (older
    releases) or the hidden states alone (5.x): its return annotation, or
    where it has none (GPTNeoXLayer) what its return statements return."""
    forward = type(layer).forward
    ret = inspect.signature(forward).return_annotation
    if ret is not inspect.Signature.empty:
        return "tuple" in str(ret).lower()
    try:
        func = ast.parse(textwrap.dedent(inspect.getsource(forward))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return True
    tuples = {t.id for n in ast.walk(func) if isinstance(n, ast.Assign)
              and isinstance(n.value, ast.Tuple) for t in n.targets if isinstance(t, ast.Name)}
    returns = [n.value for n in ast.walk(func) if isinstance(n, ast.Return) and n.value]
    if not returns:
        return True
    return any(isinstance(v, ast.Tuple) or (isinstance(v, ast.Name) and v.id in tuples)
               for v in returns)


def converted_layer(layer: torch.nn.Module, spec: LayerSpec, *, qual: str = "",
                    kernels: Optional[str] = None,
                    keep_gemm_operands: bool = False) -> "DecoderLayer":
    """The converted layer of ``layer`` (read into ``spec`` by
    :func:`coat.hf.families.inspect_layer`): GPT-NeoX's fused q/k/v layout
    and call signature, GPT-2's Conv1D projections, absolute positions and
    call signature, or the others'. ``keep_gemm_operands``:
    :func:`layer_programs`'."""
    if spec.qkv_layout == "fused_per_head":
        cls = GPTNeoXDecoderLayer
    elif spec.positions == "absolute":
        cls = GPT2DecoderLayer
    else:
        cls = DecoderLayer
    return cls(layer, spec, qual=qual, kernels=kernels, keep_gemm_operands=keep_gemm_operands)


class DecoderLayer(_ProgramModule, _LayerBase):
    """A converted Hugging Face decoder layer (Llama, Mistral, Qwen2, Qwen3,
    OLMo, OLMo2; GPT-NeoX is :class:`GPTNeoXDecoderLayer`)."""

    #: the child holding the attention's modules and config
    _attention_child = "self_attn"

    def __init__(self, layer: torch.nn.Module, spec: LayerSpec, *, qual: str = "",
                 kernels: Optional[str] = None, keep_gemm_operands: bool = False):
        _ProgramModule.__init__(self, layer_programs(spec, keep_gemm_operands), kernels)
        for name, child in layer.named_children():
            self.add_module(name, child)
        self.spec = spec
        self.tuple_output = _returns_tuple(layer)
        self._coat_name = qual
        attn = getattr(layer, self._attention_child)
        # apply_rotary_pos_emb and eager_attention_forward come from here.
        self._family_module = sys.modules[type(attn).__module__]
        # What the model may read from its layers (e.g. the mask kind).
        for attr in ("attention_type", "layer_idx"):
            if hasattr(layer, attr):
                setattr(self, attr, getattr(layer, attr))

    def extra_repr(self) -> str:
        s = self.spec
        clip = f", clip_qkv={s.clip_qkv}" if s.clip_qkv is not None else ""
        return (f"family={s.family}, hidden={s.hidden}, ffn={s.ffn}, heads={s.heads}, "
                f"kv_heads={s.kv_heads}, head_dim={s.head_dim}, qk_norm={s.qk_norm}, "
                f"rope_in_program={self.rope_in_program}{clip}")

    @property
    def rope_in_program(self) -> bool:
        """Whether the attention-input program rotates q and k."""
        return getattr(self.configs[0], "rope", False)

    def _rope_rows(self, position_embeddings, b: int, rows: int):
        """The model's rotary tables ([batch or 1, seq, head_dim], the
        hidden states' dtype) as the program's f32 row inputs."""
        from ..llama import rope_rows

        d = self.spec.head_dim
        for t in position_embeddings:
            if t.shape[-1] != d:
                raise ValueError(f"{_module_name(self)}: rotary tables of {t.shape[-1]} "
                                 f"columns, heads of {d} (partial rotary is not supported)")
        return rope_rows(*position_embeddings, b, rows)

    # -- the attention core: the model's own code path -------------------
    def _attend(self, attn: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                b: int, s: int, position_embeddings, attention_mask, cache, kwargs, *,
                rotate: bool, dropout: float, scaling: Optional[float] = None,
                cache_kwargs: Optional[dict] = None, **extra) -> torch.Tensor:
        """Attention as the model's own attention module ``attn`` does it,
        from q, k and v ([b, heads, s, head_dim]): the family's
        apply_rotary_pos_emb (with ``rotate``), the KV cache update under the
        layer's index (with ``cache_kwargs`` where the family passes some),
        the attention function the model's config selects (the family's
        eager one by default) with ``scaling`` (the module's ``scaling``
        where None). Returns [b, s, heads * head_dim]."""
        if rotate:
            cos, sin = position_embeddings
            dtype = v.dtype
            q, k = self._family_module.apply_rotary_pos_emb(q, k, cos, sin)
            q, k = q.to(dtype), k.to(dtype)  # rotated in the tables' precision
        if cache is not None:
            k, v = cache.update(k, v, attn.layer_idx,
                                *(() if cache_kwargs is None else (cache_kwargs,)))
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        interface = ALL_ATTENTION_FUNCTIONS.get_interface(
            attn.config._attn_implementation, self._family_module.eager_attention_forward)
        out, _ = interface(attn, q, k, v, attention_mask, dropout=dropout,
                           scaling=attn.scaling if scaling is None else scaling, **extra,
                           **kwargs)
        return out.reshape(b, s, -1)

    def _attention(self, qkv: torch.Tensor, b: int, s: int, position_embeddings,
                   attention_mask, past_key_values, kwargs) -> torch.Tensor:
        spec, attn = self.spec, self.self_attn
        d = spec.head_dim
        q, k, v = qkv.view(b, s, -1).split([spec.q_features, spec.kv_features,
                                            spec.kv_features], dim=-1)
        if spec.clip_qkv is not None:
            # OLMo: the projections clamped before anything else reads them
            # (the program does not rotate such a layer's q and k).
            c = spec.clip_qkv
            q, k, v = (t.clamp(-c, c) for t in (q, k, v))
        if spec.qk_norm == "full":
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k, v = (t.reshape(b, s, -1, d) for t in (q, k, v))
        if spec.qk_norm == "head":
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        extra = {}
        window = getattr(attn, "sliding_window", None)
        if window is None and spec.family == "Mistral":
            window = getattr(attn.config, "sliding_window", None)
        if window is not None:
            extra["sliding_window"] = window
        return self._attend(attn, q, k, v, b, s, position_embeddings, attention_mask,
                            past_key_values, kwargs, rotate=not self.rope_in_program,
                            dropout=attn.attention_dropout if self.training else 0.0, **extra)

    def _check_call(self, x: torch.Tensor, kwargs: dict, position_embeddings=None, *,
                    rotary: bool = True, output_attentions: bool = False,
                    refused=()) -> str:
        """Checks what a call gives the converted layer and returns the
        layer's name for errors: hidden states [batch, seq, hidden], the
        model's rotary tables (``rotary``), no request for attention weights
        (``output_attentions``, given or in ``kwargs``), none of the keyword
        arguments ``refused`` (both popped from ``kwargs``), inputs on the
        parameters' device."""
        name = _module_name(self)
        if x.dim() != 3:
            raise ValueError(f"{name}: hidden_states must be [batch, seq, hidden], got "
                             f"{tuple(x.shape)}")
        if rotary and position_embeddings is None:
            raise ValueError(f"{name}: called without position_embeddings (the model's rotary "
                             "tables); this transformers release computes them in the model")
        if output_attentions or kwargs.pop("output_attentions", None):
            raise ValueError(f"{name}: output_attentions is not available from a converted "
                             "layer")
        for arg in refused:
            if kwargs.pop(arg, None) is not None:
                raise ValueError(f"{name}: {arg} is not available from a converted layer")
        _check_devices(self, x, name)
        return name

    @staticmethod
    def _cache(name: str, kwargs: dict, *given):
        """The call's KV cache under whichever name the installed
        transformers passes it (``past_key_values``; ``cache`` in later 5.x
        releases; GPT-NeoX's ``layer_past``), popped from ``kwargs`` so
        that the attention function does not see it again."""
        found = [c for c in (*given, kwargs.pop("past_key_values", None),
                             kwargs.pop("cache", None)) if c is not None]
        if len({id(c) for c in found}) > 1:
            raise ValueError(f"{name}: called with two different KV caches")
        return found[0] if found else None

    def forward(self, hidden_states: torch.Tensor, attention_mask=None, position_ids=None,
                past_key_values=None, use_cache: bool = False, position_embeddings=None,
                **kwargs):
        x = hidden_states
        name = self._check_call(x, kwargs, position_embeddings)
        past_key_values = self._cache(name, kwargs, past_key_values)
        spec, attn, mlp = self.spec, self.self_attn, self.mlp
        b, s, _ = x.shape
        tokens = b * s

        def w(mod):
            return program_weight(mod.weight)

        def norm_ws(mod):
            """A norm's parameters as its program takes them: none for
            OLMo's LayerNorm, the weight of an RMSNorm."""
            return (w(mod),) if spec.norm_affine else ()

        def stacked(attr):
            return program_weight(*(getattr(p, attr) for p in (attn.q_proj, attn.k_proj,
                                                                attn.v_proj)))

        h = _tokens_2d(x, spec.hidden, name)
        qkv_ws = (stacked("weight"),) + ((stacked("bias"),) if spec.qkv_bias else ())
        o_ws = (w(attn.o_proj),) + ((program_weight(attn.o_proj.bias),) if spec.o_bias else ())
        tables = ()
        if self.rope_in_program:
            tables = self._rope_rows(position_embeddings, b, h.shape[0])
        if spec.norm_placement == "pre":
            (qkv,) = self.run_program(0, f"{name} attention input", h,
                                      *norm_ws(self.input_layernorm), *qkv_ws, *tables)
        else:
            (qkv,) = self.run_program(0, f"{name} attention input", h, *qkv_ws)
        a = self._attention(qkv[:tokens], b, s, position_embeddings, attention_mask,
                            past_key_values, kwargs)
        a = _tokens_2d(a, spec.q_features, name)
        mlp_ws = (w(mlp.gate_proj), w(mlp.up_proj), w(mlp.down_proj))
        if spec.norm_placement == "pre":
            (h,) = self.run_program(1, f"{name} attention output", h, a, *o_ws)
            (h,) = self.run_program(2, f"{name} MLP", h, *norm_ws(self.post_attention_layernorm),
                                    *mlp_ws)
        else:
            (h,) = self.run_program(1, f"{name} attention output", h, a, w(attn.o_proj),
                                    w(self.post_attention_layernorm))
            (h,) = self.run_program(2, f"{name} MLP", h, *mlp_ws,
                                    w(self.post_feedforward_layernorm))
        out = h[:tokens].view(b, s, spec.hidden).to(x.dtype)
        return (out,) if self.tuple_output else out


class GPTNeoXDecoderLayer(DecoderLayer):
    """A converted GPTNeoXLayer: LayerNorm + query_key_value, dense +
    residual, LayerNorm + GELU MLP + residual as programs; the partial
    rotary embedding (the model's own apply_rotary_pos_emb), attention and
    KV cache as the model's own attention does them."""

    _attention_child = "attention"

    def extra_repr(self) -> str:
        s = self.spec
        return (f"family={s.family}, hidden={s.hidden}, ffn={s.ffn}, heads={s.heads}, "
                f"head_dim={s.head_dim}, rotary_dim={s.rotary_dim}, "
                f"parallel_residual={s.parallel_residual}")

    def _attention(self, qkv: torch.Tensor, b: int, s: int, position_embeddings,
                   attention_mask, cache, kwargs) -> torch.Tensor:
        spec, attn = self.spec, self.attention
        d = spec.head_dim
        # query_key_value's rows are [heads, (q, k, v), head_dim]: q, k and v
        # are strided views of the program's output, [b, heads, s, d].
        q, k, v = qkv.view(b, s, spec.heads, 3 * d).transpose(1, 2).chunk(3, dim=-1)
        cos = position_embeddings[0]
        if cos.shape[-1] != spec.rotary_dim:
            raise ValueError(f"{_module_name(self)}: rotary tables of {cos.shape[-1]} columns, "
                             f"the layer rotates {spec.rotary_dim} of each head")
        # HF's function rotates the tables' width and passes the rest.
        # Dropout is refused at conversion (families._neox_spec).
        return self._attend(attn, q, k, v, b, s, position_embeddings, attention_mask, cache,
                            kwargs, rotate=True, dropout=0.0)

    def forward(self, hidden_states: torch.Tensor, attention_mask=None, position_ids=None,
                use_cache: bool = False, layer_past=None, position_embeddings=None, *,
                output_attentions: bool = False, cache_position=None, **kwargs):
        x = hidden_states
        name = self._check_call(x, kwargs, position_embeddings,
                                output_attentions=output_attentions, refused=("head_mask",))
        cache = self._cache(name, kwargs, layer_past)
        if position_ids is not None:
            kwargs["position_ids"] = position_ids  # as GPTNeoXAttention passes it on
        spec, attn, mlp = self.spec, self.attention, self.mlp
        b, s, _ = x.shape
        tokens = b * s

        def wb(mod, with_bias=True):
            return (program_weight(mod.weight),) + (
                (program_weight(mod.bias),) if with_bias else ())

        h = _tokens_2d(x, spec.hidden, name)
        (qkv,) = self.run_program(0, f"{name} attention input", h,
                                  *wb(self.input_layernorm),
                                  *wb(attn.query_key_value, spec.qkv_bias))
        a = self._attention(qkv[:tokens], b, s, position_embeddings, attention_mask, cache,
                            kwargs)
        a = _tokens_2d(a, spec.q_features, name)
        (after_attn,) = self.run_program(1, f"{name} attention output", h, a,
                                         *wb(attn.dense, spec.o_bias))
        mlp_ws = (*wb(self.post_attention_layernorm), *wb(mlp.dense_h_to_4h, spec.mlp_bias),
                  *wb(mlp.dense_4h_to_h, spec.mlp_bias))
        if spec.parallel_residual:
            # x + attn(ln1(x)) + mlp(ln2(x)): the MLP's norm reads x.
            (out,) = self.run_program(2, f"{name} MLP", after_attn, h, *mlp_ws)
        else:
            (out,) = self.run_program(2, f"{name} MLP", after_attn, *mlp_ws)
        out = out[:tokens].view(b, s, spec.hidden).to(x.dtype)
        return (out,) if self.tuple_output else out


class GPT2DecoderLayer(DecoderLayer):
    """A converted GPT2Block: ln_1 + c_attn, c_proj + residual, ln_2 + GELU
    MLP (the block's form) + residual as programs, each Conv1D's [in, out]
    weight passed as the [out, in] copy the program takes (made again in the
    backward, not kept; the gradient lands in the [in, out] parameter);
    attention, its scale and dropout, masks and KV cache as the model's own
    attention does them. GPT-2 has no rotary embedding: positions are added
    before the first block."""

    _attention_child = "attn"

    def extra_repr(self) -> str:
        s = self.spec
        return (f"family={s.family}, hidden={s.hidden}, ffn={s.ffn}, heads={s.heads}, "
                f"head_dim={s.head_dim}, gelu={s.gelu_approximate}, "
                f"scale_attn_weights={s.scale_attn_weights}, "
                f"scale_attn_by_inverse_layer_idx={s.scale_attn_by_inverse_layer_idx}")

    def _scaling(self) -> float:
        """GPT2Attention's scale of the scores: 1/sqrt(head_dim) with
        scale_attn_weights, divided by layer_idx + 1 with
        scale_attn_by_inverse_layer_idx. The eager function of
        transformers' GPT-2 computes it from the module (the same options);
        the others take it from here."""
        spec = self.spec
        scale = spec.head_dim ** -0.5 if spec.scale_attn_weights else 1.0
        if spec.scale_attn_by_inverse_layer_idx:
            layer_idx = getattr(self.attn, "layer_idx", None)
            if layer_idx is None:
                raise ValueError(f"{_module_name(self)}: scale_attn_by_inverse_layer_idx needs "
                                 "the attention's layer_idx")
            scale /= float(layer_idx + 1)
        return scale

    def _attention(self, qkv: torch.Tensor, b: int, s: int, attention_mask, cache,
                   cache_position, kwargs) -> torch.Tensor:
        spec, attn = self.spec, self.attn
        q, k, v = (t.reshape(b, s, -1, spec.head_dim).transpose(1, 2)
                   for t in qkv.view(b, s, -1).split(spec.hidden, dim=-1))
        # An encoder-decoder cache holds this attention's keys in its
        # self-attention part (cross-attention is refused).
        cache = getattr(cache, "self_attention_cache", cache)
        cache_kwargs = None if cache_position is None else {"cache_position": cache_position}
        return self._attend(attn, q, k, v, b, s, None, attention_mask, cache, kwargs,
                            rotate=False, scaling=self._scaling(), cache_kwargs=cache_kwargs,
                            dropout=attn.attn_dropout.p if self.training else 0.0)

    def forward(self, hidden_states: torch.Tensor, past_key_values=None, attention_mask=None,
                encoder_hidden_states=None, encoder_attention_mask=None,
                use_cache: bool = False, **kwargs):
        # GPT2Model passes the cache, the mask and the encoder states by
        # position: the parameters' order is GPT2Block's.
        x = hidden_states
        name = self._check_call(x, kwargs, rotary=False, refused=("head_mask",))
        past_key_values = self._cache(name, kwargs, past_key_values)
        cache_position = kwargs.pop("cache_position", None)
        if encoder_hidden_states is not None or encoder_attention_mask is not None:
            raise ValueError(f"{name}: encoder_hidden_states (cross-attention) are not "
                             "available from a converted layer")
        spec, attn, mlp = self.spec, self.attn, self.mlp
        b, s, _ = x.shape
        tokens = b * s

        def conv(mod):
            """A Conv1D's [out, in] weight copy and its bias."""
            return program_weight(mod.weight, transposed=True), program_weight(mod.bias)

        def norm(mod):
            return program_weight(mod.weight), program_weight(mod.bias)

        h = _tokens_2d(x, spec.hidden, name)
        (qkv,) = self.run_program(0, f"{name} attention input", h, *norm(self.ln_1),
                                  *conv(attn.c_attn))
        a = self._attention(qkv[:tokens], b, s, attention_mask, past_key_values,
                            cache_position, kwargs)
        a = _tokens_2d(a, spec.q_features, name)
        (h,) = self.run_program(1, f"{name} attention output", h, a, *conv(attn.c_proj))
        (out,) = self.run_program(2, f"{name} MLP", h, *norm(self.ln_2), *conv(mlp.c_fc),
                                  *conv(mlp.c_proj))
        out = out[:tokens].view(b, s, spec.hidden).to(x.dtype)
        return (out,) if self.tuple_output else out
