"""test_ipv6.py: IPv6 end to end: listener, DCs (prefer-ipv6, only-ipv4), fronting, SOCKS5, PROXY."""
import shutil
import socket
import threading

import pytest

from harness import FakeDC, Proc, T, assert_ok, free_ports, new_secret, wait_until

DOMAIN = "www.example.com"


def v6_dc(procs, lid=902, extra_v4=None):
    """A fake DC listening on [::1] (listener id lid), and on 127.0.0.1 as id 2 if asked."""
    port = free_ports(1)[0]
    listeners = [(2, "normal")] if extra_v4 else []
    dc = FakeDC(procs.bins, procs.workdir, listeners,
                extra=["--listen", f"[::1]:{port},{lid},normal"])
    procs.all.append(dc)
    return dc, f"[::1]:{port}"


def test_client_and_dc_over_ipv6(procs):
    plain, tls = new_secret(), "ee" + new_secret() + DOMAIN.encode().hex()
    dc, addr6 = v6_dc(procs)
    port6 = free_ports(1)[0]
    proxy = procs.proxy([("plain", plain), ("tls", tls)], [(2, addr6)],
                        extra=["--default-dc", "2", "--listen", f"[::1]:{port6}"])
    mark = dc.mark()
    assert_ok(procs.client(f"[::1]:{port6}", plain, "dd", 2, 200000, 200000))
    assert_ok(procs.client(f"[::1]:{port6}", tls, "dd", 2, 200000, 200000))
    # The fake DC logs a header when it has read it, which can come after the client's echo
    # on a loaded machine: wait for the line rather than read it once.
    assert wait_until(lambda: len(dc.matching(r"^HEADER listener=902 ", mark)) == 2, T(2))
    assert wait_until(lambda: "[::1]:" in proxy.stderr_tail(200), T(2))


def test_prefer_ipv6_and_only_ipv4(procs):
    plain = new_secret()
    dc, addr6 = v6_dc(procs, extra_v4=True)
    dcs = [(2, dc.addr(2)), (2, addr6)]
    p6 = procs.proxy([("plain", plain)], dcs, extra=["--prefer-ipv6", "on"], name="prefer6")
    mark = dc.mark()
    assert_ok(procs.client(p6, plain, "dd", 2, 5000, 5000))
    assert len(dc.matching(r"^HEADER listener=902 ", mark)) == 1
    p4 = procs.proxy([("plain", plain)], dcs, extra=["--only-ipv4", "on"], name="only4")
    mark = dc.mark()
    assert_ok(procs.client(p4, plain, "dd", 2, 5000, 5000))
    assert len(dc.matching(r"^HEADER listener=2 ", mark)) == 1
    assert len(dc.matching(r"^HEADER listener=902 ", mark)) == 0


class Web6:
    """A web server on [::1] that records what it got and answers 404."""

    REPLY = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

    def __init__(self):
        self.received = []
        self.lst = socket.socket(socket.AF_INET6)
        self.lst.bind(("::1", 0))
        self.lst.listen(8)
        self.port = self.lst.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, peer = self.lst.accept()
            except OSError:
                return
            got = b""
            c.settimeout(3)
            try:
                while b"\r\n\r\n" not in got:
                    d = c.recv(4096)
                    if not d:
                        break
                    got += d
                self.received.append((peer[0], got))
                c.sendall(self.REPLY)
            except OSError:
                pass
            c.close()


def test_fronting_over_ipv6(procs):
    web = Web6()
    plain = new_secret()
    dc, addr6 = v6_dc(procs)
    port6 = free_ports(1)[0]
    procs.proxy([("plain", plain)], [(2, addr6)],
                extra=["--default-dc", "2", "--listen", f"[::1]:{port6}", "--mask", "on",
                       "--mask-host", "::1", "--mask-port", str(web.port),
                       "--mask-proxy-protocol", "v2"])
    s = socket.create_connection(("::1", port6), timeout=T(5))
    req = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"y" * 50
    s.sendall(req)
    got = b""
    while True:
        d = s.recv(4096)
        if not d:
            break
        got += d
    s.close()
    assert got == Web6.REPLY
    peer, first = web.received[0]
    assert peer == "::1"
    # The v2 PROXY header names an IPv6 client (family byte 0x21), then the probe follows.
    assert first[:12] == b"\r\n\r\n\x00\r\nQUIT\n" and first[13] == 0x21, first[:16]
    assert first[16 + 36:].startswith(req[:30])


def test_socks5_over_ipv6(procs):
    exe = shutil.which("microsocks")
    if not exe:
        pytest.skip("microsocks not installed")
    sport = free_ports(1)[0]
    p = Proc("microsocks6", [exe, "-i", "::1", "-p", str(sport)], procs.workdir)
    procs.all.append(p)

    def up():
        try:
            socket.create_connection(("::1", sport), timeout=0.5).close()
            return True
        except OSError:
            return False
    assert wait_until(up, T(5))
    plain = new_secret()
    dc, addr6 = v6_dc(procs)
    proxy = procs.proxy([("plain", plain)], [(2, addr6)],
                        extra=["--default-dc", "2", "--socks5", f"socks5://[::1]:{sport}"])
    mark = dc.mark()
    assert_ok(procs.client(proxy, plain, "dd", 2, 100000, 100000))
    assert len(dc.matching(r"^HEADER listener=902 ", mark)) == 1
    p.stop()
    res = procs.client(proxy, plain, "dd", 2, 1000, 1000, "--timeout", "10")
    assert not res["ok"]
