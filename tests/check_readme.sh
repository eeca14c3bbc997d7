#!/bin/sh
# check_readme.sh: fails unless README.md's test command appears verbatim in .ci/run.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cmd=$(grep -A14 'Build and run all the tests' "$root/README.md" | sed -n '/^apt-get/p' | head -1)
[ -n "$cmd" ] || { echo "README.md: no test command found" >&2; exit 1; }
grep -qxF "$cmd" "$root/.ci/run" || { echo ".ci/run does not run the README test command: $cmd" >&2; exit 1; }
echo "README test command is in .ci/run"
