#!/bin/sh
# Lifecycle test for ctest: the SysV script's start/status/reload/restart/stop on a loopback config.
# Usage: sysv-lifecycle.sh INIT_SCRIPT MTPROXY_BIN WORKDIR
# The proxy listens on 127.0.0.1 only and knows only a loopback DC: nothing leaves the machine.
init=${1:?usage: sysv-lifecycle.sh INIT_SCRIPT MTPROXY_BIN WORKDIR}
bin=${2:?}
work=${3:?}
rm -rf "$work"
mkdir -p "$work"
port=$((20000 + $$ % 20000))
passed=0
failed=0

check() {
    name=$1
    shift
    if "$@"; then
        passed=$((passed + 1))
        echo "ok: $name"
    else
        failed=$((failed + 1))
        echo "FAIL: $name"
        [ -f "$work/mtproxy.log" ] && sed 's/^/    | /' "$work/mtproxy.log"
    fi
}

cat >"$work/good.conf" <<EOC
# No secret: the proxy generates one into STATEDIR/mtproxy.state.
listen = 127.0.0.1:$port
dc-builtin = off
dc = 2 127.0.0.1:9
log = $work/mtproxy.log
EOC
printf 'block-size = nope\n' >"$work/bad.conf"
cat >"$work/defaults" <<EOC
DAEMON=$bin
CONFIG=$work/good.conf
PIDFILE=$work/mtproxy.pid
STATEDIR=$work/state
RUN_AS=
STOP_TIMEOUT=10
EOC
export MTPROXY_DEFAULTS="$work/defaults"

run() { sh "$init" "$@"; }
status_is() {
    run status >/dev/null
    [ $? -eq "$1" ]
}
pid_of() { sed -n 1p "$work/mtproxy.pid"; }

check "status before start is 3" status_is 3
check "start" run start
check "status after start is 0" status_is 0
check "the secret was generated in STATEDIR" test -s "$work/state/mtproxy.state"
check "it logs to the configured file" grep -q "listening on 127.0.0.1:$port" "$work/mtproxy.log"
check "start again is a no-op" run start
pid1=$(pid_of)
check "reload sends SIGHUP" run reload
sleep 1
check "the proxy saw SIGHUP" grep -q "SIGHUP" "$work/mtproxy.log"
check "restart" run restart
pid2=$(pid_of)
check "restart made a new process" test -n "$pid2" -a "$pid1" != "$pid2"
check "the old process is gone" sh -c "! kill -0 $pid1 2>/dev/null"
check "stop" run stop
check "status after stop is 3" status_is 3
check "the process is gone" sh -c "! kill -0 $pid2 2>/dev/null"
check "the pidfile is gone" test ! -e "$work/mtproxy.pid"
check "stop when stopped is fine" run stop
sed -i "s|^CONFIG=.*|CONFIG=$work/bad.conf|" "$work/defaults"
run start >"$work/bad.out" 2>&1
check "start with a bad config exits 6" test $? -eq 6
check "and says where the error is" grep -q "bad.conf:1:" "$work/bad.out"
check "status after a failed start is 3" status_is 3

# Leave nothing running, whatever happened.
[ -f "$work/mtproxy.pid" ] && kill "$(pid_of)" 2>/dev/null
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
