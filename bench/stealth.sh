#!/usr/bin/env bash
# bench/stealth.sh: what the stealth features cost (issue #17), through the real binary on loopback.
#
#   bench/stealth.sh [--quick] [--build-dir DIR] [--out DIR] [--repeat N] [--seconds S]
#
# 1. Bulk download to ee (FakeTLS) clients, record-sizing on vs off, in the same run (the two
#    alternate, REPEAT times each): 1 and 16 connections, splice path (fast mode + splice +
#    splice-tls) and copy path (fast mode, splice off). MB/s and proxy CPU seconds per GB.
# 2. ee handshakes per second (16 in flight) with the TLS profile learned from a local
#    `openssl s_server` (RSA-2048 leaf + CA chain) vs tls-profile off (tls-appdata-min/max).
# Writes OUT/stealth.csv (bench_load rows) and OUT/stealth.md (medians, on/off ratios).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build-bench"
OUT=""
QUICK=0
REPEAT=5
SECONDS_RUN=2
PORT=""
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --build-dir) BUILD=$2; shift ;;
    --out) OUT=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --seconds) SECONDS_RUN=$2; shift ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "stealth.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "$QUICK" = 1 ]; then
    REPEAT=1
    SECONDS_RUN=0.3
    OUT=${OUT:-$BUILD/results-stealth-quick}
else
    OUT=${OUT:-$ROOT/bench/results}
fi
MTPROXY=$BUILD/mtproxy
LOAD=$BUILD/bench/bench_load
for b in "$MTPROXY" "$LOAD"; do
    [ -x "$b" ] || { echo "stealth.sh: $b missing (cmake --build $BUILD)" >&2; exit 2; }
done
command -v openssl >/dev/null || { echo "stealth.sh: openssl (the command) missing" >&2; exit 2; }
mkdir -p "$OUT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init stealth
K_EE=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
DOMAIN=www.example.com
SECRET=ee$K_EE$(printf '%s' "$DOMAIN" | od -An -tx1 | tr -d ' \n')
CSV=$OUT/stealth.csv
rm -f "$CSV"
FAILED=0
SITE_PID=""
trap 'bench_cleanup; [ -n "$SITE_PID" ] && kill "$SITE_PID" 2>/dev/null; true' EXIT

start_proxy() { bench_start_proxy stealth.sh 600 --secret "t:$SECRET" --log-level info "$@"; }
run() {
    local label=$1 wl=$2 conns=$3
    shift 3
    timeout 120 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" --secret "$SECRET" \
        --client tls --workload "$wl" --conns "$conns" --seconds "$SECONDS_RUN" \
        --proxy-pid "$PROXY_PID" --proxy-log "$WORK/proxy.log" --label "$label" \
        --csv "$CSV" --quiet "$@" || { echo "stealth.sh: run failed: $label" >&2; FAILED=1; }
}

# 1. record sizing on vs off, alternating
for _ in $(seq "$REPEAT"); do
    for path in splice copy; do
        case $path in
        splice) P=(--fast-mode on --splice on --splice-tls on) ;;
        copy) P=(--fast-mode on --splice off) ;;
        esac
        for rs in on off; do
            echo "stealth.sh: record-sizing $rs, $path" >&2
            start_proxy "${P[@]}" --record-sizing "$rs"
            for c in 1 16; do run "rs=$rs/$path" bulk-down "$c"; done
            bench_stop_proxy
        done
    done
done

# 2. handshakes: learned profile vs fixed
SITE_DIR=$WORK/site
mkdir -p "$SITE_DIR"
(
    cd "$SITE_DIR"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
        -subj "/O=Bench/CN=Bench Root" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout leaf.key -out leaf.csr -subj "/CN=$DOMAIN" \
        2>/dev/null
    openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem \
        -days 2 2>/dev/null
)
SITE_PORT=$((DCPORT + 1))
(cd "$SITE_DIR" && exec openssl s_server -accept "127.0.0.1:$SITE_PORT" -cert leaf.pem \
    -key leaf.key -cert_chain ca.pem -www -quiet </dev/null >/dev/null 2>&1) &
SITE_PID=$!
sleep 0.5
for _ in $(seq "$REPEAT"); do
    for prof in learned fixed; do
        echo "stealth.sh: handshakes, $prof profile" >&2
        if [ "$prof" = learned ]; then
            start_proxy --tls-profile on --mask on --mask-host 127.0.0.1 \
                --mask-port "$SITE_PORT" --tls-profile-idle-max 200ms
            for _ in $(seq 100); do
                grep -q "kept an idle connection" "$WORK/proxy.log" && break
                sleep 0.05
            done
            grep -q "tls-profile: learned" "$WORK/proxy.log" ||
                { echo "stealth.sh: no profile learned" >&2; cat "$WORK/proxy.log" >&2; exit 1; }
        else
            start_proxy --tls-profile off
        fi
        run "hs=$prof" handshake 1 --concurrency 16
        bench_stop_proxy
    done
done
grep -h "tls-profile: learned" "$WORK"/proxy.log >/dev/null 2>&1 || true

python3 - "$CSV" "$OUT/stealth.md" "$REPEAT" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = lambda xs: statistics.median(xs) if xs else float("nan")
def pick(label, conns=None):
    return [r for r in rows if r["label"] == label and (conns is None or r["conns"] == conns)]
out = [f"# Stealth costs (bench/stealth.sh, medians of {sys.argv[3]} alternating runs)", "",
       "## Bulk download to ee clients, record-sizing on vs off", "",
       "| path | conns | MB/s on | MB/s off | on/off | CPU s/GB on | CPU s/GB off | on/off |",
       "|---|---|---|---|---|---|---|---|"]
for path in ("splice", "copy"):
    for c in ("1", "16"):
        on, off = pick(f"rs=on/{path}", c), pick(f"rs=off/{path}", c)
        mon, moff = med([float(r["mb_s_down"]) for r in on]), med([float(r["mb_s_down"]) for r in off])
        con, coff = med([float(r["cpu_s_per_gb"]) for r in on]), med([float(r["cpu_s_per_gb"]) for r in off])
        out.append(f"| {path} | {c} | {mon:.0f} | {moff:.0f} | {mon / moff:.3f} | {con:.3f} | "
                   f"{coff:.3f} | {con / coff:.3f} |")
out += ["", "## ee handshakes (16 in flight), learned profile vs fixed", "",
        "| profile | handshakes/s | proxy CPU s | CPU µs per handshake |", "|---|---|---|---|"]
for prof in ("learned", "fixed"):
    rs = pick(f"hs={prof}")
    hs = med([float(r["handshakes_per_s"]) for r in rs])
    cpu = med([float(r["proxy_cpu_s"]) for r in rs])
    secs = med([float(r["seconds"]) for r in rs])
    out.append(f"| {prof} | {hs:.0f} | {cpu:.2f} | {cpu / (hs * secs) * 1e6:.1f} |")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
EOF
exit $FAILED
