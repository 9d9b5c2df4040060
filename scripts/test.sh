#!/usr/bin/env bash
# The tests, as README.md's "Run the tests" documents and .ci/run runs them (run scripts/setup.sh once first).
#
#   scripts/test.sh [cpp] [python] [lint]        (default: all three, in this order)
#
#   cpp     scripts/fetch_cutlass.sh (with nvcc), cmake --preset release, build everything (the CUDA kernels too when nvcc is found), ctest --preset
#           release: the CPU suites run, the GPU suites skip without a GPU (counted by reason, not listed)
#   python  a virtual environment ($MXQ_VENV, default .venv) with torch from PyPI, the build requirements and
#           torchtitan's model code, pip install --no-build-isolation ., pytest tests/python (CUDA tests skip without
#           a CUDA device; counted by reason)
#   lint    scripts/lint.sh: clang-format over the C++/CUDA sources, ruff over the Python
#
# Every phase runs even when an earlier one failed; the exit status is non-zero when any failed. Each phase's
# time is printed, and a summary at the end. MXQ_REQUIRE_CUDA=1 (CI sets it) fails the cpp and python phases
# when the CUDA sources were not compiled.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
VENV=${MXQ_VENV:-$ROOT/.venv}
# Python packages for the python and lint phases (README.md, "Python package"; numpy only keeps torch from
# warning that it is missing). ruff is pinned: its formatter's output is part of the check.
RUFF=ruff==0.17.6
PY_PACKAGES=(torch numpy scikit-build-core cmake ninja pytest "$RUFF")
# TorchTitan's model code for tests/python/test_torchtitan.py, pinned: torchtitan 0.3.0 and exactly what its model code
# imports besides torch, without their own dependencies (torchtitan's full list pulls in datasets, tensorboard, ...);
# spmd_types at the version torchtitan 0.3.0's metadata requires.
TORCHTITAN=(torchtitan==0.3.0 spmd_types==0.2.3 tyro==1.0.17 docstring_parser==0.18.0 dill==0.4.1 tqdm==4.70.1
  typeguard==4.6.1)
phases=("$@")
[ ${#phases[@]} -gt 0 ] || phases=(cpp python lint)
for p in "${phases[@]}"; do
  case $p in cpp | python | lint) ;; *) echo "test.sh: unknown phase '$p' (cpp, python, lint)"; exit 2 ;; esac
done

banner() { printf '\n==== %s  [%s]\n' "$1" "$(date +%T)"; }

# CUTLASS's headers for the CUDA build (grouped_gemm; docs/development.md, "CUTLASS"), where nvcc can be found:
# scripts/fetch_cutlass.sh is idempotent, a version check when they are already in .deps.
cutlass() {
  if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then scripts/fetch_cutlass.sh; fi
}

# The venv, made on first use and reused after, with the packages given installed (pip skips those present).
venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    echo "python: creating $VENV"
    python3 -m venv "$VENV" || return 1
    echo '*' >"$VENV/.gitignore"  # keep it out of git status, as newer Pythons' venv does
  fi
  # shellcheck disable=SC1091
  . "$VENV/bin/activate"
  echo "python: pip install $*"
  python -m pip install -q --disable-pip-version-check "$@"
}

# Why tests skipped, from a JUnit report (ctest --output-junit, pytest --junit-xml): a line per reason with its
# count. The reason: the message GTEST_SKIP() printed (the line after gtest's "Skipped"), else a test's own
# "skipped: ..." line (fuzz.smoke), else the report's skip message (pytest's reason; ctest's skip rule).
skip_reasons() {  # skip_reasons PHASE REPORT
  [ -f "$2" ] || { echo "$1: no report $2, so no skip reasons"; return 0; }
  python3 - "$1" "$2" <<'EOF'
import collections, re, sys, xml.etree.ElementTree as ET
phase, path = sys.argv[1:]
reasons = collections.Counter()
for case in ET.parse(path).iter("testcase"):
    skipped = case.find("skipped")
    if skipped is None:
        continue
    out = case.findtext("system-out") or ""
    found = re.search(r": Skipped\n(.+)", out) or re.search(r"skipped: (.+)", out)
    reasons[(found.group(1) if found else skipped.get("message", "")).strip() or "no reason given"] += 1
for reason, count in reasons.most_common():
    print(f"{phase}: {count} skipped: {reason}")
EOF
}

# ctest lists every test; without a GPU most of them are GPU tests that skip. Passed and skipped tests are
# counted instead of listed (ctest's "did not run" list of the skipped ones too), and the skipped ones grouped by
# reason; failures, their output and the rest of ctest's summary are printed as ctest writes them.
phase_cpp() {
  cutlass || return 1
  cmake --preset release && cmake --build --preset release || return 1
  if [ "${MXQ_REQUIRE_CUDA:-0}" = 1 ] && [ ! -x build/tests/cpp/mxq_gpu_tests ]; then
    echo "cpp: the CUDA sources were not compiled (no nvcc found?) and MXQ_REQUIRE_CUDA=1"; return 1
  fi
  local log=build/ctest.log junit=$ROOT/build/ctest-junit.xml rc
  rm -f "$junit"
  ctest --preset release --output-junit "$junit" 2>&1 | tee "$log" |
    grep -vE '^ +Start +[0-9]+: |Test +#[0-9]+: .*( Passed|\*\*\*Skipped) +[0-9.]+ sec$|^'$'\t''[0-9]+ - .*\(Skipped\)$|^The following tests did not run:$'
  rc=${PIPESTATUS[0]}
  echo "ctest: $(grep -cE 'Test +#[0-9]+: .* Passed ' "$log") passed, $(grep -cE 'Test +#[0-9]+: .*\*\*\*Skipped ' "$log")" \
    "skipped (full log: $log)"
  skip_reasons ctest "$junit"
  return "$rc"
}

phase_python() {
  local t=$SECONDS
  venv "${PY_PACKAGES[@]}" || return 1
  echo "python: pip install --no-deps ${TORCHTITAN[*]}"
  python -m pip install -q --disable-pip-version-check --no-deps "${TORCHTITAN[@]}" || return 1
  python -c 'import torch; print(f"python: torch {torch.__version__}, CUDA device: {torch.cuda.is_available()}")'
  cutlass || return 1
  echo "python: venv ready in $((SECONDS - t)) s; pip install --no-build-isolation ."
  t=$SECONDS
  python -m pip install -q --disable-pip-version-check --no-build-isolation . || return 1
  echo "python: mxq built and installed in $((SECONDS - t)) s"
  if [ "${MXQ_REQUIRE_CUDA:-0}" = 1 ]; then
    # The extension's CUDA half compiles only with nvcc and a CUDA-enabled torch (PyPI's is).
    python -c 'import mxq, sys; sys.exit(0 if mxq.has_cuda_kernels() else 1)' ||
      { echo "python: the extension was built without its CUDA impls and MXQ_REQUIRE_CUDA=1"; return 1; }
  fi
  local rc junit=$ROOT/build/pytest-junit.xml
  rm -f "$junit"
  python -m pytest -q -rfE -p no:cacheprovider --junit-xml="$junit" tests/python
  rc=$?
  skip_reasons pytest "$junit"
  if [ "$rc" = 5 ]; then echo "pytest: no tests were collected (exit 5): that is a failure here"; fi
  return "$rc"
}

phase_lint() {
  venv "$RUFF" || return 1
  scripts/lint.sh
}

declare -A took result
status=0
for p in "${phases[@]}"; do
  banner "$p"
  t=$SECONDS
  if "phase_$p"; then result[$p]=ok; else result[$p]=FAILED; status=1; fi
  took[$p]=$((SECONDS - t))
  echo "---- $p: ${result[$p]} in ${took[$p]} s"
done
banner "summary"
for p in "${phases[@]}"; do printf '  %-7s %-7s %5d s\n' "$p" "${result[$p]}" "${took[$p]}"; done
exit $status
