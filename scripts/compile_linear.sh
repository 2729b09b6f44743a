#!/usr/bin/env bash
# Where LLVM is: compiles examples/linear/fp8_linear.mlir (per-tensor and
# block-scaled FP8 GEMM specs) once per set of coat-lower-linear options, one
# folder each under OUT, for scripts/gpu_check.sh (it finds the GEMM folders) and
# bench/bench_linear.py ($COAT_LINEAR_KERNELS).
#
#   scripts/compile_linear.sh OUT
#
#   OUT/default  default options (block-scaled kernels: 128x128 tiles, 4 stages)
#   OUT/n128s6   tile-n=128 stages=6 (deeper ring for the 128x128 tiles)
#   OUT/m192wg3  tile-m=192 warpgroups=3 tile-n=128 stages=5 (three consumer
#                warpgroups of 64 rows: one more wgmma stream per CTA)
#   OUT/n192     tile-n=192 block-tile-n=192 stages=5 (block-scaled tiles
#                that straddle two weight blocks)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -eq 1 ] || { echo "usage: $0 OUT" >&2; exit 2; }
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
py="${PYTHON:-$root/.venv/bin/python}"
[ -x "$py" ] || py=python3
"$py" - "$root/examples/linear/fp8_linear.mlir" "$1" <<'PY'
import sys
from pathlib import Path
from coat.toolchain import Toolchain
src, out = sys.argv[1], Path(sys.argv[2])
for name, opts in [("default", ""), ("n128s6", "tile-n=128 stages=6"),
                   ("m192wg3", "tile-m=192 warpgroups=3 tile-n=128 stages=5"),
                   ("n192", "tile-n=192 block-tile-n=192 stages=5")]:
    Toolchain().compile_file(src, out / name, cpu=False, linear_options=opts)
    print(f"{out / name}: coat-lower-linear{{{opts}}}")
PY
