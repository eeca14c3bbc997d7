#!/usr/bin/env python3
"""bench/flood.py: real clients' throughput, proxy RSS and descriptors under each flood a
stranger can send (hardening II), against the same run without a flood.

  sh tests/netns.sh build/tests/integration/venv/bin/python bench/flood.py [--build-dir build]
       [--repeat N]

Per round and scenario: a fresh proxy (one worker, defaults but a 4M buffer-memory and
--probe-limit-per-ip 0, so the budgets and not the per-address limit are what is measured),
the flood, then 20 dd clients downloading 1 MB each at once (test_client), timed; RSS and open
descriptors of the proxy read at the end. Prints a Markdown table of medians.
Scenarios: none; 300 fronted connections that never read while the site streams; 300
connections dripping one byte every 0.5 s; 400 FakeTLS hellos announced at 16 KiB, never
finished.
"""
import argparse
import os
import socket
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import harness  # noqa: E402
from test_hardening import StreamWeb, rss_kb  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    bins = {"mtproxy": os.path.join(a.build_dir, "mtproxy"),
            "fake_dc": os.path.join(a.build_dir, "tests/tools/fake_dc"),
            "test_client": os.path.join(a.build_dir, "tests/tools/test_client")}
    rows = {}
    for _ in range(a.repeat):
        for scen in ("none", "fronted-never-reading", "drip", "partial-hellos"):
            work = tempfile.mkdtemp(prefix="mtproxy-flood-")
            procs = harness.Procs(bins, work)
            web = StreamWeb()
            socks = []
            try:
                plain = harness.new_secret()
                ee = "ee" + harness.new_secret() + b"www.example.com".hex()
                dc = procs.fake_dc([(2, "normal")])
                proxy = procs.proxy([("plain", plain), ("tls", ee)], [(2, dc.addr(2))],
                                    extra=["--mask", "on", "--mask-host", "127.0.0.1",
                                           "--mask-port", str(web.port), "--buffer-memory",
                                           "4M", "--probe-limit-per-ip", "0",
                                           "--handshake-timeout", "10s", "--log-level", "warn"])
                if scen == "fronted-never-reading":
                    for _ in range(300):
                        s = socket.socket()
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                        s.connect(("127.0.0.1", proxy.port))
                        s.sendall(os.urandom(64))
                        socks.append(s)
                    time.sleep(2)
                elif scen == "drip":
                    for _ in range(300):
                        s = socket.create_connection(("127.0.0.1", proxy.port))
                        s.sendall(b"\x01")
                        socks.append(s)
                elif scen == "partial-hellos":
                    start = bytes.fromhex("160301") + (16384).to_bytes(2, "big")
                    for _ in range(400):
                        s = socket.create_connection(("127.0.0.1", proxy.port))
                        s.sendall(start + b"\x01\x00\x3f\xfc\x03\x03" + os.urandom(12000))
                        socks.append(s)
                    time.sleep(0.5)
                res = harness.run_client(bins, proxy, plain, "dd", 2, 100000, 1000000,
                                         "--conns", "20", timeout=60)
                mb_s = 20.0 * 1.1 / res["seconds"] if res["ok"] else 0.0
                rows.setdefault(scen, []).append(
                    (res["ok"], res["seconds"], mb_s, rss_kb(proxy.pid), proxy.fds()))
            finally:
                for s in socks:
                    s.close()
                web.close()
                procs.teardown(False)
    print("| flood | clients ok | 20 x 1 MB dd downloads, s | MB/s | proxy RSS KiB | proxy fds |")
    print("|---|---|---|---|---|---|")
    base = statistics.median(r[2] for r in rows["none"])
    for scen, rs in rows.items():
        med = [statistics.median(r[i] for r in rs) for i in (1, 2, 3, 4)]
        ok = sum(1 for r in rs if r[0])
        print(f"| {scen} | {ok}/{len(rs)} | {med[0]:.2f} | {med[1]:.1f} ({med[1] / base:.2f}x) "
              f"| {med[2]:.0f} | {med[3]:.0f} |")
    print(f"\nmedians of {a.repeat} rounds")


if __name__ == "__main__":
    main()
