"""The coat-opt invocation used by :func:`coat.compile` -- the ONE place to
edit when the compiler's pipeline changes.

!!! TO BE CONFIRMED by the compiler engineer !!!
The pass names below marked TO BE CONFIRMED are placeholders (``coat-fuse-adamw``
and ``coat-gpu-to-binary`` exist) for the lowering/export pipeline that writes the
cubin, PTX, CPU object and manifest.json of docs/manifest.md into ``out_dir``.
Until then, set COAT_PIPELINE to override ``PIPELINE`` (same ``{...}`` fields)
without touching this file.
"""

from __future__ import annotations

import os
from typing import List, Mapping, Sequence

PIPELINE_CONFIRMED = False

# str.format fields: out_dir, chip, features, mode.  Doubled braces are literal.
PIPELINE = (
    "builtin.module("
    "coat-fuse-adamw{{mode={mode}}},"
    "coat-lower-to-kernels,"                            # TO BE CONFIRMED
    "coat-gpu-to-binary{{chip={chip} features={features}}},"  # exists (Pipelines.h)
    "coat-cpu-to-object{{out-dir={out_dir}}},"          # TO BE CONFIRMED
    "coat-export-manifest{{out-dir={out_dir}}}"         # TO BE CONFIRMED
    ")"
)

DEFAULT_OPTIONS: Mapping[str, str] = {"chip": "sm_90a", "features": "+ptx80", "mode": "fixed"}

# How a CPU object (cpu.object in the manifest) becomes the shared library the
# CPU launcher dlopens. The object must be position-independent.
CPU_LINK_ARGS: Sequence[str] = ("-shared", "-lm")


def pipeline_string(out_dir: str, **options: str) -> str:
    opts = dict(DEFAULT_OPTIONS)
    opts.update({k: v for k, v in options.items() if v is not None})
    template = os.environ.get("COAT_PIPELINE", PIPELINE)
    return template.format(out_dir=out_dir, **opts)


def coat_opt_command(coat_opt: str, input_path: str, out_dir: str,
                     extra_args: Sequence[str] = (), **options: str) -> List[str]:
    """The argv of the coat-opt subprocess."""
    return [coat_opt, input_path,
            f"--pass-pipeline={pipeline_string(out_dir, **options)}",
            "-o", os.path.join(out_dir, "lowered.mlir"), *extra_args]
