"""PyTorch modules whose forward and backward are compiled coat programs.

A module generates its block's program from its config (:mod:`coat.programs`),
finds or compiles its kernel set (:func:`coat.artifacts.program`), and runs the launch
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
from typing import Any, Callable, Dict, Iterable, List, Optional

import torch

from . import _torch_ops, artifacts, programs
from .executor import Program, ProgramError, QTensor

#: Tokens are padded to a multiple of this: the weight-gradient GEMMs reduce
#: over tokens and take K in multiples of 16. Zero rows change nothing (every
#: per-tensor scale is a maximum; a zero row normalises, projects and
#: back-propagates to zero).
TOKEN_MULTIPLE = 16

def forward_inputs(program: Program) -> List[int]:
    """The value ids of a program's forward inputs, in call order."""
    return [v for v, role, _ in program.inputs if role != "gradient"]


def returned_outputs(program: Program) -> List[int]:
    """The indices (into ``program.outputs``) of the outputs a forward
    returns: its tensors (a qtensor output stays inside the program)."""
    return [i for i, (v, phase, _) in enumerate(program.outputs)
            if phase == "forward" and program.values[v].kind == "tensor"]


def run_forward(program: Program, module_name: str, inputs):
    """The forward calls on ``inputs``: (returned tensors, the values the plan
    saves for the backward by id, the token count)."""
    env = dict(zip(forward_inputs(program), inputs))
    program.check_inputs(env)
    tokens = program.tokens_of(env)
    program.run(env, "forward", tokens, drop_dead=True)
    outs = [env[program.outputs[i][0]] for i in returned_outputs(program)]
    for o in outs:
        _check_finite(o, f"{module_name} forward output", "forward")
    # Only what the launch plan saves survives the forward.
    return outs, {v: env[v] for v in program.saved}, tokens


def run_backward(program: Program, module_name: str, kept: Dict[int, Any], grads,
                 tokens: int, device) -> List[Optional[torch.Tensor]]:
    """The backward calls from the saved values ``kept`` (consumed: each is
    freed after its last reader) and the gradients of the returned outputs
    (None: zero); the gradient of each forward input, None where the
    program computes none."""
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
    program.run(env, "backward", tokens, drop_dead=True)
    position = {v: i for i, v in enumerate(forward_inputs(program))}
    out: List[Optional[torch.Tensor]] = [None] * len(position)
    for vid, phase, grad_of in program.outputs:
        if phase == "backward" and grad_of is not None:
            x = env[vid]
            if isinstance(x, QTensor):
                continue
            _check_finite(x, f"{module_name} gradient of input {grad_of}", "backward")
            out[position[program.inputs[grad_of][0]]] = x
    return out


class _RunProgram(torch.autograd.Function):
    """Forward calls of a program now, its backward calls in backward(): how
    programs run eagerly (under torch.compile, :mod:`coat._torch_ops`'s
    operators run the same code)."""

    @staticmethod
    def forward(ctx, program: Program, module_name: str, *inputs):
        outs, kept, tokens = run_forward(program, module_name, inputs)
        ctx.program, ctx.tokens, ctx.module_name = program, tokens, module_name
        ctx.kept, ctx.device = kept, inputs[0].device
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        kept, ctx.kept = ctx.kept, None
        out = run_backward(ctx.program, ctx.module_name, kept, grads, ctx.tokens, ctx.device)
        return (None, None, *out)


class NonFiniteError(FloatingPointError):
    """A NaN or Inf left a compiled block (FP8 overflow upstream, or bad
    inputs); the message names the module and the value."""


class _StepFlags:
    """One device's finiteness flags: a slot per checked value (by name),
    ANDed with each check and read and reset together. The slots live in one
    buffer made before any capture, and a check writes its slot in place, so
    checks inside a CUDA graph (capture_step's, torch.compile's) allocate
    nothing that outlives them and replay as kernels of the graph."""

    CAPACITY = 1 << 16

    def __init__(self, device: torch.device):
        self.ok = torch.ones(self.CAPACITY, dtype=torch.bool, device=device)
        self.slots: Dict[str, torch.Tensor] = {}  # name -> its element of ok
        self.names: List[str] = []

    def record(self, what: str, x: torch.Tensor) -> None:
        slot = self.slots.get(what)
        if slot is None:
            i = len(self.names)
            if i == self.CAPACITY:
                raise RuntimeError(f"coat.nn: more than {self.CAPACITY} checked values")
            slot = self.slots[what] = self.ok[i:i + 1]
            self.names.append(what)
        slot.logical_and_(torch.isfinite(x).all())

    def check(self) -> None:
        if not self.names:
            return
        ok = self.ok[:len(self.names)]
        bad = (~ok).nonzero()  # the one synchronisation
        ok.fill_(True)
        if bad.numel():
            raise NonFiniteError(f"{self.names[int(bad[0, 0])]}: non-finite values (NaN/Inf)")


# Reading a flag waits for the GPU, so the flags of a whole step are read
# together, at the next step's first forward (or by check_finite()): one
# synchronisation a step instead of one per output.
_flags: Dict[torch.device, _StepFlags] = {}
_pending_phase = ""


def _flags_for(device: torch.device) -> _StepFlags:
    flags = _flags.get(device)
    if flags is None:
        flags = _flags[device] = _StepFlags(device)
    return flags


def check_finite() -> None:
    """Raises NonFiniteError naming the first module output or gradient that
    held a NaN or Inf since the last check; a training loop may call it after
    backward() to stop at the step itself. The next step's first forward of
    a compiled block calls it too, except in a step replayed from a CUDA
    graph of torch.compile (mode="reduce-overhead"), where no Python runs:
    call it there. COAT_CHECK_FINITE=0 turns checks off."""
    for flags in list(_flags.values()):
        flags.check()


def _check_finite(x: torch.Tensor, what: str, phase: str) -> None:
    global _pending_phase
    if not _CHECK_FINITE:
        return
    what = f"{what} ({tuple(x.shape)} {x.dtype})"
    if not x.is_cuda:
        if not torch.isfinite(x).all():  # no GPU to keep waiting: tell at once
            raise NonFiniteError(f"{what}: non-finite values (NaN/Inf)")
        return
    # Inside a capture nothing may synchronise: the flags are read after.
    if phase == "forward" and _pending_phase == "backward" and \
            not torch.cuda.is_current_stream_capturing():
        check_finite()
    _pending_phase = phase
    _flags_for(x.device).record(what, x)


# Checking costs one reduction per output; COAT_CHECK_FINITE=0 turns it off.
_CHECK_FINITE = os.environ.get("COAT_CHECK_FINITE", "1") != "0"


class GraphedStep:
    """A step captured in a CUDA graph by capture_step()."""

    def __init__(self, graph: "torch.cuda.CUDAGraph", result: Any):
        self.graph = graph
        self.result = result

    def replay(self) -> Any:
        """Runs the step again on the data now in the tensors it was
        captured with and returns what the step returned (the same tensors,
        overwritten). Its finiteness flags are read as an eager step's are:
        by check_finite() or at the next step (the next replay)."""
        global _pending_phase
        if _CHECK_FINITE:
            check_finite()
        self.graph.replay()
        _pending_phase = "backward"
        return self.result


def capture_step(step: Callable[[], Any], reset_grads: Iterable[torch.Tensor] = (),
                 warmup: int = 2) -> GraphedStep:
    """Captures a step that runs compiled modules on the GPU (for example
    ``lambda: block(h).backward(dy)``) in a CUDA graph, so that replaying it
    costs one host launch instead of one per kernel: small token counts are
    bound by the host otherwise.

    The step runs `warmup` times first on a side stream (that binds the
    kernels to this token count; a graph serves one shape). The gradients of
    `reset_grads` (the parameters, and inputs that require grad) are set to
    None before the capture, so that each replay writes them instead of
    adding to them. Replays read their inputs from the tensors the capture
    saw (copy new data into them) and overwrite outputs and gradients; keep
    the gradient tensors the capture made (``zero_grad(set_to_none=True)``
    after it would detach them from the graph).

    An optimizer that owns its gradient tensors (FP8AdamW's are views of its
    flat buffer, and it re-attaches any other tensor it finds) must keep
    them: pass no `reset_grads`, so the captured backward adds into them,
    and call ``optimizer.zero_grad(set_to_none=False)`` before each
    replay."""
    global _pending_phase
    from .optim import owns_grad

    if warmup < 1:
        raise ValueError(f"capture_step needs warmup >= 1 (the warm-up binds the "
                         f"kernels before the capture), got {warmup}")
    reset_grads = list(reset_grads)
    if any(owns_grad(t) for t in reset_grads):
        raise ValueError("capture_step: reset_grads holds parameters whose gradients an "
                         "FP8AdamW owns (views of its flat buffer; replays would write "
                         "tensors it no longer reads). Leave them out, so the captured "
                         "backward adds into them, and call "
                         "optimizer.zero_grad(set_to_none=False) before each replay")
    if not torch.cuda.is_available():
        raise RuntimeError("capture_step needs CUDA")
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError("capture_step is already capturing a step")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    check_finite()
    for t in reset_grads:
        t.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = step()
    _pending_phase = ""
    return GraphedStep(graph, result)


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
        if torch.cuda.is_available() and _CHECK_FINITE:
            _flags_for(torch.device("cuda", torch.cuda.current_device()))

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
    """``y = x W^T`` as FP8 GEMMs (COAT.md §3.4): x and W per-tensor E4M3
    forward, the output gradient per-tensor E5M2, dgrad and wgrad in FP8; the
    backward keeps x only as its FP8 transpose. Bias-free, like Llama's
    projections. ``weight`` is [out_features, in_features] as in
    torch.nn.Linear; both extents are multiples of 16."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False, *,
                 kernels: Optional[str] = None, device=None, dtype=torch.float32):
        if bias:
            raise ValueError("coat.nn.Linear: a bias is not supported (add it outside, or "
                             "leave the layer in high precision)")
        super().__init__([programs.LinearConfig(in_features, out_features)], kernels)
        self.in_features, self.out_features = in_features, out_features
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, device=device,
                                                     dtype=dtype))
        torch.nn.init.normal_(self.weight, std=in_features ** -0.5)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias=False"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _apply(self, x, self.in_features, self.weight)


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
    for p in module.parameters():
        if p.device != x.device:
            raise ValueError(f"{name}: input on {x.device}, parameters on {p.device}")


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
    ws = [w.to(torch.bfloat16).contiguous() for w in weights]
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

      qkv = W_qkv rmsnorm(x)           coat NormLinear (q, k, v as one GEMM)
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

    def extra_repr(self) -> str:
        return (f"hidden={self.hidden}, ffn={self.ffn}, heads={self.heads}, "
                f"kv_heads={self.kv_heads}")

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        from .llama import attention_core

        name = _module_name(self)
        if x.dim() != 3:
            raise ValueError(f"{name}: input must be [batch, seq, hidden], got {tuple(x.shape)}")
        _check_devices(self, x, name)
        b, s, _ = x.shape
        tokens = b * s
        at, mlp = self.self_attn, self.mlp
        bf = torch.bfloat16
        h = _tokens_2d(x, self.hidden, name)
        w_qkv = torch.cat([at.q_proj.weight, at.k_proj.weight, at.v_proj.weight]).to(bf)
        (qkv,) = self.run_program(0, f"{name} attention input", h,
                                  self.input_layernorm.weight.to(bf), w_qkv)
        q_n = self.heads * (self.hidden // self.heads)
        kv_n = (qkv.shape[1] - q_n) // 2
        q, k, v = qkv[:tokens].view(b, s, -1).split([q_n, kv_n, kv_n], dim=-1)
        a = attention_core(q, k, v, cos, sin, self.heads, self.kv_heads)
        a = _tokens_2d(a, q_n, name)
        (h,) = self.run_program(1, f"{name} attention output", h, a,
                                at.o_proj.weight.to(bf).contiguous())
        (h,) = self.run_program(2, f"{name} MLP", h,
                                self.post_attention_layernorm.weight.to(bf).contiguous(),
                                mlp.gate_proj.weight.to(bf).contiguous(),
                                mlp.up_proj.weight.to(bf).contiguous(),
                                mlp.down_proj.weight.to(bf).contiguous())
        return h[:tokens].view(b, s, self.hidden).to(x.dtype)


#: Modules :func:`convert` leaves in high precision unless told otherwise:
#: the embedding, the final norm and the LM head (as in COAT).
KEEP_HIGH_PRECISION = ("embed_tokens", "norm", "lm_head")


def convert(model: torch.nn.Module, *, keep=KEEP_HIGH_PRECISION, kernels=None) -> torch.nn.Module:
    """Replaces every Llama decoder layer of ``model`` (a module with
    ``self_attn.{q,k,v,o}_proj``, ``mlp.{gate,up,down}_proj``,
    ``input_layernorm`` and ``post_attention_layernorm``) in place by a
    :class:`DecoderLayer` around the same Parameters, so parameter names,
    the state_dict and an optimizer built afterwards are unchanged. Any other
    Linear or norm whose name is not in ``keep`` raises ValueError naming it:
    nothing silently stays in high precision."""
    converted = []
    for qual, mod in list(model.named_modules()):
        if not all(hasattr(mod, a) for a in ("self_attn", "mlp", "input_layernorm",
                                             "post_attention_layernorm")):
            continue
        at, mlp = mod.self_attn, mod.mlp

        def weight(owner, path):
            sub = getattr(owner, path.rpartition(".")[2], None)
            w = getattr(sub, "weight", None)
            where = f"{qual}.{path}" if qual else path
            if not isinstance(w, torch.nn.Parameter):
                raise ValueError(f"coat.convert: {where} has no weight Parameter")
            if getattr(sub, "bias", None) is not None:
                raise ValueError(f"coat.convert: {where} has a bias; the compiled layer "
                                 "takes bias-free projections and norms")
            return w

        weights = {a: weight(at, f"self_attn.{a}") for a in ("q_proj", "k_proj", "v_proj",
                                                              "o_proj")}
        weights.update({a: weight(mlp, f"mlp.{a}") for a in ("gate_proj", "up_proj",
                                                              "down_proj")})
        weights["input_layernorm"] = weight(mod, "input_layernorm")
        weights["post_attention_layernorm"] = weight(mod, "post_attention_layernorm")
        heads = getattr(at, "heads", None) or getattr(at, "num_heads", None)
        kv_heads = (getattr(at, "kv_heads", None) or getattr(at, "num_key_value_heads", None)
                    or heads)
        if heads is None:
            raise ValueError(f"coat.convert: {qual}.self_attn does not say its head count "
                             "(heads or num_heads)")
        eps = getattr(mod.input_layernorm, "eps", 1e-5)
        hidden = weights["q_proj"].shape[1]
        try:
            new = DecoderLayer(hidden, weights["gate_proj"].shape[0], heads, kv_heads, eps,
                               weights=weights, kernels=kernels)
        except ValueError as e:
            raise ValueError(f"coat.convert: {qual}: {e}") from None
        new._coat_name = qual
        parent_name, _, child = qual.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, new)
        converted.append(qual)
    if not converted:
        raise ValueError("coat.convert: no Llama decoder layer found (self_attn, mlp, "
                         "input_layernorm, post_attention_layernorm)")
    for qual, mod in model.named_modules():
        if isinstance(mod, (DecoderLayer, _Projections)) or any(
                qual == c or qual.startswith(c + ".") for c in converted):
            continue
        last = qual.rpartition(".")[2]
        is_norm = hasattr(mod, "eps") and isinstance(getattr(mod, "weight", None),
                                                     torch.nn.Parameter)
        if (isinstance(mod, torch.nn.Linear) or is_norm) and last not in keep:
            raise ValueError(f"coat.convert: {qual} ({type(mod).__name__}) is outside every "
                             f"decoder layer and not in keep={tuple(keep)}; add it to keep "
                             "to leave it in high precision")
    return model
