"""test_faketls.py: FakeTLS (ee) clients through the real binary; fronting of everything else."""
import os
import re
import socket
import ssl
import struct
import subprocess
import threading
import time

import pytest

from harness import (DC_IDS, MEDIA_4_LISTENER, MODES, HANDSHAKE_TIMEOUT_S, T, assert_ok,
                     free_ports, mtproxy_argv, new_secret)
from proxyinfo import stats

DOMAIN = "www.example.com"  # only ever text in a secret: mask-host is always a loopback server
DOMAIN2 = "localhost"
MASK = 900  # fake_dc listener id of the echoing mask server

HTTP_GET = (b"GET /index.html HTTP/1.1\r\nHost: www.example.com\r\n"
            b"User-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\nAccept: */*\r\n\r\n")


def ee(key, domain=DOMAIN):
    return "ee" + key + domain.encode().hex()


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return h


class TlsEnv:
    """fake_dc (DC listeners + an echoing mask server) and a proxy with two ee secrets (two
    domains), a plain and a dd secret, fronting to the echo server."""

    def __init__(self, procs, extra=(), mask=True, plain=True, workers=1):
        self.procs = procs
        self.key, self.key2 = new_secret(), new_secret()
        self.ee, self.ee2 = ee(self.key), ee(self.key2, DOMAIN2)
        self.plain, self.dd = new_secret(), "dd" + new_secret()
        listeners = [(i, "normal") for i in DC_IDS] + [(MEDIA_4_LISTENER, "normal"),
                                                         (MASK, "echo")]
        self.dc = procs.fake_dc(listeners)
        dcs = [(i, self.dc.addr(i)) for i in DC_IDS] + [(-4, self.dc.addr(MEDIA_4_LISTENER))]
        secrets = [("tls", self.ee), ("tls2", self.ee2)]
        if plain:
            secrets += [("plain", self.plain), ("padded", self.dd)]
        args = ["--mask", "on", "--mask-host", "127.0.0.1",
                "--mask-port", str(self.dc.port[MASK])] if mask else []
        self.proxy = procs.proxy(secrets, dcs, extra=args + list(extra), workers=workers)

    def client(self, dc=2, up=4096, down=4096, *extra, secret=None, tag="dd", timeout=60):
        return self.procs.client(self.proxy, secret or self.ee, tag, dc, up, down, *extra,
                                 timeout=timeout)

    def echo(self, start, timeout=5):
        """The next ECHO line of the mask server after mark start, as a dict."""
        m = self.dc.wait_line(r"^ECHO listener=900 bytes=(\d+) end=(\w+) fnv=([0-9a-f]{16}) "
                              r"head=([0-9a-f]*)$", timeout, start)
        assert m, f"the mask server saw no connection: {self.dc.lines[-10:]}"
        return {"bytes": int(m.group(1)), "end": m.group(2), "fnv": int(m.group(3), 16),
                "head": bytes.fromhex(m.group(4))}


@pytest.fixture
def env(procs):
    return TlsEnv(procs)


def assert_fronted(env, res, mark, hello_file=None):
    """test_client got its hello echoed back: it reached the mask server, not a ServerHello;
    the mask server got exactly the hello; no DC saw anything."""
    assert not res["ok"] and res["tls"] == "echoed", res
    assert res["hellos"] == 0 and res["records_in"] == 0, res
    e = env.echo(mark)
    assert e["bytes"] == res["hello_bytes"], (e, res)
    assert e["end"] == "eof", e
    if hello_file:
        data = open(hello_file, "rb").read()
        assert len(data) == e["bytes"] and fnv1a64(data) == e["fnv"], e
        assert data[:len(e["head"])] == e["head"]
    assert env.dc.headers(mark) == 0, "a fronted client reached a DC"


def probe(port, data, expect, timeout=10):
    """Sends data, reads until len(expect) bytes came back, half-closes and reads to EOF.
    Returns every byte received."""
    s = socket.create_connection(("127.0.0.1", port), timeout=T(timeout))
    sender = threading.Thread(target=s.sendall, args=(data,), daemon=True)
    try:
        sender.start()  # while we read: a large probe must not wait on our receive window
        got = bytearray()
        while len(got) < len(expect):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        sender.join(T(timeout))
        s.shutdown(socket.SHUT_WR)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return bytes(got)
    finally:
        s.close()


def python_client_hello():
    """The bytes of a real TLS ClientHello from Python's ssl module (no network involved)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=DOMAIN)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    hello = outgoing.read()
    assert hello[:3] in (b"\x16\x03\x01", b"\x16\x03\x03") and hello[5] == 1, hello[:16]
    return hello


# --------------------------------------------------------------------------------------------
# Served: ee clients.

@pytest.mark.parametrize("mode", sorted(MODES))
def test_ee_routing_like_plain(procs, mode):
    env = TlsEnv(procs, extra=MODES[mode])
    for dc, lid in [(2, 2), (-4, MEDIA_4_LISTENER), (203, 203), (5, 5)]:
        res = env.client(dc, 50000, 70000, "--expect-id", lid, "--expect-dc", dc)
        assert_ok(res)
        assert res["tls"] == "server-hello" and res["hello_bytes"] > 1500, res
        assert 0 < res["max_record"] <= 16384, res
    # The second secret has its own domain (its SNI) and key.
    assert_ok(env.client(3, 20000, 20000, "--expect-id", 3, secret=env.ee2))
    assert env.dc.wait_line(r"^HEADER listener=3 tag=dd dc=3$", 5)
    s = stats(env.proxy)
    assert s["tls_handshakes"] == 5 and s["masked"] == 0, s


@pytest.mark.parametrize("tag", ["ef", "ee"])
def test_ee_only_carries_padded(env, tag):
    # Inside TLS only the padded-intermediate tag is valid: the ServerHello was sent already,
    # so the proxy can only close.
    mark = env.dc.mark()
    res = env.client(2, 100, 100, "--timeout", 10, tag=tag)
    assert not res["ok"] and res["tls"] == "server-hello" and res["hellos"] == 0, res
    assert re.search(r"hello: (eof|reset)", res["errors"][0]), res
    assert env.dc.headers(mark) == 0


def test_ee_10mb_both_ways(env):
    res = env.client(2, 10 << 20, 10 << 20, "--expect-id", 2, timeout=120)
    assert_ok(res)
    assert res["up_total"] == res["down_total"] == 10 << 20
    assert res["records_in"] >= (10 << 20) // 16384, res
    assert 0 < res["max_record"] <= 16384, res
    assert env.dc.wait_line(rf"^DONE listener=2 up_ok={10 << 20} mismatch=none$", 10)


@pytest.mark.parametrize("fast", ["on", "off"])
def test_records_to_client_never_above_16384(procs, fast):
    # Blocks bigger than a TLS record: the proxy must still cut records at 16384 bytes (tdlib
    # drops the connection on a larger one; test_client fails on it too).
    env = TlsEnv(procs, extra=["--block-size", "64k", "--max-buffer", "256k",
                               "--fast-mode", fast])
    res = env.client(2, 1 << 20, 4 << 20)
    assert_ok(res)
    assert 8192 < res["max_record"] <= 16384, res


@pytest.mark.parametrize("split", [2, 5, 12])
def test_large_hello_in_several_segments(env, split):
    res = env.client(2, 30000, 30000, "--tls-split", split)
    assert_ok(res)
    assert 1500 < res["hello_bytes"] <= 2200, res  # ~1.8 KB like current Telegram apps


@pytest.mark.parametrize("records,split", [(2, 1), (5, 1), (32, 1), (3, 7)])
def test_hello_cut_into_records(env, records, split):
    res = env.client(2, 30000, 30000, "--tls-records", records, "--tls-split", split)
    assert_ok(res)
    assert res["hello_bytes"] > 1500 + 5 * (records - 1), res


def test_hello_in_too_many_records_is_fronted(env, tmp_path):
    mark = env.dc.mark()
    f = str(tmp_path / "hello.bin")
    res = env.client(2, 100, 100, "--tls-records", 33, "--tls-save-hello", f, "--timeout", 10)
    assert_fronted(env, res, mark, f)


@pytest.mark.parametrize("offset", [-120, 120])
def test_small_clock_skew_served(env, offset):
    assert_ok(env.client(2, 1000, 1000, "--tls-time-offset", offset))


# --------------------------------------------------------------------------------------------
# Fronted: bad handshakes reach the mask server, byte for byte.

def test_wrong_key_fronted(env, tmp_path):
    mark = env.dc.mark()
    f = str(tmp_path / "hello.bin")
    res = env.client(2, 100, 100, "--tls-wrong-key", "--tls-save-hello", f, "--timeout", 10)
    assert_fronted(env, res, mark, f)
    assert stats(env.proxy)["masked"] == 1


@pytest.mark.parametrize("offset", [-3600, 3600, -86400 * 3])
def test_stale_or_future_timestamp_fronted(env, tmp_path, offset):
    mark = env.dc.mark()
    f = str(tmp_path / "hello.bin")
    res = env.client(2, 100, 100, "--tls-time-offset", offset, "--tls-save-hello", f,
                     "--timeout", 10)
    assert_fronted(env, res, mark, f)


def test_ignore_time_serves_stale(procs):
    env = TlsEnv(procs, extra=["--tls-ignore-time", "on"])
    assert_ok(env.client(2, 1000, 1000, "--tls-time-offset", -3600))


def test_replayed_hello_fronted(env, tmp_path):
    f = str(tmp_path / "hello.bin")
    dmark = env.dc.mark()
    first = env.client(2, 20000, 20000, "--tls-save-hello", f)
    assert_ok(first)  # the first use is served
    # its DC's HEADER line read before the marks below (under load the pump can lag behind)
    assert env.dc.wait_line(r"^HEADER listener=2 ", T(5), start=dmark)
    assert os.path.getsize(f) == first["hello_bytes"]
    for _ in range(2):
        mark = env.dc.mark()
        res = env.client(2, 100, 100, "--tls-replay-hello", f, "--timeout", 10)
        assert_fronted(env, res, mark, f)
    s = stats(env.proxy)
    assert s["replays"] == 2 and s["tls_handshakes"] == 1, s


def test_sni_mismatch_fronted(env, tmp_path):
    for sni in ["other.example.net", DOMAIN2]:  # DOMAIN2 belongs to the other secret
        mark = env.dc.mark()
        f = str(tmp_path / "hello.bin")
        res = env.client(2, 100, 100, "--tls-sni", sni, "--tls-save-hello", f, "--timeout", 10)
        assert_fronted(env, res, mark, f)
        assert sni.encode() in open(f, "rb").read()


def test_sni_check_off_serves_any_sni(procs):
    env = TlsEnv(procs, extra=["--tls-sni-check", "off"])
    assert_ok(env.client(2, 5000, 5000, "--tls-sni", "other.example.net"))


PROBES = {
    "python-ssl-hello": python_client_hello,
    "random": lambda: bytes([0x42]) + os.urandom(999),
    "random-256k": lambda: bytes([0x42]) + os.urandom(256 * 1024 - 1),
    "http-get": lambda: HTTP_GET,
    "short-http": lambda: b"GET / HTTP/1.0\r\n\r\n",  # < 64 bytes: fronted at the timeout
}


@pytest.mark.parametrize("kind", sorted(PROBES))
def test_probe_reaches_mask_byte_exact(env, kind):
    data = PROBES[kind]()
    mark = env.dc.mark()
    t0 = time.monotonic()
    got = probe(env.proxy.port, data, data)
    assert got == data, f"{kind}: {len(got)} bytes back, first {got[:32]!r}"
    e = env.echo(mark)
    assert e["bytes"] == len(data) and e["fnv"] == fnv1a64(data) and e["end"] == "eof", e
    assert env.dc.headers(mark) == 0
    if kind != "short-http":
        assert time.monotonic() - t0 < T(HANDSHAKE_TIMEOUT_S), "fronted only at the timeout"


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_mask_proxy_protocol(procs, version):
    env = TlsEnv(procs, extra=["--mask-proxy-protocol", version])
    data = HTTP_GET
    s = socket.create_connection(("127.0.0.1", env.proxy.port), timeout=T(10))
    cport = s.getsockname()[1]
    if version == "v1":
        header = f"PROXY TCP4 127.0.0.1 127.0.0.1 {cport} {env.proxy.port}\r\n".encode()
    else:
        header = (b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack(">H", 12) +
                  socket.inet_aton("127.0.0.1") * 2 + struct.pack(">HH", cport, env.proxy.port))
    mark = env.dc.mark()
    try:
        s.sendall(data)
        got = bytearray()
        while len(got) < len(header) + len(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    finally:
        s.close()
    # The mask server got the PROXY header first (client and proxy addresses), then the bytes.
    e = env.echo(mark)
    assert e["head"][:len(header)] == header, (e["head"][:64], header)
    assert e["head"][len(header):len(header) + len(data)] == data
    assert e["bytes"] == len(header) + len(data), e
    assert bytes(got) == header + data


def test_tls_only_fronts_plain_and_dd(procs):
    env = TlsEnv(procs, extra=["--allow-plain", "off", "--allow-dd", "off"], plain=False)
    for secret, tag in [(env.key, "ef"), (env.key, "ee"), ("dd" + env.key, "dd")]:
        mark = env.dc.mark()
        res = env.client(2, 100, 100, "--timeout", 10, secret=secret, tag=tag)
        # Its 64-byte header and 36-byte request came back from the echo server.
        assert not res["ok"] and res["tls"] == "off", res
        assert "hello: bad magic" in res["errors"][0], res
        e = env.echo(mark)
        assert e["bytes"] == 100, e
        assert env.dc.headers(mark) == 0
    assert_ok(env.client(2, 50000, 50000, "--expect-id", 2))
    assert stats(env.proxy)["masked"] == 3


def test_mask_off_holds_bad_clients_silently(procs):
    env = TlsEnv(procs, mask=False)
    mark = env.dc.mark()
    for data in [HTTP_GET, bytes([0x42]) + os.urandom(300), python_client_hello()]:
        s = socket.create_connection(("127.0.0.1", env.proxy.port), timeout=T(10))
        t0 = time.monotonic()
        try:
            s.sendall(data)
            got = s.recv(4096)  # held, then closed: EOF (or a reset), never an answer
        except ConnectionResetError:
            got = b""
        finally:
            s.close()
        assert got == b"", got[:64]
        assert time.monotonic() - t0 >= 0.4 * HANDSHAKE_TIMEOUT_S
    res = env.client(2, 100, 100, "--tls-wrong-key", "--timeout", 10)
    assert res["tls"] in ("eof", "reset") and res["hello_bytes"] > 1500, res
    assert env.dc.headers(mark) == 0 and not env.dc.matching(r"^ECHO ", mark)


# --------------------------------------------------------------------------------------------
# Start-up refusals.

def run_proxy(bins, *args, timeout=10):
    if not bins["mtproxy"]:
        pytest.skip("MTPROXY_BIN not set")
    r = subprocess.run(mtproxy_argv(bins, *args), capture_output=True, timeout=T(timeout))
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


def test_allow_ee_off_with_ee_secret_is_config_error(bins, tmp_path):
    port = free_ports(1)[0]
    args = ["--listen", f"127.0.0.1:{port}", "--secret", f"t:{ee(new_secret())}",
            "--dc-builtin", "off", "--dc", "2 127.0.0.1:1", "--mask", "off", "--allow-ee", "off",
            "--state-file", str(tmp_path / "st")]
    rc, out = run_proxy(bins, *args)
    assert rc != 0 and "allow-ee" in out, (rc, out)
    rc, out = run_proxy(bins, "--check-config", *args)
    assert rc != 0 and "allow-ee" in out, (rc, out)


def test_mask_host_is_our_own_listener_refused(bins, tmp_path):
    port = free_ports(1)[0]
    t0 = time.monotonic()
    rc, out = run_proxy(bins, "--listen", f"127.0.0.1:{port}", "--secret",
                        f"t:{ee(new_secret())}", "--dc-builtin", "off", "--dc",
                        "2 127.0.0.1:1", "--mask-host", "127.0.0.1", "--mask-port", str(port),
                        "--workers", "1", "--state-file", str(tmp_path / "st"))
    assert rc != 0, out
    assert re.search(rf"127\.0\.0\.1:{port}.*own listening.*loop", out), out
    assert time.monotonic() - t0 < T(5)
