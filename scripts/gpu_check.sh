#!/usr/bin/env bash
# On a GPU host (CUDA driver, torch; no LLVM needed): builds the runtime and
# runs every Python test against compiled kernels (GPU cases run, CPU twins
# too), then, with --sanitize, every kernel family under compute-sanitizer,
# then, with --profile, Nsight Compute's counters of chosen kernels, then,
# with --bench, every benchmark.
#
#   scripts/gpu_check.sh [--bench | --bench-only] [--sanitize | --sanitize-only]
#                        [--profile | --profile-only] [--dry-run]
#                        DEMO_DIR | KERNEL_DIR ...
#
# --profile launches the kernels of $COAT_PROFILE_TARGETS (MODULE:KERNEL:SHAPE
# ..., default: bench/profile_kernels.py's list of the kernels short of their
# goal) under ncu and prints what bounds each (DRAM and SM throughput,
# occupancy, stall reasons); the report goes to $COAT_PROFILE_DIR.
#
# --sanitize reruns the GPU numerics tests of every kernel family (optimizer,
# quantize, scales, flow, norms, bias gradients, GEMM per-tensor and
# block-scaled) on their ragged and 1-row/1-element shapes under
# compute-sanitizer's memcheck, racecheck and initcheck; any report fails
# the run. Torch's caching
# allocator is off there, so that every tensor is its own allocation and an
# access past its end is seen. COAT_SANITIZE_TOOLS picks and orders the tools.
#
# COAT_TEST_SHARD=i/n runs the i-th of n parts of the test files (the
# suite over n calls of a time-limited host).
#
# COAT_TEST_WORKERS sets the pytest-xdist workers of the tests (default 16
# where xdist is installed, 0 for one process).
#
# COAT_TEST_STALL_S: a test still running after this many seconds (default
# 240) has every thread's stack printed into the log.
#
# First, `coat check-kernels` refuses kernel directories that this tree's
# compiler did not make (their source keys; nothing else runs then).
#
# --dry-run prints the commands (tests, then benchmarks) instead of running
# them; CI uses it to check that every benchmark is reached.
#
# DEMO_DIR is what scripts/compile_examples.py writes (one sub-directory per
# example, run where LLVM is); KERNEL_DIRs are compiled modules. Set
# COAT_REFERENCE_LIB to a built libcoat_reference.so for the numerics tests
# against the reference library.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bench=0 tests=1 dry=0 sanitize=0 profile=0
while [ $# -ge 1 ]; do
  case "$1" in
    --bench) bench=1; shift ;;
    --bench-only) bench=1; tests=0; shift ;;
    --sanitize) sanitize=1; shift ;;
    --sanitize-only) sanitize=1; tests=0; shift ;;
    --profile) profile=1; shift ;;
    --profile-only) profile=1; tests=0; shift ;;
    --dry-run) dry=1; shift ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "usage: $0 [--bench | --bench-only] [--sanitize | --sanitize-only] [--profile | --profile-only] [--dry-run] DEMO_DIR | KERNEL_DIR ..." >&2; exit 2; }
dirs=()
for d in "$@"; do
  if [ -f "$d/manifest.json" ]; then dirs+=("$(cd "$d" && pwd)")
  else for m in "$d"/*/manifest.json; do [ -f "$m" ] && dirs+=("$(cd "$(dirname "$m")" && pwd)"); done
  fi
done
[ ${#dirs[@]} -ge 1 ] || { echo "$0: no manifest.json under $*" >&2; exit 2; }
# COAT_TEST_SHARD (above): every n-th test file of the sorted list, from the i-th.
test_paths=("$root/test/python")
if [ -n "${COAT_TEST_SHARD:-}" ]; then
  if ! [[ "$COAT_TEST_SHARD" =~ ^([0-9]+)/([0-9]+)$ ]] \
      || [ "${BASH_REMATCH[1]}" -lt 1 ] || [ "${BASH_REMATCH[1]}" -gt "${BASH_REMATCH[2]}" ]; then
    echo "$0: COAT_TEST_SHARD must be i/n with 1 <= i <= n, not '$COAT_TEST_SHARD'" >&2
    exit 2
  fi
  shard=$((BASH_REMATCH[1] - 1)) shards=${BASH_REMATCH[2]} k=0
  test_paths=()
  while IFS= read -r f; do
    if [ $((k % shards)) = "$shard" ]; then test_paths+=("$root/test/python/$f"); fi
    k=$((k + 1))
  done < <(cd "$root/test/python" && printf '%s\n' test_*.py | LC_ALL=C sort)
fi
stall_s="${COAT_TEST_STALL_S:-240}"
if ! [[ "$stall_s" =~ ^[1-9][0-9]*$ ]]; then
  echo "$0: COAT_TEST_STALL_S must be a positive number of seconds, not '$stall_s'" >&2
  exit 2
fi
of_op() {  # the directories holding kernels of op $1 (status 0 when none)
  for d in "${dirs[@]}"; do
    if grep -q "\"op\": *\"$1\"" "$d/manifest.json"; then echo "$d"; fi
  done
}
run() {  # runs "$@", or prints it under --dry-run
  if [ $dry = 1 ]; then echo "+ $*"; else "$@"; fi
}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 NCCL_NVLS_ENABLE=0
if [ $dry = 0 ]; then
  # Kernels compiled by another compiler (carried from an older build) are
  # passed over by the finder, so every test needing them would skip and the
  # run would pass having tested little: refuse them first.
  PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m coat check-kernels "${dirs[@]}"
  rt="${COAT_RUNTIME_BUILD:-$(mktemp -d /tmp/coat-runtime.XXXXXX)}"
  cmake -S "$root/lib/Runtime" -B "$rt" -DCMAKE_BUILD_TYPE=Release >"$rt.log" 2>&1 \
    || { cat "$rt.log"; exit 1; }
  cmake --build "$rt" -j >>"$rt.log" 2>&1 || { cat "$rt.log"; exit 1; }
  export COAT_RUNTIME_LIB="$(find "$rt" -name libcoat_runtime.so | head -n1)"
fi
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
export COAT_KERNELS="$(IFS=:; echo "${dirs[*]}")"
export COAT_LINEAR_KERNELS="$(of_op linear | paste -sd:)"

# With pytest-xdist (the GPU host has it) the test files spread over
# COAT_TEST_WORKERS processes sharing the GPU, 16 by default (on the H200 on
# 2026-12-05: 76 s with 16, 413 s in one process). 0 runs them in one.
workers="${COAT_TEST_WORKERS:-auto}"
if [ "$workers" = auto ]; then
  if python3 -c "import xdist" 2>/dev/null; then workers=16; else workers=0; fi
fi
xdist=()
if [ "$workers" != 0 ]; then xdist=(-n "$workers" --dist loadfile); fi
if [ $tests = 1 ]; then
  # pytest-benchmark (on the GPU host) disables itself under xdist and
  # warns once per worker; no test uses it. pytest's faulthandler prints
  # the stacks of a test that outlives COAT_TEST_STALL_S, so a hang names
  # its place in the log.
  run python3 -m pytest -q -rs -p no:cacheprovider -p no:benchmark --durations=20 \
    -o faulthandler_timeout="$stall_s" "${xdist[@]}" "${test_paths[@]}"
fi

if [ $sanitize = 1 ]; then
  t="$root/test/python"
  # The GPU cases of each family's numerics tests on their smallest and
  # ragged shapes, one input case each (the accesses do not depend on values).
  files=()
  for f in adamw_kernel_numerics activation_kernel_numerics scale_kernel_numerics \
           flow_kernel_numerics rope_kernel_numerics norm_kernel_numerics bias_grad_numerics \
           cross_entropy_numerics \
           linear_gpu \
           large_tensors; do
    files+=("$t/test_$f.py")
  done
  # GEMMs: the adversarial and written-only-inside cases, and the formula
  # checks on ragged shapes (M, N and K not multiples of a tile).
  select="(cuda and random and not 2818049) or (tiny and cuda) or adversarial"
  select+=" or untouched or ((decoded_fp32 or block_scaled_matches) and (257 or 300))"
  for tool in ${COAT_SANITIZE_TOOLS:-memcheck racecheck initcheck}; do
    run env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool "$tool" \
      --error-exitcode 86 --target-processes all --print-limit 20 \
      python3 -m pytest -q -p no:cacheprovider "${files[@]}" -k "$select"
  done
fi
if [ $profile = 1 ]; then
  if [ $dry = 1 ]; then prof="${COAT_PROFILE_DIR:-\$COAT_PROFILE_DIR}"
  else prof="${COAT_PROFILE_DIR:-$(mktemp -d -t coat-profile.XXXXXX)}"; mkdir -p "$prof"; fi
  # Clocks as the benchmarks see them (no locking); only the kernels inside
  # the script's NVTX range are profiled.
  read -r -a targets <<< "${COAT_PROFILE_TARGETS:-}"
  run ncu --nvtx --nvtx-include "coat-profile/" --clock-control none \
    --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
    -f -o "$prof/profile" \
    python3 "$root/bench/profile_kernels.py" launch --record "$prof/launched.txt" \
    --kernels "${dirs[@]}" ${targets[@]+--targets "${targets[@]}"}
  run python3 "$root/bench/profile_kernels.py" summarize "$prof/profile.ncu-rep" \
    --launched "$prof/launched.txt"
fi
[ $bench = 1 ] || exit 0

# Every benchmark appends a JSON line per measured row to $COAT_BENCH_RESULTS
# (bench/_timing.py; a file the caller names is appended to); at the end,
# also when a benchmark fails (the exit status stays the benchmark's),
# bench/summary.py prints them as one table; --dry-run prints that last.
if [ $dry = 1 ]; then results="${COAT_BENCH_RESULTS:-\$COAT_BENCH_RESULTS}"
else results="${COAT_BENCH_RESULTS:-$(mktemp -t coat-bench.XXXXXX)}"; fi
export COAT_BENCH_RESULTS="$results"
trap 'run python3 "$root/bench/summary.py" "$results" || true' EXIT

run_bench() {  # script op [args...]: the benchmark over the directories of op
  local script=$1 op=$2; shift 2
  local ds; ds=$(of_op "$op")
  if [ -n "$ds" ]; then run python3 "$root/bench/$script" --kernels $ds "$@"; fi
}
run_bench bench_optimizer.py adamw_step
run_bench bench_activations.py quantize --only bf16_e4m3 --shapes 8192x8192 16384x4096
run_bench bench_activations.py requantize --only requantize --shapes 8192x8192 16384x4096
run_bench bench_flow.py silu
run_bench bench_rope.py rope
run_bench bench_norms.py rmsnorm
run_bench bench_scales.py reduce_scales
run_bench bench_bias_grad.py bias_grad
if [ -n "$COAT_LINEAR_KERNELS" ]; then run python3 "$root/bench/bench_linear.py"; fi
if [ -n "$(of_op linear)" ] && [ -n "$(of_op rmsnorm_grad)" ]; then
  run python3 "$root/bench/bench_block.py"
fi
run python3 "$root/bench/bench_fsdp.py"
