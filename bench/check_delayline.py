#!/usr/bin/env python3
"""check_delayline.py: bench_delayline really delays every packet, both ways, and loses no byte.

  check_delayline.py PATH/TO/bench_delayline [--delay-ms 20]

Run as root inside a network namespace of its own (tests/netns.sh). Starts the delay line, an
echo server on its far side (nsenter into the delay line's namespace), and from the near side
checks: the TCP connect takes at least one round trip (2 x delay: the SYN and the SYN-ACK both
cross), every 1-byte echo at least one round trip and not ten times more, and 400 KB of random
bytes (many 1,500-byte packets each way) come back byte-exact. Exits 0 on success, 1 with the
reason on failure.
"""
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ECHO = r'''
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.77.0.2", 7777))
s.listen(4)
print("listening", flush=True)
c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    d = c.recv(65536)
    if not d:
        break
    c.sendall(d)
'''


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    binary = sys.argv[1]
    if (os.geteuid() != 0 or os.environ.get("MTPROXY_IN_NETNS") != "1"
            or not os.path.exists("/dev/net/tun")):
        print("check_delayline: skipped: needs root inside tests/netns.sh and /dev/net/tun",
              file=sys.stderr)
        return 77
    delay = float(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--delay-ms" else 20.0
    rtt = 2 * delay / 1000.0
    work = tempfile.mkdtemp(prefix="delayline-check.")
    ready = os.path.join(work, "ready")
    dl = subprocess.Popen([binary, "--delay-ms", str(delay), "--ready", ready, "--seconds", "60"],
                          stderr=subprocess.PIPE, text=True)
    srv = None
    try:
        for _ in range(200):
            if os.path.exists(ready) or dl.poll() is not None:
                break
            time.sleep(0.02)
        if not os.path.exists(ready):
            return fail("delay line did not come up: " + (dl.stderr.read() if dl.poll() else ""))
        srv = subprocess.Popen(["nsenter", "--net=/proc/%d/ns/net" % dl.pid, sys.executable,
                                "-c", ECHO], stdout=subprocess.PIPE, text=True)
        if srv.stdout.readline().strip() != "listening":
            return fail("echo server did not start on the far side")
        t = time.monotonic()
        s = socket.create_connection(("10.77.0.2", 7777), timeout=10)
        connect = time.monotonic() - t
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if connect < rtt * 0.95:
            return fail("connect took %.1f ms, less than one round trip (%.1f ms)"
                        % (connect * 1e3, rtt * 1e3))
        rtts = []
        for i in range(10):
            t = time.monotonic()
            s.sendall(bytes([i]))
            if s.recv(1) != bytes([i]):
                return fail("echo %d came back wrong" % i)
            rtts.append(time.monotonic() - t)
        if min(rtts) < rtt * 0.95 or statistics.median(rtts) > rtt * 10:
            return fail("echo round trips %s ms, expected about %.1f"
                        % ([round(x * 1e3, 1) for x in rtts], rtt * 1e3))
        data = os.urandom(400000)
        s.sendall(data)
        got = bytearray()
        while len(got) < len(data):
            d = s.recv(65536)
            if not d:
                break
            got += d
        if bytes(got) != data:
            return fail("bulk echo: %d of %d bytes, %s" % (len(got), len(data),
                        "equal prefix" if data.startswith(bytes(got)) else "corrupted"))
        s.close()
        print("check_delayline: ok: connect %.1f ms, echo median %.1f ms (delay %.1f ms one way)"
              % (connect * 1e3, statistics.median(rtts) * 1e3, delay))
        return 0
    finally:
        if srv:
            srv.kill()
            srv.wait()
        dl.terminate()
        dl.wait(timeout=10)
        for f in os.listdir(work):
            os.unlink(os.path.join(work, f))
        os.rmdir(work)


def fail(msg):
    print("check_delayline: FAIL: " + msg, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
