"""The LM head and its cross-entropy loss fused and chunked:

    loss = coat.nn.linear_cross_entropy(hidden, lm_head.weight, targets)

equals ``F.cross_entropy((hidden @ weight.T).float(), targets,
ignore_index=ignore_index)`` (the mean over the tokens whose target is not
``ignore_index``), but the [tokens, vocab] logits never exist whole. The
forward takes the tokens a chunk at a time: the chunk's logits come from
torch's bf16 GEMM, the compiled ``coat.cross_entropy`` program
(:class:`coat.programs.CrossEntropyConfig`) turns them into per-token losses
and overwrites them with the gradient ``softmax - onehot``, and two more
GEMMs take that gradient to the hidden states (``g @ W``) and add it to the
weight's (``g.T @ h``, in f32 across chunks). The backward only scales the
two gradients by ``grad_output / n_valid``. What the forward keeps for it
is those gradients (tokens x hidden and vocab x hidden), never anything of
tokens x vocab; a chunk's logits take at most ``chunk_tokens * vocab * 2``
bytes (128 MiB by default).

On CUDA tensors the program runs its GPU kernel, on CPU tensors its CPU
twin (bit for bit the same per-token values). Under ``torch.compile`` the
whole function is one custom operator (``coat::linear_cross_entropy``) where
this torch has ``torch.library.custom_op``; elsewhere the autograd Function
is left out of the graph (a graph break), never traced.

Targets outside [0, vocab) that are not ``ignore_index``: on CPU tensors a
ValueError before any work; on CUDA tensors (where checking would wait for
the GPU) the kernel gives that token a NaN loss and gradient and flags it,
and coat.nn's finiteness check (:func:`coat.nn.check_finite`, or a later
step's first forward) raises NonFiniteError naming this function.
"""

from __future__ import annotations

from typing import Optional

import torch

from .. import _dist, _torch_ops, artifacts, programs
from ._autograd import _derive, run_forward

#: The largest chunk of logits a call makes by default.
DEFAULT_CHUNK_BYTES = 128 << 20

_WHAT = "coat.nn.linear_cross_entropy"


#: Whether this torch has addmm with an f32 result of bf16 operands (CUDA).
_ADDMM_OUT_DTYPE = "dtype_out" in getattr(torch.ops.aten.addmm, "overloads", lambda: [])()


def default_chunk_tokens(vocab: int) -> int:
    """Tokens a chunk takes by default: its bf16 logits within
    DEFAULT_CHUNK_BYTES (at least one token)."""
    return max(1, DEFAULT_CHUNK_BYTES // (2 * vocab))


def _program(vocab: int, ignore_index: int, kernels=None):
    return artifacts.program(programs.CrossEntropyConfig(vocab, ignore_index), kernels)


def _check_targets(targets: torch.Tensor, vocab: int, ignore_index: int) -> None:
    if targets.is_cuda:
        return  # the kernel flags them (module docstring)
    bad = (targets != ignore_index) & ((targets < 0) | (targets >= vocab))
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(f"{_WHAT}: target {int(targets[i])} of token {i} is outside "
                         f"[0, {vocab}) and not ignore_index ({ignore_index})")


def fused_forward(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                  ignore_index: int, chunk_tokens: int, kernels=None, grads: bool = True):
    """(loss sum f32 [], count of non-ignored tokens f32 [], gradient of
    the loss sum w.r.t. ``hidden`` [N, H] in hidden's dtype, w.r.t.
    ``weight`` [V, H] in f32) for ``hidden`` [N, H], ``weight`` [V, H],
    int64 ``targets`` [N]: the work of the forward, chunk by chunk. Without
    ``grads`` (nothing will differentiate the loss) the two gradient GEMMs
    of each chunk are left out and both gradients are None."""
    n, h = hidden.shape
    vocab = weight.shape[0]
    program = _program(vocab, ignore_index, kernels)
    # The weight as the GEMMs take it: itself when it is contiguous bf16,
    # else a bf16 copy that lives for this forward only (an f32 master's).
    w = _derive((weight.detach(),))
    x = hidden.to(torch.bfloat16)
    loss_sum = torch.zeros((), dtype=torch.float32, device=hidden.device)
    valid = (targets != ignore_index).sum().to(torch.float32)
    if not grads:
        for start in range(0, n, chunk_tokens):
            logits = x[start:start + chunk_tokens] @ w.t()
            tc = targets[start:start + chunk_tokens].clone()
            loss_sum += run_forward(program, _WHAT, [logits, tc])[0][0].sum()
        return loss_sum, valid, None, None
    grad_hidden = torch.empty(n, h, dtype=hidden.dtype, device=hidden.device)
    grad_weight = torch.zeros(vocab, h, dtype=torch.float32, device=hidden.device)
    # cuBLAS adds each chunk's bf16 product into the f32 sum itself (beta = 1)
    # where torch exposes it: no bf16 partial written and read back.
    accumulate_in_gemm = hidden.is_cuda and _ADDMM_OUT_DTYPE
    partial = None  # one chunk's g.T @ h, bf16, reused
    for start in range(0, n, chunk_tokens):
        xc = x[start:start + chunk_tokens]
        logits = xc @ w.t()  # [c, V] bf16, cuBLAS (f32 accumulation)
        # (a fresh copy: kernels take 16-byte aligned buffers, a slice may not be)
        tc = targets[start:start + chunk_tokens].clone()
        loss_c, grad = run_forward(program, _WHAT, [logits, tc])[0]
        # `grad` is `logits`' buffer, now softmax - onehot (0 on ignored rows).
        loss_sum += loss_c.sum()
        gh = grad @ w
        grad_hidden[start:start + chunk_tokens] = gh
        if accumulate_in_gemm:
            torch.ops.aten.addmm.dtype_out(grad_weight, grad.t(), xc, torch.float32,
                                           out=grad_weight)
        else:
            if partial is None:
                partial = torch.empty(vocab, h, dtype=torch.bfloat16, device=hidden.device)
            torch.mm(grad.t(), xc, out=partial)
            grad_weight += partial
        del logits, grad, gh
    return loss_sum, valid, grad_hidden, grad_weight


def _scale(grad_out: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """d(mean)/d(sum) times the incoming gradient: 0 where no token counts
    (torch's gradients of a mean over no tokens are zeros, its loss NaN)."""
    return torch.where(valid > 0, grad_out.float() / valid.clamp_min(1),
                       torch.zeros_like(valid))


#: The f32 working set of scaling a gradient in place (_scale_in_place).
_SCALE_BLOCK_BYTES = 64 << 20


def _scale_in_place(g: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``g`` [rows, cols] times ``scale``, rounded once to g's dtype (the
    bits of ``(g.float() * scale).to(g.dtype)``), written over ``g`` a block
    of rows at a time: no second gradient and no f32 copy of it exist at
    the start of the backward, the step's peak at the 7B shape."""
    if g.dtype == torch.float32:
        return g.mul_(scale)
    rows = max(1, _SCALE_BLOCK_BYTES // (4 * max(1, g[0].numel())))
    for start in range(0, g.shape[0], rows):
        block = g[start:start + rows]
        block.copy_(block.float().mul_(scale))
    return g


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, ignore_index, chunk_tokens, kernels):
        loss_sum, valid, grad_hidden, grad_weight = fused_forward(
            hidden, weight, targets, ignore_index, chunk_tokens, kernels)
        if weight.dtype != torch.float32:
            grad_weight = grad_weight.to(weight.dtype)  # half the memory until backward
        # Intermediates, neither inputs nor outputs: kept on ctx, so that the
        # backward can hand them over (scaled in place) instead of copying.
        ctx.grads = (grad_hidden, grad_weight)
        ctx.save_for_backward(valid)
        return loss_sum / valid

    @staticmethod
    def backward(ctx, grad_out):
        if ctx.grads is None:
            raise RuntimeError(f"{_WHAT}: its backward ran already; it hands the gradients "
                               "it computed in the forward over, so it runs once "
                               "(retain_graph is not supported through the fused loss)")
        grad_hidden, grad_weight = ctx.grads
        ctx.grads = None
        (valid,) = ctx.saved_tensors
        scale = _scale(grad_out, valid)
        gh = _scale_in_place(grad_hidden, scale) if ctx.needs_input_grad[0] else None
        gw = _scale_in_place(grad_weight, scale) if ctx.needs_input_grad[1] else None
        return gh, gw, None, None, None, None


def _eager(hidden, weight, targets, ignore_index, chunk_tokens, kernels):
    return _LinearCrossEntropy.apply(hidden, weight, targets, ignore_index, chunk_tokens,
                                     kernels)


_dynamo = getattr(torch, "_dynamo", None)
if _dynamo is not None and hasattr(_dynamo, "disable"):
    # Where no custom operator can stand for it, torch.compile leaves the
    # Function out of the graph rather than trace into the program runner.
    _eager_outside_graphs = _dynamo.disable(_eager)
    _no_grad_outside_graphs = _dynamo.disable(fused_forward)
else:  # torch < 2.0: nothing compiles
    _eager_outside_graphs = _eager
    _no_grad_outside_graphs = fused_forward


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                         ignore_index: int = -100, chunk_tokens: Optional[int] = None,
                         kernels=None) -> torch.Tensor:
    """``F.cross_entropy((hidden @ weight.T).float(), targets,
    ignore_index=ignore_index)`` without the [tokens, vocab] logits
    (module docstring). ``hidden`` [..., H] (bf16; other float dtypes are
    cast for the GEMMs, their gradient returned in their dtype), ``weight``
    [V, H] bf16 or an f32 master (its bf16 copy is made per call and not
    kept), ``targets`` [...] class indices. ``chunk_tokens``: tokens per
    chunk (default: logits within 128 MiB). ``kernels``: the folder of the
    compiled program (default: coat's search path, compiled on first use
    where coat-opt is). All targets ignored: NaN, as torch's mean over no
    tokens."""
    if _dist.is_dtensor(weight) or _dist.is_dtensor(hidden):
        which = "weight" if _dist.is_dtensor(weight) else "hidden"
        raise ValueError(f"{_WHAT}: the {which} is a DTensor; the fused loss reads the whole "
                         "LM head weight. Under FSDP2, apply fully_shard to the module whose "
                         "forward calls the loss (the model), not to lm_head alone, whose own "
                         "forward never runs (docs/fsdp.md)")
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"{_WHAT}: hidden {tuple(hidden.shape)} and weight "
                         f"{tuple(weight.shape)}: the weight is [vocab, hidden]")
    h2 = hidden.reshape(-1, hidden.shape[-1])
    t = targets.reshape(-1).to(torch.int64).contiguous()
    if t.shape[0] != h2.shape[0]:
        raise ValueError(f"{_WHAT}: {t.shape[0]} targets for {h2.shape[0]} tokens")
    vocab = weight.shape[0]
    chunk = default_chunk_tokens(vocab) if chunk_tokens is None else int(chunk_tokens)
    if chunk < 1:
        raise ValueError(f"{_WHAT}: chunk_tokens must be positive, got {chunk_tokens}")
    _check_targets(t, vocab, ignore_index)
    h2 = h2.contiguous()
    if _torch_ops.AVAILABLE and torch.compiler.is_compiling():
        return _torch_ops.linear_cross_entropy(h2, weight, t, int(ignore_index), chunk,
                                               kernels)
    if not (torch.is_grad_enabled() and (h2.requires_grad or weight.requires_grad)):
        # An evaluation: the loss alone, without the gradients' GEMMs.
        loss_sum, valid, _, _ = _no_grad_outside_graphs(h2, weight, t, int(ignore_index),
                                                        chunk, kernels, False)
        return loss_sum / valid
    return _eager_outside_graphs(h2, weight, t, int(ignore_index), chunk, kernels)
