#!/bin/sh
# check_doc_secrets.sh [EMULATOR...] MTPROXY: every secret key shown in the documentation is
# refused at start.
# Scans the user-facing documents (README, shipped config, packaging docs and shipped files,
# Dockerfile, docs/) for 32-hex-digit keys (plain, or after a dd/ee prefix), and runs
# `mtproxy --check-config` with each: it must fail and name the documentation. A freshly generated
# secret must pass the same check (so the refusal is about the key, not the command line).
set -u
# Everything before the binary is its emulator (cross builds: qemu-user and its arguments).
bin=$*
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
fail=0
docs=$(find README.md mtproxy.conf Dockerfile docs packaging \
    \( -path 'packaging/*/test' -o -path 'packaging/test' -o -path 'packaging/cross' \) -prune -o \
    -type f \( -name '*.md' -o -name '*.conf' -o -name '*.config' -o -name '*.service' \
    -o -name 'Dockerfile' -o -name '*.init' -o -name '*.json' -o -name '*.js' -o -name 'README*' \) \
    -print 2>/dev/null)
run() {
    # Loopback only, nothing resolved: mask off, no built-in DCs.
    # shellcheck disable=SC2086 # the emulator and binary, split on purpose
    $bin --check-config --listen 127.0.0.1:1 --dc-builtin off --dc '2 127.0.0.1:1' \
        --mask off --secret "doc:$1" 2>&1
}
# shellcheck disable=SC2086
good=$($bin generate-secret)
if ! out=$(run "$good"); then
    echo "FAIL: a generated secret is refused: $out"
    exit 1
fi
# Keys: 32 hex digits standing alone or after dd/ee (an ee secret's domain hex follows).
keys=$(grep -ohiE '(^|[^0-9a-f])(dd|ee)?[0-9a-f]{32}' $docs 2>/dev/null |
    sed -E 's/^[^0-9a-fA-F]//; s/^(dd|ee|DD|EE)([0-9a-fA-F]{32})$/\2/' |
    grep -oiE '[0-9a-f]{32}$' | tr 'A-F' 'a-f' | sort -u)
n=0
for k in $keys; do
    n=$((n + 1))
    if out=$(run "$k"); then
        echo "FAIL: documented key $k is accepted by mtproxy (add it to documented_keys in src/config/options.c)"
        fail=1
    elif ! printf '%s' "$out" | grep -q "example from mtproxy's documentation"; then
        echo "FAIL: documented key $k refused for another reason: $out"
        fail=1
    fi
done
# The key the README showed up to 0.1.0 stays refused even though no document shows it now.
if out=$(run "0123456789abcdef0123456789abcdef"); then
    echo "FAIL: the old README key is accepted"
    fail=1
fi
echo "documented keys checked: $n"
[ "$fail" = 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit "$fail"
