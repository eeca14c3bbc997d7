"""test_faults.py: the proxy under starvation and abuse keeps serving and stays bounded."""
import os
import re
import resource
import signal
import socket
import threading
import time

import pytest

import harness
import rawclient
from harness import T, Std, assert_ok, new_secret, wait_until
from proxyinfo import RSS_MEANINGFUL, cpu_seconds, limit_fds, rss_kb, stats

MB = 1 << 20
SECRET = new_secret()
UNDER_WRAPPER = bool(harness.WRAPPER)  # valgrind: no timing checks


@pytest.fixture
def can_prlimit(procs):
    if UNDER_WRAPPER:
        pytest.skip("descriptor limits are not meaningful under a wrapper (valgrind)")
    try:
        me = resource.prlimit(os.getpid(), resource.RLIMIT_NOFILE)
        resource.prlimit(os.getpid(), resource.RLIMIT_NOFILE, me)
    except (OSError, AttributeError) as e:
        pytest.skip(f"prlimit not usable here: {e}")


# --------------------------------------------------------------------------------------------
# Descriptor exhaustion.

def assert_served_or_refused(res, up, down):
    """Every connection either got its hello and then every byte both ways, or was closed
    before its hello without a byte: a client is never cut off mid-stream."""
    assert res["hellos"] + res["failed"] == res["conns"], res
    assert res["up_total"] == res["hellos"] * up and res["down_total"] == res["hellos"] * down, res
    assert res["rx_before_hello"] == res["hellos"] * 20, res  # the hello is 20 bytes
    for e in res["errors"]:
        assert re.search(r"hello: (eof|reset)", e), res


# The descriptor-limit tests count descriptors exactly: no pre-connected DC sockets (a client
# claiming one would be served on a descriptor the pool opened before the limit was set).
NO_POOL = ["--dc-pool", "0"]


def _emfile_run(procs, k=4):
    env = Std(procs, extra=["--splice", "off"] + NO_POOL, workers=1)
    baseline = env.proxy.settled_sockets()
    limit_fds(env.proxy.pid, 2 * k)  # room for k relayed connections: two descriptors each
    cpu0 = cpu_seconds(env.proxy.pid)
    held = procs.client_bg(env.proxy, env.plain, "ee", 2, 20000, 20000, "--conns", 3 * k,
                           "--hold", 2, "--expect-id", 2, "--timeout", 60, "--events",
                           name="over_limit")
    assert wait_until(lambda: len(held.matching(r'"event":"hello"')) >= k, 10)
    time.sleep(1.0)
    assert len(held.matching(r'"event":"hello"')) == k, "served beyond the descriptor limit"
    assert env.proxy.alive()
    # Paused, not spinning on EMFILE: well under one CPU-second while blocked.
    assert cpu_seconds(env.proxy.pid) - cpu0 < 0.5
    res = procs.result(held, timeout=60)
    s = stats(env.proxy)
    assert s["accept_fd_limit"] >= 1, s
    return env, baseline, res


def test_emfile_at_accept(procs, can_prlimit):
    env, baseline, res = _emfile_run(procs)
    assert_served_or_refused(res, 20000, 20000)
    assert res["hellos"] >= 4, res
    assert wait_until(lambda: env.proxy.sockets() <= baseline, 5), env.proxy.fd_kinds()
    # The limit stays low: clients keep being served k at a time.
    assert_ok(env.client("dd", 3, 1000, 1000, "--conns", 3, secret=env.dd))


def test_emfile_no_client_dropped(procs, can_prlimit):
    # Each worker accepts only while it holds a reserve descriptor for every client it accepted
    # that has no DC socket yet, plus one: a batch of accepts cannot take the descriptors those
    # clients' DC sockets need, so every accepted client is served (the rest wait unaccepted).
    env, _baseline, res = _emfile_run(procs)
    assert_ok(res)
    assert res["up_total"] == res["down_total"] == 12 * 20000
    s = stats(env.proxy)
    assert s["dc_connect_fails"] == 0 and s["dc-unreachable"] == 0, s


def test_emfile_at_dc_connect(procs, can_prlimit):
    env = Std(procs, extra=["--splice", "off"] + NO_POOL, workers=1)
    baseline = env.proxy.settled_sockets()
    soft, hard = limit_fds(env.proxy.pid, 1)  # accept gets the last one; the DC socket...
    res = env.client("ef", 2, 1000, 1000, "--conns", 3, "--expect-id", 2, "--timeout", 15)
    # ...gets the one the worker held in reserve for it, so each client is served; the worker,
    # unable to make a new reserve, accepts the next only once descriptors are back.
    assert_ok(res)
    assert env.proxy.alive()
    s = stats(env.proxy)
    assert s["accept_fd_limit"] >= 1, s
    assert s["dc_connect_fails"] == 0 and s["dc-unreachable"] == 0, s
    # (Were the released descriptor taken by another worker in between, the client would take
    # that worker's spare, else wait for one within connect-timeout and then be closed.)
    resource.prlimit(env.proxy.pid, resource.RLIMIT_NOFILE, (soft, hard))
    assert wait_until(lambda: env.proxy.sockets() <= baseline, 5)
    # Descriptors back: the retry timer resumes accepting and clients get through again.
    assert_ok(env.client("ef", 2, 100000, 100000, "--expect-id", 2, "--conns", 5))


def test_low_fd_limit_at_start(procs, can_prlimit, tmp_path):
    if harness.EMULATOR:
        pytest.skip("the prlimit launcher script cannot run behind MTPROXY_EMULATOR; runs natively")
    # Started with only 64 descriptors, mtproxy lowers max-connections to what fits instead of
    # running into EMFILE: clients beyond it wait in the backlog and are all served in turn.
    launcher = tmp_path / "prlimit_launcher.sh"
    mtproxy = procs.bins["mtproxy"]
    launcher.write_text(f"#!/bin/sh\nexec prlimit --nofile=64:64 '{mtproxy}' \"$@\"\n")
    launcher.chmod(0o755)
    dc = procs.fake_dc([(2, "normal")])
    proxy = harness.Proxy(dict(procs.bins, mtproxy=str(launcher)), procs.workdir,
                          [("s", SECRET)], [(2, dc.addr(2))], extra=["--splice", "off"],
                          name="mtproxy_lowfd")
    procs.all.append(proxy)
    m = re.search(r"using max-connections (\d+)", proxy.stderr_tail(200))
    assert m, proxy.stderr_tail(200)
    limit = int(m.group(1))
    assert 1 <= limit <= 30, limit
    res = procs.client(proxy, SECRET, "ee", 2, 10000, 10000, "--conns", 2 * limit + 5,
                       "--hold", 1, "--expect-id", 2, "--timeout", 60)
    assert_ok(res)
    s = stats(proxy)
    assert s["accept_fd_limit"] == 0, s  # never ran into the limit itself
    assert s["accept_pauses"] >= 1, s


# --------------------------------------------------------------------------------------------
# Memory: a tiny buffer arena, a DC that never reads, a client that never reads.

ARENA = ["--block-size", "1k", "--max-buffer", "4k", "--buffer-memory", "16k",
         "--handshake-timeout", "10s"]  # 16 one-KiB blocks: the smallest arena there is


def _arena_env(procs, mode):
    return Std(procs, extra=harness.MODES[mode] + ARENA, workers=1)


def _hogs(env, n=10):
    """n clients that ask for 256 MiB down and never read: each pins max-buffer of blocks,
    so together they hold every block of the arena."""
    mark = env.dc.mark()
    socks = [rawclient.start_session(env.proxy.addr, env.plain, "ef", 4, up=0,
                                     down=256 * MB, rcvbuf=4096)[0] for _ in range(n)]
    assert wait_until(lambda: len(env.dc.matching(r"^TEST listener=4 ", mark)) == n, 10)
    assert wait_until(lambda: stats(env.proxy)["block_waits"] >= 1, 10), \
        f"the arena never ran out: {stats(env.proxy)}"
    return socks


def _reset(socks):
    for s in socks:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        s.close()


@pytest.mark.parametrize("mode", ["nofast", "fast-copy"])
def test_arena_exhaustion(procs, mode):
    env = _arena_env(procs, mode)
    hogs = _hogs(env)
    # While every block is taken, more clients come: none may be cut off mid-stream.
    batch = procs.client_bg(env.proxy, env.dd, "dd", 3, 100000, 100000, "--conns", 20,
                            "--expect-id", 3, "--timeout", 60, name="batch")
    time.sleep(2.0)
    assert env.proxy.alive()
    _reset(hogs)  # blocks come back: waiting streams go on
    res = procs.result(batch, timeout=60)
    assert_served_or_refused(res, 100000, 100000)
    assert_ok(env.client("ee", 2, 200000, 200000, "--conns", 10, "--expect-id", 2))


@pytest.mark.parametrize("mode", ["nofast", "fast-copy"])
def test_arena_exhaustion_header_waits(procs, mode):
    env = _arena_env(procs, mode)
    # Clients connected (accepted, holding no block) before the arena runs dry...
    early = [rawclient.connect(env.proxy.addr) for _ in range(5)]
    assert wait_until(lambda: stats(env.proxy)["accepted"] >= 6, 5)
    hogs = _hogs(env)
    # ...send their header now: they must wait for a block, not be dropped.
    for s in early:
        o = rawclient.Obfs2(env.plain, "ee", 2)
        s.sendall(o.wire_header + o.encrypt(rawclient.test_request(0, 1000)))
    time.sleep(1.0)
    _reset(hogs)
    for s in early:
        s.settimeout(10)
        got = b""
        try:
            while len(got) < 20:
                d = s.recv(20 - len(got))
                if not d:
                    break
                got += d
        except OSError:
            pass
        assert len(got) == 20, "dropped instead of served once blocks were free"
        s.close()


def _rss_bound_kb(base_kb):
    return base_kb + 32 * 1024  # 32 MiB over the start: far below what was pushed at it


def test_dc_never_reads(procs):
    dc = procs.fake_dc([(2, "stall"), (3, "normal")])
    proxy = procs.proxy([("s", SECRET)], [(2, dc.addr(2)), (3, dc.addr(3))],
                        extra=["--max-buffer", "64k", "--splice", "off", "--idle-timeout", "3s"]
                        + NO_POOL)  # one DC accept per client: none pre-connected
    base = rss_kb(proxy.pid)
    baseline = proxy.settled_sockets()
    socks = [rawclient.start_session(proxy.addr, SECRET, "ee", 2, sndbuf=65536)[0]
             for _ in range(8)]
    assert wait_until(lambda: len(dc.matching(r"^ACCEPT listener=2 mode=stall$")) == 8, 5)
    # Each client tries to push 64 MiB at a DC that reads nothing: backpressure must stop it.
    results = []
    threads = [threading.Thread(target=lambda s=s: results.append(
        rawclient.push(s, 64 * MB, deadline_s=2.0))) for s in socks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    pushed = sum(results)
    assert pushed < 8 * 32 * MB, f"{pushed} bytes accepted toward a stalled DC"
    if RSS_MEANINGFUL:
        assert rss_kb(proxy.pid) < _rss_bound_kb(base), (rss_kb(proxy.pid), base, pushed)
    # Meanwhile everyone else is served.
    assert_ok(procs.client(proxy, SECRET, "ef", 3, 500000, 500000, "--expect-id", 3))
    # Half the clients leave with a FIN (bytes still queued for the DC), half with a reset:
    # either way nothing stays open past the idle timeout.
    for i, s in enumerate(socks):
        if i % 2:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        s.close()
    assert wait_until(lambda: proxy.sockets() <= baseline, 10), proxy.fd_kinds()


@pytest.mark.parametrize("mode", ["nofast", "fast-splice"])
def test_client_never_reads(procs, mode):
    env = Std(procs, extra=harness.MODES[mode] + ["--max-buffer", "64k"], workers=1)
    base = rss_kb(env.proxy.pid)
    baseline = env.proxy.settled_sockets()
    marks = env.dc.mark()
    # 16 clients each ask for 256 MiB down and then never read a byte.
    socks = [rawclient.start_session(env.proxy.addr, env.plain, "ef", 4, up=0,
                                     down=256 * MB, rcvbuf=4096)[0] for _ in range(16)]
    assert wait_until(lambda: len(env.dc.matching(r"^TEST listener=4 ", marks)) == 16, 10)
    time.sleep(3.0)  # the DC keeps offering; the proxy must stop reading it
    if RSS_MEANINGFUL:
        grown = rss_kb(env.proxy.pid) - base
        assert grown < 32 * 1024, f"proxy RSS grew {grown} KiB for stalled readers"
    assert_ok(env.client("ee", 2, 2 * MB, 2 * MB, "--expect-id", 2))
    for s in socks:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        s.close()  # reset
    assert wait_until(lambda: env.proxy.sockets() <= baseline, 10), env.proxy.fd_kinds()


# --------------------------------------------------------------------------------------------
# Slowloris: half-open handshakes by the thousand.

def _raise_fd_limit(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        if hard != resource.RLIM_INFINITY and hard < n:
            pytest.skip(f"needs {n} descriptors in the test process, hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))


def test_slowloris_flood(procs):
    _raise_fd_limit(4096)
    env = Std(procs, workers=2)
    baseline = env.proxy.settled_sockets()
    n = 3000
    socks = []
    for i in range(n):
        s = rawclient.connect(env.proxy.addr, timeout=5)
        s.sendall(os.urandom(1 + i % 63))  # part of a header, never the rest
        socks.append(s)
    # Healthy clients are served during the flood, with no more delay than a loaded box.
    t0 = time.monotonic()
    assert_ok(env.client("ee", 2, 200000, 200000, "--conns", 20, "--expect-id", 2))
    assert_ok(env.client("dd", 3, 1000, 1000, secret=env.dd))
    if not UNDER_WRAPPER:
        assert time.monotonic() - t0 < 10
    # Every half-open one is closed by the handshake timeout (held a random while around it).
    deadline = 4 * harness.HANDSHAKE_TIMEOUT_S + 10

    def all_closed():
        for s in socks:
            if s.fileno() < 0:
                continue
            s.settimeout(0)
            try:
                if s.recv(1) == b"":
                    s.close()
            except BlockingIOError:
                return False
            except OSError:
                s.close()
        return True

    assert wait_until(all_closed, deadline, step=0.2), \
        f"{sum(s.fileno() >= 0 for s in socks)} half-open connections still open"
    for s in socks:
        s.close()
    assert wait_until(lambda: env.proxy.sockets() <= baseline, 5), env.proxy.fd_kinds()
    s = stats(env.proxy)
    assert s.get("handshake-timeout", 0) + s.get("bad-header", 0) >= n, s


def test_slowloris_trickle_past_max_connections(procs):
    # Byte-a-second senders fill every slot; they must be cut at the handshake timeout, not
    # kept alive by trickling, so a real client gets in after a bounded wait.
    env = Std(procs, extra=["--max-connections", "50"], workers=1)
    socks = [rawclient.connect(env.proxy.addr) for _ in range(80)]
    stop = time.monotonic() + 6

    def trickle():
        while time.monotonic() < stop:
            for s in socks:
                try:
                    s.send(b"\x01")
                except OSError:
                    pass
            time.sleep(0.5)
    t = threading.Thread(target=trickle)
    t.start()
    try:
        res = env.client("ef", 2, 1000, 1000, "--timeout", 30, timeout=40)
        assert_ok(res)
        assert res["seconds"] < T(4 * harness.HANDSHAKE_TIMEOUT_S + 5), res
    finally:
        t.join()
        for s in socks:
            s.close()


# --------------------------------------------------------------------------------------------
# Signals under load.

def _load(procs, env, conns=60, size=2 * MB, name="load"):
    return procs.client_bg(env.proxy, env.plain, "ee", 2, size, size, "--conns", conns,
                           "--expect-id", 2, "--timeout", 60, name=name)


def test_sighup_during_load(procs, tmp_path):
    log = tmp_path / "mtproxy.log"
    env = Std(procs, extra=["--log", str(log)], workers=2)
    load = _load(procs, env)
    rotated = []
    for i in range(5):
        time.sleep(0.2)
        old = tmp_path / f"mtproxy.log.{i}"
        if log.exists():
            os.rename(log, old)
            rotated.append(old)
        os.kill(env.proxy.pid, signal.SIGHUP)
    res = procs.result(load, timeout=60)
    assert_ok(res)
    assert res["up_total"] == res["down_total"] == 60 * 2 * MB
    assert env.proxy.alive()
    assert wait_until(lambda: log.exists() and "SIGHUP" in log.read_text(errors="replace"), 5)
    assert_ok(env.client("dd", 3, 1000, 1000, secret=env.dd))


def test_sigterm_during_load(procs):
    env = Std(procs, workers=2)
    load = _load(procs, env, conns=100, size=8 * MB)
    assert wait_until(lambda: env.dc.matching(r"^TEST listener=2 "), 10)
    time.sleep(0.5)  # mid-transfer
    rc, secs = env.proxy.stop(signal.SIGTERM, timeout=10)
    assert rc == 0, f"mtproxy exited with {rc} on SIGTERM under load:\n{env.proxy.stderr_tail()}"
    if not UNDER_WRAPPER:
        assert secs < 5, f"took {secs:.1f} s to stop"
    res = procs.result(load, timeout=30)
    assert not res["ok"] and res["failed"] >= 1, res  # cut off, not hung
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", env.proxy.port), timeout=1).close()
