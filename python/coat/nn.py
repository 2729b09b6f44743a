"""PyTorch modules whose forward and backward are compiled coat programs.

A module generates its block's program from its config (:mod:`coat.programs`),
finds or compiles its kernel set (:func:`block_kernels`), and runs the launch
plan the compiler exported (:mod:`coat.executor`) inside a
``torch.autograd.Function``: the forward calls, keeping exactly the values
the plan lists as saved for the backward (FP8 codes and scales where the
compiler chose FP8), then the backward calls when autograd asks.

    block = coat.nn.MLPBlock(hidden=1024, ffn=2816)
    y = block(h)                 # h + down(silu(gate(rmsnorm(h))) * up(rmsnorm(h)))
    y.sum().backward()

Tensors may be on the GPU (compiled kernels) or the CPU (their CPU twins).
"""

from __future__ import annotations

import os
from typing import Dict, Optional

import torch

from . import _paths, programs
from .executor import Program, ProgramError, QTensor, load_programs

#: Tokens are padded to a multiple of this: the weight-gradient GEMMs reduce
#: over tokens and take K in multiples of 16. Zero rows change nothing (every
#: per-tensor scale is a maximum; a zero row normalises, projects and
#: back-propagates to zero).
TOKEN_MULTIPLE = 16

_programs: Dict[str, Program] = {}


def cache_dir() -> str:
    """Where compiled kernel sets are kept: $COAT_KERNEL_CACHE, else
    ~/.cache/coat-mlir/kernels."""
    return os.environ.get("COAT_KERNEL_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "coat-mlir", "kernels")


def _holds_program(directory: str, name: str) -> bool:
    import json

    path = os.path.join(directory, "manifest.json")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return False
    return any(p.get("name") == name for p in doc.get("programs", []))


def block_kernels(cfg: programs.MLPBlockConfig, directory: Optional[str] = None) -> Program:
    """The compiled program of ``cfg``: from ``directory``, else a folder of
    $COAT_KERNELS or <build>/demo that holds it, else the cache (compiled
    there with coat-opt on first use). The GPU host has no LLVM: compile
    ahead with ``scripts/compile_model.py`` and carry the folder."""
    name = cfg.name
    key = f"{directory}:{name}"
    if key in _programs:
        return _programs[key]
    candidates = [directory] if directory else [
        *_paths.default_kernel_dirs(), os.path.join(cache_dir(), name)]
    found = next((d for d in candidates if d and _holds_program(d, name)), None)
    if found is None and directory is None:
        tool = _paths.find_coat_opt()
        if tool is None:
            raise RuntimeError(
                f"no compiled kernels for {name} (searched {', '.join(candidates)}) and no "
                "coat-opt to compile them: run scripts/compile_model.py where LLVM is and "
                "pass its output folder (or put it on COAT_KERNELS)")
        from .toolchain import Toolchain

        found = os.path.join(cache_dir(), name)
        os.makedirs(found, exist_ok=True)
        src = os.path.join(found, f"{name}.mlir")
        with open(src, "w", encoding="utf-8") as f:
            f.write(programs.mlp_block(cfg))
        Toolchain(coat_opt=tool).compile_program(src, found)
    if found is None:
        raise RuntimeError(f"{directory} holds no compiled program {name}")
    prog = load_programs(found)[name]
    _programs[key] = prog
    return prog


class _RunProgram(torch.autograd.Function):
    """Forward calls of a program now, its backward calls in backward()."""

    @staticmethod
    def forward(ctx, program: Program, module_name: str, *inputs):
        fwd_ids = [v for v, role, _ in program.inputs if role != "gradient"]
        env = dict(zip(fwd_ids, inputs))
        program.check_inputs(env)
        tokens = program.tokens_of(env)
        program.run(env, "forward", tokens)
        returned = [(i, v) for i, (v, phase, _) in enumerate(program.outputs)
                    if phase == "forward" and program.values[v].kind == "tensor"]
        ctx.program, ctx.tokens, ctx.module_name = program, tokens, module_name
        ctx.returned = [i for i, _ in returned]
        # Only what the launch plan saves survives the forward.
        ctx.kept = {v: env[v] for v in program.saved}
        ctx.like = inputs[0]
        outs = tuple(env[v] for _, v in returned)
        for o in outs:
            _check_finite(o, f"{module_name} forward output")
        return outs

    @staticmethod
    def backward(ctx, *grads):
        program: Program = ctx.program
        env = dict(ctx.kept)
        for vid, role, grad_of in program.inputs:
            if role != "gradient":
                continue
            if grad_of is None or grad_of not in ctx.returned:
                raise ProgramError(f"{program.name}: gradient input {vid} names no returned "
                                   "output (coat.grad_of)")
            g = grads[ctx.returned.index(grad_of)]
            t = program.values[vid]
            shape = t.resolve(t.shape, ctx.tokens)
            if g is None:
                g = torch.zeros(shape, dtype=torch.bfloat16, device=ctx.like.device)
            env[vid] = g.to(torch.bfloat16).contiguous()
        program.run(env, "backward", ctx.tokens)
        ctx.kept = None
        fwd_ids = [v for v, role, _ in program.inputs if role != "gradient"]
        position = {v: i for i, v in enumerate(fwd_ids)}
        out = [None] * len(position)
        for vid, phase, grad_of in program.outputs:
            if phase == "backward" and grad_of is not None:
                x = env[vid]
                if isinstance(x, QTensor):
                    continue
                _check_finite(x, f"{ctx.module_name} gradient of input {grad_of}")
                out[position[program.inputs[grad_of][0]]] = x
        return (None, None, *out)


class NonFiniteError(FloatingPointError):
    """A NaN or Inf left a compiled block (FP8 overflow upstream, or bad
    inputs); the message names the module."""


def _check_finite(x: torch.Tensor, what: str) -> None:
    if _CHECK_FINITE and not torch.isfinite(x).all():
        raise NonFiniteError(f"{what}: non-finite values (NaN/Inf) in a {tuple(x.shape)} "
                             f"{x.dtype} tensor")


# Checking costs one reduction per output; COAT_CHECK_FINITE=0 turns it off.
_CHECK_FINITE = os.environ.get("COAT_CHECK_FINITE", "1") != "0"


class _Weight(torch.nn.Module):
    def __init__(self, *shape):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(*shape))


class MLPBlock(torch.nn.Module):
    """``h + W_down(silu(W_gate n) * (W_up n))`` with ``n = rmsnorm(h)``,
    COAT's MLP block (COAT.md §3.5-3.6), as one compiled program.

    Parameters keep the names of a Llama layer's ``post_attention_layernorm``
    and ``mlp`` (``norm.weight``, ``gate_proj.weight``, ``up_proj.weight``,
    ``down_proj.weight``; see :func:`coat.convert`). They may be f32 (master
    weights for an optimizer) or bf16; the program reads bf16 copies. The
    input is ``[..., hidden]``; its leading extents are the token count.
    """

    def __init__(self, hidden: int, ffn: int, eps: float = 1e-5, *,
                 kernels: Optional[str] = None, dtype=torch.float32, device=None):
        super().__init__()
        self.config = programs.MLPBlockConfig(hidden=hidden, ffn=ffn, eps=eps)
        self.config.check()
        self.kernels = kernels
        self.norm = _Weight(hidden)
        self.gate_proj = _Weight(ffn, hidden)
        self.up_proj = _Weight(ffn, hidden)
        self.down_proj = _Weight(hidden, ffn)
        self.to(dtype=dtype, device=device)
        self.reset_parameters()
        self._program: Optional[Program] = None

    def reset_parameters(self) -> None:
        torch.nn.init.ones_(self.norm.weight)
        for p in (self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight):
            torch.nn.init.normal_(p, std=p.shape[1] ** -0.5)

    @property
    def program(self) -> Program:
        if self._program is None:
            self._program = block_kernels(self.config, self.kernels)
        return self._program

    def extra_repr(self) -> str:
        c = self.config
        return f"hidden={c.hidden}, ffn={c.ffn}, eps={c.eps}"

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        name = type(self).__name__
        if h.shape[-1] != self.config.hidden:
            raise ValueError(f"{name}: input has {h.shape[-1]} features, the block takes "
                             f"{self.config.hidden}")
        if h.dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"{name}: input dtype {h.dtype}; the block takes bf16 (or f32, "
                             "converted)")
        for p in self.parameters():
            if p.device != h.device:
                raise ValueError(f"{name}: input on {h.device}, parameters on {p.device}")
        lead = h.shape[:-1]
        x = h.reshape(-1, self.config.hidden).to(torch.bfloat16)
        tokens = x.shape[0]
        pad = -tokens % TOKEN_MULTIPLE
        if pad:
            x = torch.nn.functional.pad(x, (0, 0, 0, pad))
        weights = [w.to(torch.bfloat16) for w in (
            self.norm.weight, self.gate_proj.weight, self.up_proj.weight,
            self.down_proj.weight)]
        (y,) = _RunProgram.apply(self.program, name, x.contiguous(),
                                 *[w.contiguous() for w in weights])
        return y[:tokens].reshape(*lead, self.config.hidden).to(h.dtype)
