"""A dependency-free Llama-shaped decoder (RMSNorm, q/k/v/o projections with
causal attention, SwiGLU MLP, untied LM head) for the FSDP2 tests and
benchmark. Not a model to train for real: no RoPE, no KV cache."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, inter: int, mlp_bias: bool):
        super().__init__()
        self.heads = heads
        self.input_norm = RMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.post_norm = RMSNorm(hidden)
        self.gate_proj = nn.Linear(hidden, inter, bias=mlp_bias)
        self.up_proj = nn.Linear(hidden, inter, bias=mlp_bias)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        b, t, h = x.shape
        y = self.input_norm(x)
        q, k, v = (proj(y).view(b, t, self.heads, h // self.heads).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, h))
        y = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class TinyLlama(nn.Module):
    """``mlp_bias`` adds gate/up biases (Llama has none): 1-D tensors whose
    shards are not whole 128-element groups at world size 2, which the tests
    use to exercise the grouping difference (docs/fsdp.md)."""

    def __init__(self, vocab: int = 320, hidden: int = 256, layers: int = 2, heads: int = 4,
                 inter: int = 688, mlp_bias: bool = False):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(Block(hidden, heads, inter, mlp_bias) for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    #: As coat.llama.LlamaForCausalLM.coat_loss: set by coat.convert to the
    #: fused LM head + loss where its program is compiled.
    coat_loss = None

    def forward(self, tokens, targets=None):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x)
        if targets is not None:  # (inside forward: FSDP's hooks gather lm_head)
            return self.coat_loss(x, self.lm_head.weight, targets)
        return self.lm_head(x)

    def loss(self, tokens):
        if self.coat_loss is not None:
            return self(tokens[:, :-1], tokens[:, 1:])
        logits = self(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                               tokens[:, 1:].reshape(-1))


def shard(model: TinyLlama, mesh) -> TinyLlama:
    """FSDP2 as usually applied: each block, then the root."""
    from torch.distributed.fsdp import fully_shard

    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model
