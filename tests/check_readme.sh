#!/bin/sh
# check_readme.sh: fails unless README.md's test command appears verbatim in .ci/run, and unless
# README.md's examples hold what a reader following it has:
# - a command line in a sh block calls `./build/mtproxy` (what the run command builds), not a bare
#   `mtproxy`, which is not on PATH then (blocks that install it: cmake --install, opkg, docker);
# - an `mtproxy-update-config -p PIDFILE` example sits with a proxy that writes it (`pidfile`);
# - the first `generate-secret` shown is the FakeTLS (`--tls`) kind;
# - no claim that /stats carries no secret (it carries the links on loopback or with the token).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
readme=$root/README.md
cmd=$(grep -A30 'Build and run all the tests' "$readme" | sed -n '/^apt-get/p' | head -1)
[ -n "$cmd" ] || { echo "README.md: no test command found" >&2; exit 1; }
grep -qxF "$cmd" "$root/.ci/run" || { echo ".ci/run does not run the README test command: $cmd" >&2; exit 1; }
echo "README test command is in .ci/run"

status=0
# One line per sh-block line: "BLOCK_NO<TAB>LINE_NO<TAB>text".
blocks=$(awk '/^```sh/ { inb = 1; n++; next } /^```/ { inb = 0; next }
              inb { printf "%d\t%d\t%s\n", n, NR, $0 }' "$readme")
installs=$(printf '%s\n' "$blocks" | grep -E 'cmake --install|opkg install|docker (build|run)' |
    cut -f1 | sort -u)
bad=$(printf '%s\n' "$blocks" | grep -E "$(printf '^[0-9]+\t[0-9]+\t')(mtproxy |.*\\\$\\(mtproxy )" || true)
printf '%s\n' "$bad" | while IFS="$(printf '\t')" read -r b n text; do
    [ -n "$b" ] || continue
    printf '%s\n' "$installs" | grep -qx "$b" && continue
    echo "README.md:$n: calls mtproxy, not on PATH after the run command (./build/mtproxy): $text" >&2
    echo x
done | grep x >/dev/null && status=1
printf '%s\n' "$blocks" | grep -E 'mtproxy-update-config .*-p ' | cut -f1 | sort -u | while read -r b; do
    printf '%s\n' "$blocks" | awk -F'\t' -v b="$b" '$1 == b' | grep -q 'pidfile' && continue
    echo "README.md: mtproxy-update-config -p PIDFILE without a proxy that writes it (pidfile)" >&2
    echo x
done | grep x >/dev/null && status=1
first=$(grep -m1 'generate-secret' "$readme" | grep -v '^[^.`]*$' || grep -m1 'generate-secret' "$readme")
case "$first" in
*--tls*) ;;
*) echo "README.md: the first generate-secret shown is not the FakeTLS one: $first" >&2; status=1 ;;
esac
if grep -n 'No secret is ever in' "$readme" >&2; then
    echo "README.md: /stats carries the links (secrets) on loopback or with metrics-token" >&2
    status=1
fi
[ $status = 0 ] && echo "README examples: ./build/mtproxy, pidfile, ee first, /stats secrets: ok"
exit $status
