#!/bin/sh
# test-uci-gen.sh: runs the OpenWrt UCI -> mtproxy.conf generator on sample configs (ctest).
#
# Good samples (the shipped files/mtproxy.config and samples/good-*.uci) must generate a config
# holding every line of their .expect file and passing `mtproxy --check-config`; bad samples
# (samples/bad-*.uci) must be rejected, by the generator or by check-config, with the text of
# their .expect file in the messages. Env: MTPROXY_BIN (required), MTPROXY_WRAPPER (emulator
# command for cross builds, may be empty).
# shellcheck source-path=SCRIPTDIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
files=$here/../files
: "${MTPROXY_BIN:?MTPROXY_BIN must name the mtproxy binary}"
wrapper=${MTPROXY_WRAPPER:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/mtproxy-uci-test.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT INT TERM
passed=0
failed=0

pass() {
    passed=$((passed + 1))
    echo "ok: $1"
}

fail() {
    failed=$((failed + 1))
    echo "FAIL: $1"
    shift
    for f in "$@"; do
        [ -f "$f" ] && sed 's/^/    | /' "$f"
    done
}

# gen SAMPLE OUT ERR: runs the generator on SAMPLE in a subshell; prints "enabled" if it is.
gen() {
    rm -rf "${work:?}/etc"
    mkdir -p "$work/etc"
    cp "$1" "$work/etc/mtproxy"
    (
        UCI_CONFIG_DIR=$work/etc
        # shellcheck source=uci-shim.sh
        . "$here/uci-shim.sh"
        # shellcheck source=../files/mtproxy-uci-gen.sh
        . "$files/mtproxy-uci-gen.sh"
        config_load mtproxy
        mtproxy_uci_gen main >"$2" 2>"$3" || exit 1
        if mtproxy_uci_enabled main; then echo enabled >"$work/enabled"; else rm -f "$work/enabled"; fi
    )
}

check_config() {
    # shellcheck disable=SC2086 # the wrapper is a command with arguments
    # The router's paths (/etc/mtproxy for the state file) do not exist here: --check-config
    # checks that the state file's directory exists, so it is pointed into the work dir.
    $wrapper "$MTPROXY_BIN" --check-config --config "$1" --state-file "$work/check.state" \
        >"$2" 2>&1
}

good() {
    name=$1 sample=$2 expect=$3 want_enabled=$4
    out=$work/$name.conf
    if ! gen "$sample" "$out" "$work/$name.err"; then
        fail "$name: the generator rejected a good config" "$work/$name.err"
        return
    fi
    got_enabled=no
    [ -f "$work/enabled" ] && got_enabled=yes
    if [ "$got_enabled" != "$want_enabled" ]; then
        fail "$name: enabled is $got_enabled, expected $want_enabled"
        return
    fi
    missing=0
    while IFS= read -r line; do
        if ! grep -qxF -- "$line" "$out"; then
            echo "    missing line: $line"
            missing=1
        fi
    done <"$expect"
    if [ "$missing" -ne 0 ]; then
        fail "$name: generated config lacks expected lines" "$out"
        return
    fi
    if ! check_config "$out" "$work/$name.check"; then
        fail "$name: mtproxy --check-config rejected the generated config" "$out" \
            "$work/$name.check"
        return
    fi
    pass "$name"
}

bad() {
    name=$1 sample=$2 expect=$3
    out=$work/$name.conf msgs=$work/$name.msgs
    if gen "$sample" "$out" "$msgs"; then
        if check_config "$out" "$work/$name.check"; then
            fail "$name: a bad config was accepted" "$out" "$work/$name.check"
            return
        fi
        cat "$work/$name.check" >>"$msgs"
    fi
    while IFS= read -r line; do
        if ! grep -qF -- "$line" "$msgs"; then
            fail "$name: rejected, but without the message '$line'" "$msgs"
            return
        fi
    done <"$expect"
    pass "$name (rejected: $(head -n 1 "$msgs"))"
}

good default "$files/mtproxy.config" "$here/samples/default.expect" no
for s in "$here"/samples/good-*.uci; do
    n=$(basename "$s" .uci)
    good "$n" "$s" "$here/samples/$n.expect" yes
done
for s in "$here"/samples/bad-*.uci; do
    n=$(basename "$s" .uci)
    bad "$n" "$s" "$here/samples/$n.expect"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
