"""A compiled program under autograd: its forward calls now, its backward
calls when autograd asks, keeping exactly the values the launch plan saves."""

from __future__ import annotations

import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from .. import _dtypes
from ..executor import FLAG_WORDS, Program, ProgramError, QTensor
from . import finite
from .finite import check as _check_finite


class _Derivation:
    """How a program's bf16 weight was made from parameters (cast, rows
    concatenated, transposed), so that an eager call keeps this instead of
    the copy when its launch plan saves the weight for the backward (the
    compiler counts a weight as there in the backward:
    coat-recompute-activations derives its FP8 copy again from it). The
    parameters are alive anyway; the copy would be an extra two bytes per
    parameter between the forward and the backward."""

    def __init__(self, params: Sequence[torch.Tensor], transposed: bool = False):
        self.sources = list(params)  # the parameters themselves, whose gradient it is
        self.params = [p.detach() for p in params]
        self.versions = [p._version for p in params]
        self.transposed = transposed

    def again(self, what: str) -> torch.Tensor:
        """The same copy, made again; an error if a parameter was changed
        in place since the forward (its copy would differ)."""
        if [p._version for p in self.params] != self.versions:
            raise RuntimeError(f"{what}: a weight was modified in place between the forward "
                               "and the backward; its copy for the backward would differ")
        if any(_freed(p) for p in self.params):
            raise RuntimeError(_FREED.format(what=what))
        with torch.no_grad():
            return _derive(self.params, self.transposed)


def _derive(params: Sequence[torch.Tensor], transposed: bool = False) -> torch.Tensor:
    if transposed:
        # [in, out] parameters side by side, then the [out, in] matrix.
        w = params[0] if len(params) == 1 else torch.cat(list(params), dim=1)
        return w.t().to(torch.bfloat16, memory_format=torch.contiguous_format)
    w = params[0] if len(params) == 1 else torch.cat(list(params))
    return w.to(torch.bfloat16).contiguous()


def program_weight(*params: torch.Tensor, transposed: bool = False) -> torch.Tensor:
    """The bf16 weight a program takes from ``params`` (their rows
    concatenated, e.g. q, k and v projections): the parameter itself when it
    is one contiguous bf16 tensor; bf16 parameters adjacent in one storage
    in order (FP8AdamW's: views of its flat buffer) as one matrix over that
    memory, without a copy (eagerly); otherwise a copy, differentiable to the
    parameters, that is not kept for the backward: an eager program call
    keeps how to make it again (:class:`_Derivation`); under torch.compile
    the copy is made in a checkpointed region, which the partitioner
    recomputes in the backward rather than save (it would save the copy
    otherwise: a cast shrinks its input).

    ``transposed``: the parameters are [in, out] matrices (transformers'
    Conv1D, GPT-2's projections), concatenated along ``out``; the program
    takes the [out, in] transpose, always a copy made as above. Gradients
    land in the parameters in their own [in, out] shape."""
    if transposed and any(p.dim() != 2 for p in params):
        raise ValueError("program_weight(transposed=True) takes [in, out] matrices, got "
                         f"shapes {[tuple(p.shape) for p in params]}")
    if not transposed and len(params) == 1 and params[0].dtype == torch.bfloat16 and \
            params[0].is_contiguous():
        return params[0]
    compiler = getattr(torch, "compiler", None)  # torch >= 2.1
    if compiler is not None and compiler.is_compiling():
        from torch.utils.checkpoint import checkpoint

        return checkpoint(_derive_from, transposed, *params, use_reentrant=False)
    if not transposed and _adjacent_rows(params):
        w = _AdjacentRows.apply(*params)
        w._coat_rows_of = list(params)
        return w
    w = _derive(params, transposed)
    w._coat_derivation = _Derivation(params, transposed)
    return w


def _derive_from(transposed: bool, *params: torch.Tensor) -> torch.Tensor:
    return _derive(params, transposed)


def storage_of(t: torch.Tensor):
    """``t``'s storage (untyped where this torch has it)."""
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()


def _adjacent_rows(params: Sequence[torch.Tensor]) -> bool:
    """Whether ``params`` (two or more bf16 matrices) lie one after another
    in one storage, rows continuing rows: FP8AdamW's parameters are views of
    its flat buffer in parameter order, so a layer's q, k and v are."""
    first = params[0]
    if len(params) < 2 or first.dim() != 2 or first.dtype != torch.bfloat16:
        return False
    try:
        ptr = storage_of(first).data_ptr()
        end = first.storage_offset()
        for p in params:
            if (p.dtype != first.dtype or p.device != first.device or p.dim() != 2
                    or p.shape[1] != first.shape[1] or not p.is_contiguous()
                    or p.storage_offset() != end or storage_of(p).data_ptr() != ptr):
                return False
            end += p.numel()
    except (RuntimeError, NotImplementedError):  # tensors without storage (DTensor, fake)
        return False
    return True


class _AdjacentRows(torch.autograd.Function):
    """Matrices adjacent in one storage (:func:`_adjacent_rows`) as the one
    matrix of their rows, without a copy; its gradient is split back by
    rows (views, which AccumulateGrad may take as they are)."""

    @staticmethod
    def forward(ctx, *params: torch.Tensor) -> torch.Tensor:
        ctx.rows = [p.shape[0] for p in params]
        first = params[0]
        return first.new_empty(0).set_(storage_of(first), first.storage_offset(),
                                       (sum(ctx.rows), first.shape[1]), first.stride())

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return tuple(grad.split(ctx.rows))


def forward_inputs(program: Program) -> List[int]:
    """The value ids of a program's forward inputs, in call order."""
    return [v for v, role, _ in program.inputs if role != "gradient"]


def returned_outputs(program: Program) -> List[int]:
    """The indices (into ``program.outputs``) of the outputs a forward
    returns: its tensors (a qtensor output stays inside the program)."""
    return [i for i, (v, phase, _) in enumerate(program.outputs)
            if phase == "forward" and program.values[v].kind == "tensor"]


def _output_names(program: Program, module_name: str) -> List[str]:
    """How errors name each output of ``program`` called by ``module_name``."""
    names = []
    for vid, phase, grad_of in program.outputs:
        t = program.values[vid]
        what = {"forward": "forward output",
                "recompute": "recomputed forward output"}.get(phase,
                                                              f"gradient of input {grad_of}")
        names.append(f"{module_name} {what} ({program._shape_str(t.shape)} {t.dtype})")
    return names


def _flag_words(program: Program, module_name: str, phase: str, device):
    """The finiteness words this call's kernels write (one per output), or
    None when checks are off or no kernel of the program flags anything. On
    the GPU they are the call site's words of the step's flags; on the CPU
    fresh ones, read right after the call."""
    if not finite.ENABLED or not program.flagged:
        return None
    if device.type != "cuda":
        return torch.zeros(FLAG_WORDS * len(program.outputs), dtype=torch.int32)
    finite.begin(phase)
    return finite.flags_for(device).words((module_name, program.name),
                                          _output_names(program, module_name))


def _read_cpu_words(program: Program, module_name: str, words) -> None:
    if words is not None and words.device.type != "cuda":
        finite.raise_flagged(words, _output_names(program, module_name))


def run_forward(program: Program, module_name: str, inputs):
    """The forward calls on ``inputs``: (returned tensors, the values the plan
    saves for the backward by id, the token count)."""
    env = dict(zip(forward_inputs(program), inputs))
    program.check_inputs(env)
    tokens = program.tokens_of(env)
    words = _flag_words(program, module_name, "forward", inputs[0].device)
    program.run(env, "forward", tokens, drop_dead=True, flags=words)
    returned = returned_outputs(program)
    outs = [env[program.outputs[i][0]] for i in returned]
    _read_cpu_words(program, module_name, words)
    for i, o in zip(returned, outs):
        if i not in program.flagged:  # its kernel writes no flag
            _check_finite(o, f"{module_name} forward output", "forward")
    # Only what the launch plan saves survives the forward.
    return outs, {v: env[v] for v in program.saved}, tokens


def run_backward(program: Program, module_name: str, kept: Dict[int, Any], grads,
                 tokens: int, device,
                 into: Optional[Dict[int, torch.Tensor]] = None) -> List[Optional[torch.Tensor]]:
    """The backward calls from the saved values ``kept`` (consumed: each is
    freed after its last reader) and the gradients of the returned outputs
    (None: zero); the gradient of each forward input, None where the
    program computes none. ``into``: gradients written into given memory
    (:func:`gradient_destinations`)."""
    returned = returned_outputs(program)
    env = dict(kept)
    for vid, role, grad_of in program.inputs:
        if role != "gradient":
            continue
        if grad_of is None or grad_of not in returned:
            raise ProgramError(f"{program.name}: gradient input {vid} names no returned "
                               "output (coat.grad_of)")
        g = grads[returned.index(grad_of)]
        if g is None:
            g = torch.zeros(program.values[vid].shape_for(tokens), dtype=torch.bfloat16,
                            device=device)
        env[vid] = g.to(torch.bfloat16).contiguous()
    kept.clear()
    words = _flag_words(program, module_name, "backward", device)
    program.run(env, "backward", tokens, drop_dead=True, flags=words, into=into)
    _read_cpu_words(program, module_name, words)
    position = {v: i for i, v in enumerate(forward_inputs(program))}
    passed_through = {v for v, role, _ in program.inputs if role == "gradient"}
    out: List[Optional[torch.Tensor]] = [None] * len(position)
    for i, (vid, phase, grad_of) in enumerate(program.outputs):
        if phase == "backward" and grad_of is not None:
            x = env[vid]
            if isinstance(x, QTensor):
                continue
            # A gradient the program passes through unchanged (a residual's)
            # is no kernel's output: any NaN in it reaches this program's
            # flagged kernels (its GEMMs read it), so a reduction would only
            # check it twice.
            if i not in program.flagged and vid not in passed_through:
                _check_finite(x, f"{module_name} gradient of input {grad_of}", "backward")
            out[position[program.inputs[grad_of][0]]] = x
    return out


def gradient_owners(program: Program, inputs) -> Dict[int, Tuple[Any, List[torch.Tensor]]]:
    """Weight input value id -> (the optimizer that owns the gradient of
    the parameters behind it, those parameters) for each weight input that
    is a parameter or rows of parameters concatenated (program_weight)
    whose optimizer keeps gradient buffers (coat.optim.FP8AdamW): the
    calls whose backward may write the gradient into them."""
    from ..optim._grads import grad_owner

    roles = {v: role for v, role, _ in program.inputs}
    out = {}
    for vid, x in zip(forward_inputs(program), inputs):
        if roles[vid] != "weight":
            continue
        derivation = getattr(x, "_coat_derivation", None)
        if derivation is not None:
            if derivation.transposed:
                continue
            params = derivation.sources
        elif getattr(x, "_coat_rows_of", None) is not None:
            params = x._coat_rows_of
        elif x.is_leaf and x.requires_grad:
            params = [x]
        else:
            continue
        owner = grad_owner(params[0])
        if owner is not None and all(grad_owner(p) is owner for p in params[1:]):
            out[vid] = (owner, params)
    return out


def gradient_destinations(program: Program, owners, tokens: int) -> Dict[int, torch.Tensor]:
    """Gradient value id -> the memory its kernel writes it into: the
    owning optimizer's slots of the parameters (``grad_destination``),
    where it lends them (``owners``: :func:`gradient_owners`)."""
    into = {}
    if not owners:
        return into
    for vid, phase, grad_of in program.outputs:
        if phase != "backward" or grad_of is None:
            continue
        owner = owners.get(program.inputs[grad_of][0])
        t = program.values[vid]
        if owner is None or t.kind != "tensor":
            continue
        dest = owner[0].grad_destination(owner[1], t.shape_for(tokens),
                                         _dtypes.torch_dtypes(t.dtype)[0])
        if dest is not None:
            into[vid] = dest
    return into


def run_recompute(program: Program, kept: Dict[int, Any], tokens: int,
                  output: int) -> torch.Tensor:
    """Forward output ``output`` (an index into ``program.outputs``) made
    again by the program's ``recompute`` phase from the saved values
    ``kept``, which stay as they are for the backward. The same kernels on
    the same inputs: the bits of the forward's output."""
    copy = program.recomputed.get(output)
    if copy is None:
        raise ProgramError(f"{program.name}: output {output} has no recomputed copy "
                           "(coat.recompute)")
    env = dict(kept)
    # Its kernels' finiteness words go unread: the forward checked the bits.
    program.run(env, "recompute", tokens, drop_dead=True)
    return env[program.outputs[copy][0]]


class _RunProgram(torch.autograd.Function):
    """Forward calls of a program now, its backward calls in backward(): how
    programs run eagerly (under torch.compile, :mod:`coat._torch_ops`'s
    operators run the same code)."""

    @staticmethod
    def forward(ctx, program: Program, module_name: str, *inputs):
        outs, kept, tokens = run_forward(program, module_name, inputs)
        # A saved weight copy is kept as how to make it again.
        for vid, x in zip(forward_inputs(program), inputs):
            derivation = getattr(x, "_coat_derivation", None)
            if derivation is not None and vid in kept:
                kept[vid] = derivation
        ctx.program, ctx.tokens, ctx.module_name = program, tokens, module_name
        ctx.kept, ctx.device = kept, inputs[0].device
        ctx.owners = gradient_owners(program, inputs)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        kept, ctx.kept = ctx.kept, None
        _derive_kept(ctx, kept)
        into = gradient_destinations(ctx.program, ctx.owners, ctx.tokens)
        ctx.owners = None
        out = run_backward(ctx.program, ctx.module_name, kept, grads, ctx.tokens, ctx.device,
                           into)
        del into  # the gradients go to autograd as its only references
        return (None, None, *out)

    @staticmethod
    def recomputed_output(ctx, index: int) -> torch.Tensor:
        """Returned output ``index`` of the call whose node is ``ctx`` (the
        output's ``grad_fn``), made again from the values the call keeps for
        its backward, for a caller that did not keep it (the program marks
        it ``coat.recompute``). Before the call's backward only; computed
        once while the caller holds the result, and the backward still
        finds (and frees) every kept value."""
        program = ctx.program
        returned = returned_outputs(program)
        if not 0 <= index < len(returned):
            raise IndexError(f"{ctx.module_name}: the call returns {len(returned)} "
                             f"output(s), not {index + 1}")
        if ctx.kept is None:
            raise RuntimeError(f"{ctx.module_name} ({program.name}): its backward already "
                               "ran; the values its output is made from are gone")
        cache = getattr(ctx, "recomputed", None)
        if cache is None:
            cache = ctx.recomputed = {}
        ref = cache.get(index)
        out = ref() if ref is not None else None
        if out is None:
            _derive_kept(ctx, ctx.kept)  # the backward reuses the copies
            out = run_recompute(program, ctx.kept, ctx.tokens, returned[index])
            cache[index] = weakref.ref(out)
        return out


def _derive_kept(ctx, kept: Dict[int, Any]) -> None:
    """Makes the weight copies ``kept`` holds as derivations (once)."""
    what = f"{ctx.module_name} ({ctx.program.name})"
    for vid, x in kept.items():
        if isinstance(x, _Derivation):
            kept[vid] = x.again(what)
        elif isinstance(x, torch.Tensor) and _freed(x):
            raise RuntimeError(_FREED.format(what=what))


_FREED = ("{what}: a weight (or another value kept from the forward) that the backward "
          "reads has no storage now (FSDP2 frees the gathered weights after the forward and "
          "gathers them again before the layer's backward: was the layer's backward reached "
          "other than through its outputs, or the parameters resharded by hand?)")


def _freed(t: torch.Tensor) -> bool:
    """Whether ``t``'s storage is too small for it (freed: FSDP2 resizes an
    unsharded parameter's storage to 0 when it reshards)."""
    if t.numel() == 0:
        return False
    storage = storage_of(t)
    last = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return storage.nbytes() < (last + 1) * t.element_size()


def recomputed_output(node, index: int) -> torch.Tensor:
    """:meth:`_RunProgram.recomputed_output` of ``node``, the ``grad_fn`` of
    an eagerly run program's output."""
    if getattr(node, "_forward_cls", None) is not _RunProgram:
        raise TypeError(f"{node!r} is not the node of an eager program call")
    return _RunProgram.recomputed_output(node, index)

