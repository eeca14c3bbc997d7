#!/usr/bin/env python3
"""api.py: what the management API costs: the latency of its calls, and what a loop of API
calls does to a relayed client on the same proxy.

    build/tests/integration/venv/bin/python bench/api.py [--build-dir DIR] [--users N]
        [--calls N] [--rounds N] [--phases N] [--nice N] [--cost SECONDS] [--loop crud|other]

One worker, --users users in the config file (default 1,000), users-file and the API on
loopback, DC 2 an echoing fake_dc; re-runs itself in a network namespace with only loopback
(unshare -n as root, else -rn) unless already in one. Prints:
  1. the wall time of --calls (default 100) POST /api/v1/users (each written to users-file,
     fsync'ed and reloaded before it is answered), then as many GET /api/v1/users/NAME, then
     DELETEs: median, p90, max;
  2. a ping-pong client (32 bytes through the proxy to the echoing DC and back, --rounds round
     trips per side) in alternating phases without and with one client looping on the API
     (create, get, patch, delete: three reloads per turn; the looper at nice --nice, default
     0; with --loop other, the same loop against a second proxy instance that relays nothing:
     the looper's own CPU and the reloads' on the same cores, none of it in the relaying
     process): p50, p99, max of each side and the p99 ratio, and how long the relaying
     worker thread waited for a CPU per round trip on each side (its schedstat: what the data
     path notices of whatever else runs);
  3. what a reload costs the proxy: the looper alone for --cost seconds (default 3; 0: skipped),
     CPU time per reload of the main thread and the reloader (the build), each worker
     (adopting it) and the metrics/API thread (the API's side: users-file written, the call answered), from
     /proc/PID/task/TID/schedstat, less what each spent in as long a window before without the
     looper; the reloads counted from the log's "configuration N loaded".
Loopback only.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
TOKEN = "bench-token-0123456789abcdef"


def call(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Authorization": f"Bearer {TOKEN}"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


# The API looper: create, get, patch, delete, forever; prints one line per turn.
LOOPER = r"""
import http.client, json, os, sys
port, token = int(sys.argv[1]), sys.argv[2]
os.nice(int(sys.argv[3]))
def call(m, p, b=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request(m, p, body=json.dumps(b) if b is not None else None,
              headers={"Authorization": "Bearer " + token})
    r = c.getresponse(); r.read(); c.close()
    return r.status
i = 0
while True:
    n = f"loop{i}"
    i += 1
    st = (call("POST", "/api/v1/users", {"name": n, "limits": {"conns": 3}}),
          call("GET", f"/api/v1/users/{n}"),
          call("PATCH", f"/api/v1/users/{n}", {"limits": {"conns": 4}}),
          call("DELETE", f"/api/v1/users/{n}"))
    print("TURN", *st, flush=True)
"""


class Looper:
    """The API looper process; pause() and resume() stop and continue it. Given a thread's
    schedstat file (the relaying worker's), it also adds up how long that thread waited for a
    CPU while the looper ran (busy) and while it was stopped (quiet)."""

    def __init__(self, port, nice, schedstat=None):
        self.p = subprocess.Popen([sys.executable, "-c", LOOPER, str(port), TOKEN, str(nice)],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  stdin=subprocess.DEVNULL)
        self.schedstat = schedstat
        self.wait = {"busy": [0], "quiet": [0]}  # side: [ns waited]
        self.mark = None  # (side, ns waited) at the side's start

    def _switch(self, side):
        if not self.schedstat:
            return
        with open(self.schedstat) as f:
            waited = int(f.read().split()[1])
        if self.mark:
            self.wait[self.mark[0]][0] += waited - self.mark[1]
        self.mark = (side, waited)

    def pause(self):
        self.p.send_signal(19)
        self._switch("quiet")

    def resume(self):
        self._switch("busy")
        self.p.send_signal(18)

    def wait_line(self, nquiet, nbusy):
        """The worker's run-queue wait per round trip of each side (the busy side's includes
        its warm-ups, when the loop runs without round trips)."""
        q, b = self.wait["quiet"][0] / 1e3 / nquiet, self.wait["busy"][0] / 1e3 / nbusy
        return (f"the worker waited for a CPU {q:.1f} us per round trip without the API loop, "
                f"{b:.1f} us with it")

    def stop(self):
        self.p.kill()
        self.p.send_signal(18)
        out, _ = self.p.communicate(timeout=30)
        return [ln.split()[1:] for ln in out.decode().splitlines() if ln.startswith("TURN")]


def thread_cpu(pid):
    """{thread name: CPU seconds} of the proxy's threads: main, wN (the workers), reload (the
    reloader, if the build has one), metrics/API (the one unnamed other)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue
        name = ("main" if tid == str(pid) else name[8:] if name.startswith("mtproxy/")
                else "metrics/API")
        out[name] = out.get(name, 0) + ns / 1e9
    return out


def worker_schedstat(pid):
    """The schedstat file of the proxy's worker 0 (None: the threads are not named)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            if f.read().strip() == "mtproxy/w0":
                return f"/proc/{pid}/task/{tid}/schedstat"
    return None


def last_serial(log):
    """The serial of the last generation the log says was loaded (0: none)."""
    with open(log) as f:
        found = re.findall(r"configuration (\d+) loaded", f.read())
    return int(found[-1]) if found else 0


def reload_cost(pid, log, port, nice, seconds):
    """The looper alone for seconds: CPU ms per reload, per thread, less what the thread spent
    in as long a window without the looper (its timers, its busy poll)."""
    i0 = thread_cpu(pid)
    time.sleep(seconds)
    i1 = thread_cpu(pid)
    s0, c0 = last_serial(log), thread_cpu(pid)
    loop = Looper(port, nice)
    time.sleep(seconds)
    loop.pause()
    time.sleep(0.2)  # a reload under way ends
    s1, c1 = last_serial(log), thread_cpu(pid)
    loop.stop()
    n = s1 - s0
    if n <= 0:
        print("reload cost: no reload in the window")
        return
    idle = {k: i1.get(k, 0) - i0.get(k, 0) for k in c1}
    parts = ", ".join(f"{k} {(c1[k] - c0.get(k, 0) - idle[k]) / n * 1e3:.3f}" for k in sorted(c1))
    print(f"reload cost: {n} reloads in {seconds:.0f} s; CPU ms per reload (less the idle "
          f"window's): {parts}")


def stats_ms(walls):
    s = sorted(walls)
    return (f"median {statistics.median(s) * 1e3:.2f} ms, p90 {s[int(len(s) * 0.9)] * 1e3:.2f} ms,"
            f" max {s[-1] * 1e3:.2f} ms")


def start_proxy(build, users, dcport, suffix=""):
    """A proxy with users users in its config, users-file and the API on loopback (one
    worker); waits for its API. Returns (process, its port, its API port, its log, secret)."""
    from scrapeload import many_users_config
    from harness import free_ports
    work = tempfile.mkdtemp(prefix=f"mtproxy-api{suffix}.")
    port, mport, aport = free_ports(3)
    conf = os.path.join(work, "many.conf")
    extra = (f"users-file = {work}/users.conf\napi = 127.0.0.1:{aport}\n"
             f"api-token = {TOKEN}\n")
    secret = many_users_config(conf, users, f"127.0.0.1:{dcport}", f"127.0.0.1:{mport}", extra)
    log = os.path.join(work, "log")
    proxy = subprocess.Popen([os.path.join(build, "mtproxy"), "--config", conf, "--listen",
                              f"127.0.0.1:{port}", "--workers", "1", "--dc-builtin", "off",
                              "--mask", "off", "--tls-profile", "off",
                              "--state-file", os.path.join(work, "state"),
                              "--log", log],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 60
    while True:
        try:
            if call(aport, "GET", "/api/v1/health")[0] == 200:
                break
        except OSError:
            pass
        if time.monotonic() > end:
            proxy.kill()
            raise RuntimeError("the API did not answer")
        time.sleep(0.2)
    return proxy, port, aport, log, secret


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=4000)
    ap.add_argument("--phases", type=int, default=10)
    ap.add_argument("--nice", type=int, default=0)
    ap.add_argument("--cost", type=float, default=3.0)
    ap.add_argument("--loop", choices=("crud", "other"), default="crud")
    a = ap.parse_args()
    from scrapeload import enter_loopback_netns
    enter_loopback_netns()
    from scrapeload import echo_dc, Pinger, interleaved, pct
    from harness import free_ports

    build = os.path.abspath(a.build_dir)
    (dcport,) = free_ports(1)
    dc = echo_dc(build, dcport)
    procs = []
    try:
        proxy, port, aport, log, secret = start_proxy(build, a.users, dcport)
        procs.append(proxy)
        loop_port = aport
        if a.loop == "other":  # the same loop, against a second proxy that relays nothing
            other, _, loop_port, _, _ = start_proxy(build, a.users, dcport, "-other")
            procs.append(other)
        print(f"users {a.users} in the config, build {a.build_dir}, work dir on "
              f"{subprocess.run(['stat', '-f', '-c', '%T', os.path.dirname(log)], capture_output=True, text=True).stdout.strip()}")
        for what, method, path, body in (
                ("POST /api/v1/users", "POST", "/api/v1/users", True),
                ("GET /api/v1/users/NAME", "GET", "/api/v1/users/b{i}", None),
                ("DELETE /api/v1/users/NAME", "DELETE", "/api/v1/users/b{i}", None)):
            walls = []
            for i in range(a.calls):
                t0 = time.perf_counter()
                st, data = call(aport, method, path.format(i=i),
                                {"name": f"b{i}"} if body else None)
                walls.append(time.perf_counter() - t0)
                assert st in (200, 201), (st, data)
            print(f"{what} x{a.calls}: {stats_ms(walls)}")
        pinger = Pinger(f"127.0.0.1:{port}", secret)
        pinger.run(500, 5)
        loop = Looper(loop_port, a.nice, worker_schedstat(proxy.pid))
        try:
            quiet, busy = interleaved(pinger, loop, a.rounds, phases=a.phases, max_phase_s=3)
        finally:
            turns = loop.stop()
        ok = sum(1 for t in turns if t == ["201", "200", "200", "200"])
        where = "on a second proxy" if a.loop == "other" else ""
        print(f"ping-pong without the API loop: p50 {pct(quiet, 50) * 1e3:.3f} ms p99 "
              f"{pct(quiet, 99) * 1e3:.3f} ms max {max(quiet) * 1e3:.3f} ms ({len(quiet)})")
        print(f"ping-pong with the API loop{where and ' ' + where}: p50 {pct(busy, 50) * 1e3:.3f} ms p99 "
              f"{pct(busy, 99) * 1e3:.3f} ms max {max(busy) * 1e3:.3f} ms ({len(busy)}; "
              f"{len(turns)} loop turns, {ok} all answered as expected)")
        print(f"p99 ratio with/without the API loop: {pct(busy, 99) / pct(quiet, 99):.2f}")
        if loop.schedstat:
            print(loop.wait_line(len(quiet), len(busy)))
        pinger.close()
        if a.cost > 0:
            reload_cost(proxy.pid, log, aport, a.nice, a.cost)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                print(f"the proxy (pid {p.pid}) did not stop in 10 s after SIGTERM: killed")
                p.kill()
                p.wait()
        dc.kill()
        dc.wait()


if __name__ == "__main__":
    main()
