"""test_hardening.py: what a stranger without a secret can do to the proxy (issue: hardening II)."""
import os
import socket
import time

import pytest

from harness import DC_IDS, T, assert_ok, new_secret, wait_until
from proxyinfo import stats
import rawclient


def env(procs, extra=()):
    plain = new_secret()
    dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
    proxy = procs.proxy([("plain", plain), ("padded", "dd" + new_secret())],
                        [(i, dc.addr(i)) for i in DC_IDS], extra=list(extra))
    return plain, dc, proxy


def session(port, wire, timeout=3.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=T(timeout))
    s.sendall(wire)
    got = b""
    try:
        while len(got) < 64:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    return got


def test_dd_replay_after_the_time_window(procs):
    """obfuscated2 headers carry no time stamp: a replay is refused however late it comes
    (the window that ages FakeTLS hellos out of the cache must not age these)."""
    plain, dc, proxy = env(procs, ["--tls-time-skew", "1s"])  # window: 2 s
    o = rawclient.Obfs2(plain, "dd", 2)
    wire = o.wire_header + o.encrypt(rawclient.test_request(0, 1000))
    assert len(session(proxy.port, wire)) >= 64
    time.sleep(2.5)
    mark = dc.mark()
    assert session(proxy.port, wire, timeout=T(5)) == b""
    assert dc.headers(mark) == 0
    assert stats(proxy)["replays"] == 1
    # a fresh client is served all the same
    assert_ok(procs.client(proxy, plain, "dd", 2, 1000, 1000))


def run_daemon(bins, tmp_path, *extra, dc="127.0.0.1:1"):
    """mtproxy with daemonize = on; returns (pid, log path, pidfile, output, port) once its
    pidfile names it."""
    import subprocess
    from harness import free_ports, mtproxy_argv
    port = free_ports(1)[0]
    log = tmp_path / "mtproxy.log"
    pidfile = tmp_path / "run" / "mtproxy.pid"
    r = subprocess.run(mtproxy_argv(bins, "--listen", f"127.0.0.1:{port}", "--dc-builtin", "off",
                                    "--dc", f"2 {dc}", "--mask", "off", "--daemonize",
                                    "on", "--log", str(log), "--pidfile", str(pidfile),
                                    "--state-file", str(tmp_path / "state" / "mtproxy.state"),
                                    *extra),
                       capture_output=True, timeout=T(20))
    assert r.returncode == 0, r
    assert wait_until(lambda: pidfile.exists() and not pidfile.is_symlink() and
                      pidfile.read_text().strip(), T(5))
    pid = int(pidfile.read_text())
    assert wait_until(lambda: " started, pid " in log.read_text(), T(5))
    return pid, log, pidfile, r.stdout.decode() + r.stderr.decode(), port


def stop(pid):
    import signal
    os.kill(pid, signal.SIGTERM)

    def gone():
        try:
            os.kill(pid, 0)
            return False
        except ProcessLookupError:
            return True
    assert wait_until(gone, T(10))


def test_no_secret_in_the_log_when_daemonized(bins, procs, tmp_path):
    if not bins["mtproxy"]:
        pytest.skip("MTPROXY_BIN not set")
    (tmp_path / "run").mkdir()
    (tmp_path / "state").mkdir()
    secret = "dd" + new_secret()
    dc = procs.fake_dc([(2, "normal")])
    pid, log, pidfile, out, port = run_daemon(bins, tmp_path, "--secret", f"s:{secret}",
                                              dc=dc.addr(2))
    try:
        # the loops made before the fork work in the daemon (ev_loop_fork)
        assert_ok(procs.client(f"127.0.0.1:{port}", secret, "dd", 2, 100000, 100000))
        text = log.read_text()
        assert secret[2:] not in text and "tg://" not in text, text
        assert secret[2:] not in out
        links = (tmp_path / "state" / "mtproxy.state.links").read_text()
        assert secret in links
        # A generated secret (none configured) is not logged either.
    finally:
        stop(pid)
    assert not pidfile.exists()


def test_pidfile_planted_symlink_and_removal_after_dropping_privileges(bins):
    import pathlib
    import pwd
    import shutil
    import tempfile
    if not bins["mtproxy"]:
        pytest.skip("MTPROXY_BIN not set")
    if os.getuid() != 0:
        pytest.skip("needs root to drop privileges")
    nobody = pwd.getpwnam("nobody")
    # Outside pytest's private (0700) tree, so that the unprivileged user can reach it.
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="mtproxy-pidfile-"))
    try:
        pidfile_checks(bins, tmp_path, nobody)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def pidfile_checks(bins, tmp_path, nobody):
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "state").mkdir()
    os.chmod(tmp_path, 0o755)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    # the old scheme's temporary names, and the pidfile itself, planted as symlinks
    os.symlink(victim, run / "mtproxy.pid")
    os.symlink(victim, run / "mtproxy.pid.tmp")
    os.chown(run, nobody.pw_uid, nobody.pw_gid)  # a directory the user owns (like /run/mtproxy)
    os.chown(tmp_path / "state", nobody.pw_uid, nobody.pw_gid)
    pid, log, pidfile, out, _ = run_daemon(bins, tmp_path, "--user", "nobody",
                                        "--secret", f"s:{new_secret()}")
    assert victim.read_text() == "precious\n"
    assert not pidfile.is_symlink() and pidfile.stat().st_uid == nobody.pw_uid
    stop(pid)
    assert not pidfile.exists(), "pidfile left behind after dropping privileges"
    assert victim.read_text() == "precious\n"
    # In a directory the user cannot write, the pidfile is emptied and the log says why.
    os.chown(run, 0, 0)
    pid, log, pidfile, out, _ = run_daemon(bins, tmp_path, "--user", "nobody",
                                        "--secret", f"s:{new_secret()}")
    stop(pid)
    assert pidfile.read_text() == ""
    assert "emptied, not removed" in log.read_text()


def test_bogus_hello_cost_with_64_secrets(procs):
    """A FakeTLS probe costs one HMAC per secret it could belong to: with tls-sni-check (the
    default) only the secrets of the domain it names, none for a domain that is not ours."""
    dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
    dcs = [(i, dc.addr(i)) for i in DC_IDS]
    secrets = []
    for i in range(64):  # 32 domains, 2 secrets each
        domain = f"d{i // 2}.example.net"
        secrets.append((f"u{i}", "ee" + new_secret() + domain.encode().hex()))
    on = procs.proxy(secrets, dcs, name="snicheck")
    off = procs.proxy(secrets, dcs, extra=["--tls-sni-check", "off"], name="nosnicheck")
    key = secrets[10][1]  # d5.example.net

    def probe(proxy, sni, n=2):
        before = stats(proxy)["tls_hmacs"]
        for _ in range(n):
            res = procs.client(proxy, key, "dd", 2, 100, 100, "--tls-wrong-key", "--tls-sni", sni,
                               "--timeout", "10")
            assert not res["ok"] and res["hellos"] == 0, res
        return (stats(proxy)["tls_hmacs"] - before) / n

    assert probe(on, "d5.example.net") == 2
    assert probe(on, "not-ours.example.org") == 0
    assert probe(off, "not-ours.example.org") == 64
    # a real client of the last user is still served, at the cost of its domain's two secrets
    before = stats(on)["tls_hmacs"]
    assert_ok(procs.client(on, secrets[63][1], "dd", 2, 1000, 1000))
    assert stats(on)["tls_hmacs"] - before == 2


def front_probe(procs, payload, extra=()):
    """Seconds until a probe got the fronted site's answer (handshake-timeout 10 s)."""
    from harness import FakeWeb
    web = FakeWeb()
    try:
        plain, dc, proxy = env(procs, ["--mask", "on", "--mask-host", "127.0.0.1",
                                       "--mask-port", str(web.port),
                                       "--handshake-timeout", "10s"] + list(extra))
        s = socket.create_connection(("127.0.0.1", proxy.port), timeout=T(15))
        t0 = time.monotonic()
        s.sendall(payload)
        got = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        s.close()
        assert got == FakeWeb.REPLY, got
        assert bytes(web.received[0]) == payload
        return time.monotonic() - t0
    finally:
        web.close()


def test_http_probe_fronted_at_once(procs):
    """A short HTTP request can be no client's header: it reaches the real site at once, not
    after seconds of silence (a timing tell)."""
    assert front_probe(procs, b"GET / HTTP/1.0\r\n\r\n") < T(0.5)
    assert front_probe(procs, b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n") < T(0.5)


def test_short_probe_fronted_after_probe_wait(procs):
    """Bytes that could start a header but stop short: fronted after probe-wait, long before
    the handshake timeout."""
    secs = front_probe(procs, os.urandom(20).replace(b"\xef", b"\x01") + b"\r\n\r\n",
                       ["--probe-wait", "600ms"])
    assert 0.5 <= secs < T(2.0), secs


def test_log_lines_under_a_flood_bounded(procs):
    """300 strangers with bad headers: a handful of lines each window and a summary, not 300+
    lines; a real client's close is still logged."""
    import threading
    plain, dc, proxy = env(procs, ["--log-level", "info", "--handshake-timeout", "500ms"])
    start = len(proxy.stderr_tail(100000).splitlines())

    def flood(n):
        for _ in range(n):
            try:
                s = socket.create_connection(("127.0.0.1", proxy.port), timeout=T(5))
                s.sendall(os.urandom(64))
                s.close()
            except OSError:
                pass
    ts = [threading.Thread(target=flood, args=(100,)) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert wait_until(lambda: stats(proxy).get("bad-header", 0) >= 300, T(15), step=0.5)
    lines = proxy.stderr_tail(100000).splitlines()[start:]
    about = [l for l in lines if "bad header" in l or "(bad-header)" in l]
    assert len(about) <= 2 * 5, "\n".join(about[:20])
    # the summary comes at the end of the window
    assert wait_until(lambda: "more closes: bad-header" in proxy.stderr_tail(2000), T(12))
    assert wait_until(lambda: "more rejected clients" in proxy.stderr_tail(2000), T(2))


class StreamWeb:
    """A fronted 'site' that streams to every connection until the peer stops taking bytes."""

    def __init__(self):
        import threading
        self.lst = socket.socket()
        self.lst.bind(("127.0.0.1", 0))
        self.lst.listen(1024)
        self.port = self.lst.getsockname()[1]
        self.conns = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import threading
        while True:
            try:
                c, _ = self.lst.accept()
            except OSError:
                return
            self.conns += 1
            threading.Thread(target=self._stream, args=(c,), daemon=True).start()

    @staticmethod
    def _stream(c):
        chunk = b"x" * 65536
        c.settimeout(20)
        try:
            while True:
                c.sendall(chunk)
        except OSError:
            pass
        c.close()

    def close(self):
        self.lst.close()


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_fronted_flood_cannot_starve_relays(procs):
    """300 fronted connections that never read while the site streams (the flood that used to
    take every block and pause accepting) next to 20 real dd downloads: the downloads get every
    byte, in time; the fronted ones stay within mask-buffer-memory."""
    web = StreamWeb()
    flood = []
    try:
        plain, dc, proxy = env(procs, ["--mask", "on", "--mask-host", "127.0.0.1",
                                       "--mask-port", str(web.port), "--buffer-memory", "4M",
                                       "--mask-buffer-memory", "1M", "--probe-limit-per-ip", "0"])
        rss0 = rss_kb(proxy.pid)
        for _ in range(300):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", proxy.port))
            s.sendall(os.urandom(64))
            flood.append(s)
        # past mask-buffer-memory, later fronted connections wait (or are dropped) instead of
        # taking relay blocks: the site sees most, not necessarily all, of them
        assert wait_until(lambda: web.conns >= 100, T(10)), web.conns
        time.sleep(1.5)  # let the site fill every fronted connection it reached
        res = procs.client(proxy, plain, "dd", 2, 100000, 1000000, "--conns", "20",
                           timeout=30)
        assert_ok(res)
        assert res["seconds"] < T(15), res
        rss1 = rss_kb(proxy.pid)
        st = stats(proxy)
        assert st["masked"] >= 300, st
        # 1 MiB of fronting blocks (+ slab rounding) and the connections' own state
        assert rss1 - rss0 < 24 * 1024, (rss0, rss1)
        print(f"flood: 300 fronted, 20 dd downloads of 1 MB in {res['seconds']:.2f} s, "
              f"RSS {rss0} -> {rss1} KiB, fds {proxy.fds()}")
    finally:
        for s in flood:
            s.close()
        web.close()


def test_per_source_limit(procs):
    """An address with probe-limit-per-ip unproven connections gets no more; others (and any
    client that proves a secret from another address) are served."""
    plain, dc, proxy = env(procs, ["--probe-limit-per-ip", "50", "--handshake-timeout", "5s"])
    held = []
    try:
        for _ in range(80):
            s = socket.create_connection(("127.0.0.1", proxy.port), timeout=T(5))
            s.sendall(b"\x01" * 10)  # a header that never completes
            held.append(s)
        assert wait_until(lambda: stats(proxy)["strangers_refused"] >= 30, T(5))
        res = rawclient_served(proxy, plain, "127.0.0.2")
        assert res, "another address was refused"
    finally:
        for s in held:
            s.close()


def rawclient_served(proxy, secret, src):
    s, _ = rawclient.start_session(proxy.addr, secret, tag="dd", dc=2, up=0, down=1000, bind=src)
    s.settimeout(T(3))
    got = b""
    try:
        while len(got) < 64:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    s.close()
    return len(got) >= 64


def test_drip_fronted_connection_life_is_bounded(procs):
    """One byte every 0.5 s keeps a fronted connection from ever being idle; mask-lifetime
    still ends it."""
    from harness import FakeWeb
    web = FakeWeb()
    try:
        plain, dc, proxy = env(procs, ["--mask", "on", "--mask-host", "127.0.0.1",
                                       "--mask-port", str(web.port), "--probe-wait", "300ms",
                                       "--mask-lifetime", "3s", "--mask-idle-timeout", "2s"])
        s = socket.create_connection(("127.0.0.1", proxy.port), timeout=T(10))
        t0 = time.monotonic()
        s.setblocking(False)
        closed = False
        while time.monotonic() - t0 < T(8) and not closed:
            try:
                s.send(b"a")
            except OSError:
                closed = True
                break
            time.sleep(0.5)
            try:
                if s.recv(4096) == b"":
                    closed = True
            except BlockingIOError:
                pass
            except OSError:
                closed = True
        secs = time.monotonic() - t0
        s.close()
        assert closed and 2.5 <= secs < T(5), secs
    finally:
        web.close()


def test_partial_hellos_memory_bounded(procs):
    """Many FakeTLS hellos announced at 16 KiB and never finished: their buffers share the
    fronting budget, so memory stays bounded and the excess is counted."""
    domain = "www.example.com"
    dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
    ee = "ee" + new_secret() + domain.encode().hex()
    proxy = procs.proxy([("tls", ee)], [(i, dc.addr(i)) for i in DC_IDS],
                        extra=["--mask-buffer-memory", "1M", "--probe-limit-per-ip", "0",
                               "--handshake-timeout", "10s", "--probe-wait", "10s"])
    rss0 = rss_kb(proxy.pid)
    hello_start = bytes.fromhex("160301") + (16384).to_bytes(2, "big") + b"\x01\x00\x3f\xfc\x03\x03"
    socks = []
    try:
        for _ in range(400):
            s = socket.create_connection(("127.0.0.1", proxy.port), timeout=T(5))
            s.sendall(hello_start + os.urandom(12000))
            socks.append(s)
        assert wait_until(lambda: stats(proxy)["hello_budget"] > 0, T(10))
        rss1 = rss_kb(proxy.pid)
        assert rss1 - rss0 < 16 * 1024, (rss0, rss1)
        assert_ok(procs.client(proxy, ee, "dd", 2, 1000, 1000))
    finally:
        for s in socks:
            s.close()

