#!/bin/sh
# test.sh: builds the Debian package, runs lintian, installs it with dpkg, checks it, purges it.
#
# Usage: packaging/debian/test.sh [WORKDIR]    (as root; default WORKDIR: a fresh mktemp -d)
# Copies the source tree (without build directories) to WORKDIR/mtproxy-VERSION with
# packaging/debian as debian/, runs dpkg-buildpackage -b -us -uc, then:
#   lintian on the .changes: any error or warning fails;
#   dpkg -i; the package holds the binary, both man pages, the unit, the config (a conffile),
#   and the system user mtproxy exists; `mtproxy --check-config` on the installed config in a
#   loopback-only network namespace says "configuration OK";
#   dpkg --purge: no file of the package, no /etc/mtproxy and no state directory remains.
# Prints: deb: mtproxy_V_ARCH.deb N bytes; lintian clean; install, check-config, purge OK.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-$(mktemp -d)}
version=$(sed -n '1s/^mtproxy (\([^-)]*\).*/\1/p' "$src/packaging/debian/changelog")
tree=$work/mtproxy-$version
fail() {
    echo "debian/test.sh: $*" >&2
    exit 1
}
[ "$(id -u)" -eq 0 ] || fail "run as root (dpkg -i)"

rm -rf "$tree" && mkdir -p "$tree"
(cd "$src" && tar --exclude='./build*' --exclude=./.git --exclude=./debian -cf - .) |
    (cd "$tree" && tar -xf -)
cp -r "$src/packaging/debian" "$tree/debian"
rm -f "$tree/debian/test.sh" "$tree/debian/nspawn.sh"

echo "[deb] dpkg-buildpackage in $tree"
(cd "$tree" && dpkg-buildpackage -b -us -uc -j"$(nproc)") >"$work/build.log" 2>&1 || {
    tail -n 60 "$work/build.log"
    fail "dpkg-buildpackage failed (log: $work/build.log)"
}
arch=$(dpkg --print-architecture)
deb=$work/mtproxy_${version}-$(sed -n '1s/^mtproxy ([^-]*-\([^)]*\)).*/\1/p' "$tree/debian/changelog")_$arch.deb
[ -f "$deb" ] || fail "no $deb"
changes=$(ls "$work"/mtproxy_*_"$arch".changes)

echo "[deb] lintian $changes"
lintian --fail-on error,warning "$changes" >"$work/lintian.log" 2>&1 || {
    cat "$work/lintian.log"
    fail "lintian reports errors or warnings"
}
cat "$work/lintian.log"

echo "[deb] dpkg -i $deb"
dpkg -i "$deb" >"$work/install.log" 2>&1 || {
    cat "$work/install.log"
    fail "dpkg -i failed"
}
for f in /usr/bin/mtproxy /usr/share/man/man8/mtproxy.8.gz /usr/share/man/man5/mtproxy.conf.5.gz \
    /lib/systemd/system/mtproxy.service /etc/mtproxy/mtproxy.conf \
    /usr/share/doc/mtproxy/copyright; do
    [ -e "$f" ] || fail "not installed: $f"
done
dpkg-query -W -f='${Conffiles}\n' mtproxy | grep -q '^ /etc/mtproxy/mtproxy.conf ' ||
    fail "/etc/mtproxy/mtproxy.conf is not a conffile"
getent passwd mtproxy >/dev/null || fail "the system user mtproxy was not created"
grep -q '^ExecStart=/usr/bin/mtproxy --config /etc/mtproxy/mtproxy.conf$' \
    /lib/systemd/system/mtproxy.service || fail "the unit does not run /usr/bin/mtproxy"
out=$(unshare -n sh -c 'ip link set lo up; /usr/bin/mtproxy --check-config --config /etc/mtproxy/mtproxy.conf' 2>&1) ||
    fail "check-config on the installed config: $out"
echo "$out" | grep -q 'configuration OK' || fail "check-config said: $out"
echo "[deb] installed: $out"

files=$(dpkg -L mtproxy | while read -r f; do [ -f "$f" ] && echo "$f"; done)
echo "[deb] dpkg --purge mtproxy"
dpkg --purge mtproxy >"$work/purge.log" 2>&1 || {
    cat "$work/purge.log"
    fail "dpkg --purge failed"
}
for f in $files /etc/mtproxy /var/lib/mtproxy; do
    [ ! -e "$f" ] || fail "left after purge: $f"
done
dpkg-query -W mtproxy >/dev/null 2>&1 && fail "dpkg still knows mtproxy after purge"
echo "deb: $(basename "$deb") $(wc -c <"$deb" | tr -d ' ') bytes; lintian clean; install, check-config, purge OK"
