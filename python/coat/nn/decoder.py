"""The project's Llama decoder layer (coat.llama's layout) as three compiled
programs around BF16 attention."""

from __future__ import annotations

from typing import Dict, Optional

import torch

from .. import programs
from ._autograd import program_weight
from .modules import _ProgramModule, _check_devices, _module_name, _tokens_2d

class _Projections(torch.nn.Module):
    """Holds existing weight Parameters under their module names."""

    def __init__(self, **weights: torch.nn.Parameter):
        super().__init__()
        for name, w in weights.items():
            holder = torch.nn.Module()
            holder.weight = w
            self.add_module(name, holder)


class DecoderLayer(_ProgramModule):
    """A Llama decoder layer as three compiled programs around BF16 attention
    (COAT keeps the attention core in BF16):

      qkv = W_qkv rmsnorm(x)           coat NormLinear (q, k, v as one GEMM;
                                       q and k rotated there where the head
                                       size allows, else by torch)
      a   = sdpa(rope(q), rope(k), v)  torch, causal, bf16
      x   = x + W_o a                  coat LinearResidual
      x   = x + MLP(rmsnorm(x))        coat MLP block

    Parameters have the Hugging Face names (``self_attn.q_proj.weight`` ...,
    ``mlp.gate_proj.weight`` ..., ``input_layernorm.weight``,
    ``post_attention_layernorm.weight``); :func:`coat.convert` builds it
    around a layer's existing Parameters. Called as ``layer(x, cos, sin)``
    with ``x`` [batch, seq, hidden] and the rotary tables of
    :func:`coat.llama.rope_tables`.
    """

    def __init__(self, hidden: int, ffn: int, heads: int, kv_heads: int, eps: float = 1e-5,
                 *, weights: Optional[Dict[str, torch.nn.Parameter]] = None,
                 kernels: Optional[str] = None, device=None, dtype=torch.float32):
        name = type(self).__name__
        try:
            super().__init__(programs.decoder_layer_configs(hidden, ffn, heads, kv_heads, eps),
                             kernels)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        d = hidden // heads
        self.hidden, self.ffn, self.eps = hidden, ffn, eps
        self.heads, self.kv_heads = heads, kv_heads
        shapes = {"q_proj": (heads * d, hidden), "k_proj": (kv_heads * d, hidden),
                  "v_proj": (kv_heads * d, hidden), "o_proj": (hidden, heads * d),
                  "gate_proj": (ffn, hidden), "up_proj": (ffn, hidden),
                  "down_proj": (hidden, ffn), "input_layernorm": (hidden,),
                  "post_attention_layernorm": (hidden,)}
        if weights is None:
            weights = {}
            for k, shape in shapes.items():
                w = torch.empty(shape, device=device, dtype=dtype)
                if len(shape) == 1:
                    torch.nn.init.ones_(w)
                else:
                    torch.nn.init.normal_(w, std=shape[1] ** -0.5)
                weights[k] = torch.nn.Parameter(w)
        for k, shape in shapes.items():
            if tuple(weights[k].shape) != shape:
                raise ValueError(f"{name}: {k} has shape {tuple(weights[k].shape)}, "
                                 f"expected {shape}")
        self.self_attn = _Projections(**{k: weights[k] for k in
                                         ("q_proj", "k_proj", "v_proj", "o_proj")})
        self.mlp = _Projections(**{k: weights[k] for k in ("gate_proj", "up_proj", "down_proj")})
        self.input_layernorm = _Projections()
        self.input_layernorm.weight = weights["input_layernorm"]
        self.post_attention_layernorm = _Projections()
        self.post_attention_layernorm.weight = weights["post_attention_layernorm"]

    @property
    def rope_in_program(self) -> bool:
        """Whether the attention-input program rotates q and k (decided from
        the head size by coat.programs.decoder_layer_configs)."""
        return self.configs[0].rope

    def extra_repr(self) -> str:
        return (f"hidden={self.hidden}, ffn={self.ffn}, heads={self.heads}, "
                f"kv_heads={self.kv_heads}, rope_in_program={self.rope_in_program}")

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        from ..llama import attention_core, rope_rows

        name = _module_name(self)
        if x.dim() != 3:
            raise ValueError(f"{name}: input must be [batch, seq, hidden], got {tuple(x.shape)}")
        _check_devices(self, x, name)
        b, s, _ = x.shape
        tokens = b * s
        at, mlp = self.self_attn, self.mlp
        h = _tokens_2d(x, self.hidden, name)
        w_qkv = program_weight(at.q_proj.weight, at.k_proj.weight, at.v_proj.weight)
        tables = ()
        if self.rope_in_program:
            tables = rope_rows(cos, sin, b, h.shape[0])
            cos = sin = None  # q and k come rotated
        (qkv,) = self.run_program(0, f"{name} attention input", h,
                                  program_weight(self.input_layernorm.weight), w_qkv, *tables)
        q_n = self.heads * (self.hidden // self.heads)
        kv_n = (qkv.shape[1] - q_n) // 2
        q, k, v = qkv[:tokens].view(b, s, -1).split([q_n, kv_n, kv_n], dim=-1)
        a = attention_core(q, k, v, cos, sin, self.heads, self.kv_heads)
        a = _tokens_2d(a, q_n, name)
        (h,) = self.run_program(1, f"{name} attention output", h, a,
                                program_weight(at.o_proj.weight))
        (h,) = self.run_program(2, f"{name} MLP", h,
                                program_weight(self.post_attention_layernorm.weight),
                                program_weight(mlp.gate_proj.weight),
                                program_weight(mlp.up_proj.weight),
                                program_weight(mlp.down_proj.weight))
        return h[:tokens].view(b, s, self.hidden).to(x.dtype)

