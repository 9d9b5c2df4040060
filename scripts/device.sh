#!/usr/bin/env bash
# One call on the GPU machine: configure, build, resource report, GPU tests, benchmark, Python package + pytest.
# Usage: scripts/device.sh [build] [tests] [bench] [python] [sanitize] ... (default: all but sanitize)
# Logs go to $OUT (the device tool's return folder) or ./device-out. Dependencies the device cannot download
# (GoogleTest sources, CLI11 headers) travel in .deps/ (see docs/development.md).
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
steps=${*:-build tests bench python}
has() { [[ " $steps " == *" $1 "* ]]; }
log() { printf '\n==== %s  [%s]\n' "$1" "$(date +%T)"; }
status=0

log "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv,noheader
nvcc --version | tail -2

# At most 8 files come back from the device tool: build.log, tests.log, bench.log/.json/.png, python.log.
if has build || has tests || has bench; then
  log "build"
  { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMXQ_DEPS_DIR="$PWD/.deps" &&
    cmake --build build -j16; } >"$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 1; }
  echo "built: $(ls build/tools/mxq build/tests/cpp/mxq_*_tests 2>/dev/null | xargs)"
  build/tools/mxq info 2>&1 || true
  # Registers / shared memory / spills of every kernel, from the compiler's own report.
  for f in src/kernels/*.cu; do
    nvcc -std=c++17 -Iinclude -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
      -DMXQ_CUDA_ARCHS='"sm_90a"' -Xptxas=-v -c "$f" -o /dev/null 2>&1 | c++filt
  done >>"$OUT/build.log"
fi

if has tests; then
  log "gpu tests"
  build/tests/cpp/mxq_gpu_tests --gtest_brief=1 ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} 2>&1 |
    tee "$OUT/tests.log" | tail -40 || status=1
  build/tests/cpp/mxq_cpu_tests --gtest_brief=1 2>&1 | tee -a "$OUT/tests.log" | tail -3 || status=1
  build/tools/mxq demo --shape 4096x4096 2>&1 | tee -a "$OUT/tests.log" | tail -25 || status=1
fi

if has sanitize; then
  log "compute-sanitizer"
  compute-sanitizer --tool memcheck build/tests/cpp/mxq_gpu_tests --gtest_brief=1 \
    --gtest_filter="${SANITIZE_FILTER:-*Small*:*Group*:*Malformed*}" 2>&1 | tail -15 | tee -a "$OUT/tests.log"
fi

if has bench; then
  log "bench"
  build/tools/mxq bench --json "$OUT/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -60 || status=1
  python3 benchmarks/plot.py "$OUT/bench.json" -o "$OUT/bench.png" >/dev/null 2>&1 || echo "plot: failed"
fi

if has python; then
  log "python"
  python3 -m pip install --no-build-isolation --no-deps -q . >"$OUT/python.log" 2>&1 ||
    { tail -40 "$OUT/python.log"; status=1; }
  # xdist workers: a test that crashes its process is reported as failed instead of ending the run.
  (cd /tmp && python3 -X faulthandler -m pytest -n 8 -q -rfEs -p no:cacheprovider "$OLDPWD/tests/python" 2>&1) |
    tee -a "$OUT/python.log" | tail -40 || status=1
fi
exit $status
