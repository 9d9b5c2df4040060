#!/usr/bin/env bash
# Puts CUTLASS 4.2.0's C++ headers (include/cute, include/cutlass) under $MXQ_DEPS_DIR/cutlass/include (default
# .deps/cutlass/include, git-ignored), where the CUDA build looks for them (docs/development.md, "CUTLASS"). The
# headers come from PyPI's nvidia-cutlass wheel, which carries CUTLASS's include tree. Idempotent: a tree of the
# pinned version is kept; another version is replaced. The GPU machine cannot download: run this here and carry .deps.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=4.2.0
DEST=${MXQ_DEPS_DIR:-$PWD/.deps}/cutlass
STAMP=$DEST/VERSION

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$VERSION" ] && [ -f "$DEST/include/cutlass/version.h" ]; then
  echo "fetch_cutlass: CUTLASS $VERSION already in $DEST"
  exit 0
fi

# A Python with pip: $PYTHON, else python3; Debian's python3 may lack pip, then a throwaway venv has it.
PY=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$PY" -m pip --version >/dev/null 2>&1; then
  "$PY" -m venv "$tmp/venv"
  PY=$tmp/venv/bin/python
fi
"$PY" -m pip download -q --disable-pip-version-check --no-deps "nvidia-cutlass==$VERSION" -d "$tmp"

rm -rf "$DEST"
mkdir -p "$DEST"
# The wheel's include tree is cutlass_library/source/include/{cute,cutlass}.
"$PY" - "$tmp" "$DEST" <<'PY'
import glob, os, sys, zipfile
tmp, dest = sys.argv[1:]
(wheel,) = glob.glob(os.path.join(tmp, "nvidia_cutlass-*.whl"))
prefix = "cutlass_library/source/include/"
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
    for name in names:
        target = os.path.join(dest, "include", name[len(prefix):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(name) as src, open(target, "wb") as out:
            out.write(src.read())
print(f"fetch_cutlass: {len(names)} headers from {os.path.basename(wheel)}")
PY

version=$(sed -n 's/^#define CUTLASS_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$DEST/include/cutlass/version.h" | paste -sd.)
if [ "$version" != "$VERSION" ]; then
  echo "fetch_cutlass: expected CUTLASS $VERSION, the wheel's version.h says '$version'" >&2
  exit 1
fi
echo "$VERSION" >"$STAMP"
echo "fetch_cutlass: CUTLASS $VERSION in $DEST"
