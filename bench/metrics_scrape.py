#!/usr/bin/env python3
"""metrics_scrape.py: what scraping the metrics page costs at many users, and what it does to
a relayed client on the same worker.

    build/tests/integration/venv/bin/python bench/metrics_scrape.py [--build-dir DIR]
        [--users N] [--scrapes N] [--rounds N] [--phases N] [--burners]

One worker, --users users (default 10,000), DC 2 an echoing fake_dc, metrics on loopback;
re-runs itself in a network namespace with only loopback (unshare -n as root, else -rn)
unless already in one.
Prints:
  1. per scrape (GET /metrics, then GET /stats, --scrapes times each, one at a time, 1.2 s
     apart so that each is rendered anew, then back to back): median wall time, the proxy's
     CPU time per scrape (/proc/PID/stat over all of them), body size; the proxy's RSS before
     and after (VmRSS) and its peak (VmHWM);
  2. a ping-pong client (32 bytes through the proxy to the echoing DC and back, --rounds round
     trips per side) in alternating phases without and with four scrapers at nice 19 looping
     on /metrics and /stats: p50, p99, max of each side and the p99 ratio. --burners adds a
     side with four nice-19 processes that only burn CPU (what the scrapers' own CPU costs).
Works with any build (figures before and after a change: run it with each --build-dir).
Loopback only.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--users", type=int, default=10000)
    ap.add_argument("--scrapes", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=4000)
    ap.add_argument("--phases", type=int, default=10)
    ap.add_argument("--burners", action="store_true")
    a = ap.parse_args()
    from scrapeload import enter_loopback_netns
    enter_loopback_netns()
    from scrapeload import echo_dc, Pinger, Scrapers, interleaved, many_users_config, pct
    from harness import free_ports

    build = os.path.abspath(a.build_dir)
    work = tempfile.mkdtemp(prefix="mtproxy-scrape.")
    dcport, port, mport = free_ports(3)
    dc = echo_dc(build, dcport)
    conf = os.path.join(work, "many.conf")
    secret = many_users_config(conf, a.users, f"127.0.0.1:{dcport}", f"127.0.0.1:{mport}")
    proxy = subprocess.Popen([os.path.join(build, "mtproxy"), "--config", conf, "--listen",
                              f"127.0.0.1:{port}", "--workers", "1", "--dc-builtin", "off",
                              "--mask", "off", "--tls-profile", "off",
                              "--state-file", os.path.join(work, "state"),
                              "--log", os.path.join(work, "log")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run(a, proxy.pid, port, mport, secret, Pinger, Scrapers, interleaved, pct)
    finally:
        proxy.terminate()
        proxy.wait(10)
        dc.kill()
        dc.wait()


def get(port, path):
    import socket
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    n = 0
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        n += len(b)
    s.close()
    return n


def cpu_seconds(pid):
    """CPU time of every thread of pid (schedstat: nanoseconds, unlike stat's ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total / 1e9


def mem_kb(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


BURNER = "import os\nos.nice(19)\nwhile True:\n    pass\n"


class Burners:
    def __init__(self, n):
        self.procs = [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(n)]

    def pause(self):
        for p in self.procs:
            p.send_signal(19)

    def resume(self):
        for p in self.procs:
            p.send_signal(18)

    def stop(self):
        for p in self.procs:
            p.kill()
            p.send_signal(18)
            p.wait()
        return []


def run(a, pid, port, mport, secret, Pinger, Scrapers, interleaved, pct):
    end = time.monotonic() + 60
    while True:
        try:
            get(mport, "/metrics")
            break
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)
    rss0 = mem_kb(pid, "VmRSS")
    print(f"users {a.users}, build {a.build_dir}")
    for path in ("/metrics", "/stats"):
        for gap, how in ((1.2, "1.2 s apart"), (0, "back to back")):
            walls, size = [], 0
            c0 = cpu_seconds(pid)
            for _ in range(a.scrapes):
                time.sleep(gap)
                t0 = time.perf_counter()
                size = get(mport, path)
                walls.append(time.perf_counter() - t0)
            cpu = (cpu_seconds(pid) - c0) / a.scrapes
            print(f"scrape {path} ({how}): wall median {statistics.median(walls) * 1e3:.1f} ms, "
                  f"proxy CPU {cpu * 1e3:.2f} ms per scrape, {size} bytes")
    print(f"proxy RSS: before the scrapes {rss0 // 1024} MB, after {mem_kb(pid, 'VmRSS') // 1024}"
          f" MB, peak {mem_kb(pid, 'VmHWM') // 1024} MB")
    pinger = Pinger(f"127.0.0.1:{port}", secret)
    pinger.run(500, 5)
    sides = [("scrapers", lambda: Scrapers(4, mport))]
    if a.burners:
        sides.append(("burners", lambda: Burners(4)))
    for name, make in sides:
        load = make()
        c0 = cpu_seconds(pid)
        try:
            quiet, busy = interleaved(pinger, load, a.rounds, phases=a.phases, max_phase_s=3)
        finally:
            done = load.stop()
        full = sum(1 for st, n in done if st == "200")
        print(f"ping-pong without {name}: p50 {pct(quiet, 50) * 1e3:.3f} ms p99 "
              f"{pct(quiet, 99) * 1e3:.3f} ms max {max(quiet) * 1e3:.3f} ms ({len(quiet)})")
        print(f"ping-pong with four {name}: p50 {pct(busy, 50) * 1e3:.3f} ms p99 "
              f"{pct(busy, 99) * 1e3:.3f} ms max {max(busy) * 1e3:.3f} ms ({len(busy)}"
              + (f"; {full} scrapes answered 200, proxy CPU {cpu_seconds(pid) - c0:.2f} s)"
                 if name == "scrapers" else ")"))
        print(f"p99 ratio with/without {name}: {pct(busy, 99) / pct(quiet, 99):.2f}")
    pinger.close()
    print(f"proxy RSS after the scraping loops {mem_kb(pid, 'VmRSS') // 1024} MB, peak "
          f"{mem_kb(pid, 'VmHWM') // 1024} MB")


if __name__ == "__main__":
    main()
