#!/bin/sh
# systemd-verify.sh: ctest: `systemd-analyze verify` on the units, pointed at the built binary (77 = skipped).
# Usage: systemd-verify.sh UNIT MTPROXY_BIN WORKDIR [UPDATE_SCRIPT]
#   With UPDATE_SCRIPT, the mtproxy-update-config service and timer next to UNIT are checked too.
unit=${1:?usage: systemd-verify.sh UNIT MTPROXY_BIN WORKDIR [UPDATE_SCRIPT]}
bin=${2:?}
work=${3:?}
update=${4:-}
if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "systemd-analyze not found: skipped (apt-get install systemd)"
    exit 77
fi
rm -rf "$work"
mkdir -p "$work"
# verify needs ExecStart binaries that exist: use the ones just built (the script first, as
# its path starts with the binary's).
units=mtproxy.service
sed "s|/usr/bin/mtproxy|$bin|g" "$unit" >"$work/mtproxy.service"
if [ -n "$update" ]; then
    for u in mtproxy-update-config.service mtproxy-update-config.timer; do
        sed -e "s|/usr/bin/mtproxy-update-config|$update|g" -e "s|/usr/bin/mtproxy|$bin|g" \
            "$(dirname "$unit")/$u" >"$work/$u"
        units="$units $u"
    done
fi
status=0
for u in $units; do
    out=$(systemd-analyze verify --man=no "$work/$u" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    # Without a running systemd, verify may complain about the host (not the unit): only lines
    # naming our units count.
    if [ $rc -ne 0 ] || printf '%s\n' "$out" | grep -q 'mtproxy'; then
        echo "FAIL: systemd-analyze verify found problems in $u"
        status=1
    else
        echo "ok: systemd-analyze verify $u"
    fi
done
# Restart policy: a start that failed on a port or state-file lock still held exits 75 (src/main.c,
# after --check-config passed in ExecStartPre), so it must be retried: RestartPreventExitStatus
# (main process only) must not name 1 or 75, and the start limit must bound the retries.
grep -qx 'Restart=on-failure' "$unit" || { echo "FAIL: $unit: no Restart=on-failure"; status=1; }
# shellcheck disable=SC2013 # the values are words
for c in $(sed -n 's/^RestartPreventExitStatus=//p' "$unit"); do
    case "$c" in
    1 | 75 | EX_TEMPFAIL | TEMPFAIL)
        echo "FAIL: $unit: RestartPreventExitStatus=$c: mtproxy exits $c on a port or lock still held"
        status=1
        ;;
    esac
done
grep -q '^StartLimitBurst=' "$unit" || { echo "FAIL: $unit: no StartLimitBurst"; status=1; }
[ $status = 0 ] && echo "ok: restart policy retries a start on a port or lock still held"
exit $status
