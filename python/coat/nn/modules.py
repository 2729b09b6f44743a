"""Modules whose forward and backward are one compiled program each: the
MLP block, Linear, RMSNorm and LayerNorm, and their base class."""

from __future__ import annotations

from typing import List, Optional

import torch

from .. import _dist, _torch_ops, artifacts, programs
from ..executor import Program
from . import finite
from ._autograd import _RunProgram, program_weight

#: Tokens are padded to a multiple of this: the weight-gradient GEMMs reduce
#: over tokens and take K in multiples of 16. Zero rows change nothing (every
#: per-tensor scale is a maximum; a zero row normalises, projects and
#: back-propagates to zero; a biased projection's padding rows hold the bias,
#: are cut off the output and receive zero gradient rows, so the bias
#: gradient sums only real tokens).
TOKEN_MULTIPLE = 16

class _Weight(torch.nn.Module):
    def __init__(self, *shape):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(*shape))


class _ProgramModule(torch.nn.Module):
    """A module whose forward and backward are compiled programs (one for
    most, three for a decoder layer), found or compiled on first use
    (:func:`coat.artifacts.program`)."""

    def __init__(self, configs, kernels: Optional[str]):
        super().__init__()
        for c in configs:
            c.check()
        self.configs = list(configs)
        self.kernels = kernels
        self._programs: Optional[List[Program]] = None
        # The custom operators' keys, made here so that a compiled forward
        # reads them as constants (coat._torch_ops).
        self._op_keys = [_torch_ops.register(c, kernels) for c in self.configs] \
            if _torch_ops.AVAILABLE else []
        # The flags outlive any CUDA graph, so they are made before one.
        if torch.cuda.is_available() and finite.ENABLED:
            finite.flags_for(torch.device("cuda", torch.cuda.current_device()))

    @property
    def config(self):
        return self.configs[0]

    @property
    def programs(self) -> List[Program]:
        if self._programs is None:
            self._programs = [artifacts.program(c, self.kernels) for c in self.configs]
        return self._programs

    @property
    def program(self) -> Program:
        return self.programs[0]

    def run_program(self, index: int, what: str, *inputs: torch.Tensor):
        """The returned outputs of program ``index`` on ``inputs`` (its forward
        inputs, in order), differentiable. Under torch.compile, the custom
        operator pair it takes as opaque calls; eagerly, the autograd
        Function, which runs the same code without the operators' dispatch
        (about 0.5 ms a call on an H100). ``what`` names the call in errors."""
        if _torch_ops.AVAILABLE and torch.compiler.is_compiling():
            return _torch_ops.run(self._op_keys[index], what, inputs)
        return _RunProgram.apply(self.programs[index], what, *inputs)


class MLPBlock(_ProgramModule):
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
        super().__init__([programs.MLPBlockConfig(hidden=hidden, ffn=ffn, eps=eps)], kernels)
        self.norm = _Weight(hidden)
        self.gate_proj = _Weight(ffn, hidden)
        self.up_proj = _Weight(ffn, hidden)
        self.down_proj = _Weight(hidden, ffn)
        self.to(dtype=dtype, device=device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        torch.nn.init.ones_(self.norm.weight)
        for p in (self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight):
            torch.nn.init.normal_(p, std=p.shape[1] ** -0.5)

    def extra_repr(self) -> str:
        c = self.config
        return f"hidden={c.hidden}, ffn={c.ffn}, eps={c.eps}"

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return _apply(self, h, self.config.hidden,
                      self.norm.weight, self.gate_proj.weight, self.up_proj.weight,
                      self.down_proj.weight)


class Linear(_ProgramModule):
    """``y = x W^T + b`` as FP8 GEMMs (COAT.md §3.4): x and W per-tensor E4M3
    forward, the output gradient per-tensor E5M2, dgrad and wgrad in FP8; the
    backward keeps x only as its FP8 transpose. ``weight`` is
    [out_features, in_features] as in torch.nn.Linear; both extents are
    multiples of 16.

    ``bias=True`` adds ``bias`` ([out_features]; read as bf16 like the
    weight) in the forward GEMM's epilogue, and its gradient is the output
    gradient summed over tokens in f32 (``coat.bias_grad``, summed in the
    kernel that reads that gradient for its FP8 scale), rounded to bf16
    once; the program is :class:`coat.programs.LinearConfig` with
    ``bias=True`` (``coat_linear_i<in>_o<out>_b``). The bias is initialised
    like torch.nn.Linear's, uniform in ±1/sqrt(in_features); the weight is
    normal with std 1/sqrt(in_features). Without a bias (the default, like
    Llama's projections) ``bias`` is None and the program is the bias-free
    one. Parameter names and the state_dict keys are torch.nn.Linear's
    (``weight``, ``bias``)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False, *,
                 kernels: Optional[str] = None, device=None, dtype=torch.float32):
        super().__init__([programs.LinearConfig(in_features, out_features, bias=bool(bias))],
                         kernels)
        self.in_features, self.out_features = in_features, out_features
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, device=device,
                                                     dtype=dtype))
        torch.nn.init.normal_(self.weight, std=in_features ** -0.5)
        if bias:
            self.bias = torch.nn.Parameter(torch.empty(out_features, device=device, dtype=dtype))
            bound = in_features ** -0.5
            torch.nn.init.uniform_(self.bias, -bound, bound)
        else:
            self.register_parameter("bias", None)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ws = (self.weight,) if self.bias is None else (self.weight, self.bias)
        return _apply(self, x, self.in_features, *ws)


class RMSNorm(_ProgramModule):
    """RMSNorm whose input is kept for the backward as its 1x16 E4M3 copy
    (COAT's precision flow, §3.6) and whose output is bf16."""

    def __init__(self, hidden: int, eps: float = 1e-5, *, kernels: Optional[str] = None,
                 device=None, dtype=torch.float32):
        super().__init__([programs.NormConfig(hidden, "rmsnorm", eps=eps)], kernels)
        self.hidden, self.eps = hidden, eps
        self.weight = torch.nn.Parameter(torch.ones(hidden, device=device, dtype=dtype))

    def extra_repr(self) -> str:
        return f"{self.hidden}, eps={self.eps}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _apply(self, x, self.hidden, self.weight)


class LayerNorm(_ProgramModule):
    """Affine LayerNorm (weight, optional bias) whose input is kept for the
    backward as its 1x16 E4M3 copy; bf16 output."""

    def __init__(self, hidden: int, eps: float = 1e-5, bias: bool = True, *,
                 kernels: Optional[str] = None, device=None, dtype=torch.float32):
        super().__init__([programs.NormConfig(hidden, "layernorm", bias=bias, eps=eps)],
                         kernels)
        self.hidden, self.eps = hidden, eps
        self.weight = torch.nn.Parameter(torch.ones(hidden, device=device, dtype=dtype))
        self.bias = (torch.nn.Parameter(torch.zeros(hidden, device=device, dtype=dtype))
                     if bias else None)

    def extra_repr(self) -> str:
        return f"{self.hidden}, eps={self.eps}, bias={self.bias is not None}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ws = (self.weight,) if self.bias is None else (self.weight, self.bias)
        return _apply(self, x, self.hidden, *ws)


def _module_name(module: torch.nn.Module) -> str:
    return f"{type(module).__name__} {getattr(module, '_coat_name', '')}".strip()


def _check_devices(module: torch.nn.Module, x: torch.Tensor, name: str) -> None:
    for pname, p in module.named_parameters():
        if _dist.is_dtensor(p):
            raise ValueError(_sharded_weight_error(module, name, pname, p))
        if p.device != x.device:
            raise ValueError(f"{name}: input on {x.device}, parameters on {p.device}")


def _sharded_weight_error(module: torch.nn.Module, name: str, pname: str, p) -> str:
    """What to say when a DTensor weight would reach a program. The programs
    read whole weights (each quantized with one scale of all of it). FSDP2
    gives a module's forward its whole parameters when fully_shard wraps
    that module or one above it; one wrapped inside a converted layer
    (its ``mlp``, ``self_attn.q_proj``: holders whose own forward never
    runs) keeps them sharded."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except Exception:  # torch without FSDP2 (1.13's import fails on Python 3.11: ValueError)
        FSDPModule = ()
    parts = pname.split(".")[:-1]
    wrapped = [".".join(parts[:i]) for i in range(1, len(parts) + 1)
               if isinstance(module.get_submodule(".".join(parts[:i])), FSDPModule)]
    how = (f"fully_shard was applied to {wrapped[0]} inside it, whose own forward never runs; "
           "apply it to this module or one above it (a decoder layer, the model) instead"
           if wrapped else "it is sharded outside FSDP2's forward (tensor parallelism of a "
           "converted layer is not supported); under FSDP2, apply fully_shard to this module "
           "or one above it")
    return (f"{name}: parameter {pname} is a DTensor ({', '.join(map(str, p.placements))}) in "
            f"the forward, and the compiled programs read whole weights: {how} "
            "(docs/fsdp.md)")


def _apply(module: "_ProgramModule", x: torch.Tensor, features: int,
           *weights: torch.Tensor) -> torch.Tensor:
    """Runs a one-input program on ``x`` [..., features] (the leading extents
    are the tokens) with the module's weights read as bf16; the result has
    x's leading extents and dtype."""
    name = _module_name(module)
    _check_devices(module, x, name)
    lead = x.shape[:-1]
    tokens = x.numel() // max(x.shape[-1], 1)
    m = _tokens_2d(x, features, name)
    ws = [program_weight(w) for w in weights]
    (y,) = module.run_program(0, name, m, *ws)
    return y[:tokens].reshape(*lead, y.shape[-1]).to(x.dtype)


def _tokens_2d(x: torch.Tensor, features: int, name: str):
    """x as a [tokens, features] bf16 matrix padded to TOKEN_MULTIPLE rows."""
    if x.shape[-1] != features:
        raise ValueError(f"{name}: input has {x.shape[-1]} features, the layer takes {features}")
    if x.dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"{name}: input dtype {x.dtype}; the layer takes bf16 (or f32, "
                         "converted)")
    m = x.reshape(-1, features).to(torch.bfloat16)
    pad = -m.shape[0] % TOKEN_MULTIPLE
    if pad:
        m = torch.nn.functional.pad(m, (0, 0, 0, pad))
    return m.contiguous()


