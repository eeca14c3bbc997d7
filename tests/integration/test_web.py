"""test_web.py: WEB proxy mode's https carrier end to end: test_client's MTProxy bytes through
our WEB client (webclient.py) over web-listen, to the fake DC and back; what probes get."""
import os
import subprocess
import time

import pytest

from harness import (DC_IDS, MEDIA_4_LISTENER, T, assert_ok, free_ports, mtproxy_argv,
                     new_secret, wait_until)
from webclient import HELLO_FRAME, Adapter, Session, capability, http

HOST = "proxy.example.com"


class Web:
    def __init__(self, procs, extra=(), workers=1):
        self.procs = procs
        self.plain = new_secret()
        self.dd = "dd" + new_secret()
        self.dc = procs.fake_dc([(i, "normal") for i in DC_IDS] + [(MEDIA_4_LISTENER, "normal")])
        dcs = [(i, self.dc.addr(i)) for i in DC_IDS] + [(-4, self.dc.addr(MEDIA_4_LISTENER))]
        port = free_ports(1)[0]
        self.web = ("127.0.0.1", port)
        self.proxy = procs.proxy([("plain", self.plain), ("padded", self.dd)], dcs,
                                 extra=["--web-listen", f"127.0.0.1:{port}", "--web-host", HOST,
                                        *extra], workers=workers)
        assert wait_until(lambda: " web: WEB proxy " in self.proxy.stderr_tail(400), T(5))

    def visitor(self, method, path, headers=None, body=b""):
        return http(self.web, method, path, HOST, headers, body)[3]

    def client(self, adapter, tag, up, down, secret, *extra):
        return self.procs.client(adapter.addr, secret, tag, 2, up, down, *extra)


@pytest.fixture
def web(procs):
    return Web(procs)


@pytest.mark.parametrize("kind", ["plain", "dd"])
def test_transfer_both_ways(web, kind):
    """test_client's bytes through the https carrier to the fake DC and back, byte for byte."""
    secret = web.plain if kind == "plain" else web.dd
    a = Adapter(web.web, HOST, secret)
    t0 = time.monotonic()
    res = web.client(a, "dd" if kind == "dd" else "ef", 1 << 20, 2 << 20, secret,
                     "--expect-dc", 2)
    took = time.monotonic() - t0
    assert_ok(res)
    assert res["up_total"] == 1 << 20 and res["down_total"] == 2 << 20
    assert web.dc.wait_line(r"^DONE listener=2 up_ok=1048576 mismatch=none$", 5)
    assert not a.errors, a.errors
    print(f"web {kind}: 1 MiB up, 2 MiB down in {took:.2f} s")
    a.abandon()


def test_ten_streams_in_one_session(web):
    a = Adapter(web.web, HOST, web.plain)
    bg = [web.procs.client_bg(a.addr, web.plain, "ee", 2, 200000, 300000, name=f"c{i}")
          for i in range(10)]
    for p in bg:
        assert_ok(web.procs.result(p, timeout=60))
    assert a.next_id == 11  # ten streams, one session
    assert not a.errors, a.errors
    a.abandon()


def test_probes_get_the_site(web):
    """A wrong capability, a spent bootstrap, a bad bearer and a random path get the bytes a
    plain visitor gets for that path."""
    index = web.visitor("GET", "/")
    assert index.startswith(b"HTTP/1.1 200 ")
    assert web.visitor("GET", "/?bridge=" + capability(new_secret(), HOST)) == index
    assert web.visitor("GET", "/?bridge=" + capability(web.plain, "other.example.com")) == index
    assert web.visitor("GET", "/?bridge=x&bridge=y") == index
    page404 = web.visitor("GET", "/wp-login.php")
    assert page404.startswith(b"HTTP/1.1 404 ") and web.visitor("GET", "/x/y.html") == page404
    plain_post = web.visitor("POST", "/api/v1/session")
    assert plain_post == page404
    s = Session(web.web, HOST, web.plain)
    # the same creation again while the bootstrap lives: the same session (an idempotency key)
    st, h, _, _ = s.post("/api/v1/session", HELLO_FRAME, s.bootstrap)
    assert st == 200 and h["x-session-token"] == s.token
    assert s.delete()[0] == 204 and s.delete()[0] == 204  # idempotent
    spent = s.post("/api/v1/session", HELLO_FRAME, s.bootstrap)[3]
    assert spent == plain_post
    assert s.post("/api/v1/down", b"", s.token, {"X-Down-Cursor": "0"})[3] == \
        web.visitor("POST", "/api/v1/down")
    bad = s.post("/api/v1/up", b"\x01\x00\x00\x01\x00\x00\x00\x00", "A" * 43,
                 {"X-Up-Seq": "1"})[3]
    assert bad == web.visitor("POST", "/api/v1/up")
    # the right capability with another Host, or with a query on the API: the site
    assert http(web.web, "GET", "/?bridge=" + capability(web.plain, HOST), "other.example.com")[3] \
        == http(web.web, "GET", "/", "other.example.com")[3]


def test_bridge_page_headers(web):
    st, h, page, _ = http(web.web, "GET", "/?bridge=" + capability(web.dd, HOST), HOST)
    assert st == 200 and h["cache-control"] == "no-store"
    assert "'nonce-" in h["content-security-policy"]
    assert b'bootstrap="' in page


def test_deleted_session_closes_its_connections(web):
    """A WEB client gone mid-session: the session lives on (until the 2-minute grace; not
    waited for here), and DELETE ends it and closes its streams' connections."""
    a = Adapter(web.web, HOST, web.plain)
    mark = web.dc.mark()
    p = web.procs.client_bg(a.addr, web.plain, "ef", 2, 1000, 1000, "--hold", 30,
                            "--timeout", 60)
    assert web.dc.wait_line(r"^HEADER listener=2 tag=ef dc=2$", T(10), start=mark)
    a.abandon()
    time.sleep(3)
    st, h, _, _ = a.sess.post("/api/v1/down", b"", a.sess.token,
                              {"X-Down-Cursor": str(a.cursor)})
    assert st in (200, 204), st  # the session is still there
    assert "closed: user plain client 127.0.0.1:0" not in web.proxy.stderr_tail(400)
    dmark = web.dc.mark()
    assert a.sess.delete()[0] == 204
    # the stream's connection ends, and with it its DC connection
    assert wait_until(lambda: "closed: user plain client 127.0.0.1:0" in web.proxy.stderr_tail(400), T(5))
    assert web.dc.wait_line(r"^CLOSED listener=2 reason=go:eof$", T(5), start=dmark)
    p.stop()


def test_web_root_site(procs, tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    (root / "index.html").write_text("<h1>my site</h1>\n")
    (root / "404.html").write_text("<h1>nothing here</h1>\n")
    w = Web(procs, extra=["--web-root", str(root)])
    st, h, body, _ = http(w.web, "GET", "/", HOST)
    assert st == 200 and body == b"<h1>my site</h1>\n"
    st, h, body, raw = http(w.web, "GET", "/?bridge=" + capability(new_secret(), HOST), HOST)
    assert st == 200 and body == b"<h1>my site</h1>\n"
    st, h, body, raw = http(w.web, "GET", "/../etc/passwd", HOST)
    assert st == 404 and body == b"<h1>nothing here</h1>\n"
    assert raw == w.visitor("POST", "/api/v1/up")


def test_links(web, tmp_path):
    path = os.path.join(web.procs.workdir, "mtproxy.state.links")
    assert wait_until(lambda: os.path.exists(path), T(5))
    text = open(path).read()
    for key in (web.plain, web.dd):
        assert f"tg://webproxy?server={HOST}&secret={key}" in text, text
        assert f"https://t.me/webproxy?server={HOST}&secret={key}" in text, text


def test_metrics(procs):
    """/metrics counts WEB sessions and streams (live and made, by carrier), the streams'
    payload both ways, and refusals by reason; a session's end takes it off the gauges."""
    from test_ja4stat import http_get
    from test_metrics import samples, val
    mport = free_ports(1)[0]
    w = Web(procs, extra=["--metrics", f"127.0.0.1:{mport}"])
    assert wait_until(lambda: http_get(mport, "/metrics")[0] == 200, T(10))

    def page():
        return samples(http_get(mport, "/metrics")[1].decode())

    smp = page()
    assert val(smp, "mtproxy_web_sessions") == 0
    assert val(smp, "mtproxy_web_sessions_total", carrier="https") == 0
    a = Adapter(w.web, HOST, w.dd)
    assert_ok(w.client(a, "dd", 1000, 20000, w.dd, "--expect-dc", 2))
    # a spent bootstrap: refused as unknown
    s = a.sess
    assert s.post("/api/v1/session", HELLO_FRAME, "B" * 43)[0] == 404
    smp = page()
    assert val(smp, "mtproxy_web_sessions") == 1
    assert val(smp, "mtproxy_web_sessions_total", carrier="https") == 1
    assert val(smp, "mtproxy_web_sessions_total", carrier="websocket") == 0
    assert val(smp, "mtproxy_web_streams_total") == 1
    assert val(smp, "mtproxy_web_bootstraps_total") == 1
    # the obfuscated2 header (64 bytes) and the client's framed payload up; its payload down
    assert val(smp, "mtproxy_web_bytes_total", direction="up") >= 1000 + 64
    assert val(smp, "mtproxy_web_bytes_total", direction="down") >= 20000
    assert val(smp, "mtproxy_web_refusals_total", reason="bootstrap_unknown") >= 1
    assert val(smp, "mtproxy_web_refusals_total", reason="sessions") == 0
    assert s.delete()[0] == 204
    assert wait_until(lambda: val(page(), "mtproxy_web_sessions") == 0, T(5))
    smp = page()
    assert val(smp, "mtproxy_web_streams") == 0
    assert val(smp, "mtproxy_web_sessions_ended_total", how="closed") == 1
    assert val(smp, "mtproxy_web_sessions_ended_total", how="expired") == 0


def test_client_gone_grace_then_cleanup(procs):
    """A WEB client gone mid-session (no DELETE): its session and its streams' connections live
    on through web-grace after its last request (2 s here, 2 minutes by default), then are
    cleaned up; the token then gets the ordinary site. web-grace must exceed web-poll."""
    w = Web(procs, extra=["--web-grace", "2s", "--web-poll", "1s"])
    a = Adapter(w.web, HOST, w.plain)
    mark = w.dc.mark()
    p = w.procs.client_bg(a.addr, w.plain, "ef", 2, 1000, 1000, "--hold", 30, "--timeout", 60)
    assert w.dc.wait_line(r"^HEADER listener=2 tag=ef dc=2$", T(10), start=mark)
    a.abandon()
    gone = time.monotonic()
    dmark = w.dc.mark()
    assert w.dc.wait_line(r"^CLOSED listener=2 reason=go:eof$", T(8), start=dmark)
    took = time.monotonic() - gone
    assert took >= 1.5, took  # not before the grace (counted from the last poll's end)
    st, _, _, raw = a.sess.post("/api/v1/down", b"", a.sess.token, {"X-Down-Cursor": "0"})
    assert st == 404 and raw == w.visitor("POST", "/api/v1/down")
    p.stop()
    r = subprocess.run(mtproxy_argv(procs.bins, "--check-config", "--listen", "127.0.0.1:1",
                                    "--secret", "a:" + new_secret(), "--web-listen",
                                    "127.0.0.1:1", "--web-host", HOST, "--web-grace", "20s"),
                       capture_output=True, text=True, timeout=T(30))
    assert r.returncode != 0 and "web-grace (20000ms) must be longer than web-poll" in r.stderr, \
        r.stderr


@pytest.mark.parametrize("carrier", ["https", "https-lanes"])
def test_lost_and_duplicated_answers(procs, carrier):
    """Lost, duplicated and reordered /up and /down answers (a quarter of them each): each lost one
    is asked for again with the same X-Up-Seq or X-Down-Cursor (and X-Lane-ID), a delayed one is
    overtaken by the answers of the requests in flight beside it, and the server's replay (an
    /up applied once, a /down batch byte for byte again) keeps both directions byte-exact."""
    import random
    from webclient import LossySession
    web = Web(procs, extra=["--web-carrier", carrier])
    sess = LossySession(web.web, HOST, web.dd, rng=random.Random(7), p=0.25, mode=carrier)
    a = Adapter(web.web, HOST, web.dd, session=sess, carrier=carrier)
    bg = [web.procs.client_bg(a.addr, web.dd, "dd", 2, 300000, 500000, name=f"c{i}")
          for i in range(4)]
    for p in bg:
        assert_ok(web.procs.result(p, timeout=60))
    assert not a.errors, a.errors
    assert not sess.mismatches, sess.mismatches
    assert min(sess.lost, sess.duplicated, sess.delayed) >= 2, \
        (sess.lost, sess.duplicated, sess.delayed)
    a.abandon()


@pytest.mark.parametrize("carrier", ["https", "https-lanes", "websocket-lanes"])
def test_a_stalled_stream_stalls_no_other(procs, carrier):
    """One stream whose app reads 20 kB/s while 8 MiB wait for it, and 20 others in the same
    session: the others finish while it crawls (its down credit, 4 MiB, runs out and the
    server stops reading its DC connection; nothing else waits on it)."""
    web = Web(procs, extra=["--web-carrier", carrier])
    a = Adapter(web.web, HOST, web.dd, carrier=carrier)
    slow = web.procs.client_bg(a.addr, web.dd, "dd", 2, 1000, 8 << 20, "--slow-read", 20000,
                               "--timeout", 300, name="slow")
    time.sleep(0.5)
    t0 = time.monotonic()
    bg = [web.procs.client_bg(a.addr, web.dd, "dd", 2, 100000, 300000, name=f"c{i}")
          for i in range(20)]
    for p in bg:
        assert_ok(web.procs.result(p, timeout=T(30)))
    took = time.monotonic() - t0
    assert slow.alive(), "the slow stream finished: it stalled nothing"
    assert not a.errors, a.errors
    print(f"20 streams beside a stalled one: {took:.2f} s")
    slow.stop()
    a.abandon()


@pytest.mark.parametrize("kind", ["plain", "dd"])
def test_websocket_carrier(procs, kind):
    """web-carrier = websocket: the session says so (X-Carrier-Mode), GET /api/v1/ws with
    tproxy-v1.<token> upgrades (101, the key's accept, the subprotocol echoed), and binary
    messages carry test_client's bytes to the fake DC and back, byte for byte; /up and /down
    are not this session's carrier (the site's answer)."""
    w = Web(procs, extra=["--web-carrier", "websocket"])
    secret = w.plain if kind == "plain" else w.dd
    a = Adapter(w.web, HOST, secret, carrier="websocket")
    assert a.ws.headers["sec-websocket-protocol"] == "tproxy-v1." + a.sess.token
    res = w.client(a, "dd" if kind == "dd" else "ef", 1 << 20, 2 << 20, secret, "--expect-dc", 2)
    assert_ok(res)
    assert res["up_total"] == 1 << 20 and res["down_total"] == 2 << 20
    bg = [w.procs.client_bg(a.addr, secret, "ee" if kind == "plain" else "dd", 2, 100000, 300000,
                            name=f"c{i}") for i in range(10)]
    for p in bg:
        assert_ok(w.procs.result(p, timeout=60))
    assert not a.errors, a.errors
    st, _, _, raw = a.sess.post("/api/v1/down", b"", a.sess.token, {"X-Down-Cursor": "0"})
    assert raw == w.visitor("POST", "/api/v1/down")
    a.abandon()


def test_websocket_refusals(procs):
    """A wrong or missing subprotocol, a bearer, another session's mode, a bad key or version:
    no upgrade, the site's answer; a client frame that is not masked ends the socket."""
    from webclient import WebSocket
    w = Web(procs, extra=["--web-carrier", "websocket"])
    s = Session(w.web, HOST, w.plain, mode="websocket")
    page404 = w.visitor("GET", "/api/v1/ws")
    base = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Protocol": "tproxy-v1." + s.token}
    for change in ({"Sec-WebSocket-Protocol": "tproxy-v1." + "A" * 43},
                   {"Sec-WebSocket-Protocol": "chat"}, {"Sec-WebSocket-Version": "8"},
                   {"Upgrade": "h2c"}, {"Sec-WebSocket-Key": "short"},
                   {"Authorization": "Bearer " + s.token}):
        raw = http(w.web, "GET", "/api/v1/ws", HOST, {**base, **change})[3]
        assert raw == page404, (change, raw[:80])
    ws = WebSocket(s)
    assert ws.ok and ws.status == 101
    assert ws.headers["sec-websocket-accept"]
    ws.sock.sendall(b"\x82\x01\x00")  # unmasked: the socket ends
    ws.sock.settimeout(T(5))
    assert ws.sock.recv(100) == b""
    ws.close()


@pytest.mark.parametrize("carrier", ["https-lanes", "websocket-lanes"])
def test_lanes_carriers(procs, carrier):
    """web-carrier = https-lanes / websocket-lanes: the session says so, each stream goes up and
    down on its own lane (its own X-Up-Seq and X-Down-Cursor on X-Lane-ID, or its own
    WebSocket tproxy-lane-v1.<token>.<stream>), test_client's bytes reach the fake DC and come
    back byte for byte, and a lane whose stream ended says so (X-Lane-Closed: 1, or a close)
    once its last frames were delivered. Requests without a lane get the site's answer."""
    w = Web(procs, extra=["--web-carrier", carrier])
    a = Adapter(w.web, HOST, w.dd, carrier=carrier)
    res = w.client(a, "dd", 1 << 20, 2 << 20, w.dd, "--expect-dc", 2)
    assert_ok(res)
    assert res["up_total"] == 1 << 20 and res["down_total"] == 2 << 20
    assert w.dc.wait_line(r"^DONE listener=2 up_ok=1048576 mismatch=none$", 5)
    bg = [w.procs.client_bg(a.addr, w.dd, "dd", 2, 100000, 300000, name=f"c{i}")
          for i in range(10)]
    for p in bg:
        assert_ok(w.procs.result(p, timeout=60))
    assert a.next_id == 12
    assert wait_until(lambda: all(st.lane_done for st in a.streams.values()), T(5)), \
        [(st.id, st.lane_done) for st in a.streams.values()]
    assert not a.errors, a.errors
    page404 = w.visitor("POST", "/api/v1/down")
    if carrier == "https-lanes":
        # an ended lane answers at once, whatever cursor it had
        st, h, _, _ = a.sess.post("/api/v1/down", b"", a.sess.token,
                                  {"X-Down-Cursor": str(a.streams[1].cursor), "X-Lane-ID": "1"})
        assert st == 204 and h.get("x-lane-closed") == "1", (st, h)
        raw = a.sess.post("/api/v1/down", b"", a.sess.token, {"X-Down-Cursor": "0"})[3]
        assert raw == page404  # no X-Lane-ID: not this carrier's request
    else:
        raw = a.sess.post("/api/v1/down", b"", a.sess.token, {"X-Down-Cursor": "0"})[3]
        assert raw == page404  # no HTTP polls in a websocket carrier
    a.abandon()


def test_https_lanes_protocol_errors(procs):
    """https-lanes: a frame of another stream on a lane, or a new lane that does not begin with
    its OPEN, ends the session (the site's answer from then on); lane 0 takes session frames
    only; an advanced cursor on a lane never opened is a protocol error too."""
    from webclient import DATA, OPEN, frame
    w = Web(procs, extra=["--web-carrier", "https-lanes"])
    page404 = w.visitor("POST", "/api/v1/up")

    def up(s, lane, seq, body):
        return s.post("/api/v1/up", body, s.token, {"X-Up-Seq": str(seq), "X-Lane-ID": str(lane)})

    cases = [(3, frame(OPEN, 3) + frame(DATA, 4, b"x")),  # another stream's frame
             (5, frame(DATA, 5, b"x")),                    # a new lane without its OPEN
             (0, frame(OPEN, 6))]                          # a stream frame on lane 0
    for lane, body in cases:
        s = Session(w.web, HOST, w.plain, mode="https-lanes")
        st, _, _, raw = up(s, lane, 1, body)
        assert raw == page404, (lane, raw[:60])
        raw = up(s, 7, 1, frame(OPEN, 7))[3]
        assert raw == page404, "the session ended"
    s = Session(w.web, HOST, w.plain, mode="https-lanes")
    st, h, _, _ = up(s, 2, 1, frame(OPEN, 2))
    assert st == 204 and h["x-up-ack"] == "1"
    st, h, _, _ = up(s, 3, 1, frame(OPEN, 3))  # each lane numbers from 1
    assert st == 204 and h["x-up-ack"] == "1"
    st, h, _, _ = up(s, 2, 1, frame(OPEN, 2))  # an exact retry
    assert st == 204 and h["x-up-ack"] == "1"
    raw = s.post("/api/v1/down", b"", s.token, {"X-Down-Cursor": "4", "X-Lane-ID": "9"})[3]
    assert raw == w.visitor("POST", "/api/v1/down")
    assert up(s, 2, 2, frame(DATA, 2, b"x"))[3] == page404  # the session is gone


def test_websocket_lanes_refusals(procs):
    """websocket-lanes: a lane subprotocol naming stream 0, a non-canonical or too large id, a
    stream already held or used, or the one-socket subprotocol: no upgrade (the site's
    answer). A lane socket whose first message is not its OPEN ends, and the session lives."""
    from webclient import DATA, OPEN, WebSocket, frame
    w = Web(procs, extra=["--web-carrier", "websocket-lanes"])
    s = Session(w.web, HOST, w.plain, mode="websocket-lanes")
    page404 = w.visitor("GET", "/api/v1/ws")
    base = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    held = WebSocket(s, lane=5)
    assert held.ok
    for proto in ("tproxy-lane-v1.%s.0" % s.token, "tproxy-lane-v1.%s.07" % s.token,
                  "tproxy-lane-v1.%s.16777216" % s.token, "tproxy-lane-v1.%s.5" % s.token,
                  "tproxy-lane-v1.%s." % s.token, "tproxy-v1." + s.token):
        raw = http(w.web, "GET", "/api/v1/ws", HOST, {**base, "Sec-WebSocket-Protocol": proto})[3]
        assert raw == page404, (proto, raw[:80])
    bad = WebSocket(s, lane=6)
    assert bad.ok
    bad.send(frame(DATA, 6, b"x"))  # not its OPEN: the lane's socket ends
    bad.sock.settimeout(T(5))
    try:
        while True:
            op, _ = bad.recv()
            assert op == 0x8, op
            break
    except ConnectionError:
        pass
    held.send(frame(OPEN, 5))  # the session and its other lanes live on
    held.close()
    ok = WebSocket(s, lane=8)
    assert ok.ok, "the session lives on"
    ok.close()


@pytest.mark.parametrize("who", ["server", "client"])
def test_websocket_closes_at_once_after_both_closes(procs, who):
    """Once both close frames went (the server's at a lane's end and the client's answer, or
    the client's and the server's answer), the server closes the TCP connection at once (RFC
    6455 7.1.1: the server closes first), not after its 2 s linger: a browser waits for that
    close before it reports the socket closed (each lane of the bridge page 2 s late)."""
    from webclient import CLOSE, OPEN, WebSocket, frame
    w = Web(procs, extra=["--web-carrier", "websocket-lanes"])
    s = Session(w.web, HOST, w.plain, mode="websocket-lanes")
    ws = WebSocket(s, lane=1)
    assert ws.ok
    ws.sock.settimeout(T(5))
    if who == "server":
        ws.send(frame(OPEN, 1) + frame(CLOSE, 1))  # the stream ends, and its lane
        op = 0x2
        while op != 0x8:
            op, body = ws.recv()
        assert body == b"\x03\xe8"  # 1000
    t0 = time.monotonic()
    ws.send(b"\x03\xe8", 0x8)  # the client's close: the answer, or its own
    if who == "client":
        assert ws.recv() == (0x8, b"\x03\xe8")
    assert ws.sock.recv(100) == b""
    took = time.monotonic() - t0
    assert took < 1, f"the server closed {took:.2f} s after both closes"
    ws.close()
    if who == "server":  # a lane's close leaves the session: another lane opens
        other = WebSocket(s, lane=2)
        assert other.ok
        other.close()


@pytest.mark.parametrize("carrier", ["https", "websocket-lanes"])
def test_two_workers(procs, carrier):
    """workers = 2: each worker serves web-listen (SO_REUSEPORT) with its own sessions; a token's
    second character names the worker that holds it, and requests the kernel hands to the other
    worker reach it anyway (handed over with the bytes read): eight sessions, spread over both
    workers, each carry test_client's bytes to the fake DC and back; /metrics adds the workers
    up."""
    from test_ja4stat import http_get
    from test_metrics import samples, val
    mport = free_ports(1)[0]
    w = Web(procs, extra=["--web-carrier", carrier, "--metrics", f"127.0.0.1:{mport}"],
            workers=2)
    adapters = [Adapter(w.web, HOST, w.dd, carrier=carrier) for _ in range(8)]
    held_by = sorted({a.sess.token[1] for a in adapters})
    assert held_by == ["A", "B"], [a.sess.token[:2] for a in adapters]
    bg = [w.procs.client_bg(a.addr, w.dd, "dd", 2, 100000, 300000, name=f"c{i}{k}")
          for i, a in enumerate(adapters) for k in range(2)]
    for p in bg:
        assert_ok(w.procs.result(p, timeout=60))
    for a in adapters:
        assert not a.errors, a.errors
    smp = samples(http_get(mport, "/metrics")[1].decode())
    assert val(smp, "mtproxy_web_sessions_total", carrier=carrier) == 8
    assert val(smp, "mtproxy_web_streams_total") == 16
    assert val(smp, "mtproxy_web_sessions") == 8
    for a in adapters:
        a.abandon()


class FixedUpstream:
    """An HTTP/1.1 server on loopback for web-upstream: answers by method and path only, always
    the same bytes (no Date), then closes; keeps every request it got. /big is 5 MiB."""

    def __init__(self):
        import socket
        import threading
        self.requests = []
        self.lst = socket.socket()
        self.lst.bind(("127.0.0.1", 0))
        self.lst.listen(16)
        self.port = self.lst.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    @staticmethod
    def answer(method, path):
        if path == "/big":
            body = b"x" * (5 << 20)
        else:
            body = f"<p>upstream says {method} {path}</p>\n".encode()
        code = "200 OK" if path.split("?")[0] in ("/", "/big") else "404 Not Found"
        return (f"HTTP/1.1 {code}\r\nServer: upstream-test\r\nContent-Type: text/html\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body

    def stop(self):
        """No more listener: a shutdown wakes the accept() the server thread blocks in."""
        import socket
        self.lst.shutdown(socket.SHUT_RDWR)
        self.lst.close()

    def _serve(self):
        while True:
            try:
                c, _ = self.lst.accept()
            except OSError:
                return
            c.settimeout(5)
            raw = b""
            try:
                while b"\r\n\r\n" not in raw:
                    d = c.recv(65536)
                    if not d:
                        break
                    raw += d
                head = raw.split(b"\r\n\r\n")[0].decode("latin-1")
                self.requests.append(head)
                method, path = head.split(" ")[:2]
                c.sendall(self.answer(method, path))
            except OSError:
                pass
            c.close()


def test_web_upstream(procs):
    """web-upstream: every request the carrier does not take goes to the upstream as it came
    (Connection: close in place of the client's), and its answer comes back as it is: the
    same bytes for a plain visitor, a wrong capability, a bogus bearer; the bridge page and the
    carrier stay ours. An answer over 4 MiB, or an upstream that is down, is a 502."""
    up = FixedUpstream()
    w = Web(procs, extra=["--web-upstream", f"http://127.0.0.1:{up.port}"])
    raw = w.visitor("GET", "/", {"Connection": "keep-alive"})
    assert raw == up.answer("GET", "/")
    assert "Connection: close" in up.requests[-1] and "keep-alive" not in up.requests[-1]
    wrong = "/?bridge=" + capability(new_secret(), HOST)
    assert w.visitor("GET", wrong) == up.answer("GET", wrong)
    assert up.requests[-1].startswith(f"GET {wrong} HTTP/1.1")
    probe = w.visitor("POST", "/api/v1/down", {"Authorization": "Bearer " + "A" * 43,
                                                "X-Down-Cursor": "0"})
    assert probe == w.visitor("POST", "/api/v1/down") == up.answer("POST", "/api/v1/down")
    assert "Authorization: Bearer " + "A" * 43 in up.requests[-2]
    n = len(up.requests)
    a = Adapter(w.web, HOST, w.dd)  # the bridge page and the carrier are not the upstream's
    assert_ok(w.client(a, "dd", 1000, 20000, w.dd, "--expect-dc", 2))
    assert len(up.requests) == n
    a.abandon()
    assert b" 502 " in w.visitor("GET", "/big").split(b"\r\n")[0]
    up.stop()
    assert b" 502 " in w.visitor("GET", "/").split(b"\r\n")[0]
