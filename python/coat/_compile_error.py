"""CompileError and the wording of a failed subprocess's exit, shared by
coat.compiler (coat.compile, the CPU link) and coat.toolchain (the coat-opt
pipelines) so that neither has to import the other for them."""

from __future__ import annotations

import signal
from typing import Optional, Sequence


class CompileError(RuntimeError):
    """coat-opt (or the CPU link step) failed; ``diagnostics`` holds its
    output, ``command`` the argv that ran."""

    def __init__(self, message: str, diagnostics: str = "", command: Sequence[str] = (),
                 returncode: Optional[int] = None):
        full = message
        if diagnostics.strip():
            full += "\n" + diagnostics.rstrip()
        super().__init__(full)
        self.diagnostics = diagnostics
        self.command = list(command)
        self.returncode = returncode


def _describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"
