"""What our kernels moved and computed: every launch made while
:func:`count_traffic` is active, per kernel, its bytes and (GEMMs) FLOPs.

bench/step_profile.py divides them by the kernels' GPU time: the share of
the copy bandwidth or of the FP8 peak each family of kernels reached in a
training step (examples/train_llama.py --profile). Launches of the
executor's programs and of :meth:`coat.runtime.Kernel.launch` (FP8AdamW's)
are counted; launches replayed from a CUDA graph do not pass through Python
and are not.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple


#: A program's kernel is named `<program>_k<index>_<op>` (coat-outline-kernels).
PROGRAM_KERNEL = re.compile(r"^[A-Za-z0-9_]+?_k\d+_([a-z][a-z0-9_]*)$")


def program_kernel_op(name: str) -> Optional[str]:
    """The op part of a program kernel's name (`quantize_per_group` of
    `coat_mlp_h1024_f2816_k4_quantize_per_group`), None for other names."""
    m = PROGRAM_KERNEL.match(name)
    return m.group(1) if m else None


def ideal_ms(nbytes: float, flop: float, copy_tbps: float, peak_tflops: float) -> float:
    """A launch's time at its ceiling: its bytes at the copy bandwidth or its
    FLOPs at the peak, whichever bounds it."""
    return max(nbytes / copy_tbps, flop / peak_tflops) / 1e9


#: The datasheet dense FP8 peak of an H100 SXM and of an H200 (the same),
#: TFLOP/s: the ceiling a GEMM's rate is measured against (docs/anchors.md).
FP8_PEAK_TFLOPS = 1979.0


class Traffic:
    """Per kernel: launches, the bytes of the buffers each launch was given
    (each argument's tensor in full, twice where the kernel reads and writes
    it: :func:`updated_in_place`) and, for the GEMMs (``op == "linear"``),
    2mnk. The bytes are what the kernel must read or write at least, so
    bytes over time is the share of the memory bandwidth it reached; caches
    do not enter."""

    def __init__(self) -> None:
        #: kernel name -> [op, launches, bytes, flop]
        self.kernels: Dict[str, List[Any]] = {}

    def add(self, name: str, op: str, nbytes: int, flop: int) -> None:
        k = self.kernels.setdefault(name, [op, 0, 0, 0])
        k[1] += 1
        k[2] += nbytes
        k[3] += flop

    def per_step(self, steps: int) -> Dict[str, Dict[str, Any]]:
        """JSON-ready: ``{kernel: {op, launches, bytes, flop}}`` per step."""
        return {name: {"op": op, "launches": n / steps, "bytes": b / steps, "flop": f / steps}
                for name, (op, n, b, f) in sorted(self.kernels.items())}


#: The innermost active counter (None: not counting).
active: Optional[Traffic] = None


@contextlib.contextmanager
def count_traffic() -> Iterator[Traffic]:
    """Counts the launches made inside the block; blocks nest, each counting
    its own."""
    global active
    outer, active = active, Traffic()
    try:
        yield active
    finally:
        active = outer


def updated_in_place(spec) -> Tuple[str, ...]:
    """The buffer arguments a kernel reads and writes (docs/manifest.md): an
    ``adamw_step`` kernel updates every buffer but the gradient and its
    scale (parameters, masters, the moments' codes and group fields); a
    kernel whose config sets ``in_place`` (rope, cross_entropy) writes its
    result over its first argument."""
    if spec.op == "adamw_step":
        return tuple(a.name for a in spec.memrefs if a.name not in ("grad", "grad_scale"))
    if spec.config.get("in_place") and spec.memrefs:
        return (spec.memrefs[0].name,)
    return ()


def cost(spec, sizes: Sequence[int], scalars: Sequence[Any]) -> Tuple[int, int]:
    """(bytes, flop) of one launch of the kernel of ``spec`` (its
    KernelSpec) whose buffers, in manifest order, hold ``sizes`` bytes, with
    ``scalars`` in manifest order: the sizes (twice those updated in place)
    and 2mnk of a GEMM."""
    twice = updated_in_place(spec)
    nbytes = sum(size * (2 if a.name in twice else 1) for a, size in zip(spec.memrefs, sizes))
    flop = 0
    if spec.op == "linear":
        dims = dict(zip((a.name for a in spec.scalars), scalars))
        flop = 2 * int(dims["m"]) * int(dims["n"]) * int(dims["k"])
    return nbytes, flop


def launch_cost(spec, buffers: Sequence[Any], scalars: Sequence[Any]) -> Tuple[int, int]:
    """:func:`cost` of a launch on ``buffers`` (torch tensors or numpy
    arrays)."""
    return cost(spec, [b.numel() * b.element_size() if hasattr(b, "element_size") else b.nbytes
                       for b in buffers], scalars)
