"""test_load.py: large transfers and many concurrent connections, every byte verified."""
import pytest

import harness
from harness import MODES, Std, assert_ok, wait_until

MB = 1 << 20
PIPES_PER_WORKER = 64  # mtproxy's splice pipe cache bound (see --splice)


@pytest.fixture(params=sorted(MODES))
def env(procs, request):
    return Std(procs, extra=MODES[request.param], workers=2)


@pytest.mark.parametrize("tag", ["ef", "dd"])
def test_10mb_each_way(env, tag):
    res = env.client(tag, 2, 10 * MB, 10 * MB, "--expect-id", 2, "--timeout", 60, timeout=90)
    assert_ok(res)
    assert res["up_total"] == res["down_total"] == 10 * MB
    assert env.dc.wait_line(rf"^DONE listener=2 up_ok={10 * MB} mismatch=none$", 5)


def test_200_concurrent(env):
    mark = env.dc.mark()
    res = env.client("ee", 4, 64 * 1024, 64 * 1024, "--conns", 200, "--expect-id", 4,
                     "--timeout", 60, timeout=90)
    assert_ok(res)
    assert res["up_total"] == res["down_total"] == 200 * 64 * 1024
    # The DC prints DONE before it sends the trailer the client waited for, but the harness
    # reads the DC's output in a thread of its own: wait for the lines rather than race it.
    done = r"^DONE listener=4 up_ok=65536 mismatch=none$"
    assert wait_until(lambda: len(env.dc.matching(done, mark)) == 200, 10), \
        len(env.dc.matching(done, mark))


def test_uneven_and_empty_directions(env):
    assert_ok(env.client("ef", 1, 0, 3 * MB, "--expect-id", 1))
    assert_ok(env.client("ee", 1, 3 * MB, 0, "--expect-id", 1))
    assert_ok(env.client("dd", 1, 0, 0, "--expect-id", 1))
    assert_ok(env.client("dd", 1, 1, 7, "--expect-id", 1))


def test_slow_reader_backpressure(env):
    # 3 MB down read at 1.5 MB/s while 3 MB go up: the proxy must buffer a bounded amount
    # and lose nothing.
    res = env.client("ee", 3, 3 * MB, 3 * MB, "--slow-read", 1536 * 1024, "--timeout", 30)
    assert_ok(res)
    assert res["seconds"] >= 1.5


def test_dc_reset_after_trailer(env):
    assert_ok(env.client("ef", 5, MB, MB, "--rst-after-trailer", "--conns", 5))


def test_1000_held_at_once(env, procs):
    if harness.WRAPPER:
        pytest.skip("1000 connections at once are too heavy under valgrind")
    baseline = env.proxy.settled_sockets()
    c = procs.client_bg(env.proxy, env.plain, "dd", 5, 16384, 16384, "--conns", 1000,
                        "--hold", 3, "--expect-id", 5, "--timeout", 60)
    # While all 1000 hold after their hello, the proxy has both sides of each open.
    assert wait_until(lambda: env.proxy.sockets() >= baseline + 2000, 10), env.proxy.fd_kinds()
    res = procs.result(c, timeout=60)
    assert_ok(res)
    assert wait_until(lambda: env.proxy.sockets() <= baseline, 5), (env.proxy.fd_kinds(),
                                                                     baseline)
    assert env.proxy.fd_kinds()["pipe"] <= 2 * PIPES_PER_WORKER * 2, env.proxy.fd_kinds()
