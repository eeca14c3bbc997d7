"""test_users.py: many users, per-user counters, limits (conns, ips, quota, expiry, rate), reload."""
import os
import re
import signal
import socket
import time

import pytest

from harness import (DC_IDS, SLOW, T, assert_ok, new_secret, wait_until)
from proxyinfo import stats
import rawclient


def user_stats(proxy, name):
    """{counter: int} of user `name` from the SIGUSR1 lines ("user NAME: conns N ...")."""
    stats(proxy)
    lines = re.findall(rf"user {re.escape(name)}: (.*)", proxy.stderr_tail(200000))
    if not lines:
        return {}
    text = lines[-1]
    out = {k: int(v) for k, v in re.findall(r"([a-z_]+) (\d+)", text.split("refused")[0])}
    ref = text.split("refused", 1)[1]
    out.update({"refused_" + k: int(v) for k, v in re.findall(r"([a-z_]+) (\d+)", ref)})
    return out


def write_conf(path, users, dc, extra=""):
    """A config file with users [(name, secret)] and the fake DC."""
    lines = [f"secret = {n}:{s}" for n, s in users]
    lines += [f"dc = {i} {dc.addr(i)}" for i in DC_IDS]
    path.write_text("\n".join(lines) + "\n" + extra)


def test_10000_users_last_served(procs, tmp_path):
    dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
    users = [(f"u{i}", new_secret()) for i in range(10000)]
    conf = tmp_path / "many.conf"
    write_conf(conf, users, dc)
    proxy = procs.proxy([], [], extra=["--config", str(conf)])
    last_name, last = users[-1]
    assert_ok(procs.client(proxy, last, "ef", 2, 100000, 200000))
    assert_ok(procs.client(proxy, "dd" + users[5000][1], "dd", 2, 1000, 1000))
    st = user_stats(proxy, last_name)
    assert st["conns"] == 1 and st["active"] == 0, st
    assert st["bytes_up"] >= 100000 and st["bytes_down"] >= 200000, st
    assert user_stats(proxy, "u5000")["conns"] == 1
    assert user_stats(proxy, "u4999") == {}  # no traffic: no line


def session(addr, secret, bind=None, tag="ee", keep=False):
    """A plain-secret session: (bytes received within ~1.5 s, socket or None). A served client
    gets fake_dc's hello (>= 64 bytes) at once; a refused one is held and gets nothing."""
    s, _ = rawclient.start_session(addr, secret, tag=tag, dc=2, up=0, down=1000, bind=bind)
    s.settimeout(T(1.5))
    got = rawclient.recv_upto(s, 64)
    if keep:
        return got, s
    s.close()
    return got, None


def limited_proxy(procs, users, limits, extra=(), name="mtproxy"):
    dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
    args = []
    for name, text in limits:
        args += ["--limit", f"{name} {text}"]
    proxy = procs.proxy(users, [(i, dc.addr(i)) for i in DC_IDS],
                        extra=args + ["--ips-window", "2s"] + list(extra), name=name)
    return dc, proxy


def test_conns_limit(procs):
    a = new_secret()
    _, proxy = limited_proxy(procs, [("a", a)], [("a", "conns=2")])
    g1, s1 = session(proxy.addr, a, keep=True)
    g2, s2 = session(proxy.addr, a, keep=True)
    assert len(g1) >= 64 and len(g2) >= 64
    g3, _ = session(proxy.addr, a)
    assert g3 == b"", "third connection served over conns=2"
    s1.close()
    assert wait_until(lambda: user_stats(proxy, "a").get("active") == 1, 3)
    g4, s4 = session(proxy.addr, a, keep=True)
    assert len(g4) >= 64, "a freed slot is not reused"
    st = user_stats(proxy, "a")
    assert st["refused_conns"] == 1 and st["conns"] == 3, st
    assert "user a: new connection from 127.0.0.1" in proxy.stderr_tail(100000)
    s2.close()
    s4.close()


def test_ips_limit_several_sources(procs):
    b = new_secret()
    _, proxy = limited_proxy(procs, [("b", b)], [("b", "ips=2")])
    assert len(session(proxy.addr, b, bind="127.0.0.2")[0]) >= 64
    assert len(session(proxy.addr, b, bind="127.0.0.3")[0]) >= 64
    assert session(proxy.addr, b, bind="127.0.0.4")[0] == b""      # a third address
    assert len(session(proxy.addr, b, bind="127.0.0.2")[0]) >= 64  # a known one
    assert session(proxy.addr, b, bind="127.0.0.5")[0] == b""
    time.sleep(T(2.5))  # ips-window 2s: the addresses are forgotten
    assert len(session(proxy.addr, b, bind="127.0.0.4")[0]) >= 64
    st = user_stats(proxy, "b")
    assert st["refused_ips"] == 2 and st["conns"] == 4, st
    # once per user per minute in the log, however many refusals
    assert proxy.stderr_tail(100000).count("user b: new connection from") == 1


def test_expired_user_refused(procs):
    c, d = new_secret(), new_secret()
    _, proxy = limited_proxy(procs, [("c", c), ("d", d)], [("c", "expires=2001-01-01")])
    assert session(proxy.addr, c)[0] == b""
    assert len(session(proxy.addr, d)[0]) >= 64  # another user is not affected
    st = user_stats(proxy, "c")
    assert st["refused_expired"] == 1, st


def test_quota_across_restart_and_kill(procs, tmp_path):
    q = new_secret()
    _, proxy = limited_proxy(procs, [("q", q)], [("q", "quota=300k")])
    assert_ok(procs.client(proxy, q, "ef", 2, 1000, 200000))
    # the second download runs out of quota mid-way: the live connection is ended
    res = procs.client(proxy, q, "ef", 2, 1000, 400000)
    assert not res["ok"], res
    assert session(proxy.addr, q)[0] == b""  # and new ones are refused
    st = user_stats(proxy, "q")
    assert st["quota_used"] >= 300 * 1024 and st["refused_quota"] >= 1, st
    assert st["closed_limit"] == 1, st
    state = proxy.argv[proxy.argv.index("--state-file") + 1]
    argv_extra = proxy.argv
    proxy.stop()
    text = open(state).read()
    assert re.search(r"quota-used = q (\d+)", text), text
    assert q not in text  # configured secrets are never written there
    # restart: the quota used is still there
    dc2, proxy2 = limited_proxy(procs, [("q", q)], [("q", "quota=300k")],
                                extra=["--state-file", state])
    assert session(proxy2.addr, q)[0] == b""
    assert user_stats(proxy2, "q")["refused_quota"] == 1
    proxy2.stop()
    # a crash (kill -9) right after a save was asked for never leaves a broken state file
    for i in range(3):
        _, p = limited_proxy(procs, [("q", q)], [("q", "quota=900k")],
                             extra=["--state-file", state])
        assert_ok(procs.client(p, q, "ef", 2, 1000, 100000))
        os.kill(p.pid, signal.SIGHUP)  # the state is written on reload
        time.sleep(0.05 * i)
        p.stop(signal.SIGKILL)
        # the state file is always a whole one (a kill mid-write leaves at most a temporary
        # file beside it, never a cut one in its place)
        text = open(state).read()
        assert text.endswith("\n") and "# mtproxy state" in text, text
        used = int(re.search(r"quota-used = q (\d+)", text).group(1))
        assert used >= 300 * 1024, used


def test_rate_limit_shared_and_others_unaffected(procs):
    r, o = new_secret(), new_secret()
    _, proxy = limited_proxy(procs, [("r", r), ("o", o)], [("r", "rate=1M/s")])
    MiB = 1 << 20
    # two connections of the user share its 1 MiB/s down and up
    c1 = procs.client_bg(proxy, r, "ef", 2, MiB, MiB)
    c2 = procs.client_bg(proxy, r, "ef", 2, MiB, MiB)
    t0 = time.monotonic()
    other = procs.client(proxy, o, "ef", 2, 8 * MiB, 8 * MiB)
    assert_ok(other)
    assert other["seconds"] < T(1.0), f"another user was slowed: {other}"
    r1, r2 = procs.result(c1), procs.result(c2)
    assert_ok(r1)
    assert_ok(r2)
    secs = max(r1["seconds"], r2["seconds"])
    rate = 2 * MiB / secs
    print(f"rate: {rate / MiB:.3f} MiB/s each way over {secs:.2f} s")
    assert 0.9 * MiB <= rate <= 1.1 * MiB, f"{rate / MiB:.3f} MiB/s each way over {secs:.2f} s"
    st = user_stats(proxy, "r")
    assert st["bytes_down"] >= 2 * MiB and st["bytes_up"] >= 2 * MiB, st


def reloaded(proxy, serial, timeout=5):
    """Waits for the log line of configuration `serial` loaded; returns True if seen."""
    return wait_until(lambda: f"configuration {serial} loaded" in proxy.stderr_tail(100000),
                      timeout)


# SIGHUP during a large transfer: 2 GiB down takes about 4 s on loopback through one worker;
# under a wrapper or an emulator (SLOW > 1: valgrind, qemu) 128 MiB, which still spans every
# reload below. MTPROXY_RELOAD_BYTES overrides.
BIG = int(os.environ.get("MTPROXY_RELOAD_BYTES", str(2 << 30 if SLOW == 1 else 128 << 20)))


def test_sighup_during_transfer_users_added_removed_broken_rejected(procs, tmp_path):
    dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
    a, b, c = new_secret(), new_secret(), new_secret()
    conf = tmp_path / "r.conf"
    write_conf(conf, [("a", a), ("b", b)], dc)
    proxy = procs.proxy([], [], extra=["--config", str(conf)])
    big = procs.client_bg(proxy, a, "ef", 2, 1 << 20, BIG, "--timeout", "120")
    # b's connection stays open: a long download it reads slowly
    sb, _ = rawclient.start_session(proxy.addr, b, tag="ee", dc=2, up=0, down=1 << 30,
                                    rcvbuf=65536)
    sb.settimeout(T(2))
    assert len(rawclient.recv_upto(sb, 64)) >= 64
    assert session(proxy.addr, c)[0] == b""  # not a user yet
    # 1: add c, remove b (its live connection is closed, new ones refused)
    write_conf(conf, [("a", a), ("c", c)], dc)
    os.kill(proxy.pid, signal.SIGHUP)
    assert reloaded(proxy, 2), proxy.stderr_tail()
    assert "1 removed" in proxy.stderr_tail(100000)
    assert wait_until(lambda: re.search(r"closed: user b .* reason user-removed",
                                        proxy.stderr_tail(100000)), 3), proxy.stderr_tail()
    sb.close()
    assert len(session(proxy.addr, c)[0]) >= 64
    assert session(proxy.addr, b)[0] == b""
    # 2: a broken file is rejected whole, with file:line, and the running config stays
    write_conf(conf, [("a", a)], dc, extra="secret = x:nothex\nworkers = 2\nworkers = 3\n"
                                           "mask-host = \"unterminated\n")
    mark = proxy.mark()
    os.kill(proxy.pid, signal.SIGHUP)
    assert wait_until(lambda: "configuration rejected" in proxy.stderr_tail(100000), 5)
    log = proxy.stderr_tail(100000)
    n = len(DC_IDS) + 2
    assert f"r.conf:{n}: " in log and f"r.conf:{n + 2}: 'workers' is already set" in log, log
    assert "unterminated quote" in log
    assert len(session(proxy.addr, c)[0]) >= 64  # c (removed by the broken file) still served
    # 3: a key that needs a restart is reported as such; a new limit applies to new ones
    write_conf(conf, [("a", a), ("c", c)], dc, extra="max-connections = 999\n"
                                                     "limit = c expires=2001-01-01\n")
    os.kill(proxy.pid, signal.SIGHUP)
    assert reloaded(proxy, 3), proxy.stderr_tail()
    assert "max-connections changed" in proxy.stderr_tail(100000)
    assert session(proxy.addr, c)[0] == b""
    # the transfer that ran through all of it completes byte-exact (test_client checks)
    res = procs.result(big, timeout=180)
    assert_ok(res)
    assert res["down_total"] == BIG, res
    assert a not in proxy.stderr_tail(1 << 22) and c not in proxy.stderr_tail(1 << 22)


def test_connection_log_line(procs):
    a = new_secret()
    _, proxy = limited_proxy(procs, [("alice", a)], [])
    assert_ok(procs.client(proxy, a, "ef", 2, 5000, 7000))
    line = wait_until(lambda: re.search(
        r"closed: user alice client 127\.0\.0\.1:\d+ dc 2 kind abridged up (\d+) down (\d+) "
        r"bytes duration [\d.]+ s reason (\S+)", proxy.stderr_tail(100000)), 3)
    assert line, proxy.stderr_tail()
    assert int(line.group(1)) >= 5000 and int(line.group(2)) >= 7000
    assert a not in proxy.stderr_tail(100000)
    _, quiet = limited_proxy(procs, [("bob", a)], [], extra=["--log-connections", "off"],
                             name="quiet")
    assert_ok(procs.client(quiet, a, "ef", 2, 5000, 7000))
    time.sleep(0.3)
    assert "closed: user bob" not in quiet.stderr_tail(100000)


def peer_state(s):
    """'closed' if the proxy closed s (EOF or reset), 'open' if nothing is there, else 'data'."""
    s.setblocking(False)
    try:
        return "closed" if s.recv(1) == b"" else "data"
    except BlockingIOError:
        return "open"
    except ConnectionResetError:
        return "closed"


def test_accept_rate_under_a_burst(procs):
    a = new_secret()
    _, proxy = limited_proxy(procs, [("a", a)], [], extra=["--accept-rate", "5/s"])
    time.sleep(1.0 - time.time() % 1.0 + 0.05)  # the start of a second: one window
    socks = [rawclient.connect(proxy.addr) for _ in range(30)]
    time.sleep(0.2)
    closed = sum(peer_state(s) == "closed" for s in socks)
    for s in socks:
        s.close()
    assert closed == 25, f"{closed} of 30 closed at once with accept-rate 5/s"
    time.sleep(1.1)
    assert len(session(proxy.addr, a)[0]) >= 64  # a new second: served again
    st = stats(proxy)
    assert st["acc_rate"] == closed and st["accept-rate"] == closed, st


def test_max_handshakes_oldest_closed_first(procs):
    a = new_secret()
    _, proxy = limited_proxy(procs, [("a", a)], [], extra=["--max-handshakes", "10",
                                                           "--handshake-timeout", "5s"])
    idle = [rawclient.connect(proxy.addr) for _ in range(25)]  # never send a byte
    time.sleep(0.3)
    # the 15 oldest made room for the newer ones: closed, the 10 newest still open
    states = [peer_state(s) for s in idle]
    assert states == ["closed"] * 15 + ["open"] * 10, states
    # a real client still gets through (the oldest idle one goes instead)
    assert len(session(proxy.addr, a)[0]) >= 64
    st = stats(proxy)
    # 16, and the harness's own probe connection if it was still unfinished
    assert 16 <= st["handshake_cap"] <= 17, st
    for s in idle:
        s.close()


def run_mtproxy(bins, args, user=None, timeout=10):
    """Runs mtproxy to completion (as `user`'s uid if given); returns (rc, stderr text)."""
    import subprocess
    from harness import mtproxy_argv
    pre = None
    copy = None
    if user:
        import pwd
        import shutil
        import tempfile
        pw = pwd.getpwnam(user)
        # The build tree may be where `user` cannot reach it (a checkout under /root is 0700 on
        # Debian): run a copy of the binary from a directory every user can enter.
        copy = tempfile.mkdtemp(prefix="mtproxy-as-user-", dir="/tmp")
        os.chmod(copy, 0o755)
        exe = os.path.join(copy, "mtproxy")
        shutil.copyfile(bins["mtproxy"], exe)
        os.chmod(exe, 0o755)
        bins = dict(bins, mtproxy=exe)

        def pre():
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
    try:
        p = subprocess.run(mtproxy_argv(bins, *args), capture_output=True, timeout=T(timeout),
                           preexec_fn=pre, stdin=subprocess.DEVNULL)
    finally:
        if copy:
            import shutil
            shutil.rmtree(copy, ignore_errors=True)
    return p.returncode, p.stderr.decode(errors="replace") + p.stdout.decode(errors="replace")


def test_check_config_catches_startup_failures(bins, tmp_path):
    if not bins["mtproxy"]:
        pytest.skip("no mtproxy")
    from harness import free_ports
    port = free_ports(1)[0]
    base = ["--listen", f"127.0.0.1:{port}", "--secret", f"a:{new_secret()}",
            "--dc-builtin", "off", "--dc", "2 127.0.0.1:1", "--default-dc", "2",
            "--state-file", str(tmp_path / "s.state")]
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o755)
    cases = [
        (["--user", "no-such-user-x"], "user 'no-such-user-x' does not exist"),
        (["--state-file", "/nonexistent-dir/s.state"], "its directory does not exist"),
        (["--log", "/nonexistent-dir/m.log"], "log /nonexistent-dir/m.log: its directory"),
        (["--pidfile", "/nonexistent-dir/m.pid"], "pidfile /nonexistent-dir/m.pid: its dir"),
        (["--user", "nobody", "--state-file", str(closed / "s.state"), "--limit", "a quota=1G"],
         "its directory is not writable by nobody"),
        (["--listen", "192.0.2.1:443"], "not an address of this machine"),
        (["--listen", f"127.0.0.1:{port}"], f"listen 127.0.0.1:{port} is given twice"),
        (["--bogus"], "--bogus: unknown key"),
    ]
    for extra, want in cases:
        args = base + extra
        if "--listen" in extra and extra[1] != f"127.0.0.1:{port}":
            args = args[2:]  # replace the listen address
        for check in (True, False):
            rc, err = run_mtproxy(bins, (["--check-config"] if check else []) + args)
            assert rc == 2 and want in err, (check, extra, rc, err)
        # nothing was written by the failed start
        assert not os.path.exists(tmp_path / "s.state"), extra
        assert not os.path.exists(tmp_path / "s.state.lock"), extra
    # a file: unterminated quote and a key given twice, each with file:line
    conf = tmp_path / "bad.conf"
    conf.write_text('mask-host = "example.org\nworkers = 2\nworkers = 3\n')
    rc, err = run_mtproxy(bins, ["--check-config", "--config", str(conf)] + base)
    assert rc == 2 and f"{conf}:1: unterminated quote" in err, err
    assert f"{conf}:3: 'workers' is already set at line 2" in err, err
    # a port below 1024 without the privilege says how to get it
    rc, err = run_mtproxy(bins, ["--check-config", "--listen", "127.0.0.1:443",
                                 "--secret", f"a:{new_secret()}", "--state-file",
                                 "/tmp/mtproxy-unpriv.state"], user="nobody")
    assert rc == 2 and "CAP_NET_BIND_SERVICE" in err, err


def test_second_instance_refused(procs, tmp_path):
    a = new_secret()
    dc, proxy = limited_proxy(procs, [("a", a)], [])
    state = proxy.argv[proxy.argv.index("--state-file") + 1]
    common = ["--secret", f"a:{a}", "--dc-builtin", "off", "--dc", f"2 {dc.addr(2)}",
              "--default-dc", "2"]
    from harness import free_ports
    # the same state file, another port
    rc, err = run_mtproxy(procs.bins, common + ["--listen", f"127.0.0.1:{free_ports(1)[0]}",
                                                "--state-file", state])
    assert rc == 75 and "another mtproxy is running with state file" in err, err
    # the same address, another state file (SO_REUSEPORT would have let it share the port)
    rc, err = run_mtproxy(procs.bins, common + ["--listen", proxy.addr, "--state-file",
                                                str(tmp_path / "other.state")])
    assert rc == 75 and "the address is in use" in err, err
    # --check-config on the running instance's config warns but passes
    rc, err = run_mtproxy(procs.bins, ["--check-config", "--listen", proxy.addr,
                                       "--state-file", state] + common)
    assert rc == 0 and "in use" in err, err
    assert len(session(proxy.addr, a)[0]) >= 64  # the first one is unharmed


def test_sighup_log_reopen_failure_reported(bins, tmp_path):
    """A log file that cannot be reopened (its directory is gone) is said on stderr, not only
    in the rotated file; the reload still happens."""
    import subprocess
    from harness import free_ports, mtproxy_argv
    if not bins["mtproxy"]:
        pytest.skip("no mtproxy")
    logdir = tmp_path / "logs"
    logdir.mkdir()
    port = free_ports(1)[0]
    errf = open(tmp_path / "stderr", "wb")
    p = subprocess.Popen(mtproxy_argv(bins, "--listen", f"127.0.0.1:{port}", "--secret",
                                      f"a:{new_secret()}", "--dc-builtin", "off", "--dc",
                                      "2 127.0.0.1:1", "--default-dc", "2", "--log",
                                      str(logdir / "m.log"), "--state-file",
                                      str(tmp_path / "s.state")),
                         stdout=subprocess.DEVNULL, stderr=errf, stdin=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: " started, pid " in (logdir / "m.log").read_text()
                          if (logdir / "m.log").exists() else False, 5)
        (logdir / "m.log").unlink()
        logdir.rmdir()
        p.send_signal(signal.SIGHUP)
        assert wait_until(lambda: "cannot reopen log file" in
                          (tmp_path / "stderr").read_text(errors="replace"), 5)
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(T(10)) == 0
        errf.close()


def test_ee_user_over_limit_is_fronted_like_a_probe(procs):
    from test_faketls import TlsEnv, assert_fronted
    env = TlsEnv(procs, extra=["--limit", "tls expires=2001-01-01"])
    mark = env.dc.mark()
    res = env.client(2, 1000, 1000)
    assert_fronted(env, res, mark)  # the hello went to the site, as a probe's would
    assert_ok(env.client(2, 1000, 1000, secret=env.ee2))  # another ee user is served
    st = user_stats(env.proxy, "tls")
    assert st["refused_expired"] == 1 and st["conns"] == 0, st
    assert stats(env.proxy)["masked"] == 1


def test_sighup_moves_new_connections_to_a_new_dc_table(procs, tmp_path):
    dc1 = procs.fake_dc([(i, "normal") for i in DC_IDS], name="dc_one")
    dc2 = procs.fake_dc([(i, "normal") for i in DC_IDS], name="dc_two")
    a = new_secret()
    conf = tmp_path / "d.conf"
    write_conf(conf, [("a", a)], dc1)
    proxy = procs.proxy([], [], extra=["--config", str(conf), "--dc-pool", "1"])
    live = procs.client_bg(proxy, a, "ef", 2, 1 << 20, 64 << 20)  # stays on dc1
    assert_ok(procs.client(proxy, a, "ef", 2, 1000, 1000))
    # both reached dc1 before the reload (the background client starts on its own time, and
    # the fake DC's lines are read in a thread)
    assert wait_until(lambda: len(dc1.matching(r"^HEADER ")) >= 2, 10), dc1.lines[-5:]
    m1, m2 = dc1.mark(), dc2.mark()
    write_conf(conf, [("a", a)], dc2)
    os.kill(proxy.pid, signal.SIGHUP)
    assert reloaded(proxy, 2), proxy.stderr_tail()
    for _ in range(3):
        assert_ok(procs.client(proxy, a, "ef", 2, 1000, 1000))
    # (dc1 sees its pooled sockets closed unused: SHORT_HEADER, no header)
    full = lambda dc, m: len(dc.matching(r"^HEADER ", m))
    wait_until(lambda: full(dc2, m2) >= 3, 5)
    assert full(dc2, m2) == 3 and full(dc1, m1) == 0, (dc1.lines[-5:], dc2.lines[-5:])
    assert_ok(procs.result(live))
