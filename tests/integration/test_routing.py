"""test_routing.py: DC ids reach the right fake DC listener; fallbacks and dead addresses."""
import pytest

from harness import Std, T, assert_ok, free_ports, MEDIA_4_LISTENER, CONNECT_TIMEOUT_S


@pytest.mark.parametrize("dc", [1, 2, 3, 4, 5, 203])
def test_each_dc(std, dc):
    assert_ok(std.client("ee", dc, 10000, 10000, "--expect-id", dc, "--expect-dc", dc))


def test_media_ids(std):
    # -3 has no line of its own: |-3| = 3. -4 has its own line: its own listener.
    assert_ok(std.client("dd", -3, 1000, 1000, "--expect-id", 3))
    assert_ok(std.client("dd", -4, 1000, 1000, "--expect-id", MEDIA_4_LISTENER))
    assert_ok(std.client("ef", 4, 1000, 1000, "--expect-id", 4))


@pytest.mark.parametrize("dc", [7, 0, -99, 10002, 32767, -32768])
def test_unknown_ids_use_default_dc(std, dc):
    assert_ok(std.client("ee", dc, 1000, 1000, "--expect-id", 2))


def test_default_dc_option(procs):
    env = Std(procs, extra=["--default-dc", "5"])
    assert_ok(env.client("ee", 42, 1000, 1000, "--expect-id", 5))
    assert_ok(env.client("ee", 1, 1000, 1000, "--expect-id", 1))


def test_dead_first_address(procs):
    dc = procs.fake_dc([(5, "normal")])
    dead = free_ports(1)[0]  # nothing listens there: connection refused
    secret = "00112233445566778899aabbccddeeff"
    proxy = procs.proxy([("s", secret)], [(5, f"127.0.0.1:{dead}"), (5, dc.addr(5))],
                        extra=["--default-dc", "5"])
    res = procs.client(proxy, secret, "ef", 5, 50000, 50000, "--expect-id", 5)
    assert_ok(res)
    assert res["seconds"] < T(CONNECT_TIMEOUT_S + 2)


def _blackhole(n_fill=4):
    """A loopback port whose accept queue is full, so new SYNs are dropped (connect hangs)."""
    import socket
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(0)
    port = lst.getsockname()[1]
    fillers = []
    for _ in range(n_fill):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        fillers.append(s)
    return lst, fillers, port


def test_connect_timeout_then_next_address(procs):
    import socket
    import time
    lst, fillers, port = _blackhole()
    try:
        probe = socket.socket()
        probe.settimeout(0.5)
        try:
            probe.connect(("127.0.0.1", port))
            pytest.skip("could not make a blackhole port (SYNs to a full queue accepted)")
        except (socket.timeout, BlockingIOError):
            pass
        finally:
            probe.close()
        dc = procs.fake_dc([(2, "normal")])
        secret = "00112233445566778899aabbccddeeff"
        proxy = procs.proxy([("s", secret)], [(2, f"127.0.0.1:{port}"), (2, dc.addr(2))])
        t0 = time.monotonic()
        res = procs.client(proxy, secret, "dd", 2, 20000, 20000, "--expect-id", 2)
        assert_ok(res)
        # The first address must cost about connect-timeout, not hang.
        assert CONNECT_TIMEOUT_S * 0.8 <= time.monotonic() - t0 < T(CONNECT_TIMEOUT_S + 3), res
    finally:
        for s in fillers:
            s.close()
        lst.close()
