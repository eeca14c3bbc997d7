"""test_soak.py: minutes of mixed connection churn; then fds and RSS are back, no byte is lost."""
import json
import os
import random
import socket
import threading
import time

import harness
import rawclient
from harness import DC_IDS, Std, assert_ok, wait_until
from proxyinfo import RSS_MEANINGFUL, rss_kb, stats

# Length of the churn phase; the ctest entry runs the default, a long soak sets e.g. 600.
SOAK_SECONDS = float(os.environ.get("MTPROXY_SOAK_SECONDS", "60"))
THREADS = 4          # churn threads, each running one action after another
MAX_CONNS = 40       # most connections one test_client run opens
KB = 1024


class Tally:
    """What the churn did, summed over threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.n = {"client_runs": 0, "valid_conns": 0, "bytes_verified": 0, "abrupt_conns": 0,
                  "bad_handshakes": 0, "stalled_readers": 0, "held_conns": 0}
        self.failures = []

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                self.n[k] += v

    def fail(self, what):
        with self.lock:
            self.failures.append(what)


def _run_client(env, secret, tag, dc, up, down, *extra):
    return env.procs.client(env.proxy, secret, tag, dc, up, down, *extra, timeout=120)


def _valid(env, rng, tally):
    """A batch of valid clients, every byte checked; sometimes with a DC reset at the end."""
    dd = rng.random() < 0.3
    tag = "dd" if dd else rng.choice(["ef", "ee", "dd"])
    dc = rng.choice(DC_IDS + [-2, -4])
    conns = rng.randint(1, MAX_CONNS)
    up, down = rng.randint(0, 256 * KB), rng.randint(0, 256 * KB)
    extra = ["--timeout", 60]
    if rng.random() < 0.2:
        extra.append("--rst-after-trailer")
    if rng.random() < 0.1:
        extra += ["--slow-read", 2 * 1024 * KB]
    res = _run_client(env, env.dd if dd else env.plain, tag, dc, up, down,
                      "--conns", conns, *extra)
    if not (res["ok"] and res["rc"] == 0 and res["up_total"] == conns * up
            and res["down_total"] == conns * down):
        tally.fail(f"valid clients failed: {json.dumps(res)}")
    tally.add(client_runs=1, valid_conns=conns, bytes_verified=conns * (up + down))


def _abrupt(env, rng, tally):
    """Clients that vanish half-way through their transfer."""
    conns = rng.randint(1, 20)
    res = _run_client(env, env.plain, rng.choice(["ef", "ee"]), 2, 512 * KB,
                      512 * KB, "--close-halfway", "--conns", conns, "--timeout", 30)
    if not res["ok"]:  # the client's own check: it got as far as it meant to
        tally.fail(f"abrupt clients failed early: {json.dumps(res)}")
    tally.add(client_runs=1, abrupt_conns=conns)


def _bad(env, rng, tally):
    """Probes: garbage headers, truncated headers, instant closes, an HTTP request."""
    n = rng.randint(5, 40)
    socks = []
    for _ in range(n):
        try:
            s = rawclient.connect(env.proxy.addr)
        except OSError as e:
            tally.fail(f"connect for a probe failed: {e}")
            continue
        kind = rng.randrange(4)
        try:
            if kind == 0:
                s.sendall(os.urandom(64 + rng.randrange(200)))
            elif kind == 1:
                s.sendall(os.urandom(rng.randint(1, 63)))
            elif kind == 2:
                s.sendall(b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
        except OSError:
            pass
        if kind == 3 or rng.random() < 0.5:
            s.close()  # gone at once
        else:
            socks.append(s)  # or left open: the proxy must close it by itself
    time.sleep(rng.uniform(0.1, 1.0))
    for s in socks:
        s.close()
    tally.add(bad_handshakes=n)


def _stalled(env, rng, tally):
    """Clients that ask for a lot and then do not read for a while, then reset."""
    n = rng.randint(1, 8)
    socks = []
    for _ in range(n):
        try:
            socks.append(rawclient.start_session(env.proxy.addr, env.plain, "ee", 3, up=0,
                                                 down=64 << 20, rcvbuf=8192)[0])
        except OSError as e:
            tally.fail(f"stalled reader could not start: {e}")
    time.sleep(rng.uniform(0.5, 2.0))
    for s in socks:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        s.close()
    tally.add(stalled_readers=len(socks))


def _held(env, rng, tally):
    """Idle relayed connections that stay a few seconds, then transfer and check."""
    conns = rng.randint(10, 100)
    res = _run_client(env, env.plain, "ef", 5, 4 * KB, 4 * KB, "--conns", conns,
                      "--hold", rng.randint(1, 4), "--timeout", 60)
    if not res["ok"]:
        tally.fail(f"held clients failed: {json.dumps(res)}")
    tally.add(client_runs=1, held_conns=conns, bytes_verified=conns * 8 * KB)


def _churn(env, seed, deadline, tally):
    rng = random.Random(seed)
    actions = [(_valid, 5), (_abrupt, 1), (_bad, 2), (_stalled, 1), (_held, 1)]
    weights = [w for _, w in actions]
    while time.monotonic() < deadline:
        act = rng.choices([a for a, _ in actions], weights)[0]
        try:
            act(env, rng, tally)
        except Exception as e:  # noqa: BLE001 - recorded, the test fails at the end
            tally.fail(f"{act.__name__}: {e!r}")


def test_soak_churn(procs, tmp_path):
    env = Std(procs, extra=["--log-level", "info"], workers=2)
    pid = env.proxy.pid
    cold_rss = rss_kb(pid)
    # Warm-up at the soak's own peak so that pools have grown: the baseline to return to.
    assert_ok(env.client("ee", 2, 64 * KB, 64 * KB, "--conns", MAX_CONNS * THREADS))
    assert_ok(env.client("ef", 5, 4 * KB, 4 * KB, "--conns", 100, "--hold", 1))
    base_sockets = env.proxy.settled_sockets()
    warm_rss = rss_kb(pid)

    tally = Tally()
    deadline = time.monotonic() + SOAK_SECONDS
    seed = int(os.environ.get("MTPROXY_SOAK_SEED", str(random.randrange(1 << 30))))
    threads = [threading.Thread(target=_churn, args=(env, seed + i, deadline, tally))
               for i in range(THREADS)]
    for t in threads:
        t.start()
    peak_sockets = 0
    while any(t.is_alive() for t in threads):
        peak_sockets = max(peak_sockets, env.proxy.sockets())
        time.sleep(0.5)
    for t in threads:
        t.join()

    # Everything the churn opened is closed by the proxy within its timeouts.
    settle = 4 * harness.HANDSHAKE_TIMEOUT_S + 10
    assert wait_until(lambda: env.proxy.sockets() <= base_sockets, settle), \
        (env.proxy.fd_kinds(), base_sockets)
    after_sockets = env.proxy.settled_sockets()
    time.sleep(1.0)
    after_rss = rss_kb(pid)
    s = stats(env.proxy)
    report = dict(tally.n, seed=seed, seconds=SOAK_SECONDS, proxy_accepted=s["accepted"],
                  proxy_active_after=s["active"], sockets_before=base_sockets,
                  sockets_peak=peak_sockets, sockets_after=after_sockets, rss_cold_kb=cold_rss,
                  rss_warm_kb=warm_rss, rss_after_kb=after_rss, fds_after=env.proxy.fd_kinds(),
                  closed={k: s[k] for k in s if "-" in k or k == "done"})
    out = os.environ.get("MTPROXY_SOAK_REPORT", str(tmp_path / "soak.json"))
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    print("soak:", json.dumps(report))

    assert not tally.failures, f"{len(tally.failures)} failures, first: {tally.failures[:3]}"
    assert s["active"] == 0, s
    assert tally.n["valid_conns"] > 0 and tally.n["bad_handshakes"] > 0
    if RSS_MEANINGFUL:
        # Memory follows load back down: arena slabs past the reserve are unmapped; the
        # connection pool keeps its peak, which the warm-up already reached.
        assert after_rss <= warm_rss + max(8 * 1024, warm_rss // 10), report
    assert env.proxy.alive()
    assert_ok(env.client("dd", 3, 100 * KB, 100 * KB, "--conns", 10, secret=env.dd))
