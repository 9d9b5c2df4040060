#!/usr/bin/env bash
# One call on the GPU machine: configure and build everything once (core, C++ tests, the C++ example, fuzz driver and
# the torch extension against the machine's torch), then the steps asked for, each logged to $OUT.
# Usage: scripts/device.sh [build] [tests] [fuzz] [python] [bench] [eager] [moestep] [linearstep] [train] [torchtitan]
#        [sanitize] [profile]
#        (default: build tests fuzz python bench eager train)
# Environment: FUZZ_CASES (10000), FUZZ_MAX_DIM (8192), GTEST_FILTER, BENCH_ARGS (benchmarks/bench.py options),
#              TRAIN_ARGS, TITAN_ARGS, PYTEST_ARGS (the python step's test selection), SANITIZE_* (sanitize.sh),
#              PROFILE_ARGS, PROFILE_KERNEL, PROFILE_CACHE (the profile step), MOE_ARGS (e.g. --recipe fp8_blockwise).
# Dependencies the device cannot download (GoogleTest sources, CUTLASS's headers from scripts/fetch_cutlass.sh) travel
# in .deps/, Python wheels (the torchtitan step's torchtitan 0.3.0 and what its model code imports) in .whl/
# (docs/development.md).
set -uo pipefail
OUT=${OUT:-$PWD/device-out}
BUILD=${BUILD:-/tmp/mxq-build}
mkdir -p "$OUT"
steps=${*:-build tests fuzz python bench eager train}
has() { [[ " $steps " == *" $1 "* ]]; }
log() { printf '\n==== %s  [%s]\n' "$1" "$(date +%T)"; }
status=0
export MXQ_COMMIT=${MXQ_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}

log "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv,noheader
nvcc --version | tail -2

if has build; then
  log "build"
  # sm_90a only: the H200 runs nothing else, and CI compiles sm_100a too.
  { cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMXQ_DEPS_DIR="$PWD/.deps" -DMXQ_BUILD_TORCH=ON \
      -DMXQ_GPU_ARCHS=90a \
      -DPython_EXECUTABLE="$(command -v python3)" &&
    cmake --build "$BUILD" -j16; } >"$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 1; }
  echo "built: $(ls "$BUILD"/examples/cpp/mxq_example "$BUILD"/tests/cpp/mxq_* "$BUILD"/torch_ext/libmxq_torch*.so \
    2>/dev/null | xargs)"
  # Registers / shared memory / spills of every kernel, from the compiler's own report.
  for f in src/kernels/*.cu; do
    nvcc -std=c++17 -Iinclude -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
      -DMXQ_CUDA_ARCHS='"sm_90a"' -Xptxas=-v -c "$f" -o /dev/null 2>&1 | c++filt
  done >>"$OUT/build.log"
  grep -c "0 bytes spill stores, 0 bytes spill loads" "$OUT/build.log" | xargs echo "kernels without spills:"
  grep "bytes spill" "$OUT/build.log" | grep -v " 0 bytes spill stores, 0 bytes spill loads" | head -5
fi

if has tests; then
  log "gpu tests"
  "$BUILD"/tests/cpp/mxq_gpu_tests --gtest_brief=1 ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} 2>&1 |
    tee "$OUT/tests.log" | tail -30 || status=1
  "$BUILD"/tests/cpp/mxq_cpu_tests --gtest_brief=1 2>&1 | tee -a "$OUT/tests.log" | tail -3 || status=1
  # The downstream example: mxq::quantize on the GPU against the CPU reference, byte for byte.
  "$BUILD"/examples/cpp/mxq_example 4096 4096 2>&1 | tee -a "$OUT/tests.log" | tail -10 || status=1
fi

if has fuzz; then
  log "fuzz"
  "$BUILD"/tests/cpp/mxq_fuzz --cases "${FUZZ_CASES:-10000}" --max-dim "${FUZZ_MAX_DIM:-8192}" 2>&1 |
    tee "$OUT/fuzz.log" | tail -8 || status=1
fi

if has sanitize; then
  log "compute-sanitizer"
  scripts/sanitize.sh "$BUILD" 2>&1 | tee "$OUT/sanitize.log" || status=1
fi

# The Python package from the build tree: the extension built above, the sources in python/.
export MXQ_TORCH_LIBRARY
MXQ_TORCH_LIBRARY=$(ls "$BUILD"/torch_ext/libmxq_torch*.so 2>/dev/null | head -1)
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"

# torchao 0.18 (the peer of the bench sets' torchao rows, --linear-step's Float8BlockwiseLinear and the FP8 blockwise
# tests' byte comparisons), from a carried wheel (docs/development.md); without it those rows and tests skip.
if ls .whl/torchao-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/torchao \
    .whl/torchao-*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/torchao"
fi

if has python; then
  log "python"
  # xdist workers: a test that crashes its process is reported as failed instead of ending the run.
  (cd /tmp && python3 -X faulthandler -m pytest -n 8 -q -rfEs -p no:cacheprovider ${PYTEST_ARGS:-"$OLDPWD/tests/python"} 2>&1) |
    tee "$OUT/python.log" | tail -25 || status=1
fi

if has bench; then
  log "bench"
  python3 benchmarks/bench.py --json "$OUT/bench.json" --plot "$OUT/bench.png" ${BENCH_ARGS:-} 2>&1 |
    tee "$OUT/bench.log" | tail -70 || status=1
fi

if has eager; then
  log "eager"
  python3 benchmarks/bench.py --eager --json "$OUT/eager.json" 2>&1 | tee "$OUT/eager.log" | tail -30 || status=1
fi

if has moestep; then
  log "moe step"
  python3 benchmarks/bench.py --moe-step --json "$OUT/moe_step.json" ${MOE_ARGS:-} 2>&1 | tee "$OUT/moe_step.log" | tail -30 || status=1
fi

if has linearstep; then
  log "linear step"
  python3 benchmarks/bench.py --linear-step --json "$OUT/linear_step.json" 2>&1 | tee "$OUT/linear_step.log" |
    tail -30 || status=1
fi

if has profile; then
  log "profile"
  # ncu warp sampling per SASS instruction of one bench case, summed over 5 launches and cut into phases
  # (benchmarks/sass_profile.py). PROFILE_ARGS: the case (benchmarks/bench.py options); PROFILE_KERNEL: the kernel
  # (a regex for ncu -k; --launch-skip counts only the launches it matches); PROFILE_CACHE: none (caches as a run of
  # calls leaves them) or all (flushed before each launch, ncu's default: instruction and constant fetches start cold).
  ncu --section SourceCounters --warp-sampling-interval 0 --clock-control none --cache-control "${PROFILE_CACHE:-none}" \
    --launch-skip 100 --launch-count 5 -k "regex:${PROFILE_KERNEL:-quantize_tile(128|64)_kernel}" -f -o "$OUT/profile" \
    python3 benchmarks/bench.py ${PROFILE_ARGS:---shapes 512x4096 --ops fused} --replays 30 --no-verify \
    >"$OUT/profile.log" 2>&1 || { tail -5 "$OUT/profile.log"; status=1; }
  ncu --import "$OUT/profile.ncu-rep" --page source --csv --print-source sass >"$OUT/profile.csv" 2>>"$OUT/profile.log" &&
    python3 benchmarks/sass_profile.py "$OUT/profile.csv" | tee "$OUT/profile.txt" || status=1
fi

if has train; then
  log "train"
  python3 examples/train_moe.py --device cuda --out-dir "$OUT" ${TRAIN_ARGS:-} 2>&1 | tee "$OUT/train.log" |
    tail -25 || status=1
fi
if has torchtitan; then
  log "torchtitan"
  # torchtitan 0.3.0 and what its model code imports, from the carried wheels (the pins of scripts/test.sh; spmd_types
  # is the version torchtitan 0.3.0's metadata requires; typeguard needs typing_extensions >= 4.14). On the device's
  # torch 2.11 the example stands in for DataParallelMeshDims and swaps in causal SDPA (its docstring says why).
  titan_wheels=()
  for w in torchtitan-0.3.0 spmd_types-0.2.3 tyro-1.0.17 docstring_parser-0.18.0 dill-0.4.1 tqdm-4.70.1 \
    typeguard-4.6.1 typing_extensions-4.16.0; do titan_wheels+=(".whl/$w-py3-none-any.whl"); done
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "${titan_wheels[@]}" &&
    PYTHONPATH="/tmp/site:$PYTHONPATH" python3 examples/train_torchtitan.py --device cuda --out-dir "$OUT" \
      ${TITAN_ARGS:-} 2>&1 | tee "$OUT/torchtitan.log" | tail -40 || status=1
fi
exit $status
