"""webclient.py: a WEB proxy client for the tests: a local TCP adapter whose connections become
streams of one WEB session spoken over the https carrier (plain HTTP/1.1 to web-listen, or
HTTPS to a TLS terminator in front of it when given an ssl.SSLContext)."""
import base64
import hashlib
import hmac
import os
import re
import select
import socket
import ssl
import struct
import threading
import time

LABEL = b"tdesktop-web-proxy-bridge-v1\n"
OPEN, DATA, CLOSE, WINDOW, HELLO, WELCOME = 0x01, 0x02, 0x03, 0x04, 0x10, 0x11
HELLO_FRAME = bytes.fromhex("100000000000000101")
CHUNK = 60000


def capability(secret_hex, host):
    """The bridge capability of a plain (32 hex) or dd (dd + 32 hex) secret for host."""
    mac = hmac.new(bytes.fromhex(secret_hex), LABEL + host.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def frame(ftype, stream, payload=b""):
    return struct.pack(">II", (ftype << 24) | stream, len(payload)) + payload


def frames(body):
    """The frames of a carrier body: [(type, stream, payload)]."""
    out, off = [], 0
    while off < len(body):
        head, n = struct.unpack_from(">II", body, off)
        out.append((head >> 24, head & 0xffffff, body[off + 8:off + 8 + n]))
        off += 8 + n
    assert off == len(body), "a partial frame"
    return out


def http(addr, method, path, host, headers=None, body=b"", timeout=40, tls=None):
    """One request on its own connection (the server closes after each; over TLS with SNI
    host when tls is an ssl.SSLContext). Returns (status, {lower-case name: value}, body, the
    raw response bytes)."""
    # Connection: close: a terminator in front (nginx, HAProxy) would keep the connection open
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: close"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if body or method in ("POST", "DELETE"):
        lines.append(f"Content-Length: {len(body)}")
    req = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
    with socket.create_connection(addr, timeout=timeout) as raw_sock:
        s = tls.wrap_socket(raw_sock, server_hostname=host) if tls else raw_sock
        s.sendall(req)
        raw = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            raw += d
    if not raw:  # the server (or the terminator) closed without an answer
        raise ConnectionError(f"{method} {path}: closed without a response")
    head, _, rest = raw.partition(b"\r\n\r\n")
    hl = head.decode("latin-1").split("\r\n")
    status = int(hl[0].split()[1])
    hdrs = {}
    for line in hl[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status, hdrs, rest, raw


class Session:
    """One WEB session: the bridge page, the bootstrap, the session token."""

    def __init__(self, addr, host, secret_hex, tls=None, mode="https"):
        self.addr, self.host, self.tls = addr, host, tls
        st, _, page, _ = http(addr, "GET", "/?bridge=" + capability(secret_hex, host), host,
                              tls=tls)
        assert st == 200, st
        m = re.search(rb'bootstrap="([A-Za-z0-9_-]{43})"', page)
        assert m, page[:300]
        self.bootstrap = m.group(1).decode()
        st, h, body, _ = self.post("/api/v1/session", HELLO_FRAME, self.bootstrap)
        assert st == 200 and body == frame(WELCOME, 0), (st, h, body)
        assert h["x-carrier-mode"] == mode and h["x-down-cursor"] == "0", h
        self.token = h["x-session-token"]

    def post(self, path, body, bearer, extra=None, method="POST"):
        hdrs = {"Authorization": f"Bearer {bearer}"}
        if body:
            hdrs["Content-Type"] = "application/octet-stream"
        hdrs.update(extra or {})
        return http(self.addr, method, path, self.host, hdrs, body, tls=self.tls)

    def delete(self):
        return self.post("/api/v1/session", b"", self.token, method="DELETE")


def ws_accept(key):
    """The Sec-WebSocket-Accept value for a Sec-WebSocket-Key (RFC 6455 4.2.2)."""
    guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
    return base64.b64encode(hashlib.sha1((key + guid).encode()).digest()).decode()


# RFC 6455 1.3's own example: a wrong GUID here would agree with the same wrong GUID in the
# server while no browser would take the answer.
assert ws_accept("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def tls_pipe(tls_sock, timeout):
    """The plain end of a socketpair whose bytes one thread of its own moves to and from
    tls_sock (a TLS socket done with its handshake). A WebSocket's reader and writer are two
    threads, and an OpenSSL connection must not be used by two at once: a read and a write at
    the same moment broke records now and then (the terminator then dropped the connection).
    As a socket would: the server's EOF is an EOF on the returned end, which can still write
    (what the server no longer takes is dropped) until it is closed."""
    app, end = socket.socketpair()
    app.settimeout(timeout)
    tls_sock.setblocking(False)
    end.setblocking(False)
    again = (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError)

    def step(fn, arg, tls):
        """fn(arg), or None if it would block or, on the TLS side, failed (then dead)."""
        try:
            return fn(arg)
        except again:
            return None
        except OSError:
            if not tls:
                raise
            dead.append(True)
            return None

    dead = []

    def pump():
        up, down = b"", b""  # app -> server, server -> app
        tls_eof = app_eof = eof_passed = False
        try:
            while not (app_eof and (not up or dead)):
                if tls_eof and not down and not eof_passed:
                    end.shutdown(socket.SHUT_WR)
                    eof_passed = True
                rl = ([tls_sock] if not tls_eof and len(down) < 1 << 20 else []) + \
                    ([end] if not app_eof and len(up) < 1 << 20 else [])
                wl = ([tls_sock] if up else []) + ([end] if down else [])
                if tls_sock in rl and tls_sock.pending():
                    r, w = [tls_sock], []
                else:
                    r, w, _ = select.select(rl, wl, [], 60)
                d = step(tls_sock.recv, 65536, True) if tls_sock in r else None
                if d is not None:
                    down, tls_eof = down + d, not d
                d = step(end.recv, 65536, False) if end in r else None
                if d is not None:
                    up, app_eof = up + d, not d
                up = up[step(tls_sock.send, up, True) or 0:] if tls_sock in w else up
                down = down[step(end.send, down, False) or 0:] if end in w else down
                if dead:  # what the server no longer takes is dropped
                    up, tls_eof = b"", True
        except OSError:  # the app's end failed: nothing more to do
            pass
        for s in (tls_sock, end):
            s.close()

    threading.Thread(target=pump, daemon=True).start()
    return app


class WebSocket:
    """A minimal RFC 6455 client socket for the websocket carriers: GET /api/v1/ws with the
    subprotocol tproxy-v1.<session token> (or, for one stream of websocket-lanes,
    tproxy-lane-v1.<session token>.<stream>); binary messages (masked, as a client must)."""

    def __init__(self, sess, timeout=40, lane=None):
        proto = f"tproxy-v1.{sess.token}" if lane is None else \
            f"tproxy-lane-v1.{sess.token}.{lane}"
        key = base64.b64encode(os.urandom(16)).decode()
        raw_sock = socket.create_connection(sess.addr, timeout=timeout)
        raw_sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = tls_pipe(sess.tls.wrap_socket(raw_sock, server_hostname=sess.host),
                             timeout) if sess.tls else raw_sock
        self.sock.sendall((f"GET /api/v1/ws HTTP/1.1\r\nHost: {sess.host}\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                           f"Sec-WebSocket-Protocol: {proto}\r\n\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            d = self.sock.recv(4096)
            if not d:
                raise ConnectionError("websocket: closed before the 101")
            self.buf += d
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.strip().lower(): v.strip()
                        for k, _, v in (ln.partition(":") for ln in lines[1:])}
        want = ws_accept(key)
        self.ok = self.status == 101 and self.headers.get("sec-websocket-accept") == want
        self.wlock = threading.Lock()

    def send(self, payload, opcode=2):
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        masked = bytes(b ^ mask[i & 3] for i, b in enumerate(payload)) if n < 4096 else \
            (int.from_bytes(payload, "big") ^ int.from_bytes((mask * (n // 4 + 1))[:n], "big"))\
            .to_bytes(n, "big")
        with self.wlock:
            self.sock.sendall(head + mask + masked)

    def _need(self, n):
        while len(self.buf) < n:
            d = self.sock.recv(65536)
            if not d:
                raise ConnectionError("websocket: closed")
            self.buf += d

    def recv(self):
        """(opcode, payload) of the next whole message; pings are answered here."""
        msg, first = b"", None
        while True:
            self._need(2)
            b0, b1 = self.buf[0], self.buf[1]
            n, k = b1 & 0x7f, 2
            if n == 126:
                self._need(4)
                n, k = struct.unpack(">H", self.buf[2:4])[0], 4
            elif n == 127:
                self._need(10)
                n, k = struct.unpack(">Q", self.buf[2:10])[0], 10
            assert not b1 & 0x80, "a server frame must not be masked"
            self._need(k + n)
            payload, self.buf = self.buf[k:k + n], self.buf[k + n:]
            op = b0 & 0x0f
            if op == 0x9:
                self.send(payload, 0xa)
                continue
            if op == 0xa:
                continue
            if op == 0x8:
                return 0x8, payload
            first = op if first is None else first
            msg += payload
            if b0 & 0x80:
                return first, msg

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class LossySession(Session):
    """A Session whose carrier answers get lost, duplicated or reordered on the way, as a flaky
    network or terminator would do it (rng decides, p each): a lost answer is asked for again
    with the very same request (its X-Up-Seq or X-Down-Cursor); a duplicated request is sent
    twice and the second answer used; a delayed answer (up to 80 ms) lets the answers of other
    requests in flight at the same time (the uplink's and the downlink's, other lanes') overtake
    it. A replayed /down batch must be byte for byte the first one (checked here: a mismatch is
    recorded in self.mismatches)."""

    def __init__(self, *args, rng, p=0.15, **kw):
        self.rng, self.p = rng, p
        self.rng_lock = threading.Lock()
        self.lost = self.duplicated = self.delayed = 0
        self.mismatches = []
        super().__init__(*args, **kw)

    def _draw(self):
        with self.rng_lock:
            return self.rng.random(), self.rng.random()

    def post(self, path, body, bearer, extra=None, method="POST"):
        fate, half = self._draw()
        if path not in ("/api/v1/up", "/api/v1/down") or fate >= 3 * self.p:
            return super().post(path, body, bearer, extra, method)
        first = super().post(path, body, bearer, extra, method)
        if fate >= 2 * self.p:
            self.delayed += 1  # the answer comes late: others overtake it
            time.sleep(0.08 * half)
            return first
        if half < 0.5:
            self.lost += 1       # the first answer never arrived: ask again
        else:
            self.duplicated += 1  # the request went twice: the second answer is the one seen
        again = super().post(path, body, bearer, extra, method)
        if path == "/api/v1/down" and first[0] == 200 and again[2] != first[2]:
            self.mismatches.append((extra, len(first[2]), len(again[2])))
        return again


class Stream:
    def __init__(self, sock, sid):
        self.sock, self.id = sock, sid
        self.credit = 4 << 20
        self.closed = False
        self.out = []  # DATA down not yet written to the app (its writer thread's queue)
        self.upq = []  # frames up (lanes carriers: each stream's own queue)
        self.seq = self.cursor = 0
        self.lane_done = False


class Adapter:
    """Listens on 127.0.0.1; each accepted connection is a stream of one session: its bytes go
    up as DATA (within the stream's credit), DATA down is written back (WINDOW returns the
    credit), EOF either way is CLOSE. In the lanes carriers each stream has its own uplink and
    downlink (https-lanes: X-Lane-ID polls; websocket-lanes: a WebSocket per stream). With a
    link (an object shaped like WebSocket here: send a batch, recv a whole batch, close) the
    frames go through it instead, past its WELCOME."""

    def __init__(self, web_addr, host, secret_hex, tls=None, session=None, carrier="https",
                 link=None):
        self.sess = None if link else session or Session(web_addr, host, secret_hex, tls,
                                                         mode=carrier)
        self.lanes = carrier.endswith("-lanes") and not link
        self.carrier = carrier
        self.ws = link or (WebSocket(self.sess) if carrier == "websocket" else None)
        assert self.ws is None or self.ws.ok, (self.ws.status, self.ws.headers)
        self.lock = threading.Condition()
        self.streams, self.upq, self.next_id = {}, [], 1
        self.seq, self.cursor = 0, 0
        self.stopped = False
        self.errors = []
        self.lst = socket.socket()
        self.lst.bind(("127.0.0.1", 0))
        self.lst.listen(64)
        self.addr = f"127.0.0.1:{self.lst.getsockname()[1]}"
        links = () if self.lanes else (self._uplink_ws, self._downlink_ws) if self.ws else \
            (self._uplink, self._downlink)
        for fn in (self._accept, *links):
            threading.Thread(target=fn, daemon=True).start()

    def _q(self, st):
        """The queue a stream's frames go up by (call with the lock held)."""
        return st.upq if self.lanes else self.upq

    def _queue(self, st, f):
        with self.lock:
            self._q(st).append(f)
            self.lock.notify_all()

    def _accept(self):
        """Accepts until abandoned. Only this thread closes the listener: closed from another
        thread while this one is about to call accept(), its descriptor could be reused by a
        later test's listener and this thread would take that one's connections."""
        self.lst.settimeout(0.2)
        while not self.stopped:
            try:
                c, _ = self.lst.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            c.settimeout(None)
            with self.lock:
                st = Stream(c, self.next_id)
                self.next_id += 1
                self.streams[st.id] = st
                self._q(st).append(frame(OPEN, st.id))
                self.lock.notify_all()
            if self.carrier == "https-lanes":
                for fn in (self._lane_up, self._lane_down):
                    threading.Thread(target=fn, args=(st,), daemon=True).start()
            elif self.carrier == "websocket-lanes":
                threading.Thread(target=self._lane_ws, args=(st,), daemon=True).start()
            threading.Thread(target=self._reader, args=(st,), daemon=True).start()
        self.lst.close()

    def _reader(self, st):
        """App bytes up as DATA within the stream's up credit."""
        while not self.stopped:
            with self.lock:
                while st.credit == 0 and not self.stopped and not st.closed:
                    self.lock.wait(1)
                want = min(st.credit, CHUNK)
            if st.closed or self.stopped:
                return
            try:
                d = st.sock.recv(want)
            except OSError:
                d = b""
            with self.lock:
                if st.closed:
                    return
                if not d:
                    st.closed = True
                    self._q(st).append(frame(CLOSE, st.id))
                else:
                    st.credit -= len(d)
                    self._q(st).append(frame(DATA, st.id, d))
                self.lock.notify_all()
            if not d:
                # a CLOSE ends the stream both ways (the protocol has no half-close): the
                # server sends none back, so the app's socket closes here, once what already
                # came down is written
                self._down_frame(CLOSE, st.id, b"")
                return

    def _take(self, q, done=lambda: False):
        """Waits for frames in q (a list) and takes a batch of them: at most 4096 frames and
        about 1 MiB (the server refuses a body over 2 MiB). None once stopped or done()."""
        with self.lock:
            while not q and not self.stopped and not done():
                self.lock.wait(1)
            if self.stopped or not q:
                return None
            n, size = 0, 0
            while n < len(q) and n < 4096 and (n == 0 or size + len(q[n]) <= 1 << 20):
                size += len(q[n])
                n += 1
            batch = q[:n]
            del q[:n]
        return b"".join(batch)

    def _post_up(self, body, seq, lane=None):
        """POST /up until acknowledged (503: again). True, or False (failed: recorded)."""
        extra = {"X-Up-Seq": str(seq)}
        if lane is not None:
            extra["X-Lane-ID"] = str(lane)
        while not self.stopped:
            try:
                st, h, _, _ = self.sess.post("/api/v1/up", body, self.sess.token, extra)
            except OSError as e:
                if not self.stopped:
                    self._fail(f"up {lane}/{seq}: {e}")
                return False
            if st == 204 and h.get("x-up-ack") == str(seq):
                return True
            if st != 503:
                self._fail(f"up {lane}/{seq}: {st}")
                return False
            time.sleep(0.2)
        return False

    def _uplink(self):
        """Serialized POST /up: every frame queued so far in one batch, X-Up-Seq 1, 2, ..."""
        while not self.stopped:
            body = self._take(self.upq)
            if body is None:
                return
            self.seq += 1
            if not self._post_up(body, self.seq):
                return

    def _lane_up(self, st):
        """https-lanes: the stream's own POST /up sequence on X-Lane-ID: its id."""
        while True:
            body = self._take(st.upq, lambda: st.lane_done)
            if body is None:
                return
            st.seq += 1
            if not self._post_up(body, st.seq, st.id):
                return

    def _lane_down(self, st):
        """https-lanes: the stream's own long polls until the lane is closed (X-Lane-Closed)."""
        while not self.stopped:
            try:
                code, h, body, _ = self.sess.post("/api/v1/down", b"", self.sess.token,
                                                  {"X-Down-Cursor": str(st.cursor),
                                                   "X-Lane-ID": str(st.id)})
            except OSError as e:
                if not self.stopped:
                    self._fail(f"down {st.id}: {e}")
                return
            if self.stopped:
                return
            if code == 204:
                assert h["x-down-cursor"] == str(st.cursor)
                if h.get("x-lane-closed") == "1":
                    self._lane_end(st)
                    return
                continue
            if code != 200:
                self._fail(f"down {st.id}: {code}")
                return
            for ftype, sid, payload in frames(body):
                if sid != st.id:
                    self._fail(f"down {st.id}: a frame of stream {sid}")
                    return
                self._down_frame(ftype, sid, payload)
            st.cursor = int(h["x-down-cursor"])

    def _lane_end(self, st):
        """The lane ended: so did its stream (a server's end without a CLOSE: the lane failed),
        so the app's socket closes once what came down is written."""
        with self.lock:
            st.lane_done = True
            self.lock.notify_all()
        self._down_frame(CLOSE, st.id, b"")

    def _lane_ws(self, st):
        """websocket-lanes: the stream's own WebSocket; its uplink in a thread of its own."""
        ws = WebSocket(self.sess, lane=st.id)
        if not ws.ok:
            self._fail(f"ws lane {st.id}: {ws.status}")
            return
        st.ws = ws

        def up():
            while True:
                body = self._take(st.upq, lambda: st.lane_done)
                if body is None:
                    return
                try:
                    ws.send(body)
                except OSError as e:
                    if not self.stopped and not st.lane_done:
                        self._fail(f"ws lane {st.id} up: {e}")
                    return
        threading.Thread(target=up, daemon=True).start()
        while not self.stopped:
            try:
                op, body = ws.recv()
            except OSError as e:
                if not self.stopped:
                    self._fail(f"ws lane {st.id} down: {e}")
                return
            if op == 0x8:  # the lane ended: every frame of it arrived before
                self._lane_end(st)
                ws.close()
                return
            for ftype, sid, payload in frames(body):
                self._down_frame(ftype, sid, payload)

    def _downlink(self):
        """POST /down long polls: DATA written to its stream's socket (then WINDOW up),
        WINDOW adds up credit, CLOSE ends the stream."""
        while not self.stopped:
            try:
                st, h, body, _ = self.sess.post("/api/v1/down", b"", self.sess.token,
                                                {"X-Down-Cursor": str(self.cursor)})
            except OSError as e:
                if not self.stopped:
                    self._fail(f"down: {e}")
                return
            if self.stopped:
                return
            if st == 204:
                assert h["x-down-cursor"] == str(self.cursor)
                continue
            if st != 200:
                self._fail(f"down: {st}")
                return
            for ftype, sid, payload in frames(body):
                self._down_frame(ftype, sid, payload)
            self.cursor = int(h["x-down-cursor"])

    def _uplink_ws(self):
        """Every frame queued so far as one binary message (at most about 1 MiB)."""
        while not self.stopped:
            body = self._take(self.upq)
            if body is None:
                return
            try:
                self.ws.send(body)
            except OSError as e:
                if not self.stopped:
                    self._fail(f"ws up: {e}")
                return

    def _downlink_ws(self):
        """Binary messages: whole-frame batches, in order."""
        while not self.stopped:
            try:
                op, body = self.ws.recv()
            except OSError as e:
                if not self.stopped:
                    self._fail(f"ws down: {e}")
                return
            if op == 0x8:
                if not self.stopped:
                    self._fail("ws down: closed by the server")
                return
            for ftype, sid, payload in frames(body):
                self._down_frame(ftype, sid, payload)

    def _down_frame(self, ftype, sid, payload):
        with self.lock:
            st = self.streams.get(sid)
        if st is None:
            return
        if ftype in (DATA, CLOSE):  # CLOSE after the DATA before it is written
            with self.lock:
                st.out.append(payload if ftype == DATA else None)
                self.lock.notify_all()
                start = not getattr(st, "writer", None)  # the reader's CLOSE may race ours
                if start:
                    st.writer = threading.Thread(target=self._writer, args=(st,), daemon=True)
            if start:
                st.writer.start()
        elif ftype == WINDOW:
            with self.lock:
                st.credit += struct.unpack(">I", payload)[0]
                self.lock.notify_all()

    def _writer(self, st):
        """DATA down to the app, in order; WINDOW goes up as the app takes it. Each stream has
        its own writer: an app that does not read stalls only its own stream."""
        while True:
            with self.lock:
                while not st.out and not self.stopped:  # until the CLOSE (None) or abandon
                    self.lock.wait(1)
                if not st.out:
                    return
                payload = st.out.pop(0)
                if payload is None:
                    st.closed = True
                    self.lock.notify_all()
            if payload is None:
                try:
                    st.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                st.sock.close()
                return
            try:
                st.sock.sendall(payload)
            except OSError:
                return
            self._queue(st, frame(WINDOW, st.id, struct.pack(">I", len(payload))))

    def _fail(self, what):
        self.errors.append(what)
        self.abandon()
        for st in list(self.streams.values()):
            try:
                st.sock.close()
            except OSError:
                pass

    def abandon(self):
        """The WEB client goes away: no more polls, no DELETE (its app sockets stay open)."""
        with self.lock:
            self.stopped = True
            self.lock.notify_all()
        if self.ws:
            self.ws.close()
        for st in list(self.streams.values()):
            if getattr(st, "ws", None):
                st.ws.close()
