"""The project's Llama decoder layer (coat.llama's layout) as three compiled
programs around BF16 attention."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Dict, Optional

import torch

from .. import _torch_ops, programs
from ._autograd import program_weight, recomputed_output, storage_of
from .modules import _ProgramModule, _check_devices, _module_name, _tokens_2d

class _Projections(torch.nn.Module):
    """Holds existing weight Parameters under their module names."""

    def __init__(self, **weights: torch.nn.Parameter):
        super().__init__()
        for name, w in weights.items():
            holder = torch.nn.Module()
            holder.weight = w
            self.add_module(name, holder)


def _storage_ptr(t: torch.Tensor) -> int:
    return storage_of(t).data_ptr()


class _SavedView:
    """What autograd keeps of a tensor that views the attention-input
    program's output: the view (size, stride, offset into the output), no
    data."""

    __slots__ = ("source", "size", "stride", "offset")

    def __init__(self, source: "_RecomputedInputs", t: torch.Tensor, offset: int):
        self.source = source
        self.size, self.stride, self.offset = tuple(t.shape), t.stride(), offset


class _RecomputedInputs:
    """The saved-tensor hooks of one layer's attention core: a saved tensor
    that shares the storage of ``qkv`` (the attention-input program's
    output) is packed as a :class:`_SavedView`; unpacking one asks the
    program's node for ``qkv`` made again (once: the views of one backward
    share it, and it goes with them) and returns the same view of it. Any
    other saved tensor is kept as it is. Holds no reference to ``qkv``."""

    def __init__(self, qkv: torch.Tensor, what: str):
        self.node, self.what = qkv.grad_fn, what
        self.ptr, self.offset = _storage_ptr(qkv), qkv.storage_offset()
        self.shape, self.dtype, self.device = tuple(qkv.shape), qkv.dtype, qkv.device
        self.copy: Optional[torch.Tensor] = None

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def pack(self, t: torch.Tensor):
        if t.device != self.device or t.dtype != self.dtype or t.layout != torch.strided:
            return t
        try:
            shared = _storage_ptr(t) == self.ptr
        except (RuntimeError, NotImplementedError):  # a tensor without storage
            return t
        return _SavedView(self, t, t.storage_offset() - self.offset) if shared else t

    def unpack(self, packed):
        if not isinstance(packed, _SavedView):
            return packed
        if self.copy is None:
            copy = recomputed_output(self.node, 0)
            if tuple(copy.shape) != self.shape or not copy.is_contiguous():
                raise RuntimeError(f"{self.what}: the recomputed output is "
                                   f"{tuple(copy.shape)}, the forward's was {self.shape}")
            self.copy = copy
        return self.copy.as_strided(packed.size, packed.stride,
                                    self.copy.storage_offset() + packed.offset)


def _saved_by_producer(t: torch.Tensor, depth: int = 4) -> bool:
    """Whether the autograd node that made ``t`` (through up to ``depth``
    nodes: the transpose and reshape after attention) saves a tensor sharing
    its storage for its own backward: SDPA's nodes save their output
    (``_saved_output``), a Python Function what it saved."""
    try:
        ptr = _storage_ptr(t)
    except (RuntimeError, NotImplementedError):
        return False
    node = t.grad_fn
    for _ in range(depth):
        if node is None:
            return False
        saved = [getattr(node, n, None) for n in ("_saved_output", "_saved_result")]
        if not any(isinstance(x, torch.Tensor) for x in saved):
            try:
                saved = list(getattr(node, "saved_tensors", ()) or ())
            except RuntimeError:  # freed, or not a Python Function
                saved = []
        for x in saved:
            if isinstance(x, torch.Tensor) and x.device == t.device:
                try:
                    if _storage_ptr(x) == ptr:
                        return True
                except (RuntimeError, NotImplementedError):
                    pass
        nexts = [f for f, _ in node.next_functions if f is not None]
        node = nexts[0] if nexts else None
    return False


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

    ``recompute_attention_inputs`` (also settable after construction, e.g.
    on the layers :func:`coat.convert` made): attention's autograd does not
    keep q, k and v (views of the program's q/k/v projection, all of it
    [tokens, (heads + 2 kv_heads) head_dim] bf16) until the backward;
    the first program (compiled with ``recompute_output``, its name ends
    in ``_rc``) makes the projection again there, the same kernels on the
    values it keeps anyway, so attention's backward gets the same bits.
    SDPA's other saved tensors (its output, logsumexp, RNG state) are kept
    as usual. It frees the projection where it is the only copy: q and k
    rotated in the program (:attr:`rope_in_program`). Under torch.compile
    the option is not applied (the layer keeps the projection; the
    compiled graph's saved tensors are the partitioner's).

    ``keep_gemm_operands`` (also settable after construction): the
    attention-input and MLP programs keep the per-tensor FP8 operands of
    their backward GEMMs (the norm outputs' and the SwiGLU product's
    transposed copies) from the forward instead of deriving them again in
    the backward (:class:`coat.programs.MLPBlockConfig`'s; names ending in
    ``_kg``): more memory between the forward and the backward, fewer
    kernels in the backward, the same bits. Off by default (least memory).

    ``reuse_attention_output`` (also settable after construction): the
    attention-output program reads attention's output, which SDPA's
    autograd keeps for its own backward anyway, in its backward and
    quantizes the o-projection's wgrad operand from it again, instead of
    keeping an FP8 copy of it (:class:`coat.programs.LinearResidualConfig`'s
    ``input_kept_by_caller``; its name ends in ``_kc``): one byte a value of
    the attention output less between the forward and the backward, one
    quantization more in the backward, the same bits. Not with
    ``keep_gemm_operands``, which keeps that copy. Where attention turns out
    not to keep its output (another SDPA backend), the program's keeping it
    would cost memory instead: the layer checks at its first forward and
    warns.
    """

    def __init__(self, hidden: int, ffn: int, heads: int, kv_heads: int, eps: float = 1e-5,
                 *, weights: Optional[Dict[str, torch.nn.Parameter]] = None,
                 kernels: Optional[str] = None, device=None, dtype=torch.float32,
                 recompute_attention_inputs: bool = False, keep_gemm_operands: bool = False,
                 reuse_attention_output: bool = False):
        name = type(self).__name__
        try:
            super().__init__(programs.decoder_layer_configs(
                hidden, ffn, heads, kv_heads, eps,
                recompute_output=bool(recompute_attention_inputs),
                keep_gemm_operands=bool(keep_gemm_operands),
                reuse_attention_output=bool(reuse_attention_output)), kernels)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        self._reuse_attention_output = bool(reuse_attention_output)
        self._checked_attention_output = False
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

    @property
    def recompute_attention_inputs(self) -> bool:
        """Whether the backward makes q, k and v again instead of attention
        keeping them (see the class)."""
        return self.configs[0].recompute_output

    @recompute_attention_inputs.setter
    def recompute_attention_inputs(self, on: bool) -> None:
        on = bool(on)
        if on == self.recompute_attention_inputs:
            return
        self._replace_configs([0], recompute_output=on)

    @property
    def keep_gemm_operands(self) -> bool:
        """Whether the programs keep their backward GEMMs' FP8 operands from
        the forward (see the class)."""
        return self.configs[0].keep_gemm_operands

    @keep_gemm_operands.setter
    def keep_gemm_operands(self, on: bool) -> None:
        on = bool(on)
        if on == self.keep_gemm_operands:
            return
        self._replace_configs([0, 2], keep_gemm_operands=on)
        self._replace_configs([1], input_kept_by_caller=self._reuse_attention_output and not on)

    @property
    def reuse_attention_output(self) -> bool:
        """Whether the attention-output program reads attention's kept
        output in its backward instead of keeping an FP8 copy (see the
        class; off while ``keep_gemm_operands`` keeps the copy)."""
        return self.configs[1].input_kept_by_caller

    @reuse_attention_output.setter
    def reuse_attention_output(self, on: bool) -> None:
        self._reuse_attention_output = bool(on)
        want = self._reuse_attention_output and not self.keep_gemm_operands
        if want != self.configs[1].input_kept_by_caller:
            self._replace_configs([1], input_kept_by_caller=want)

    def _replace_configs(self, indices, **changes) -> None:
        indices = [i for i in indices
                   if dataclasses.replace(self.configs[i], **changes) != self.configs[i]]
        if not indices:
            return
        for i in indices:
            self.configs[i] = dataclasses.replace(self.configs[i], **changes)
            if self._op_keys:
                self._op_keys[i] = _torch_ops.register(self.configs[i], self.kernels)
        self._programs = None  # found (or compiled) again on first use

    def extra_repr(self) -> str:
        return (f"hidden={self.hidden}, ffn={self.ffn}, heads={self.heads}, "
                f"kv_heads={self.kv_heads}, rope_in_program={self.rope_in_program}"
                f"{', recompute_attention_inputs=True' if self.recompute_attention_inputs else ''}"
                f"{', keep_gemm_operands=True' if self.keep_gemm_operands else ''}"
                f"{', reuse_attention_output=True' if self.reuse_attention_output else ''}")

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
        if (self.recompute_attention_inputs and qkv.grad_fn is not None
                and not (_torch_ops.AVAILABLE and torch.compiler.is_compiling())):
            with _RecomputedInputs(qkv, f"{name} attention input").hooks():
                a = attention_core(q, k, v, cos, sin, self.heads, self.kv_heads)
        else:
            a = attention_core(q, k, v, cos, sin, self.heads, self.kv_heads)
        a = _tokens_2d(a, q_n, name)
        if (self.reuse_attention_output and a.grad_fn is not None
                and not self._checked_attention_output
                and not (_torch_ops.AVAILABLE and torch.compiler.is_compiling())):
            # Once: the backend SDPA picks for a layer's shapes stays.
            self._checked_attention_output = True
            if not _saved_by_producer(a):
                warnings.warn(f"{name}: reuse_attention_output is set, but attention's "
                              f"autograd does not keep its output (another SDPA backend?): "
                              f"the attention-output program keeps it in BF16, more memory "
                              f"than its FP8 copy; unset the option", stacklevel=2)
        (h,) = self.run_program(1, f"{name} attention output", h, a,
                                program_weight(at.o_proj.weight))
        (h,) = self.run_program(2, f"{name} MLP", h,
                                program_weight(self.post_attention_layernorm.weight),
                                program_weight(mlp.gate_proj.weight),
                                program_weight(mlp.up_proj.weight),
                                program_weight(mlp.down_proj.weight))
        return h[:tokens].view(b, s, self.hidden).to(x.dtype)

