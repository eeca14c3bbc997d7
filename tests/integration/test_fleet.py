"""test_fleet.py: two mtproxy instances behind HAProxy (send-proxy-v2) sharing a Redis replay store."""
import os
import shutil
import signal
import socket
import time

import subprocess

import pytest

from fleetlib import Fleet, check_built_with_redis, need
from harness import DC_IDS, Proc, T, assert_ok, new_secret, wait_until
from proxyinfo import stats
import rawclient


@pytest.fixture(autouse=True)
def built_with_redis(bins):
    check_built_with_redis(bins)


def raw_session(port, wire, timeout=3.0):
    """Sends the bytes of one client (header and test request) and reads what comes back."""
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


def captured_client(secret):
    o = rawclient.Obfs2(secret, "dd", 2)
    return o.wire_header + o.encrypt(rawclient.test_request(0, 1000))


def test_fleet(procs, tmp_path):
    f = Fleet(procs)
    # Served by both instances through the balancer.
    for _ in range(8):
        assert_ok(f.client(f.port, "dd", 2, 20000, 20000))
    hs = [stats(p)["handshakes"] for p in f.p]
    assert all(h >= 2 for h in hs), hs

    # A plain/dd header served by instance 1, replayed to instance 2: refused.
    wire = captured_client(f.plain)
    assert len(raw_session(f.port1, wire)) >= 64
    mark = f.dc.mark()
    assert raw_session(f.port2, wire, timeout=T(4)) == b""
    assert f.dc.headers(mark) == 0
    assert stats(f.p[1])["store_replays"] >= 1

    # A FakeTLS hello served by instance 1, replayed to instance 2: not answered.
    hello = str(tmp_path / "hello.bin")
    assert_ok(f.client(f.port1, "dd", 2, 5000, 5000, "--tls-save-hello", hello, secret=f.tls))
    before = stats(f.p[1])["store_replays"]
    res = f.client(f.port2, "dd", 2, 100, 100, "--tls-replay-hello", hello, "--timeout", "10",
                   secret=f.tls)
    assert not res["ok"] and res["hellos"] == 0, res
    assert stats(f.p[1])["store_replays"] == before + 1

    # Redis goes away: fail open, the fleet keeps serving on the local caches, counted.
    f.redis.stop()
    for _ in range(4):
        assert_ok(f.client(f.port, "dd", 2, 5000, 5000))
    failed = sum(stats(p)["store_failed"] for p in f.p)
    assert failed >= 4, failed
    assert any("replay-store: disconnected" in p.stderr_tail(2000) or
               "replay-store: cannot connect" in p.stderr_tail(2000) for p in f.p)

    # Redis back: used again (a replay across instances is refused again).
    f.redis.start()
    for p in f.p:
        assert wait_until(lambda: p.stderr_tail(2000).count("replay-store: connected") >= 2,
                          T(15)), p.stderr_tail(20)
    wire = captured_client(f.plain)
    assert len(raw_session(f.port1, wire)) >= 64
    before = stats(f.p[1])["store_replays"]
    assert raw_session(f.port2, wire, timeout=T(4)) == b""
    assert stats(f.p[1])["store_replays"] == before + 1

    # One instance killed: the balancer sends new clients to the other.
    f.p[0].stop(signal.SIGKILL)
    time.sleep(T(1.0))
    for _ in range(6):
        assert_ok(f.client(f.port, "dd", 2, 5000, 5000))


def test_fail_closed(procs):
    f = Fleet(procs, extra=["--replay-store-fail", "closed", "--replay-store-timeout", "300ms"])
    assert_ok(f.client(f.port, "dd", 2, 5000, 5000))
    f.redis.stop()
    # The harness reads the fake DC's lines in a thread: let the served client's land first.
    wait_until(lambda: f.dc.headers() >= 1, 5)
    mark = f.dc.mark()
    res = f.client(f.port, "dd", 2, 1000, 1000, "--timeout", "10")
    assert not res["ok"], res
    assert f.dc.headers(mark) == 0
    assert sum(stats(p)["store_failed"] for p in f.p) >= 1


def test_unix_socket_and_slow_store(procs):
    """redis:// with a Unix socket path and ?db=; a store that stops answering (SIGSTOP) costs a
    handshake at most replay-store-timeout, then fail-open serves it."""
    exe = need("redis-server", "redis-server")
    sock = os.path.join(procs.workdir, "redis.sock")
    r = Proc("redis-unix", [exe, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
                            "--save", "", "--appendonly", "no", "--dir", procs.workdir],
             procs.workdir)
    procs.all.append(r)
    assert wait_until(lambda: os.path.exists(sock), T(5))
    plain = new_secret()
    dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
    proxy = procs.proxy([("plain", plain)], [(i, dc.addr(i)) for i in DC_IDS],
                        extra=["--replay-store", f"redis://{sock}?db=5",
                               "--replay-store-timeout", "300ms"])
    assert wait_until(lambda: "replay-store: connected" in proxy.stderr_tail(400), T(5))
    wire = captured_client(plain)
    assert len(raw_session(proxy.port, wire)) >= 64
    # The key is in database 5 of that server, with an expiry.
    cli = shutil.which("redis-cli")
    if cli:
        keys = subprocess.run([cli, "-s", sock, "-n", "5", "--scan", "--pattern", "mtproxy:r:*"],
                              capture_output=True, timeout=T(5)).stdout.split()
        assert len(keys) == 1, keys
        ttl = subprocess.run([cli, "-s", sock, "-n", "5", "pttl", keys[0]],
                             capture_output=True, timeout=T(5)).stdout
        assert int(ttl) > 3600 * 1000, ttl
    # Slow: redis stopped. A new handshake waits up to the timeout, then is served (fail open).
    os.kill(r.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        res = procs.client(proxy, plain, "dd", 2, 1000, 1000)
        assert_ok(res)
        assert res["wall"] >= 0.25 and time.monotonic() - t0 < T(3), res["wall"]
        assert stats(proxy)["store_failed"] == 1
    finally:
        os.kill(r.pid, signal.SIGCONT)
    # Answering again: the late answer to the old question is ignored, new ones are asked.
    assert_ok(procs.client(proxy, plain, "dd", 2, 1000, 1000))
    assert stats(proxy)["store_failed"] == 1
