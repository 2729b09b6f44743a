"""Runs a compiled program from its launch plan (manifest ``programs``).

``coat-export-programs`` records, for an outlined program, its values and
their types, the kernel calls in order (each ``forward`` or ``backward``),
the outputs and the values the forward keeps for the backward; each kernel's
arguments say which value of its spec they are (``bind``). The executor
only follows them: it allocates each call's results, binds every kernel
argument to a buffer or an extent, and launches, on CUDA tensors through the
GPU runtime or on CPU tensors through the CPU twins. Nothing here knows what
a norm or a GEMM is.

Every dynamic extent (``-1``) of a program is its token count (batch x
sequence), taken from the inputs; docs/manifest.md, "Programs".
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _dtypes
from .runtime import Kernel, Module, load


class ProgramError(ValueError):
    """Inputs a program cannot take, or a launch plan it cannot follow."""


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

    def resolve(self, shape, tokens: int) -> Tuple[int, ...]:
        return tuple(tokens if d < 0 else d for d in shape)

    def scale_extents(self, tokens: int) -> Tuple[int, ...]:
        """The scale tensor's shape; for a dynamic shape derived the way
        Layout.h derives it (only the kinds activations use)."""
        if all(d >= 0 for d in self.shape):
            return self.scale_shape
        shape = self.resolve(self.shape, tokens)
        if self.scaling == "per_tensor":
            return ()
        m = re.fullmatch(r"per_group<(\d+)>", self.scaling)
        if m:
            g = int(m.group(1))
            return shape[:-1] + (-(-shape[-1] // g),)
        raise ProgramError(f"no run-time scale shape for {self.scaling} of a dynamic shape")


@dataclasses.dataclass(frozen=True)
class Step:
    spec: str
    phase: str
    operands: Tuple[int, ...]
    results: Tuple[int, ...]
    kernels: Tuple[Kernel, ...]


_REF = re.compile(r"(in|out)(\d+)(?:\.(codes|scale))?$")
_EXPR = re.compile(r"(rows|cols|numel)\((in|out)(\d+)\)$")
_CEILDIV = re.compile(r"ceildiv\((.+),(\d+)\)$")


class Program:
    """One program of a compiled module, ready to run."""

    def __init__(self, module: Module, plan: Dict[str, Any]):
        self.module = module
        self.name = plan["name"]
        where = f"program {self.name}"
        try:
            self.values = [ValueType(v["kind"], tuple(v["shape"]), v["dtype"],
                                     v.get("scaling", ""), v.get("scale_dtype", ""),
                                     tuple(v.get("scale_shape", ())))
                           for v in plan["values"]]
            self.inputs = [(i["value"], i["role"], i.get("grad_of")) for i in plan["inputs"]]
            self.outputs = [(o["value"], o["phase"], o.get("grad_of")) for o in plan["outputs"]]
            self.saved = tuple(plan["saved"])
            steps = plan["steps"]
        except (KeyError, TypeError) as e:
            raise ProgramError(f"{where}: malformed launch plan ({e})") from None
        self.steps: List[Step] = []
        self._plans: Dict[Tuple[int, int, str], _StepPlan] = {}
        self._dead: Dict[Optional[str], Dict[int, Tuple[int, ...]]] = {}
        for s in steps:
            # The spec's kernel first, then those that finish it (config.of).
            ks = [k for k in module.kernels.values()
                  if k.name == s["spec"] or k.config.get("of") == s["spec"]]
            ks.sort(key=lambda k: k.name != s["spec"])
            if not ks or ks[0].name != s["spec"]:
                raise ProgramError(f"{where}: no kernel {s['spec']!r} in {module.manifest.path}")
            for k in ks:
                for a in k.spec.args:
                    if not a.bind:
                        raise ProgramError(f"{where}: argument {a.name!r} of kernel {k.name} "
                                           "has no binding (compiled by an older coat-opt?)")
            self.steps.append(Step(s["spec"], s["phase"], tuple(s["operands"]),
                                   tuple(s["results"]), tuple(ks)))

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
            tokens: Optional[int] = None, *, drop_dead: bool = False) -> Dict[int, Any]:
        """Runs the calls of ``phase`` (all when None) on ``env`` (value id ->
        tensor or QTensor), adding their results to it. Returns ``env``.

        With ``drop_dead``, each value leaves ``env`` after the last call of
        the run that reads it, so its memory serves the next calls' results;
        the outputs and, in a forward, the saved values stay (what autograd
        uses; without it every intermediate stays, for inspection).

        The first run of a step for a token count and device kind checks
        every launch (Kernel.bind); later runs replay the recorded launches
        without checking again (same shapes, dtypes and device)."""
        if tokens is None:
            tokens = self.tokens_of(env)
        streams: Dict[Any, int] = {}  # per device, looked up once a run
        dead_after = {}
        if drop_dead:  # per phase once: runs are on the host's critical path
            dead_after = self._dead.get(phase)
            if dead_after is None:
                dead_after = self._dead[phase] = self._dead_after(phase)
        for i, step in enumerate(self.steps):
            if phase is None or step.phase == phase:
                self._run_step(i, step, env, tokens, streams)
                # (torch's caching allocator reuses freed memory in stream
                # order, so a later call may take it at once.)
                for vid in dead_after.get(i, ()):
                    env.pop(vid, None)
        return env

    def _dead_after(self, phase: Optional[str]) -> Dict[int, Tuple[int, ...]]:
        """For a run of ``phase``: after which step each value that the run
        reads or computes is read no more. Outputs and the values the
        forward saves stay."""
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

    def _run_step(self, index: int, step: Step, env: Dict[int, Any], tokens: int,
                  streams: Dict[Any, int]) -> None:
        for vid in step.operands:
            if vid not in env:
                raise ProgramError(f"program {self.name}: {step.spec} reads value {vid}, "
                                   "which nothing has computed (run the forward first)")
        like = env[step.operands[0]] if step.operands else None
        like = like.codes if isinstance(like, QTensor) else like
        kind = "cuda" if like.is_cuda else "cpu"
        key = (index, tokens, kind)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plan_step(step, tokens, like.device if kind == "cuda" else None)
        new = [_empty(shape, dtype, like.device) for shape, dtype in plan.allocs]
        scratch = [_zeros(extent, dtype, like.device) for extent, dtype in plan.scratch]

        def resolve(src):
            where, a, b = src
            if where == "env":
                x = env[a]
                return x.part(b) if b else x
            return new[a] if where == "new" else scratch[a]

        stream = None
        if kind == "cuda":
            stream = streams.get(like.device)
            if stream is None:
                stream = streams[like.device] = _current_stream(like)
        if key in self._plans:
            for run, sources in plan.runners:
                run([resolve(src) for src in sources], stream)
        else:
            # First run: check every launch, then keep its launcher.
            runners = []
            for launch in plan.launches:
                args = {name: _flat(resolve(src)) for name, src in launch.sources}
                args.update(launch.scalars)
                n, got_kind, _, buffers, scalars = launch.kernel.bind(
                    n=launch.n, **{k: v for k, v in args.items() if k != "n"})
                if got_kind != kind:
                    raise ProgramError(f"program {self.name}: {launch.kernel.name} has "
                                       f"buffers on {got_kind} and {kind}")
                run = launch.kernel.prepared(n, scalars, kind)
                run(buffers, stream)
                runners.append((run, [src for _, src in launch.sources]))
            plan.runners = runners
            self._plans[key] = plan
        for vid, srcs in plan.results:
            if len(srcs) == 1:
                env[vid] = resolve(srcs[0])
            else:
                env[vid] = QTensor(resolve(srcs[0]), resolve(srcs[1]))

    def _plan_step(self, step: Step, tokens: int, gpu=None) -> "_StepPlan":
        """Where every argument of the step's launches comes from: an operand
        (or its codes/scale), a result buffer to allocate, or scratch. `gpu`:
        the CUDA device the launches run on (None: the CPU twins)."""
        plan = _StepPlan()
        # A result part is a buffer bound to an operand (a per-tensor scale
        # the kernel reads and the result shares) or allocated.
        parts: Dict[Tuple[int, str], Tuple[str, int, Any]] = {}

        def value_of(kind: str, idx: int):
            ids = step.operands if kind == "in" else step.results
            if idx >= len(ids):
                raise ProgramError(f"program {self.name}: {step.spec} binds {kind}{idx}, the "
                                   f"call has {len(ids)}")
            return ids[idx]

        def lookup(ref: str):
            m = _REF.match(ref)
            if not m:
                return None
            vid = value_of(m.group(1), int(m.group(2)))
            part = m.group(3) or ""
            if m.group(1) == "in":
                if part and self.values[vid].kind != "qtensor":
                    raise ProgramError(f"program {self.name}: {step.spec} binds {ref}, a "
                                       "tensor has no parts")
                return ("env", vid, part)
            return parts.get((vid, part))

        def shape_of(kind: str, idx: int):
            vid = value_of(kind, idx)
            t = self.values[vid]
            return t.resolve(t.shape, tokens)

        def scalar(expr: str, kernel: Kernel, name: str) -> int:
            m = _CEILDIV.match(expr)
            if m:
                return -(-scalar(m.group(1), kernel, name) // int(m.group(2)))
            m = _EXPR.match(expr)
            if m:
                shape = shape_of(m.group(2), int(m.group(3)))
                numel = 1
                for d in shape:
                    numel *= d
                if m.group(1) == "numel":
                    return numel
                cols = shape[-1] if shape else 1
                return cols if m.group(1) == "cols" else numel // max(cols, 1)
            if expr == "free":
                # The caller's choice, one per step (the norm backward's
                # partials: its row kernel and its reduction share them).
                if name not in free:
                    if "rows" not in scalar_values:
                        raise ProgramError(f"program {self.name}: kernel {kernel.name} "
                                           f"leaves {name!r} free before any kernel of "
                                           "the call bound rows")
                    free[name] = default_partials(kernel, scalar_values["rows"], gpu)
                return free[name]
            raise ProgramError(f"program {self.name}: kernel {kernel.name} argument {name!r}: "
                               f"unknown binding {expr!r}")

        scratch: Dict[str, int] = {}
        free: Dict[str, int] = {}
        for kernel in step.kernels:
            scalar_values: Dict[str, int] = {}
            for a in kernel.spec.scalars:
                scalar_values[a.name] = scalar(a.bind[0], kernel, a.name)
            sources = []
            for a in kernel.spec.memrefs:
                if a.bind == ("scratch",):
                    if a.name not in scratch:
                        n = kernel_n(kernel, scalar_values) or 0
                        scratch[a.name] = len(plan.scratch)
                        plan.scratch.append((a.extent_for(n, kernel.spec.group_size,
                                                          scalar_values), a.dtype))
                    sources.append((a.name, ("scratch", scratch[a.name], None)))
                    continue
                src = next((b for b in map(lookup, a.bind) if b is not None), None)
                for ref in a.bind:
                    m = _REF.match(ref)
                    if not m or m.group(1) != "out":
                        continue
                    key = (value_of("out", int(m.group(2))), m.group(3) or "")
                    if key not in parts:
                        if src is None:
                            src = ("new", len(plan.allocs), None)
                            plan.allocs.append(self._part_type(key, tokens))
                        parts[key] = src
                if src is None:
                    raise ProgramError(f"program {self.name}: kernel {kernel.name} argument "
                                       f"{a.name!r} binds nothing it can find ({a.bind})")
                sources.append((a.name, src))
            plan.launches.append(_Launch(kernel, kernel_n(kernel, scalar_values),
                                         scalar_values, sources))
        for vid in step.results:
            t = self.values[vid]
            want = [""] if t.kind == "tensor" else ["codes", "scale"]
            missing = [p or "buffer" for p in want if (vid, p) not in parts]
            if missing:
                raise ProgramError(f"program {self.name}: {step.spec} wrote no {missing} "
                                   f"of result {vid}")
            plan.results.append((vid, [parts[(vid, p)] for p in want]))
        return plan

    def _part_type(self, key: Tuple[int, str], tokens: int):
        vid, part = key
        t = self.values[vid]
        if t.kind == "tensor" or part == "codes":
            return t.resolve(t.shape, tokens), _dtypes.torch_dtypes(t.dtype)[0]
        return t.scale_extents(tokens), _dtypes.torch_dtypes(t.scale_dtype)[0]


@dataclasses.dataclass
class _Launch:
    kernel: Kernel
    n: Optional[int]
    scalars: Dict[str, int]
    sources: List[Tuple[str, Tuple[str, int, Any]]]


@dataclasses.dataclass
class _StepPlan:
    """One call's buffers and launches for one token count."""

    allocs: List[Tuple[Tuple[int, ...], Any]] = dataclasses.field(default_factory=list)
    scratch: List[Tuple[int, str]] = dataclasses.field(default_factory=list)
    launches: List[_Launch] = dataclasses.field(default_factory=list)
    results: List[Tuple[int, List[Tuple[str, int, Any]]]] = dataclasses.field(
        default_factory=list)
    runners: List[Any] = dataclasses.field(default_factory=list)


def default_partials(kernel, rows: int, gpu=None) -> int:
    """The `partials` of a norm backward's column sums (the rows of its f32
    workspace) for `rows` rows: on the GPU `gpu`, one wave of its row
    kernel's teams (CTAs resident at once times rows_per_block), so that no
    CTA waits for a second wave; on the CPU 256 per team of a CTA. Any value
    gives correct sums; the value fixes their order."""
    per_block = int(kernel.config.get("rows_per_block", 1))
    ctas = kernel.resident_blocks(gpu) if gpu is not None else 256
    return max(1, min(rows, ctas * per_block))


def _empty(shape, dtype, device):
    import torch

    return torch.empty(shape, dtype=dtype, device=device)


def _zeros(extent, dtype: str, device):
    import torch

    return torch.zeros(extent, dtype=_dtypes.torch_dtypes(dtype)[0], device=device)


def _flat(x):
    return x.view(-1) if x.dim() != 1 else x


def _current_stream(like) -> int:
    import torch

    return torch.cuda.current_stream(like.device).cuda_stream


def kernel_n(kernel: Kernel, scalars: Dict[str, int]) -> Optional[int]:
    """The launch's n (docs/manifest.md): the scalar n, else the size of the
    first extent-n buffer (None lets the kernel take it), else cols."""
    if "n" in scalars:
        return scalars["n"]
    if any(a.extent == "n" for a in kernel.spec.memrefs):
        return None
    return scalars.get("cols")


def load_programs(module) -> Dict[str, Program]:
    """The programs of a compiled module (a folder, or a loaded Module)."""
    mod = module if isinstance(module, Module) else load(module)
    return {p["name"]: Program(mod, p) for p in mod.manifest.raw.get("programs", [])}
