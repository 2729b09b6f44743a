#!/usr/bin/env bash
# The sanitized half of the test run: the whole project built with ASan,
# UBSan, assertions and fuzzing coverage (build-fuzz/), its lit and unit
# tests, then a short fuzzing run (scripts/fuzz.sh). The Python tests stay
# in the main build: a sanitized library cannot be loaded into an
# uninstrumented Python, and neither can the plugin into stock mlir-opt
# (those lit tests report UNSUPPORTED here).
#
#   scripts/check_sanitized.sh [FUZZ_SECONDS]   (default 60; 0 skips fuzzing)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
secs="${1:-60}"
build="${COAT_FUZZ_BUILD_DIR:-$root/build-fuzz}"
export COAT_FUZZ_BUILD_DIR="$build"
"$root/scripts/setup.sh"
start=$(date +%s)
COAT_BUILD_DIR="$build" "$root/scripts/build.sh" -DCOAT_ENABLE_FUZZER=ON >/dev/null
echo "sanitized build: $(( $(date +%s) - start )) s"
# The tools set their own ASan defaults (tools/SanitizerOptions.h).
export UBSAN_OPTIONS="print_stacktrace=1"
ctest --test-dir "$build" --output-on-failure -j "${COAT_TEST_JOBS:-2}" \
  -E '^(python|compile-examples)$'
if [ "$secs" != 0 ]; then "$root/scripts/fuzz.sh" "$secs"; fi
