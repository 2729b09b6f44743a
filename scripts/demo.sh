#!/usr/bin/env bash
# The main job: set up, build, and compile the shipped examples through the
# whole pipeline, printing a summary of what came out.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh" >/dev/null
build="${COAT_BUILD_DIR:-$root/build}"
out="${COAT_DEMO_OUT:-$build/demo}"
mkdir -p "$out"
"$root/.venv/bin/python" "$root/scripts/compile_examples.py" \
  --coat-opt "$build/bin/coat-opt" --examples "$root/examples" --out "$out"
