"""test_ipv6_prefix.py: listen-prefix: one IPv6 address per user from a ULA /64 routed to lo
(AnyIP), links carrying it, foreign addresses refused, rotation with a grace, restarts."""
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from harness import (DC_IDS, Proc, T, assert_ok, free_ports, mtproxy_argv, new_secret,
                     wait_until)
from test_metrics import http_get

PREFIX = "fd00:6d74:7072::"
NET = ipaddress.ip_network(PREFIX + "/64")
ROUTE = f"{PREFIX}/64"

# The ULA exists only on lo of the test's own namespace (tests/netns.sh); ip(8) sets it up there.
pytestmark = pytest.mark.skipif(
    os.environ.get("MTPROXY_IN_NETNS") != "1" or os.geteuid() != 0 or not shutil.which("ip"),
    reason="needs root in the tests' network namespace (tests/netns.sh) and ip(8)")


def route_present():
    out = subprocess.run(["ip", "-6", "route", "show", "table", "local"], capture_output=True,
                         text=True).stdout
    return any(line.startswith(f"local {ROUTE} ") for line in out.splitlines())


def route_del():
    subprocess.run(["ip", "-6", "route", "del", "local", ROUTE, "dev", "lo", "table", "local"],
                   capture_output=True)


class PrefixEnv:
    """fake_dc and a proxy with n users, listen-prefix on the ULA /64 and the metrics server."""

    def __init__(self, procs, n, extra=(), users=None):
        self.procs = procs
        self.dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
        self.users = users or [(f"u{i}", new_secret()) for i in range(n)]
        self.port, self.mport = free_ports(2)
        self.pidfile = os.path.join(procs.workdir, "mtproxy.pid")
        self.extra = ["--listen-prefix", f"[{PREFIX}]/64:{self.port}",
                      "--metrics", f"127.0.0.1:{self.mport}", "--pidfile", self.pidfile,
                      "--workers", "2"] + list(extra)
        self.start()

    def start(self):
        self.proxy = self.procs.proxy(self.users, [(i, self.dc.addr(i)) for i in DC_IDS],
                                      extra=self.extra)
        self.args = self.proxy.argv[len(mtproxy_argv(self.procs.bins)):]

    def restart(self):
        rc, _ = self.proxy.stop(signal.SIGTERM, timeout=15)
        assert rc == 0
        self.start()

    def tool(self, *cmd):
        """Runs `mtproxy CMD... <the proxy's own arguments>`; returns (rc, stdout)."""
        p = subprocess.run(mtproxy_argv(self.procs.bins, *cmd) + self.args,
                           capture_output=True, text=True, timeout=T(30))
        return p.returncode, p.stdout + p.stderr

    def links(self):
        """{user: address} from `mtproxy links`, each link checked to carry it and the port."""
        rc, out = self.tool("links", "--no-qr")
        assert rc == 0, out
        found = {}
        for name, body in re.findall(r"^user (\S+):\n((?:  .*\n)+)", out, re.M):
            servers = set(re.findall(r"server=([^&\s]+)&port=(\d+)", body))
            assert len(servers) == 1, body
            addr, port = servers.pop()
            assert int(port) == self.port
            found[name] = addr
        return found

    def stats(self):
        return json.loads(http_get(self.mport, "/stats")[2])

    def refusals(self):
        """{user: foreign-address refusals} from /metrics."""
        body = http_get(self.mport, "/metrics")[2].decode()
        return {u: int(v) for u, v in re.findall(
            r'^mtproxy_user_foreign_address_refusals_total\{user="([^"]+)"\} (\d+)$', body,
            re.M)}

    def client(self, addr, secret, **kw):
        return self.procs.client(f"[{addr}]:{self.port}", secret, "dd", 2, 2000, 2000, **kw)

    def client_bg(self, addr, secret):
        return self.procs.client_bg(f"[{addr}]:{self.port}", secret, "dd", 2, 2000, 2000,
                                    "--timeout", "8")


def assert_held(res):
    """Treated like a bad client with mask off: nothing answered, closed by the proxy."""
    assert not res["ok"] and res["hellos"] == 0 and res["rx_before_hello"] == 0, res
    assert all(re.search(r"hello: (eof|reset)", e) for e in res["errors"]), res


def test_route_not_permitted_names_the_ip_line(procs):
    """Without CAP_NET_ADMIN the proxy cannot add the route: it says which line to run."""
    if not shutil.which("setpriv"):
        pytest.skip("setpriv(1) not found")
    route_del()
    port = free_ports(1)[0]
    argv = ["setpriv", "--bounding-set", "-net_admin", "--inh-caps", "-net_admin"] + \
        mtproxy_argv(procs.bins, "--listen", f"127.0.0.1:{free_ports(1)[0]}", "--secret",
                     f"a:{new_secret()}", "--dc-builtin", "off", "--dc", "2 127.0.0.1:9",
                     "--state-file", os.path.join(procs.workdir, "np.state"),
                     "--tls-profile", "off", "--listen-prefix", f"[{PREFIX}]/64:{port}")
    p = Proc("noperm", argv, procs.workdir)
    procs.all.append(p)
    want = f"run `ip -6 route add local {ROUTE} dev lo`"
    assert wait_until(lambda: want in p.stderr_tail(100), T(10)), p.stderr_tail(30)
    assert not route_present()
    p.stop(signal.SIGTERM)


def test_fifty_users_each_on_its_own_address(procs):
    route_del()
    env = PrefixEnv(procs, 50)
    # the proxy added the AnyIP route itself (root in the namespace)
    assert route_present()
    assert wait_until(lambda: "listen-prefix: added the local route" in env.proxy.stderr_tail(200),
                      T(5))
    addrs = env.links()
    assert sorted(addrs) == sorted(n for n, _ in env.users)
    assert len(set(addrs.values())) == 50
    assert all(ipaddress.ip_address(a) in NET for a in addrs.values())
    # /stats shows each user's address and links carrying it (metrics on loopback: links on)
    st = {u["name"]: u for u in env.stats()["users"]}
    for name, addr in addrs.items():
        assert st[name]["address"] == addr
        assert f"server={addr}&port={env.port}&" in st[name]["tg"]
    # each user is served on its own address
    for name, secret in env.users:
        assert_ok(env.client(addrs[name], secret))
    # ... and on no other: user i's secret on user i+1's address, all at once
    bg = []
    for i, (name, secret) in enumerate(env.users):
        other = env.users[(i + 1) % 50][0]
        bg.append(env.client_bg(addrs[other], secret))
    for p in bg:
        assert_held(procs.result(p, timeout=30))
    # an address of the prefix that is nobody's, and the proxy's own ::1 listener port
    nobody = str(NET.network_address + 0x1234)
    assert nobody not in addrs.values()
    assert_held(env.client(nobody, env.users[0][1]))
    assert "not the user's address; holding" in env.proxy.stderr_tail(2000)
    # counted per user: one foreign each, u0 one more (nobody's address)
    ref = env.refusals()
    assert ref == {n: (2 if n == "u0" else 1) for n, _ in env.users}, ref
    assert st["u0"]["foreign_address_refusals"] == 0  # (read before)
    assert {u["name"]: u["foreign_address_refusals"] for u in env.stats()["users"]} == ref
    # the ordinary listener still serves everyone
    assert_ok(procs.client(env.proxy, env.users[7][1], "dd", 2, 1000, 1000))


def test_foreign_address_is_fronted_when_masking(procs):
    """With a mask server, a secret on another user's address goes to the site like a probe."""
    from test_faketls import TlsEnv, assert_fronted
    port = free_ports(1)[0]
    env = TlsEnv(procs, extra=["--listen-prefix", f"[{PREFIX}]/64:{port}"])
    rc_out = subprocess.run(
        mtproxy_argv(procs.bins, "links", "--no-qr")
        + env.proxy.argv[len(mtproxy_argv(procs.bins)):],
        capture_output=True, text=True, timeout=T(30))
    addrs = dict(re.findall(r"^user (\S+):\n  tg://proxy\?server=([^&]+)&", rc_out.stdout, re.M))
    assert_ok(procs.client(f"[{addrs['tls']}]:{port}", env.ee, "dd", 2, 1000, 1000))
    mark = env.dc.mark()
    res = procs.client(f"[{addrs['tls2']}]:{port}", env.ee, "dd", 2, 1000, 1000)
    assert_fronted(env, res, mark)


def test_rotation_grace_and_restart(procs):
    env = PrefixEnv(procs, 5, extra=["--listen-prefix-grace", "3s"])
    before = env.links()
    name, secret = env.users[2]
    old = before[name]
    t_cmd = time.monotonic()
    rc, out = env.tool("user", "rotate-address", name)
    assert rc == 0, out
    assert "sent SIGHUP" in out, out
    new = re.search(r"new address (\S+)", out).group(1)
    assert new != old and ipaddress.ip_address(new) in NET
    assert wait_until(lambda: "configuration 2 loaded" in env.proxy.stderr_tail(300), T(5))
    t_rot = time.monotonic()
    after = env.links()
    assert after[name] == new
    assert {k: v for k, v in after.items() if k != name} == \
        {k: v for k, v in before.items() if k != name}
    assert env.stats()["users"][2]["address"] == new
    # the new address serves at once; the old one still does, within its grace
    assert_ok(env.client(new, secret))
    # (the rotation time is kept in whole seconds: the grace ends 2 to 3 s after t_cmd; a slow
    # machine may be past it already)
    if time.monotonic() - t_cmd < 1.5:
        assert_ok(env.client(old, secret))
    # past the grace the old address is nobody's
    time.sleep(max(0.0, 3.3 - (time.monotonic() - t_rot)))
    assert_held(env.client(old, secret))
    assert_ok(env.client(new, secret))
    assert env.refusals()[name] == 1
    # unknown user: an error, nothing changed
    rc, out = env.tool("user", "rotate-address", "nosuch")
    assert rc != 0 and "no user" in out
    # addresses survive a restart (the key and generations are kept beside the state file)
    env.restart()
    assert env.links() == after
    for n, s in env.users:
        assert_ok(env.client(after[n], s))
    assert_held(env.client(old, secret))


def test_bad_listen_prefix_values(procs):
    for bad, why in [("[fd00::]/64", "is not"), ("[fd00::1]/64:443", "host bits"),
                     ("[fd00::]/200:443", "length"), ("[10.0.0.0]/8:443", "is not")]:
        p = subprocess.run(mtproxy_argv(procs.bins, "--check-config", "--secret",
                                        f"a:{new_secret()}", "--listen-prefix", bad),
                           capture_output=True, text=True, timeout=T(30))
        assert p.returncode == 2 and why in p.stderr, (bad, p.stderr)
    # a /120 leaves too few host bits for distinct per-user addresses
    port = free_ports(1)[0]
    p = subprocess.run(mtproxy_argv(procs.bins, "links", "--secret", f"a:{new_secret()}",
                                    "--listen-prefix-key", "ab" * 32,
                                    "--listen-prefix", f"[{PREFIX}]/120:{port}"),
                       capture_output=True, text=True, timeout=T(30))
    assert p.returncode != 0 and "32 host bits" in p.stderr, p.stderr


def derived(key_hex, name, gen, net=NET):
    """The address prefix.h documents: HMAC-SHA256(key, "mtproxy-addr\\0" NAME "\\0" GEN32LE)'s
    first host bits in the prefix (all zero: ...1)."""
    import hashlib
    import hmac
    d = hmac.new(bytes.fromhex(key_hex), b"mtproxy-addr\0" + name.encode() + b"\0" +
                 gen.to_bytes(4, "little"), hashlib.sha256).digest()
    bits = 128 - net.prefixlen
    host = int.from_bytes(d, "big") >> (256 - bits) or 1
    return str(ipaddress.ip_address(int(net.network_address) | host))


def test_configured_key_gives_the_documented_addresses(procs):
    """listen-prefix-key: addresses anyone can recompute; rotation keeps the key out of the file."""
    key = os.urandom(32).hex()
    state = os.path.join(procs.workdir, "k.state")
    base = ["--secret", f"alice:{new_secret()}", "--secret", f"bob:{new_secret()}",
            "--state-file", state, "--listen-prefix-key", key,
            "--listen-prefix", f"[{PREFIX}]/64:4443"]

    def links():
        p = subprocess.run(mtproxy_argv(procs.bins, "links", "--no-qr", *base),
                           capture_output=True, text=True, timeout=T(30))
        assert p.returncode == 0, p.stderr
        return dict(re.findall(r"^user (\S+):\n  tg://proxy\?server=([^&]+)&port=4443&",
                               p.stdout, re.M))

    assert links() == {"alice": derived(key, "alice", 0), "bob": derived(key, "bob", 0)}
    p = subprocess.run(mtproxy_argv(procs.bins, "user", "rotate-address", "bob", *base),
                       capture_output=True, text=True, timeout=T(30))
    assert p.returncode == 0 and derived(key, "bob", 1) in p.stdout, p.stdout + p.stderr
    assert "send it SIGHUP" in p.stdout  # no pidfile: says what to do
    text = open(state + ".addresses").read()
    assert re.search(r"^user = bob 1 \d+$", text, re.M) and "key =" not in text, text
    assert links() == {"alice": derived(key, "alice", 0), "bob": derived(key, "bob", 1)}
