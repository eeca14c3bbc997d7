"""test_metrics_isolation.py: the metrics server cannot slow the relay, leak links to another
site's page (DNS rebinding), be left open off loopback, or be held by one source (issue 24)."""
import json
import re
import socket
import subprocess
import time

import pytest

from harness import EMULATOR, SLOW, WRAPPER, T, free_ports, mtproxy_argv, wait_until
from scrapeload import Pinger, Scrapers, interleaved, many_users_config, pct

# 10,000 users: one /metrics is ~5 MB, one /stats ~11 MB. Fewer under an emulator, where
# everything is ~10x slower (the bound below is a ratio: it holds at any size).
USERS = 2000 if EMULATOR else 10000


def http(port, path, host="127.0.0.1", extra=b"", timeout=10, src=None):
    """(status, body) of GET path with the given Host header (None: no Host line)."""
    s = socket.socket()
    if src:
        s.bind((src, 0))
    s.settimeout(T(timeout))
    s.connect(("127.0.0.1", port))
    head = f"GET {path} HTTP/1.1\r\n".encode()
    if host is not None:
        head += f"Host: {host}\r\n".encode()
    s.sendall(head + extra + b"\r\n")
    out = b""
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        out += b
    s.close()
    head, _, body = out.partition(b"\r\n\r\n")
    return (int(head[9:12]) if head[9:12].isdigit() else 0), body


def big_proxy(procs, tmp_path, extra_conf="", users=USERS):
    """fake_dc echoing on DC 2, and a one-worker proxy with `users` users and metrics on
    loopback. Returns (proxy, metrics port, the first user's secret)."""
    dc = procs.fake_dc([(2, "echo")])
    mport = free_ports(1)[0]
    conf = tmp_path / "many.conf"
    secret = many_users_config(conf, users, dc.addr(2), f"127.0.0.1:{mport}", extra_conf)
    proxy = procs.proxy([], [], workers=1, extra=["--config", str(conf), "--log-level", "info"])
    assert wait_until(lambda: _answers(mport), 30), proxy.stderr_tail()
    return proxy, mport, secret


def _answers(port):
    try:
        return http(port, "/metrics", timeout=5)[0] in (200, 401)
    except OSError:
        return False


@pytest.mark.skipif(bool(WRAPPER), reason="valgrind runs one thread at a time: no isolation "
                    "to measure")
def test_scrapers_do_not_stall_the_relay(procs, tmp_path):
    """Four nice-19 scrapers looping on /metrics and /stats at 10,000 users beside a ping-pong
    client on the same single worker: its p99 stays within 3x of its p99 without them,
    measured in alternating phases of the same run (so the machine's other load hits both
    sides alike). A noisy machine gets up to three tries; the relay on the scraped loop was
    at 100-500 ms here before the fix, every try."""
    proxy, mport, secret = big_proxy(procs, tmp_path)
    st, body = http(mport, "/stats", timeout=30)
    assert st == 200 and len(json.loads(body)["users"]) == USERS
    pinger = Pinger(proxy.addr, secret, timeout=T(10))
    pinger.run(300, T(5))  # warm up
    tries, t0 = [], time.monotonic()
    for _ in range(3):
        scrapers = Scrapers(4, mport)
        try:
            quiet, busy = interleaved(pinger, scrapers, 3000, phases=10, max_phase_s=T(3))
        finally:
            done = scrapers.stop()
        full = [d for d in done if d[0] == "200" and d[1] > 100000]
        q50, q99, b50, b99 = pct(quiet, 50), pct(quiet, 99), pct(busy, 50), pct(busy, 99)
        print(f"{USERS} users, {len(full)} full scrapes: ping-pong without scrapers p50 "
              f"{q50 * 1e3:.3f} ms p99 {q99 * 1e3:.3f} ms ({len(quiet)}), with four scrapers "
              f"p50 {b50 * 1e3:.3f} ms p99 {b99 * 1e3:.3f} ms ({len(busy)})")
        assert len(full) >= 4, done[:20]  # the scrapers did scrape
        # 3x, with a floor of 1 ms (x SLOW) for a quiet p99 of a few tens of microseconds.
        bound = max(3 * q99, 1e-3 * SLOW)
        tries.append((q99, b99, bound))
        if (b99 <= bound and len(busy) >= 2900) or b99 > 20 * bound:
            break
    pinger.close()
    # Rendering is bounded per second, not per scrape: a few renders a second at most.
    elapsed = time.monotonic() - t0
    text = http(mport, "/metrics", timeout=30)[1].decode()
    renders = int(re.search(r"^mtproxy_http_renders_total (\d+)$", text, re.M).group(1))
    answered = int(re.search(r'^mtproxy_http_requests_total\{outcome="answered"\} (\d+)$',
                             text, re.M).group(1))
    print(f"{answered} requests answered, {renders} bodies rendered in {elapsed:.1f} s")
    assert renders <= 4 * elapsed + 4 and answered >= 4 * renders, (renders, answered)
    q99, b99, bound = tries[-1]
    assert b99 <= bound, tries
    assert len(busy) >= 2900, len(busy)  # not cut short by max_phase_s


def test_foreign_host_refused_without_token(procs, tmp_path):
    """DNS rebinding: on a loopback address without a token a foreign Host gets 421 and no
    link; loopback names (any port, any case) and a request without Host are served."""
    proxy, mport, _ = big_proxy(procs, tmp_path, users=3)
    for path in ("/stats", "/metrics", "/", "/qr/u00000.svg"):
        st, body = http(mport, path, host=f"attacker.example:{mport}")
        assert st == 421 and b"secret=" not in body and b"tg://" not in body, (path, st, body)
    for host in (f"127.0.0.1:{mport}", f"LOCALHOST:{mport}", "localhost", f"[::1]:{mport}",
                 f"127.0.0.2:9", None):
        st, body = http(mport, "/stats", host=host)
        assert st == 200 and b"tg://proxy?server=" in body, (host, st)
    st, _ = http(mport, "/stats", extra=b"Host: localhost\r\n")  # two Host lines
    assert st == 400
    seen = 'mtproxy_http_requests_total{outcome="misdirected"} 4'
    assert wait_until(lambda: seen in http(mport, "/metrics")[1].decode(), 5)


def test_foreign_host_allowed_with_token(procs, tmp_path):
    proxy, mport, _ = big_proxy(procs, tmp_path, "metrics-token = t0k-t0k\n", users=3)
    st, _ = http(mport, "/stats", host="attacker.example")
    assert st == 401
    st, body = http(mport, "/stats?token=t0k-t0k", host=f"proxy.example.net:{mport}")
    assert st == 200 and b"tg://proxy?server=" in body


def _start(bins, tmp_path, *args):
    conf = tmp_path / "pub.conf"
    conf.write_text(f"secret = a:{'3' * 32}\nlisten = 127.0.0.1:{free_ports(1)[0]}\n"
                    f"state-file = {tmp_path}/s.state\ndc-builtin = off\ndc = 2 127.0.0.1:9\n"
                    "mask = off\ntls-profile = off\nworkers = 1\n")
    return subprocess.run(mtproxy_argv(bins, "--config", conf, *args), capture_output=True,
                          timeout=T(30), text=True)


def test_public_metrics_address_needs_token_or_opt_in(bins, tmp_path):
    """A metrics address off loopback without metrics-token is refused at start (the check
    and the real start), with the error naming both keys; metrics-token or metrics-public =
    on lets it start."""
    port = free_ports(1)[0]
    for args in (("--check-config",), ()):
        p = _start(bins, tmp_path, "--metrics", f"0.0.0.0:{port}", *args)
        out = p.stdout + p.stderr
        assert p.returncode != 0, out
        assert "metrics-token" in out and "metrics-public" in out, out
    for opt in (("--metrics-token", "x" * 20), ("--metrics-public", "on")):
        p = _start(bins, tmp_path, "--metrics", f"0.0.0.0:{port}", *opt, "--check-config")
        assert p.returncode == 0, p.stdout + p.stderr
    p = _start(bins, tmp_path, "--metrics", f"[::1]:{port}", "--check-config")
    assert p.returncode == 0, p.stdout + p.stderr


def test_one_source_cannot_hold_every_slot(procs, tmp_path):
    """A source holding many connections that asked for /stats and never read (each answer
    larger than the socket buffers) does not stop a real scrape from another source."""
    proxy, mport, _ = big_proxy(procs, tmp_path)
    holders = []
    for _ in range(80):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.bind(("127.0.0.2", 0))
        try:
            s.connect(("127.0.0.1", mport))
            s.sendall(b"GET /stats HTTP/1.1\r\nHost: localhost\r\n\r\n")
        except OSError:
            s.close()
            continue
        holders.append(s)
    time.sleep(T(1))  # every request read, every answer stuck in a full socket
    try:
        t0 = time.monotonic()
        st, body = http(mport, "/metrics", timeout=20)
        assert st == 200 and b"mtproxy_users " in body, st
        st, body = http(mport, "/stats", timeout=20)
        assert st == 200 and len(json.loads(body)["users"]) == USERS
        assert time.monotonic() - t0 < T(10)
    finally:
        for s in holders:
            s.close()
