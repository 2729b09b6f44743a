"""Finiteness checks of compiled modules' outputs and gradients: a flag per
checked value, read once a step (one synchronisation) by check_finite() or
the next step's first forward. COAT_CHECK_FINITE=0 turns checks off."""

from __future__ import annotations

import os
from typing import Dict, List

import torch

#: Checking costs one reduction per output; COAT_CHECK_FINITE=0 turns it off.
ENABLED = os.environ.get("COAT_CHECK_FINITE", "1") != "0"


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


def check(x: torch.Tensor, what: str, phase: str) -> None:
    """Records whether ``x`` (a forward output or a gradient, by ``phase``)
    is finite under the name ``what``."""
    global _pending_phase
    if not ENABLED:
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
    flags_for(x.device).record(what, x)




def step_replayed() -> None:
    """A replayed CUDA graph ran a whole step: its flags are read before the
    next forward, as an eager step's are."""
    global _pending_phase
    _pending_phase = "backward"


def capture_done() -> None:
    global _pending_phase
    _pending_phase = ""
