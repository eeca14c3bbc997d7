"""test_web_chromium.py: the WEB bridge page in headless Chromium (Debian's package, driven over
the DevTools protocol), loaded from https://proxy.example.com/ through nginx (the README's
snippet, a certificate of a test CA that Chromium is told to trust by its key's hash; the host
name mapped to nginx's loopback port, every other name to nothing) in front of web-listen.

The test is the app. Its end of the page's boundary is a DevTools binding (page to test) and
Runtime.evaluate (test to page), and behind it webclient.Adapter turns test_client's MTProxy
connections into frames, so test_client's plain or dd bytes cross the bridge page to the fake DC
and back (test_client and the fake DC check every byte). The two boundaries of the contract:
  - MessageChannel: a parent page of the test's own at http://127.0.0.1:PORT frames the bridge
    and hands it a MessagePort with {t: 'tproxy-init', v: 1};
  - the injected TelegramWebProxy object (Page.addScriptToEvaluateOnNewDocument before the
    navigation, the #android=NONCE fragment, answered with tproxy-android-init).
Each boundary carries bytes over all four carriers (https, https-lanes, websocket,
websocket-lanes); in the lanes carriers over several streams, whose lanes (X-Lane-ID and the
cursors, or one socket per stream) are checked from the log, once beside a stalled stream.
Every request Chromium makes (the page's target and every frame or worker target, each attached
on its own) is logged: the bridge may only speak to its own origin (https and wss), and the
parent page to its own loopback origin; and no page may log an error (a request the bridge's CSP
stops never reaches the network log, but is an error)."""
import base64
import hashlib
import json
import queue
import re
import secrets
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from harness import Proc, T, assert_ok, free_ports, wait_until
from test_ja4stat import http_get
from test_metrics import Chrome, samples, start_chromium, val
from test_web import HOST
from test_web_tls import Terminated, need
from webclient import HELLO_FRAME, WELCOME, Adapter, capability, frame, http

ORIGIN = "https://" + HOST

# base64 both ways, for the page side of the test's boundary (DevTools carries strings).
B64_JS = r"""
const b64 = buf => {
  const u = new Uint8Array(buf);
  let s = '';
  for (let i = 0; i < u.length; i += 32768)
    s += String.fromCharCode.apply(null, u.subarray(i, i + 32768));
  return btoa(s);
};
const unb64 = s => {
  const t = atob(s), u = new Uint8Array(t.length);
  for (let i = 0; i < t.length; i++) u[i] = t.charCodeAt(i);
  return u.buffer;
};
"""

# The app's loopback parent page: frames the bridge, hands it a port, relays the port's
# messages to the test (appSend) and the test's to the port (appDeliver).
PARENT_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>app</title></head>
<body>
<script>
'use strict';
""" + B64_JS + """
let bridge = null, port = null;
function frameBridge(url) {
  return new Promise(resolve => {
    bridge = document.createElement('iframe');
    bridge.onload = () => resolve(true);
    bridge.src = url;
    document.body.appendChild(bridge);
  });
}
function init(msg) {
  const ch = new MessageChannel();
  port = ch.port1;
  port.onmessage = m => appSend(m.data instanceof ArrayBuffer ? 'b' + b64(m.data)
                                                              : 'j' + JSON.stringify(m.data));
  bridge.contentWindow.postMessage(msg, '""" + ORIGIN + """', [ch.port2]);
}
function appDeliver(kind, s) {
  if (kind === 'b') { const buf = unb64(s); port.postMessage(buf, [buf]); }
  else port.postMessage(JSON.parse(s));
}
</script>
</body></html>
"""

# The injected boundary, as a native WebView's: a fixed object at document start on the bridge's
# origin only; binary frames and JSON strings both ways.
INJECT_JS = """(() => {
if (location.origin !== '""" + ORIGIN + """') return;
""" + B64_JS + """
let handler = null;
const boundary = {
  postMessage(v) { appSend(v instanceof ArrayBuffer ? 'b' + b64(v) : 'j' + String(v)); },
  get onmessage() { return handler; },
  set onmessage(f) { handler = f; },
};
Object.defineProperty(globalThis, 'TelegramWebProxy',
                      {value: boundary, configurable: false, writable: false});
globalThis.appDeliver = (kind, s) => { if (handler) handler({data: kind === 'b' ? unb64(s) : s}); };
})();
"""


def spki_hash(cert):
    """base64(SHA-256(SubjectPublicKeyInfo)) of a PEM certificate: what
    --ignore-certificate-errors-spki-list takes."""
    pub = subprocess.run(["openssl", "x509", "-in", str(cert), "-pubkey", "-noout"],
                         capture_output=True, check=True, timeout=10).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=pub,
                         capture_output=True, check=True, timeout=10).stdout
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def origin_of(url):
    u = urlsplit(url)
    return f"{u.scheme}://{u.hostname}" + (f":{u.port}" if u.port else "")


class Browser(Chrome):
    """test_metrics' Chrome, read by a thread of its own: answers go to their callers, events
    to self.events. Every target the page makes (the bridge frame when it is out of process,
    workers) is attached and logged too. `appSend(string)` in the page's top frame reaches
    self.on_binding."""

    def __init__(self, tmp_path, tls_port, spki):
        rules = (f"MAP {HOST} 127.0.0.1:{tls_port}, EXCLUDE 127.0.0.1, EXCLUDE localhost, "
                 "MAP * ~NOTFOUND")
        self.p, self.ws = start_chromium(tmp_path, f"--host-resolver-rules={rules}",
                                         f"--ignore-certificate-errors-spki-list={spki}")
        self.lock = threading.Lock()
        self.n = 0
        self.waiting = {}
        self.events = []
        self.on_binding = None
        threading.Thread(target=self._read, daemon=True).start()
        try:
            for m in ("Page.enable", "Runtime.enable", "Network.enable", "Log.enable"):
                self.call(m)
            self.call("Runtime.addBinding", name="appSend")
            self.call("Target.setAutoAttach", autoAttach=True, waitForDebuggerOnStart=True,
                      flatten=True)
        except BaseException:
            self.close()
            raise

    def _send(self, method, params, session=None):
        """Sends a command; returns [Event, answer] for the caller to wait on (None for a
        command of a target's session, whose answer nobody waits for)."""
        with self.lock:
            self.n += 1
            msg = {"id": self.n, "method": method, "params": params}
            box = None
            if session:
                msg["sessionId"] = session
            else:
                box = self.waiting[self.n] = [threading.Event(), None]
            self.ws.send(json.dumps(msg))
        return box

    def _read(self):
        import websocket
        while True:
            try:
                msg = json.loads(self.ws.recv())
            except websocket.WebSocketTimeoutException:
                continue
            except Exception:
                break
            if "id" in msg:
                with self.lock:
                    box = self.waiting.pop(msg["id"], None)
                if box:
                    box[1] = msg
                    box[0].set()
                continue
            self.events.append(msg)
            method, params = msg.get("method"), msg.get("params", {})
            if method == "Target.attachedToTarget":
                # a frame or worker target of the page: log it too, then let it run
                sid = params["sessionId"]
                for m in ("Network.enable", "Runtime.enable", "Log.enable"):
                    self._send(m, {}, sid)
                self._send("Target.setAutoAttach", {"autoAttach": True, "flatten": True,
                                                    "waitForDebuggerOnStart": True}, sid)
                self._send("Runtime.runIfWaitingForDebugger", {}, sid)
            elif method == "Runtime.bindingCalled" and params.get("name") == "appSend" \
                    and self.on_binding:
                self.on_binding(params["payload"])
        with self.lock:  # Chromium is gone: nobody waits for an answer any more
            for box in self.waiting.values():
                box[0].set()

    def call(self, method, timeout=30, **params):
        box = self._send(method, params)
        assert box[0].wait(T(timeout)) and box[1], f"{method}: no answer from Chromium"
        assert "error" not in box[1], box[1]
        return box[1].get("result", {})

    def eval(self, expr, timeout=30):
        r = self.call("Runtime.evaluate", timeout, expression=expr, returnByValue=True,
                      awaitPromise=True)
        assert "exceptionDetails" not in r, r["exceptionDetails"]
        return r["result"].get("value")

    def log(self):
        """(method, url, the URL of the document that made it) of every request seen so far,
        WebSocket handshakes as ("WS", url, the URL of the script that opened it)."""
        out = []
        for e in list(self.events):
            p = e.get("params", {})
            if e.get("method") == "Network.requestWillBeSent":
                out.append((p["request"]["method"], p["request"]["url"], p.get("documentURL")))
            elif e.get("method") == "Network.webSocketCreated":
                frames = p.get("initiator", {}).get("stack", {}).get("callFrames", [{}])
                out.append(("WS", p["url"], frames[0].get("url")))
        return out

    def requests(self):
        """(method, url) of every request seen so far, WebSocket handshakes as ("WS", url)."""
        return [r[:2] for r in self.log()]

    def offsite(self, *allowed, start=0, by=None):
        """The requests seen so far (from the start'th on; made by a document of origin `by`
        if given) to an origin not in allowed."""
        return [r[:2] for r in self.log()[start:] if origin_of(r[1]) not in allowed and
                (by is None or origin_of(r[2] or "") == by)]

    def api_log(self):
        """[(path, {lower-case request header: value}, status or None, {lower-case response
        header: value})] of the /api/v1/up and /api/v1/down requests seen so far, in the order sent
        (None and {} while unanswered)."""
        out, seen = [], {}
        for e in list(self.events):
            m, p = e.get("method"), e.get("params", {})
            key = (e.get("sessionId"), p.get("requestId"))
            if m == "Network.requestWillBeSent" and \
                    urlsplit(p["request"]["url"]).path in ("/api/v1/up", "/api/v1/down"):
                seen[key] = len(out)
                out.append([urlsplit(p["request"]["url"]).path,
                            {k.lower(): v for k, v in p["request"]["headers"].items()}, None,
                            {}])
            elif m == "Network.responseReceived" and key in seen:
                r = out[seen[key]]
                r[2] = p["response"]["status"]
                r[3] = {k.lower(): v for k, v in p["response"]["headers"].items()}
        return out

    def ws_protocols(self):
        """The Sec-WebSocket-Protocol of every WebSocket handshake, and how many of the
        sockets have closed."""
        protos, closed = [], 0
        for e in list(self.events):
            m, p = e.get("method"), e.get("params", {})
            if m == "Network.webSocketWillSendHandshakeRequest":
                hdrs = {k.lower(): v for k, v in p["request"]["headers"].items()}
                protos.append(hdrs.get("sec-websocket-protocol"))
            elif m == "Network.webSocketClosed":
                closed += 1
        return protos, closed

    def response_header(self, url, name):
        for e in list(self.events):
            if e.get("method") == "Network.responseReceived" and \
                    e["params"]["response"]["url"] == url:
                hdrs = {k.lower(): v for k, v in e["params"]["response"]["headers"].items()}
                if name in hdrs:
                    return hdrs[name]
        return None

    def errors(self):
        """Exceptions, console errors and error log entries of every target so far."""
        out = []
        for e in list(self.events):
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(json.dumps(p["exceptionDetails"])[:300])
            elif m == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                out.append(json.dumps(p["args"])[:300])
            elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(f"{p['entry'].get('url')}: {p['entry']['text']}")
        return out


class Link:
    """The app's end of the bridge page's boundary, shaped as webclient.Adapter's carrier:
    send(a batch of frames), recv() -> (opcode, one message), close(). The page's binary
    messages come as 'b' + base64, its control messages as 'j' + JSON; the test's go in through
    the top frame's appDeliver."""

    ok = True  # as a WebSocket past its 101

    def __init__(self, browser):
        self.b = browser
        self.q = queue.Queue()
        self.control = []
        browser.on_binding = self._from_page

    def _from_page(self, payload):
        if payload[:1] == "b":
            self.q.put(base64.b64decode(payload[1:]))
            return
        msg = json.loads(payload[1:])
        self.control.append(msg)
        if msg.get("t") == "close":
            self.q.put(None)

    def send(self, body):
        self.b.eval(f"appDeliver('b', '{base64.b64encode(body).decode()}')")

    def send_control(self, msg):
        self.b.eval(f"appDeliver('j', {json.dumps(json.dumps(msg))})")

    def recv(self, timeout=20):
        try:
            item = self.q.get(timeout=T(timeout))
        except queue.Empty:
            raise ConnectionError("the bridge page sent nothing")
        if item is None:
            self.q.put(None)
            return 0x8, b""
        return 0x2, item

    def close(self):
        self.q.put(None)

    def states(self):
        return [m.get("state") for m in self.control if m.get("t") == "status"]

    def wait_init(self, nonce):
        """The injected boundary's first message: tproxy-android-init with the fragment's
        nonce."""
        assert wait_until(lambda: self.control, 10), self.b.errors()
        assert self.control[0] == {"t": "tproxy-android-init", "v": 1, "nonce": nonce}

    def hello(self):
        """The app's HELLO; the WELCOME back, the page's first binary message."""
        self.send(HELLO_FRAME)
        op, body = self.recv()
        assert (op, body) == (0x2, frame(WELCOME, 0)), (op, body, self.control,
                                                         self.b.errors())


class Parent:
    """The app's loopback web server: the parent page at /, nothing else."""

    def __init__(self):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = PARENT_HTML.encode() if self.path == "/" else b"no\n"
                self.send_response(200 if self.path == "/" else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.srv.server_address[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


class Bridge:
    """The proxy (plain and dd users, the fake DC) behind nginx with the test CA, web-carrier
    `carrier`, and Chromium that reaches https://HOST/ there."""

    def __init__(self, procs, tmp_path, carrier="https"):
        need("chromium")
        self.carrier = carrier
        for attempt in range(3):  # the metrics port, free a moment ago, may be taken since
            self.mport = free_ports(1)[0]
            (tmp_path / str(attempt)).mkdir()
            try:
                self.t = Terminated(procs, tmp_path / str(attempt), "nginx", carrier,
                                    extra=["--metrics", f"127.0.0.1:{self.mport}"])
                break
            except RuntimeError as e:
                if "Address already in use" not in str(e) or attempt == 2:
                    raise
        self.w = self.t.w
        self.browser = Browser(tmp_path, self.t.addr[1], spki_hash(tmp_path / str(attempt) /
                                                                   "nginx" / "server.crt"))
        self.link = Link(self.browser)
        self.parent = None

    def url(self, secret):
        return f"{ORIGIN}/?bridge={capability(secret, HOST)}"

    def through_parent(self, secret, origin_host="127.0.0.1"):
        """The parent page (at http://origin_host:PORT/) with the bridge of secret framed."""
        self.parent = Parent()
        self.browser.call("Page.navigate", url=f"http://{origin_host}:{self.parent.port}/")
        assert wait_until(lambda: self.browser.eval(
            "document.readyState === 'complete' && typeof frameBridge === 'function'"), 10)
        assert self.browser.eval(f"frameBridge({json.dumps(self.url(secret))})") is True

    def injected(self, secret, fragment):
        """The bridge of secret as the top document with the injected boundary."""
        self.browser.call("Page.addScriptToEvaluateOnNewDocument", source=INJECT_JS)
        self.browser.call("Page.navigate", url=self.url(secret) + fragment)

    def transfer(self, secret, tag, up, down, *extra, conns=1, during=None, stalled=False):
        """test_client's bytes through the page: up and down on each of conns connections (the
        app's streams), checked byte for byte by test_client and the fake DC (extra:
        test_client's; during(mark): run meanwhile, mark the fake DC's first line of it).
        stalled: first a stream (1) whose app reads 20 kB/s of 8 MiB, which must still be
        crawling when the others are done. Returns the seconds it took."""
        a = Adapter(None, HOST, None, link=self.link)
        slow = None
        if stalled:
            mark = self.w.dc.mark()
            slow = self.w.procs.client_bg(a.addr, secret, tag, 2, 1000, 8 << 20, "--slow-read",
                                          20000, "--timeout", 60, name="slow")
            assert self.w.dc.wait_line(r"^HEADER listener=2 ", T(10), start=mark)
        mark = self.w.dc.mark()
        t0 = time.monotonic()
        p = self.w.procs.client_bg(a.addr, secret, tag, 2, up, down, "--expect-dc", 2,
                                   "--conns", conns, *extra)
        if during:
            during(mark)
        res = self.w.procs.result(p, timeout=60)
        took = time.monotonic() - t0
        assert_ok(res)
        assert res["up_total"] == conns * up and res["down_total"] == conns * down
        done = re.compile(rf"^DONE listener=2 up_ok={up} mismatch=none$")
        assert wait_until(lambda: sum(bool(done.search(x)) for x in self.w.dc.lines[mark:]) ==
                          conns, T(5)), self.w.dc.lines[mark:]
        if slow:
            assert slow.alive(), "the stalled stream finished: it stalled nothing"
            slow.stop()
        assert not a.errors, a.errors
        a.abandon()
        return took

    def metric(self, name, **labels):
        return val(samples(http_get(self.mport, "/metrics")[1].decode()), name, **labels)

    def token(self):
        """The session token the page got (from its response's headers in the network log)."""
        token = self.browser.response_header(ORIGIN + "/api/v1/session", "x-session-token")
        assert token and len(token) == 43, token
        return token

    def close_session(self):
        """The app says close: the page ends its session (DELETE)."""
        assert self.metric("mtproxy_web_sessions") == 1
        self.link.send_control({"t": "close"})
        assert wait_until(lambda: ("DELETE", ORIGIN + "/api/v1/session") in
                          self.browser.requests(), 5), self.browser.requests()
        assert wait_until(lambda: self.metric("mtproxy_web_sessions") == 0, 5)
        assert self.metric("mtproxy_web_sessions_ended_total", how="closed") == 1

    def check_log(self, *allowed):
        """Every request went to the bridge's origin (or allowed), every request of the bridge's
        document to its own origin; the bridge ran the carrier; nothing failed in the pages (a
        request the page's CSP stopped would be an error here: it never reaches the network)."""
        reqs, own = self.browser.requests(), ("POST", ORIGIN + "/api/v1/session", ORIGIN)
        assert not self.browser.offsite(ORIGIN, "wss://" + HOST, *allowed), reqs
        # the bridge's own requests (its frame's, when out of process, are seen) to its origin
        assert own in [(m, u, origin_of(d or "")) for m, u, d in self.browser.log()], reqs
        assert not self.browser.offsite(ORIGIN, "wss://" + HOST, by=ORIGIN), reqs
        ws = ("WS", "wss://" + HOST + "/api/v1/ws") in reqs
        up = ("POST", ORIGIN + "/api/v1/up") in reqs
        down = ("POST", ORIGIN + "/api/v1/down") in reqs
        assert (ws, up, down) == ((True, False, False) if self.carrier.startswith("websocket")
                                  else (False, True, True)), reqs
        assert not self.browser.errors(), self.browser.errors()
        assert self.link.states()[:2] == ["connecting", "connected"], self.link.control
        assert "failed" not in self.link.states(), self.link.control

    def check_lanes(self, streams, ended):
        """The lanes carriers ran one lane per stream (the app's streams 1..streams). https-
        lanes: every /up and /down named its lane (X-Lane-ID), each stream's frames went up on
        its own lane with its own X-Up-Seq from 1 (a repeat, or the next), each lane was polled
        with its own X-Down-Cursor from 0, lane 0 (the session's frames) was polled and took
        nothing up (no PING came), and the lanes of the streams `ended` ended (204, X-Lane-Closed:
        1), each its lane's last poll. websocket-lanes: one socket per stream, tproxy-lane-v1.
        <token>.<stream>, no session socket, and the ended lanes' sockets closed. A page that carried the streams on one lane
        (or one socket) fails here."""
        lanes = set(range(1, streams + 1))
        if self.carrier == "websocket-lanes":
            protos = self.browser.ws_protocols()[0]
            assert sorted(protos) == sorted(f"tproxy-lane-v1.{self.token()}.{i}" for i in lanes), \
                protos
            assert wait_until(lambda: self.browser.ws_protocols()[1] >= len(ended), 5), \
                self.browser.ws_protocols()
            return

        def closed():
            return [int(h["x-lane-id"]) for path, h, st, rh in self.browser.api_log()
                    if path == "/api/v1/down" and st == 204 and rh.get("x-lane-closed") == "1"]
        assert wait_until(lambda: set(ended) <= set(closed()), 5), self.browser.api_log()
        assert len(closed()) == len(set(closed())), closed()
        per = {}
        for path, h, st, rh in self.browser.api_log():
            lane = h.get("x-lane-id", "")
            assert lane.isdigit() and lane == str(int(lane)), h
            per.setdefault((path, int(lane)), []).append(
                (int(h["x-up-seq" if path == "/api/v1/up" else "x-down-cursor"]),
                 rh.get("x-lane-closed")))
        assert {lane for path, lane in per if path == "/api/v1/up"} == lanes, per.keys()
        assert {lane for path, lane in per if path == "/api/v1/down"} == lanes | {0}, per.keys()
        for (path, lane), asked in per.items():
            n = [k for k, _ in asked]
            assert n[0] == (path == "/api/v1/up") and \
                all(b - a in (0, 1) for a, b in zip(n, n[1:])), (path, lane, n)
            if lane in ended and path == "/api/v1/down":
                assert [c for _, c in asked].index("1") == len(asked) - 1, (lane, asked)

    def close(self):
        self.browser.close()
        if self.parent:
            self.parent.close()


@pytest.fixture
def bridge(procs, tmp_path, request):
    b = Bridge(procs, tmp_path, getattr(request, "param", "https"))
    yield b
    b.close()


UP, DOWN = 512 << 10, 1 << 20


def secret_of(bridge, kind):
    """(secret, test_client's tag) of the plain or the dd user."""
    return (bridge.w.dd, "dd") if kind == "dd" else (bridge.w.plain, "ef")


def carry(bridge, how, kind, stalled=False):
    """test_client's bytes both ways through the page's session: one connection, or in the
    lanes carriers three (each its own stream, so its own lane), and the lanes are checked;
    stalled: beside a stalled stream (stream 1; it costs the DevTools link its 4 MiB)."""
    secret, tag = secret_of(bridge, kind)
    lanes = bridge.carrier.endswith("-lanes")
    conns = 3 if lanes else 1
    up, down = UP // conns, DOWN // conns
    took = bridge.transfer(secret, tag, up, down, conns=conns, stalled=stalled)
    print(f"{how}, {bridge.carrier}, {kind}: {conns} x ({up} bytes up, {down} down) in "
          f"{took:.2f} s" + (" beside a stalled stream" if stalled else ""))
    if lanes:
        bridge.check_lanes(conns + stalled, ended=range(1 + stalled, conns + 1 + stalled))


@pytest.mark.parametrize("bridge,kind", [("https", "dd"), ("websocket", "plain"),
                                         ("https-lanes", "plain"), ("websocket-lanes", "dd")],
                         indirect=["bridge"])
def test_message_channel_parent(bridge, kind):
    """A loopback parent page frames the bridge and hands it a port: a session of the carrier
    the server chose carries test_client's bytes both ways; every request of the bridge went to
    its own origin, the parent's to its own; the app's close ends the session."""
    bridge.through_parent(secret_of(bridge, kind)[0])
    bridge.browser.eval("init({t: 'tproxy-init', v: 1})")
    bridge.link.hello()
    carry(bridge, "parent", kind)
    bridge.close_session()
    bridge.check_log(bridge.parent.origin)


@pytest.mark.parametrize("bridge,kind", [("https", "plain"), ("websocket", "dd"),
                                         ("https-lanes", "dd"), ("websocket-lanes", "plain")],
                         indirect=["bridge"])
def test_injected_object(bridge, kind):
    """The app's TelegramWebProxy object, injected before the navigation, with the #android=
    fragment's nonce: the page announces itself with that nonce, the query and the fragment are
    gone from its address, and the session carries test_client's bytes both ways, one frame a
    message down (https-lanes: beside a stalled stream, which stalls none of them); nothing
    goes to another origin; the app's close ends the session."""
    nonce = secrets.token_urlsafe(32)
    bridge.injected(secret_of(bridge, kind)[0], "#android=" + nonce)
    bridge.link.wait_init(nonce)
    assert bridge.browser.eval("location.href") == ORIGIN + "/"
    bridge.link.hello()
    carry(bridge, "injected", kind, stalled=bridge.carrier == "https-lanes")
    bridge.close_session()
    bridge.check_log()


def test_parent_must_be_numeric_loopback(bridge):
    """The port goes only to a parent at http://127.0.0.1:PORT that sends exactly {t:
    'tproxy-init', v: 1} with one port: a parent at http://localhost:PORT (whose framing the
    page's frame-ancestors refuses already), or an init of another shape (the page's own check),
    gets no session (the HELLO sent through it starts nothing); the right init then does. The
    log catches a request to another origin (the parent's fetch of another port)."""
    def no_session():
        time.sleep(1)
        assert not bridge.link.control and bridge.link.q.empty(), bridge.link.control
        assert ("POST", ORIGIN + "/api/v1/session") not in bridge.browser.requests()

    bridge.through_parent(bridge.w.plain, origin_host="localhost")
    bridge.browser.eval("init({t: 'tproxy-init', v: 1})")
    bridge.link.send(HELLO_FRAME)
    no_session()
    bridge.parent.close()
    bridge.through_parent(bridge.w.plain)
    for bad in ("{t: 'tproxy-init', v: 2}", "{t: 'tproxy-init', v: 1, x: 1}",
                "{t: 'tproxy-init', v: '1'}", "[1]"):
        bridge.browser.eval(f"init({bad})")
        bridge.link.send(HELLO_FRAME)
    no_session()
    bridge.browser.eval("init({t: 'tproxy-init', v: 1})")
    bridge.link.hello()
    n = len(bridge.browser.requests())
    bridge.browser.eval("fetch('http://127.0.0.1:1/elsewhere').catch(() => 0)")
    assert wait_until(lambda: bridge.browser.offsite(ORIGIN, bridge.parent.origin, start=n), 5)
    assert bridge.browser.offsite(ORIGIN, bridge.parent.origin, start=n) == \
        [("GET", "http://127.0.0.1:1/elsewhere")]


def test_injected_object_needs_the_fragment(bridge):
    """Without the #android= fragment the injected object is not taken: the page sends it
    nothing and makes no session. A request to another origin is stopped by the page's CSP."""
    bridge.injected(bridge.w.plain, "")
    assert wait_until(lambda: bridge.browser.eval("location.href") == ORIGIN + "/", 10)
    bridge.link.send(HELLO_FRAME)
    time.sleep(1)
    assert not bridge.link.control and bridge.link.q.empty(), bridge.link.control
    assert ("POST", ORIGIN + "/api/v1/session") not in bridge.browser.requests()
    # The page's CSP stops a request of its document to another origin before the network
    # (the network log never sees it), and says so in an error, which check_log refuses too.
    bridge.browser.eval("fetch('http://127.0.0.1:1/elsewhere').catch(() => 0)")
    assert wait_until(lambda: [e for e in bridge.browser.errors() if
                               "http://127.0.0.1:1/elsewhere" in e and "Security Policy" in e], 5)
    assert not bridge.browser.offsite(ORIGIN)


@pytest.mark.parametrize("bridge", ["https", "websocket", "https-lanes"], indirect=True)
def test_session_ended_by_the_server(bridge):
    """The session ends on the server's side (its DELETE from elsewhere): the page tells the
    app failed, then close, and stops: no request after its poll (or socket) but its own
    best-effort DELETE. In https-lanes with no stream open, it is the poll of lane 0 (the
    session's frames) that learns it."""
    nonce = secrets.token_urlsafe(32)
    bridge.injected(bridge.w.dd, "#android=" + nonce)
    bridge.link.wait_init(nonce)
    bridge.link.hello()
    assert wait_until(lambda: ("WS", "wss://" + HOST + "/api/v1/ws") in bridge.browser.requests()
                      or ("POST", ORIGIN + "/api/v1/down") in bridge.browser.requests(), 5)
    st = http(bridge.t.addr, "DELETE", "/api/v1/session", HOST,
              {"Authorization": "Bearer " + bridge.token()}, tls=bridge.t.tls, timeout=5)[0]
    assert st == 204
    assert bridge.link.recv(10) == (0x8, b"")
    assert bridge.link.states()[-1] == "failed" and bridge.link.control[-1] == {"t": "close"}
    time.sleep(1)
    reqs = bridge.browser.requests()
    first = ("WS", "wss://" + HOST + "/api/v1/ws") if bridge.carrier == "websocket" else \
        ("POST", ORIGIN + "/api/v1/down")
    assert reqs[1] == ("POST", ORIGIN + "/api/v1/session"), reqs
    assert reqs[2:] in ([first], [first, ("DELETE", ORIGIN + "/api/v1/session")]), reqs


@pytest.mark.parametrize("bridge", ["websocket-lanes"], indirect=True)
def test_lane_socket_failure_ends_only_its_stream(bridge):
    """websocket-lanes: a stream's socket that fails (the server ends it on the stream's invalid
    frame, a WINDOW of 0, with no close code 1000) ends only that stream: the page sends the
    app a CLOSE for it (nothing else would), drops the stream's later frames, and the session
    lives on: a new stream gets its own socket."""
    nonce = secrets.token_urlsafe(32)
    bridge.injected(bridge.w.plain, "#android=" + nonce)
    bridge.link.wait_init(nonce)
    bridge.link.hello()
    token = bridge.token()
    bridge.link.send(frame(0x01, 1))
    assert wait_until(lambda: bridge.metric("mtproxy_web_streams") == 1, 5)
    bridge.link.send(frame(0x04, 1, b"\0\0\0\0"))
    assert bridge.link.recv(10) == (0x2, frame(0x03, 1)), bridge.link.control
    assert bridge.metric("mtproxy_web_refusals_total", reason="protocol") == 1
    assert bridge.metric("mtproxy_web_streams") == 0
    bridge.link.send(frame(0x04, 1, b"\0\0\0\1"))  # late: dropped by the page
    bridge.link.send(frame(0x01, 2))
    assert wait_until(lambda: bridge.metric("mtproxy_web_streams") == 1, 5)
    assert bridge.browser.ws_protocols()[0] == [f"tproxy-lane-v1.{token}.1",
                                                f"tproxy-lane-v1.{token}.2"]
    assert bridge.metric("mtproxy_web_refusals_total", reason="protocol") == 1
    assert bridge.link.q.empty()
    bridge.close_session()
    bridge.check_log()


def test_partial_frame_from_the_app_fails_the_session(bridge):
    """A buffer from the app that is not whole frames (over the injected object; a string that
    is not JSON is let be): the page tells the app failed, then close, and ends the session."""
    nonce = secrets.token_urlsafe(32)
    bridge.injected(bridge.w.plain, "#android=" + nonce)
    bridge.link.wait_init(nonce)
    bridge.link.hello()
    bridge.browser.eval("appDeliver('j', 'not json')")
    bridge.link.send(frame(0x01, 1) + b"\x02\x00\x00")
    assert bridge.link.recv(10) == (0x8, b"")
    assert bridge.link.states() == ["connecting", "connected", "failed"], bridge.link.control
    assert bridge.link.control[-1] == {"t": "close"}
    assert wait_until(lambda: bridge.metric("mtproxy_web_sessions") == 0, 5)
    assert bridge.metric("mtproxy_web_streams_total") == 0  # the OPEN before it never went up


def test_terminator_outage_then_back(bridge):
    """nginx goes away in the middle of a transfer and comes back a moment later: the page
    reports reconnecting and repeats its requests as they were (the same X-Up-Seq and body, the
    same X-Down-Cursor: the relay answers a repeat as before), the same session carries
    test_client's bytes both ways to the end, and the page reports connected again."""
    nonce = secrets.token_urlsafe(32)
    bridge.injected(bridge.w.dd, "#android=" + nonce)
    bridge.link.wait_init(nonce)
    bridge.link.hello()

    def outage(mark):
        assert bridge.w.dc.wait_line(r"^HEADER listener=2 tag=dd dc=2$", T(10), start=mark)
        time.sleep(0.3)  # bytes under way both ways (test_client reads 1 MiB a second)
        old = bridge.t.p
        old.stop(signal.SIGKILL)
        assert wait_until(lambda: "reconnecting" in bridge.link.states(), 10), \
            bridge.link.control
        bridge.t.p = Proc("nginx-again", old.argv, bridge.w.procs.workdir)
        bridge.w.procs.all.append(bridge.t.p)
        assert wait_until(bridge.t._up, 5), bridge.t.p.stderr_tail()

    took = bridge.transfer(bridge.w.dd, "dd", 256 << 10, 2 << 20, "--slow-read", 1 << 20,
                           during=outage)
    print(f"2 MiB down, 256 KiB up with nginx restarted halfway: {took:.2f} s")
    # the page says connected at the next answer it gets, which may be a held poll's (25 s)
    wait_until(lambda: bridge.link.states()[-1:] == ["connected"], T(30))
    assert bridge.link.states() == ["connecting", "connected", "reconnecting", "connected"]
    assert bridge.metric("mtproxy_web_sessions_total", carrier="https") == 1  # the same session
    asked = [(e["params"]["request"]["url"], e["params"]["request"]["headers"].get("X-Up-Seq"),
              e["params"]["request"]["headers"].get("X-Down-Cursor"))
             for e in list(bridge.browser.events) if e.get("method") == "Network.requestWillBeSent"
             and e["params"]["request"]["url"] in (ORIGIN + "/api/v1/up", ORIGIN + "/api/v1/down")]
    assert len(asked) > len(set(asked)), asked  # some were asked again as they were
