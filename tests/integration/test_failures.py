"""test_failures.py: clients that vanish and DCs that refuse, reset, stall or close."""
import signal

import pytest

from harness import T, assert_ok, free_ports, wait_until, CONNECT_TIMEOUT_S

MB = 1 << 20
SECRET = "5f3c0a1e9b8d7c6b5a4f3e2d1c0b0a09"


def test_client_closes_halfway(std, procs):
    baseline = std.proxy.settled_sockets()
    healthy = procs.client_bg(std.proxy, std.plain, "dd", 2, 4 * MB, 4 * MB,
                              "--slow-read", 2 * MB, "--expect-id", 2, "--timeout", 30,
                              "--events")
    assert healthy.wait_line(r'"event":"hello"', 5)
    bad = std.client("ef", 3, 2 * MB, 2 * MB, "--close-halfway", "--conns", 20)
    assert_ok(bad)
    assert healthy.alive(), "the healthy client should still be transferring"
    assert_ok(procs.result(healthy))
    assert std.dc.wait_line(r"^EARLY_EOF listener=3 ", 5) or std.dc.matching(
        r"^CLOSED listener=3 reason=(socket|recv|send)")
    # Every socket of the dead connections is closed (spliced pipes may stay cached: at
    # most 64 per worker by design, so they are bounded, not leaked).
    ok = wait_until(lambda: std.proxy.sockets() <= baseline, 5)
    assert ok, f"proxy fds {std.proxy.fd_kinds()} did not return to {baseline} sockets"
    assert std.proxy.fd_kinds()["pipe"] <= 2 * 64, std.proxy.fd_kinds()
    assert wait_until(lambda: len(std.dc.matching(r"^CLOSED listener=3 ")) == 20, 5)
    assert_ok(std.client("ee", 3, 10000, 10000))


def _one_dc(procs, mode, extra=()):
    dc = procs.fake_dc([(2, mode), (3, "normal")])
    proxy = procs.proxy([("s", SECRET)], [(2, dc.addr(2)), (3, dc.addr(3))], extra=extra)
    return dc, proxy


def _closed_without_hello(res, max_seconds):
    assert not res["ok"] and res["hellos"] == 0, res
    assert res["rx_before_hello"] == 0, res
    assert all("hello: eof" in e or "hello: reset" in e for e in res["errors"]), res
    assert res["seconds"] < T(max_seconds), res


def test_dc_refuses(procs):
    dead = free_ports(1)[0]
    dc = procs.fake_dc([(3, "normal")])
    proxy = procs.proxy([("s", SECRET)], [(2, f"127.0.0.1:{dead}"), (3, dc.addr(3))])
    res = procs.client(proxy, SECRET, "ef", 2, 1000, 1000, "--timeout", 15, "--conns", 3)
    _closed_without_hello(res, CONNECT_TIMEOUT_S + 2)
    assert_ok(procs.client(proxy, SECRET, "ef", 3, 1000, 1000, "--expect-id", 3))


def test_dc_resets(procs):
    dc, proxy = _one_dc(procs, "reset")
    res = procs.client(proxy, SECRET, "ee", 2, 1000, 1000, "--timeout", 15, "--conns", 3)
    _closed_without_hello(res, CONNECT_TIMEOUT_S + 2)
    assert dc.wait_line(r"^ACCEPT listener=2 mode=reset$", 2)
    assert_ok(procs.client(proxy, SECRET, "ee", 3, 1000, 1000, "--expect-id", 3))


def test_dc_closes_after_header(procs):
    dc, proxy = _one_dc(procs, "close")
    res = procs.client(proxy, SECRET, "dd", 2, 1000, 1000, "--timeout", 15)
    _closed_without_hello(res, 3)
    assert dc.wait_line(r"^HEADER listener=2 tag=dd dc=2$", 2)
    assert_ok(procs.client(proxy, SECRET, "dd", 3, 1000, 1000, "--expect-id", 3))


def test_dc_stalls(procs):
    idle = 2
    dc, proxy = _one_dc(procs, "stall", extra=["--idle-timeout", f"{idle}s"])
    healthy = procs.client_bg(proxy, SECRET, "ef", 3, 2 * MB, 2 * MB, "--slow-read", MB,
                              "--expect-id", 3)
    res = procs.client(proxy, SECRET, "ef", 2, 1000, 1000, "--timeout", 15, "--conns", 2)
    _closed_without_hello(res, idle + 3)
    assert res["seconds"] >= idle * 0.8, "closed before idle-timeout"
    assert_ok(procs.result(healthy))
    # The stalled DC socket must have been closed by the proxy as well.
    assert wait_until(lambda: len(dc.matching(r"^CLOSED listener=2 reason=stall_peer_closed$"))
                      == 2, 5), dc.lines[-10:]


def test_idle_relayed_connection_closed(procs):
    # A relayed connection with no traffic is closed after idle-timeout (both sides).
    dc, proxy = _one_dc(procs, "normal", extra=["--idle-timeout", "2s"])
    res = procs.client(proxy, SECRET, "ee", 2, 10, 10, "--hold", 6, "--timeout", 15)
    assert not res["ok"] and res["hellos"] == 1, res
    assert "hold: eof" in res["errors"][0] or "hold: reset" in res["errors"][0], res
    assert 1.5 <= res["seconds"] < T(5), res


@pytest.mark.parametrize("pool", ["0", "2"])
def test_dc_restart(procs, pool):
    dc = procs.fake_dc([(2, "normal")])
    proxy = procs.proxy([("s", SECRET)], [(2, dc.addr(2))],
                        extra=["--dc-pool", pool, "--default-dc", "2"])
    assert_ok(procs.client(proxy, SECRET, "ee", 2, 50000, 50000, "--conns", 3))
    dc.stop(signal.SIGKILL)
    # DC down: clients are closed promptly, without a hello.
    res = procs.client(proxy, SECRET, "ee", 2, 100, 100, "--timeout", 10, "--conns", 3)
    _closed_without_hello(res, CONNECT_TIMEOUT_S + 3)
    # DC back on the same port: service resumes at once (pooled sockets to the dead DC must
    # not be handed to clients).
    procs.fake_dc([(2, "normal")], ports=[dc.port[2]], name="fake_dc_again")
    assert_ok(procs.client(proxy, SECRET, "dd", 2, 50000, 50000, "--conns", 5))
