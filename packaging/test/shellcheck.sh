#!/bin/sh
# Lint test for ctest: shellchecks every packaging shell script (POSIX sh unless it says bash) (exit 77 = skipped).
# Usage: shellcheck.sh SOURCE_DIR
src=${1:?usage: shellcheck.sh SOURCE_DIR}
if ! command -v shellcheck >/dev/null 2>&1; then
    echo "shellcheck not found: skipped (apt-get install shellcheck)"
    exit 77
fi
cd "$src" || exit 1
set -- packaging/sysv/mtproxy \
    packaging/mtproxy-update-config \
    packaging/openwrt/files/mtproxy.init \
    packaging/openwrt/files/mtproxy-uci-gen.sh \
    packaging/openwrt/test/*.sh \
    packaging/cross/*.sh \
    packaging/docker/*.sh \
    packaging/test/*.sh \
    packaging/musl/*.sh \
    packaging/debian/test.sh \
    packaging/debian/postrm \
    packaging/debian/prerm \
    packaging/debian/nspawn.sh \
    packaging/openwrt/luci-app-mtproxy/root/usr/libexec/rpcd/luci.mtproxy \
    tests/check_packages.sh \
    tests/fresh/run.sh \
    .ci/apt-install-no-daemons
status=0
for f in "$@"; do
    [ -f "$f" ] || continue
    if shellcheck --external-sources "$f"; then
        echo "ok: $f"
    else
        echo "FAIL: $f"
        status=1
    fi
done
exit $status
