"""test_fastpath.py: fast mode x splice x client kind, every byte checked; the DC pool."""
import time

import pytest

from harness import DC_IDS, MEDIA_4_LISTENER, assert_ok, new_secret, wait_until
from proxyinfo import cpu_seconds, stats

RELAY = {
    "fast-splice": ["--fast-mode", "on", "--splice", "on"],
    # ee downloads read + writev with their record headers; plain and dd still spliced
    "fast-splice-tlscopy": ["--fast-mode", "on", "--splice", "on", "--splice-tls", "off"],
    "fast-copy": ["--fast-mode", "on", "--splice", "off"],
    "nofast-splice": ["--fast-mode", "off", "--splice", "on"],  # splice needs fast mode
    "nofast-copy": ["--fast-mode", "off", "--splice", "off"],
}
# A small send buffer: the proxy's writes toward both sides come back short all the time.
# (No small rcvbuf: it is set on client sockets only after accept, which stalls uploads on
# loopback, see test_tiny_rcvbuf_upload; up to 16k it can still cost seconds.)
BUFS = {"default": [], "small": ["--sndbuf", "4096"]}

MB = 1 << 20


class FastEnv:
    """Like harness.Std (DC listeners, plain and dd secrets), plus an ee secret; dc_modes gives
    some DC listeners a special fake_dc mode. The mask is off."""

    def __init__(self, procs, extra=(), dc_modes=None, dc_extra=()):
        self.procs = procs
        self.plain, self.dd = new_secret(), "dd" + new_secret()
        self.ee = "ee" + new_secret() + "www.example.com".encode().hex()
        modes = dc_modes or {}
        listeners = [(i, modes.get(i, "normal")) for i in DC_IDS]
        self.dc = procs.fake_dc(listeners + [(MEDIA_4_LISTENER, "normal")], extra=dc_extra)
        dcs = [(i, self.dc.addr(i)) for i in DC_IDS] + [(-4, self.dc.addr(MEDIA_4_LISTENER))]
        self.proxy = procs.proxy([("plain", self.plain), ("padded", self.dd), ("tls", self.ee)],
                                 dcs, extra=extra)

    def kinds(self):
        """(name, secret, tag) of the three client kinds."""
        return [("plain", self.plain, "ef"), ("dd", self.dd, "dd"), ("ee", self.ee, "dd")]

    def client(self, tag, dc, up, down, *extra, secret, timeout=60):
        return self.procs.client(self.proxy, secret, tag, dc, up, down, *extra, timeout=timeout)


@pytest.mark.parametrize("bufs", sorted(BUFS))
@pytest.mark.parametrize("relay", sorted(RELAY))
def test_every_byte_every_kind(procs, relay, bufs):
    env = FastEnv(procs, RELAY[relay] + BUFS[bufs])
    size = 2 * MB if bufs == "small" else 3 * MB
    splice_expected = relay.startswith("fast-splice")
    for name, secret, tag in env.kinds():
        before = stats(env.proxy)["spliced"]
        mark = env.dc.mark()
        res = env.client(tag, 2, size, size, "--expect-id", 2, secret=secret, timeout=60)
        assert_ok(res)
        assert res["up_total"] == res["down_total"] == size, res
        # A slow reader: the proxy's writes toward the client stall while the DC keeps sending.
        res = env.client(tag, 3, MB, 2 * MB, "--slow-read", 4 * MB, secret=secret, timeout=60)
        assert_ok(res)
        assert res["seconds"] >= 0.3, res  # it really was throttled
        assert env.dc.wait_line(rf"^DONE listener=2 up_ok={size} mismatch=none$", 5, mark)
        assert env.dc.wait_line(rf"^DONE listener=3 up_ok={MB} mismatch=none$", 5, mark)
        if name == "ee":
            assert res["tls"] == "server-hello" and 0 < res["max_record"] <= 16384, res
        spliced = stats(env.proxy)["spliced"] - before
        if splice_expected and (name != "ee" or relay == "fast-splice"):
            # Most of the download went through the pipe (the DC's hello may not have). For
            # ee the client checked every record header written between spliced chunks.
            assert spliced >= size + 2 * MB - 64 * 1024, (name, spliced)
        else:
            assert spliced == 0, (name, relay, spliced)


@pytest.mark.parametrize("splice_tls", ["on", "off"])
def test_small_segments_slow_reader_no_spin(procs, splice_tls):
    # A pipe can run out of slots before max-buffer bytes are in it (each slot holds one
    # page-sized piece of a segment, or one record header). With a slow client the proxy must
    # then stop reading the DC until the pipe drains, not spin on a readable DC socket whose
    # splice says EAGAIN. The DC sends in 1000-byte pieces; every byte is still checked.
    env = FastEnv(procs, ["--splice-tls", splice_tls, "--max-buffer", "4k", "--block-size", "4k",
                         "--sndbuf", "4096"],
                  dc_extra=["--chunk", "1000"])
    cpu0 = cpu_seconds(env.proxy.pid)
    t0 = time.monotonic()
    for name, secret, tag in env.kinds():
        res = env.client(tag, 2, 1000, 600000, "--slow-read", 400000, "--rcvbuf", 8192,
                         secret=secret, timeout=30)
        assert_ok(res)
        assert res["down_total"] == 600000, (name, res)
    wall = time.monotonic() - t0
    cpu = cpu_seconds(env.proxy.pid) - cpu0
    assert wall >= 3, wall  # three clients throttled to 400 kB/s for 600 kB each
    # The relay itself needs a few ms here; a spinning worker burns the whole wall time.
    assert cpu < 0.25 * wall, (cpu, wall)
    s = stats(env.proxy)
    assert s["spliced"] >= 2 * 500000, s  # the pipe path really ran
    if splice_tls == "on":
        # max-buffer 4k: a one-page pipe, which a record header fills: every ee record
        # found the pipe full, so the stall path above really ran.
        assert s["pipe_full"] > 0, s


@pytest.mark.parametrize("mode", ["buffer", "cork", "msg-more"])
def test_write_batch_modes_every_byte(procs, mode):
    # Each way of holding writes for a batch window (user space, TCP_CORK, MSG_MORE) delivers
    # every byte, for spliced and copied paths, and the window really holds: a lone small
    # exchange takes at least one window.
    env = FastEnv(procs, ["--write-batch", "200ms", "--write-batch-mode", mode])
    for name, secret, tag in env.kinds():
        res = env.client(tag, 2, MB, 2 * MB, "--conns", 3, secret=secret, timeout=60)
        assert_ok(res)
        assert res["up_total"] == 3 * MB and res["down_total"] == 6 * MB, (name, res)
    t0 = time.monotonic()
    assert_ok(env.client("dd", 2, 100, 100, secret=env.dd))
    assert time.monotonic() - t0 >= 0.2


def test_tiny_rcvbuf_upload(procs):
    env = FastEnv(procs, ["--rcvbuf", "4096"])
    res = env.client("ef", 2, 8 * MB, 1000, "--timeout", 6, secret=env.plain)
    assert_ok(res)


@pytest.mark.parametrize("relay", ["fast-splice", "nofast-copy"])
def test_many_concurrent_mixed(procs, relay):
    # All three kinds at once on one worker, with half-way closes mixed in.
    env = FastEnv(procs, RELAY[relay])
    runs = [procs.client_bg(env.proxy, secret, tag, 2, 300000, 500000, "--conns", 8,
                            name=name) for name, secret, tag in env.kinds()]
    runs.append(procs.client_bg(env.proxy, env.plain, "ee", 4, MB, MB, "--conns", 4,
                                "--close-halfway", name="halfway"))
    for p in runs:
        assert_ok(procs.result(p, timeout=60))
    # The proxy is fine afterwards.
    assert_ok(env.client("dd", 2, 100000, 100000, secret=env.dd))


# --------------------------------------------------------------------------------------------
# DC pool.

def _pool(env):
    s = stats(env.proxy)
    return s, {k: s[k] for k in ("connects", "claims", "dropped", "failures", "recycled")}


def test_dc_pool_claimed_socket_works(procs):
    env = FastEnv(procs, ["--dc-pool", "2"])
    ids = len(DC_IDS) + 1
    # Every DC id gets its two pre-connected sockets; none of them carries a header yet.
    assert wait_until(lambda: _pool(env)[1]["connects"] >= 2 * ids, 10), _pool(env)
    assert env.dc.headers() == 0
    for name, secret, tag in env.kinds():
        res = env.client(tag, 2, 200000, 300000, "--expect-id", 2, secret=secret)
        assert_ok(res)
    s, pool = _pool(env)
    assert pool["claims"] >= 3, pool
    assert s["dc_connects"] >= 3, s
    # Claimed sockets were replaced.
    assert wait_until(lambda: _pool(env)[1]["connects"] >= 2 * ids + 3, 10), _pool(env)


def test_dc_pool_learns_idle_timeout_recycles_first(procs):
    # DC 2 drops a socket that stays silent for 2 s (long enough not to count as a failure).
    # After two drops in a row the pool knows the DC's idle timeout and replaces its socket at
    # 3/4 of it, before the DC closes it: no more drops (a drop racing a client's claim would
    # hand that client a socket whose FIN is on its way), recycles instead; clients still work.
    env = FastEnv(procs, ["--dc-pool", "1"], dc_modes={2: "idleclose:2000"})
    assert wait_until(lambda: _pool(env)[1]["dropped"] >= 2, 12), _pool(env)
    time.sleep(0.2)
    _, p0 = _pool(env)
    time.sleep(4.0)  # two and a half recycle periods of ~1.5 s
    _, p1 = _pool(env)
    assert p1["recycled"] - p0["recycled"] >= 2, (p0, p1)
    assert p1["dropped"] == p0["dropped"], (p0, p1)
    for name, secret, tag in env.kinds():
        assert_ok(env.client(tag, 2, 20000, 20000, "--expect-id", 2, secret=secret))
    _, p2 = _pool(env)
    assert p2["claims"] > p1["claims"], (p1, p2)


def test_dc_pool_idle_drops_replaced_never_handed_out(procs):
    # DC 2 closes every connection that stays silent for 300 ms, like real DCs drop idle
    # pre-connected sockets. The pool must notice, replace them, and never give a client a
    # dead one: clients spread over several drop cycles all succeed.
    env = FastEnv(procs, ["--dc-pool", "2"], dc_modes={2: "idleclose:300"})
    assert wait_until(lambda: _pool(env)[1]["dropped"] >= 2, 10), _pool(env)
    assert env.dc.wait_line(r"^IDLECLOSE listener=2 ms=300$", 5)
    _, p0 = _pool(env)
    kinds = env.kinds()
    # A pooled socket lives 300 ms, then the pool waits about 1 s before reconnecting. Gaps
    # around 300 ms land clients just before, at and just after a drop; short ones claim the
    # replacement right after its connect.
    gaps = [0.31, 0.05, 0.29, 0.33, 0.12, 0.30, 0.45, 0.02, 0.32, 0.6]
    for i in range(20):
        name, secret, tag = kinds[i % 3]
        res = env.client(tag, 2, 20000, 20000, "--expect-id", 2, secret=secret, timeout=30)
        assert_ok(res)
        time.sleep(gaps[i % len(gaps)])
    _, p1 = _pool(env)
    assert p1["dropped"] > p0["dropped"], (p0, p1)
    assert p1["connects"] > p0["connects"], (p0, p1)
    assert p1["claims"] >= 1, (p0, p1)  # some clients really got a pooled socket
    done = r"^DONE listener=2 up_ok=20000 mismatch=none$"
    assert wait_until(lambda: len(env.dc.matching(done)) == 20, 5), len(env.dc.matching(done))
