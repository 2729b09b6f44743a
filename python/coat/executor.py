"""Runs a compiled program from its launch plan (manifest ``programs``).

``coat-compile-artifact`` records, for an outlined program, its values and
their types, the kernel calls in order (each ``forward`` or ``backward``),
the outputs and the values the forward keeps for the backward (and for the
``recompute`` phase, which makes a forward output marked ``coat.recompute``
again when the caller dropped it and asks); each kernel's
arguments say which value of its spec they are (``bind``). The C++ manifest
reader checks all of it when the manifest is read and makes each call's plan
for a token count (coat_manifest.h): the buffers to allocate, which buffer
each kernel argument is, the scalars. The executor only follows the plan: it
allocates and launches, on CUDA tensors through the GPU runtime or on CPU
tensors through the CPU twins. Nothing here knows what a norm or a GEMM is.

Every dynamic extent (``-1``) of a program is its token count (batch x
sequence), taken from the inputs; docs/manifest.md, "Programs".
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Optional, Tuple

from . import _dtypes, traffic
from .manifest import ProgramError
from .runtime import Kernel, Module, load


#: int32 words per flag in a ``flags`` tensor: the runtime takes 16-byte
#: aligned buffers, so output k's flag is word FLAG_WORDS * k.
FLAG_WORDS = 4


@dataclasses.dataclass
class QTensor:
    """A quantized value: FP8 codes and the scale tensor of its scaling."""

    codes: Any
    scale: Any

    def part(self, name: str):
        if name not in ("codes", "scale"):
            raise ProgramError(f"a qtensor has no part {name!r}")
        return getattr(self, name)


@dataclasses.dataclass(frozen=True)
class ValueType:
    kind: str  # "tensor" | "qtensor"
    shape: Tuple[int, ...]  # -1: the token count
    dtype: str
    scaling: str = ""
    scale_dtype: str = ""
    scale_shape: Tuple[int, ...] = ()

    def shape_for(self, tokens: int) -> Tuple[int, ...]:
        """The shape for ``tokens`` tokens (a qtensor's: its codes')."""
        return tuple(tokens if d < 0 else d for d in self.shape)

    def scale_shape_for(self, tokens: int) -> Tuple[int, ...]:
        """A qtensor's scale shape for ``tokens`` tokens."""
        return tuple(tokens if d < 0 else d for d in self.scale_shape)


@dataclasses.dataclass(frozen=True)
class Step:
    spec: str
    phase: str
    operands: Tuple[int, ...]
    results: Tuple[int, ...]
    kernels: Tuple[Kernel, ...]  # the spec's, then those of config.of


class Program:
    """One program of a compiled module, ready to run. ``plan``: its entry of
    the manifest's ``programs``, as the reader validated it."""

    def __init__(self, module: Module, plan: Dict[str, Any]):
        self.module = module
        self.name = plan["name"]
        self.values = [ValueType(v["kind"], tuple(v["shape"]), v["dtype"],
                                 v.get("scaling", ""), v.get("scale_dtype", ""),
                                 tuple(v.get("scale_shape", ())))
                       for v in plan["values"]]
        self.inputs = [(i["value"], i["role"], i["grad_of"]) for i in plan["inputs"]]
        self.outputs = [(o["value"], o["phase"], o["grad_of"]) for o in plan["outputs"]]
        #: Forward output index -> the index of its copy in the ``recompute``
        #: phase (``recompute_of``): outputs a caller may drop after the
        #: forward and ask for again (:meth:`run` with phase "recompute").
        self.recomputed = {o["recompute_of"]: i for i, o in enumerate(plan["outputs"])
                           if o.get("recompute_of") is not None}
        self.saved = tuple(plan["saved"])
        self.steps = [Step(s["spec"], s["phase"], tuple(s["operands"]), tuple(s["results"]),
                           tuple(module.kernels[k] for k in s["kernels"]))
                      for s in plan["steps"]]
        #: Indices into ``outputs`` of the values whose kernels write a
        #: finiteness flag (``finite(out<i>)`` bindings, coat.finite_flag).
        self.flagged = frozenset(i for i, o in enumerate(plan["outputs"]) if o["flagged"])
        self._plans: Dict[Tuple[int, int, str], _StepPlan] = {}
        # (phase, tokens, kind, device) -> (bytes, step index -> [(offset,
        # extent, dtype)]): where each step's workspaces lie in a run's one
        # zeroed buffer.
        self._scratch_layouts: Dict[Tuple[Any, ...], Tuple[int, Dict[int, List[Any]]]] = {}
        self._unread_flags: Dict[Any, Any] = {}  # per device, for runs without flags
        self._dead: Dict[Optional[str], Dict[int, Tuple[int, ...]]] = {}

    def __repr__(self) -> str:
        return f"<coat.Program {self.name}: {len(self.steps)} calls>"

    # -- values ------------------------------------------------------------
    def input_ids(self, role: Optional[str] = None) -> List[int]:
        return [v for v, r, _ in self.inputs if role is None or r == role]

    def tokens_of(self, env: Dict[int, Any]) -> int:
        """The token count: every dynamic extent of the given inputs."""
        tokens = None
        for vid, x in env.items():
            t = self.values[vid]
            got = tuple(x.codes.shape if isinstance(x, QTensor) else x.shape)
            if len(got) != len(t.shape) or any(d >= 0 and d != g for d, g in zip(t.shape, got)):
                raise ProgramError(f"program {self.name}: input {vid} has shape {list(got)}, "
                                   f"the program takes {self._shape_str(t.shape)}")
            for d, g in zip(t.shape, got):
                if d < 0:
                    if tokens is not None and g != tokens:
                        raise ProgramError(f"program {self.name}: inputs disagree on the token "
                                           f"count ({tokens} and {g})")
                    tokens = g
        return tokens if tokens is not None else 0

    @staticmethod
    def _shape_str(shape) -> str:
        return "[" + ", ".join("T" if d < 0 else str(d) for d in shape) + "]"

    def check_inputs(self, env: Dict[int, Any]) -> None:
        for vid, x in env.items():
            t = self.values[vid]
            if t.kind != "tensor":
                continue
            if x.dtype not in _dtypes.torch_dtypes(t.dtype):
                raise ProgramError(f"program {self.name}: input {vid} is {x.dtype}, the program "
                                   f"takes {t.dtype}")

    # -- running -----------------------------------------------------------
    def run(self, env: Dict[int, Any], phase: Optional[str] = None,
            tokens: Optional[int] = None, *, drop_dead: bool = False,
            flags: Any = None, into: Optional[Dict[int, Any]] = None) -> Dict[int, Any]:
        """Runs the calls of ``phase`` (all when None) on ``env`` (value id ->
        tensor or QTensor), adding their results to it. Returns ``env``.
        Phases: "forward", "backward", and "recompute" (any number of times
        between the two, from the saved values, on demand).

        With ``drop_dead``, each value leaves ``env`` after the last call of
        the run that reads it, so its memory serves the next calls' results;
        the outputs and, in a forward, the saved values stay (what autograd
        uses; without it every intermediate stays, for inspection).

        ``flags``: an int32 tensor of FLAG_WORDS words per output, on the
        values' device; the kernels of the :attr:`flagged` outputs write a
        non-zero value into word FLAG_WORDS * k of output k where they store
        a NaN or an infinity (they never clear it). None: words of the
        program's own that nobody reads.

        The first run of a step for a token count and device kind checks
        every launch (Kernel.bind); later runs replay the recorded launches
        without checking again (same shapes, dtypes and device).

        ``into``: value id -> a tensor the call computing that value writes
        it into, instead of memory of its own (a weight's gradient written
        straight into an optimizer's buffer); it must be a result the call
        allocates, of exactly its shape and dtype, contiguous, on the
        values' device."""
        if tokens is None:
            tokens = self.tokens_of(env)
        streams: Dict[Any, int] = {}  # per device, looked up once a run
        dead_after = {}
        if drop_dead:  # per phase once: runs are on the host's critical path
            dead_after = self._dead.get(phase)
            if dead_after is None:
                dead_after = self._dead[phase] = self._dead_after(phase)
        scratch = self._scratch_of_run(phase, tokens, env)
        for i, step in enumerate(self.steps):
            if phase is None or step.phase == phase:
                self._run_step(i, step, env, tokens, streams, flags, into, scratch.get(i))
                # (torch's caching allocator reuses freed memory in stream
                # order, so a later call may take it at once.)
                for vid in dead_after.get(i, ()):
                    env.pop(vid, None)
        return env

    def launch_costs(self, tokens: int,
                     phase: Optional[str] = None) -> List[Tuple[str, str, int, int]]:
        """(kernel, op, bytes, flop) of every launch a run of ``phase`` (all
        when None) makes for ``tokens`` tokens, in order, from the launch
        plans and the values' types alone (nothing allocated or run): what
        traffic.count_traffic records of such a run on the CPU (a norm
        backward's column-sum workspace is sized by the CPU's rule)."""
        out = []
        for index, step in enumerate(self.steps):
            if phase is not None and step.phase != phase:
                continue
            plan = self.module.manifest.reader.plan(self.name, index, tokens, None)
            for launch in plan["launches"]:
                kernel = self.module.kernels[launch["kernel"]]
                sizes = [self._source_bytes(src, plan, tokens) for src in launch["buffers"]]
                out.append((kernel.name, kernel.spec.op,
                            *traffic.cost(kernel.spec, sizes, launch["scalars"])))
        return out

    def _source_bytes(self, src, plan: Dict[str, Any], tokens: int) -> int:
        where, i, part = src
        if where == "value":
            t = self.values[i]
            if part == "scale":
                shape, dtype = t.scale_shape_for(tokens), t.scale_dtype
            else:
                shape, dtype = t.shape_for(tokens), t.dtype
        elif where == "alloc":
            shape, dtype = plan["allocs"][i]["shape"], plan["allocs"][i]["dtype"]
        elif where == "scratch":
            shape, dtype = [plan["scratch"][i]["extent"]], plan["scratch"][i]["dtype"]
        else:  # one word of the flags tensor
            shape, dtype = [1], "i32"
        return math.prod(shape) * _dtypes.ITEMSIZE[dtype]

    def _dead_after(self, phase: Optional[str]) -> Dict[int, Tuple[int, ...]]:
        """For a run of ``phase``: after which step each value that the run
        reads or computes is read no more. Outputs and the values the
        forward saves stay (but for the backward, their last reader)."""
        keep = {v for v, _, _ in self.outputs}
        if phase != "backward":
            keep |= set(self.saved)
        last: Dict[int, int] = {}
        for i, step in enumerate(self.steps):
            if phase is None or step.phase == phase:
                for vid in (*step.results, *step.operands):
                    last[vid] = i
        dead: Dict[int, List[int]] = {}
        for vid, i in last.items():
            if vid not in keep:
                dead.setdefault(i, []).append(vid)
        return {i: tuple(vids) for i, vids in dead.items()}

    def _scratch_of_run(self, phase: Optional[str], tokens: int,
                        env: Dict[int, Any]) -> Dict[int, List[Any]]:
        """Step index -> its zeroed workspaces, for every step of a run of
        ``phase`` that has some: views of one buffer zeroed once (one
        memset a run rather than one a workspace: about a dozen a decoder
        layer's step, each a launch and a host call). Empty where the run's
        device cannot be told yet (its first step then reports what is
        missing)."""
        indices = [i for i, st in enumerate(self.steps) if phase is None or st.phase == phase]
        if not indices or not self.steps[indices[0]].operands:
            return {}
        like = env.get(self.steps[indices[0]].operands[0])
        like = like.codes if isinstance(like, QTensor) else like
        if like is None:
            return {}
        kind = "cuda" if like.is_cuda else "cpu"
        key = (phase, tokens, kind, like.device)
        layout = self._scratch_layouts.get(key)
        if layout is None:
            layout, total = {}, 0
            for i in indices:
                plan = self._plan_of(i, tokens, kind, like.device)
                for extent, dtype in plan.scratch:
                    layout.setdefault(i, []).append((total, extent, dtype))
                    total = _aligned(total + extent * _dtypes.ITEMSIZE[dtype])
            layout = self._scratch_layouts[key] = (total, layout)
        total, where = layout
        if not where:
            return {}
        arena = _zero_bytes(total, like.device)
        return {i: [arena[o:o + n * _dtypes.ITEMSIZE[dt]].view(_dtypes.torch_dtypes(dt)[0])
                    for o, n, dt in parts] for i, parts in where.items()}

    def _plan_of(self, index: int, tokens: int, kind: str, device) -> "_StepPlan":
        """Step ``index``'s plan for ``tokens`` tokens on ``kind``, made once
        (checked by its first run)."""
        key = (index, tokens, kind)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(index, tokens,
                                                 device if kind == "cuda" else None)
        return plan

    def _run_step(self, index: int, step: Step, env: Dict[int, Any], tokens: int,
                  streams: Dict[Any, int], flags: Any = None,
                  into: Optional[Dict[int, Any]] = None,
                  scratch: Optional[List[Any]] = None) -> None:
        for vid in step.operands:
            if vid not in env:
                raise ProgramError(f"program {self.name}: {step.spec} reads value {vid}, "
                                   "which nothing has computed (run the forward first)")
        like = env[step.operands[0]] if step.operands else None
        like = like.codes if isinstance(like, QTensor) else like
        kind = "cuda" if like.is_cuda else "cpu"
        plan = self._plan_of(index, tokens, kind, like.device)
        given = self._given_buffers(step, plan, into, like.device) if into else {}
        new = [given[i] if i in given else _empty(shape, dtype, like.device)
               for i, (shape, dtype) in enumerate(plan.allocs)]
        if scratch is None:
            scratch = [_zeros(extent, dtype, like.device) for extent, dtype in plan.scratch]
        if flags is None and plan.flags:  # written, never read
            flags = self._unread_flags.get(like.device)
            if flags is None:
                flags = self._unread_flags[like.device] = _zeros(
                    FLAG_WORDS * len(self.outputs), "i32", like.device)

        def resolve(src):
            where, i, part = src
            if where == "value":
                x = env[i]
                return x.part(part) if part else x
            if where == "flag":
                return flags[FLAG_WORDS * i:FLAG_WORDS * i + 1]
            return new[i] if where == "alloc" else scratch[i]

        stream = None
        if kind == "cuda":
            stream = streams.get(like.device)
            if stream is None:
                stream = streams[like.device] = _current_stream(like)
        if plan.runners is not None:
            for run, sources in plan.runners:
                run([resolve(src) for src in sources], stream)
            if traffic.active is not None:
                for cost in plan.costs:
                    traffic.active.add(*cost)
        else:
            # First run: check every launch, then keep its launcher.
            runners, plan.costs = [], []
            for launch in plan.launches:
                buffers = [_flat(resolve(src)) for src in launch.sources]
                n, got_kind, _, scalars = launch.kernel.check(launch.n, buffers,
                                                              launch.scalars)
                if got_kind != kind:
                    raise ProgramError(f"program {self.name}: {launch.kernel.name} has "
                                       f"buffers on {got_kind} and {kind}")
                run = launch.kernel.prepared(n, scalars, kind)
                run(buffers, stream)
                runners.append((run, launch.sources))
                cost = (launch.kernel.name, launch.kernel.spec.op,
                        *traffic.launch_cost(launch.kernel.spec, buffers, scalars))
                plan.costs.append(cost)
                if traffic.active is not None:
                    traffic.active.add(*cost)
            plan.runners = runners
        for vid, srcs in plan.results:
            if len(srcs) == 1:
                env[vid] = resolve(srcs[0])
            else:
                env[vid] = QTensor(resolve(srcs[0]), resolve(srcs[1]))

    def _given_buffers(self, step: Step, plan: "_StepPlan", into: Dict[int, Any],
                       device) -> Dict[int, Any]:
        """Alloc index -> the caller's tensor for the results of ``step`` that
        ``into`` names, each checked against the memory the call would
        allocate for it."""
        given = {}
        for vid, srcs in plan.results:
            t = into.get(vid)
            if t is None:
                continue
            where = f"program {self.name}: value {vid} ({step.spec})"
            if len(srcs) != 1 or srcs[0][0] != "alloc" or srcs[0][2]:
                raise ProgramError(f"{where} is not a tensor its call allocates; it cannot be "
                                   "written into a given buffer")
            shape, dtype = plan.allocs[srcs[0][1]]
            if (tuple(t.shape) != tuple(shape) or t.dtype != dtype or not t.is_contiguous()
                    or t.device != device):
                raise ProgramError(f"{where} is {list(shape)} {dtype} on {device}; the buffer "
                                   f"given for it is {list(t.shape)} {t.dtype} on {t.device}"
                                   f"{'' if t.is_contiguous() else ', not contiguous'}")
            given[srcs[0][1]] = t
        return given

    def _plan(self, index: int, tokens: int, gpu=None) -> "_StepPlan":
        """The reader's plan of step ``index`` for ``tokens`` tokens. `gpu`:
        the CUDA device the launches run on (None: the CPU twins), which
        says how many CTAs of a kernel run at once."""
        resident = None
        if gpu is not None:
            resident = lambda name: self.module[name].resident_blocks(gpu)  # noqa: E731
        plan = self.module.manifest.reader.plan(self.name, index, tokens, resident)
        kernels = self.module.kernels
        return _StepPlan(
            allocs=[(tuple(a["shape"]), _dtypes.torch_dtypes(a["dtype"])[0])
                    for a in plan["allocs"]],
            scratch=[(s["extent"], s["dtype"]) for s in plan["scratch"]],
            launches=[_Launch(kernels[l["kernel"]], l["n"], l["scalars"],
                              [tuple(src) for src in l["buffers"]])
                      for l in plan["launches"]],
            results=[(r["value"], [tuple(src) for src in r["buffers"]])
                     for r in plan["results"]],
            flags=any(src[0] == "flag" for l in plan["launches"] for src in l["buffers"]))


@dataclasses.dataclass
class _Launch:
    kernel: Kernel
    n: int
    scalars: List[int]  # every scalar argument, in manifest order
    sources: List[Tuple[str, int, str]]  # per buffer: ("value"|"alloc"|"scratch"|"flag", index, part)


@dataclasses.dataclass
class _StepPlan:
    """One call's buffers and launches for one token count."""

    allocs: List[Tuple[Tuple[int, ...], Any]]
    scratch: List[Tuple[int, str]]
    launches: List[_Launch]
    results: List[Tuple[int, List[Tuple[str, int, str]]]]
    flags: bool = False  # a launch writes a finiteness flag
    runners: Optional[List[Any]] = None  # set by the first run, which checks every launch
    #: per launch: (kernel, op, bytes, flop), for traffic.count_traffic
    costs: List[Tuple[str, str, int, int]] = dataclasses.field(default_factory=list)


def default_partials(kernel: Kernel, rows: int, gpu=None) -> int:
    """The `partials` of a norm backward's column sums (the rows of its f32
    workspace) for `rows` rows: on the GPU `gpu`, one wave of its row
    kernel's teams (CTAs resident at once times rows_per_block), so that no
    CTA waits for a second wave; on the CPU a fixed count of teams (the
    reader's rule, coat_manifest_default_partials). Any value gives correct
    sums; the value fixes their order."""
    ctas = kernel.resident_blocks(gpu) if gpu is not None else 0
    return kernel.spec.reader.default_partials(kernel.name, rows, ctas)


def _empty(shape, dtype, device):
    import torch

    return torch.empty(shape, dtype=dtype, device=device)


def _zeros(extent, dtype: str, device):
    import torch

    return torch.zeros(extent, dtype=_dtypes.torch_dtypes(dtype)[0], device=device)


def _zero_bytes(nbytes: int, device):
    import torch

    return torch.zeros(nbytes, dtype=torch.uint8, device=device)


def _aligned(nbytes: int, to: int = 256) -> int:
    return -(-nbytes // to) * to


def _flat(x):
    return x.view(-1) if x.dim() != 1 else x


def _current_stream(like) -> int:
    import torch

    return torch.cuda.current_stream(like.device).cuda_stream


def load_programs(module) -> Dict[str, Program]:
    """The programs of a compiled module (a folder, or a loaded Module)."""
    mod = module if isinstance(module, Module) else load(module)
    return {p["name"]: Program(mod, p) for p in mod.manifest.programs}
