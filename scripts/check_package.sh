#!/usr/bin/env bash
# Checks the CMake package end to end: installs the build (build/ or
# $COAT_BUILD_DIR) into a temporary prefix, configures and builds the
# out-of-tree consumer test/package against <prefix>/lib/cmake/coat, and runs
# its coat-consumer-opt, the installed coat-opt and stock mlir-opt with the
# installed plugin on an example. Exits non-zero on the first thing wrong.
#
# It first brings the installed targets up to date (a no-op after
# scripts/build.sh). Not for sanitized builds. COAT_KEEP_PACKAGE=1 keeps the
# temporary folder (prefix, consumer build, outputs) and prints where it is.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${COAT_BUILD_DIR:-$root/build}"
llvm=/usr/lib/llvm-22
example="$root/examples/granularity/both_consumers.mlir"

work="$(mktemp -d "${TMPDIR:-/tmp}/coat-package.XXXXXX")"
if [ "${COAT_KEEP_PACKAGE:-0}" = 1 ]; then
  trap 'echo "check_package: kept $work"' EXIT
else
  trap 'rm -rf "$work"' EXIT
fi
prefix="$work/prefix"
start=$SECONDS

fail() { echo "check_package: FAIL: $*" >&2; exit 1; }
step() { echo "check_package: [$((SECONDS - start))s] $*"; }
# expect FILE PATTERN...: every extended regexp occurs in FILE.
expect() {
  local file=$1; shift
  for pat in "$@"; do
    grep -Eq -- "$pat" "$file" || { cat "$file" >&2; fail "no '$pat' in $(basename "$file")"; }
  done
}
# run OUT CMD...: runs CMD with stdout to OUT and stderr to OUT.err, shows
# both on failure.
run() {
  local out=$1 rc=0; shift
  "$@" >"$out" 2>"$out.err" || rc=$?
  if [ "$rc" != 0 ]; then
    cat "$out" "$out.err" >&2
    fail "$* (exit $rc)"
  fi
}

[ -f "$build/build.ninja" ] || fail "$build is not configured (run scripts/build.sh)"

step "bringing the installed targets up to date in $build"
run "$work/build.log" cmake --build "$build" --target coat-opt CoatPlugin

step "installing into $prefix"
run "$work/install.log" cmake --install "$build" --prefix "$prefix"
for f in include/coat/InitAll.h include/coat/Dialect/CoatDialect.h \
         include/coat/Dialect/CoatOps.h.inc include/coat/Dialect/CoatOps.td \
         include/coat/Transforms/Passes.h.inc include/coat/Conversion/Passes.h.inc \
         lib/libCoatNumerics.a lib/libMLIRCoat.a lib/libMLIRCoatTransforms.a \
         lib/libMLIRCoatConversion.a lib/libMLIRCoatPipelines.a \
         lib/libMLIRCoatRegistration.a lib/CoatPlugin.so bin/coat-opt \
         lib/cmake/coat/COATConfig.cmake lib/cmake/coat/COATConfigVersion.cmake \
         lib/cmake/coat/COATTargets.cmake; do
  [ -e "$prefix/$f" ] || fail "the install lacks $f"
done
# Nothing of the source or build tree leaks into the exported targets.
if grep -rqF -e "$root/" "$prefix/lib/cmake/coat"; then
  grep -rnF -e "$root/" "$prefix/lib/cmake/coat" >&2
  fail "lib/cmake/coat names paths of the source or build tree"
fi

step "configuring test/package against $prefix/lib/cmake/coat"
run "$work/configure.log" cmake -G Ninja -S "$root/test/package" -B "$work/build" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCOAT_DIR="$prefix/lib/cmake/coat" \
  -DMLIR_DIR="$llvm/lib/cmake/mlir" \
  -DCMAKE_CXX_COMPILER="${CXX:-$llvm/bin/clang++}" \
  -DCMAKE_EXE_LINKER_FLAGS="${COAT_PACKAGE_LDFLAGS:--fuse-ld=lld}"
expect "$work/configure.log" \
  "COAT_VERSION=0\.1\.0$" \
  "COAT_PLUGIN=$prefix/lib/CoatPlugin\.so$" \
  "COAT_OPT=$prefix/bin/coat-opt$" \
  "COAT::coat-opt=$prefix/bin/coat-opt$"

step "building coat-consumer-opt"
run "$work/consumer-build.log" cmake --build "$work/build"
tool="$work/build/coat-consumer-opt"

step "running coat-consumer-opt"
run "$work/version.out" "$tool" --version
expect "$work/version.out" "coat-consumer-opt \(COAT 0\.1\.0, dialect coat\)"
run "$work/help.out" "$tool" --help
expect "$work/help.out" "--coat-mixed-granularity" "--coat-outline-kernels" \
  "--coat-fuse-adamw" "--coat-gpu-to-binary"
run "$work/consumer.out" "$tool" -coat-mixed-granularity "$example"
# The tensor read by both a linear and a non-linear layer gets the 1x16 copy
# for the SiLU and a per-tensor one requantized from it for the GEMM.
expect "$work/consumer.out" \
  "%0 = coat\.quantize %arg0 : tensor<256x512xbf16> -> !coat\.qtensor<256x512xf8E4M3FN, per_group<16>, scale = bf16>" \
  "%1 = coat\.requantize %0 : .* -> !coat\.qtensor<256x512xf8E4M3FN, per_tensor, scale = bf16>" \
  "coat\.linear forward %1, %2 : !coat\.qtensor<256x512xf8E4M3FN, per_tensor" \
  "coat\.silu %0 : !coat\.qtensor<256x512xf8E4M3FN, per_group<16>"
if grep -q "quantize_auto\|coat\.unresolved" "$work/consumer.out"; then
  fail "coat-consumer-opt left unresolved quantizations"
fi
# The same pass through the installed coat-opt gives the same IR.
run "$work/coat-opt.out" "$prefix/bin/coat-opt" -coat-mixed-granularity "$example"
diff -u "$work/coat-opt.out" "$work/consumer.out" >&2 ||
  fail "coat-consumer-opt and the installed coat-opt disagree"
run "$work/coat-opt-version.out" "$prefix/bin/coat-opt" --version
expect "$work/coat-opt-version.out" "COAT-MLIR 0\.1\.0"

step "running stock mlir-opt with the installed CoatPlugin.so"
run "$work/plugin.out" "$llvm/bin/mlir-opt" "$example" \
  --load-dialect-plugin="$prefix/lib/CoatPlugin.so" \
  --pass-pipeline='builtin.module(coat-mixed-granularity)'
diff -u "$work/coat-opt.out" "$work/plugin.out" >&2 ||
  fail "mlir-opt with the installed plugin disagrees with coat-opt"

step "PASS"
