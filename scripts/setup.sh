#!/usr/bin/env bash
# Installs the system packages that building, testing and linting mxq need on a fresh Debian/Ubuntu machine
# (idempotent; uses sudo when not root). The Python side (torch, scikit-build-core, pytest, ruff) goes into a
# virtual environment, not the system: scripts/test.sh makes one (see README.md, "Python package").
# The CUDA toolkit is not installed here: with nvcc on PATH (or in /usr/local/cuda/bin) the kernels are compiled
# too; without it everything but the GPU path builds.
set -euo pipefail
start=$SECONDS
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
command -v git >/dev/null || need+=(git)
command -v clang-format >/dev/null || need+=(clang-format)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
if ! command -v python3 >/dev/null; then
  need+=(python3 python3-venv)
elif ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  need+=(python3-venv)  # Debian's python3 ships `python3 -m venv` separately
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
nvcc=$(command -v nvcc || true)
if [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  nvcc=/usr/local/cuda/bin/nvcc
  echo "setup: nvcc is in /usr/local/cuda/bin but not on PATH; add it to build the kernels:" \
    'export PATH="$PATH:/usr/local/cuda/bin"'
fi
echo "setup: ok in $((SECONDS - start)) s ($(cmake --version | head -1); $(clang-format --version | head -1);" \
  "python3 $(python3 -c 'import platform; print(platform.python_version())'); nvcc: ${nvcc:-none})"
