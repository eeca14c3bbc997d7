"""test_stealth.py: the site's TLS profile (openssl s_server on loopback), record sizing toward ee
clients, unknown-sni, client-mss, rst-on-close and the held close (issue #17)."""
import ctypes
import ctypes.util
import hashlib
import hmac
import os
import re
import signal
import socket
import ssl
import struct
import subprocess
import threading
import time

import pytest

import tgprobe
from harness import (DC_IDS, MODES, T, Std, assert_ok, free_ports, new_secret, relay_pair,
                     wait_until)
import rawclient
from rawclient import TAGS, _forbidden

DOMAIN = "www.example.com"  # only ever text: every server in these tests is on loopback
VARY = 4                    # --tls-profile-vary of these tests
SMALL = 1448 - 5            # largest small record: one segment less the record header
ALERT_UNRECOGNIZED_NAME = bytes.fromhex("15030300020270")


# --------------------------------------------------------------------------------------------
# A site: openssl s_server with a self-signed chain of a given shape.

def make_chain(d, kind):
    """Writes leaf.pem/leaf.key (and ca.pem for a two-certificate chain) under d."""
    os.makedirs(d, exist_ok=True)
    run = lambda *a: subprocess.run(["openssl", *a], cwd=d, check=True, capture_output=True)
    ext = os.path.join(d, "ext")
    with open(ext, "w") as f:
        f.write(f"subjectAltName=DNS:{DOMAIN}\nbasicConstraints=CA:FALSE\n")
    if kind == "rsa2048-chain":
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.pem", "-days", "30", "-subj", "/C=US/O=Test Trust Services/CN=Test Root R1")
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "leaf.key", "-out", "leaf.csr",
            "-subj", f"/C=US/ST=California/O=Example Inc./CN={DOMAIN}")
        run("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "leaf.pem", "-days", "30", "-extfile", ext)
        return True
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "leaf.key", "-out", "leaf.pem", "-days", "30", "-subj", f"/CN={DOMAIN}",
        "-addext", f"subjectAltName=DNS:{DOMAIN}")
    return False


class Site:
    """openssl s_server -www on a loopback port: the real site these tests front to."""

    def __init__(self, procs, kind):
        d = os.path.join(procs.workdir, "site-" + kind)
        chain = make_chain(d, kind)
        self.port = free_ports(1)[0]
        # one TLS 1.3 suite (what our hello and Python's would each make it choose differs);
        # the EC site's is not the one clients list first
        self.suite = 0x1301 if chain else 0x1302
        argv = ["openssl", "s_server", "-accept", f"127.0.0.1:{self.port}", "-cert", "leaf.pem",
                "-key", "leaf.key", "-www", "-quiet", "-ciphersuites",
                "TLS_AES_128_GCM_SHA256" if chain else "TLS_AES_256_GCM_SHA384"] + (["-cert_chain", "ca.pem"] if chain
                                                           else [])
        self.p = subprocess.Popen(argv, cwd=d, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert wait_until(self._up, T(10)), "s_server did not start"

    def _up(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
            return True
        except OSError:
            return False

    def stop(self):
        self.p.kill()
        self.p.wait()


@pytest.fixture
def sites(procs):
    made = []

    def make(kind):
        s = Site(procs, kind)
        made.append(s)
        return s
    yield make
    for s in made:
        s.stop()


def client_hello(sni):
    """A real TLS 1.3 ClientHello from Python's ssl module (no network involved)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=sni)
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    hello = outgoing.read()
    assert hello[:3] == b"\x16\x03\x01" and hello[5] == 1 and hello[43] == 32, hello[:48]
    return hello


def read_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def read_record(s):
    hdr = read_exact(s, 5)
    return hdr, read_exact(s, struct.unpack(">H", hdr[3:5])[0])


def site_flight(port):
    """What the site sends to a TLS 1.3 hello up to its Finished, measured independently of
    the proxy: (ServerHello extension types, ccs seen, encrypted record lengths)."""
    with socket.create_connection(("127.0.0.1", port), timeout=T(5)) as s:
        s.sendall(client_hello(DOMAIN))
        hdr, sh = read_record(s)
        assert hdr[0] == 0x16 and sh[0] == 2, hdr
        exts = sh_extensions(sh)
        fin = 69 if sh_cipher(sh) == 0x1302 else 53  # sealed Finished: SHA-384 or SHA-256
        ccs, recs = False, []
        while True:
            hdr, body = read_record(s)
            if hdr[0] == 0x14:
                ccs = True
                continue
            assert hdr[0] == 0x17, hdr
            recs.append(len(body))
            if len(body) == fin:
                return exts, ccs, recs


def sh_cipher(sh):
    off = 4 + 2 + 32
    off += 1 + sh[off]
    return struct.unpack(">H", sh[off:off + 2])[0]


def sh_extensions(sh):
    """Extension types of a ServerHello message (4-byte handshake header included)."""
    off = 4 + 2 + 32
    off += 1 + sh[off] + 2 + 1
    end = off + 2 + struct.unpack(">H", sh[off:off + 2])[0]
    off += 2
    types = []
    while off < end:
        t, n = struct.unpack(">HH", sh[off:off + 4])
        types.append(t)
        off += 4 + n
    return types


def stored_profile(path):
    prof = {}
    for line in open(path):
        if line.startswith("#") or " " not in line:
            continue
        k, v = line.rstrip("\n").split(" ", 1)
        prof[k] = v
    prof["recs"] = [tuple(int(x) for x in r.split("/")) for r in prof["records"].split()]
    prof["exts"] = [int(x, 16) for x in prof["extensions"].split()]
    return prof


# --------------------------------------------------------------------------------------------
# A FakeTLS (ee) client in Python: our own ServerHello check, records both ways.

_crypto = ctypes.CDLL(ctypes.util.find_library("crypto"))
_crypto.EVP_CIPHER_CTX_new.restype = ctypes.c_void_p
_crypto.EVP_aes_256_ctr.restype = ctypes.c_void_p


class Ctr:
    """AES-256-CTR through libcrypto (fast enough for megabytes)."""

    def __init__(self, key, iv):
        self.ctx = ctypes.c_void_p(_crypto.EVP_CIPHER_CTX_new())
        assert _crypto.EVP_EncryptInit_ex(self.ctx, ctypes.c_void_p(_crypto.EVP_aes_256_ctr()),
                                          None, key, iv) == 1

    def apply(self, data):
        out = ctypes.create_string_buffer(len(data) + 16)
        n = ctypes.c_int()
        assert _crypto.EVP_EncryptUpdate(self.ctx, out, ctypes.byref(n), data, len(data)) == 1
        return out.raw[:n.value]


def pattern(seed, direction, n):
    """tests/tools/pattern.h: splitmix64 stream."""
    g, m = 0x9e3779b97f4a7c15, (1 << 64) - 1
    state = (((seed << 32) | direction) * g) & m
    out = bytearray()
    while len(out) < n:
        state = (state + g) & m
        z = state
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & m
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & m
        out += struct.pack("<Q", z ^ (z >> 31))
    return bytes(out[:n])


class EeClient:
    """Connects with a signed hello, checks the proxy's answer, then speaks padded
    intermediate obfuscated2 inside TLS records."""

    def __init__(self, port, key_hex, sni=DOMAIN, rcvbuf=None):
        key = bytes.fromhex(key_hex)
        self.s = socket.socket()
        if rcvbuf:
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.s.settimeout(T(10))
        self.s.connect(("127.0.0.1", port))
        hello = bytearray(client_hello(sni))
        hello[11:43] = bytes(32)
        mac = hmac.new(key, bytes(hello), hashlib.sha256).digest()
        ts = struct.pack("<I", int(time.time()))
        rnd = mac[:28] + bytes(a ^ b for a, b in zip(mac[28:], ts))
        hello[11:43] = rnd
        self.s.sendall(bytes(hello))
        h1, sh = read_record(self.s)
        ccs = read_exact(self.s, 6)
        h3, app = read_record(self.s)
        assert h1[:3] == b"\x16\x03\x03" and ccs == b"\x14\x03\x03\x00\x01\x01", (h1, ccs)
        assert h3[:3] == b"\x17\x03\x03", h3
        resp = bytearray(h1 + sh + ccs + h3 + app)
        got = bytes(resp[11:43])
        resp[11:43] = bytes(32)
        assert hmac.new(key, rnd + bytes(resp), hashlib.sha256).digest() == got, "bad HMAC"
        self.exts = sh_extensions(sh)
        self.cipher = sh_cipher(sh)
        self.app_len = len(app)
        # obfuscated2 header, padded intermediate
        while True:
            plain = bytearray(os.urandom(64))
            plain[56:60] = TAGS["dd"]
            plain[60:62] = struct.pack("<h", 2)
            if not _forbidden(plain):
                break
        self.enc = Ctr(hashlib.sha256(bytes(plain[8:40]) + key).digest(), bytes(plain[40:56]))
        rev = bytes(plain[8:56])[::-1]
        self.dec = Ctr(hashlib.sha256(rev[:32] + key).digest(), rev[32:48])
        wire = bytes(plain[:56]) + self.enc.apply(bytes(plain))[56:]
        self.first = True
        self.pending = wire

    def send(self, data):
        payload = self.pending + self.enc.apply(data)
        self.pending = b""
        rec = b"\x17\x03\x03" + struct.pack(">H", len(payload)) + payload
        if self.first:
            rec = b"\x14\x03\x03\x00\x01\x01" + rec
            self.first = False
        self.s.sendall(rec)

    def records(self, until_bytes=None, pause_at=None, pause_s=0):
        """Reads records to EOF (or until until_bytes of payload): [(length, payload)]."""
        out, total, paused = [], 0, False
        while until_bytes is None or total < until_bytes:
            # Not recv(5, MSG_WAITALL): a socket with a timeout is non-blocking underneath, so
            # that returns a header split across segments in part (seen under load).
            try:
                first = self.s.recv(5)
            except ConnectionResetError:
                break
            if not first:
                break
            hdr = first + (read_exact(self.s, 5 - len(first)) if len(first) < 5 else b"")
            assert hdr[:3] == b"\x17\x03\x03", hdr
            n = struct.unpack(">H", hdr[3:])[0]
            assert 0 < n <= 16384, n
            out.append((n, read_exact(self.s, n)))
            total += n
            if pause_at and not paused and total >= pause_at:
                paused = True
                time.sleep(pause_s)
        return out


# --------------------------------------------------------------------------------------------
# The environment: fake DC (+ its echo server) and a proxy with one ee secret.

def proxy_env(procs, extra=(), mask_port=None, mask=True):
    from harness import MEDIA_4_LISTENER
    key = new_secret()
    secret = "ee" + key + DOMAIN.encode().hex()
    listeners = [(i, "normal") for i in DC_IDS] + [(MEDIA_4_LISTENER, "normal"), (900, "echo")]
    dc = procs.fake_dc(listeners)
    dcs = [(i, dc.addr(i)) for i in DC_IDS]
    args = ["--mask", "on" if mask else "off", "--mask-host", "127.0.0.1",
            "--mask-port", str(mask_port or dc.port[900]), "--tls-profile-vary", str(VARY)]
    proxy = procs.proxy([("tls", secret)], dcs, extra=args + list(extra))
    return key, secret, dc, proxy


def log_matching(proxy, regex):
    """Matches of regex in the proxy's log (its stderr) so far."""
    rx = re.compile(regex)
    return [m for m in (rx.search(l) for l in proxy.stderr_tail(1000000).splitlines()) if m]


def wait_log(proxy, regex, timeout):
    found = []
    ok = wait_until(lambda: found.extend(log_matching(proxy, regex)) or found, T(timeout))
    assert ok, proxy.stderr_tail()
    return found[0]


# --------------------------------------------------------------------------------------------
# Profile learning

@pytest.mark.parametrize("kind", ["rsa2048-chain", "ec256-leaf"])
def test_profile_learned_and_followed(procs, sites, kind):
    site = sites(kind)
    exts, ccs, recs = site_flight(site.port)
    assert ccs and len(recs) >= 3, (exts, recs)
    # (s_server serves one connection at a time: the learner's idle probe must end first)
    key, secret, dc, proxy = proxy_env(procs, ["--tls-profile", "on", "--tls-profile-idle-max",
                                               "300ms"], mask_port=site.port)
    wait_log(proxy, r"tls-profile: learned ", 10)
    wait_log(proxy, r"kept an idle connection open for 0\.3 s", 5)
    prof = stored_profile(os.path.join(procs.workdir, "mtproxy.state.tls-profile"))
    # The learned profile is what the site sent: its record count and lengths, its extensions.
    assert prof["host"] == DOMAIN and prof["ccs"] == "1", prof
    assert int(prof["cipher"], 16) == site.suite, prof
    assert prof["exts"] == exts, (prof, exts)
    assert len(prof["recs"]) == len(recs), (prof, recs)
    for (lo, hi), n in zip(prof["recs"], recs):
        assert lo - 2 <= n <= hi + 2 and hi - lo <= 4, (prof["recs"], recs)
    assert prof["recs"][1][0] == recs[1]  # the certificate chain: exactly
    # Our first flight to a valid ee client: the site's extension order, and one encrypted
    # record carrying the site's encrypted bytes within the variation.
    lo = sum(r[0] for r in prof["recs"]) + 5 * (len(recs) - 1) - VARY
    hi = sum(r[1] for r in prof["recs"]) + 5 * (len(recs) - 1) + VARY
    lens = set()
    for _ in range(6):
        c = EeClient(proxy.port, key)
        assert [e for e in c.exts if e in (0x2b, 0x33)] == [e for e in exts if e in (0x2b, 0x33)]
        assert lo <= c.app_len <= hi, (c.app_len, lo, hi)
        assert c.cipher == site.suite  # the site's choice (the client offered all three)
        lens.add(c.app_len)
        c.send(rawclient.test_request(10, 10))
        c.s.close()
    # A probe fronted to the site gets the site's own answer, byte for byte.
    probe = bytes.fromhex("160301000a0100000603030000000000")
    direct = probe_bytes(site.port, probe)
    assert direct and direct[0] == 0x15, direct  # s_server's alert
    assert probe_bytes(proxy.port, probe) == direct
    # The profile in use is what a doctor would print.
    assert log_matching(proxy, r"tls-profile: learned www\.example\.com \(learned 0s ago\)")


def probe_bytes(port, data):
    with socket.create_connection(("127.0.0.1", port), timeout=T(5)) as s:
        s.sendall(data)
        got = b""
        while True:
            try:
                chunk = s.recv(4096)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
        return got


class LoopbackServer:
    """A listening socket on 127.0.0.1 whose connections go to self.handle (own thread)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.handle(c)

    def stop(self):
        self.sock.close()


class ProxyHeaderFront(LoopbackServer):
    """In front of a site that wants a PROXY v1 header: records each connection's header line,
    then relays to the site (loopback only)."""

    def __init__(self, site_port):
        self.site_port = site_port
        self.headers = []
        super().__init__()

    def handle(self, c):
        threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        line = b""
        while not line.endswith(b"\r\n") and len(line) < 120:
            b = c.recv(1)
            if not b:
                c.close()
                return
            line += b
        self.headers.append(line)
        up = socket.create_connection(("127.0.0.1", self.site_port))
        relay_pair(c, up)


def test_profile_learned_through_proxy_protocol(procs, sites):
    # mask-proxy-protocol: the learner's connections start with the header the site expects
    site = sites("ec256-leaf")
    front = ProxyHeaderFront(site.port)
    try:
        _, _, recs = site_flight(site.port)
        key, secret, dc, proxy = proxy_env(procs, ["--tls-profile", "on", "--tls-profile-idle-max",
                                                   "300ms", "--mask-proxy-protocol", "v1"],
                                           mask_port=front.port)
        wait_log(proxy, r"tls-profile: learned ", 10)
        prof = stored_profile(os.path.join(procs.workdir, "mtproxy.state.tls-profile"))
        assert len(prof["recs"]) == len(recs) and prof["recs"][1][0] == recs[1], (prof, recs)
        assert front.headers and all(re.match(rb"PROXY TCP4 127\.0\.0\.1 127\.0\.0\.1 \d+ "
                                              + str(front.port).encode() + rb"\r\n$", h)
                                     for h in front.headers), front.headers
    finally:
        front.stop()


def test_profile_learned_through_socks5(procs, sites):
    # socks5 with socks5-mask: the learner reaches the site through the SOCKS server (#16)
    from test_socks5 import microsocks
    site = sites("ec256-leaf")
    _, _, recs = site_flight(site.port)
    port, server = microsocks(procs)
    key, secret, dc, proxy = proxy_env(procs, ["--tls-profile", "on", "--tls-profile-idle-max",
                                               "300ms", "--socks5", f"socks5://127.0.0.1:{port}",
                                               "--socks5-mask", "on"], mask_port=site.port)
    wait_log(proxy, r"tls-profile: learned ", 10)
    prof = stored_profile(os.path.join(procs.workdir, "mtproxy.state.tls-profile"))
    assert len(prof["recs"]) == len(recs) and prof["recs"][1][0] == recs[1], (prof, recs)
    assert int(prof["cipher"], 16) == site.suite, prof
    # microsocks made the learner's connections (no client has come yet)
    assert wait_until(lambda: server.stderr_tail(200).count(f"connected to 127.0.0.1:{site.port}")
                      >= 2, T(5)), server.stderr_tail(20)
    assert not log_matching(proxy, r"reached directly")
    # the SOCKS server gone: nothing is learned (the site is not dialled directly)
    server.stop(signal.SIGKILL)
    os.unlink(os.path.join(procs.workdir, "mtproxy.state.tls-profile"))
    proxy.stop()
    _, _, _, proxy2 = proxy_env(procs, ["--tls-profile", "on", "--socks5",
                                        f"socks5://127.0.0.1:{port}", "--socks5-mask", "on"],
                                mask_port=site.port)
    wait_log(proxy2, r"tls-profile: cannot learn the first flight of www\.example\.com", 5)
    assert not log_matching(proxy2, r"tls-profile: learned ")


def test_site_unreachable_builtin_logged_once(procs):
    dead = free_ports(1)[0]  # nothing listens there
    key, secret, dc, proxy = proxy_env(procs, ["--tls-profile", "on", "--tls-profile-refresh",
                                               "1s"], mask_port=dead)
    wait_log(proxy, r"tls-profile: cannot learn the first flight of www\.example\.com", 5)
    time.sleep(T(2.5))  # two more failed attempts
    assert len(log_matching(proxy, r"tls-profile: cannot learn")) == 1
    m = log_matching(proxy, r"using the built-in (built-in:[\w-]+)")
    assert m, proxy.stderr_tail()
    # the built-in profile's shape answers ee clients
    c = EeClient(proxy.port, key)
    assert 1000 <= c.app_len <= 4000, c.app_len
    c.s.close()


# --------------------------------------------------------------------------------------------
# Record sizing toward ee clients

SIZING_ARGS = ["--sndbuf", "65536", "--max-buffer", "65536"]


@pytest.mark.parametrize("mode", ["fast-splice", "nofast"])
def test_record_sizing_grows_and_resets(procs, mode):
    key, secret, dc, proxy = proxy_env(procs, SIZING_ARGS + MODES[mode] + ["--splice-tls", "on"])
    down = 3 << 20
    c = EeClient(proxy.port, key, rcvbuf=65536)
    c.send(rawclient.test_request(0, down, seed=7))
    recs = c.records(pause_at=600 << 10, pause_s=1.6)
    c.s.close()
    # Every byte arrives, in order: hello, the pattern, the trailer.
    data = c.dec.apply(b"".join(p for _, p in recs))
    assert data[:8] == b"FDCHELLO" and len(data) == 20 + down + 20, len(data)
    assert data[20:20 + down] == pattern(7, 0x646f, down)
    assert data[-20:-12] == b"FDCDONE\0"
    lens = [n for n, _ in recs]
    # Small (about one segment) until 64 KiB went out ...
    total, first_big = 0, None
    for i, n in enumerate(lens):
        if total < 60 << 10:
            assert n <= SMALL, (i, n, lens[:60])
        elif n > SMALL and first_big is None:
            first_big = i
        total += n
    # ... then full-size records ...
    assert first_big is not None and max(lens) > 8192, lens[:80]
    # ... and small again after the 1.6 s stall: a run of small records in mid-stream.
    runs = [i for i in range(first_big, len(lens) - 12)
            if all(n <= SMALL for n in lens[i:i + 10]) and lens[i - 1] > SMALL]
    assert runs, lens


def test_record_sizing_off_sends_full_records(procs):
    key, secret, dc, proxy = proxy_env(procs, SIZING_ARGS + ["--record-sizing", "off"])
    c = EeClient(proxy.port, key, rcvbuf=65536)
    c.send(rawclient.test_request(0, 1 << 20, seed=3))
    lens = [n for n, _ in c.records()]
    total = 0
    for n in lens:
        total += n
    assert total == 20 + (1 << 20) + 20
    assert max(lens[:20]) > SMALL, lens[:20]  # large records from the start


# --------------------------------------------------------------------------------------------
# unknown-sni, client-mss, rst-on-close

@pytest.mark.parametrize("policy", ["mask", "drop", "reject"])
def test_unknown_sni(procs, policy):
    key, secret, dc, proxy = proxy_env(procs, ["--unknown-sni", policy])
    hello = client_hello("other.example.net")
    mark = dc.mark()
    got = probe_bytes(proxy.port, hello) if policy != "mask" else None
    if policy == "mask":
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=T(5)) as s:
            s.sendall(hello)
            assert read_exact(s, len(hello)) == hello  # the echo server, i.e. fronted
    elif policy == "drop":
        assert got == b""
    else:
        assert got == ALERT_UNRECOGNIZED_NAME, got.hex()
    if policy != "mask":
        wait_log(proxy, r"hello names an unknown server \(other\.example\.net\)", 5)
        assert not dc.matching(r"^ECHO listener=900", mark)
    # a valid client is served as before
    res = procs.client(proxy, secret, "dd", 2, 30000, 30000)
    assert_ok(res)


def test_client_mss_on_the_accepted_socket(procs):
    key, secret, dc, proxy = proxy_env(procs, ["--client-mss", "536"])
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=T(5)) as s:
        # our side: the segment size the proxy announced bounds ours
        assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG) <= 536
        m = wait_log(proxy, r"conn \d+: client mss (\d+)$", 5)
        assert 0 < int(m.group(1)) <= 536, m.group(0)
    res = procs.client(proxy, secret, "dd", 2, 100000, 100000)
    assert_ok(res)


def closed_how(port, data, timeout):
    """Sends data, reads to the end: ('rst' | 'fin', seconds until then)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=T(timeout))
    t0 = time.monotonic()
    try:
        s.sendall(data)
        while True:
            if not s.recv(4096):
                return "fin", time.monotonic() - t0
    except ConnectionResetError:
        return "rst", time.monotonic() - t0
    finally:
        s.close()


@pytest.mark.parametrize("rst", ["off", "probes", "always"])
def test_rst_on_close(procs, rst):
    key, secret, dc, proxy = proxy_env(procs, ["--rst-on-close", rst], mask=False)
    how, _ = closed_how(proxy.port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 10)
    assert how == ("fin" if rst == "off" else "rst"), how
    res = procs.client(proxy, secret, "dd", 2, 30000, 30000)
    assert_ok(res)


# --------------------------------------------------------------------------------------------
# The held close follows the site's idle close

class IdleCloser(LoopbackServer):
    """A server that closes every connection after a fixed idle time (and answers nothing)."""

    def __init__(self, after_s):
        self.after_s = after_s
        super().__init__()

    def handle(self, c):
        threading.Timer(self.after_s, c.close).start()


def test_held_close_follows_site_idle_close(procs):
    site = IdleCloser(1.5)
    try:
        key, secret, dc, proxy = proxy_env(
            procs, ["--tls-profile", "on", "--handshake-timeout", "10s", "--probe-wait", "3s",
                    "--tls-profile-idle-max", "5s"], mask_port=site.port, mask=False)
        wait_log(proxy, r"closes an idle connection after (\d+) ms", 15)
        m = log_matching(proxy, r"closes an idle connection after (\d+) ms")
        assert 1400 <= int(m[-1].group(1)) <= 1800, m[-1].group(0)
        # a bad client, held: closed when the site would close it, not 5..15 s later
        for data in (os.urandom(64), os.urandom(64), b""):  # two bad headers, one silence
            how, dt = closed_how(proxy.port, data, 20)
            assert 1.3 <= dt <= 1.5 * 1.03 + T(0.4), (data[:8], dt)
    finally:
        site.stop()


# --------------------------------------------------------------------------------------------
# Every knob on: Telethon and test_client (the TD-style ee client) are still served

def test_clients_with_every_knob_on(procs, sites):
    site = sites("ec256-leaf")
    knobs = ["--tls-profile", "on", "--record-sizing", "on", "--unknown-sni", "reject",
             "--client-mss", "1200", "--rst-on-close", "probes"]
    env = Std(procs, extra=knobs + ["--mask", "on", "--mask-host", "127.0.0.1",
                                   "--mask-port", str(site.port)])
    nonce, res = tgprobe.req_pq_via_proxy("dd", env.proxy.port, env.dd, 2, timeout=T(10))
    assert isinstance(res, tgprobe.ResPQ) and res.nonce == nonce, res
    # an ee proxy with the same knobs, the TD-style C client and the Python one
    key, secret, dc, proxy = proxy_env(procs, knobs + ["--tls-profile-idle-max", "300ms"],
                                       mask_port=site.port)
    wait_log(proxy, r"tls-profile: learned ", 10)
    for mode in (["--tls-split", "3"], []):
        assert_ok(procs.client(proxy, secret, "dd", 2, 200000, 300000, *mode))
    c = EeClient(proxy.port, key)
    c.send(rawclient.test_request(0, 100000, seed=5))
    data = c.dec.apply(b"".join(p for _, p in c.records()))
    assert data[20:20 + 100000] == pattern(5, 0x646f, 100000)
