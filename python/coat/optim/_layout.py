"""What FP8AdamW is built from: the quantization config, the buckets of flat
buffers and the torch-convention state keys. Apart from the optimizer
(``adamw``) so that its state_dict and FSDP code (``_state``, ``_fsdp``) can
use them without importing it, which imports those modules."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import torch

from .. import _dist
from ..runtime import I64_SCALAR_LIMIT

_MOMENTS = ("m", "v")
# torch-convention state keys (COAT §2.2) per moment and field
_STATE_KEYS = {
    ("m", "codes"): "exp_avg", ("m", "scale"): "scale_exp_avg",
    ("m", "k"): "expand_exp_avg", ("m", "c"): "sqrt_minmax_exp_avg",
    ("v", "codes"): "exp_avg_sq", ("v", "scale"): "scale_exp_avg_sq",
    ("v", "k"): "expand_exp_avg_sq", ("v", "c"): "sqrt_minmax_exp_avg_sq",
    # master_weights: the f32 master copy of a bf16 parameter
    ("master", "param"): "master_param",
}


@dataclasses.dataclass(frozen=True)
class QuantConfig:
    """The optimizer-wide quantization settings, i.e. the kernel's config."""

    m_format: str = "e4m3"
    v_format: str = "e4m3"
    m_expand: bool = True
    v_expand: bool = True
    group_size: int = 128
    expand_min: int = 16
    mode: str = "fixed"

    def fmt(self, moment: str) -> str:
        return self.m_format if moment == "m" else self.v_format

    def expand(self, moment: str) -> bool:
        return self.m_expand if moment == "m" else self.v_expand

    def fields(self, moment: str) -> Tuple[str, ...]:
        return ("codes", "scale", "k", "c") if self.expand(moment) else ("codes", "scale")

    def kernel_config(self, dtype: str) -> Dict[str, Any]:
        """What a manifest kernel's config must contain to serve this."""
        cfg: Dict[str, Any] = {
            "param": dtype, "grad": dtype,
            "m": {"format": self.m_format, "expand": self.m_expand},
            "v": {"format": self.v_format, "expand": self.v_expand},
            "group_size": self.group_size, "mode": self.mode,
        }
        if self.m_expand or self.v_expand:
            cfg["expand_min"] = self.expand_min
        return cfg


@dataclasses.dataclass(frozen=True)
class Rounding:
    """Which results of the step round stochastically (bf16 parameters, the
    moments' FP8 codes) and the seed of their random bits
    (docs/optimizer-numerics.md §5)."""

    params: bool = False
    moments: bool = False
    seed: int = 0

    #: Seeds reach the kernels as launch scalars.
    SEED_LIMIT = I64_SCALAR_LIMIT

    def kernel_flags(self, dtype: str) -> Dict[str, bool]:
        """The rounding entries of the kernel config for parameters of
        ``dtype`` (f32 parameters are stored unrounded: nothing to round).
        Manifests from before stochastic rounding lack them: False."""
        return {"stochastic_param": self.params and dtype == "bf16",
                "stochastic_moments": self.moments}

    def bucket_seed(self, index: int, shard_rank: int = 0) -> int:
        """The kernel's seed argument for bucket ``index`` holding shard
        ``shard_rank`` of its parameters: the random bits are a function of
        (seed, step, element index in the bucket), so each bucket and each
        shard offsets the seed to draw its own, while replicas of one shard
        draw the same bits and stay equal."""
        return (self.seed + index * 0x9E3779B97F4A7C15
                + shard_rank * 0xD1B54A32D192ED03) % self.SEED_LIMIT


@dataclasses.dataclass
class _Bucket:
    group: int
    dtype: str  # manifest dtype of params and grads
    device: torch.device
    params: List[torch.nn.Parameter]
    indices: List[int]  # global parameter indices (state_dict numbering)
    offsets: List[int]  # element offset of each tensor in the flat buffers
    numel: int  # padded total = n of the launch
    param: torch.Tensor
    state: Dict[Tuple[str, str], torch.Tensor]  # (moment, field) -> flat buffer
    # DTensor parameters: their shard layout (None for plain tensors)
    layouts: List[Optional[_dist.ShardLayout]] = dataclasses.field(default_factory=list)
    index: int = 0  # position among the optimizer's buckets (the seed's offset)
    # Whether the gradient buffer lives as long as the optimizer (DTensor
    # buckets, persistent_grads=True) rather than from a step's first
    # gradient to zero_grad(set_to_none=True).
    persistent: bool = True
    # A CUDA graph captured accumulation into the buffer: it is never freed.
    pinned: bool = False
    # Stepping in the backward: members whose gradient of this backward has
    # arrived, and whether the bucket was stepped since the last step().
    arrived: Set[int] = dataclasses.field(default_factory=set)
    expected: int = 0  # members with an accumulation hook (that require grad)
    stepped: bool = False
    # Members whose slot was lent to the running backward for their gradient
    # (grad_destination): the bucket holds its buffer until they arrive.
    lent: Set[int] = dataclasses.field(default_factory=set)
    # Members' AccumulateGrad nodes, found once (grad_destination asks the
    # engine whether the running backward executes them).
    grad_nodes: Dict[int, Any] = dataclasses.field(default_factory=dict, repr=False)
    # The flat gradient buffer. Persistent and pinned buckets hold it
    # (``holder``). A lazy bucket does not: the views its parameters' .grad
    # hold keep it alive, so dropping them all -- as zero_grad(set_to_none=
    # True), torch's Module.zero_grad() included, does -- frees it. The
    # bucket keeps its address (``grad_ptr``) to recognise those views, and
    # finds the buffer again as a view's base (``anchor``: the member whose
    # .grad served last). No weak reference to a tensor is taken: torch's
    # Python objects of tensors alive only in C++ (a .grad) do not suit them.
    holder: Optional[torch.Tensor] = dataclasses.field(default=None, repr=False)
    grad_ptr: Optional[int] = None
    anchor: int = 0
    # master_weights: each member's version counter when its master was
    # last in step with it.
    versions: List[int] = dataclasses.field(default_factory=list)

    def note_versions(self) -> None:
        self.versions = [p._version for p in self.params]

    def changed_members(self) -> List[int]:
        """Members changed in place since note_versions()."""
        return [i for i, p in enumerate(self.params) if p._version != self.versions[i]]

    @property
    def grad(self) -> Optional[torch.Tensor]:
        """The flat gradient buffer, or None while the bucket holds none."""
        if self.holder is not None or self.grad_ptr is None:
            return self.holder
        n = len(self.params)
        for j in range(n):
            i = (self.anchor + j) % n
            if self.views_buffer(i):
                self.anchor = i
                return self.params[i].grad._base
        self.grad_ptr = None  # no .grad views it any more: freed
        return None

    def set_grad(self, t: Optional[torch.Tensor], keep: bool = False) -> None:
        """Installs the flat gradient buffer ``t`` (held if ``keep``; else the
        caller holds it until a .grad views it) or, None, forgets it."""
        self.holder = t if keep else None
        self.grad_ptr = None if t is None else t.data_ptr()

    def keep_grad(self) -> None:
        """From now on the bucket holds its buffer itself."""
        self.holder = self.grad

    def views_buffer(self, i: int) -> bool:
        """Whether member i's .grad is the view of the buffer at its slot
        (for a DTensor member: its local tensor)."""
        g = self.params[i].grad
        if g is None or self.grad_ptr is None:
            return False
        lay = self.layouts[i]
        if (lay is None) == _dist.is_dtensor(g):
            return False
        lg = _dist.local_tensor(g)
        if (lg.data_ptr() != self.grad_ptr + self.offsets[i] * self.param.element_size()
                or lg.dtype != self.param.dtype or tuple(lg.shape) != self.local_shape(i)
                or not lg.is_contiguous()):
            return False
        if self.holder is not None:
            return True
        # Lazy: the address alone could be a new tensor's where the buffer
        # was; a view's base is the buffer itself.
        base = lg._base
        return base is not None and base.data_ptr() == self.grad_ptr and \
            base.numel() == self.numel

    @property
    def padded(self) -> bool:
        """Whether the flat buffers hold padding (which must stay zero)."""
        return sum(self.local_numel(i) for i in range(len(self.params))) != self.numel

    @property
    def grad_bytes(self) -> int:
        return self.numel * self.param.element_size()

    def local_shape(self, i: int) -> Tuple[int, ...]:
        lay = self.layouts[i]
        return lay.local_shape if lay is not None else tuple(self.params[i].shape)

    def local_numel(self, i: int) -> int:
        n = 1
        for d in self.local_shape(i):
            n *= d
        return n

    def grad_view(self, i: int, buf: Optional[torch.Tensor] = None) -> torch.Tensor:
        buf = self.grad if buf is None else buf
        if buf is None:
            raise RuntimeError("FP8AdamW: the bucket holds no gradient buffer")
        o = self.offsets[i]
        return buf[o:o + self.local_numel(i)].view(self.local_shape(i))

    def param_view(self, i: int) -> torch.Tensor:
        o = self.offsets[i]
        return self.param[o:o + self.local_numel(i)].view(self.local_shape(i))

    def grad_for(self, i: int, buf: Optional[torch.Tensor] = None) -> torch.Tensor:
        """What p.grad is set to: the view of the flat buffer (``buf``, or the
        bucket's), wrapped as a DTensor like the parameter for DTensor
        parameters."""
        v = self.grad_view(i, buf)
        lay = self.layouts[i]
        if lay is None:
            return v
        return _dist.state_dtensor(v, lay, lay.global_shape)


def _param_name(index: int, p: torch.Tensor) -> str:
    return f"parameter {index} (shape {tuple(p.shape)})"


def split_by_bytes(slots: Sequence[int], element_size: int,
                   cap_bytes: Optional[int]) -> List[List[int]]:
    """Consecutive runs of the members (given their padded slot sizes, in
    elements) whose buffers stay within ``cap_bytes`` per run; a member
    larger than the cap gets a run of its own. None: one run."""
    if cap_bytes is None:
        return [list(range(len(slots)))] if slots else []
    runs: List[List[int]] = []
    size = 0
    for i, n in enumerate(slots):
        b = n * element_size
        if runs and size + b <= cap_bytes:
            runs[-1].append(i)
            size += b
        else:
            runs.append([i])
            size = b
    return runs
