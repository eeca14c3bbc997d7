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
#   tests/fresh/run.sh toolchains [orders]
#                                  the test list installed with .ci/apt-install-no-daemons, then
#                                  what each later CI stage builds, built (no test run): the ASan +
#                                  UBSan tree and a test binary, every fuzz target, the musl static
#                                  build, each cross toolchain's first objects, the Debian
#                                  package's build dependencies; with `orders`, then in the same
#                                  tree what `orders` does
#   tests/fresh/run.sh orders      the README test command then its run command in one clean
#                                  clone, and the run command then the test command in another
#                                  (ctest limited to a few unit tests, which must run), and that
#                                  the old test command passed there having run no test
#
# toolchains and orders mount two caches into the copy: $MTPROXY_CI_CACHE (default
# /var/cache/mtproxy-ci: the content-keyed musl libraries and cross sysroots, shared with the
# host's stages) at the same path, and its apt-archives/ as the copy's /var/cache/apt/archives
# (the downloaded .debs, kept across runs: the host's own apt cache is emptied after every
# install on this machine). MTPROXY_FRESH_LIST=FILE installs FILE instead of .ci/debian-packages
# (a scratch list, to see what fails without a package). Each step prints its time and the
# copy's disk.
#
# The base tree (debootstrap --variant=minbase bookworm, from Debian's packages) is made once and
# kept in $MTPROXY_FRESH_CACHE (default /var/cache/mtproxy-ci/bookworm-minbase-KEY, KEY a hash of
# what makes it: the command, debootstrap's version and this machine's apt sources; a tree of an
# older key is removed when a new one is made): later stages of the same CI run and later runs
# on the same machine reuse it. It is never changed: each run works on a copy, so every run
# starts from the same fresh machine.
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
# shellcheck disable=SC2016,SC2015,SC2013,SC2012,SC2317 # commands for the chroot in single quotes; a && b || die; functions run by timed
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cache_dir=/var/cache/mtproxy-ci
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
# Keyed by content: what makes the tree (the command, debootstrap's version, this machine's apt
# sources). Another key makes a new tree; the trees of older keys are removed once it is made.
command -v debootstrap >/dev/null 2>&1 || apt-get install -y debootstrap >&2 ||
    die "cannot install debootstrap"
base_key=$({
    echo 'debootstrap --variant=minbase bookworm'
    dpkg-query -W -f '${Version}\n' debootstrap
    # The binary archives' lines (not the deb-src lines packaging/musl/build.sh adds).
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        case "$f" in */mtproxy-*) continue ;; esac
        [ -f "$f" ] && grep -hE '^(deb|URIs:|Suites:|Components:) ' "$f"
    done
    true
} | sha256sum | cut -c1-16)
base=${MTPROXY_FRESH_CACHE:-$cache_dir/bookworm-minbase-$base_key}
make_base() {
    [ -x "$base/bin/sh" ] && [ -f "$base/.mtproxy-fresh-ok" ] && return 0
    log "debootstrap --variant=minbase bookworm into $base (once per machine and key)"
    mkdir -p "$(dirname "$base")"
    rm -rf "$base.tmp"
    debootstrap --variant=minbase bookworm "$base.tmp" >"$base.log" 2>&1 ||
        { tail -20 "$base.log" >&2; die "debootstrap failed (log: $base.log)"; }
    touch "$base.tmp/.mtproxy-fresh-ok"
    rm -rf "$base"
    mv "$base.tmp" "$base"
    if [ -z "${MTPROXY_FRESH_CACHE:-}" ]; then
        local old
        for old in "$cache_dir"/bookworm-minbase "$cache_dir"/bookworm-minbase-*; do
            case "$old" in "$base" | "$base".* | *.log) continue ;; esac
            [ -d "$old" ] && { log "removing the tree of an older key: $old"; rm -rf --one-file-system "$old"; }
        done
    fi
    return 0
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
    for m in proc dev/pts dev var/cache/apt/archives var/cache/mtproxy-ci; do
        umount -l "$work/$m" 2>/dev/null || true
    done
    # A bind mount of this filesystem is not another filesystem to rm --one-file-system: never
    # delete while anything is still mounted under the copy (the caches would go with it).
    if grep -q " $work/" /proc/self/mounts; then
        log "still mounted under $work: not removed"
        return 0
    fi
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

# mount_caches: the content-keyed cache at the same path, its apt-archives/ as apt's archives.
cachedir=${MTPROXY_CI_CACHE:-/var/cache/mtproxy-ci}
mount_caches() {
    mkdir -p "$cachedir/apt-archives/partial" "$work/var/cache/mtproxy-ci"
    mount --bind "$cachedir" "$work/var/cache/mtproxy-ci"
    mount --bind "$cachedir/apt-archives" "$work/var/cache/apt/archives"
}
# timed NAME CMD...: runs CMD; prints its time and the copy's disk (without the caches).
disk() {
    du -sxm --exclude=var/cache/apt/archives --exclude=var/cache/mtproxy-ci \
        --exclude=var/lib/apt/lists "$work" 2>/dev/null | cut -f1
}
timed() {
    local name=$1 s0 d0 rc=0
    shift
    s0=$(date +%s) d0=$(disk)
    "$@" || rc=$?
    log "step $name: $(($(date +%s) - s0)) s, disk $(($(disk) - d0)) MB (copy: $(disk) MB)," \
        "$([ $rc = 0 ] && echo ok || echo "FAILED (rc $rc)")"
    return $rc
}
# logged LOG WHERE CMD: runs CMD with in_chroot or in_netns (WHERE), its output in LOG, shown if
# it fails.
logged() {
    "$2" "$3" >"$1" 2>&1 || {
        tail -40 "$1" >&2
        log "failed: $3 (log: $1)"
        return 1
    }
}

# run_until_links DIR OUT: the README run command in the copy's DIR, on a terminal, loopback only;
# waits for its links, then stops it (SIGTERM to every process in the copy).
run_until_links() {
    local dir=$1 out=$2 deadline links=
    # On a terminal, as a new user runs it (the proxy prints the links only when stdout is one):
    # script(1) gives the command a pty and copies what it shows into $out.
    setsid script -qfec "unshare -n sh -c 'ip link set lo up && exec chroot \"\$0\" /bin/sh -c \"\$1\"' \
        '$work' 'cd $dir && $run'" "$out" >/dev/null 2>&1 </dev/null &
    pids+=("$!")
    deadline=$(($(date +%s) + timeout_s))
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
}

# enabled_in ROOT: the services enabled in the tree ROOT (systemd links, SysV S links).
enabled_in() {
    (cd "$1" && find etc/systemd/system -mindepth 2 -maxdepth 2 -type l \
        \( -path '*.wants/*' -o -path '*.requires/*' \) 2>/dev/null | sed 's|.*/|systemd |'
    ls etc/rc2.d etc/rc3.d etc/rc4.d etc/rc5.d 2>/dev/null | sed -n 's/^S[0-9]*/sysv /p') | sort -u
}
# untouched_since ENABLED: after an install, nothing of the copy's runs, no service is enabled
# beyond ENABLED (enabled_in before it), no policy-rc.d is left; says what is wrong otherwise.
untouched_since() {
    local bad=0 running new
    running=$(for p in $(inside); do tr '\0' ' ' <"/proc/$p/cmdline"; echo; done)
    [ -z "$running" ] || { log "left running after the install: $running"; bad=1; }
    new=$(enabled_in "$work" | grep -vxF -e "$1" -e '' || true)
    [ -z "$new" ] || { log "enabled by the install: $(printf "%s\n" "$new" | tr "\n" " ")"; bad=1; }
    [ ! -e "$work/usr/sbin/policy-rc.d" ] || { log "policy-rc.d left behind"; bad=1; }
    return $bad
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
    tst=$(readme_line 'Build and run all the tests' 30 '^apt-get')
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
    untouched_since "$enabled0" ||
        die "the README test command's install changes the machine beyond its packages"
    log "ok: installed the test list (no recommends) in ${secs} s (from downloaded packages)," \
        "$((du1 - du0)) MB on disk, no daemon started or enabled ($(($(date +%s) - t0)) s)"
    exit 0
fi

if [ "${1:-}" = toolchains ] || [ "${1:-}" = orders ]; then
    do_tools='' do_orders=''
    for m in "$@"; do
        case "$m" in
        toolchains) do_tools=1 ;;
        orders) do_orders=1 ;;
        *) die "usage: run.sh toolchains [orders] | orders" ;;
        esac
    done
    [ -z "$(git -C "$root" status --porcelain --untracked-files=no)" ] ||
        log "note: uncommitted changes in $root are not in the clone (its HEAD)"
    make_base
    new_machine
    mount_caches
    git clone -q --no-local "$root" "$work/root/mtproxy"
    git -C "$work/root/mtproxy" log --oneline -1 >&2
    list=.ci/debian-packages
    if [ -n "${MTPROXY_FRESH_LIST:-}" ]; then
        cp "$MTPROXY_FRESH_LIST" "$work/root/mtproxy/.ci/debian-packages" ||
            die "MTPROXY_FRESH_LIST: cannot read $MTPROXY_FRESH_LIST"
        log "the test list replaced by $MTPROXY_FRESH_LIST (a scratch list)"
    fi
    run=$(readme_line '^Install what building needs' 12 '^apt-get')
    tst=$(readme_line 'Build and run all the tests' 30 '^apt-get')
    [ -n "$run" ] && [ -n "$tst" ] || die "README.md: no run or test command found"
    log "fresh tree ready ($(($(date +%s) - t0)) s, $(disk) MB)"
    l=$work/root

    # With the network: apt's indexes and the .debs of both lists (kept in the archive cache).
    dl() {
        in_chroot 'apt-get update -qq' >&2 || log "apt-get update reported errors (going on)"
        in_chroot "cd /root/mtproxy && apt-get install -y -qq --download-only \$(grep -hv '^#' $list \
            .ci/debian-packages-build | sort -u)" >"$l/download.log" 2>&1 ||
            { tail -20 "$l/download.log" >&2; return 1; }
        rm -rf "$work"/var/cache/apt/archives/partial/*
    }
    timed "download the test and build lists" dl || die "the lists do not download on a fresh Debian 12"
    # The rest without network but apt's downloads (in_chroot for those alone).
    enabled0=$(enabled_in "$work")
    du0=$(disk)
    timed "install the test list (.ci/apt-install-no-daemons)" logged "$l/install.log" in_netns \
        "cd /root/mtproxy && .ci/apt-install-no-daemons $list" || die "the test list does not install"
    untouched_since "$enabled0" || die "the test list's install changes the machine beyond its packages"
    log "ok: the test list installed: $(($(disk) - du0)) MB, no daemon started or enabled"

    if [ -n "$do_tools" ]; then
        j=$(nproc)
        # tests/sanitize.sh's configure (clang: it takes clang when installed), then the proxy and
        # one test binary: the link of the ASan and UBSan runtimes (libclang-rt-14-dev).
        timed "ASan + UBSan tree: configure, mtproxy and test_crypto" logged "$l/asan.log" in_netns \
            "cd /root/mtproxy && command -v clang && CC=clang cmake -S . -B build-asan \
            -DMTPROXY_SANITIZE=ON -DMTPROXY_BENCH=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
            cmake --build build-asan -j$j --target mtproxy test_crypto &&
            grep -q '^CMAKE_C_COMPILER:.*clang' build-asan/CMakeCache.txt" ||
            die "the sanitizer stage's build fails on a fresh machine with the test list"
        # tests/fuzz/run.sh's configure and build: every target (fuzz_targets).
        timed "libFuzzer: every target" logged "$l/fuzz.log" in_netns \
            "cd /root/mtproxy && CC=clang cmake -S . -B build-fuzz -DMTPROXY_FUZZ=ON \
            -DMTPROXY_TESTS=ON -DMTPROXY_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
            cmake --build build-fuzz --target fuzz_targets -j$j &&
            for f in tests/fuzz/fuzz_*.c; do f=\${f##*/}; test -x build-fuzz/tests/fuzz/\${f%.c} ||
            { echo missing \${f%.c}; exit 1; }; done" ||
            die "the fuzz stage's build fails on a fresh machine with the test list"
        # musl: what needs the network (its installs; the sources when the cache is cold), then
        # the build offline, no test run.
        timed "musl: installs and sources" logged "$l/musl-fetch.log" in_chroot \
            "cd /root/mtproxy && MTPROXY_MUSL_FETCH_ONLY=1 packaging/musl/build.sh build-musl" ||
            die "the musl stage's setup fails on a fresh machine"
        timed "musl: static build (no tests)" logged "$l/musl.log" in_netns \
            "cd /root/mtproxy && MTPROXY_MUSL_NO_TESTS=1 packaging/musl/build.sh build-musl" ||
            die "the musl stage's build fails on a fresh machine with the test list"
        grep '^musl x86_64' "$l/musl.log" >&2 || true
        # cross: the script's installs (cross gcc, qemu-user-static) and sysroots with the
        # network, then each toolchain's first objects offline.
        arches='armhf mipsel arm64 s390x'
        timed "cross: installs and sysroots ($arches)" logged "$l/cross-setup.log" in_chroot \
            "cd /root/mtproxy && MTPROXY_CROSS_SETUP_ONLY=1 packaging/cross/run.sh $arches" ||
            die "the cross stage's setup fails on a fresh machine"
        timed "cross: configure and first objects ($arches)" logged "$l/cross.log" in_netns \
            "cd /root/mtproxy && MTPROXY_CROSS_FIRST_OBJECT=1 packaging/cross/run.sh $arches" ||
            die "the cross stage's toolchains fail on a fresh machine"
        grep '^cross ' "$l/cross.log" >&2 || true
        # The Debian package stage: its Build-Depends, all installed by the test list.
        timed "Debian package: build dependencies" logged "$l/deb.log" in_netns \
            "cd /root/mtproxy && dpkg-checkbuilddeps packaging/debian/control" ||
            die "the package stage's build dependencies are not in the test list"
        log "ok: every stage's toolchain from the lists on a fresh Debian 12 ($(($(date +%s) - t0)) s)"
    fi

    if [ -n "$do_orders" ]; then
        # The test command, verbatim but for its ctest, limited to three quick unit tests.
        case "$tst" in
        *' && ctest '*) ;;
        *) die "README.md: the test command does not end with ctest: $tst" ;;
        esac
        case "${tst##* && ctest }" in *'&&'* | *';'* | *'|'*) die "README.md: a step after ctest: $tst" ;; esac
        quick="'^unit_(crypto|obfs2|secret)\$'"
        tstq="$tst -R $quick"
        # The test command before this one: no options to cmake, ctest with no --no-tests=error.
        old=$(printf '%s' "$tst" | sed 's/ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMTPROXY_TESTS=ON -DMTPROXY_BENCH=ON//;
            s/ --no-tests=error.*$//')
        [ "$old" != "$tst" ] || die "cannot make the old test command from: $tst"
        # test_cmd DIR LOG: the limited test command in DIR; it must run the three and pass.
        test_cmd() {
            logged "$2" in_netns "cd $1 && $tstq" || return 1
            n=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#' "$2" || true)
            grep -q '100% tests passed, 0 tests failed out of 3' "$2" && [ "$n" = 3 ] || {
                tail -20 "$2" >&2
                log "the test command ran $n tests, not 3"
                return 1
            }
            log "the test command ran and passed: $(grep -oE 'unit_[a-z0-9]+ ' "$2" | sort -u | tr -d '\n')"
        }
        for d in order1 order2; do git clone -q --no-local "$root" "$work/root/$d"; done
        if [ -n "${MTPROXY_FRESH_LIST:-}" ]; then
            for d in order1 order2; do cp "$MTPROXY_FRESH_LIST" "$work/root/$d/.ci/debian-packages"; done
        fi
        log "order 1, in /root/order1: the test command, then the run command"
        timed "order 1: test command" test_cmd /root/order1 "$l/order1-test.log" ||
            die "order 1: the test command failed"
        timed "order 1: run command" run_until_links /root/order1 "$l/order1-run.log"
        log "order 2, in /root/order2: the run command, then the test command"
        timed "order 2: run command" run_until_links /root/order2 "$l/order2-run.log"
        # Self-check: the old test command, there, passes having run no test (what the check
        # above is for: it fails on a run of no test).
        timed "order 2: the old test command (self-check)" logged "$l/order2-old.log" in_netns \
            "cd /root/order2 && $old" || die "self-check: the old test command failed"
        n=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#' "$l/order2-old.log" || true)
        grep -q 'No tests were found' "$l/order2-old.log" && [ "$n" = 0 ] ||
            die "self-check: the old test command ran $n tests (expected: none, 'No tests were found')"
        log "self-check: the old test command exits 0 after the run command, having run no test" \
            "(\"No tests were found\"): the count above would fail it"
        timed "order 2: test command" test_cmd /root/order2 "$l/order2-test.log" ||
            die "order 2: the test command failed"
        # And the new test command's ctest fails on a run of no test (--no-tests=error).
        if in_netns "cd /root/order2 && ${tst##* && } -R '^no_such_test\$'" >"$l/order2-none.log" 2>&1; then
            die "self-check: the test command's ctest passed having run no test"
        fi
        log "self-check: the test command's ctest fails when it runs no test"
        log "ok: the README's test and run commands, in both orders ($(($(date +%s) - t0)) s)"
    fi
    exit 0
fi

make_base
new_machine
log "fresh tree ready ($(($(date +%s) - t0)) s)"

# ---- a clean clone, as a new user would have it -------------------------------------------
git clone -q --no-local "$root" "$work/root/mtproxy"
git -C "$work/root/mtproxy" log --oneline -1 >&2

run=$(readme_line '^Install what building needs' 12 '^apt-get')
[ -n "$run" ] || die "README.md: no run command found"
case "$run" in *'$(cat .ci/debian-packages-build)'*) ;; *) die "unexpected run command: $run" ;; esac
log "run command: $run"

# Download what the run command installs (with the network), so it can run loopback-only.
in_chroot 'apt-get update -qq' >&2 || log "apt-get update reported errors (going on)"
in_chroot "cd /root/mtproxy && apt-get install -y -qq --download-only \$(cat .ci/debian-packages-build)" >&2 ||
    die "the build list does not download on a fresh Debian 12"

run_until_links /root/mtproxy "$work/root/run.log"
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
