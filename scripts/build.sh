#!/usr/bin/env bash
# Configures (once) and builds COAT-MLIR into build/ (or $COAT_BUILD_DIR).
# Extra arguments go to cmake at configure time, e.g. -DCOAT_ENABLE_SANITIZERS=ON.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${COAT_BUILD_DIR:-$root/build}"
llvm=/usr/lib/llvm-22
if [ ! -f "$build/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -G Ninja -S "$root" -B "$build" \
    -DCMAKE_BUILD_TYPE="${COAT_BUILD_TYPE:-Release}" \
    -DMLIR_DIR="$llvm/lib/cmake/mlir" \
    -DLLVM_EXTERNAL_LIT="$llvm/bin/lit" \
    -DCMAKE_C_COMPILER="$llvm/bin/clang" \
    -DCMAKE_CXX_COMPILER="$llvm/bin/clang++" \
    -DLLVM_USE_LINKER=lld \
    -DPython3_EXECUTABLE="$root/.venv/bin/python" \
    "$@" >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
fi
ninja -C "$build" ${COAT_BUILD_JOBS:+-j "$COAT_BUILD_JOBS"}
