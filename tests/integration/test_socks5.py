"""test_socks5.py: upstream through SOCKS5: a real server (microsocks), logins, every refusal code."""
import os
import shutil
import signal
import socket
import subprocess
import threading

import pytest

from harness import (DC_IDS, FakeWeb, Proc, T, assert_ok, free_ports, mtproxy_argv, new_secret,
                     relay_pair, wait_until)
from proxyinfo import stats


def microsocks(procs, user=None, password=None):
    exe = shutil.which("microsocks")
    if not exe:
        pytest.skip("microsocks not installed (Debian package microsocks)")
    port = free_ports(1)[0]
    argv = [exe, "-i", "127.0.0.1", "-p", str(port)]
    if user:
        argv += ["-u", user, "-P", password]
    p = Proc("microsocks", argv, procs.workdir)
    procs.all.append(p)
    assert wait_until(lambda: _listening(port), T(5)), "microsocks did not start"
    return port, p


def dante(procs):
    """Dante's danted (Debian dante-server) on a loopback port, no login, connects logged to its
    stderr. Unlike microsocks it reports in the CONNECT reply where it connects from."""
    exe = shutil.which("danted") or ("/usr/sbin/danted" if os.access("/usr/sbin/danted", os.X_OK)
                                     else None)
    if not exe:
        pytest.skip("danted not installed (Debian package dante-server)")
    port = free_ports(1)[0]
    conf = os.path.join(procs.workdir, f"danted-{port}.conf")
    with open(conf, "w") as f:
        f.write(f"logoutput: stderr\ninternal: 127.0.0.1 port = {port}\nexternal: 127.0.0.1\n"
                "clientmethod: none\nsocksmethod: none\nuser.privileged: root\n"
                "user.unprivileged: nobody\n"
                "client pass { from: 127.0.0.0/8 to: 0.0.0.0/0 log: connect }\n"
                "socks pass { from: 127.0.0.0/8 to: 0.0.0.0/0 log: connect }\n")
    p = Proc("danted", [exe, "-f", conf, "-N", "1"], procs.workdir)
    procs.all.append(p)
    assert wait_until(lambda: _listening(port), T(10)), p.stderr_tail(20)
    return port, p


def _listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


class ScriptedSocks:
    """A SOCKS5 server that accepts the greeting and answers every CONNECT with `code`.
    stop() closes its listener and the connections it holds; start() listens again on the same
    port."""

    def __init__(self, code):
        self.code = code
        self.connects = []  # each CONNECT request's first 4 bytes
        self.held = []
        self.port = 0
        self.start()

    def start(self):
        self.lst = socket.socket()
        self.lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lst.bind(("127.0.0.1", self.port))
        self.lst.listen(16)
        self.port = self.lst.getsockname()[1]
        threading.Thread(target=self._accept, args=(self.lst,), daemon=True).start()

    def _accept(self, lst):
        while True:
            try:
                c, _ = lst.accept()
            except OSError:
                return
            self.held.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            c.settimeout(5)
            g = c.recv(2)
            c.recv(g[1])
            c.sendall(b"\x05\x00")
            req = c.recv(4)
            alen = {1: 4, 4: 16}.get(req[3], 0)
            addr = c.recv(alen + 2)
            self.connects.append(req)
            self.answer(c, req, addr)
        except (OSError, IndexError):
            pass
        finally:
            c.close()

    def answer(self, c, req, addr):
        c.sendall(bytes([5, self.code, 0, 1, 0, 0, 0, 0, 0, 0]))
        c.recv(1)

    def stop(self):
        try:
            self.lst.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept
        except OSError:
            pass
        self.lst.close()
        for s in self.held:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self.held = []

    close = stop


class RelaySocks(ScriptedSocks):
    """A relaying SOCKS5 server (IPv4 targets, no login) that, like Dante, reports in its
    CONNECT reply the address it connects from (BND.ADDR/BND.PORT). .targets: (host, port,
    our outgoing port) per CONNECT."""

    def __init__(self):
        self.targets = []
        super().__init__(0)

    def answer(self, c, req, addr):
        host, port = socket.inet_ntoa(addr[:4]), int.from_bytes(addr[4:6], "big")
        up = socket.create_connection((host, port), timeout=5)
        self.held.append(up)
        bh, bp = up.getsockname()
        self.targets.append((host, port, bp))
        c.sendall(b"\x05\x00\x00\x01" + socket.inet_aton(bh) + bp.to_bytes(2, "big"))
        c.settimeout(None)
        up.settimeout(None)
        relay_pair(c, up)


def proxy_via(procs, url, extra=()):
    secret = new_secret()
    dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
    proxy = procs.proxy([("plain", secret)], [(i, dc.addr(i)) for i in DC_IDS],
                        extra=["--socks5", url] + list(extra))
    return secret, dc, proxy


@pytest.mark.parametrize("pool", [0, 2])
def test_through_microsocks(procs, pool):
    port, server = microsocks(procs)
    secret, dc, proxy = proxy_via(procs, f"socks5://127.0.0.1:{port}",
                                  ["--dc-pool", str(pool)])
    for tag in ("ef", "dd"):
        assert_ok(procs.client(proxy, secret, tag, 2, 300000, 300000, "--expect-id", 2))
    st = stats(proxy)
    assert st["dc_connects"] >= 2 and st["socks_fails"] == 0, st
    # The DC is reached only through the SOCKS server: without it, clients are not served.
    server.stop(signal.SIGKILL)
    res = procs.client(proxy, secret, "dd", 2, 1000, 1000, "--timeout", "10")
    assert not res["ok"], res


def test_login(procs):
    port, _ = microsocks(procs, "alice", "s:cr@t")
    secret, dc, proxy = proxy_via(procs, f"socks5://alice:s%3Acr%40t@127.0.0.1:{port}")
    assert_ok(procs.client(proxy, secret, "dd", 3, 50000, 50000, "--expect-id", 3))
    # A wrong password: the server's refusal is logged and the client is closed, never hangs.
    secret2, dc2, proxy2 = proxy_via(procs, f"socks5://alice:wrong@127.0.0.1:{port}")
    res = procs.client(proxy2, secret2, "dd", 3, 1000, 1000, "--timeout", "10")
    assert not res["ok"]
    assert wait_until(lambda: "refused the username/password" in proxy2.stderr_tail(400), T(3))
    # No login given to a server that wants one.
    secret3, dc3, proxy3 = proxy_via(procs, f"socks5://127.0.0.1:{port}")
    res = procs.client(proxy3, secret3, "dd", 3, 1000, 1000, "--timeout", "10")
    assert not res["ok"]
    assert wait_until(lambda: "requires a login" in proxy3.stderr_tail(400), T(3))


RFC1928 = {1: "general SOCKS server failure", 2: "connection not allowed by ruleset",
           3: "network unreachable", 4: "host unreachable", 5: "connection refused",
           6: "TTL expired", 7: "command not supported", 8: "address type not supported"}


@pytest.mark.parametrize("code", sorted(RFC1928))
def test_each_refusal_code(procs, code):
    srv = ScriptedSocks(code)
    try:
        secret, dc, proxy = proxy_via(procs, f"socks5://127.0.0.1:{srv.port}")
        res = procs.client(proxy, secret, "ef", 2, 1000, 1000, "--timeout", "10")
        assert not res["ok"]
        want = f"{RFC1928[code]} (reply {code})"
        assert wait_until(lambda: want in proxy.stderr_tail(400), T(3)), proxy.stderr_tail(40)
        assert srv.connects and srv.connects[0][:2] == b"\x05\x01"
        assert dc.headers() == 0
        assert stats(proxy)["socks_fails"] >= 1
    finally:
        srv.close()


def test_mask_through_socks(procs):
    port, server = microsocks(procs)
    web = FakeWeb()
    try:
        secret, dc, proxy = proxy_via(procs, f"socks5://127.0.0.1:{port}",
                                      ["--mask", "on", "--mask-host", "127.0.0.1",
                                       "--mask-port", str(web.port), "--socks5-mask", "on"])
        s = socket.create_connection(("127.0.0.1", proxy.port), timeout=T(5))
        req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"x" * 60
        s.sendall(req)
        got = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        s.close()
        assert got == FakeWeb.REPLY
        # the site reads up to the end of the request head; the rest may come after it
        assert req.startswith(bytes(web.received[0])) and b"\r\n\r\n" in web.received[0]
        server.stop(signal.SIGKILL)  # fronting depends on it: now the probe is not forwarded
        s = socket.create_connection(("127.0.0.1", proxy.port), timeout=T(5))
        s.sendall(req)
        try:
            assert s.recv(4096) == b""
        except ConnectionResetError:
            pass
        s.close()
        assert len(web.received) == 1
    finally:
        web.close()


def test_bad_url_is_a_config_error(bins):
    r = subprocess.run(mtproxy_argv(bins, "--check-config", "--listen", "127.0.0.1:1",
                                    "--secret", f"a:{new_secret()}", "--dc-builtin", "off",
                                    "--dc", "2 127.0.0.1:1", "--mask", "off",
                                    "--socks5", "socks5://u@127.0.0.1:1080"),
                       capture_output=True, timeout=T(20))
    out = (r.stdout + r.stderr).decode()
    assert r.returncode != 0 and "--socks5: " in out and "USER:PASS@" in out, out
