"""test_lifecycle.py: the connection limit (backlog, then resume), SIGTERM with live clients, and
SIGTERM with an API change waiting for its reload."""
import signal
import threading
import time

from harness import Std, T, assert_ok, wait_until

HELLO = r'^\{"event":"hello","conn":(\d+)'


def test_max_connections_waits_in_backlog(procs):
    env = Std(procs, extra=["--max-connections", "2"], workers=1)
    # Two relayed connections that stay open (idle after their hello).
    a = procs.client_bg(env.proxy, env.plain, "ee", 2, 100, 100, "--hold", 60, "--events",
                        "--timeout", 90, name="holdA")
    b = procs.client_bg(env.proxy, env.plain, "ee", 2, 100, 100, "--hold", 60, "--events",
                        "--timeout", 90, name="holdB")
    assert a.wait_line(HELLO, 5) and b.wait_line(HELLO, 5), "the first two did not get in"
    c = procs.client_bg(env.proxy, env.plain, "dd", 3, 50000, 50000, "--events",
                        "--expect-id", 3, "--timeout", 30, name="third")
    assert c.wait_line(r'"event":"connected"', 5), "third client could not even connect"
    assert not c.wait_line(HELLO, 2.0), "third client was served beyond max-connections"
    assert c.alive(), "third client was refused instead of waiting in the backlog"
    t_close = time.monotonic()
    a.stop(signal.SIGKILL)
    assert c.wait_line(HELLO, 5), "third client was not served after a slot freed"
    assert time.monotonic() - t_close < T(3)
    assert_ok(procs.result(c))
    assert b.alive(), "the other held connection was disturbed"
    # Slots keep being recycled: several more short clients one after another.
    for _ in range(5):
        assert_ok(env.client("ef", 1, 1000, 1000, "--expect-id", 1))


def test_max_connections_many_short_clients(procs):
    env = Std(procs, extra=["--max-connections", "4"], workers=2)
    res = env.client("ee", 2, 20000, 20000, "--conns", 60, "--timeout", 60)
    assert_ok(res)


def test_sigterm_with_live_connections(procs):
    env = Std(procs, workers=2)
    held = procs.client_bg(env.proxy, env.plain, "ef", 2, 100, 100, "--hold", 60, "--events",
                           "--conns", 3, "--timeout", 90, name="held")
    for i in range(3):
        assert held.wait_line(HELLO, 5), "held clients did not get their hello"
    assert wait_until(lambda: len(held.matching(HELLO)) == 3, 5), held.matching(HELLO)
    rc, secs = env.proxy.stop(signal.SIGTERM, timeout=10)
    assert rc == 0, f"mtproxy exited with {rc} on SIGTERM"
    assert secs < T(5), f"mtproxy took {secs:.1f} s to exit"
    res = procs.result(held, timeout=10)
    assert res["failed"] == 3, res
    assert all("hold: eof" in e or "hold: reset" in e for e in res["errors"]), res


def test_sigterm_idle(procs):
    env = Std(procs)
    assert_ok(env.client("ee", 2, 1000, 1000))
    rc, secs = env.proxy.stop(signal.SIGTERM, timeout=10)
    assert rc == 0 and secs < T(3), (rc, secs)


def test_sd_notify_ready_and_stopping(procs, monkeypatch, tmp_path):
    """Type=notify: READY=1 reaches $NOTIFY_SOCKET once the proxy accepts, STOPPING=1 on SIGTERM."""
    import socket
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(T(10))
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    env = Std(procs)
    msg = sock.recv(256)
    assert msg == b"READY=1", msg
    # Ready means listening: a client connects and is served right away.
    with socket.create_connection(("127.0.0.1", env.proxy.port), timeout=T(5)):
        pass
    assert_ok(env.client("ee", 2, 1000, 1000))
    rc, _ = env.proxy.stop(signal.SIGTERM, timeout=10)
    assert rc == 0
    assert sock.recv(256) == b"STOPPING=1"
    sock.close()



def test_sigterm_answers_an_api_change_waiting_for_its_reload(procs, tmp_path):
    """SIGTERM taken while an API change is under way, before its SIGHUP: the change is
    answered as refused (users-file put back) and the proxy stops at once; it used to wait out
    the API's 60 s for a reload no one would run any more. The SIGTERM lands at fifths of
    one change's measured time (the window is between the request read and the SIGHUP); on the
    old code several of them hung."""
    from test_api import Api
    for k in range(5):
        d = tmp_path / f"run{k}"
        d.mkdir()
        api = Api(procs, d, name=f"mtproxy{k}")
        t0 = time.monotonic()
        assert api("POST", "/users", {"name": "first"})[0] == 201
        took = time.monotonic() - t0
        before = api.file_text()
        answer = {}

        def create():
            try:
                answer["r"] = api("POST", "/users", {"name": "late"}, timeout=T(30))
            except OSError as e:  # the connection closed by the stopping proxy
                answer["r"] = e

        t = threading.Thread(target=create)
        t.start()
        time.sleep(took * (k + 0.5) / 5)
        rc, secs = api.proxy.stop(timeout=10)
        t.join(T(30))
        assert rc == 0 and secs < T(10), (k, took, rc, secs)
        r = answer.get("r")
        if isinstance(r, tuple) and r[0] in (200, 201):  # its reload ran before the stop
            assert "late" in api.file_text()
        elif isinstance(r, tuple):
            assert r[0] == 400 and "stopping" in r[1]["error"], r
            assert api.file_text() == before
