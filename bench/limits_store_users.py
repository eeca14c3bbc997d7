#!/usr/bin/env python3
"""bench/limits_store_users.py: what limits-store costs Redis and the proxy with N active users
per instance (bench/limits_store.sh runs it; needs the integration venv's python for pyaes).

  limits_store_users.py --build-dir DIR --redis-port P [--users 1000] [--seconds 10]

Two mtproxy instances (one worker each) sharing one Redis, each with USERS users that have
`conns=5 quota=100G` limits, limits-store-interval 1 s; every user holds one idle live
connection through each instance (the users are active on both: each instance writes a live
count and a quota share per user every flush and reads the other's live hash). Over SECONDS:
Redis commands per second (INFO's total_commands_processed), Redis CPU, per instance the
commands it sent per second, its flusher thread's CPU per second and the last flush's round
trip (from /metrics). Prints one CSV line per instance and one for Redis.
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import rawclient  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, secs=10):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def redis_info(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"INFO all\r\n")
    data = b""
    while True:
        data += s.recv(65536)
        m = re.match(rb"\$(\d+)\r\n", data)
        if m and len(data) >= m.end() + int(m.group(1)):
            break
    s.close()
    text = data.decode()
    info = dict(re.findall(r"^(\w+):([^\r\n]*)", text, re.M))
    return int(info["total_commands_processed"]), float(info["used_cpu_sys"]) + \
        float(info["used_cpu_user"])


def metrics(port):
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for name in ("limits_store_commands_total", "limits_store_cpu_seconds_total",
                 "limits_store_flush_seconds", "limits_store_flushes_total",
                 "limits_store_failures_total"):
        m = re.search(rf"^mtproxy_{name} (\S+)$", body, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    return out


def proc_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--redis-port", type=int, required=True)
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=10)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="mtproxy-lsusers.")
    dcport = free_port()
    dc = subprocess.Popen([os.path.join(a.build_dir, "tests", "tools", "fake_dc"), "--listen",
                           f"127.0.0.1:{dcport},2,normal", "--quiet"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    users = [(f"u{i}", os.urandom(16).hex()) for i in range(a.users)]
    conf = os.path.join(work, "users.conf")
    with open(conf, "w") as f:
        for n, s in users:
            f.write(f"secret = {n}:{s}\nlimit = {n} conns=5 quota=100G\n")
    procs, ports = [], []
    for i in (1, 2):
        port, mport = free_port(), free_port()
        p = subprocess.Popen([os.path.join(a.build_dir, "mtproxy"), "--config", conf,
                              "--listen", f"127.0.0.1:{port}", "--dc-builtin", "off",
                              "--mask", "off", "--dc", f"2 127.0.0.1:{dcport}", "--workers", "1",
                              "--state-file", os.path.join(work, f"state{i}"),
                              "--probe-limit-per-ip", "0", "--log-level", "warn",
                              "--metrics", f"127.0.0.1:{mport}",
                              "--limits-store", f"redis://127.0.0.1:{a.redis_port}/2",
                              "--limits-store-interval", "1s"],
                             stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"p{i}.log"), "w"))
        procs.append(p)
        ports.append((port, mport))
    socks = []
    try:
        for port, _ in ports:
            wait_port(port)
        for port, _ in ports:
            for n, s in users:
                sk, _ = rawclient.start_session(f"127.0.0.1:{port}", s, tag="ee", dc=2, up=0,
                                                down=100)
                socks.append(sk)
        for sk in socks:  # each answered: a live relayed connection
            sk.settimeout(5)
            assert len(rawclient.recv_upto(sk, 64)) >= 64, "a session was not served"
        time.sleep(3)  # every flush carries all users now
        r0 = redis_info(a.redis_port)
        m0 = [metrics(mp) for _, mp in ports]
        c0 = [proc_cpu(p.pid) for p in procs]
        time.sleep(a.seconds)
        r1 = redis_info(a.redis_port)
        m1 = [metrics(mp) for _, mp in ports]
        c1 = [proc_cpu(p.pid) for p in procs]
        t = a.seconds
        print("who,users,commands_per_s,flushes_per_s,failures,flusher_cpu_ms_per_s,"
              "process_cpu_ms_per_s,flush_rtt_ms,redis_cpu_ms_per_s")
        for i in range(2):
            d = {k: m1[i][k] - m0[i][k] for k in m0[i]}
            print(f"instance{i + 1},{a.users},{d['limits_store_commands_total'] / t:.0f},"
                  f"{d['limits_store_flushes_total'] / t:.2f},"
                  f"{d['limits_store_failures_total']:.0f},"
                  f"{d['limits_store_cpu_seconds_total'] / t * 1000:.2f},"
                  f"{(c1[i] - c0[i]) / t * 1000:.2f},"
                  f"{m1[i]['limits_store_flush_seconds'] * 1000:.2f},")
        print(f"redis,{a.users},{(r1[0] - r0[0]) / t:.0f},,,,,,{(r1[1] - r0[1]) / t * 1000:.2f}")
    finally:
        for sk in socks:
            sk.close()
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(15)
        dc.kill()
        dc.wait()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
