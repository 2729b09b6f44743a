#!/usr/bin/env bash
# On a GPU host (CUDA driver, torch; no LLVM needed): builds the runtime, runs
# the GPU tests against compiled kernels, then the optimizer benchmark.
#
#   scripts/gpu_check.sh DIR [DIR ...]
#
# Each DIR is a compiled module (scripts/compile_examples.py or coat.compile,
# run where LLVM is). Set COAT_REFERENCE_LIB to a built libcoat_reference.so
# for the numerics tests against the reference library. Set COAT_BENCH_JSON to
# also write the benchmark figures as JSON.
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
export COAT_KERNELS="$(IFS=:; echo "$*")"

python3 -m pytest -q -rs -p no:cacheprovider \
  "$root/test/python/test_runtime_lib.py" \
  "$root/test/python/test_optim_kernels.py" \
  "$root/test/python/test_adamw_kernel_numerics.py"

python3 "$root/bench/bench_optimizer.py" --kernels "$@" \
  ${COAT_BENCH_JSON:+--json "$COAT_BENCH_JSON"}
