"""Finiteness checks of compiled modules' outputs and gradients: a flag per
checked value, read by check_finite() (which waits for the GPU) or, without
waiting, at a later step's first forward: each step's first forward copies
the flags to the host behind the work already queued and reads the copy
the GPU finished, so a NaN is reported one or two steps after the step
that made it and the host never stalls. COAT_CHECK_FINITE=0 turns checks
off."""

from __future__ import annotations

import os
from typing import Dict, Hashable, List, Optional, Sequence, Tuple

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
        # A pinned host copy of the words and (its event, the words it
        # holds) while the GPU has not been seen to finish it.
        self.host: Optional[torch.Tensor] = None
        self.pending: Optional[Tuple[torch.cuda.Event, int]] = None

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

    def _first_flagged(self, words: torch.Tensor) -> Optional[str]:
        bad = words.nonzero()
        return self.names[int(bad[0, 0])] if bad.numel() else None

    def _read_copy(self) -> Optional[str]:
        """The first flagged name of the pending host copy (waiting for it)."""
        event, n = self.pending
        self.pending = None
        event.synchronize()
        return self._first_flagged(self.host[:n])

    def poll(self) -> None:
        """Reads the last host copy of the words if the GPU has written it
        and starts the next one (copy, then reset, behind the queued work):
        never waits. While a copy is in flight the words keep accumulating
        what later kernels flag, for the next copy."""
        if not self.names:
            return
        first = None
        if self.pending is not None:
            if not self.pending[0].query():
                return
            first = self._read_copy()
        if self.host is None:
            # Pinned, so that the copy from the GPU is asynchronous.
            self.host = torch.empty(self.CAPACITY, dtype=torch.int32,
                                    pin_memory=self.bad.is_cuda)
        n = len(self.names)
        words = self.bad[:n]
        self.host[:n].copy_(words, non_blocking=True)
        words.zero_()
        event = torch.cuda.Event()
        event.record()
        self.pending = (event, n)
        if first is not None:
            raise NonFiniteError(f"{first}: non-finite values (NaN/Inf)")

    def check(self) -> None:
        """Reads every flag set so far, waiting for the GPU."""
        if not self.names:
            return
        first = self._read_copy() if self.pending is not None else None
        words = self.bad[:len(self.names)]
        now = self._first_flagged(words)  # the one synchronisation
        words.zero_()
        if first or now:
            raise NonFiniteError(f"{first or now}: non-finite values (NaN/Inf)")


# Reading a flag on the host needs the GPU to have written it: the flags of
# a step are copied together at the next step's first forward and read
# there once the GPU is past the copy (poll), or by check_finite(), which
# waits.
_flags: Dict[torch.device, _StepFlags] = {}
_pending_phase = ""


def flags_for(device: torch.device) -> _StepFlags:
    flags = _flags.get(device)
    if flags is None:
        flags = _flags[device] = _StepFlags(device)
    return flags


def check_finite() -> None:
    """Raises NonFiniteError naming the first module output or gradient that
    held a NaN or Inf since the last check, waiting for the GPU; a training
    loop may call it after backward() to stop at the step itself. Without
    it, a compiled block's first forward of a step reads the flags the GPU
    has finished without waiting (poll_finite), except in a step replayed
    from a CUDA graph of torch.compile (mode="reduce-overhead"), where no
    Python runs: call one of them there. COAT_CHECK_FINITE=0 turns checks
    off."""
    for flags in list(_flags.values()):
        flags.check()


def poll_finite() -> None:
    """check_finite() without waiting: raises NonFiniteError for the flags
    of an earlier step whose copy the GPU has finished, and starts copying
    the flags set since."""
    for flags in list(_flags.values()):
        flags.poll()


def begin(phase: str) -> None:
    """A compiled block's ``phase`` ("forward" or "backward") starts: the
    first forward after a backward polls the flags (poll_finite; not inside
    a capture, where no copy may be made: the flags are read after)."""
    global _pending_phase
    if phase == "forward" and _pending_phase == "backward" and \
            not torch.cuda.is_current_stream_capturing():
        poll_finite()
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
