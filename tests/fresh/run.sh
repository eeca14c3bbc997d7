#!/usr/bin/env bash
# tests/fresh/run.sh: the README's run command, verbatim, on a freshly debootstrapped Debian 12.
#
#   tests/fresh/run.sh             the run command and the service lines (systemd build, SysV)
#   tests/fresh/run.sh base        makes the cached base tree if missing and prints its path
#   tests/fresh/run.sh test-install
#                                  the install part of the README test command, verbatim: no daemon
#                                  started or enabled by it; its disk and time
#   tests/fresh/run.sh test-list BUILD_DIR
#                                  what the host's run of the README test command found (BUILD_DIR's
#                                  CMake cache) comes from the test list on a fresh machine
#
# The base tree (debootstrap --variant=minbase bookworm, from Debian's packages) is made once and
# kept in $MTPROXY_FRESH_CACHE (default /var/cache/mtproxy-ci/bookworm-minbase): later stages of
# the same CI run and later runs on the same machine reuse it. It is never changed: each run
# works on a copy, so every run starts from the same fresh machine.
#
# In the copy: a clean `git clone` of this checkout (its HEAD) into /root/mtproxy, the machine's
# apt sources (what a new Debian 12 on this machine would have), then the README's run command,
# extracted the way tests/check_packages.sh does. Its `apt-get update; apt-get install` needs the
# mirror, and its last step starts the proxy with the default config, which must never reach an
# outside address: so the packages are downloaded first (apt-get install --download-only, with the
# network), and the whole command then runs verbatim in `chroot` inside `unshare -n` (loopback
# only): its apt-get update fails for want of a network (the `;` goes on), and its install takes
# the downloaded packages. It must build, start and print the links within the timeout; then it is
# stopped. Then the README's systemd and SysV build lines, verbatim, in the same tree (SysV's start
# in the same loopback-only namespace): the SysV service starts, writes its links and stops.
#
# Needs root, debootstrap (apt-get installs it if missing), unshare, chroot, ip, git.
# shellcheck disable=SC2016,SC2015,SC2013,SC2012 # commands for the chroot in single quotes; a && b || die
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
base=${MTPROXY_FRESH_CACHE:-/var/cache/mtproxy-ci/bookworm-minbase}
timeout_s=${MTPROXY_FRESH_TIMEOUT:-300}
log() { printf 'fresh: %s\n' "$*" >&2; }
die() {
    log "FAIL: $*"
    exit 1
}
t0=$(date +%s)

if [ "$(id -u)" != 0 ]; then
    log "skipped: needs root (debootstrap, chroot, unshare)"
    exit 77
fi
export DEBIAN_FRONTEND=noninteractive

# ---- the base tree -----------------------------------------------------------------------
make_base() {
    [ -x "$base/bin/sh" ] && [ -f "$base/.mtproxy-fresh-ok" ] && return 0
    command -v debootstrap >/dev/null 2>&1 || apt-get install -y debootstrap >&2 ||
        die "cannot install debootstrap"
    log "debootstrap --variant=minbase bookworm into $base (once per machine)"
    mkdir -p "$(dirname "$base")"
    rm -rf "$base.tmp"
    debootstrap --variant=minbase bookworm "$base.tmp" >"$base.log" 2>&1 ||
        { tail -20 "$base.log" >&2; die "debootstrap failed (log: $base.log)"; }
    touch "$base.tmp/.mtproxy-fresh-ok"
    rm -rf "$base"
    mv "$base.tmp" "$base"
}

# ---- a copy of it, with /proc and /dev, torn down on exit ---------------------------------
work=
pids=()
# The processes whose root is the copy (whatever namespace or session they are in).
inside() {
    local p
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$work" ] && echo "${p#/proc/}"
    done
    return 0
}
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -- -"$p" 2>/dev/null || true; done
    if [ -n "$work" ]; then
        for p in $(inside); do kill -9 "$p" 2>/dev/null || true; done
    fi
    [ -n "$work" ] || return 0
    for m in proc dev/pts dev; do umount -l "$work/$m" 2>/dev/null || true; done
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT
new_machine() {
    work=$(mktemp -d /var/tmp/mtproxy-fresh.XXXXXX)
    cp -a "$base/." "$work/"
    mount -t proc proc "$work/proc"
    mount --bind /dev "$work/dev"
    mount --bind /dev/pts "$work/dev/pts"
    cp /etc/resolv.conf "$work/etc/resolv.conf"
    # The machine's apt sources (the same mirrors a new Debian 12 here would be given).
    rm -f "$work/etc/apt/sources.list"
    cp -a /etc/apt/sources.list "$work/etc/apt/" 2>/dev/null || true
    cp -a /etc/apt/sources.list.d/. "$work/etc/apt/sources.list.d/" 2>/dev/null || true
}
# in_chroot CMD: with the network (only apt's downloads); in_netns CMD: loopback only.
in_chroot() { chroot "$work" /bin/sh -c "$1"; }
in_netns() {
    unshare -n sh -c 'ip link set lo up && exec chroot "$0" /bin/sh -c "$1"' "$work" "$1"
}
# readme_line HEAD N PATTERN: the first line matching PATTERN within N lines after a line
# matching HEAD.
readme_line() { grep -A"$2" -e "$1" "$root/README.md" | grep -e "$3" | sed -n 1p; }

# enabled_in ROOT: the services enabled in the tree ROOT (systemd links, SysV S links).
enabled_in() {
    (cd "$1" && find etc/systemd/system -mindepth 2 -maxdepth 2 -type l \
        \( -path '*.wants/*' -o -path '*.requires/*' \) 2>/dev/null | sed 's|.*/|systemd |'
    ls etc/rc2.d etc/rc3.d etc/rc4.d etc/rc5.d 2>/dev/null | sed -n 's/^S[0-9]*/sysv /p') | sort -u
}
# owner FILE: the Debian package that ships FILE (merged /usr: as a link's target or without /usr).
owner() {
    local r c
    r=$(readlink -f "$1")
    for c in "$1" "$r" "${1#/usr}" "${r#/usr}"; do
        dpkg -S "$c" 2>/dev/null | grep -v '^diversion' | sed -n 1p | cut -d: -f1 | grep . && return 0
    done
    return 0
}

if [ "${1:-}" = base ]; then
    make_base
    echo "$base"
    exit 0
fi

if [ "${1:-}" = test-list ]; then
    # ---- the README's test command: is the host's run of it what a fresh machine would do? ---
    bdir=${2:?usage: run.sh test-list BUILD_DIR}
    cache=$bdir/CMakeCache.txt
    [ -f "$cache" ] || die "$cache: run the README test command first"
    make_base
    new_machine
    in_chroot 'apt-get update -qq' >&2 || log "apt-get update reported errors (going on)"
    # What installing the test list on this fresh machine brings: the simulated install's set,
    # plus what minbase already has. Every name must resolve here (no host-only package).
    sim=$(in_chroot "cd / && apt-get install -s \$(cat /dev/stdin)" <"$root/.ci/debian-packages") ||
        die "the test list does not install on a fresh Debian 12: $(printf '%s' "$sim" | tail -5)"
    have=$( {
        printf '%s\n' "$sim" | sed -n 's/^Inst \([^ :]*\).*/\1/p'
        chroot "$work" dpkg-query -W -f '${Package}\n'
    } | sort -u)
    # Everything CMake found for the host's build (headers, libraries, programs: the tests'
    # interpreters, servers and linters) must be a file of one of those packages.
    bad=0 n=0
    while IFS= read -r f; do
        [ -f "$f" ] || continue
        p=$(owner "$f")
        n=$((n + 1))
        case "$f" in "$bdir"/* | "$root"/*) continue ;; esac
        if [ -z "$p" ]; then
            log "the host's build used $f, which no Debian package ships"
            bad=1
        elif ! grep -qx "$p" <<<"$have"; then
            log "the host's build used $f from $p, which the test list does not bring"
            bad=1
        fi
    done < <(sed -n -e 's/^[A-Za-z0-9_]*:\(FILEPATH\|PATH\)=\(\/.*\)$/\2/p' \
        -e 's/^[A-Za-z0-9_]*_EXECUTABLE:INTERNAL=\(\/.*\)$/\1/p' "$cache" | sort -u)
    [ $bad = 0 ] || die "the host has what a fresh machine with the test list would lack"
    # The programs the tests look up at run time (command -v, shutil.which) and skip without:
    # those the host has from outside the test list run here and would skip on a fresh machine.
    extra=
    for t in $(grep -rhoE 'shutil\.which\(["'"'"'][A-Za-z0-9_.+-]+|command -v [A-Za-z0-9_.+-]+' \
        "$root/tests" "$root/packaging" "$root/bench" | sed -E 's/.*[("'"'"' ]//' | sort -u); do
        f=$(command -v "$t" 2>/dev/null) || continue
        p=$(owner "$f")
        [ -n "$p" ] && grep -qx "$p" <<<"$have" && continue
        extra="$extra $t(${p:-not from a package})"
    done
    [ -z "$extra" ] || log "note: tests that look these up run here but would skip on a fresh machine:$extra"
    log "ok: the test list installs on a fresh Debian 12 ($(printf '%s\n' "$have" | wc -l) packages)," \
        "and all $n files the host's build found come from it ($(($(date +%s) - t0)) s)"
    exit 0
fi

if [ "${1:-}" = test-install ]; then
    # ---- the README test command's install leaves the machine as it found it ------------------
    make_base
    new_machine
    tst=$(readme_line 'Build and run all the tests' 14 '^apt-get')
    inst=${tst%% && cmake *}
    [ -n "$tst" ] && [ "$inst" != "$tst" ] || die "README.md: no test command found"
    log "the test command's install part: $inst"
    git clone -q --no-local "$root" "$work/root/mtproxy"
    in_chroot 'apt-get update -qq' >&2 || log "apt-get update reported errors (going on)"
    in_chroot "cd /root/mtproxy && apt-get install -y -qq --download-only \$(cat .ci/debian-packages)" >/dev/null ||
        die "the test list does not download on a fresh Debian 12"
    rm -rf "$work"/var/cache/apt/archives/partial
    du0=$(du -sxm --exclude=var/cache/apt/archives --exclude=var/lib/apt/lists "$work" | cut -f1)
    enabled0=$(enabled_in "$work")
    s0=$(date +%s)
    # Loopback only: a daemon that starts anyway cannot listen on this machine's addresses.
    in_netns "cd /root/mtproxy && $inst" >"$work/root/install.log" 2>&1 ||
        { tail -30 "$work/root/install.log" >&2; die "the test command's install failed"; }
    secs=$(($(date +%s) - s0))
    du1=$(du -sxm --exclude=var/cache/apt/archives --exclude=var/lib/apt/lists "$work" | cut -f1)
    bad=0
    running=$(for p in $(inside); do tr '\0' ' ' <"/proc/$p/cmdline"; echo; done)
    [ -z "$running" ] || { log "left running after the install: $running"; bad=1; }
    new=$(enabled_in "$work" | grep -vxF -e "$enabled0" -e '' || true)
    [ -z "$new" ] || { log "enabled by the install: $(printf "%s\n" "$new" | tr "\n" " ")"; bad=1; }
    [ ! -e "$work/usr/sbin/policy-rc.d" ] || { log "policy-rc.d left behind"; bad=1; }
    [ $bad = 0 ] || die "the README test command's install changes the machine beyond its packages"
    log "ok: installed the test list (no recommends) in ${secs} s (from downloaded packages)," \
        "$((du1 - du0)) MB on disk, no daemon started or enabled ($(($(date +%s) - t0)) s)"
    exit 0
fi

make_base
new_machine
log "fresh tree ready ($(($(date +%s) - t0)) s)"

# ---- a clean clone, as a new user would have it -------------------------------------------
git clone -q --no-local "$root" "$work/root/mtproxy"
git -C "$work/root/mtproxy" log --oneline -1 >&2

run=$(readme_line '^Install what building needs' 6 '^apt-get')
[ -n "$run" ] || die "README.md: no run command found"
case "$run" in *'$(cat .ci/debian-packages-build)'*) ;; *) die "unexpected run command: $run" ;; esac
log "run command: $run"

# Download what the run command installs (with the network), so it can run loopback-only.
in_chroot 'apt-get update -qq' >&2 || log "apt-get update reported errors (going on)"
in_chroot "cd /root/mtproxy && apt-get install -y -qq --download-only \$(cat .ci/debian-packages-build)" >&2 ||
    die "the build list does not download on a fresh Debian 12"

out=$work/root/run.log
# On a terminal, as a new user runs it (the proxy prints the links only when stdout is one):
# script(1) gives the command a pty and copies what it shows into $out.
setsid script -qfec "unshare -n sh -c 'ip link set lo up && exec chroot \"\$0\" /bin/sh -c \"\$1\"' \
    '$work' 'cd /root/mtproxy && $run'" "$out" >/dev/null 2>&1 </dev/null &
pids+=("$!")
deadline=$(($(date +%s) + timeout_s))
links=
while [ "$(date +%s)" -lt "$deadline" ]; do
    if grep -q 'tg://proxy?' "$out" && grep -q 'https://t.me/proxy?' "$out"; then
        links=1
        break
    fi
    kill -0 "${pids[0]}" 2>/dev/null || break
    sleep 1
done
if [ -z "$links" ]; then
    tail -40 "$out" >&2
    kill -0 "${pids[0]}" 2>/dev/null && die "no links within ${timeout_s} s"
    die "the run command exited before printing the links"
fi
log "built and started: links shown ($(($(date +%s) - t0)) s)"
sleep 1
kill -0 "${pids[0]}" 2>/dev/null || { tail -20 "$out" >&2; die "the proxy did not stay up"; }
grep -E 'tg://proxy\?|https://t.me/proxy\?' "$out" | sed -n 1,2p | sed 's/secret=[0-9a-f]*/secret=.../' >&2
# shellcheck disable=SC2046 # one pid a word
kill -TERM $(inside)
for _ in $(seq 50); do [ -n "$(inside)" ] || break; sleep 0.2; done
[ -z "$(inside)" ] || die "the proxy did not stop on SIGTERM within 10 s"
grep -q 'stopped\|stopping\|exit' "$out" || log "note: no stop message in the log"
pids=()
[ -f "$work/root/mtproxy/mtproxy.state" ] && [ -f "$work/root/mtproxy/mtproxy.state.links" ] ||
    die "no mtproxy.state and mtproxy.state.links after the run"
# What the run left in the checkout (the secret, its links, the lock) is ignored by git, so a
# `git add -A` there cannot commit a secret.
untracked=$(git -C "$work/root/mtproxy" status --porcelain --untracked-files=all)
[ -z "$untracked" ] || die "the run left files git would add: $(printf '%s' "$untracked" | tr '\n' ' ')"
log "ok: the run command built, started and printed its links, and stopped on SIGTERM" \
    "($(($(date +%s) - t0)) s)"

# ---- the service lines: systemd's build line, then SysV's three, verbatim -----------------
sysd=$(readme_line '^# systemd (' 1 '^cmake ')
sysv=$(sed -n '/^# SysV init/,/^$/p' "$root/README.md" | sed 1d | grep .)
[ -n "$sysd" ] && [ "$(printf '%s\n' "$sysv" | wc -l)" = 3 ] || die "README.md: service lines not found"
log "systemd build line: $sysd"
in_netns "cd /root/mtproxy && $sysd" >"$work/root/systemd.log" 2>&1 ||
    { tail -30 "$work/root/systemd.log" >&2; die "the systemd build line failed"; }
[ -x "$work/usr/bin/mtproxy" ] && [ -f "$work/usr/lib/systemd/system/mtproxy.service" ] ||
    [ -f "$work/lib/systemd/system/mtproxy.service" ] || die "the systemd line installed no unit"
log "SysV lines:"
printf '%s\n' "$sysv" >&2
script=$(printf 'set -e\ncd /root/mtproxy\n%s\nsleep 1\n%s\n/etc/init.d/mtproxy stop\n' "$sysv" \
    'echo "runs as uid $(sed -n "s/^Uid:[[:space:]]*\([0-9]*\).*/\1/p" /proc/$(cat /var/run/mtproxy.pid)/status), mtproxy is $(id -u mtproxy)"')
in_netns "$script" >"$work/root/sysv.log" 2>&1 ||
    { tail -30 "$work/root/sysv.log" >&2; die "the SysV lines failed"; }
grep -q 'tg://proxy?' "$work/root/sysv.log" || { tail -30 "$work/root/sysv.log" >&2; die "SysV: no links printed"; }
grep -qE '^runs as uid ([0-9]+), mtproxy is \1$' "$work/root/sysv.log" ||
    { grep -v secret "$work/root/sysv.log" >&2; die "SysV: not run as mtproxy"; }
[ -z "$(inside)" ] || die "SysV: still running after stop: $(inside | tr '\n' ' ')"
log "ok: systemd build line installed the unit; SysV built, started as mtproxy, printed links, stopped" \
    "($(($(date +%s) - t0)) s)"
