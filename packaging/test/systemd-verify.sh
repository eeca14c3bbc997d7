#!/bin/sh
# systemd-verify.sh: ctest: `systemd-analyze verify` on the unit, pointed at the built binary (77 = skipped).
# Usage: systemd-verify.sh UNIT MTPROXY_BIN WORKDIR
unit=${1:?usage: systemd-verify.sh UNIT MTPROXY_BIN WORKDIR}
bin=${2:?}
work=${3:?}
if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "systemd-analyze not found: skipped (apt-get install systemd)"
    exit 77
fi
rm -rf "$work"
mkdir -p "$work"
# verify needs ExecStart binaries that exist: use the one just built.
sed "s|/usr/bin/mtproxy|$bin|g" "$unit" >"$work/mtproxy.service"
out=$(systemd-analyze verify --man=no "$work/mtproxy.service" 2>&1)
rc=$?
printf '%s\n' "$out"
# Without a running systemd, verify may complain about the host (not the unit): only lines
# naming our unit count.
if [ $rc -ne 0 ] || printf '%s\n' "$out" | grep -q 'mtproxy.service'; then
    echo "FAIL: systemd-analyze verify found problems in the unit"
    exit 1
fi
echo "ok: systemd-analyze verify $unit"
