"""test_bad_clients.py: probes and wrong secrets get silence and a bounded close."""
import os
import socket
import threading
import time

import pytest

from harness import (FakeWeb, Recorder, Std, T, assert_ok, assert_rejected, new_secret,
                     HANDSHAKE_TIMEOUT_S)

# The proxy holds a bad client for a random time "around" handshake-timeout.
MIN_HOLD = 0.25 * HANDSHAKE_TIMEOUT_S
MAX_HOLD_UNSCALED = 3 * HANDSHAKE_TIMEOUT_S + 1
MAX_HOLD = T(MAX_HOLD_UNSCALED)

HTTP = (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: curl/8.0\r\n"
        b"Accept: */*\r\nConnection: keep-alive\r\n\r\n")


def probe(port, payload, wait=MAX_HOLD + 3):
    """Sends payload, then reads until the proxy closes. Returns (bytes received, seconds,
    how it ended: 'eof' | 'reset' | 'open')."""
    s = socket.create_connection(("127.0.0.1", port), timeout=T(5))
    try:
        t0 = time.monotonic()
        if payload:
            s.sendall(payload)
        got = b""
        end = t0 + wait
        while True:
            s.settimeout(max(0.01, end - time.monotonic()))
            try:
                chunk = s.recv(4096)
            except socket.timeout:
                return got, time.monotonic() - t0, "open"
            except ConnectionResetError:
                return got, time.monotonic() - t0, "reset"
            if not chunk:
                return got, time.monotonic() - t0, "eof"
            got += chunk
    finally:
        s.close()


PAYLOADS = {
    "garbage64": lambda: os.urandom(64),
    "garbage1k": lambda: os.urandom(1024),
    "truncated30": lambda: os.urandom(30),
    "nothing": lambda: b"",
    "http": lambda: HTTP,
    "tls_hello_start": lambda: bytes.fromhex("1603010200010001fc0303") + os.urandom(120),
}


@pytest.mark.parametrize("kind", sorted(PAYLOADS))
def test_probe_gets_silence(std, kind):
    mark = std.dc.mark()
    got, secs, how = probe(std.proxy.port, PAYLOADS[kind]())
    assert got == b"", f"proxy answered a {kind} probe with {got[:64]!r}"
    assert how in ("eof", "reset"), f"{kind}: connection still open after {secs:.1f} s"
    assert MIN_HOLD <= secs <= MAX_HOLD, f"{kind}: closed after {secs:.2f} s"
    # headers(), not accepts(): the pool's own pre-connects (dc-pool, filled at start and after
    # every claim) may land after the mark under qemu; a dial for a client sends a header.
    assert std.dc.headers(mark) == 0, "a bad client made the proxy dial a DC"
    assert_ok(std.client("ee", 2, 10000, 10000, "--expect-id", 2))


def test_wrong_secret(std):
    res = std.client("ef", 2, 1000, 1000, "--timeout", 10, "--conns", 5, secret=new_secret())
    assert_rejected(res, max_seconds=MAX_HOLD_UNSCALED)
    assert_ok(std.client("ef", 2, 1000, 1000))


def test_many_probes_do_not_block_good_clients(procs):
    # Probes are held 0.5..1.5 x handshake-timeout = 2..6 s here; good clients must not wait.
    env = Std(procs, extra=["--handshake-timeout", "4s"])
    results = []

    def worker():
        results.append(probe(env.proxy.port, os.urandom(64), wait=T(12)))

    threads = [threading.Thread(target=worker) for _ in range(50)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    res = env.client("dd", 3, 200000, 200000, "--expect-id", 3, "--conns", 5)
    assert_ok(res)
    assert res["seconds"] < T(1.5), "good clients waited for the bad ones"
    for t in threads:
        t.join(T(20))
    assert len(results) == 50
    assert all(got == b"" and how != "open" for got, _, how in results), results[:5]
    assert all(1.5 <= secs <= T(7) for _, secs, _ in results), sorted(r[1] for r in results)


@pytest.mark.parametrize("cache", ["4M", "0"])
def test_replayed_header(procs, cache):
    env = Std(procs, extra=["--replay-cache", cache])
    rec = Recorder(env.proxy.port)
    try:
        assert_ok(procs.client(rec.addr, env.plain, "ee", 2, 1000, 1000, "--expect-id", 2))
        first = bytes(rec.captured[0][:100])  # the 64-byte header + the test request
    finally:
        rec.close()
    assert len(first) == 100
    mark = env.dc.mark()
    got, secs, how = probe(env.proxy.port, first, wait=T(2) if cache == "0" else MAX_HOLD + 3)
    if cache == "0":
        # Without a replay cache the copy is served like the original (this shows the probe
        # would notice a hello): the DC answers with its 20-byte hello and more.
        assert len(got) >= 20, (got, how)
        return
    assert got == b"", "the proxy answered a replayed header"
    assert how in ("eof", "reset") and MIN_HOLD <= secs <= MAX_HOLD, (secs, how)
    assert env.dc.headers(mark) == 0, "the replay reached the DC"
    assert_ok(env.client("ee", 2, 1000, 1000))


def test_mask_forwards_to_loopback_web(procs):
    web = FakeWeb()
    try:
        env = Std(procs, extra=["--mask", "on", "--mask-host", "127.0.0.1",
                                "--mask-port", str(web.port)])
        mark = env.dc.mark()
        got, secs, how = probe(env.proxy.port, HTTP)
        assert got == FakeWeb.REPLY, got
        assert bytes(web.received[0]) == HTTP
        # headers(), not accepts(): the DC pool's pre-connects may land after the mark (qemu)
        assert env.dc.headers(mark) == 0
        garbage = os.urandom(64)
        got, secs, how = probe(env.proxy.port, garbage + b"\r\n\r\n")
        assert got == FakeWeb.REPLY
        assert bytes(web.received[1]) == garbage + b"\r\n\r\n"
        assert_ok(env.client("dd", 3, 10000, 10000, "--expect-id", 3))
    finally:
        web.close()
