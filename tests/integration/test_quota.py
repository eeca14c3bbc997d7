"""test_quota.py: periodic quotas (quota=SIZE/month) across a month boundary and across a restart,
the proxy's clock moved by libfaketime (Debian's faketime)."""
import calendar
import json
import os
import re
import shutil
import time

import pytest

import harness
from harness import T, assert_ok, free_ports, new_secret, wait_until
from test_metrics import Chrome, _dynamic, http_get, need
from test_users import limited_proxy, session, user_stats

LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1")

JAN1, FEB1, MAR1 = 1798761600, 1801440000, 1803859200  # 2027-01-01, 02-01, 03-01 00:00 UTC


def unix(when):
    """'YYYY-MM-DD HH:MM:SS' (UTC) -> unix seconds."""
    return calendar.timegm(time.strptime(when, "%Y-%m-%d %H:%M:%S"))


class FakeClock:
    """The proxy's wall clock: real time plus an offset read from a file (every second), so the
    test moves it while the proxy runs. CLOCK_MONOTONIC stays real (libev's timers)."""

    def __init__(self, tmp_path):
        lib = [p for p in LIBS if os.path.exists(p)]
        binary = os.environ.get("MTPROXY_BIN", "")
        if not os.access(binary, os.X_OK):
            pytest.skip("MTPROXY_BIN not set or not executable")
        # Not under ASan (libfaketime's preload and ASan's interceptors can deadlock at start),
        # valgrind or qemu-user (the host's library), nor for a static binary (musl build).
        if not lib or not shutil.which("faketime") or harness.EMULATOR or harness.WRAPPER \
                or os.environ.get("ASAN_OPTIONS") or not _dynamic(binary):
            pytest.skip("needs libfaketime (Debian faketime) and a plain dynamic build")
        self.lib = lib[0]
        self.path = str(tmp_path / "faketime.rc")

    def set(self, when):
        """From now on the proxy's clock reads `when` (UTC) and runs on."""
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write("%+d\n" % round(unix(when) - time.time()))
        os.replace(tmp, self.path)

    def proxy(self, monkeypatch, procs, users, limits, extra=()):
        with monkeypatch.context() as m:
            m.setenv("LD_PRELOAD", self.lib)
            m.setenv("FAKETIME_TIMESTAMP_FILE", self.path)
            m.setenv("FAKETIME_CACHE_DURATION", "1")
            m.setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            return limited_proxy(procs, users, limits, extra=extra)[1]


def state_line(path, name):
    """The `quota-used = NAME ...` fields of state file path, as ints (None: no line)."""
    m = re.search(rf"^quota-used = {name} ([\d ]+)$", open(path).read(), re.M)
    return [int(x) for x in m.group(1).split()] if m else None


def log_line(proxy, regex, timeout):
    """The proxy's first log line matching regex, waiting up to T(timeout) (None: none)."""
    found = []

    def look():
        found[:] = [l for l in proxy.stderr_tail(400000).splitlines() if re.search(regex, l)]
        return found
    wait_until(look, T(timeout))
    return found[0] if found else None


def user_json(mport, name):
    st = json.loads(http_get(mport, "/stats")[2])
    return next(u for u in st["users"] if u["name"] == name)


def with_metrics(clock, monkeypatch, procs, when, users, limits):
    """(proxy, metrics port): a proxy with users and limits and a metrics listener, its clock
    at `when`."""
    clock.set(when)
    mport = free_ports(1)[0]
    return clock.proxy(monkeypatch, procs, users, limits,
                       extra=["--metrics", f"127.0.0.1:{mport}"]), mport


def test_monthly_quota_across_the_month_boundary(procs, tmp_path, monkeypatch):
    clock = FakeClock(tmp_path)
    q, o = new_secret(), new_secret()
    proxy, mport = with_metrics(clock, monkeypatch, procs, "2027-01-31 23:00:00",
                                [("q", q), ("o", o)],
                                [("q", "quota=100k/month"), ("o", "quota=100k")])
    # used up in January: the live transfer is cut, new connections refused
    assert not procs.client(proxy, q, "ef", 2, 1000, 400000)["ok"]
    assert not procs.client(proxy, o, "ef", 2, 1000, 400000)["ok"]  # a lifetime quota
    assert session(proxy.addr, q)[0] == b""
    u = user_json(mport, "q")
    assert u["quota_period"] == "month" and u["quota_reset"] == FEB1, u
    assert u["quota_left"] == 0 and u["quota_used"] >= 100 * 1024, u
    assert "quota_reset" not in user_json(mport, "o")
    metrics = http_get(mport, "/metrics")[2].decode()
    assert f'mtproxy_user_quota_reset_timestamp_seconds{{user="q"}} {FEB1}' in metrics, metrics
    assert 'mtproxy_user_quota_reset_timestamp_seconds{user="o"}' not in metrics
    # the clock runs over midnight UTC: the state-save tick starts the month over
    clock.set("2027-01-31 23:59:57")
    line = log_line(proxy, r"quota of user q starts over \(month\)", 20)
    assert line, proxy.stderr_tail()
    stamp = line.split()[0]  # the proxy's log time: after the boundary, never before
    assert stamp >= "2027-02-01T00:00:00", line
    assert len(session(proxy.addr, q)[0]) >= 64, "not served again after the reset"
    assert session(proxy.addr, o)[0] == b""  # the lifetime quota stays used up
    u = user_json(mport, "q")
    assert u["quota_reset"] == MAR1 and u["quota_left"] > 90 * 1024, u
    assert_ok(procs.client(proxy, q, "ef", 2, 1000, 50000))
    st = user_stats(proxy, "q")
    assert st["refused_quota"] >= 1 and 50000 <= st["quota_used"] < 100 * 1024, st
    assert proxy.stderr_tail(200000).count("starts over") == 1


def test_monthly_quota_across_a_restart(procs, tmp_path, monkeypatch):
    clock = FakeClock(tmp_path)
    q = new_secret()
    state = str(tmp_path / "quota.state")
    lim = [("q", "quota=100k/month")]

    def start(when):
        clock.set(when)
        return clock.proxy(monkeypatch, procs, [("q", q)], lim, extra=["--state-file", state])

    # January: some bytes used, stopped before the boundary
    p = start("2027-01-31 23:00:00")
    assert_ok(procs.client(p, q, "ef", 2, 1000, 60000))
    p.stop()
    used_jan, period = state_line(state, "q")
    assert used_jan >= 61000 and period == JAN1, (used_jan, period)
    # started after the boundary: the usage starts at 0 (one line says so)
    p = start("2027-02-01 00:00:30")
    assert log_line(p, rf"quota of user q starts over \(month\): {used_jan} bytes used in",
                    5), p.stderr_tail()
    assert user_stats(p, "q").get("quota_used", 0) == 0
    # the January line leaves the state file at the next save (else every restart in February
    # would start the month over again and say so)
    assert wait_until(lambda: state_line(state, "q") is None, 10), open(state).read()
    assert_ok(procs.client(p, q, "ef", 2, 1000, 30000))  # 60000 + 30000 would not fit
    p.stop()
    used_feb, period = state_line(state, "q")
    assert 31000 <= used_feb < used_jan and period == FEB1, (used_feb, period)
    # stopped and started within the same month: the usage is kept, and still counts
    p = start("2027-02-20 12:00:00")
    assert user_stats(p, "q")["quota_used"] == used_feb
    assert not procs.client(p, q, "ef", 2, 1000, 300000)["ok"]
    assert session(p.addr, q)[0] == b""
    assert "starts over" not in p.stderr_tail(200000)
    p.stop()
    # a state file from before periodic quotas (NAME BYTES): its bytes are this period's
    with open(state, "w") as f:
        f.write("# mtproxy state\nquota-used = q 70000\n")
    p = start("2027-02-20 12:00:00")
    assert user_stats(p, "q")["quota_used"] == 70000
    assert_ok(procs.client(p, q, "ef", 2, 1000, 1000))
    p.stop()
    used, period = state_line(state, "q")
    assert used > 70000 and period == FEB1, (used, period)


def test_status_page_shows_the_next_reset(procs, tmp_path, monkeypatch):
    need("chromium")
    clock = FakeClock(tmp_path)
    w, q = new_secret(), new_secret()
    proxy, mport = with_metrics(clock, monkeypatch, procs, "2027-01-20 12:00:00",
                                [("w", w), ("q", q)],
                                [("w", "quota=1M/week quota-day=sun"), ("q", "quota=1M")])
    assert_ok(procs.client(proxy, w, "ef", 2, 1000, 20000))
    chrome = Chrome(tmp_path)
    try:
        chrome.call("Page.navigate", url=f"http://127.0.0.1:{mport}/")
        row = "document.querySelector('.user[data-name=%s] dd:nth-of-type(5)').textContent"
        assert wait_until(lambda: "used" in (chrome.eval(row % "w") or ""), 20)
        text = chrome.eval(row % "w")
        # 2027-01-20 is a Wednesday: the week from Sunday ends on Sunday the 24th
        assert "used this week, resets 2027-01-24 00:00 UTC" in text, text
        assert "resets" not in chrome.eval(row % "q")  # a lifetime quota never resets
    finally:
        chrome.close()
