"""proxyinfo.py: reading a running mtproxy from outside: RSS, CPU time, descriptors, stats."""
import os
import re
import resource
import signal

import harness
from harness import wait_until

# RSS figures mean something only for a plain build: ASan keeps freed memory in quarantine and
# valgrind replaces the allocator (tests/sanitize.sh and tests/valgrind.sh set these).
RSS_MEANINGFUL = not (harness.WRAPPER or os.environ.get("MTPROXY_CHECK_LOGS"))


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    """User + system CPU time the process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stats(proxy, timeout=5.0):
    """Counters from the proxy's SIGUSR1 stats lines, as {name: int} (close reasons too)."""
    def count():
        return proxy.stderr_tail(100000).count("stats: closed:")
    before = count()
    os.kill(proxy.pid, signal.SIGUSR1)
    assert wait_until(lambda: count() > before, timeout), "no stats after SIGUSR1"
    text = proxy.stderr_tail(100000)
    out = {}
    # the last batch starts at "stats: accepted N" ("stats: accepted per worker" follows it)
    start = [m.start() for m in re.finditer(r"stats: accepted \d", text)][-1]
    for line in text[start:].splitlines():
        if "stats:" in line:
            for k, v in re.findall(r"([a-z_-]+) (\d+)", line.split("stats:", 1)[1]):
                out[k] = int(v)
    return out


def fd_numbers(pid):
    return sorted(int(x) for x in os.listdir(f"/proc/{pid}/fd"))


def limit_fds(pid, free):
    """Lowers pid's RLIMIT_NOFILE so that exactly `free` more descriptors can be opened."""
    used = set(fd_numbers(pid))
    limit, avail = 0, 0
    while avail < free or limit in used:
        if limit not in used:
            avail += 1
        limit += 1
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, hard))
    return soft, hard
