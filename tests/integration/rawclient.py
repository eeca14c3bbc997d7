"""rawclient.py: a bare obfuscated2 client in Python for fault tests (stalled, never reading)."""
import hashlib
import os
import socket
import struct

import pyaes  # pure-Python AES, a Telethon dependency: fine for headers and small requests

TAGS = {"ef": b"\xef" * 4, "ee": b"\xee" * 4, "dd": b"\xdd" * 4}

# The test protocol of tests/tools/pattern.h.
TP_MAGIC = b"MTPXTEST"
TP_FLAG_GO = 2


def _forbidden(h):
    first = h[:4]
    return (h[0] == 0xef or first in (b"HEAD", b"POST", b"GET ", b"OPTI", b"\xdd" * 4,
                                      b"\xee" * 4, b"\x16\x03\x01\x02")
            or h[4:8] == b"\0\0\0\0")


class Obfs2:
    """One client side of obfuscated2 toward a proxy secret: header() then encrypt(bytes)."""

    def __init__(self, secret_hex, tag="ee", dc=2):
        key = bytes.fromhex(secret_hex[2:] if len(secret_hex) == 34 else secret_hex)
        while True:
            plain = bytearray(os.urandom(64))
            plain[56:60] = TAGS[tag]
            plain[60:62] = struct.pack("<h", dc)
            if not _forbidden(plain):
                break
        k = hashlib.sha256(bytes(plain[8:40]) + key).digest()
        iv = int.from_bytes(plain[40:56], "big")
        self._enc = pyaes.AESModeOfOperationCTR(k, counter=pyaes.Counter(iv))
        enc = self._enc.encrypt(bytes(plain))
        self.wire_header = bytes(plain[:56]) + enc[56:]

    def encrypt(self, data):
        return self._enc.encrypt(data)


def test_request(up, down, seed=1, flags=0):
    """The 36-byte test request (pattern.h): fake_dc answers with a hello, then streams."""
    return TP_MAGIC + struct.pack("<IQQII", 1, up, down, seed, flags)


def connect(addr, rcvbuf=None, sndbuf=None, timeout=5.0, bind=None):
    """A TCP connection to "127.0.0.1:PORT" (loopback only), optionally with small buffers
    and from a given loopback source address (bind: e.g. "127.0.0.2")."""
    host, port = addr.rsplit(":", 1)
    assert host in ("127.0.0.1", "[::1]"), addr
    s = socket.socket(socket.AF_INET6 if host.startswith("[") else socket.AF_INET)
    if bind:
        s.bind((bind, 0))
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if sndbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    s.settimeout(timeout)
    s.connect((host.strip("[]"), int(port)))
    return s


def start_session(addr, secret_hex, tag="ee", dc=2, up=0, down=0, rcvbuf=None, sndbuf=None,
                  bind=None):
    """Connects, sends a valid header and a test request; returns (socket, Obfs2)."""
    s = connect(addr, rcvbuf=rcvbuf, sndbuf=sndbuf, bind=bind)
    o = Obfs2(secret_hex, tag, dc)
    s.sendall(o.wire_header + o.encrypt(test_request(up, down)))
    return s, o


def push(s, total, chunk=65536, deadline_s=3.0):
    """Sends up to total bytes of garbage without blocking past deadline_s; returns bytes sent."""
    import time
    s.setblocking(False)
    sent, buf, end = 0, os.urandom(chunk), time.monotonic() + deadline_s
    while sent < total and time.monotonic() < end:
        try:
            sent += s.send(buf[:min(chunk, total - sent)])
        except BlockingIOError:
            time.sleep(0.01)
        except OSError:
            break
    return sent


def recv_upto(s, n=64):
    """Reads until n bytes, EOF, a reset or the socket's timeout; returns what came."""
    got = b""
    try:
        while len(got) < n:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return got
