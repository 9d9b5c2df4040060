#!/usr/bin/env bash
# README.md's two commands, run as a newcomer runs them: "Try it" (the venv in .venv, the package, the tiny training
# run), then "Run the tests" (scripts/setup.sh && scripts/test.sh). .ci/run runs this on a clean clone, so a README
# whose commands fail on a fresh machine fails CI.
#
#   scripts/readme.sh            both blocks, in the README's order
#   scripts/readme.sh --print    print them instead
#
# A block is the fenced ```bash block after a line `<!-- readme.sh: NAME -->` in README.md; each runs in a fresh
# bash with -euo pipefail from the repository root, as a user would paste it.
set -euo pipefail
cd "$(dirname "$0")/.."
block() {  # block NAME: the commands of README.md's block NAME
  awk -v mark="<!-- readme.sh: $1 -->" '
    $0 == mark { found = 1; next }
    found && /^```bash$/ { inside = 1; next }
    inside && /^```$/ { exit }
    inside { print }' README.md
}
status=0
for name in try-it tests; do
  commands=$(block "$name")
  [ -n "$commands" ] || { echo "readme.sh: README.md has no block marked '<!-- readme.sh: $name -->'"; exit 2; }
  if [ "${1:-}" = --print ]; then printf '# %s\n%s\n' "$name" "$commands"; continue; fi
  printf '\n==== README.md, %s:\n%s\n' "$name" "$commands"
  t=$SECONDS
  bash -euo pipefail -c "$commands" || status=$?
  echo "==== README.md, $name: $([ $status = 0 ] && echo passed || echo "FAILED (exit $status)") in $((SECONDS - t)) s"
  [ $status = 0 ] || exit $status
done
