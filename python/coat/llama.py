"""A Llama decoder in plain PyTorch with the Hugging Face parameter layout
(``model.embed_tokens``, ``model.layers.N.self_attn.{q,k,v,o}_proj``,
``model.layers.N.mlp.{gate,up,down}_proj``, ``input_layernorm``,
``post_attention_layernorm``, ``model.norm``, ``lm_head``): RMSNorm,
grouped-query causal attention with rotary embeddings (torch SDPA), SwiGLU.
It is the BF16 baseline of the training example and what
:func:`coat.convert` takes; its state_dict loads into either."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LlamaConfig:
    vocab: int = 256
    hidden: int = 1024
    ffn: int = 2816
    layers: int = 12
    heads: int = 16
    kv_heads: int = 16
    eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


def rope_tables(cfg: LlamaConfig, seq: int, device):
    """cos and sin of the rotary angles, [seq, head_dim] f32 (HF layout:
    the two halves of a head rotate together)."""
    inv = 1.0 / cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, device=device).float()
                                   / cfg.head_dim)
    ang = torch.outer(torch.arange(seq, device=device).float(), inv)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):
    """x: [batch, heads, seq, head_dim]."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x.float() * cos + rot.float() * sin).to(x.dtype)


def rope_rows(cos, sin, batch: int, rows: int):
    """Rotary tables as one row per token of a [batch, seq] block in
    batch-major order, zero rows padding them to ``rows``: the cos and sin
    inputs (f32, contiguous) of an attention-input program that rotates q
    and k itself (:class:`coat.programs.NormLinearConfig` with
    ``rope_head_dim``). The tables are [seq, head_dim] (:func:`rope_tables`)
    or [batch or 1, seq, head_dim] (a Hugging Face model's rotary module).

    Every layer of a forward passes the same tables, and each program keeps
    its rows for the backward: eagerly, the rows are made once per tables
    (cached on ``cos`` while neither table changes), not once per layer
    (8 MiB a layer at 4x2048 tokens, head_dim 128)."""
    compiler = getattr(torch, "compiler", None)
    compiling = compiler is not None and compiler.is_compiling()
    key = (cos._version, sin._version, batch, rows)
    cached = None if compiling else getattr(cos, "_coat_rope_rows", None)
    if cached is not None and cached[0] is sin and cached[1] == key:
        return cached[2]
    out = []
    for t in (cos, sin):
        seq, d = t.shape[-2:]
        r = t.float().expand(batch, seq, d).reshape(batch * seq, d)
        out.append(torch.nn.functional.pad(r, (0, 0, 0, rows - r.shape[0])).contiguous())
    if not compiling:
        cos._coat_rope_rows = (sin, key, (out[0], out[1]))
    return out[0], out[1]


def attention_core(q, k, v, cos, sin, heads: int, kv_heads: int):
    """Rotary embeddings and causal SDPA in the inputs' precision.
    q: [b, s, heads*d], k/v: [b, s, kv_heads*d]; returns [b, s, heads*d].
    With ``cos`` and ``sin`` None, q and k come rotated (by the program
    that projected them)."""
    b, s, _ = q.shape
    d = q.shape[-1] // heads
    q = q.view(b, s, heads, d).transpose(1, 2)
    k = k.view(b, s, kv_heads, d).transpose(1, 2)
    if cos is None:
        # SDPA keeps its inputs for the backward: q and k, views of a fused
        # q/k/v projection, keep all of it alive, so v stays a view too.
        v = v.view(b, s, kv_heads, d).transpose(1, 2)
    else:
        # The rotation gives q and k storage of their own, but a v sliced
        # from a fused q/k/v projection would keep the whole projection
        # alive until the backward: copy it.
        v = v.contiguous().view(b, s, kv_heads, d).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    o = _sdpa(q, k, v)
    return o.transpose(1, 2).reshape(b, s, heads * d)


def _sdpa(q, k, v):
    """Causal attention; k and v may have fewer heads than q (grouped
    queries), shared without copies where SDPA can (torch >= 2.5)."""
    if q.shape[1] != k.shape[1] and q.is_cuda and _SDPA_GQA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    if q.shape[1] != k.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # torch < 2.0 (the CPU test environment): the same math, unfused.
    s = q.shape[-2]
    att = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return (att.masked_fill(mask, float("-inf")).softmax(-1) @ v.float()).to(q.dtype)


def _has_sdpa_gqa() -> bool:
    """SDPA takes enable_gqa from torch 2.5 on (its signature is not
    introspectable: a builtin)."""
    try:
        major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (2, 5)


_SDPA_GQA = _has_sdpa_gqa()


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.heads, self.kv_heads = cfg.heads, cfg.kv_heads
        d = cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden, cfg.heads * d, bias=False)
        self.k_proj = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.heads * d, cfg.hidden, bias=False)

    def forward(self, x, cos, sin):
        a = attention_core(self.q_proj(x), self.k_proj(x), self.v_proj(x), cos, sin,
                           self.heads, self.kv_heads)
        return self.o_proj(a)


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
        self.down_proj = nn.Linear(cfg.ffn, cfg.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden, cfg.eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden, cfg.eps)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Model(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.eps)

    def forward(self, tokens):
        x = self.embed_tokens(tokens)
        cos, sin = rope_tables(self.config, tokens.shape[1], tokens.device)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    #: The loss of ``forward(tokens, targets)`` from the final hidden states,
    #: the LM head's weight and the targets, or None for the LM head and
    #: ``F.cross_entropy`` of the fp32 logits. :func:`coat.convert` sets it
    #: to the fused, chunked ``coat.nn.linear_cross_entropy`` where its
    #: program is compiled (its report says which).
    coat_loss = None

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.config = cfg
        self.model = Model(cfg)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, tokens, targets=None):
        h = self.model(tokens)
        if targets is not None and self.coat_loss is not None:
            return self.coat_loss(h, self.lm_head.weight, targets)
        logits = self.lm_head(h)
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
