#!/bin/sh
# sanitize.sh: builds everything (bench tools too) with ASan + UBSan (build-asan) and runs the ctest suite.
#
# Usage: tests/sanitize.sh [CTEST ARGS...]     e.g. tests/sanitize.sh -L unit
#   CC                   compiler (default: clang if installed, else gcc)
#   MTPROXY_ASAN_BUILD   build directory (default: build-asan at the top of the repo)
#
# Every instrumented process (unit tests, mtproxy started by the integration harness, fake_dc,
# test_client) writes its sanitizer reports to BUILD/sanitizer-logs/ instead of stderr, so a
# report fails this script even when the process that hit it was killed, ignored or outlived
# its test. Leaks are only found in a process that exits normally: the harness stops the proxy
# with SIGTERM at teardown and checks its exit status (see tests/integration/harness.py).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${MTPROXY_ASAN_BUILD:-$root/build-asan}
if [ -z "${CC:-}" ]; then
    if command -v clang >/dev/null 2>&1; then CC=clang; else CC=gcc; fi
fi
export CC

mkdir -p "$build"
cmake -S "$root" -B "$build" -DMTPROXY_SANITIZE=ON -DMTPROXY_BENCH=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build/configure.log" 2>&1 ||
    { cat "$build/configure.log" >&2; exit 1; }
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" >"$build/build.log" 2>&1 ||
    { tail -60 "$build/build.log" >&2; exit 1; }

logs=$build/sanitizer-logs
rm -rf "$logs"
mkdir -p "$logs"
# abort_on_error: a report ends the process with SIGABRT, never a quiet exit code that a
# caller might treat as success. log_path: one file per reporting process.
# ASan and UBSan share one log_path in a process: reports land in san.PID.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:\
detect_stack_use_after_return=1:log_path=$logs/san"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:abort_on_error=1:log_path=$logs/san"
export MTPROXY_CHECK_LOGS="$logs" # the harness checks each process's report after each test

rc=0
(cd "$build" && ctest --output-on-failure "$@") || rc=$?

reports=$(find "$logs" -type f | sort)
if [ -n "$reports" ]; then
    echo "sanitize.sh: sanitizer reports:" >&2
    for f in $reports; do
        echo "===== $f" >&2
        head -80 "$f" >&2
    done
    rc=1
fi
if [ "$rc" -eq 0 ]; then
    echo "sanitize.sh: all tests passed under ASan + UBSan ($CC), no sanitizer report"
else
    echo "sanitize.sh: FAILED" >&2
fi
exit "$rc"
