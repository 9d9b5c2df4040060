#!/usr/bin/env bash
# Compares the SASS of two builds of the kernels, function by function, for a refactor that must
# not change any kernel: scripts/sass_diff.sh BASE NEW [DROP], BASE and NEW each a libmxq.a (or any
# file cuobjdump reads). Per architecture, every kernel's body (instructions and encodings,
# addresses dropped) must be the same; a kernel whose name changed but whose body is identical is
# listed as renamed. DROP, a Python regular expression, is deleted from NEW's demangled names first
# (a template argument the change added: 'mxq::Mxfp8, '). Exit status 0 only when every body of
# BASE is in NEW and the other way round. Needs cuobjdump and
# nvdisasm on PATH (the CUDA toolkit's, or the nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm wheels).
set -euo pipefail
if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: $0 BASE_LIB NEW_LIB [DROP_REGEX]" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cuobjdump -sass "$1" >"$work/base.sass"
cuobjdump -sass "$2" >"$work/new.sass"
python3 - "$work/base.sass" "$work/new.sass" "${3:-}" <<'PY'
import collections, hashlib, re, subprocess, sys

def kernels(path):
    """{(arch, mangled name): [body hash, ...]} of one cuobjdump -sass listing."""
    out = collections.defaultdict(list)
    arch, name, body = None, None, []
    def close():
        if name is not None:
            out[(arch, name)].append(hashlib.sha256("\n".join(body).encode()).hexdigest())
    for line in open(path):
        s = line.strip()
        if s.startswith("arch = ") or s.startswith("member ") or s.startswith("Fatbin "):
            close(); name, body = None, []
            if s.startswith("arch = "): arch = s[7:]
        elif s.startswith("Function : "):
            close(); name, body = s[11:], []
        elif name is not None and s:
            # Addresses dropped, whitespace collapsed: cuobjdump pads its comment column to the longest
            # instruction of the object file, which other kernels in the same file change.
            body.append(re.sub(r"\s+", " ", re.sub(r"^/\*[0-9a-f]{4,}\*/\s*", "", s)))
    close()
    return out

def demangle(names):
    res = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return dict(zip(names, res.stdout.splitlines()))

def by_demangled(found, drop=""):
    """The same keyed by demangled name: an anonymous namespace's mangled name differs per build."""
    names = demangle(sorted({n for _, n in found}))
    out = collections.defaultdict(list)
    for (arch, name), hashes in found.items():
        out[(arch, re.sub(drop, "", names[name]) if drop else names[name])] += hashes
    return out

base = by_demangled(kernels(sys.argv[1]))
new = by_demangled(kernels(sys.argv[2]), sys.argv[3])
same = sum(1 for k in base if k in new and sorted(base[k]) == sorted(new[k]))
changed = [k for k in base if k in new and sorted(base[k]) != sorted(new[k])]
gone = {k: v for k, v in base.items() if k not in new}
added = {k: v for k, v in new.items() if k not in base}
# A kernel whose name changed and whose body did not: the same body under the one new name of its arch.
by_body = collections.defaultdict(list)
for (arch, name), hashes in added.items():
    by_body[(arch, tuple(sorted(hashes)))].append(name)
renamed, lost = [], []
for (arch, name), hashes in sorted(gone.items()):
    cands = by_body.get((arch, tuple(sorted(hashes))), [])
    if cands:
        renamed.append((arch, name, cands.pop(0)))
    else:
        lost.append((arch, name))
extra = [(arch, n) for (arch, _), names in by_body.items() for n in names]
print(f"kernels per architecture: base {collections.Counter(a for a, _ in base)}, "
      f"new {collections.Counter(a for a, _ in new)}")
print(f"identical under the same name: {same}")
print(f"identical under a new name: {len(renamed)}")
for arch, old, nw in renamed:
    print(f"  {arch}: {old}\n      -> {nw}")
for title, rows in (("DIFFERENT", changed), ("only in base", lost), ("only in new", extra)):
    print(f"{title}: {len(rows)}")
    for arch, n in rows:
        print(f"  {arch}: {n}")
sys.exit(0 if not (changed or lost or extra) else 1)
PY
