#!/bin/sh
# no-libatomic.sh: fails if a binary calls into libatomic (a 64-bit atomic on 32-bit MIPS/ARM) or links it.
#
# Usage: no-libatomic.sh NM READELF BINARY...
# On targets without native 64-bit atomics (32-bit MIPS above all: most OpenWrt routers) gcc
# turns an _Atomic uint64_t load or add into a call to __atomic_load_8, __atomic_fetch_add_8 or
# __sync_fetch_and_add_8 in libatomic. The counters (core/stat.h) avoid them; this keeps it so:
# any undefined __atomic_* / __sync_* symbol, or libatomic among the needed libraries, fails.
set -u
nm=$1 readelf=$2
shift 2
status=0
for bin in "$@"; do
    calls=$("$nm" -u "$bin" | awk '{print $NF}' | grep -E '^(__atomic_|__sync_)' | sort -u | tr '\n' ' ')
    if [ -n "$calls" ]; then
        echo "$bin: calls libatomic: $calls(use stat_t and STAT_* from core/stat.h for counters)" >&2
        status=1
    fi
    if "$readelf" -d "$bin" | grep -q 'NEEDED.*libatomic'; then
        echo "$bin: links libatomic" >&2
        status=1
    fi
done
[ "$status" -ne 0 ] || echo "no libatomic calls in: $*"
exit "$status"
