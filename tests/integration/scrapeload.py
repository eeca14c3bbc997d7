"""scrapeload.py: a proxy with many users, scrapers of its metrics page and a ping-pong client
through it (test_metrics_isolation.py and bench/metrics_scrape.py). Loopback only."""
import os
import signal
import socket
import subprocess
import sys
import time

from rawclient import Obfs2


def in_loopback_netns():
    """Only lo in this network namespace (/proc/net/dev: sysfs may still show the host's)."""
    with open("/proc/net/dev") as f:
        names = [line.split(":")[0].strip() for line in f if ":" in line]
    return names == ["lo"]


def enter_loopback_netns():
    """Runs this script again in a network namespace of its own with only lo up (no return)
    unless it already is in one: a bench must not reach anything but loopback."""
    if in_loopback_netns():
        return
    flag = "-n" if os.geteuid() == 0 else "-rn"
    os.execvp("unshare", ["unshare", flag, "sh", "-c", 'ip link set lo up && exec "$@"',
                          "sh", sys.executable] + sys.argv)


def echo_dc(build, port):
    """The fake DC of BUILD answering DC 2 on 127.0.0.1:PORT with an echo, once it is ready."""
    dc = subprocess.Popen([os.path.join(build, "tests", "tools", "fake_dc"), "--listen",
                           f"127.0.0.1:{port},2,echo"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL)
    assert dc.stdout.readline().strip() == b"READY"
    return dc


def many_users_config(path, n, dc_addr, metrics_addr, extra=""):
    """A config file with n secrets (u00000...), DC 2 at dc_addr and metrics on metrics_addr.
    Returns the first user's secret (hex)."""
    first = None
    lines = [f"dc = 2 {dc_addr}\n", f"metrics = {metrics_addr}\n", extra]
    for i in range(n):
        sec = os.urandom(16).hex()
        while sec[:2] in ("dd", "ee"):
            sec = os.urandom(16).hex()
        first = first or sec
        lines.append(f"secret = u{i:05d}:{sec}\n")
    with open(path, "w") as f:
        f.write("".join(lines))
    return first


# A scraper process: at nice 19, GETs its paths in turn on new connections, reads each answer
# to its end and prints "DONE <status> <bytes>" per answer; it runs until killed.
SCRAPER = r"""
import os, socket, sys
os.nice(19)
port, paths = int(sys.argv[1]), sys.argv[2].split(",")
i = 0
while True:
    path = paths[i % len(paths)]
    i += 1
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        n, first = 0, b""
        while True:
            b = s.recv(1 << 20)
            if not b:
                break
            if not first:
                first = b[:12]
            n += len(b)
        s.close()
        print("DONE", first[9:12].decode(errors="replace"), n, flush=True)
    except OSError as e:
        print("ERROR", e, flush=True)
"""


class Scrapers:
    """n scraper processes (nice 19) on the metrics port; pause() and resume() stop and continue
    them all (SIGSTOP, SIGCONT)."""

    def __init__(self, n, port, paths=("/metrics", "/stats")):
        self.procs = []
        for k in range(n):
            rot = list(paths[k % len(paths):]) + list(paths[:k % len(paths)])
            self.procs.append(subprocess.Popen(
                [sys.executable, "-c", SCRAPER, str(port), ",".join(rot)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL))
        self.paused = False

    def pause(self):
        for p in self.procs:
            p.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        for p in self.procs:
            p.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self):
        """Ends them; returns [(status, bytes)] of every answer they read."""
        done = []
        for p in self.procs:
            p.send_signal(signal.SIGKILL)
            p.send_signal(signal.SIGCONT)
        for p in self.procs:
            out, _ = p.communicate(timeout=30)
            for line in out.decode(errors="replace").splitlines():
                f = line.split()
                if len(f) == 3 and f[0] == "DONE":
                    done.append((f[1], int(f[2])))
        return done


class Pinger:
    """One client connection through the proxy (plain secret, DC 2 an echoing fake_dc):
    rtt() sends 32 bytes and waits for the 32 echoed back."""

    def __init__(self, proxy_addr, secret, timeout=10.0):
        host, port = proxy_addr.rsplit(":", 1)
        assert host == "127.0.0.1", proxy_addr
        self.s = socket.create_connection((host, int(port)), timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.s.sendall(Obfs2(secret, "ef", 2).wire_header)
        self.payload = os.urandom(32)
        self._recv(64)  # the proxy's own header to the DC, echoed back

    def _recv(self, n):
        got = 0
        while got < n:
            b = self.s.recv(n - got)
            if not b:
                raise ConnectionError("the proxy closed the ping connection")
            got += len(b)

    def rtt(self):
        t0 = time.perf_counter()
        self.s.sendall(self.payload)
        self._recv(len(self.payload))
        return time.perf_counter() - t0

    def run(self, n, max_seconds):
        """Up to n round trips, stopping after max_seconds; their times in seconds."""
        out, end = [], time.monotonic() + max_seconds
        while len(out) < n and time.monotonic() < end:
            out.append(self.rtt())
        return out

    def close(self):
        self.s.close()


def pct(samples, q):
    """The q-th percentile (0..100) of samples (nearest rank)."""
    s = sorted(samples)
    return s[min(len(s) - 1, max(0, int(round(q / 100.0 * len(s) + 0.5)) - 1))]


def interleaved(pinger, scrapers, rounds, phases=4, max_phase_s=5.0, warmup_s=0.3, settle_s=1.0):
    """Round trips alternately without and with the scrapers running (phases of each, rounds
    in all per side), so that the machine's other load hits both sides alike. The scrapers
    first run settle_s alone (their interpreters start, the first pages are rendered). Returns
    (quiet, busy) lists of seconds."""
    quiet, busy = [], []
    per = max(1, rounds // phases)
    time.sleep(settle_s)
    for _ in range(phases):
        scrapers.pause()
        time.sleep(0.05)
        quiet += pinger.run(per, max_phase_s)
        scrapers.resume()
        time.sleep(warmup_s)
        busy += pinger.run(per, max_phase_s)
    scrapers.pause()
    return quiet, busy
