#!/usr/bin/env python3
"""bench/web_sessions.py WEB_HOST:PORT HOST SECRET PID N: what WEB sessions and streams cost the
proxy (PID): N sessions made one after another (bridge page, bootstrap, HELLO: three requests
each), then N OPENs in one of them (each a stream and a connection of the state machine, waiting
for its client's handshake). Prints, per session and per OPEN, the proxy's CPU (from
/proc/PID/stat) and its resident memory (VmRSS) growth, as key=value lines."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from webclient import OPEN, Session, frame  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def rss_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


host, port = sys.argv[1].rsplit(":", 1)
addr, name, secret, pid, n = (host, int(port)), sys.argv[2], sys.argv[3], int(sys.argv[4]), \
    int(sys.argv[5])
c0, r0, t0 = cpu(pid), rss_kb(pid), time.monotonic()
sessions = [Session(addr, name, secret) for _ in range(n)]
c1, r1, t1 = cpu(pid), rss_kb(pid), time.monotonic()
s = sessions[0]
seq = 0
for first in range(1, n + 1, 100):
    seq += 1
    body = b"".join(frame(OPEN, i) for i in range(first, min(first + 100, n + 1)))
    st, h, _, _ = s.post("/api/v1/up", body, s.token, {"X-Up-Seq": str(seq)})
    assert st == 204, st
time.sleep(0.5)  # the connections are set up on the worker's loop
c2, r2 = cpu(pid), rss_kb(pid)
print(f"sessions={n} session_cpu_us={(c1 - c0) / n * 1e6:.1f} "
      f"session_rss_bytes={(r1 - r0) * 1024 / n:.0f} sessions_per_s={n / (t1 - t0):.0f}")
print(f"opens={n} open_cpu_us={(c2 - c1) / n * 1e6:.1f} open_rss_bytes={(r2 - r1) * 1024 / n:.0f}")
