#!/usr/bin/env bash
# Builds the libFuzzer target (build-fuzz/: the whole project with ASan, UBSan,
# assertions and coverage) and fuzzes the compiler for SECONDS (default 60):
# parse + verify, then the model pipeline (and, for a program it outlines,
# coat-compile-artifact for the CPU), the CPU and the GPU kernel lowerings
# (tools/coat-fuzz). The seed corpus is every .mlir input under test/ and
# examples/, one split-input-file case per seed; the dictionary holds the
# dialect's op, type and attribute keywords, read from its ODS files.
#
#   scripts/fuzz.sh [SECONDS] [extra libFuzzer flags, e.g. -runs=10000000]
#
# A crash leaves crash-* (the input) in build-fuzz/fuzz/ and exits non-zero;
# fix it and add the input to test/ as a regression test.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
secs="${1:-60}"; shift || true
build="${COAT_FUZZ_BUILD_DIR:-$root/build-fuzz}"
"$root/scripts/setup.sh" >/dev/null
COAT_BUILD_DIR="$build" "$root/scripts/build.sh" -DCOAT_ENABLE_FUZZER=ON >/dev/null
work="$build/fuzz"
mkdir -p "$work/seeds" "$work/corpus"
# Seeds: each // ----- separated case of each .mlir file.
"$root/.venv/bin/python" - "$root" "$work/seeds" <<'PY'
import hashlib, pathlib, sys
root, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for src in sorted([*root.glob("test/**/*.mlir"), *root.glob("examples/**/*.mlir")]):
    for case in src.read_text().split("// -----"):
        data = case.encode()
        (out / hashlib.sha1(data).hexdigest()).write_bytes(data)
PY
# Dictionary: op names, type and attribute mnemonics, FP8 formats, keywords.
{
  grep -rhoE 'Op<"[a-z_]+"' "$root/include/coat/Dialect/CoatOps.td" |
    sed -E 's/Op<"([a-z_]+)"/"coat.\1"/'
  grep -rhoE 'mnemonic = "[a-z_]+"' "$root/include/coat/Dialect/"*.td |
    sed -E 's/mnemonic = ("[a-z_]+")/\1/'
  for w in '!coat.qtensor<' '!coat.unresolved<' '#coat.scaling<' per_tensor per_group \
           flat_group per_block 'scale = ' expand f8E4M3FN f8E5M2 bf16 f32 epilogue \
           forward dgrad wgrad eps func.func tensor '?x' 'x16x' ' -> ' ' : '; do
    printf '"%s"\n' "$w"
  done
} | sort -u >"$work/coat.dict"
# The target must drive the pipelines, not only the parser: on the MLP block
# the model pipeline, on the norm specs the CPU and GPU lowerings must change
# the module (COAT_FUZZ_VERBOSE: ops before and after each pipeline).
grows() {
  local out
  out=$(COAT_FUZZ_VERBOSE=1 "$build/bin/coat-fuzz" "$root/examples/$1" 2>&1)
  if ! grep -E "^coat-fuzz: $2: " <<<"$out" | head -1 | awk '{ exit !($5 > $3) }' ||
     ! grep -qE "^coat-fuzz: $2: " <<<"$out"; then
    echo "coat-fuzz: the $2 pipeline did not lower examples/$1:" >&2
    grep "^coat-fuzz: " <<<"$out" >&2 || true
    exit 1
  fi
}
grows llama_mlp/mlp_block.mlir model
grows flow/norms.mlir cpu
grows flow/norms.mlir gpu
# The outlined MLP block's artifact is written (the pass leaves the module
# as it was, so it is checked for running and succeeding, not growing).
out=$(COAT_FUZZ_VERBOSE=1 "$build/bin/coat-fuzz" "$root/examples/llama_mlp/mlp_block.mlir" 2>&1)
if ! grep -qE "^coat-fuzz: artifact: " <<<"$out"; then
  echo "coat-fuzz: the artifact stage did not compile the outlined examples/llama_mlp/mlp_block.mlir" >&2
  exit 1
fi
echo "coat-fuzz: $(ls "$work/seeds" | wc -l) seeds, $(wc -l <"$work/coat.dict") dictionary entries, ${secs}s"
cd "$work"
# Progress lines (NEW, REDUCE, pulse) and the recommended dictionary are
# left out; crashes, the final coverage line and the statistics are kept.
"$build/bin/coat-fuzz" -max_total_time="$secs" -dict="$work/coat.dict" \
  -max_len=8192 -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 "$@" \
  "$work/corpus" "$work/seeds" 2>&1 |
  grep -av -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|RELOAD|INITED)' |
  sed '/^###### Recommended dictionary/,/^###### End of recommended dictionary/d'
