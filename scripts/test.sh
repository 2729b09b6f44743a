#!/usr/bin/env bash
# Fresh machine to green tests: set up, build, run every test through ctest
# (lit, unit tests and Python tests are all registered with it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
build="${COAT_BUILD_DIR:-$root/build}"
cd "$build"
ctest --output-on-failure -j "${COAT_TEST_JOBS:-2}"
