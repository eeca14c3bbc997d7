"""test_perf.py: the relay's cost cuts keep every byte (#19): idle connections' cipher
contexts parked and resumed, wide reads on bulk connections, busy-poll."""
import pytest

from harness import assert_ok
from proxyinfo import stats
from test_fastpath import FastEnv

KB = 1 << 10
MB = 1 << 20
FAST = {"fast": ["--fast-mode", "on"], "nofast": ["--fast-mode", "off"]}


@pytest.mark.parametrize("fast", sorted(FAST))
def test_idle_ciphers_parked_then_resumed(procs, fast):
    # Each client sits idle for 2 s after the hello (the proxy parks its cipher streams at the
    # sweep after 1 s idle, keeping key, IV and position), then moves 256 KiB each way: every
    # byte must decrypt, for each kind, with all four streams in use (fast mode off) or two.
    env = FastEnv(procs, FAST[fast])
    for name, secret, tag in env.kinds():
        before = stats(env.proxy).get("ctr_parked", 0)
        mark = env.dc.mark()
        res = env.client(tag, 2, 256 * KB, 256 * KB, "--hold", 2, secret=secret)
        assert_ok(res)
        assert res["up_total"] == res["down_total"] == 256 * KB, res
        assert env.dc.wait_line(rf"^DONE listener=2 up_ok={256 * KB} mismatch=none$", 5, mark)
        assert stats(env.proxy)["ctr_parked"] > before, name


@pytest.mark.parametrize("relay", ["fast-splice", "fast-copy", "nofast-copy"])
def test_wide_reads_every_byte(procs, relay):
    # A bulk upload (and, without fast mode, download) is read up to 4 blocks at a time once
    # reads come back full; every byte must still arrive in order, for each kind, also past
    # short writes toward a slow reader.
    from test_fastpath import RELAY
    env = FastEnv(procs, RELAY[relay])
    for name, secret, tag in env.kinds():
        before = stats(env.proxy)["wide_reads"]
        mark = env.dc.mark()
        res = env.client(tag, 2, 6 * MB, 2 * MB, "--expect-id", 2, secret=secret)
        assert_ok(res)
        assert res["up_total"] == 6 * MB and res["down_total"] == 2 * MB, res
        res = env.client(tag, 3, 2 * MB, 2 * MB, "--slow-read", 4 * MB, secret=secret)
        assert_ok(res)
        assert env.dc.wait_line(rf"^DONE listener=2 up_ok={6 * MB} mismatch=none$", 5, mark)
        assert env.dc.wait_line(rf"^DONE listener=3 up_ok={2 * MB} mismatch=none$", 5, mark)
        assert stats(env.proxy)["wide_reads"] > before, (name, relay)


@pytest.mark.parametrize("busy", ["0", "50"])
def test_busy_poll_every_byte_then_sleeps(procs, busy):
    # busy-poll keeps the worker polling for a while after each burst: every kind still gets
    # every byte (spliced, copied and slow-reader paths), a stop still stops, and once traffic
    # ends the worker goes back to sleep (an idle proxy uses no CPU).
    import os
    import time
    from proxyinfo import cpu_seconds
    env = FastEnv(procs, ["--busy-poll", busy])
    for name, secret, tag in env.kinds():
        mark = env.dc.mark()
        res = env.client(tag, 2, 2 * MB, 2 * MB, secret=secret)
        assert_ok(res)
        res = env.client(tag, 3, MB, MB, "--slow-read", MB, secret=secret)
        assert_ok(res)
        assert env.dc.wait_line(rf"^DONE listener=2 up_ok={2 * MB} mismatch=none$", 5, mark)
        assert env.dc.wait_line(rf"^DONE listener=3 up_ok={MB} mismatch=none$", 5, mark)
    s = stats(env.proxy)
    if busy == "0" or os.cpu_count() < 2:
        assert s["busy_hits"] == s["busy_misses"] == 0, s
    else:
        assert s["busy_hits"] + s["busy_misses"] > 0, s
    time.sleep(0.5)
    before = cpu_seconds(env.proxy.pid)
    time.sleep(2)
    assert cpu_seconds(env.proxy.pid) - before < 0.2  # asleep, not spinning
