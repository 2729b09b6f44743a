#!/usr/bin/env bash
# On a GPU host (CUDA driver, torch; no LLVM needed): builds the runtime, runs
# the activation-kernel numerics tests (CPU twin and GPU, against the
# reference library) on compiled kernels, then the activation benchmark.
#
#   scripts/gpu_check_activations.sh DIR [BENCH_ARGS ...]
#
# DIR holds examples/activations/quantize.mlir compiled
# (scripts/compile_examples.py: build/demo/quantize). Further arguments go to
# bench/bench_activations.py (e.g. --only bf16_e4m3 --shapes 8192x8192).
# Set COAT_REFERENCE_LIB to a built libcoat_reference.so (the tests skip
# without it). Set COAT_BENCH_JSON to also write the figures.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 1 ] || { echo "usage: $0 KERNEL_DIR [BENCH_ARGS ...]" >&2; exit 2; }
dir="$1"
shift
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
rt="${COAT_RUNTIME_BUILD:-/tmp/coat-runtime}"
cmake -S "$root/lib/Runtime" -B "$rt" -DCMAKE_BUILD_TYPE=Release >"$rt.log" 2>&1 \
  || { cat "$rt.log"; exit 1; }
cmake --build "$rt" -j >>"$rt.log" 2>&1 || { cat "$rt.log"; exit 1; }
export COAT_RUNTIME_LIB="$(find "$rt" -name libcoat_runtime.so | head -n1)"
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
export COAT_KERNELS="$dir"

python3 -m pytest -q -rs -p no:cacheprovider "$root/test/python/test_activation_kernel_numerics.py"
python3 "$root/bench/bench_activations.py" --kernels "$dir" "$@" \
  ${COAT_BENCH_JSON:+--json "$COAT_BENCH_JSON"}
