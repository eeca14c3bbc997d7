"""harness.py: runs fake_dc, mtproxy and test_client for the integration tests (loopback only)."""
import ipaddress
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import threading
import time

import pytest


# MTPROXY_WRAPPER (e.g. "valgrind ...", set by tests/valgrind.sh) is put in front of every
# mtproxy command. SLOW scales every upper time bound and wait (never a lower bound) for
# slowed-down builds: MTPROXY_SLOW if set, else 4 under a wrapper, else 1.
WRAPPER = shlex.split(os.environ.get("MTPROXY_WRAPPER", ""))
# MTPROXY_EMULATOR (e.g. "qemu-arm-static -L /usr/arm-linux-gnueabihf", set by
# packaging/cross/run.sh) is put in front of every binary built for another architecture:
# mtproxy, fake_dc and test_client.
EMULATOR = shlex.split(os.environ.get("MTPROXY_EMULATOR", ""))
SLOW = float(os.environ.get("MTPROXY_SLOW") or (4.0 if WRAPPER or EMULATOR else 1.0))

# The proxy's own handshake and connect timeouts: longer under an emulator, where a loaded
# machine can take more than a second to run a handshake.
HANDSHAKE_TIMEOUT_S = 1.0 * (SLOW if EMULATOR else 1.0)
CONNECT_TIMEOUT_S = 1.0 * (SLOW if EMULATOR else 1.0)


def T(seconds):
    """An upper time bound, scaled by SLOW."""
    return seconds * SLOW


def mtproxy_argv(bins, *args):
    """The command line that runs mtproxy with args (behind MTPROXY_WRAPPER, if any)."""
    return EMULATOR + WRAPPER + [bins["mtproxy"]] + [str(a) for a in args]

# Relay configurations the data-path tests run under (extra mtproxy arguments).
MODES = {
    "fast-splice": ["--fast-mode", "on", "--splice", "on"],
    "fast-copy": ["--fast-mode", "on", "--splice", "off"],
    "nofast": ["--fast-mode", "off"],
    "dcpool": ["--dc-pool", "2"],
}


# --------------------------------------------------------------------------------------------
# Safety: nothing in this process may dial an address outside 127.0.0.0/8 or ::1.

def _check_loopback(address):
    if isinstance(address, tuple) and address:
        host = address[0]
        try:
            ip = ipaddress.ip_address(host.split("%")[0])
        except ValueError:
            raise AssertionError(f"test tried to dial non-numeric host {host!r}")
        if not ip.is_loopback:
            raise AssertionError(f"test tried to dial non-loopback address {address!r}")


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _guarded_connect(self, address):
    _check_loopback(address)
    return _real_connect(self, address)


def _guarded_connect_ex(self, address):
    _check_loopback(address)
    return _real_connect_ex(self, address)


socket.socket.connect = _guarded_connect
socket.socket.connect_ex = _guarded_connect_ex


# --------------------------------------------------------------------------------------------
# Binaries and small helpers.

def free_ports(n):
    """n distinct loopback ports that were free a moment ago."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def new_secret():
    # Never starting with dd/ee: Telethon reads such a prefix as a secret kind (as mtproxy's
    # own generator avoids).
    while True:
        s = os.urandom(16).hex()
        if s[:2] not in ("dd", "ee"):
            return s


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def wait_until(pred, timeout, step=0.05):
    """Polls pred until it is true or T(timeout) passed; returns its last value."""
    end = time.monotonic() + T(timeout)
    while True:
        v = pred()
        if v or time.monotonic() >= end:
            return v
        time.sleep(step)


# --------------------------------------------------------------------------------------------
# Processes.

class Proc:
    """A child process whose stdout lines are collected by a thread; stderr goes to a file."""

    def __init__(self, name, argv, workdir):
        self.name = name
        self.argv = argv
        self.stderr_path = os.path.join(workdir, f"{name}.stderr")
        self._stderr = open(self.stderr_path, "wb")
        self.lines = []
        self.stopped = False
        self._cond = threading.Condition()
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._stderr,
                                  stdin=subprocess.DEVNULL)
        self._t = threading.Thread(target=self._pump, daemon=True)
        self._t.start()

    def _pump(self):
        for raw in self.p.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def pid(self):
        return self.p.pid

    def alive(self):
        return self.p.poll() is None

    def wait_line(self, regex, timeout, start=0):
        """First line at index >= start matching regex (a re.Match), or None after
        T(timeout)."""
        rx = re.compile(regex)
        end = time.monotonic() + T(timeout)
        i = start
        with self._cond:
            while True:
                while i < len(self.lines):
                    m = rx.search(self.lines[i])
                    if m:
                        return m
                    i += 1
                left = end - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and not self._t.is_alive()):
                    return None
                self._cond.wait(min(left, 0.1))

    def matching(self, regex, start=0):
        rx = re.compile(regex)
        with self._cond:
            return [m for m in (rx.search(l) for l in self.lines[start:]) if m]

    def mark(self):
        with self._cond:
            return len(self.lines)

    def stop(self, sig=signal.SIGTERM, timeout=5.0):
        """Sends sig, waits up to T(timeout), then SIGKILLs. Returns (returncode, seconds)."""
        t0 = time.monotonic()
        timeout = T(timeout)
        self.stopped = True
        if self.p.poll() is None:
            try:
                self.p.send_signal(sig)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)
        rc, secs = self.p.returncode, time.monotonic() - t0
        self._t.join(2)
        self._stderr.close()
        return rc, secs

    def stderr_tail(self, n=60):
        try:
            with open(self.stderr_path, "rb") as f:
                data = f.read().decode(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(data[-n:])

    def dump(self):
        print(f"===== {self.name} (pid {self.pid}, rc {self.p.returncode}): "
              f"{' '.join(self.argv)}")
        print(f"----- {self.name} stdout (last 40 lines)")
        print("\n".join(self.lines[-40:]))
        print(f"----- {self.name} stderr (last 60 lines)")
        print(self.stderr_tail())


class FakeDC(Proc):
    """fake_dc with listeners given as [(id, mode)]; .port[id] is each listener's port."""

    def __init__(self, bins, workdir, listeners, name="fake_dc", ports=None, extra=()):
        ports = ports or free_ports(len(listeners))
        self.port = {}
        argv = EMULATOR + [bins["fake_dc"]] + list(extra)
        for (lid, mode), port in zip(listeners, ports):
            argv += ["--listen", f"127.0.0.1:{port},{lid},{mode}"]
            self.port[lid] = port
        super().__init__(name, argv, workdir)
        if not self.wait_line(r"^READY$", 10):
            self.stop()
            raise RuntimeError(f"fake_dc did not start: {self.stderr_tail()}")

    def addr(self, lid):
        return f"127.0.0.1:{self.port[lid]}"

    def accepts(self, start=0):
        return len(self.matching(r"^ACCEPT ", start))

    def headers(self, start=0):
        """Connections that sent (or began) an obfuscated2 header: unlike accepts(), not
        counting sockets the proxy merely pre-connects (--dc-pool)."""
        return len(self.matching(r"^(HEADER|BAD_HEADER|SHORT_HEADER) ", start))


class Proxy(Proc):
    """The mtproxy binary on a free loopback port; only ever given the fake DC's addresses."""

    def __init__(self, bins, workdir, secrets, dcs, extra=(), workers=1, name="mtproxy"):
        self.port = free_ports(1)[0]
        argv = mtproxy_argv(bins, "--listen", f"127.0.0.1:{self.port}")
        for sname, sval in secrets:
            argv += ["--secret", f"{sname}:{sval}"]
        for dc_id, addr in dcs:
            assert addr.startswith("127.0.0.1:") or addr.startswith("[::1]:"), addr
            argv += ["--dc", f"{dc_id} {addr}"]
        # mask off: a bad client is never forwarded anywhere unless a test points mask-host
        # at a loopback server itself.
        argv += ["--dc-builtin", "off", "--mask", "off", "--workers", str(workers),
                 "--state-file", os.path.join(workdir, f"{name}.state"),
                 "--log-level", "debug",
                 # no TLS profile learning (an extra connection to the mask server) unless a
                 # test asks for it (test_stealth.py)
                 "--tls-profile", "off",
                 # load tests open hundreds of connections from 127.0.0.1 at once
                 "--probe-limit-per-ip", "4096",
                 "--handshake-timeout", f"{int(HANDSHAKE_TIMEOUT_S * 1000)}ms",
                 "--connect-timeout", f"{int(CONNECT_TIMEOUT_S * 1000)}ms"]
        argv += list(extra)
        super().__init__(name, argv, workdir)
        self.addr = f"127.0.0.1:{self.port}"
        if not wait_until(self._accepts, 10):
            self.dump()
            self.stop(signal.SIGKILL)
            raise RuntimeError("mtproxy did not start accepting")
        # The port accepts as soon as it is bound; mtproxy handles SIGTERM only once it has
        # logged "started" (a SIGTERM before that kills it). Wait for that line too.
        wait_until(lambda: " started, pid " in self.stderr_tail(400), 5)

    def _accepts(self):
        if not self.alive():
            raise RuntimeError(f"mtproxy exited with {self.p.returncode}: {self.stderr_tail()}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def fds(self):
        return fd_count(self.pid)

    def fd_kinds(self):
        """{'socket': n, 'pipe': n, 'other': n} of the proxy's open descriptors."""
        kinds = {"socket": 0, "pipe": 0, "other": 0}
        for fd in os.listdir(f"/proc/{self.pid}/fd"):
            try:
                target = os.readlink(f"/proc/{self.pid}/fd/{fd}")
            except OSError:
                continue
            kind = target.split(":", 1)[0]
            kinds[kind if kind in kinds else "other"] += 1
        return kinds

    def sockets(self):
        return self.fd_kinds()["socket"]

    def settled_sockets(self, timeout=5.0):
        """Socket count once it stopped changing for 0.3 s (or after timeout)."""
        end = time.monotonic() + timeout
        last = self.sockets()
        while time.monotonic() < end:
            time.sleep(0.3)
            now = self.sockets()
            if now == last:
                return now
            last = now
        return last


class Procs:
    """Owns every process a test starts; kills them all at teardown, dumps logs on failure."""

    def __init__(self, bins, workdir):
        self.bins = bins
        self.workdir = workdir
        self.all = []
        self.pids = []  # short-lived test_client runs

    def fake_dc(self, listeners, **kw):
        p = FakeDC(self.bins, self.workdir, listeners, **kw)
        self.all.append(p)
        return p

    def proxy(self, secrets, dcs, **kw):
        if not self.bins["mtproxy"]:
            pytest.skip("MTPROXY_BIN not set or not executable")
        # One mtproxy per state file (it is locked): a second live proxy gets its own name.
        name = kw.get("name", "mtproxy")
        if any(isinstance(p, Proxy) and p.name == name and p.alive() for p in self.all):
            kw["name"] = f"{name}{len(self.all)}"
        p = Proxy(self.bins, self.workdir, secrets, dcs, **kw)
        self.all.append(p)
        return p

    def client_bg(self, proxy, secret, tag, dc, up, down, *extra, name="client"):
        argv = client_argv(self.bins, proxy, secret, tag, dc, up, down, *extra)
        p = Proc(f"{name}{len(self.all)}", argv, self.workdir)
        self.all.append(p)
        return p

    @staticmethod
    def result(p, timeout=90):
        """Waits for a background test_client and returns its summary (with 'rc')."""
        timeout = T(timeout)
        try:
            p.p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.p.kill()
            raise AssertionError(f"{p.name} did not finish in {timeout} s")
        p._t.join(5)
        res = parse_client_output("\n".join(p.lines))
        res["rc"] = p.p.returncode
        return res

    def client(self, proxy, secret, tag, dc, up, down, *extra, timeout=90):
        res = run_client(self.bins, proxy, secret, tag, dc, up, down, *extra,
                         timeout=timeout)
        self.pids.append(res["pid"])
        return res

    def teardown(self, failed):
        """Stops everything. Proxies get SIGTERM and must exit 0 (under ASan that is when
        leaks are reported); one that died during the test is a failure too. Returns a list
        of problems (empty if none)."""
        problems = []
        for p in reversed(self.all):
            if isinstance(p, Proxy):
                if p.p.poll() is not None and not p.stopped:
                    if p.p.returncode != 0:
                        problems.append(f"{p.name} died during the test "
                                        f"(exit {p.p.returncode})")
                    p.stop(signal.SIGKILL)
                elif not p.stopped:
                    rc, secs = p.stop(signal.SIGTERM, timeout=15)
                    if rc != 0:
                        problems.append(f"{p.name} exited {rc} on SIGTERM at teardown")
            else:
                p.stop(signal.SIGKILL, timeout=5)
        problems += self.sanitizer_reports()
        if failed or problems:
            for p in self.all:
                p.dump()
        return problems

    def sanitizer_reports(self):
        """Reports about our processes in MTPROXY_CHECK_LOGS: any sanitizer log san.PID*
        (tests/sanitize.sh), and valgrind logs vg.PID* with errors (tests/valgrind.sh)."""
        logs = os.environ.get("MTPROXY_CHECK_LOGS")
        if not logs or not os.path.isdir(logs):
            return []
        pids = {p.pid for p in self.all} | set(self.pids)
        found = []
        for f in sorted(os.listdir(logs)):
            m = re.match(r"^(san|vg)\.(\d+)", f)
            if not m or int(m.group(2)) not in pids:
                continue
            with open(os.path.join(logs, f), errors="replace") as fh:
                text = fh.read()
            if m.group(1) == "san" or re.search(r"ERROR SUMMARY: [1-9]", text):
                found.append(f"report {f}:\n" + text[-6000:])
        return found


# --------------------------------------------------------------------------------------------
# The test client.

def client_argv(bins, proxy, secret, tag, dc, up, down, *extra):
    """test_client's command line; its --timeout (default 30 s) is scaled by SLOW."""
    addr = proxy.addr if hasattr(proxy, "addr") else proxy
    extra = [str(e) for e in extra]
    if "--timeout" in extra:
        i = extra.index("--timeout") + 1
        extra[i] = str(int(T(float(extra[i])) + 0.999))
    elif SLOW != 1.0:
        extra += ["--timeout", str(int(T(30)))]
    return EMULATOR + [bins["test_client"], "--proxy", addr, "--secret", secret, "--tag", tag,
            "--dc", str(dc), "--up", str(up), "--down", str(down)] + extra


def parse_client_output(text):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{") and '"ok"' in line:
            return json.loads(line)
    raise AssertionError(f"no JSON summary from test_client: {text!r}")


def run_client(bins, proxy, secret, tag, dc, up, down, *extra, timeout=90):
    """Runs test_client to completion; returns its summary dict plus 'rc' and 'wall'."""
    argv = client_argv(bins, proxy, secret, tag, dc, up, down, *extra)
    timeout = T(timeout)
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise AssertionError(f"test_client did not finish in {timeout} s: {argv}")
    res = parse_client_output(out.decode())
    res["rc"] = p.returncode
    res["pid"] = p.pid
    res["wall"] = time.monotonic() - t0
    res["stderr"] = err.decode(errors="replace")
    return res


def assert_ok(res):
    assert res["ok"] and res["rc"] == 0 and res["failed"] == 0, json.dumps(res)


def assert_rejected(res, max_seconds):
    """The proxy answered nothing and closed the connection (no hello, no bytes, no hang)."""
    assert not res["ok"] and res["rc"] != 0, json.dumps(res)
    assert res["hellos"] == 0, json.dumps(res)
    assert res["rx_before_hello"] == 0, f"proxy sent bytes to a bad client: {res}"
    for e in res["errors"]:
        assert re.search(r"hello: (eof|reset)", e), f"not closed by the proxy: {res}"
    assert res["seconds"] < T(max_seconds), f"closed too late: {res}"


# --------------------------------------------------------------------------------------------
# The standard setup: a DC listener per id, one plain and one dd secret.

DC_IDS = [1, 2, 3, 4, 5, 203]
MEDIA_4_LISTENER = 904  # -4 is configured with its own address (listener id 904)


class Std:
    def __init__(self, procs, extra=(), workers=1, dc_extra=()):
        self.procs = procs
        self.plain = new_secret()
        self.dd = "dd" + new_secret()
        listeners = [(i, "normal") for i in DC_IDS] + [(MEDIA_4_LISTENER, "normal")]
        listeners += list(dc_extra)
        self.dc = procs.fake_dc(listeners)
        dcs = [(i, self.dc.addr(i)) for i in DC_IDS] + [(-4, self.dc.addr(MEDIA_4_LISTENER))]
        self.proxy = procs.proxy([("plain", self.plain), ("padded", self.dd)], dcs,
                                 extra=extra, workers=workers)

    def client(self, tag, dc, up=4096, down=4096, *extra, secret=None, timeout=90):
        return self.procs.client(self.proxy, secret or self.plain, tag, dc, up, down, *extra,
                                 timeout=timeout)


# --------------------------------------------------------------------------------------------
# Small loopback servers written in Python.

class Recorder:
    """A loopback TCP relay in front of target_port that records the bytes each client sent
    (first `keep` bytes per connection, in .captured)."""

    def __init__(self, target_port, keep=4096):
        self.target_port = target_port
        self.keep = keep
        self.captured = []
        self.lst = socket.socket()
        self.lst.bind(("127.0.0.1", 0))
        self.lst.listen(16)
        self.port = self.lst.getsockname()[1]
        self.addr = f"127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                cli, _ = self.lst.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
            rec = bytearray()
            self.captured.append(rec)
            threading.Thread(target=self._pump, args=(cli, up, rec), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, cli, None), daemon=True).start()

    def _pump(self, src, dst, rec):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if rec is not None and len(rec) < self.keep:
                    rec += data[:self.keep - len(rec)]
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self):
        self.lst.close()


class FakeWeb:
    """A loopback 'web server' for mask tests: records what it gets, answers a fixed reply."""

    REPLY = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

    def __init__(self):
        self.received = []
        self.lst = socket.socket()
        self.lst.bind(("127.0.0.1", 0))
        self.lst.listen(16)
        self.port = self.lst.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.lst.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        got = bytearray()
        self.received.append(got)
        c.settimeout(3)
        try:
            while b"\r\n\r\n" not in got and len(got) < 65536:
                data = c.recv(4096)
                if not data:
                    break
                got += data
            c.sendall(self.REPLY)
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        self.lst.close()


def relay_pair(a, b):
    """Copies bytes both ways between sockets a and b until either side ends (blocks; one
    direction in a thread), then shuts both down."""
    def pump(x, y):
        try:
            while True:
                d = x.recv(65536)
                if not d:
                    break
                y.sendall(d)
        except OSError:
            pass
        for z in (x, y):
            try:
                z.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
    threading.Thread(target=pump, args=(b, a), daemon=True).start()
    pump(a, b)
