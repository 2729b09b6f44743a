"""Finiteness checks of compiled modules' outputs and gradients: a flag per
checked value, read once a step (one synchronisation) by check_finite() or
the next step's first forward. COAT_CHECK_FINITE=0 turns checks off."""

from __future__ import annotations

import os
from typing import Dict, Hashable, List, Sequence

import torch

from ..executor import FLAG_WORDS

#: Kernels flag what they write; values they do not flag cost one reduction
#: each. COAT_CHECK_FINITE=0 turns checks off.
ENABLED = os.environ.get("COAT_CHECK_FINITE", "1") != "0"


class NonFiniteError(FloatingPointError):
    """A NaN or Inf left a compiled block (FP8 overflow upstream, or bad
    inputs); the message names the module and the value."""


class _StepFlags:
    """One device's finiteness flags: an int32 word per checked value (by
    name), non-zero once the value held a NaN or an infinity, read and reset
    together. Compiled programs' kernels write the words of the values they
    flag themselves (``coat.finite_flag``: a range of words per call site,
    one per program output); other values are checked by a torch reduction
    into their word. The words live in one buffer made before any capture
    and are written in place, so checks inside a CUDA graph (capture_step's,
    torch.compile's) allocate nothing that outlives them and replay as
    kernels of the graph."""

    CAPACITY = 1 << 16

    def __init__(self, device: torch.device):
        self.bad = torch.zeros(self.CAPACITY, dtype=torch.int32, device=device)
        self.slots: Dict[str, torch.Tensor] = {}  # name -> its word
        self.ranges: Dict[Hashable, torch.Tensor] = {}  # call site -> its words
        self.names: List[str] = []

    def _take(self, names: Sequence[str]) -> int:
        """FLAG_WORDS words per name (kernels take 16-byte aligned buffers;
        only a name's first word is written)."""
        start = len(self.names)
        if start + FLAG_WORDS * len(names) > self.CAPACITY:
            raise RuntimeError(f"coat.nn: more than {self.CAPACITY // FLAG_WORDS} "
                               "checked values")
        self.names.extend(n for n in names for _ in range(FLAG_WORDS))
        return start

    def record(self, what: str, x: torch.Tensor) -> None:
        slot = self.slots.get(what)
        if slot is None:
            i = self._take([what])
            slot = self.slots[what] = self.bad[i:i + 1]
        slot.logical_or_(~torch.isfinite(x).all())

    def words(self, site: Hashable, names: Sequence[str]) -> torch.Tensor:
        """The words of call site ``site``, FLAG_WORDS per name (a
        program's outputs), for its kernels to write."""
        words = self.ranges.get(site)
        if words is None:
            i = self._take(names)
            words = self.ranges[site] = self.bad[i:i + FLAG_WORDS * len(names)]
        return words

    def check(self) -> None:
        if not self.names:
            return
        words = self.bad[:len(self.names)]
        bad = words.nonzero()  # the one synchronisation
        words.zero_()
        if bad.numel():
            raise NonFiniteError(f"{self.names[int(bad[0, 0])]}: non-finite values (NaN/Inf)")


# Reading a flag waits for the GPU, so the flags of a whole step are read
# together, at the next step's first forward (or by check_finite()): one
# synchronisation a step instead of one per output.
_flags: Dict[torch.device, _StepFlags] = {}
_pending_phase = ""


def flags_for(device: torch.device) -> _StepFlags:
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


def begin(phase: str) -> None:
    """A compiled block's ``phase`` ("forward" or "backward") starts: the
    first forward after a backward reads the flags of the step before
    (except inside a capture, where nothing may synchronise: the flags are
    read after)."""
    global _pending_phase
    if phase == "forward" and _pending_phase == "backward" and \
            not torch.cuda.is_current_stream_capturing():
        check_finite()
    _pending_phase = phase


def check(x: torch.Tensor, what: str, phase: str) -> None:
    """Records whether ``x`` (a forward output or a gradient, by ``phase``)
    is finite under the name ``what``, by a torch reduction: for values no
    kernel flags itself."""
    if not ENABLED:
        return
    what = f"{what} ({tuple(x.shape)} {x.dtype})"
    if not x.is_cuda:
        if not torch.isfinite(x).all():  # no GPU to keep waiting: tell at once
            raise NonFiniteError(f"{what}: non-finite values (NaN/Inf)")
        return
    begin(phase)
    flags_for(x.device).record(what, x)


def raise_flagged(words: torch.Tensor, names: Sequence[str]) -> None:
    """Raises NonFiniteError for the first non-zero of ``words`` (a CPU
    call's own flags, FLAG_WORDS per name, read at once)."""
    bad = words.nonzero()
    if bad.numel():
        name = names[int(bad[0, 0]) // FLAG_WORDS]
        raise NonFiniteError(f"{name}: non-finite values (NaN/Inf)")




def step_replayed() -> None:
    """A replayed CUDA graph ran a whole step: its flags are read before the
    next forward, as an eager step's are."""
    global _pending_phase
    _pending_phase = "backward"


def capture_done() -> None:
    global _pending_phase
    _pending_phase = ""
