#!/usr/bin/env bash
# compute-sanitizer's four tools (memcheck, racecheck, initcheck, synccheck) over representative calls of every
# kernel, on a machine with a GPU (docs/development.md, "Fuzzing and sanitizers"):
#
#   scripts/sanitize.sh [BUILD_DIR]          (default: build; needs mxq_fuzz and mxq_gpu_tests built there)
#
# Two programs run under each tool:
# - the fuzz driver, SANITIZE_CASES random cases (default 200) up to SANITIZE_MAX_DIM (default 384) per axis:
#   every path (fused, rowwise, colwise, composed with its swizzle, dequantize in its three layouts, expert
#   weights, quantize_routed), bf16 / fp16 / fp32, both rules, dense and grouped with empty groups, tails and G up to 256,
#   ragged 32-multiple shapes, special values; each output byte compared with the reference;
# - the GPU tests of SANITIZE_FILTER: malformed offs with guard bands, every code against every scale,
#   streams and graph capture, the weight kernels' skipped axes, one special-value case per path and shape,
#   grouped G = 300 and 1024 (empty groups), quantize_routed (empty experts, scale specials, both tile heights,
#   fp32; index out of range and bad counts with guard bands; graph capture).
# Prints each tool's summary line and exits non-zero when any tool reports an error or a program fails.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BUILD=${1:-build}
CASES=${SANITIZE_CASES:-200}
MAX_DIM=${SANITIZE_MAX_DIM:-384}
SEED=${SANITIZE_SEED:-5}
FILTER=${SANITIZE_FILTER:-"*GpuMalformedOffs*:*GpuDequantizeAllPairs*:*GpuStreams*:*GpuGraph*:*GpuWeightAxes*:\
*GpuOps*special_rceil*:*GpuGrouped*special*:*GpuGrouped*empty_floor*:*GpuDequantize.*G64*:*GpuComposedToBlocked*:\
*GpuWeight.*boundary*:*GpuValidInput*:*GpuGoodOffs*:*GpuRoutedBadInput*:*GpuRouted*_rceil_empty_scaled*:\
*GpuRouted*fp32_floor_random*"}
fuzz=$BUILD/tests/cpp/mxq_fuzz
tests=$BUILD/tests/cpp/mxq_gpu_tests
for b in "$fuzz" "$tests"; do
  [ -x "$b" ] || { echo "sanitize.sh: $b not built (cmake --build $BUILD)"; exit 2; }
done
command -v compute-sanitizer >/dev/null || { echo "sanitize.sh: compute-sanitizer not on PATH"; exit 2; }

status=0
for tool in memcheck racecheck initcheck synccheck; do
  for prog in fuzz tests; do
    start=$SECONDS
    if [ $prog = fuzz ]; then
      cmd=("$fuzz" --cases "$CASES" --max-dim "$MAX_DIM" --seed "$SEED")
    else
      cmd=("$tests" --gtest_brief=1 --gtest_filter="$FILTER")
    fi
    log=$(compute-sanitizer --tool "$tool" --error-exitcode 99 "${cmd[@]}" 2>&1)
    rc=$?
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" <<<"$log" | tail -1)
    result=$(grep -E "^\[  PASSED  \]|^\[  FAILED  \]|passed, [0-9]+ failed" <<<"$log" | tail -1)
    printf '%-10s %-6s rc=%-3s %4ds  %s | %s\n' "$tool" "$prog" "$rc" $((SECONDS - start)) \
      "${summary:-no summary}" "${result:-}"
    if [ $rc -ne 0 ]; then
      status=1
      grep -E "=========" <<<"$log" | head -20
    fi
  done
done
[ $status -eq 0 ] && echo "sanitize.sh: all clean" || echo "sanitize.sh: FAILED"
exit $status
