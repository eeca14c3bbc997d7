#!/bin/sh
# netns.sh COMMAND [ARGS...]: runs a test in a network namespace of its own with only loopback
# up, so that nothing it starts can reach an address outside 127.0.0.0/8 or ::1, even by mistake
# (the built-in DC table holds Telegram's real addresses; tests must only ever dial their fake DC).
# Needs root, unshare(1) and ip(8). Without them the test runs as it is, with a warning on
# stderr, unless MTPROXY_REQUIRE_NETNS=1 (.ci/run sets it): then it fails.
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null 2>&1 && command -v ip >/dev/null 2>&1 &&
    unshare -n true 2>/dev/null; then
    exec unshare -n env MTPROXY_IN_NETNS=1 sh -c 'ip link set lo up && exec "$@"' netns "$@"
fi
if [ "${MTPROXY_REQUIRE_NETNS:-0}" = 1 ]; then
    echo "netns.sh: cannot make a network namespace (needs root, unshare, ip)" >&2
    exit 1
fi
echo "netns.sh: no network namespace (needs root, unshare, ip): running with the host's network" >&2
exec "$@"
