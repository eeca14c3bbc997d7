"""test_proxyproto.py: proxy-protocol = on: the PROXY header's address is the client's everywhere."""
import os
import socket
import struct
import subprocess
import time

import pytest

from harness import (DC_IDS, FakeWeb, T, free_ports, mtproxy_argv, new_secret,
                     wait_until)
from proxyinfo import stats
import rawclient

SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def v1(src, sport=40000, dport=443):
    fam = "TCP6" if ":" in src else "TCP4"
    dst = "::1" if ":" in src else "127.0.0.1"
    return f"PROXY {fam} {src} {dst} {sport} {dport}\r\n".encode()


def v2(src, sport=40000, dport=443, local=False, tlvs=b""):
    if local:
        return SIG + b"\x20\x00" + struct.pack(">H", 0)
    if ":" in src:
        body = (socket.inet_pton(socket.AF_INET6, src) + socket.inet_pton(socket.AF_INET6, "::1")
                + struct.pack(">HH", sport, dport))
        fam = 0x21
    else:
        body = (socket.inet_aton(src) + socket.inet_aton("127.0.0.1")
                + struct.pack(">HH", sport, dport))
        fam = 0x11
    body += tlvs
    return SIG + bytes([0x21, fam]) + struct.pack(">H", len(body)) + body


@pytest.fixture
def env(procs, request):
    extra = getattr(request, "param", [])
    secret = new_secret()
    dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
    proxy = procs.proxy([("plain", secret)], [(i, dc.addr(i)) for i in DC_IDS],
                        extra=["--proxy-protocol", "on"] + list(extra))
    return secret, dc, proxy


def session(proxy, secret, header, bind=None, split=False):
    """PROXY header, then a valid obfuscated2 header and test request. Returns (bytes received
    (up to 64), how it ended)."""
    s = rawclient.connect(proxy.addr, bind=bind, timeout=T(3))
    o = rawclient.Obfs2(secret, "ee", 2)
    payload = header + o.wire_header + o.encrypt(rawclient.test_request(0, 1000))
    try:
        if split:  # one byte at a time through the header: reassembled across reads
            for i in range(len(header)):
                s.sendall(payload[i:i + 1])
                time.sleep(0.002)
            s.sendall(payload[len(header):])
        else:
            s.sendall(payload)
    except (BrokenPipeError, ConnectionResetError):
        return b"", "reset"
    got, how = b"", "open"
    try:
        while len(got) < 64:
            chunk = s.recv(4096)
            if not chunk:
                how = "eof"
                break
            got += chunk
    except ConnectionResetError:
        how = "reset"
    except socket.timeout:
        how = "open"
    finally:
        s.close()
    return got, how


def baseline(proxy):
    """Counters once the harness's own start-up probe (a connect and close, no header) has
    been handled: it counts as a bad header, or as untrusted with proxy-protocol-from."""
    box = {}

    def probed():
        box["st"] = stats(proxy)
        return box["st"]["pp_bad"] + box["st"]["pp_untrusted"] >= 1
    assert wait_until(probed, T(3))
    return box["st"]


def served(res):
    return len(res[0]) >= 64


def refused(res):
    return res[0] == b"" and res[1] in ("eof", "reset")


@pytest.mark.parametrize("env", [["--deny", "10.9.8.7", "--deny", "2001:db8::66"]],
                         indirect=True)
def test_header_address_is_the_client(env):
    secret, dc, proxy = env
    for i, hdr in enumerate((v1, v2)):
        assert served(session(proxy, secret, hdr("10.1.2.3"))), hdr
        assert served(session(proxy, secret, hdr("2001:db8::1"))), hdr
        # The harness reads the fake DC's lines in a thread: let the served ones land first.
        wait_until(lambda: dc.headers() >= 2 * (i + 1), 5)
        mark = dc.mark()
        assert refused(session(proxy, secret, hdr("10.9.8.7"))), hdr
        assert refused(session(proxy, secret, hdr("2001:db8::66"))), hdr
        assert dc.headers(mark) == 0
    # v2 TLVs are skipped; a header split across many reads is reassembled.
    assert served(session(proxy, secret, v2("10.1.2.4", tlvs=b"\x01\x00\x02h2\x04\x00\x01\x00")))
    assert served(session(proxy, secret, v1("10.1.2.5"), split=True))
    assert served(session(proxy, secret, v2("10.1.2.6"), split=True))
    st = stats(proxy)
    assert st["acl_denied"] == 4, st
    # Logs name the client from the header, not the balancer.
    assert wait_until(lambda: "10.1.2.3:40000" in proxy.stderr_tail(2000), T(2))


def test_missing_or_bad_header(env):
    secret, dc, proxy = env
    st0 = baseline(proxy)
    mark = dc.mark()
    t0 = time.monotonic()
    # A client that speaks straight away (no balancer in between): closed, never served.
    assert refused(session(proxy, secret, b""))
    assert time.monotonic() - t0 < T(1)
    assert refused(session(proxy, secret, b"PROXY TCP4 1.2.3.4 5.6.7.8 1 99999\r\n"))
    assert refused(session(proxy, secret, SIG + b"\x21\x11\x00\x04abcd"))
    assert dc.headers(mark) == 0
    # A LOCAL header (a health check) is closed cleanly.
    s = rawclient.connect(proxy.addr, timeout=T(3))
    s.sendall(v2("", local=True))
    assert s.recv(100) == b""
    s.close()
    # Silence: closed at the handshake timeout, not fronted or held longer.
    s = rawclient.connect(proxy.addr, timeout=T(5))
    t0 = time.monotonic()
    s.sendall(b"PROXY TCP4 ")
    assert s.recv(100) == b""
    assert time.monotonic() - t0 < T(3)
    s.close()
    st = stats(proxy)
    assert st["pp_bad"] - st0["pp_bad"] == 4 and st["pp_local"] == 1, (st0, st)
    assert served(session(proxy, secret, v1("10.1.2.3")))


@pytest.mark.parametrize("env", [["--proxy-protocol-from", "127.0.0.2/32"]], indirect=True)
def test_only_trusted_senders(env):
    secret, dc, proxy = env
    st0 = baseline(proxy)
    assert refused(session(proxy, secret, v1("10.1.2.3"), bind="127.0.0.1"))
    assert served(session(proxy, secret, v1("10.1.2.3"), bind="127.0.0.2"))
    st = stats(proxy)
    assert st["pp_untrusted"] - st0["pp_untrusted"] == 1, (st0, st)


def test_fronting_gets_the_client_address(procs):
    web = FakeWeb()
    try:
        secret = new_secret()
        dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
        proxy = procs.proxy([("plain", secret)], [(i, dc.addr(i)) for i in DC_IDS],
                            extra=["--proxy-protocol", "on", "--mask", "on",
                                   "--mask-host", "127.0.0.1", "--mask-port", str(web.port),
                                   "--mask-proxy-protocol", "v1"])
        s = rawclient.connect(proxy.addr, timeout=T(5))
        probe = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(40)
        s.sendall(v2("198.51.100.9", sport=31337) + probe)
        got = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        s.close()
        assert got == FakeWeb.REPLY
        first = bytes(web.received[0])
        assert first.startswith(b"PROXY TCP4 198.51.100.9 "), first[:80]
        assert b" 31337 " in first.split(b"\r\n", 1)[0]
        assert first.split(b"\r\n", 1)[1].startswith(probe[:20])
    finally:
        web.close()


@pytest.mark.parametrize("hdr", [v1, v2])
def test_accept_rate_per_header_address(procs, hdr):
    """accept-rate counts the address a trusted PROXY header names, not the balancer's: one
    claimed address flooding is refused while another behind the same balancer is served."""
    secret = new_secret()
    dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
    proxy = procs.proxy([("plain", secret)], [(i, dc.addr(i)) for i in DC_IDS],
                        extra=["--proxy-protocol", "on", "--accept-rate", "3/s"])
    baseline(proxy)  # the harness's probe (no header) counts as pp_bad, not against any rate
    # accept-rate's window is one second of wall time: the flood and both checks must land in
    # the same one; a slow run (qemu) that crossed a boundary tries again in the next second.
    for _ in range(6):
        st0 = stats(proxy)
        time.sleep(1.0 - time.time() % 1.0 + 0.02)
        start = time.time()
        flood = []
        for _ in range(6):  # 6 from one claimed address: 3 pass, 3 are over its rate
            s = rawclient.connect(proxy.addr, timeout=T(3))
            s.sendall(hdr("10.0.0.1"))
            flood.append(s)
        other = session(proxy, secret, hdr("10.0.0.2"))
        again = session(proxy, secret, hdr("10.0.0.1"))
        one_second = time.time() - start < 0.9
        for s in flood:
            s.close()
        if one_second:
            break
    else:
        pytest.fail("the flood and its checks never fitted in one second")
    assert served(other), other  # the same balancer, another client: not refused
    assert refused(again), again
    st = stats(proxy)
    assert st["acc_rate"] - st0["acc_rate"] == 4, (st0, st)
    assert st["accept-rate"] - st0["accept-rate"] == 4, (st0, st)


def open_trust_argv(procs, port, *extra):
    return mtproxy_argv(procs.bins, "--listen", f"0.0.0.0:{port}", "--proxy-protocol", "on",
                        "--secret", f"plain:{new_secret()}", "--dc-builtin", "off",
                        "--dc", "2 127.0.0.1:1", "--state-file",
                        os.path.join(procs.workdir, "open.state"), *extra)


def test_open_trust_list_refused_at_start(procs):
    """proxy-protocol on a non-loopback listener without proxy-protocol-from would let anyone
    claim any address: start is refused, naming the key and the explicit opt-in."""
    if not procs.bins["mtproxy"]:
        pytest.skip("MTPROXY_BIN not set")
    port = free_ports(1)[0]
    p = subprocess.Popen(open_trust_argv(procs, port), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    try:
        out, _ = p.communicate(timeout=T(10))
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail("mtproxy started with an open PROXY trust list on 0.0.0.0")
    out = out.decode(errors="replace")
    assert p.returncode == 2, (p.returncode, out)
    assert f"listen 0.0.0.0:{port}" in out and "proxy-protocol-from = any" in out, out
    assert "proxy-protocol-from = CIDR" in out, out
    # --check-config says the same
    r = subprocess.run(open_trust_argv(procs, port, "--check-config"), capture_output=True,
                       timeout=T(20))
    assert r.returncode == 2 and b"proxy-protocol-from" in r.stdout + r.stderr, r


@pytest.mark.parametrize("trust", [["any"], ["127.0.0.0/8", "10.0.0.0/8"]])
def test_open_trust_list_opt_in(procs, trust):
    """With proxy-protocol-from = any (written out) or a list of balancers, a wildcard
    listener starts and serves."""
    secret = new_secret()
    dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
    extra = ["--listen", f"0.0.0.0:{free_ports(1)[0]}", "--proxy-protocol", "on"]
    for t in trust:
        extra += ["--proxy-protocol-from", t]
    proxy = procs.proxy([("plain", secret)], [(i, dc.addr(i)) for i in DC_IDS], extra=extra)
    assert served(session(proxy, secret, v1("10.1.2.3")))
