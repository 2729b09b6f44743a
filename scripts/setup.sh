#!/usr/bin/env bash
# Installs everything a fresh Debian 12 machine needs to build and test COAT-MLIR.
# Idempotent: packages already present are skipped, the venv is reused.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

apt_pkgs=(llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools clang-22 lld-22
          ninja-build cmake libgtest-dev python3-venv python3-dev zlib1g-dev libzstd-dev
          python3-torch libclang-rt-22-dev)
# libclang-rt-22-dev: the sanitizer and libFuzzer runtimes of the sanitized
# build (scripts/check_sanitized.sh, part of scripts/test.sh).
# python3-torch: Debian's CPU-only torch 1.13 for the Python tests (no float8
# dtypes: FP8 codes are uint8 there). Measured on a fresh Debian 12 machine:
# 178 packages, 140 MiB download, 608 MiB installed, 44 s. PyPI's torch wheel
# alone is 539 MB and pulls ~17 CUDA wheels (several GB); its CPU-only wheels
# are not on PyPI.
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Project venv (Debian's python3, so CMake and lit see one interpreter). It sees
# the system site-packages for Debian's python3-torch; its own packages win.
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
elif grep -q '^include-system-site-packages = false' "$venv/pyvenv.cfg"; then
  sed -i 's/^include-system-site-packages = false/include-system-site-packages = true/' "$venv/pyvenv.cfg"
fi
stamp="$venv/.coat-reqs"
if ! cmp -s "$root/python/requirements.txt" "$stamp" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r "$root/python/requirements.txt"
  cp "$root/python/requirements.txt" "$stamp"
fi
