"""test_removed_user.py: a reload that removes a user: its live connections closed at once
(removed-user = close) or drained (drain: they go on, new ones refused, closed after
drain-timeout), and a user added back in time keeps them."""
import os
import re
import signal
import time

from harness import DC_IDS, T, assert_ok, free_ports, new_secret, wait_until
from proxyinfo import stats
from test_metrics import http_get
from test_users import reloaded, session, write_conf

MiB = 1 << 20
# A transfer that takes seconds: bob reads 2 MiB at 512 KiB/s through small socket buffers
# (the proxy's sndbuf too), so most of it is still to come when bob is removed.
SLOW = ("--slow-read", str(512 * 1024), "--rcvbuf", "65536", "--events", "--timeout", "60")
DOWN = 2 * MiB


def start(procs, tmp_path, extra="", workers=1):
    """A proxy whose config file has users alice and bob; returns (proxy, conf, dc, a, b,
    the config's extra lines)."""
    dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
    a, b = new_secret(), new_secret()
    conf = tmp_path / "users.conf"
    extra = "sndbuf = 64k\n" + extra
    write_conf(conf, [("alice", a), ("bob", b)], dc, extra)
    proxy = procs.proxy([], [], extra=["--config", str(conf)], workers=workers)
    return proxy, conf, dc, a, b, extra


def reload_conf(proxy, conf, users, dc, extra, serial):
    """Rewrites the config with users and reloads; returns the time the reload was seen."""
    write_conf(conf, users, dc, extra)
    os.kill(proxy.pid, signal.SIGHUP)
    assert reloaded(proxy, serial), proxy.stderr_tail()
    return time.monotonic()


def hello(client):
    """Waits for the background client's first answer from the DC (its transfer is live)."""
    assert client.wait_line(r'"event":\s*"hello"', 10), client.lines


def close_lines(proxy, reason):
    return re.findall(rf"closed: user bob .* reason {reason}", proxy.stderr_tail(100000))


def test_close_cuts_a_live_transfer_at_once(procs, tmp_path):
    proxy, conf, dc, a, b, extra = start(procs, tmp_path)  # removed-user = close: the default
    bob = procs.client_bg(proxy, b, "ef", 2, 1000, DOWN, *SLOW)
    hello(bob)
    time.sleep(0.5)
    removed = reload_conf(proxy, conf, [("alice", a)], dc, extra, 2)
    res = procs.result(bob)
    ended = time.monotonic()
    assert not res["ok"] and res["down_total"] < DOWN, res
    assert wait_until(lambda: close_lines(proxy, "user-removed"), 3), proxy.stderr_tail()
    # cut at once, not at the end of the ~4 s the transfer needs (what was in the socket
    # buffers still arrives at 512 KiB/s)
    assert ended - removed < T(1.5), (ended - removed, res)
    assert session(proxy.addr, b)[0] == b""  # new connections refused
    assert len(session(proxy.addr, a)[0]) >= 64
    assert stats(proxy)["user-removed"] == 1


def test_drain_lets_a_live_transfer_finish_and_refuses_new_ones(procs, tmp_path):
    proxy, conf, dc, a, b, extra = start(procs, tmp_path, "removed-user = drain\n")
    bob = procs.client_bg(proxy, b, "ef", 2, 1000, DOWN, *SLOW)
    hello(bob)
    time.sleep(0.5)
    removed = reload_conf(proxy, conf, [("alice", a)], dc, extra, 2)
    assert "1 removed: their connections are drained" in proxy.stderr_tail(100000)
    assert wait_until(lambda: "removed users go on (removed-user = drain): 1, closed in 600 s"
                      in proxy.stderr_tail(100000), 3), proxy.stderr_tail()
    assert bob.alive()
    # bob's new connections are refused (held like a bad client) while the old one goes on
    # (its end is checked below: a held session lasts long enough under qemu for it to finish)
    assert session(proxy.addr, b)[0] == b""
    assert len(session(proxy.addr, a)[0]) >= 64
    res = procs.result(bob)
    assert_ok(res)
    assert res["down_total"] == DOWN, res
    assert time.monotonic() - removed > 0.5, "the transfer did not outlive the removal"
    assert not close_lines(proxy, "(user-removed|drained)"), proxy.stderr_tail()
    st = stats(proxy)
    assert st["user-removed"] == 0 and st["drained"] == 0, st


def test_drain_timeout_closes_a_held_connection(procs, tmp_path):
    limit = T(2)
    mport = free_ports(1)[0]
    drain = (f"removed-user = drain\ndrain-timeout = {int(limit * 1000)}ms\n"
             f"metrics = 127.0.0.1:{mport}\n")
    # two workers, each with its own drain timer (the connections land on either)
    proxy, conf, dc, a, b, extra = start(procs, tmp_path, drain, workers=2)
    # bob holds 3 connections open (no byte either way after the hello) for 20 s
    bobs = [procs.client_bg(proxy, b, "ef", 2, 1000, 1000, "--hold", "20", "--events")
            for _ in range(3)]
    for bob in bobs:
        hello(bob)
    removed = reload_conf(proxy, conf, [("alice", a)], dc, extra, 2)
    for bob in bobs:
        res = procs.result(bob)
        held = time.monotonic() - removed
        assert not res["ok"] and any("hold: eof" in e for e in res["errors"]), res
        assert limit - 0.3 < held < limit + T(1.5), f"closed {held:.2f} s after the removal"
    assert wait_until(lambda: len(close_lines(proxy, "drained")) == 3, 3), proxy.stderr_tail()
    st = stats(proxy)
    assert st["drained"] == 3 and st["user-removed"] == 0, st
    body = http_get(mport, "/metrics")[2].decode()
    assert re.search(r'^mtproxy_connections_closed_total\{reason="drained"\} 3$', body, re.M), body
    assert b not in proxy.stderr_tail(100000)  # never a secret in the log


def test_drain_user_added_back_keeps_its_connection(procs, tmp_path):
    limit = T(4)  # room for two reloads and a refused session (1.5 s) before it ends
    drain = f"removed-user = drain\ndrain-timeout = {int(limit * 1000)}ms\n"
    proxy, conf, dc, a, b, extra = start(procs, tmp_path, drain)
    # held past the drain-timeout, then a transfer: the proxy must not close it meanwhile
    hold = int(limit + T(1)) + 1
    bob = procs.client_bg(proxy, b, "ef", 2, 64 * 1024, 256 * 1024, "--hold", str(hold),
                          "--events")
    hello(bob)
    removed = reload_conf(proxy, conf, [("alice", a)], dc, extra, 2)
    assert session(proxy.addr, b)[0] == b""  # removed: refused
    readded = reload_conf(proxy, conf, [("alice", a), ("bob", b)], dc, extra, 3)
    assert readded - removed < limit - 0.5, "added back too late for the test"
    res = procs.result(bob)
    assert_ok(res)
    assert not close_lines(proxy, "(user-removed|drained)"), proxy.stderr_tail()
    assert len(session(proxy.addr, b)[0]) >= 64  # served again
    st = stats(proxy)
    assert st["drained"] == 0 and st["user-removed"] == 0, st
