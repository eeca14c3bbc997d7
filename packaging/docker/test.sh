#!/usr/bin/env bash
# packaging/docker/test.sh BUILD_DIR: builds the Dockerfile with Debian's podman and runs the image
# the way the README does, in a network namespace of its own with no way out.
#
# The registry the Dockerfile's `FROM debian:bookworm-slim` names is not reachable here, so the base
# is made locally: the debootstrapped Debian 12 of tests/fresh/run.sh (cached there), given the
# machine's apt sources, is `podman import`ed and tagged docker.io/library/debian:bookworm-slim;
# the Dockerfile is built unchanged with --pull=never (--format docker: OCI drops HEALTHCHECK). podman's own storage is kept apart in
# /var/cache/mtproxy-ci/podman (the base and the build's layers are reused by later runs).
# These machines mount cgroups in hybrid mode, which crun refuses: runc, with explicit ulimits.
#
# Then, inside `unshare -n` (only loopback exists: nothing can leave):
#   1. the README's `docker run` line (named state volume, --public-host, --public-port 443), with
#      --network host in place of its published port: podman's bridge would carry the test's
#      traffic over a private-range address (10.88.x), and tests here reach loopback only; the
#      namespace's host network is its loopback. Runs as uid 10001, the healthcheck passes, the
#      links file names the public host and port 443;
#   2. a container restart keeps the secret (the volume);
#   3. a second container on the same volume with a read-only mounted config whose DC table
#      points at a fake DC on the namespace's loopback (BUILD_DIR/tests/tools/fake_dc): a client
#      (test_client) on 127.0.0.1 is served;
#   4. `podman stop` is clean: exit code 0, well within the stop timeout (no SIGKILL).
# Prints the image size. Needs root; apt-get installs podman and runc if missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bdir=$(cd "${1:?usage: packaging/docker/test.sh BUILD_DIR (with tests/tools/fake_dc, test_client)}" && pwd)
t0=$(date +%s)
log() { printf 'docker-test: %s\n' "$*" >&2; }
die() {
    log "FAIL: $*"
    exit 1
}
[ "$(id -u)" = 0 ] || { log "skipped: needs root"; exit 77; }
for t in fake_dc test_client; do
    [ -x "$bdir/tests/tools/$t" ] || die "$bdir/tests/tools/$t: build the tests first"
done
export DEBIAN_FRONTEND=noninteractive
if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
    apt-get install -y podman runc >&2 || die "cannot install podman and runc"
fi
cache=/var/cache/mtproxy-ci/podman
P=(podman --root "$cache/storage" --runroot /run/mtproxy-ci-podman --runtime runc
    --cgroup-manager cgroupfs --events-backend file)
# At most this shell's hard limits (runc cannot raise them: "error setting rlimit ... not permitted").
# podman without a systemd to run its healthcheck timers says so on every run, start and stop.
pod() { "${P[@]}" "$@" 2> >(grep -v 'systemd connection' >&2); }
ulimits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=4096:4096)
img=localhost/mtproxy:test

if [ "${2:-}" != --inside ]; then
    # ---- the base image and the build (with the network: the build stage runs apt-get) -------
    base=$("$root/tests/fresh/run.sh" base)
    if ! "${P[@]}" image exists docker.io/library/debian:bookworm-slim; then
        log "importing $base as debian:bookworm-slim"
        tmp=$(mktemp -d /var/tmp/mtproxy-base.XXXXXX)
        cp -a "$base/." "$tmp/"
        rm -f "$tmp/etc/apt/sources.list" "$tmp/.mtproxy-fresh-ok"
        cp -a /etc/apt/sources.list "$tmp/etc/apt/" 2>/dev/null || true
        cp -a /etc/apt/sources.list.d/. "$tmp/etc/apt/sources.list.d/" 2>/dev/null || true
        rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*
        tar -C "$tmp" -c . | "${P[@]}" import - docker.io/library/debian:bookworm-slim >/dev/null
        rm -rf "$tmp"
    fi
    log "podman build (Dockerfile unchanged, --pull=never)"
    "${P[@]}" build --format docker --pull=never --network host "${ulimits[@]}" -t "$img" -f "$root/Dockerfile" "$root" \
        >/var/tmp/mtproxy-docker-build.log 2>&1 ||
        { tail -30 /var/tmp/mtproxy-docker-build.log >&2; die "podman build failed"; }
    size=$("${P[@]}" image inspect -f '{{.Size}}' "$img")
    bsize=$("${P[@]}" image inspect -f '{{.Size}}' docker.io/library/debian:bookworm-slim)
    log "built $img: $((size / 1000000)) MB, of which $(((size - bsize) / 1000000)) MB on top of the" \
        "base ($((bsize / 1000000)) MB: a minbase debootstrap, bigger than bookworm-slim)" \
        "($(($(date +%s) - t0)) s)"
    # ---- the runs, with no network but loopback ---------------------------------------------
    exec unshare -n "$0" "$bdir" --inside
fi

ip link set lo up
ctrs=()
cleanup() {
    local c
    for c in "${ctrs[@]}"; do pod rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
    pod volume rm -f mtproxy-test-state >/dev/null 2>&1 || true
    [ -z "${dcpid:-}" ] || kill "$dcpid" 2>/dev/null || true
    rm -rf "${work:-/nonexistent}"
}
trap cleanup EXIT
work=$(mktemp -d /var/tmp/mtproxy-docker.XXXXXX)
pod volume rm -f mtproxy-test-state >/dev/null 2>&1 || true
port=8443
run_readme() { # NAME [ARGS...]: the README's docker run line, host network (see above)
    local name=$1
    shift
    pod run -d "${ulimits[@]}" --name "$name" --network host \
        -v mtproxy-test-state:/var/lib/mtproxy "$@" "$img" \
        --config /etc/mtproxy/mtproxy.conf --public-host proxy.example.org --public-port 443
}
wait_log() { # CONTAINER TEXT [COUNT]: until TEXT is in the log COUNT times (1)
    for _ in $(seq 100); do
        [ "$(pod logs "$1" 2>&1 | grep -cF "$2")" -ge "${3:-1}" ] && return 0
        sleep 0.1
    done
    pod logs "$1" >&2 || true
    die "$1: no '$2' in the log"
}
secret_of() { pod exec "$1" cat /var/lib/mtproxy/mtproxy.state.links | sed -n 's/.*secret=\([0-9a-f]*\).*/\1/p' | sed -n 1p; }

# 1. The README's line.
ctrs+=(mtproxy-test)
run_readme mtproxy-test >/dev/null
wait_log mtproxy-test "started"
uid=$(pod exec mtproxy-test id -u)
[ "$uid" = 10001 ] || die "runs as uid $uid, not 10001"
pod healthcheck run mtproxy-test >/dev/null || die "the healthcheck failed"
links=$(pod exec mtproxy-test cat /var/lib/mtproxy/mtproxy.state.links)
grep -q 'server=proxy.example.org&port=443&' <<<"$links" ||
    die "the links do not name proxy.example.org:443: $links"
s1=$(secret_of mtproxy-test)
[ -n "$s1" ] || die "no secret in the links"
log "ok: uid 10001, healthcheck passes, links name proxy.example.org:443"
# 2. A restart keeps the secret.
pod restart -t 30 mtproxy-test >/dev/null
wait_log mtproxy-test "started" 2
s2=$(secret_of mtproxy-test)
[ "$s1" = "$s2" ] || die "the secret changed across a restart"
log "ok: the secret survives a container restart"
# 4 (first part). podman stop is clean.
s0=$(date +%s)
pod stop -t 30 mtproxy-test >/dev/null
code=$(pod inspect -f '{{.State.ExitCode}}' mtproxy-test)
[ "$code" = 0 ] || die "podman stop: exit code $code"
[ $(($(date +%s) - s0)) -lt 25 ] || die "podman stop took the whole timeout (SIGKILL)"
log "ok: podman stop: exit 0 in $(($(date +%s) - s0)) s"

# 3. A read-only config with the DC table on a fake DC in the container's loopback.
cat >"$work/mtproxy.conf" <<EOF
listen = 0.0.0.0:8443
dc-builtin = off
dc = 2 127.0.0.1:19443
default-dc = 2
EOF
chmod 0644 "$work/mtproxy.conf"
ctrs+=(mtproxy-test-ro)
run_readme mtproxy-test-ro -v "$work/mtproxy.conf:/etc/mtproxy/mtproxy.conf:ro" >/dev/null
wait_log mtproxy-test-ro "started"
[ "$(secret_of mtproxy-test-ro)" = "$s1" ] || die "a new container on the volume has another secret"
"$bdir/tests/tools/fake_dc" --listen 127.0.0.1:19443,2 --quiet >"$work/fake_dc.log" 2>&1 &
dcpid=$!
for _ in $(seq 50); do grep -q READY "$work/fake_dc.log" && break; sleep 0.1; done
grep -q READY "$work/fake_dc.log" || die "fake_dc did not start: $(cat "$work/fake_dc.log")"
out=$("$bdir/tests/tools/test_client" --proxy "127.0.0.1:$port" --secret "$s1" --tag dd --dc 2 \
    --up 100000 --down 100000 --timeout 20 2>&1) || die "no client served: $out"
log "ok: read-only mounted config; a client served to the fake DC"
pod stop -t 30 mtproxy-test-ro >/dev/null
code=$(pod inspect -f '{{.State.ExitCode}}' mtproxy-test-ro)
[ "$code" = 0 ] || die "podman stop (read-only config): exit code $code"
log "ok: all checks ($(($(date +%s) - t0)) s in the namespace)"
