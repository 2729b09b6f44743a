#!/usr/bin/env bash
# On a GPU host (CUDA driver, torch; no LLVM needed): builds the runtime, runs
# the FP8 GEMM GPU tests (per-tensor and block-scaled kinds) against compiled
# kernels, then the GEMM benchmark (block-scaled table first).
#
#   scripts/gpu_check_linear.sh DIR [DIR ...]
#
# Each DIR holds examples/linear/fp8_linear.mlir compiled with one set of
# coat-lower-linear options (scripts/compile_linear.sh OUT writes
# OUT/default, OUT/n128s6, OUT/m192wg3 and OUT/n192). BENCH=block runs only the block-scaled
# benchmark table, BENCH=none skips the benchmark.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 1 ] || { echo "usage: $0 KERNEL_DIR [KERNEL_DIR ...]" >&2; exit 2; }
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
rt="${COAT_RUNTIME_BUILD:-/tmp/coat-runtime}"
cmake -S "$root/lib/Runtime" -B "$rt" -DCMAKE_BUILD_TYPE=Release >"$rt.log" 2>&1 \
  || { cat "$rt.log"; exit 1; }
cmake --build "$rt" -j >>"$rt.log" 2>&1 || { cat "$rt.log"; exit 1; }
export COAT_RUNTIME_LIB="$(find "$rt" -name libcoat_runtime.so | head -n1)"
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
export COAT_LINEAR_KERNELS="$(IFS=:; echo "$*")"

python3 -m pytest -q -rs -p no:cacheprovider "$root/test/python/test_linear_gpu.py"
case "${BENCH:-all}" in
  none) ;;
  block) python3 "$root/bench/bench_linear.py" --only block ;;
  *) python3 "$root/bench/bench_linear.py" ;;
esac
