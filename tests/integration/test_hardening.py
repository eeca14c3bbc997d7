"""test_hardening.py: what a stranger without a secret can do to the proxy (issue: hardening II)."""
import os
import socket
import time

import pytest

from harness import DC_IDS, T, assert_ok, new_secret, wait_until
from proxyinfo import stats
import rawclient


def env(procs, extra=()):
    plain = new_secret()
    dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
    proxy = procs.proxy([("plain", plain), ("padded", "dd" + new_secret())],
                        [(i, dc.addr(i)) for i in DC_IDS], extra=list(extra))
    return plain, dc, proxy


def session(port, wire, timeout=3.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=T(timeout))
    s.sendall(wire)
    got = b""
    try:
        while len(got) < 64:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    return got


def test_dd_replay_after_the_time_window(procs):
    """obfuscated2 headers carry no time stamp: a replay is refused however late it comes
    (the window that ages FakeTLS hellos out of the cache must not age these)."""
    plain, dc, proxy = env(procs, ["--tls-time-skew", "1s"])  # window: 2 s
    o = rawclient.Obfs2(plain, "dd", 2)
    wire = o.wire_header + o.encrypt(rawclient.test_request(0, 1000))
    assert len(session(proxy.port, wire)) >= 64
    time.sleep(2.5)
    mark = dc.mark()
    assert session(proxy.port, wire, timeout=T(5)) == b""
    assert dc.headers(mark) == 0
    assert stats(proxy)["replays"] == 1
    # a fresh client is served all the same
    assert_ok(procs.client(proxy, plain, "dd", 2, 1000, 1000))
