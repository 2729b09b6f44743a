"""What the CPU tests of converted Hugging Face layers share: stand-ins of
the parts of transformers a layer calls (the cache, a config; the
attention dispatch is conftest's hf_attention_dispatch fixture), the layer
conversion, and how outputs and gradients compare. Import it after
conftest.torch_or_skip()."""

import copy

import torch

from coat.hf import inspect_layer
from coat.hf.layer import converted_layer


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Config:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class Cache:
    """The part of transformers' DynamicCache a layer calls."""

    def __init__(self):
        self.kv = {}

    def update(self, k, v, layer_idx, cache_kwargs=None):
        self.cache_kwargs = cache_kwargs
        if layer_idx in self.kv:
            k = torch.cat([self.kv[layer_idx][0], k], dim=-2)
            v = torch.cat([self.kv[layer_idx][1], v], dim=-2)
        self.kv[layer_idx] = (k, v)
        return k, v


def convert(layer, qual):
    """A converted copy of ``layer`` (the original stays the reference)."""
    layer = copy.deepcopy(layer)
    return converted_layer(layer, inspect_layer(qual, layer), qual=qual)


def cosine(a, b):
    a, b = a.float().flatten(), b.float().flatten()
    return (a @ b / (a.norm() * b.norm()).clamp_min(1e-30)).item()


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def output_and_grads(layer, x, dy, tables):
    """The layer's branch (output less input) and the gradients of its input
    (less what the residual passes through) and parameters. ``tables``: the
    rotary tables, None for a layer without (GPT-2)."""
    layer.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_()
    y = layer(x) if tables is None else layer(x, position_embeddings=tables)
    y = y[0] if isinstance(y, tuple) else y
    y.backward(dy)
    grads = {"input": x.grad - dy}
    grads.update({n: p.grad.clone() for n, p in layer.named_parameters()})
    return (y - x).detach(), grads


def assert_cached_decoding(layer, conv, x, tables, cache_arg, layer_idx, kv_shape,
                           fwd_cos, prefix=16):
    """The converted layer ``conv`` on the first ``prefix`` tokens, then on
    the rest with the cache (passed as ``cache_arg``: past_key_values,
    layer_past): the cache holds ``kv_shape`` keys under ``layer_idx``, the
    later tokens match the unconverted ``layer`` on the whole sequence, and
    without the prefix's keys they are far off."""
    cos, sin = tables
    rest = (cos[:, prefix:], sin[:, prefix:])
    with torch.no_grad():
        want = layer(x, position_embeddings=tables)
        cache = Cache()
        conv(x[:, :prefix], position_embeddings=(cos[:, :prefix], sin[:, :prefix]),
             use_cache=True, **{cache_arg: cache})
        got = conv(x[:, prefix:], position_embeddings=rest, use_cache=True,
                   **{cache_arg: cache})
        alone = conv(x[:, prefix:], position_embeddings=rest)
    assert list(cache.kv) == [layer_idx] and cache.kv[layer_idx][0].shape == kv_shape
    tail = want[:, prefix:] - x[:, prefix:]
    assert cosine(got - x[:, prefix:], tail) >= fwd_cos
    assert rel(alone - x[:, prefix:], tail) > 2 * rel(got - x[:, prefix:], tail)


def assert_matches(got, want, fwd_tol, fwd_cos, grad_cos, grad_cos_median):
    """``got`` and ``want`` (output_and_grads of a converted layer and its
    reference) agree: the branch within ``fwd_tol`` relative error and
    ``fwd_cos`` cosine, every gradient's cosine at least ``grad_cos`` and
    their median at least ``grad_cos_median``."""
    (branch, grads), (want_branch, want_grads) = got, want
    assert rel(branch, want_branch) <= fwd_tol, rel(branch, want_branch)
    assert cosine(branch, want_branch) >= fwd_cos, cosine(branch, want_branch)
    assert grads.keys() == want_grads.keys()
    cos = {n: cosine(g, want_grads[n]) for n, g in grads.items()}
    worst = min(cos, key=cos.get)
    assert cos[worst] >= grad_cos, (worst, cos)
    assert sorted(cos.values())[len(cos) // 2] >= grad_cos_median, cos


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0,
                            **kwargs):
    """transformers' eager attention for the stand-ins: causal (the queries
    are the last keys), grouped queries where the module has
    num_key_value_groups, [batch, seq, heads, head_dim] out. A family's
    module must hold it under this name (the converted layer takes the
    model's own)."""
    assert dropout == 0.0
    n_rep = getattr(module, "num_key_value_groups", 1)
    key, value = (t.repeat_interleave(n_rep, dim=1) for t in (key, value))
    scores = query.float() @ key.float().transpose(-1, -2) * scaling
    q_len, k_len = query.shape[-2], key.shape[-2]
    causal = torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
    weights = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    out = (weights @ value.float()).to(value.dtype)
    return out.transpose(1, 2).contiguous(), weights
