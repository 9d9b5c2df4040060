#!/usr/bin/env bash
# Format and lint checks (CI runs them through scripts/test.sh):
#   clang-format --dry-run --Werror over the C++/CUDA sources (include src tests examples torch_ext: *.h *.cpp
#   *.cu *.cuh; style in .clang-format), ruff check and ruff format --check over the Python files in python/,
#   tests, benchmarks and examples (settings in pyproject.toml).
#
#   scripts/lint.sh           check; exit 1 on any finding
#   scripts/lint.sh --fix     rewrite the files in place (clang-format -i, ruff format, ruff check --fix)
#
# clang-format comes from scripts/setup.sh (Debian's package); ruff from the venv scripts/test.sh makes
# ($MXQ_VENV, default .venv), else from PATH (pip install ruff).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
fix=0
case ${1:-} in
  --fix) fix=1 ;;
  "") ;;
  *) echo "usage: scripts/lint.sh [--fix]"; exit 2 ;;
esac

VENV=${MXQ_VENV:-$PWD/.venv}
RUFF=$(command -v ruff || true)
[ -x "$VENV/bin/ruff" ] && RUFF=$VENV/bin/ruff
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
missing=0
command -v "$CLANG_FORMAT" >/dev/null || { echo "lint: clang-format not found (scripts/setup.sh installs it)"; missing=1; }
[ -n "$RUFF" ] || { echo "lint: ruff not found (pip install ruff, or run scripts/test.sh lint)"; missing=1; }
[ $missing = 0 ] || exit 1

CXX_DIRS=(include src tests examples torch_ext)
PY_DIRS=(python tests benchmarks examples)
# The project's own files: those git knows (tracked, or new and not ignored) in the project's folders, so build
# trees and virtual environments (ignored, and outside these folders wherever a user makes them) are never linted.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  exists() { while read -r f; do [ -f "$f" ] && echo "$f"; done; }
  mapfile -t cxx < <(git ls-files -co --exclude-standard -- "${CXX_DIRS[@]}" | grep -E '\.(h|cpp|cu|cuh)$' | exists)
  mapfile -t py < <(git ls-files -co --exclude-standard -- "${PY_DIRS[@]}" | grep -E '\.py$' | exists)
else
  mapfile -t cxx < <(find "${CXX_DIRS[@]}" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) | sort)
  mapfile -t py < <(find "${PY_DIRS[@]}" -type f -name '*.py' | sort)
fi

status=0
if [ $fix = 1 ]; then
  "$CLANG_FORMAT" -i "${cxx[@]}"
  "$RUFF" check --fix "${py[@]}" || status=1
  "$RUFF" format "${py[@]}" || status=1
  exit $status
fi

echo "lint: $("$CLANG_FORMAT" --version | head -1) over ${#cxx[@]} C++/CUDA files"
out=$("$CLANG_FORMAT" --dry-run --Werror "${cxx[@]}" 2>&1) || status=1
if [ -n "$out" ]; then
  printf '%s\n' "$out" | head -60
  echo "clang-format: $(printf '%s\n' "$out" | grep -c ': error: ') findings in" \
    "$(printf '%s\n' "$out" | grep ': error: ' | cut -d: -f1 | sort -u | wc -l) files" \
    "(scripts/lint.sh --fix rewrites them)"
fi
echo "lint: $("$RUFF" --version) over ${#py[@]} Python files"
"$RUFF" check "${py[@]}" || status=1
"$RUFF" format --check "${py[@]}" || status=1
if [ $status = 0 ]; then echo "lint: clean"; else echo "lint: FAILED"; fi
exit $status
