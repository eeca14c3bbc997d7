"""test_fleet.py: two mtproxy instances behind HAProxy (send-proxy-v2) sharing a Redis replay store."""
import os
import shutil
import signal
import socket
import time

import subprocess

import pytest

from harness import (DC_IDS, Proc, T, assert_ok, free_ports, mtproxy_argv, new_secret,
                     wait_until)
from proxyinfo import stats
import rawclient

DOMAIN = "www.example.com"


def need(exe, package):
    path = shutil.which(exe) or (f"/usr/sbin/{exe}" if os.path.exists(f"/usr/sbin/{exe}") else None)
    if not path:
        pytest.skip(f"{exe} not installed (Debian package {package})")
    return path


@pytest.fixture(autouse=True)
def built_with_redis(bins):
    """Skips the module on a build without libhiredis (the cross builds' sysroots lack it);
    such a build must refuse the key with a clear message, which is checked here."""
    if not bins["mtproxy"]:
        pytest.skip("MTPROXY_BIN not set")
    r = subprocess.run(mtproxy_argv(bins, "--check-config", "--listen", "127.0.0.1:1",
                                    "--secret", f"a:{new_secret()}", "--dc-builtin", "off",
                                    "--dc", "2 127.0.0.1:1", "--mask", "off",
                                    "--replay-store", "redis://127.0.0.1:1"),
                       capture_output=True, timeout=T(20))
    out = (r.stdout + r.stderr).decode()
    if "built without Redis support" in out:
        assert r.returncode != 0, out
        pytest.skip("this mtproxy was built without libhiredis")
    assert r.returncode == 0, out


def port_up(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


class Redis:
    def __init__(self, procs, password=None):
        self.exe = need("redis-server", "redis-server")
        self.procs = procs
        self.port = free_ports(1)[0]
        self.password = password
        self.start()

    def start(self):
        argv = [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", self.procs.workdir, "--daemonize", "no"]
        if self.password:
            argv += ["--requirepass", self.password]
        self.p = Proc("redis", argv, self.procs.workdir)
        self.procs.all.append(self.p)
        assert wait_until(lambda: port_up(self.port), T(5)), "redis-server did not start"

    def stop(self):
        self.p.stop(signal.SIGKILL)
        assert wait_until(lambda: not port_up(self.port), T(3))

    def url(self):
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/3"


class Fleet:
    """Redis, one fake DC, two proxies with the same secrets and replay store, and HAProxy
    with three frontends: `port` balances over both, `port1` and `port2` reach one each."""

    def __init__(self, procs, extra=()):
        self.procs = procs
        self.redis = Redis(procs, password="fleet-pass")
        self.plain = new_secret()
        self.tls = "ee" + new_secret() + DOMAIN.encode().hex()
        self.dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
        dcs = [(i, self.dc.addr(i)) for i in DC_IDS]
        common = ["--proxy-protocol", "on", "--proxy-protocol-from", "127.0.0.1",
                  "--replay-store", self.redis.url()] + list(extra)
        self.p = [procs.proxy([("plain", self.plain), ("tls", self.tls)], dcs, extra=common,
                              name=f"mtproxy{i}") for i in (1, 2)]
        self.port, self.port1, self.port2 = free_ports(3)
        cfg = os.path.join(procs.workdir, "haproxy.cfg")
        srv = "send-proxy-v2 check check-send-proxy inter 300ms fall 1 rise 2"
        with open(cfg, "w") as f:
            f.write(f"""global
    maxconn 2000
defaults
    mode tcp
    timeout connect 2s
    timeout client 30s
    timeout server 30s
frontend fe
    bind 127.0.0.1:{self.port}
    default_backend both
frontend fe1
    bind 127.0.0.1:{self.port1}
    default_backend first
frontend fe2
    bind 127.0.0.1:{self.port2}
    default_backend second
backend both
    balance roundrobin
    server p1 {self.p[0].addr} {srv}
    server p2 {self.p[1].addr} {srv}
backend first
    server p1 {self.p[0].addr} {srv}
backend second
    server p2 {self.p[1].addr} {srv}
""")
        exe = need("haproxy", "haproxy")
        self.haproxy = Proc("haproxy", [exe, "-f", cfg, "-db"], procs.workdir)
        procs.all.append(self.haproxy)
        assert wait_until(lambda: all(port_up(p) for p in (self.port, self.port1, self.port2)),
                          T(5)), \
            self.haproxy.stderr_tail()
        for p in self.p:
            assert wait_until(lambda: "replay-store: connected" in p.stderr_tail(400), T(5))

    def client(self, port, *args, secret=None, **kw):
        return self.procs.client(f"127.0.0.1:{port}", secret or self.plain, *args, **kw)


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
