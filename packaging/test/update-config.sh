#!/bin/sh
# update-config.sh: ctest: mtproxy-update-config against a loopback HTTP server (python3 -m
# http.server): files replaced atomically, SIGHUP only on a change, bad downloads change nothing;
# with curl and with wget (77 = skipped: no python3, or neither fetcher).
# Usage: update-config.sh SCRIPT WORKDIR
script=${1:?usage: update-config.sh SCRIPT WORKDIR}
work=${2:?}
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }
rm -rf "$work"
mkdir -p "$work/www" "$work/state"
cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }

# The server on a free loopback port (http.server prints it once bound).
python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$work/www" >server.out 2>server.err &
server=$!
# The "daemon": counts the SIGHUPs it gets.
sh -c 'trap "echo hup >>hups" HUP; while :; do sleep 0.05; done' &
daemon=$!
trap 'kill "$server" "$daemon" 2>/dev/null' EXIT
echo "$daemon" >daemon.pid
port=
i=0
while [ -z "$port" ] && [ $i -lt 100 ]; do
    port=$(sed -n 's/.*port \([0-9][0-9]*\).*/\1/p' server.out | head -n 1)
    i=$((i + 1))
    sleep 0.05
done
[ -n "$port" ] || fail "http.server did not start: $(cat server.err)"
url=http://127.0.0.1:$port
hups() { [ -f hups ] && wc -l <hups | tr -d ' ' || echo 0; }
inode() { stat -c %i "$1"; }
settle() { sleep 0.3; }

ran=0
for fetcher in curl wget; do
    command -v "$fetcher" >/dev/null 2>&1 || { echo "no $fetcher: not tested"; continue; }
    ran=$((ran + 1))
    rm -f hups state/*
    run() { MTPROXY_FETCH=$fetcher sh "$script" -d "$work/state" -p "$work/daemon.pid" -u "$url"; }
    head -c 128 /dev/urandom >www/getProxySecret
    printf '# force_probability 10 10\ndefault 2;\nproxy_for 2 127.0.0.2:8888;\n' >www/getProxyConfig

    # 1. first fetch: both files, one SIGHUP
    run || fail "$fetcher: first run failed"
    settle
    cmp -s www/getProxySecret state/proxy-secret || fail "$fetcher: secret not installed"
    cmp -s www/getProxyConfig state/proxy-multi.conf || fail "$fetcher: config not installed"
    [ "$(hups)" = 1 ] || fail "$fetcher: expected 1 SIGHUP, got $(hups)"
    before=$(inode state/proxy-multi.conf)

    # 2. unchanged: nothing replaced, no signal
    run || fail "$fetcher: second run failed"
    settle
    [ "$(hups)" = 1 ] || fail "$fetcher: SIGHUP without a change"
    [ "$(inode state/proxy-multi.conf)" = "$before" ] || fail "$fetcher: rewritten without a change"

    # 3. a new config: replaced by rename (a new inode, never written in place), one more SIGHUP
    printf 'default 2;\nproxy_for 2 127.0.0.3:8888;\nproxy_for -2 [::1]:8888;\n' >www/getProxyConfig
    run || fail "$fetcher: third run failed"
    settle
    cmp -s www/getProxyConfig state/proxy-multi.conf || fail "$fetcher: new config not installed"
    [ "$(inode state/proxy-multi.conf)" != "$before" ] || fail "$fetcher: replaced in place"
    [ "$(hups)" = 2 ] || fail "$fetcher: expected 2 SIGHUPs, got $(hups)"

    # 4. bad downloads keep the files and send nothing: an HTML page, a short secret, a 404
    good=$(cat state/proxy-multi.conf)
    printf '<html><body>blocked</body></html>\n' >www/getProxyConfig
    run && fail "$fetcher: an HTML page was accepted"
    printf 'proxy_for 2 127.0.0.3:8888;\nrm -rf /;\n' >www/getProxyConfig
    run && fail "$fetcher: a config with a foreign line was accepted"
    printf 'default 2;\nproxy_for 2 127.0.0.3:8888;\n' >www/getProxyConfig
    head -c 8 /dev/urandom >www/getProxySecret
    run && fail "$fetcher: an 8-byte secret was accepted"
    rm -f www/getProxySecret
    run && fail "$fetcher: a 404 was accepted"
    settle
    [ "$(cat state/proxy-multi.conf)" = "$good" ] || fail "$fetcher: a bad download changed the config"
    [ "$(hups)" = 2 ] || fail "$fetcher: SIGHUP after a bad download"
    leftover=$(find state -name '.*' -type f | wc -l | tr -d ' ')
    [ "$leftover" = 0 ] || fail "$fetcher: temporary files left behind"
    echo "ok: $fetcher"
done
[ $ran -gt 0 ] || { echo "neither curl nor wget: skipped"; exit 77; }
echo "ok: mtproxy-update-config"
