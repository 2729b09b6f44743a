"""FP8AdamW: a drop-in for torch.optim.AdamW with COAT's FP8 optimizer states
(docs/optimizer-numerics.md), stepping every tensor of a bucket with ONE
launch of a compiled ``adamw_step`` kernel (docs/manifest.md).

Layout. Parameters are grouped into buckets by (param group, dtype), split
into consecutive runs of at most ``bucket_mb`` MiB of gradient unless their
gradient buffers are persistent (DTensors, ``persistent_grads``). Each bucket
owns one flat buffer per field -- param, grad, m/v codes, m/v scale and, for
expanded moments, k and c -- with every tensor padded to a multiple of
``group_size`` (padding is zero and stays zero; no group straddles tensors),
and is stepped with one launch. At construction every parameter's ``.data``
is re-pointed into the flat param buffer.

Gradients (coat.optim._grads). A bucket's flat grad buffer exists only while
it holds gradients: a hook after the backward's accumulation copies each
parameter's gradient into it (allocating it at the bucket's first gradient
of the step) and makes ``.grad`` its view, so later micro-batches accumulate
in place and ``step()`` copies nothing. Only those views hold the buffer, so
``zero_grad(set_to_none=True)`` -- the optimizer's or the model's -- frees
it. Nothing of the gradients is held between steps or during the
forward. ``step_in_backward=True`` steps each bucket inside the backward
once its gradients are complete and frees them right after, so only the
buckets being filled hold gradients. ``persistent_grads=True`` keeps the
buffers (and the views) for the optimizer's lifetime instead.

Clipping. ``clip_grad_norm_(max_norm)`` is torch.nn.utils.clip_grad_norm_
over the optimizer's parameters with the multiply left to the next step: it
writes the factor into a device scalar that every bucket's kernel
(``grad_scale``, docs/optimizer-numerics.md §7) applies as it loads the
gradient.

Differences from torch.optim.AdamW, all deliberate:
- A parameter whose ``.grad`` is None at ``step()`` is stepped with a zero
  gradient (torch skips it): every tensor of a bucket advances together, and
  the step count is per group. If something else set a ``.grad`` to a new
  tensor, ``step()`` copies it in and re-attaches the view.
- ``zero_grad(set_to_none=False)`` zeroes the buffers in place (a CUDA graph
  that accumulates into them needs that); persistent buffers are zeroed in
  place whatever ``set_to_none`` says.
- Moving the parameters afterwards (``model.to(...)``, ``.half()``) breaks the
  aliasing; build the optimizer after the model is placed.
- Only float32/bfloat16, dense, contiguous parameters on one device.

Distributed (FSDP2 / DTensor parameters, docs/fsdp.md). A DTensor parameter
is stepped on its rank-local shard: each local shard gets its own slot in the
flat buffers, padded to whole groups (the same slot size on every rank), so
groups never straddle shards. DTensors are not re-pointed: their local
shards are copied into the slot before the launch and back after it, unless
``share_fsdp_storage(model)`` made FSDP2's sharded storage live in the slot
(then nothing is copied). Gradients are DTensor views of a persistent flat
grad buffer, into which FSDP2 accumulates in place. ``state_dict()`` describes
the state of DTensor parameters as DTensors (codes as uint8) so that
torch.distributed.checkpoint can save it sharded or gather it full.
"""

from __future__ import annotations

import os
import warnings
import weakref
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

import torch

from .. import _dist, _dtypes, artifacts
from ._fsdp import FSDPStorageMixin
from ._grads import GradBufferMixin, owns_grad, remove_hooks
from ._layout import (_MOMENTS, _STATE_KEYS, QuantConfig, Rounding, _Bucket, _param_name,
                            split_by_bytes)
from ._state import StateDictMixin
from ..runtime import Kernel, Module

__all__ = ["FP8AdamW", "QuantConfig"]

# initial values of the per-group metadata (docs/optimizer-numerics.md §1)
_INIT = {"scale": 0.0, "k": 1.0, "c": 1.0}


def describe(layout: torch.Tensor) -> str:
    return _dist.describe_layout(layout)


def _round_up(x: int, g: int) -> int:
    return -(-x // g) * g


KernelSource = Union[None, str, os.PathLike, Module, Sequence[Union[str, os.PathLike, Module]]]


# state_dict / load_state_dict (_state), share_fsdp_storage (_fsdp) and the
# gradient buffers, zero_grad and the step in the backward (_grads) come from
# the mixins, which keeps this module to building the buckets and launching
# their steps. owns_grad is _grads'; the package exports it for coat.nn.
__all__ += ["owns_grad"]

#: Default bucket size (MiB of gradient): with lazy buffers a bucket's
#: gradient exists from its first gradient of a step on, so smaller buckets
#: hold less at once; every bucket is one launch.
DEFAULT_BUCKET_MB = 256.0


class FP8AdamW(GradBufferMixin, StateDictMixin, FSDPStorageMixin, torch.optim.Optimizer):
    """AdamW with FP8 moments, per-group scales and optional Dynamic Range
    Expansion (COAT). ``expand`` is a bool or an (m, v) pair. ``kernels`` is a
    compiled module (coat.Module or its folder) or a list of them holding the
    ``adamw_step`` kernel for this configuration; None searches $COAT_KERNELS
    and <build>/demo. The kernel is needed only by ``step()``.

    ``master_weights`` keeps an f32 master copy of every bf16 parameter (in
    the state as ``master_param``): the kernel updates the master and writes
    the parameter as the master rounded to nearest, in the same pass, so a
    bf16 model (bf16 gradients, no cast before each forward) trains with the
    numerics of f32 parameters cast to bf16 for every use. A parameter changed
    in place outside the optimizer (``load_state_dict`` of the model,
    initialisation) is copied into its master at the next step. f32
    parameters are their own master, unless ``param_dtype=torch.bfloat16``
    (with ``master_weights``): the optimizer then takes f32 parameters,
    starts their masters at those values and stores the parameters
    themselves in bf16 (rounded to nearest; their dtype changes in place, so
    build it before the first forward). A model cast to bf16 first starts
    its masters on the bf16 grid instead; where an update is smaller than
    half a bf16 ulp, the forward then sees no change until the master has
    moved that far, whereas weights that start between grid points (an f32
    initialisation) move in the forward with probability proportional to
    the update: the first steps' losses differ, not the method.

    ``stochastic_params`` rounds bf16 parameters stochastically instead of to
    nearest (f32 parameters are not rounded), ``stochastic_moments`` the
    moments' FP8 codes (mode "fixed" only). Their random bits are a function
    of ``seed`` (None: drawn from torch's default generator), the step and
    the element, so a run is reproducible from its seed; state_dict keeps the
    seed.

    Memory (docs/training.md, "Memory of a step"). Parameters are split into
    buckets of at most ``bucket_mb`` MiB of gradient (consecutive
    parameters of one group and dtype; None: one bucket per group and dtype,
    as persistent buffers have), each stepped with one launch. A bucket's
    gradient buffer exists only from its first gradient of a step to
    ``zero_grad(set_to_none=True)`` unless ``persistent_grads`` (or the
    parameters are DTensors).
    ``step_in_backward`` steps each bucket inside the backward as soon as
    its gradients are complete and frees them at once; ``step()`` then steps
    only the buckets the backward did not complete, and ``no_step()`` lets
    micro-batches accumulate. ``bucket_max_norm`` clips each bucket's
    gradient to that L2 norm before its launch (per bucket, not global);
    ``clip_grad_norm_`` clips globally, as torch's does, inside the next
    step's kernels."""

    def __init__(self, params, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, *, m_format: str = "e4m3",
                 v_format: str = "e4m3", expand: Union[bool, Tuple[bool, bool]] = True,
                 group_size: int = 128, expand_min: int = 16, mode: str = "fixed",
                 stochastic_params: bool = False, stochastic_moments: bool = False,
                 seed: Optional[int] = None, master_weights: bool = False,
                 param_dtype: Optional[torch.dtype] = None, kernels: KernelSource = None,
                 bucket_mb: Optional[float] = DEFAULT_BUCKET_MB, persistent_grads: bool = False,
                 step_in_backward: bool = False, bucket_max_norm: Optional[float] = None):
        if not 0.0 <= float(lr):
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        for i, b in enumerate(betas):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {b}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if isinstance(expand, (tuple, list)):
            m_expand, v_expand = (bool(x) for x in expand)
        else:
            m_expand = v_expand = bool(expand)
        if int(group_size) < 1 or int(expand_min) < 1:
            raise ValueError("group_size and expand_min must be positive")
        if mode not in ("fixed", "reference"):
            raise ValueError(f"mode must be 'fixed' or 'reference', got {mode!r}")
        if (stochastic_params or stochastic_moments) and mode != "fixed":
            raise ValueError("stochastic rounding needs mode='fixed' (mode='reference' "
                             "reproduces the official kernel's rounding)")
        if master_weights and stochastic_params:
            raise ValueError("master_weights and stochastic_params do not go together: with a "
                             "master copy the bf16 parameter is the master rounded to nearest")
        if param_dtype is not None and param_dtype != torch.bfloat16:
            raise ValueError(f"param_dtype must be torch.bfloat16 or None, got {param_dtype}")
        if param_dtype is not None and not master_weights:
            raise ValueError("param_dtype=torch.bfloat16 stores f32 parameters in bf16 beside "
                             "their f32 masters: it needs master_weights=True (without masters, "
                             "cast the model itself)")
        self.master_weights = bool(master_weights)
        # f32 parameters become bf16 ones, their masters keeping the f32 values.
        self._cast_f32_params = param_dtype == torch.bfloat16
        if seed is None:
            # Drawn only when used: the default leaves torch's generator alone.
            seed = (int(torch.randint(0, Rounding.SEED_LIMIT, (), dtype=torch.int64))
                    if stochastic_params or stochastic_moments else 0)
        elif not 0 <= int(seed) < Rounding.SEED_LIMIT:
            raise ValueError(f"seed must be in [0, {Rounding.SEED_LIMIT}), got {seed}")
        if bucket_mb is not None and not float(bucket_mb) > 0:
            raise ValueError(f"bucket_mb must be positive or None, got {bucket_mb}")
        if bucket_max_norm is not None and not float(bucket_max_norm) > 0:
            raise ValueError(f"bucket_max_norm must be positive or None, got {bucket_max_norm}")
        if step_in_backward and persistent_grads:
            raise ValueError("step_in_backward frees each bucket's gradient after its step and "
                             "persistent_grads keeps the buffers for the optimizer's lifetime: "
                             "choose one")
        self.rounding = Rounding(bool(stochastic_params), bool(stochastic_moments),
                                 int(seed))
        self.bucket_mb = None if bucket_mb is None else float(bucket_mb)
        self.persistent_grads = bool(persistent_grads)
        self.step_in_backward = bool(step_in_backward)
        self.bucket_max_norm = None if bucket_max_norm is None else float(bucket_max_norm)
        self._grad_hooks: List[Any] = []
        # id(parameter) -> (bucket index, member index), for grad_destination.
        self._slots: Dict[int, Tuple[int, int]] = {}
        # Drops the hooks with the optimizer (they hold it only weakly).
        weakref.finalize(self, remove_hooks, self._grad_hooks)
        self._no_step = 0
        # The kernels of a step opened in the backward (step_in_backward),
        # by bucket index, until step() ends it.
        self._cycle: Optional[Dict[int, Kernel]] = None
        # Global clipping (clip_grad_norm_): the device scalar the kernels
        # read, whether the next step applies it, and whether a CUDA graph
        # writes it for every step.
        self._grad_scale: Optional[torch.Tensor] = None
        self._clip_pending = False
        self._clip_captured = False
        self.qconfig = QuantConfig(_dtypes.normalize_fp8_name(m_format),
                                   _dtypes.normalize_fp8_name(v_format), m_expand, v_expand,
                                   int(group_size), int(expand_min), mode)
        self._kernel_source = kernels
        self._modules: Optional[List[Module]] = None
        self._kernels: Dict[Tuple[str, str, bool], Optional[Kernel]] = {}
        self._warned_unfused: Set[Tuple[str, str]] = set()
        self._buckets: List[_Bucket] = []
        self._steps: List[int] = []
        self._step_tensors: List[torch.Tensor] = []
        self._device: Optional[torch.device] = None
        self._mesh: Any = None
        self._nparams = 0
        self._ready = False
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self._ready = True
        for gi in range(len(self.param_groups)):
            self._build_group(gi)

    # ---- construction ------------------------------------------------------

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        super().add_param_group(param_group)
        if self._ready:
            self._build_group(len(self.param_groups) - 1)

    def _check_param(self, index: int, p: torch.Tensor) -> Tuple[str, Optional[_dist.ShardLayout]]:
        name = _param_name(index, p)
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(p).__name__}")
        layout = None
        if _dist.is_dtensor(p):
            layout = _dist.shard_layout(name, p)
            if self._mesh is None:
                self._mesh = layout.mesh
            elif layout.mesh != self._mesh:
                raise ValueError(f"{name}: DTensor on device mesh {layout.mesh}, but earlier "
                                 f"parameters are on {self._mesh}; FP8AdamW needs one mesh "
                                 "for all its DTensor parameters (use one optimizer per mesh)")
        loc = _dist.local_tensor(p)
        if loc.is_sparse or loc.layout != torch.strided:
            raise ValueError(f"{name}: sparse parameters are not supported")
        dtype = _dtypes.manifest_dtype_of_torch(loc.dtype)
        if dtype is None:
            raise ValueError(f"{name}: dtype {loc.dtype} is not supported "
                             "(FP8AdamW takes float32 or bfloat16 parameters)")
        if not loc.is_contiguous():
            raise ValueError(f"{name}: parameter is not contiguous"
                             + (" (its local shard)" if layout is not None else ""))
        if dtype == "f32" and self._cast_f32_params:
            if layout is not None:
                raise ValueError(f"{name}: param_dtype takes plain tensors, not FSDP2 (DTensor) "
                                 "parameters")
            if p.grad is not None:
                raise ValueError(f"{name}: has an f32 gradient; param_dtype makes the parameter "
                                 "bf16, so build the optimizer before the first backward (or "
                                 "set the gradients to None)")
            dtype = "bf16"
        if layout is not None and self.master_weights and dtype == "bf16":
            raise ValueError(f"{name}: master_weights takes plain tensors; FSDP2 (DTensor) "
                             "bf16 parameters would need their masters sharded alike, which "
                             "FP8AdamW does not do yet")
        if layout is not None and self.step_in_backward:
            raise ValueError(f"{name}: step_in_backward takes plain tensors; FSDP2 "
                             "(DTensor) parameters get their gradients from FSDP2's "
                             "reduce-scatter into a persistent buffer (docs/fsdp.md): "
                             "step after the backward")
        if self._device is None:
            self._device = loc.device
        elif loc.device != self._device:
            raise ValueError(f"{name}: on {loc.device}, but earlier parameters are on "
                             f"{self._device}; FP8AdamW needs all parameters on one device")
        g = p.grad
        if g is not None and (g.is_sparse or g.layout != torch.strided):
            raise ValueError(f"{name}: sparse gradients are not supported")
        return dtype, layout

    @torch.no_grad()
    def _build_group(self, gi: int) -> None:
        group = self.param_groups[gi]
        G = self.qconfig.group_size
        # Buckets: by dtype and by whether the parameters are DTensors (whose
        # buffers stay persistent), then split by size.
        by_kind: Dict[Tuple[str, bool], List[Tuple[int, torch.Tensor,
                                                   Optional[_dist.ShardLayout]]]] = {}
        for p in group["params"]:
            index = self._nparams
            self._nparams += 1
            dtype, layout = self._check_param(index, p)
            by_kind.setdefault((dtype, layout is not None), []).append((index, p, layout))
        self._steps.append(0)
        self._step_tensors.append(torch.zeros((), dtype=torch.float32))
        for (dtype, dist), members in by_kind.items():
            slots = [lay.slot(G) if lay is not None else _round_up(p.numel(), G)
                     for _, p, lay in members]
            size = _dtypes.ITEMSIZE[dtype]
            # Only lazy buffers gain from smaller buckets; persistent ones
            # (DTensors, persistent_grads) keep one bucket, one launch.
            lazy = not (dist or self.persistent_grads)
            cap = int(self.bucket_mb * 2**20) if lazy and self.bucket_mb is not None else None
            for run in split_by_bytes(slots, size, cap):
                self._build_bucket(gi, dtype, [members[j] for j in run], [slots[j] for j in run])

    def _build_bucket(self, gi: int, dtype: str,
                      members: List[Tuple[int, torch.Tensor, Optional[_dist.ShardLayout]]],
                      slots: List[int]) -> None:
        G = self.qconfig.group_size
        offsets, total = [], 0
        for n in slots:
            offsets.append(total)
            total += n
        first = _dist.local_tensor(members[0][1])
        dev = first.device
        tdt = _dtypes.torch_dtypes(dtype)[0]
        flat_p = torch.zeros(total, dtype=tdt, device=dev)
        state: Dict[Tuple[str, str], torch.Tensor] = {}
        for mom in _MOMENTS:
            for field in self.qconfig.fields(mom):
                if field == "codes":
                    code_dt = _dtypes.torch_code_dtype(self.qconfig.fmt(mom))
                    t = torch.zeros(total, dtype=torch.uint8, device=dev)
                    state[(mom, field)] = t if code_dt == torch.uint8 else t.view(code_dt)
                else:
                    state[(mom, field)] = torch.full((total // G,), _INIT[field],
                                                     dtype=torch.float32, device=dev)
        master = None
        if self.master_weights and dtype == "bf16":
            master = state[("master", "param")] = torch.zeros(total, dtype=torch.float32,
                                                              device=dev)
        layouts = [lay for _, _, lay in members]
        b = _Bucket(gi, dtype, dev, [p for _, p, _ in members], [i for i, _, _ in members],
                    offsets, total, flat_p, state, layouts, index=len(self._buckets),
                    persistent=self.persistent_grads or any(lay is not None for lay in layouts))
        for i, (_, p, lay) in enumerate(members):
            o, k = offsets[i], b.local_numel(i)
            value = _dist.local_tensor(p).detach().reshape(-1)
            flat_p[o:o + k].copy_(value)  # rounds f32 values when param_dtype casts them
            if master is not None:  # the parameter's own value, f32 or bf16 (exact)
                master[o:o + k].copy_(value)
            if lay is None:
                p.data = flat_p[o:o + k].view_as(p)
            # A DTensor keeps its own local storage (FSDP2 all-gathers from
            # it); step() stages it through the slot unless
            # share_fsdp_storage() moved it into the slot.
            self.state[p] = self._param_state(b, i)
        b.note_versions()
        self._buckets.append(b)
        self._setup_grads(b)

    def _param_state(self, b: _Bucket, i: int) -> Dict[str, torch.Tensor]:
        """Per-parameter state in the torch/COAT convention: views into the
        bucket's flat buffers (codes shaped like the parameter, metadata one
        entry per group of this tensor) plus the group's step tensor."""
        o, n, lay = b.offsets[i], b.local_numel(i), b.layouts[i]
        G = self.qconfig.group_size
        # A DTensor shard owns all groups of its slot (the same count on every
        # rank, so the per-group metadata is an evenly Shard(0)-ed DTensor).
        g0, ng = o // G, (lay.groups(G) if lay is not None else -(-n // G))
        st: Dict[str, torch.Tensor] = {"step": self._step_tensors[b.group]}
        for (mom, field), buf in b.state.items():
            key = _STATE_KEYS[(mom, field)]
            st[key] = (buf[o:o + n].view(b.local_shape(i)) if field in ("codes", "param")
                       else buf[g0:g0 + ng])
        return st

    # ---- kernels -----------------------------------------------------------

    def _load_modules(self) -> List[Module]:
        if self._modules is None:
            src = self._kernel_source
            single = isinstance(src, (str, os.PathLike, Module))
            self._modules = artifacts.modules([src] if single else src)
        return self._modules

    def kernel_for(self, dtype: str, device_kind: str, grad_scale: bool = False) -> Kernel:
        """The adamw_step kernel serving this configuration for params of
        manifest dtype ``dtype`` on ``device_kind`` ("cuda" or "cpu");
        ``grad_scale``: the variant that multiplies the gradient by a device
        scalar (clip_grad_norm_)."""
        found = self._find_kernel(dtype, device_kind, grad_scale)
        if found is None:
            want = dict(self.qconfig.kernel_config(dtype),
                        **self._kernel_flags(dtype, grad_scale))
            where = ", ".join(m.manifest.path for m in self._load_modules()) or "nothing"
            raise RuntimeError(
                f"FP8AdamW: no compiled adamw_step kernel with config {want} for "
                f"{device_kind} (searched: {where}). Compile one (scripts/demo.sh) and pass "
                "kernels=<its output folder> or set COAT_KERNELS.")
        return found

    def _kernel_flags(self, dtype: str, grad_scale: bool) -> Dict[str, bool]:
        # Manifests from before a flag existed lack it: False.
        return dict(self.rounding.kernel_flags(dtype), grad_scale=grad_scale,
                    master=self.master_weights and dtype == "bf16")

    def _find_kernel(self, dtype: str, device_kind: str, grad_scale: bool) -> Optional[Kernel]:
        key = (dtype, device_kind, grad_scale)
        if key not in self._kernels:
            want = self.qconfig.kernel_config(dtype)
            flags = self._kernel_flags(dtype, grad_scale)
            found = None
            for mod in self._load_modules():
                for k in mod.find(op="adamw_step", **want):
                    matches = all(bool(k.config.get(f, False)) == v for f, v in flags.items())
                    usable = (k.spec.cubin or k.spec.ptx) if device_kind == "cuda" else (
                        k.spec.cpu_object and k.spec.cpu_symbol)
                    if matches and usable:
                        found = k
                        break
                if found:
                    break
            self._kernels[key] = found
        return self._kernels[key]

    # ---- step ----------------------------------------------------------------

    def launch_arguments(self, b: _Bucket, step: int,
                         grad_scale: Optional[torch.Tensor] = None) -> Dict[str, Any]:
        """The named kernel arguments of one bucket's launch (``grad_scale``:
        the device scalar of a kernel that multiplies the gradient by it)."""
        group = self.param_groups[b.group]
        beta1, beta2 = group["betas"]

        def num(x):
            return float(x.item()) if isinstance(x, torch.Tensor) else float(x)

        args: Dict[str, Any] = {"param": b.param, "grad": b.grad, "step": float(step),
                                "lr": num(group["lr"]), "beta1": num(beta1),
                                "beta2": num(beta2), "eps": num(group["eps"]),
                                "weight_decay": num(group["weight_decay"])}
        for (mom, field), buf in b.state.items():
            args["master" if mom == "master" else f"{mom}_{field}"] = buf
        args["seed"] = self.rounding.bucket_seed(
            b.index, next((lay.rank for lay in b.layouts if lay is not None), 0))
        if grad_scale is not None:
            args["grad_scale"] = grad_scale
        return args

    @torch.no_grad()
    def step(self, closure=None):
        """Steps every bucket (one launch each) on its gradient; a parameter
        whose .grad is None counts as a zero gradient. With
        ``step_in_backward``, steps only the buckets the backward since the
        last step() did not step (all of them if there was none) and frees
        their gradients, then ends the step."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.step_in_backward:
            if self._cycle is None:
                self._open_step()
            for b in self._buckets:
                if b.params and not b.stepped:
                    kernel = self._cycle.get(b.index) or self._resolve()[b.index]
                    self._launch(b, kernel)
                    self._release_grads(b)
            self._cycle = None
            for b in self._buckets:
                b.stepped = False
                b.arrived.clear()
            return loss
        plan = self._resolve()
        scale = self._take_grad_scale()
        if scale is not None:
            plan = self._resolve_scaled(plan)
        self._advance()
        for b in self._buckets:
            if b.params:
                self._launch(b, plan[b.index], scale)
        return loss

    @staticmethod
    def _device_kind(b: _Bucket) -> str:
        return "cuda" if b.device.type == "cuda" else "cpu"

    def _resolve(self) -> Dict[int, Kernel]:
        """Every bucket's kernel, resolved before any state changes, so a
        missing kernel leaves the optimizer unchanged."""
        return {b.index: self.kernel_for(b.dtype, self._device_kind(b))
                for b in self._buckets if b.params}

    def _resolve_scaled(self, plan: Dict[int, Kernel]) -> Dict[int, Kernel]:
        """``plan`` with each bucket's kernel replaced by its variant that
        takes the clipping scale, where one is compiled; the others keep
        theirs (and _launch scales their gradient buffer in place)."""
        out = dict(plan)
        for b in self._buckets:
            if not b.params:
                continue
            kind = self._device_kind(b)
            k = self._find_kernel(b.dtype, kind, grad_scale=True)
            if k is not None:
                out[b.index] = k
            elif (b.dtype, kind) not in self._warned_unfused:
                self._warned_unfused.add((b.dtype, kind))
                want = dict(self.qconfig.kernel_config(b.dtype),
                            **self._kernel_flags(b.dtype, True))
                warnings.warn(
                    f"FP8AdamW: no compiled adamw_step kernel with config {want} for {kind}; "
                    "clip_grad_norm_'s scale is applied to the gradient buffers in place before "
                    "the launch instead (one more pass over them)", stacklevel=3)
        return out

    def _advance(self) -> None:
        for gi in range(len(self.param_groups)):
            self._steps[gi] += 1
            self._step_tensors[gi].fill_(float(self._steps[gi]))

    def _open_step(self) -> None:
        """step_in_backward: the first launch of a step resolves the kernels
        and advances the step counts; step() ends it."""
        plan = self._resolve()
        self._advance()
        self._cycle = plan

    @torch.no_grad()
    def _launch(self, b: _Bucket, kernel: Kernel,
                grad_scale: Optional[torch.Tensor] = None) -> None:
        """One bucket's launch; ``grad_scale`` (global clipping) goes to a
        kernel that takes it, or multiplies the buffer first."""
        buf = self._attach_grads(b)  # the buffer, held through the launch
        fused = grad_scale is not None and any(a.name == "grad_scale" for a in kernel.spec.args)
        if grad_scale is not None and not fused:
            buf.mul_(grad_scale)
        self._clip(b, grad_scale if fused else None)
        args = self.launch_arguments(b, self._steps[b.group], grad_scale if fused else None)
        wanted = {a.name for a in kernel.spec.args}
        missing = sorted(wanted - set(args) - {"n"})
        if missing:
            raise RuntimeError(f"FP8AdamW: kernel {kernel.name} takes argument(s) "
                               f"{missing} that this optimizer does not provide")
        staged = self._stage_in(b)
        self._sync_masters(b)
        kernel.launch(n=b.numel, **{k: v for k, v in args.items() if k in wanted})
        for i, loc in staged:
            loc.copy_(b.param_view(i))

    @torch.no_grad()
    def _sync_masters(self, b: _Bucket) -> None:
        """Copies into its master each parameter of ``b`` that something
        other than the optimizer changed in place since the last step (its
        version counter moved: the kernel's own writes do not move it)."""
        master = b.state.get(("master", "param"))
        if master is None:
            return
        for i in b.changed_members():
            o, k = b.offsets[i], b.local_numel(i)
            master[o:o + k].copy_(b.params[i].detach().reshape(-1))
        b.note_versions()

    @torch.no_grad()
    def _stage_in(self, b: _Bucket) -> List[Tuple[int, torch.Tensor]]:
        """Copies the local shards of DTensor parameters that do not live in
        their slot into it; returns them, to be copied back after the launch."""
        staged = []
        for i, p in enumerate(b.params):
            if b.layouts[i] is None or b.local_numel(i) == 0 or self._slot_holds(b, i):
                continue
            loc = _dist.local_tensor(p)
            if tuple(loc.shape) != b.local_shape(i):
                raise RuntimeError(f"{_param_name(b.indices[i], p)}: local shard now has shape "
                                   f"{tuple(loc.shape)}, FP8AdamW was built for "
                                   f"{b.local_shape(i)}; rebuild the optimizer after resharding")
            b.param_view(i).copy_(loc)
            staged.append((i, loc))
        return staged

    # ---- introspection -------------------------------------------------------

    @property
    def buckets(self) -> List[_Bucket]:
        return list(self._buckets)

    def group_steps(self) -> List[int]:
        return list(self._steps)

    def dequantized_state(self, p: torch.Tensor) -> Dict[str, torch.Tensor]:
        """float32 exp_avg / exp_avg_sq of ``p`` reconstructed from the FP8
        codes and group metadata (docs/optimizer-numerics.md §1), for
        inspection and tests; the optimizer itself never calls it."""
        st = self.state[p]
        G = self.qconfig.group_size
        fmts = self._fp8_formats()
        out = {}
        for mom, key in (("m", "exp_avg"), ("v", "exp_avg_sq")):
            q = _dtypes.decode_fp8(st[key], fmts[self.qconfig.fmt(mom)]).reshape(-1)
            n = q.numel()
            rep = lambda t: t.repeat_interleave(G)[:n]  # noqa: E731
            y = q * rep(st[_STATE_KEYS[(mom, "scale")]])
            if self.qconfig.expand(mom):
                k = rep(st[_STATE_KEYS[(mom, "k")]])
                c = rep(st[_STATE_KEYS[(mom, "c")]])
                mag = y.abs().pow(1.0 / k) * c
                y = torch.where(torch.signbit(y), -mag, mag) if mom == "m" else mag
            out[key] = y.view_as(p)
        return out

    def _fp8_formats(self):
        for mod in (self._modules or []):
            return mod.fp8
        return _dtypes.FALLBACK_FP8
