#!/usr/bin/env bash
# On a GPU host (CUDA driver, torch; no LLVM needed): builds the runtime, runs
# the pointwise flow kernels' numerics tests on the GPU (and CPU twins), then
# their benchmark.
#
#   scripts/gpu_check_flow.sh DIR
#
# DIR is the compiled examples/flow/pointwise.mlir (compile_examples.py writes
# it to build/demo/pointwise). Set COAT_REFERENCE_LIB to a built
# libcoat_reference.so (the numerics tests compare against it), and
# COAT_BENCH_JSON to also write the benchmark figures as JSON.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -eq 1 ] || { echo "usage: $0 KERNEL_DIR" >&2; exit 2; }
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
rt="${COAT_RUNTIME_BUILD:-/tmp/coat-runtime}"
cmake -S "$root/lib/Runtime" -B "$rt" -DCMAKE_BUILD_TYPE=Release >"$rt.log" 2>&1 \
  || { cat "$rt.log"; exit 1; }
cmake --build "$rt" -j >>"$rt.log" 2>&1 || { cat "$rt.log"; exit 1; }
export COAT_RUNTIME_LIB="$(find "$rt" -name libcoat_runtime.so | head -n1)"
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
export COAT_KERNELS="$1"

python3 -m pytest -q -rs -p no:cacheprovider "$root/test/python/test_flow_kernel_numerics.py"

python3 "$root/bench/bench_flow.py" --kernels "$1" ${COAT_BENCH_JSON:+--json "$COAT_BENCH_JSON"}
