#!/usr/bin/env bash
# Fresh machine to green tests: set up, build, run every test through ctest
# (lit, unit tests and Python tests are all registered with it). Before that,
# the sanitized build runs its lit and unit tests and a 60 s fuzzing smoke run
# (scripts/check_sanitized.sh; COAT_SANITIZED=0 skips it, COAT_FUZZ_SECONDS
# sets the fuzzing time).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
if [ "${COAT_SANITIZED:-1}" != 0 ]; then
  "$root/scripts/check_sanitized.sh" "${COAT_FUZZ_SECONDS:-60}"
fi
build="${COAT_BUILD_DIR:-$root/build}"
cd "$build"
ctest --output-on-failure -j "${COAT_TEST_JOBS:-2}"
