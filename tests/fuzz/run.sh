#!/bin/sh
# run.sh: builds the libFuzzer targets (clang) and runs each for SECONDS; fails on any finding.
#
# Usage: tests/fuzz/run.sh [SECONDS]     (default 30 per target; the long run is 600)
#   MTPROXY_FUZZ_BUILD   build directory (default: build-fuzz at the top of the repo)
#   MTPROXY_FUZZ_ONLY    space-separated target names to run (default: all, e.g. "obfs2 config")
#   MTPROXY_FUZZ_RSS_MB  -rss_limit_mb for each target (default 2048)
#
# Each target starts from its seeds in tests/fuzz/corpus/fuzz_NAME/ and writes what it finds to
# BUILD/fuzz-corpus/fuzz_NAME/ (the seeds in the repo are never modified). A crash, leak,
# sanitizer report, timeout or out-of-memory leaves BUILD/fuzz-artifacts/fuzz_NAME-* (the
# reproducer: run `BUILD/tests/fuzz/fuzz_NAME FILE`) and makes this script exit 1.
# When permitted (root), the fuzzers run in a new network namespace with no network at all.
set -eu

secs=${1:-30}
case $secs in '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${MTPROXY_FUZZ_BUILD:-$root/build-fuzz}
rss=${MTPROXY_FUZZ_RSS_MB:-2048}
# Every target there is a source for (tests/fuzz/fuzz_NAME.c): a new one cannot be left out.
all=$(cd "$here" && ls fuzz_*.c | sed 's/^fuzz_//; s/\.c$//' | tr '\n' ' ')
targets=${MTPROXY_FUZZ_ONLY:-$all}

cc=${CC:-clang}
case $(basename "$cc") in
clang*) ;;
*) echo "run.sh: fuzzing needs clang (CC=$cc)" >&2; exit 2 ;;
esac
mkdir -p "$build/fuzz-artifacts" "$build/fuzz-logs"
CC=$cc cmake -S "$root" -B "$build" -DMTPROXY_FUZZ=ON -DMTPROXY_TESTS=ON -DMTPROXY_BENCH=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build/fuzz-logs/configure.log" 2>&1 ||
    { cat "$build/fuzz-logs/configure.log" >&2; exit 1; }
jobs=$(nproc 2>/dev/null || echo 2)
cmake --build "$build" --target fuzz_targets -j "$jobs" >"$build/fuzz-logs/build.log" 2>&1 ||
    { tail -50 "$build/fuzz-logs/build.log" >&2; exit 1; }

# The config dictionary: the words in fuzz_config.dict plus every key of the option table.
dict_file=$build/fuzz-logs/config.dict
{
    cat "$here/fuzz_config.dict"
    sed -n 's/.*\.name = "\([a-z0-9-]*\)".*/"\1"/p' "$root/src/config/options_table.c" \
        "$root/src/config/options.c"
} >"$dict_file"

nonet=""
if unshare -n true 2>/dev/null; then
    nonet="unshare -n"
fi

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:symbolize=1:allocator_may_return_null=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# One target per core at a time (each is single-threaded); results are printed in order.
run_one() {
    t=$1
    bin="$build/tests/fuzz/fuzz_$t"
    corpus="$build/fuzz-corpus/fuzz_$t"
    mkdir -p "$corpus"
    dict=""
    case $t in config | args) dict="-dict=$dict_file" ;; esac
    log="$build/fuzz-logs/fuzz_$t.log"
    start=$(date +%s)
    rc=0
    # -timeout: one input taking over 10 s is a hang and counts as a failure.
    $nonet "$bin" -max_total_time="$secs" -rss_limit_mb="$rss" -timeout=10 -detect_leaks=1 \
        -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/fuzz_$t-" $dict \
        "$corpus" "$here/corpus/fuzz_$t" >"$log" 2>&1 || rc=$?
    echo "$rc $(( $(date +%s) - start ))" >"$build/fuzz-logs/fuzz_$t.rc"
}
for t in $targets; do
    [ -x "$build/tests/fuzz/fuzz_$t" ] || { echo "run.sh: no target fuzz_$t" >&2; exit 2; }
    rm -f "$build/fuzz-logs/fuzz_$t.rc"
done
running=0
for t in $targets; do
    run_one "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait
        running=0
    fi
done
wait
total=0
failed=""
printf '%-20s %12s %8s  %s\n' target executions seconds result
for t in $targets; do
    log="$build/fuzz-logs/fuzz_$t.log"
    rc=1 took=?
    [ -f "$build/fuzz-logs/fuzz_$t.rc" ] && read -r rc took <"$build/fuzz-logs/fuzz_$t.rc"
    execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -1)
    execs=${execs:-0}
    total=$((total + execs))
    result=ok
    found='ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)'
    found="$found|runtime error:|fuzz invariant failed|SUMMARY: "
    if [ "$rc" -ne 0 ] || grep -qE "$found" "$log"; then
        result="FAILED (rc $rc, log $log)"
        failed="$failed $t"
    fi
    printf '%-20s %12s %8s  %s\n' "fuzz_$t" "$execs" "$took" "$result"
done
printf '%-20s %12s\n' total "$total"
if [ -n "$failed" ]; then
    echo "run.sh: findings in:$failed" >&2
    for t in $failed; do
        grep -E 'ERROR|SUMMARY|runtime error|invariant|Test unit written' \
            "$build/fuzz-logs/fuzz_$t.log" | head -20 >&2
    done
    exit 1
fi
