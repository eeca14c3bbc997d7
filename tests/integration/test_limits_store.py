"""test_limits_store.py: per-user limits shared by two mtproxy instances behind HAProxy through a
real Redis (limits-store): conns and quota across both, Redis stopped and started, an instance
killed -9."""
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from fleetlib import Fleet, check_built_with_redis
from harness import T, assert_ok, free_ports, new_secret, wait_until
from proxyinfo import stats
from test_metrics import http_get
from test_users import session, user_stats

INTERVAL = 0.25  # limits-store-interval of the test fleets (seconds)
QUOTA = 4 << 20


@pytest.fixture(autouse=True)
def built_with_redis(bins):
    check_built_with_redis(bins)


def addr(port):
    return f"127.0.0.1:{port}"


def flushes(p):
    return stats(p).get("limits_store_flushes", 0)


def settle(f, n=3):
    """Waits until each instance has answered n more flushes: their counts are shared (an
    instance reads another's counts from the flush after the one that listed it)."""
    base = [flushes(p) for p in f.p if p.alive()]
    live = [p for p in f.p if p.alive()]
    for p, b in zip(live, base):
        assert wait_until(lambda: flushes(p) >= b + n, T(10)), p.stderr_tail(20)


def redis_cli(f, *args):
    cli = shutil.which("redis-cli")
    if not cli:
        pytest.skip("redis-cli not installed")
    r = subprocess.run([cli, "-p", str(f.redis.port), "-a", f.redis.password, "--no-auth-warning",
                        "-n", "3", *args], capture_output=True, timeout=T(5), text=True)
    return r.stdout


def fleet_quota_total(f, user):
    """The fleet's total of user's quota in the store (the shares of the current epoch)."""
    keys = redis_cli(f, "--scan", "--pattern", f"mtproxy:l:q:{user}:*").split()
    assert len(keys) == 1, keys
    vals = redis_cli(f, "hgetall", keys[0]).split("\n")
    kv = dict(zip(vals[0::2], vals[1::2]))
    epoch = kv.pop("e", "0")
    return sum(int(v.split()[1]) for v in kv.values() if v.split()[0] == epoch)


def test_conns_and_quota_across_the_fleet(procs):
    mport = free_ports(1)[0]
    f = Fleet(procs, stores=("limits-store",), users=[("a", new_secret()), ("q", new_secret())],
              extra=["--limits-store-interval", f"{int(INTERVAL * 1000)}ms",
                     "--limit", "a conns=2", "--limit", f"q quota={QUOTA}"],
              extra_each=(["--metrics", f"127.0.0.1:{mport}"], []))
    a = f.extra_users["a"]
    q = f.extra_users["q"]

    # conns=2: one connection through each instance; the third is refused on either.
    g1, s1 = session(addr(f.port1), a, keep=True)
    g2, s2 = session(addr(f.port2), a, keep=True)
    assert len(g1) >= 64 and len(g2) >= 64
    settle(f)
    assert session(addr(f.port1), a)[0] == b"", "third connection served over conns=2"
    assert session(addr(f.port2), a)[0] == b"", "third connection served over conns=2"
    assert user_stats(f.p[0], "a")["fleet_conns"] == 1
    # /metrics and /stats show the store and the other instance's share
    body = http_get(mport, "/metrics")[2].decode()
    assert "mtproxy_limits_store_up 1" in body, body[-3000:]
    assert 'mtproxy_user_fleet_connections{user="a"} 1' in body
    assert re.search(r"^mtproxy_limits_store_flushes_total [1-9]", body, re.M)
    users = {u["name"]: u for u in json.loads(http_get(mport, "/stats")[2])["users"]}
    assert users["a"]["fleet_connections"] == 1 and users["a"]["active"] == 1, users["a"]
    refused = sum(user_stats(p, "a")["refused_conns"] for p in f.p)
    assert refused == 2, refused
    # one closes: a new one is admitted (on the other instance) after a flush
    s1.close()
    settle(f)
    g3, s3 = session(addr(f.port2), a, keep=True)
    assert len(g3) >= 64, "a slot freed on instance 1 is not seen by instance 2"
    s2.close()
    s3.close()

    # A reload hands the flusher the new generation (its limits are those checked from then on).
    os.kill(f.p[1].pid, signal.SIGHUP)
    assert wait_until(lambda: "SIGHUP: configuration" in f.p[1].stderr_tail(4000), T(5))
    assert "takes effect only after a restart" not in f.p[1].stderr_tail(4000)

    # quota=4M: 3M through instance 1, then instance 2 cuts its own transfer at the fleet's 4M.
    # (The user keeps a connection open on instance 2, as a Telegram client does: its total is
    # refreshed there every flush; a user idle on an instance is refreshed every 10 flushes,
    # and its first interval of traffic there is checked against that: docs/fleet.md.)
    g4, s4 = session(addr(f.port2), q, keep=True)
    assert len(g4) >= 64
    assert_ok(f.client(f.port1, "dd", 2, 1 << 20, 2 << 20, secret=q))
    settle(f)
    res = f.client(f.port2, "dd", 2, 1 << 20, 2 << 20, secret=q)
    assert not res["ok"], res
    settle(f)
    assert session(addr(f.port1), q)[0] == b"" and session(addr(f.port2), q)[0] == b""
    st = [user_stats(p, "q") for p in f.p]
    relayed = sum(s["bytes_up"] + s["bytes_down"] for s in st)
    # overshoot bound: one interval of one instance's traffic; here instance 2 knew the total
    # before its transfer, so it stops within a read or two past the quota
    assert QUOTA <= relayed <= QUOTA + (1 << 20), (relayed, st)
    total = fleet_quota_total(f, "q")
    assert total == relayed, (total, relayed)
    assert all(s["quota_used"] == total for s in st), (total, st)
    s4.close()

    # A reset made by one instance (lstore_reset_quota: HINCRBY of the hash's epoch, done here
    # by hand as that instance would) is seen by every instance in its next flush: the shares
    # of the old epoch stop counting and the user is served again everywhere.
    key = redis_cli(f, "--scan", "--pattern", "mtproxy:l:q:q:*").split()[0]
    assert redis_cli(f, "hincrby", key, "e", "1").strip() == "1"
    settle(f)
    assert all(user_stats(p, "q")["quota_used"] == 0 for p in f.p)
    assert_ok(f.client(f.port2, "dd", 2, 1000, 1000, secret=q))
    settle(f)
    after = sum(s["bytes_up"] + s["bytes_down"] for s in (user_stats(p, "q") for p in f.p))
    assert 2000 <= after - relayed < 2200
    assert fleet_quota_total(f, "q") == after - relayed, redis_cli(f, "hgetall", key)
    assert all(user_stats(p, "q")["quota_used"] == after - relayed for p in f.p)

    # A stopped instance (SIGTERM) takes its live counts out in its last flush: the others
    # admit again within a flush or two, well before its entries would expire (2 s).
    g5, s5 = session(addr(f.port1), a, keep=True)
    g6, s6 = session(addr(f.port2), a, keep=True)
    assert len(g5) >= 64 and len(g6) >= 64
    settle(f)
    assert session(addr(f.port2), a)[0] == b""
    f.p[0].stop(signal.SIGTERM)
    t0 = time.monotonic()
    s7 = None
    while s7 is None and time.monotonic() - t0 < T(5):
        g7, s7 = session(addr(f.port2), a, keep=True)
        if len(g7) < 64:
            s7.close()
            s7 = None
    assert s7 is not None, "the stopped instance's connection still counts"
    assert time.monotonic() - t0 < T(1.5), time.monotonic() - t0
    for sk in (s5, s6, s7):
        sk.close()


def test_store_down_and_back_and_kill(procs):
    f = Fleet(procs, stores=("limits-store",), users=[("a", new_secret()), ("q", new_secret())],
              extra=["--limits-store-interval", f"{int(INTERVAL * 1000)}ms",
                     "--limit", "a conns=2", "--limit", f"q quota={QUOTA}"])
    a, q = f.extra_users["a"], f.extra_users["q"]
    assert_ok(f.client(f.port1, "dd", 2, 100000, 100000, secret=q))
    g1, s1 = session(addr(f.port1), a, keep=True)
    g2, s2 = session(addr(f.port2), a, keep=True)
    assert len(g1) >= 64 and len(g2) >= 64
    settle(f)
    assert session(addr(f.port1), a)[0] == b""

    # Redis down (limits-store-fail = open): counted, logged once, each instance enforces its
    # own counts: a second connection on instance 1 is served.
    f.redis.stop()
    for p in f.p:
        assert wait_until(lambda: "limits-store: flush failed" in p.stderr_tail(4000), T(5))
    before = [stats(p)["limits_store_failures"] for p in f.p]
    time.sleep(T(3 * INTERVAL))
    after = [stats(p)["limits_store_failures"] for p in f.p]
    assert all(x > y for x, y in zip(after, before)), (before, after)
    assert stats(f.p[0])["limits_store_up"] == 0
    g, s = session(addr(f.port1), a, keep=True)
    assert len(g) >= 64, "fail open: the local count alone decides"
    s.close()
    # bytes counted while it is away
    assert_ok(f.client(f.port2, "dd", 2, 200000, 200000, secret=q))
    for p in f.p:
        assert p.stderr_tail(20000).count("limits-store: flush failed") == 1

    # Redis back (empty: no persistence): the instances write their shares again (absolute, so
    # what was counted while it was away is in, and nothing twice).
    f.redis.start()
    for p in f.p:
        assert wait_until(lambda: "limits-store: flushed again" in p.stderr_tail(4000), T(15))
    settle(f)
    st = [user_stats(p, "q") for p in f.p]
    relayed = sum(s["bytes_up"] + s["bytes_down"] for s in st)
    assert fleet_quota_total(f, "q") == relayed, (relayed, st, redis_cli(f, "--scan"),
                                                  [p.stderr_tail(3000) for p in f.p])
    assert all(s["quota_used"] == relayed for s in st), (relayed, st)
    assert session(addr(f.port2), a)[0] == b"", "conns across the fleet again after reconnect"

    # Instance 1 killed -9: its connection stops counting within a few seconds.
    f.p[0].stop(signal.SIGKILL)
    t0 = time.monotonic()

    def admitted():
        g, s = session(addr(f.port2), a, keep=True)
        if len(g) >= 64:
            return s
        return None

    s3 = None
    deadline = t0 + T(8)
    while s3 is None and time.monotonic() < deadline:
        s3 = admitted()
    assert s3 is not None, "the killed instance's connection still counts"
    assert time.monotonic() - t0 < T(6)
    s3.close()
    s2.close()
    s1.close()


def test_fail_closed(procs):
    f = Fleet(procs, stores=("limits-store",), users=[("a", new_secret())],
              extra=["--limits-store-interval", f"{int(INTERVAL * 1000)}ms",
                     "--limits-store-fail", "closed", "--limit", "a conns=5"])
    a = f.extra_users["a"]
    settle(f)
    g1, s1 = session(addr(f.port1), a, keep=True)
    assert len(g1) >= 64
    f.redis.stop()
    assert wait_until(lambda: stats(f.p[0])["limits_store_up"] == 0, T(5))
    # new connections of a user with limits are refused; the live one goes on; a user without
    # limits is served
    assert session(addr(f.port1), a)[0] == b""
    assert user_stats(f.p[0], "a")["refused_store"] >= 1
    assert_ok(f.client(f.port1, "dd", 2, 1000, 1000))
    s1.sendall(b"\0" * 64)
    assert user_stats(f.p[0], "a")["active"] == 1
    f.redis.start()
    assert wait_until(lambda: stats(f.p[0])["limits_store_up"] == 1, T(15))
    g2, s2 = session(addr(f.port1), a, keep=True)
    assert len(g2) >= 64
    s1.close()
    s2.close()

    # Slow: Redis stops answering (SIGSTOP) with the connection up: two intervals without an
    # answer count as down (closed: refused), four drop the connection; answering again, up.
    os.kill(f.redis.p.pid, signal.SIGSTOP)
    try:
        assert wait_until(lambda: stats(f.p[0])["limits_store_up"] == 0, T(5))
        assert session(addr(f.port1), a)[0] == b""
    finally:
        os.kill(f.redis.p.pid, signal.SIGCONT)
    assert wait_until(lambda: stats(f.p[0])["limits_store_up"] == 1, T(15))
    g3, s3 = session(addr(f.port1), a, keep=True)
    assert len(g3) >= 64
    s3.close()
