"""test_web_clients.py: real client libraries' MTProxy bytes over each WEB carrier: Telethon's
and TDLib's (the tdjson wheel) MTProxy connections go to webclient.py's Adapter, which carries
each as a WEB stream over the proxy's carrier (straight to web-listen, and through real nginx
and HAProxy terminating TLS), and their req_pq_multi reaches the fake DC. TDLib runs only in the
test's loopback-only namespace (tests/netns.sh)."""
import os
import time

import pytest

import tdprobe
import tgprobe
from harness import T
from test_telethon import REQ
from test_web import HOST, Web
from test_web_tls import Terminated
from webclient import Adapter

CARRIERS = ["https", "https-lanes", "websocket", "websocket-lanes"]
FRONTS = ["direct", "nginx", "haproxy"]


class Client:
    """The proxy with web-carrier `carrier` (fake DC, plain and dd users), reached directly or
    through the terminator `front`, and an Adapter speaking that carrier for the dd user."""

    def __init__(self, procs, tmp_path, front, carrier):
        self.front = front
        if front == "direct":
            self.w = Web(procs, extra=["--web-carrier", carrier])
            addr, tls = self.w.web, None
        else:
            t = Terminated(procs, tmp_path, front, carrier=carrier)
            self.w, addr, tls = t.w, t.addr, t.tls
        self.dc = self.w.dc
        self.a = Adapter(addr, HOST, self.w.dd, tls=tls, carrier=carrier)
        self.port = int(self.a.addr.rsplit(":", 1)[1])


@pytest.fixture(params=[(f, c) for f in FRONTS for c in CARRIERS],
                ids=lambda p: f"{p[0]}-{p[1]}")
def client(procs, tmp_path, request):
    c = Client(procs, tmp_path, *request.param)
    yield c
    c.a.abandon()


def test_telethon(client):
    """Telethon's padded MTProxy connection (dd) for DC 4: its req_pq_multi reaches the fake
    DC's listener 4 and its ResPQ comes back."""
    w, a = client.w, client.a
    mark = w.dc.mark()
    nonce, res = tgprobe.req_pq_via_proxy("dd", client.port, w.dd, 4, timeout=T(10))
    assert isinstance(res, tgprobe.ResPQ) and res.nonce == nonce, res
    m = w.dc.wait_line(REQ, T(5), start=mark)
    assert m, w.dc.lines[mark:]
    assert (m.group(1), m.group(2), m.group(3)) == ("4", "dd", "4")
    assert m.group(4) == tgprobe.nonce_hex(nonce)
    assert not a.errors, a.errors


def test_tdlib(client, tmp_path):
    """TDLib whose only proxy is the adapter: its first connection to its main DC (DC 1 in
    1.8.69) sends req_pq_multi padded (dd); then testProxy to DC 2, whose ResPQ must come
    back to TDLib (it rejects the fake DC's RSA fingerprint: the answer was read)."""
    if os.environ.get("MTPROXY_IN_NETNS") != "1":
        pytest.skip("TDLib runs only in tests/netns.sh's namespace (it dials Telegram's own "
                    "addresses too)")
    w, a = client.w, client.a
    mark = w.dc.mark()
    t0 = time.monotonic()
    c = tdprobe.Client(tmp_path / "td", client.port, w.dd)
    try:
        # both: the fake DC's line can come before this process took TDLib's addProxy answer
        assert c.wait(lambda: w.dc.matching(REQ, mark) and c.answer("addProxy"), T(30)), \
            (c.events, w.dc.lines[mark:])
        took = time.monotonic() - t0
        assert c.answer("addProxy")["@type"] == "addedProxy", c.answer("addProxy")
        assert not c.errors, c.errors
        main = w.dc.matching(REQ, mark)
        for m in main:
            assert m.group(2) == "dd" and m.group(1) == m.group(3), m.group(0)
        mark = w.dc.mark()
        ans = c.test_proxy(2, T(10))
        assert ans and ans["@type"] == "error" and "fingerprint" in ans["message"], ans
        m = w.dc.wait_line(REQ, T(5), start=mark)
        assert m and (m.group(1), m.group(2), m.group(3)) == ("2", "dd", "2"), \
            w.dc.lines[mark:]
        seen = ", ".join(f"dc={x.group(3)} tag={x.group(2)}" for x in main)
        print(f"TDLib via {client.front} over {a.carrier}: main DC req_pq_multi {took:.2f} s "
              f"after start ({seen}); testProxy: {ans['message']}")
    finally:
        t1 = time.monotonic()
        closed = c.close(T(10))
        print(f"TDLib closed={closed} in {time.monotonic() - t1:.2f} s")
    assert closed
    assert a.next_id >= 3  # TDLib's own connections and testProxy's were the adapter's streams
    assert not a.errors, a.errors
