#!/usr/bin/env bash
# packaging/debian/nspawn.sh DEB TOOLS_DIR: the .deb under a booted systemd (systemd-nspawn --boot).
#
# DEB: the package packaging/debian/test.sh built (a WORKDIR holding mtproxy_*.deb will do; with
# none given, test.sh builds it in a fresh directory). TOOLS_DIR: a build's tests/tools (fake_dc,
# test_client; built on this Debian 12, they run in the tree).
#
# The tree: the debootstrapped Debian 12 of tests/fresh/run.sh (its cache is never changed) plus
# systemd, systemd-sysv and dbus installed from Debian's packages with apt in a chroot, cached in
# $MTPROXY_NSPAWN_CACHE (default /var/cache/mtproxy-ci/bookworm-systemd-KEY, KEY from the base
# tree's key and the packages added; made once per machine and key).
# Each run works on a copy: the package's dependencies are downloaded into its apt cache from the
# host side first (the container has no network but its own loopback), then the copy is booted:
#
#   unshare -n systemd-nspawn --register=no --keep-unit --private-network --console=passive --boot
#
# (this host has no systemd as PID 1: a plain --boot fails with "Failed to open system bus").
# Commands run inside through nsenter into the namespaces of the container's PID 1 (the child of
# the systemd-nspawn process). Checks, in order:
#   1. `apt-get install ./mtproxy_*.deb` inside; the postinst starts the unit (default config);
#   2. a DC table on a fake DC on the container's loopback, `systemctl restart mtproxy`: active,
#      runs as the system user mtproxy with the unit's sandboxing (no new privileges, seccomp, only
#      CAP_NET_BIND_SERVICE; `systemd-analyze security` exposure printed), the links file is
#      there, the generated secret is the one of the first start, a client is served to the fake
#      DC, the secret appears nowhere in the journal;
#   3. `systemctl reload` with a new secret: the new secret is served; with a broken config: the
#      reload fails, the unit stays active and the running config (the new secret) still serves;
#   4. `systemctl restart` keeps the generated secret; `systemctl stop` is clean (exit 0);
#      `apt-get install --reinstall` (the upgrade path) restarts it, keeps the config and secret;
#   5. `systemctl enable --now mtproxy-update-config.timer`: listed by `systemctl list-timers`;
#   6. `apt-get purge mtproxy`: no file of the package, no /etc/mtproxy, no state or log directory,
#      no unit, no enablement link and no process remain; the system user stays (Debian does not
#      remove system users: files may still carry its uid), locked;
#   7. `systemctl poweroff`: systemd-nspawn exits 0; the copy is removed.
# Prints what each step took. Needs root, systemd-container (apt-get installs it if missing).
# shellcheck disable=SC2016,SC2013 # commands for the container in single quotes; pids a word each
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# Keyed by content: the base tree's path (itself keyed) and the packages added to it.
nspawn_adds='systemd systemd-sysv dbus'
nspawn_key=$(printf '%s\n' "$("$root/tests/fresh/run.sh" base)" "$nspawn_adds" | sha256sum | cut -c1-16)
cache=${MTPROXY_NSPAWN_CACHE:-/var/cache/mtproxy-ci/bookworm-systemd-$nspawn_key}
t0=$(date +%s)
ts=$t0
log() { printf 'nspawn: %s\n' "$*" >&2; }
cpid=
die() {
    log "FAIL: $*"
    if [ -n "$cpid" ]; then
        log "the unit's journal (last 15 lines):"
        ct 'journalctl -u mtproxy --no-pager -n 15' >&2 || true
    fi
    exit 1
}
step() { # WHAT: what the step since the last one did, and how long it took
    local now
    now=$(date +%s)
    log "ok ($((now - ts)) s): $*"
    ts=$now
}
[ "$(id -u)" = 0 ] || { log "skipped: needs root"; exit 77; }
export DEBIAN_FRONTEND=noninteractive

deb=${1:-}
if [ -z "$deb" ]; then
    w=$(mktemp -d)
    "$root/packaging/debian/test.sh" "$w" >&2
    deb=$w
fi
if [ -d "$deb" ]; then
    for d in "$deb"/mtproxy_*.deb; do deb=$d; done
fi
[ -f "$deb" ] || die "no .deb: $deb"
tools=$(cd "${2:?usage: packaging/debian/nspawn.sh DEB TOOLS_DIR (tests/tools of a build)}" && pwd)
for t in fake_dc test_client; do
    [ -x "$tools/$t" ] || die "$tools/$t: build the tests first"
done
command -v systemd-nspawn >/dev/null 2>&1 ||
    apt-get install -y --no-install-recommends systemd-container >&2 ||
    die "cannot install systemd-container"

# ---- the tree with systemd (cached) ------------------------------------------------------------
# chroot_net TREE CMD: CMD in the chroot TREE with the host's network (apt's downloads only).
chroot_net() {
    local rc=0
    mount -t proc proc "$1/proc"
    chroot "$1" /bin/sh -c "$2" || rc=$?
    umount "$1/proc"
    return $rc
}
apt_sources() { # TREE: the machine's apt sources (what a new Debian 12 here would have)
    rm -f "$1/etc/apt/sources.list"
    cp -a /etc/apt/sources.list "$1/etc/apt/" 2>/dev/null || true
    cp -a /etc/apt/sources.list.d/. "$1/etc/apt/sources.list.d/" 2>/dev/null || true
    cp /etc/resolv.conf "$1/etc/resolv.conf"
}
if [ ! -f "$cache/.mtproxy-nspawn-ok" ]; then
    base=$("$root/tests/fresh/run.sh" base)
    log "making $cache from $base: apt-get install systemd systemd-sysv dbus (once per machine)"
    rm -rf "$cache.tmp"
    mkdir -p "$cache.tmp"
    cp -a "$base/." "$cache.tmp/"
    rm -f "$cache.tmp/.mtproxy-fresh-ok"
    apt_sources "$cache.tmp"
    # No daemon started in the chroot.
    printf '#!/bin/sh\nexit 101\n' >"$cache.tmp/usr/sbin/policy-rc.d"
    chmod 755 "$cache.tmp/usr/sbin/policy-rc.d"
    chroot_net "$cache.tmp" "apt-get update -qq; apt-get install -y -qq --no-install-recommends $nspawn_adds" \
        >"$cache.log" 2>&1 || { tail -20 "$cache.log" >&2; die "apt-get install systemd failed (log: $cache.log)"; }
    rm -f "$cache.tmp/usr/sbin/policy-rc.d" "$cache.tmp"/var/cache/apt/archives/*.deb
    # Each boot makes its own machine id.
    : >"$cache.tmp/etc/machine-id"
    touch "$cache.tmp/.mtproxy-nspawn-ok"
    rm -rf "$cache"
    mv "$cache.tmp" "$cache"
    if [ -z "${MTPROXY_NSPAWN_CACHE:-}" ]; then # the trees of older keys
        for old in /var/cache/mtproxy-ci/bookworm-systemd /var/cache/mtproxy-ci/bookworm-systemd-*; do
            case "$old" in "$cache" | "$cache".* | *.log) continue ;; esac
            [ -d "$old" ] && rm -rf --one-file-system "$old"
        done
    fi
    step "the cached tree with systemd made"
fi

# ---- a copy, the package's dependencies in its apt cache ---------------------------------------
work=$(mktemp -d /var/tmp/mtproxy-nspawn.XXXXXX)
nspid=
cleanup() {
    if [ -n "$nspid" ] && kill -0 "$nspid" 2>/dev/null; then
        kill "$nspid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$nspid" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$nspid" 2>/dev/null || true
    fi
    umount "$work/proc" 2>/dev/null || true
    rm -rf --one-file-system "$work"
    rm -f "$work.nspawn.log" "$work.install.log" "$work.purge.log"
}
trap cleanup EXIT
cp -a "$cache/." "$work/"
rm -f "$work/.mtproxy-nspawn-ok"
apt_sources "$work"
mkdir -p "$work/srv/mtproxy-test"
cp "$deb" "$work/srv/mtproxy-test/"
cp "$tools/fake_dc" "$tools/test_client" "$work/usr/local/bin/"
debname=$(basename "$deb")
chroot_net "$work" "apt-get update -qq; apt-get install -y -qq --download-only /srv/mtproxy-test/$debname" \
    >"$work/srv/mtproxy-test/download.log" 2>&1 ||
    { tail -20 "$work/srv/mtproxy-test/download.log" >&2; die "downloading the dependencies failed"; }
step "copy of $cache, dependencies of $debname downloaded into it"

# ---- boot --------------------------------------------------------------------------------------
unshare -n systemd-nspawn --register=no --keep-unit --private-network --console=passive --boot \
    -D "$work" >"$work.nspawn.log" 2>&1 &
nspid=$!
for _ in $(seq 100); do
    for c in $(cat /proc/"$nspid"/task/*/children 2>/dev/null); do
        # The container's PID 1: PID 1 in its own PID namespace.
        [ "$(awk '/^NSpid:/ {print $NF}' "/proc/$c/status" 2>/dev/null)" = 1 ] && cpid=$c
    done
    [ -n "$cpid" ] && break
    kill -0 "$nspid" 2>/dev/null || break
    sleep 0.1
done
[ -n "$cpid" ] || { cat "$work.nspawn.log" >&2; die "no container PID 1 under systemd-nspawn ($nspid)"; }
ct() { # CMD: a shell command inside the container
    nsenter -t "$cpid" -m -u -i -n -p -- /usr/bin/env -i PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 SYSTEMD_PAGER= SYSTEMD_COLORS=0 DEBIAN_FRONTEND=noninteractive /bin/sh -c "$1"
}
state=
for _ in $(seq 300); do
    state=$(ct 'systemctl is-system-running' 2>/dev/null) || true
    case $state in running | degraded) break ;; esac
    sleep 0.2
done
case $state in
running) ;;
degraded) log "booted degraded; failed units: $(ct 'systemctl --failed --no-legend --plain' | tr '\n' ' ')" ;;
*) cat "$work.nspawn.log" >&2; die "the container did not reach multi-user: '$state'" ;;
esac
ct 'systemctl is-active multi-user.target' >/dev/null || die "multi-user.target is not active"
step "booted (PID 1: $cpid, $state)"

# ---- 1. install --------------------------------------------------------------------------------
ct "apt-get install -y -qq /srv/mtproxy-test/$debname" >"$work.install.log" 2>&1 ||
    { cat "$work.install.log" >&2; die "apt-get install ./$debname failed inside"; }
ct 'systemctl is-active mtproxy' >/dev/null ||
    { ct 'journalctl -u mtproxy --no-pager | tail -20' >&2; die "not active after the install (the postinst starts it)"; }
step "apt-get install ./$debname inside: mtproxy.service active"

links=/var/lib/mtproxy/mtproxy.state.links
secret_of_links() { ct "cat $links" | sed -n 's/.*secret=\([0-9a-f]*\).*/\1/p' | sed -n 1p; }
# Type=notify: `systemctl start` returns once the proxy sent READY=1, just after its "started,
# pid N" line (links written before it); the loop only covers the journal's own lag.
wait_started() {
    local p
    for _ in $(seq 100); do
        p=$(ct 'systemctl show -p MainPID --value mtproxy')
        [ "$p" != 0 ] && grep -q "started, pid $p" <<<"$(ct "journalctl -u mtproxy --no-pager -o cat _PID=$p")" &&
            return 0
        sleep 0.1
    done
    die "no 'started' line in the journal for the main process ($p)"
}
wait_started
s1=$(secret_of_links)
[ -n "$s1" ] || die "no secret in $links"

# ---- 2. a DC table on the fake DC --------------------------------------------------------------
conf() { # TEXT: the config, as an admin would write it (0644 root)
    printf '%s\n' "$1" | ct 'cat >/etc/mtproxy/mtproxy.conf && chmod 0644 /etc/mtproxy/mtproxy.conf'
}
dcconf='listen = 0.0.0.0:8443
dc-builtin = off
dc = 2 127.0.0.1:19443
default-dc = 2'
conf "$dcconf"
ct 'systemd-run --unit=fake-dc --quiet /usr/local/bin/fake_dc --listen 127.0.0.1:19443,2 --quiet' ||
    die "cannot start the fake DC"
ct 'systemctl restart mtproxy' || { ct 'journalctl -u mtproxy --no-pager | tail' >&2; die "restart failed"; }
ct 'systemctl is-active mtproxy' >/dev/null || die "not active after the restart with the DC table"
wait_started
serve() { # SECRET: a client through the proxy to the fake DC, 100 kB each way
    ct "test_client --proxy 127.0.0.1:8443 --secret $1 --tag dd --dc 2 --up 100000 --down 100000 --timeout 20" 2>&1
}
out=$(serve "$s1") || die "no client served with the generated secret: $out"
s2=$(secret_of_links)
[ "$s2" = "$s1" ] || die "the generated secret changed across the restart ($s1 -> $s2)"

pid=$(ct 'systemctl show -p MainPID --value mtproxy')
uid=$(ct "awk '/^Uid:/ {print \$2}' /proc/$pid/status")
muid=$(ct 'id -u mtproxy') || die "no user mtproxy"
[ "$uid" = "$muid" ] || die "runs as uid $uid, not mtproxy ($muid)"
st=$(ct "cat /proc/$pid/status")
grep -q '^NoNewPrivs:[[:space:]]*1' <<<"$st" || die "NoNewPrivs is not set"
grep -q '^Seccomp:[[:space:]]*2' <<<"$st" || die "no seccomp filter"
bnd=$(sed -n 's/^CapBnd:[[:space:]]*//p' <<<"$st")
[ "$bnd" = 0000000000000400 ] || die "capability bounding set $bnd, not CAP_NET_BIND_SERVICE only"
[ -n "$(ct "awk '\$5 == \"/\" && \$6 ~ /^ro/' /proc/$pid/mountinfo")" ] || die "the root is not read-only for the service (ProtectSystem=strict)"
score=$(ct 'systemd-analyze security mtproxy.service' | sed -n 's/.*Overall exposure level for mtproxy.service: *//p')
[ -n "$score" ] || die "systemd-analyze security printed no score"
ct 'test -f /var/lib/mtproxy/mtproxy.state.links' || die "no links file"
if grep -qF "$s1" <<<"$(ct 'journalctl --no-pager -o cat')"; then
    die "the secret is in the journal"
fi
step "DC table on the fake DC: active as mtproxy (uid $uid; NoNewPrivs, seccomp, CapBnd net_bind_service, ro root); systemd-analyze security: $score; links file; secret kept from the first start; client served; no secret in the journal"

# ---- 3. reload ---------------------------------------------------------------------------------
s3=$(ct '/usr/bin/mtproxy generate-secret') || die "generate-secret failed"
conf "$dcconf
secret = alice:$s3"
ct 'systemctl reload mtproxy' || die "reload with a new secret failed"
for _ in $(seq 50); do
    grep -q 'configuration 2 loaded' <<<"$(ct 'journalctl -u mtproxy --no-pager -o cat')" && break
    sleep 0.1
done
out=$(serve "$s3") || die "the new secret is not served after the reload: $out"
conf "$dcconf
secret = alice:$s3
no-such-key = 1"
if ct 'systemctl reload mtproxy' 2>/dev/null; then
    die "systemctl reload accepted a broken config (it must fail, so that the admin sees it)"
fi
sleep 0.5
ct 'systemctl is-active mtproxy' >/dev/null || die "a refused reload stopped the service"
[ "$(ct 'systemctl show -p MainPID --value mtproxy')" = "$pid" ] || die "a refused reload restarted the service"
out=$(serve "$s3") || die "the running config no longer serves after a refused reload: $out"
if grep -qF "${s3:0:32}" <<<"$(ct 'journalctl --no-pager -o cat')"; then
    die "the configured secret is in the journal"
fi
step "reload: a new secret served; a broken config refused by systemctl reload, still active, the running config serves"

# ---- 4. restart keeps the generated secret -----------------------------------------------------
conf "$dcconf"
ct 'systemctl restart mtproxy' || die "restart failed"
ct 'systemctl is-active mtproxy' >/dev/null || die "not active after the restart"
wait_started
[ "$(secret_of_links)" = "$s1" ] || die "the generated secret changed across a restart"
out=$(serve "$s1") || die "the generated secret is not served after the restart: $out"
s0=$(date +%s)
ct 'systemctl stop mtproxy' || die "stop failed"
res=$(ct 'systemctl show -p Result -p ExecMainCode -p ExecMainStatus mtproxy' | sort | tr '\n' ' ')
[ "$res" = "ExecMainCode=1 ExecMainStatus=0 Result=success " ] ||
    die "systemctl stop was not clean (exit 0 on SIGTERM): $res"
[ $(($(date +%s) - s0)) -lt 20 ] || die "systemctl stop took $(($(date +%s) - s0)) s"
ct 'systemctl start mtproxy' || die "start after stop failed"
wait_started
step "restart keeps the generated secret (served); systemctl stop: exit 0 in $(($(date +%s) - s0)) s"

# ---- 4b. a reinstall (the upgrade path: prerm, postinst restart) -------------------------------
pid0=$(ct 'systemctl show -p MainPID --value mtproxy')
ct "apt-get install -y -qq --reinstall /srv/mtproxy-test/$debname" >"$work.install.log" 2>&1 ||
    { cat "$work.install.log" >&2; die "apt-get install --reinstall failed"; }
ct 'systemctl is-active mtproxy' >/dev/null || die "not active after a reinstall"
wait_started
[ "$(ct 'systemctl show -p MainPID --value mtproxy')" != "$pid0" ] || die "a reinstall did not restart the unit"
ct 'grep -qx "dc = 2 127.0.0.1:19443" /etc/mtproxy/mtproxy.conf' || die "a reinstall replaced the edited config"
[ "$(secret_of_links)" = "$s1" ] || die "the generated secret changed across a reinstall"
out=$(serve "$s1") || die "no client served after a reinstall: $out"
step "apt-get install --reinstall: restarted, the edited config and the generated secret kept (served)"

# ---- 5. the update-config timer ----------------------------------------------------------------
ct 'systemctl enable --now mtproxy-update-config.timer' >/dev/null 2>&1 || die "cannot enable the timer"
timers=$(ct 'systemctl list-timers --no-pager')
grep -q 'mtproxy-update-config.timer' <<<"$timers" ||
    die "the timer is not in systemctl list-timers: $timers $(ct 'systemctl status mtproxy-update-config.timer')"
step "systemctl enable --now mtproxy-update-config.timer: listed by list-timers"

# ---- 6. purge ----------------------------------------------------------------------------------
files=$(ct 'dpkg -L mtproxy | while read -r f; do [ ! -f "$f" ] || echo "$f"; done')
ct 'apt-get purge -y -qq mtproxy' >"$work.purge.log" 2>&1 || { cat "$work.purge.log" >&2; die "apt-get purge failed"; }
for f in $files /etc/mtproxy /var/lib/mtproxy /var/lib/private/mtproxy /var/log/mtproxy \
    /var/log/private/mtproxy /run/mtproxy; do
    ct "test ! -e '$f' && test ! -L '$f'" || die "left after purge: $f"
done
left=$(ct 'find /etc/systemd /lib/systemd/system /var/lib/systemd -name "*mtproxy*"' || true)
[ -z "$left" ] || die "left after purge: $left"
left=$(ct 'for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = mtproxy ] && echo ${p#/proc/}; done; true')
[ -z "$left" ] || die "mtproxy processes left after purge: $left"
left=$(ct 'systemctl list-units --all --no-legend --plain "mtproxy*"; systemctl list-unit-files --no-legend "mtproxy*"; true')
[ -z "$left" ] || die "systemd still knows mtproxy units after purge: $left"
ct 'dpkg-query -W mtproxy' >/dev/null 2>&1 && die "dpkg still knows mtproxy after purge"
pw=$(ct 'getent passwd mtproxy') || die "the user mtproxy is gone (expected: kept)"
case $pw in */nologin | */false) ;; *) die "the kept user mtproxy has a login shell: $pw" ;; esac
step "apt-get purge: nothing of the package left (files, /etc, state, logs, units, links, processes); user mtproxy kept, no login"

# ---- 7. power off ------------------------------------------------------------------------------
ct 'systemctl poweroff --no-block' || die "systemctl poweroff failed"
rc=0
for _ in $(seq 300); do kill -0 "$nspid" 2>/dev/null || break; sleep 0.2; done
kill -0 "$nspid" 2>/dev/null && die "the container did not power off within 60 s"
wait "$nspid" || rc=$?
[ "$rc" = 0 ] || { tail -20 "$work.nspawn.log" >&2; die "systemd-nspawn exited $rc"; }
nspid=
step "systemctl poweroff: systemd-nspawn exited 0"
log "all checks passed in $(($(date +%s) - t0)) s"
