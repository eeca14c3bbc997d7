#!/bin/sh
# valgrind.sh: runs the unit tests and the integration suite with mtproxy under valgrind memcheck.
#
# Usage: tests/valgrind.sh [PYTEST ARGS...]   e.g. tests/valgrind.sh -k routing
#   MTPROXY_VALGRIND_BUILD   build directory (default: build-valgrind at the top of the repo;
#                            a plain build: valgrind and the sanitizers do not mix)
#   MTPROXY_VALGRIND_UNIT=0  skip the unit tests
#   MTPROXY_VALGRIND_ARGS    extra valgrind options (e.g. --track-origins=yes)
#   MTPROXY_INTEGRATION_DIR  the pytest suite to run (default: tests/integration)
#
# The unit tests run under valgrind directly. For the integration suite the harness puts
# $MTPROXY_WRAPPER in front of every mtproxy command; each valgrind log goes to
# BUILD/valgrind-logs/vg.PID, the harness stops every proxy with SIGTERM at teardown (so the
# leak check runs), requires exit status 0 (99 = memcheck errors) and fails the test whose
# proxy's log has errors. This script then fails if any log has errors.
# Expect the suite to take about three times as long as without valgrind.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${MTPROXY_VALGRIND_BUILD:-$root/build-valgrind}
command -v valgrind >/dev/null 2>&1 ||
    { echo "valgrind.sh: valgrind is not installed" >&2; exit 2; }

mkdir -p "$build"
cmake -S "$root" -B "$build" -DMTPROXY_SANITIZE=OFF -DMTPROXY_BENCH=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build/configure.log" 2>&1 ||
    { cat "$build/configure.log" >&2; exit 1; }
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" >"$build/build.log" 2>&1 ||
    { tail -60 "$build/build.log" >&2; exit 1; }

logs=$build/valgrind-logs
rm -rf "$logs"
mkdir -p "$logs"
vg="valgrind --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible \
--errors-for-leak-kinds=definite,indirect,possible --num-callers=30 ${MTPROXY_VALGRIND_ARGS:-}"
rc=0

# --- unit tests ------------------------------------------------------------------------------
if [ "${MTPROXY_VALGRIND_UNIT:-1}" != 0 ]; then
    export MTPROXY_VECTORS="$root/tests/vectors"
    units=$(cd "$build" && ctest -N -L unit | sed -n 's/^ *Test *#[0-9]*: unit_\(.*\)$/\1/p')
    for u in $units; do
        exe=$build/tests/test_$u
        if $vg --log-file="$logs/unit_$u.log" "$exe" >"$logs/unit_$u.out" 2>&1; then
            echo "unit_$u: ok"
        else
            echo "unit_$u: FAILED (rc $?, see $logs/unit_$u.log)" >&2
            rc=1
        fi
    done
fi

# --- integration suite, mtproxy under valgrind ----------------------------------------------
(cd "$build" && ctest -R '^integration_venv$' >/dev/null) ||
    { echo "valgrind.sh: cannot set up the integration venv" >&2; exit 1; }
export MTPROXY_BIN="$build/mtproxy"
export FAKE_DC_BIN="$build/tests/tools/fake_dc"
export TEST_CLIENT_BIN="$build/tests/tools/test_client"
export MTPROXY_WRAPPER="$vg --log-file=$logs/vg.%p"
export MTPROXY_CHECK_LOGS="$logs"
export PYTHONDONTWRITEBYTECODE=1
suite=${MTPROXY_INTEGRATION_DIR:-$here/integration}
(cd "$build" && "$build/tests/integration/venv/bin/python" -m pytest -p no:cacheprovider -q \
    -o junit_family=xunit2 --junitxml="$logs/integration.xml" "$suite" "$@") || rc=1

# --- summary ---------------------------------------------------------------------------------
nlogs=0
bad=""
for f in "$logs"/vg.* "$logs"/unit_*.log; do
    [ -f "$f" ] || continue
    nlogs=$((nlogs + 1))
    grep -qE 'ERROR SUMMARY: [1-9]' "$f" && bad="$bad $f"
done
echo "valgrind.sh: $nlogs valgrind runs checked"
if [ -n "$bad" ]; then
    for f in $bad; do
        echo "===== $f" >&2
        grep -E '^==[0-9]+== ' "$f" | head -60 >&2
    done
    rc=1
fi
[ "$rc" -eq 0 ] && echo "valgrind.sh: clean" || echo "valgrind.sh: FAILED" >&2
exit "$rc"
