"""Compiled programs as torch custom operators, so that torch.compile and
its CUDA graphs take a program call as one opaque op (coat.nn's modules call
them under torch.compile; eager calls take the autograd Function, which runs
the same code without the operators' dispatch cost).

Two operators serve every program: ``coat::program_forward(key, what,
inputs)`` returns the program's returned outputs followed by the values its
launch plan saves for the backward that are not inputs (a qtensor as its
codes and its scale), and ``coat::program_backward(key, what, saved,
grads)`` returns the gradients the program computes, in input order.
``key`` names a program config registered by :func:`register` when its
module is built (the config's source key and kernel folder), so a compiled
graph holds it as a constant and the program is found, or compiled, when an
operator first runs; ``what`` names the call in errors. Fake
implementations give shapes and dtypes from the launch plan's value types
(every ``-1`` is the token count), the autograd formula saves what the plan
saves, and neither op mutates its arguments. Kernels launch on torch's
current stream, so a CUDA graph of the step captures them.
"""

from __future__ import annotations

import os
import threading
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from . import _dtypes
from .executor import Program, ProgramError, QTensor

#: Whether the operators exist: this torch has torch.library.custom_op (2.4
#: on), unless COAT_TORCH_OPS=0 keeps programs in the autograd Function
#: (which torch.compile cannot trace).
AVAILABLE = (hasattr(torch, "library") and hasattr(torch.library, "custom_op")
             and os.environ.get("COAT_TORCH_OPS", "1") != "0")


class _Layout:
    """How a program's values travel through the two operators."""

    def __init__(self, program: Program):
        from .nn._autograd import forward_inputs, returned_outputs

        self.program = program
        self.inputs = inputs = forward_inputs(program)
        self.n_inputs = len(inputs)
        self.returned = [program.outputs[i][0] for i in returned_outputs(program)]
        position = {v: i for i, v in enumerate(inputs)}
        # Saved values that are inputs are saved from the inputs; the others
        # leave the forward operator as extra outputs.
        self.saved_inputs = [position[v] for v in program.saved if v in position]
        self.saved_computed = [v for v in program.saved if v not in position]
        # The gradients the program computes (its backward tensor outputs
        # naming an input) and the input each is the gradient of.
        grads = [(v, g) for v, phase, g in program.outputs
                 if phase == "backward" and g is not None and program.values[v].kind == "tensor"]
        # A gradient the program passes through (a residual's: an incoming
        # gradient returned as an input's) does not go through the backward
        # operator, whose outputs may not alias its arguments (it would be
        # copied): the autograd function returns the incoming tensor itself.
        # (input position, index of the returned output whose gradient it is)
        returned_index = returned_outputs(program)
        incoming = {v: returned_index.index(g) for v, role, g in program.inputs
                    if role == "gradient" and g in returned_index}
        self.passed = [(position[program.inputs[g][0]], incoming[v])
                       for v, g in grads if v in incoming]
        grads = [(v, g) for v, g in grads if v not in incoming]
        self.grad_values = [v for v, _ in grads]
        self.grad_positions = [position[program.inputs[g][0]] for _, g in grads]

    def parts(self, vid: int, tokens) -> List[Tuple[tuple, torch.dtype]]:
        t = self.program.values[vid]
        shape = t.shape_for(tokens)
        if t.kind == "tensor":
            return [(shape, _dtypes.torch_dtypes(t.dtype)[0])]
        scale = t.scale_shape_for(tokens)
        return [(shape, _dtypes.torch_dtypes(t.dtype)[0]),
                (scale, _dtypes.torch_dtypes(t.scale_dtype)[0])]

    def forward_types(self, tokens) -> List[Tuple[tuple, torch.dtype]]:
        out = []
        for v in [*self.returned, *self.saved_computed]:
            out += self.parts(v, tokens)
        return out

    def flatten_saved(self, kept: Dict[int, object]) -> List[torch.Tensor]:
        flat: List[torch.Tensor] = []
        for v in self.saved_computed:
            x = kept[v]
            flat += [x.codes, x.scale] if isinstance(x, QTensor) else [x]
        return flat

    def unflatten_saved(self, saved: Sequence[torch.Tensor]) -> Dict[int, object]:
        """The saved values by id from the backward operator's ``saved``: the
        saved inputs, then the computed values' parts."""
        program, kept = self.program, {}
        inputs = self.inputs
        for pos, x in zip(self.saved_inputs, saved):
            kept[inputs[pos]] = x
        rest = list(saved[len(self.saved_inputs):])
        for v in self.saved_computed:
            if program.values[v].kind == "qtensor":
                kept[v] = QTensor(rest.pop(0), rest.pop(0))
            else:
                kept[v] = rest.pop(0)
        return kept

    def tokens(self, values: Dict[int, torch.Tensor]):
        """The token count of ``values`` (value id -> tensor): the extent of
        their first dynamic dimension (a SymInt under torch.compile)."""
        for vid, x in values.items():
            for d, got in zip(self.program.values[vid].shape, x.shape):
                if d < 0:
                    return got
        return 0


_lock = threading.Lock()
_configs: Dict[str, Tuple[object, Optional[str]]] = {}
_layouts: Dict[str, _Layout] = {}


def register(cfg, kernels: Optional[str] = None) -> str:
    """The operators' key of the program of ``cfg`` (a :mod:`coat.programs`
    config) from ``kernels`` (a folder, or None for the search path)."""
    from .toolchain import source_key

    key = f"{source_key(cfg.text())}@{kernels or ''}"
    with _lock:
        _configs.setdefault(key, (cfg, kernels))
    return key


def _lookup(key: str) -> Tuple[Program, _Layout]:
    """The program and layout of ``key``: found (or compiled) on first use."""
    from . import artifacts

    layout = _layouts.get(key)
    if layout is None:
        try:
            cfg, kernels = _configs[key]
        except KeyError:
            raise ProgramError(f"no coat program is registered as {key!r} in this "
                               "process") from None
        with _lock:
            layout = _layouts.setdefault(key, _Layout(artifacts.program(cfg, kernels)))
    return layout.program, layout


def _unaliased(out: List[torch.Tensor], args: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """``out`` with every tensor that is an argument or an earlier output
    copied: an operator's outputs may alias neither (a per-tensor scale a
    quantize reads is also its result's scale)."""
    seen = {id(a) for a in args}
    fresh = []
    for t in out:
        if id(t) in seen:
            t = t.clone()
        seen.add(id(t))
        fresh.append(t)
    return fresh


if AVAILABLE:
    @torch.library.custom_op("coat::program_forward", mutates_args=())
    def program_forward(key: str, what: str, inputs: List[torch.Tensor]) -> List[torch.Tensor]:
        from .nn._autograd import run_forward

        program, layout = _lookup(key)
        outs, kept, _ = run_forward(program, what, inputs)
        return _unaliased([*outs, *layout.flatten_saved(kept)], inputs)

    @program_forward.register_fake
    def _program_forward_fake(key, what, inputs):
        _, layout = _lookup(key)
        tokens = layout.tokens(dict(zip(layout.inputs, inputs)))
        device = inputs[0].device
        return [torch.empty(shape, dtype=dtype, device=device)
                for shape, dtype in layout.forward_types(tokens)]

    @torch.library.custom_op("coat::program_backward", mutates_args=())
    def program_backward(key: str, what: str, saved: List[torch.Tensor],
                         grads: List[torch.Tensor]) -> List[torch.Tensor]:
        from .nn._autograd import run_backward

        program, layout = _lookup(key)
        kept = layout.unflatten_saved(saved)
        tokens = program.tokens_of(dict(zip(layout.returned, grads)))
        out = run_backward(program, what, kept, grads, tokens, grads[0].device)
        return _unaliased([out[p] for p in layout.grad_positions], [*saved, *grads])

    @program_backward.register_fake
    def _program_backward_fake(key, what, saved, grads):
        _, layout = _lookup(key)
        tokens = layout.tokens(dict(zip(layout.returned, grads)))
        return [torch.empty(shape, dtype=dtype, device=grads[0].device)
                for v in layout.grad_values for shape, dtype in layout.parts(v, tokens)]

    def _setup_context(ctx, inputs, output):
        key, what, xs = inputs
        _, layout = _lookup(key)
        ctx.key, ctx.what = key, what
        ctx.returned = [(o.shape, o.device) for o in output[:len(layout.returned)]]
        ctx.save_for_backward(*[xs[p] for p in layout.saved_inputs],
                              *output[len(layout.returned):])

    def _backward(ctx, *grads):
        if len(grads) == 1 and isinstance(grads[0], (list, tuple)):
            grads = grads[0]
        _, layout = _lookup(ctx.key)
        gs = []
        for g, (shape, device) in zip(grads, ctx.returned):
            g = torch.zeros(shape, dtype=torch.bfloat16, device=device) if g is None else g
            gs.append(g.to(torch.bfloat16).contiguous())
        got = torch.ops.coat.program_backward(ctx.key, ctx.what, list(ctx.saved_tensors), gs)
        out: List[Optional[torch.Tensor]] = [None] * layout.n_inputs
        for pos, g in zip(layout.grad_positions, got):
            out[pos] = g
        for pos, k in layout.passed:
            out[pos] = gs[k]
        return None, None, out

    program_forward.register_autograd(_backward, setup_context=_setup_context)


if AVAILABLE:
    # coat.nn.linear_cross_entropy under torch.compile: the chunked LM head
    # and loss as one operator returning the mean loss and the gradients of
    # the loss sum (the backward only scales them; its one input that
    # matters is the loss's gradient).
    @torch.library.custom_op("coat::linear_cross_entropy", mutates_args=())
    def _linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor,
                              targets: torch.Tensor, ignore_index: int, chunk_tokens: int,
                              kernels: Optional[str]) -> List[torch.Tensor]:
        from .nn.cross_entropy import fused_forward

        loss_sum, valid, gh, gw = fused_forward(hidden, weight, targets, ignore_index,
                                                chunk_tokens, kernels)
        return [loss_sum / valid, valid, gh, gw.to(weight.dtype)]

    @_linear_cross_entropy.register_fake
    def _linear_cross_entropy_fake(hidden, weight, targets, ignore_index, chunk_tokens,
                                   kernels):
        f32 = torch.float32
        return [hidden.new_empty((), dtype=f32), hidden.new_empty((), dtype=f32),
                torch.empty_like(hidden), torch.empty_like(weight)]

    def _lce_setup_context(ctx, inputs, output):
        ctx.save_for_backward(output[1], output[2], output[3])

    def _lce_backward(ctx, grads):
        valid, gh, gw = ctx.saved_tensors
        from .nn.cross_entropy import _scale

        scale = _scale(grads[0], valid)
        return ((gh.float() * scale).to(gh.dtype), (gw.float() * scale).to(gw.dtype),
                None, None, None, None)

    _linear_cross_entropy.register_autograd(_lce_backward, setup_context=_lce_setup_context)


def linear_cross_entropy(hidden, weight, targets, ignore_index: int, chunk_tokens: int,
                         kernels=None):
    """coat.nn.linear_cross_entropy's mean loss through its operator."""
    kernels = None if kernels is None else str(kernels)
    return torch.ops.coat.linear_cross_entropy(hidden, weight, targets, ignore_index,
                                               chunk_tokens, kernels)[0]


def run(key: str, what: str, inputs: Sequence[torch.Tensor], returns: int = 1):
    """The first ``returns`` outputs the program registered as ``key``
    returns on ``inputs``, through the forward operator, differentiable
    through the backward one. (The count is the caller's, not looked up: a
    compiled forward traces this function, and it must not load a program.)"""
    out = torch.ops.coat.program_forward(key, what, list(inputs))
    return tuple(out[:returns])
