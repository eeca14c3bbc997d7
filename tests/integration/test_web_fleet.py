"""test_web_fleet.py: WEB proxy mode in a fleet: two instances (web-instance 0 and 1, the same
users) behind one real HAProxy terminating TLS with a test CA, run with the README's fleet
snippet. The bridge page goes to either; every request carrying a token (a bootstrap or a
session's bearer, a WebSocket's subprotocol) reaches the instance that gave it out, so sessions
on both carry test_client's bytes to the fake DC and back; a bootstrap spent on one instance is
unknown to the other; a session's requests sent to the other instance get that instance's
ordinary site."""
import re

import pytest

from harness import DC_IDS, MEDIA_4_LISTENER, Proc, T, assert_ok, free_ports, new_secret, \
    wait_until
from test_web import HOST
from test_web_tls import README, make_ca, need, swap
from webclient import HELLO_FRAME, Adapter, Session, capability, http


def fleet_snippet():
    """The README's second ```haproxy block: the fleet's."""
    blocks = re.findall(r"^```haproxy\n(.*?)^```$", open(README).read(), re.M | re.S)
    assert len(blocks) >= 2 and "web_a" in blocks[1], "README.md has no fleet HAProxy snippet"
    return blocks[1]


class Fleet:
    def __init__(self, procs, tmp_path, carrier):
        self.procs = procs
        self.plain, self.dd = new_secret(), "dd" + new_secret()
        self.dc = procs.fake_dc([(i, "normal") for i in DC_IDS] + [(MEDIA_4_LISTENER, "normal")])
        dcs = [(i, self.dc.addr(i)) for i in DC_IDS] + [(-4, self.dc.addr(MEDIA_4_LISTENER))]
        ports = free_ports(3)
        self.webs = [("127.0.0.1", ports[0]), ("127.0.0.1", ports[1])]
        self.proxies = []
        for i, web in enumerate(self.webs):
            p = procs.proxy([("plain", self.plain), ("padded", self.dd)], dcs,
                            name=f"mtproxy{i}",
                            extra=["--web-listen", f"127.0.0.1:{web[1]}", "--web-host", HOST,
                                   "--web-instance", str(i), "--web-carrier", carrier,
                                   "--web-trusted-proxies", "127.0.0.1/32"])
            self.proxies.append(p)
        for p in self.proxies:
            assert wait_until(lambda: " web: WEB proxy " in p.stderr_tail(400), T(5))
        d = tmp_path / "haproxy"
        d.mkdir()
        self.tls = make_ca(d)
        self.addr = ("127.0.0.1", ports[2])
        conf = fleet_snippet()
        conf = swap(conf, "bind :443 ssl crt /etc/haproxy/certs/proxy.example.com.pem",
                    f"bind 127.0.0.1:{ports[2]} ssl crt {d}/server.pem")
        conf = conf.replace("10.0.0.1:18080", f"127.0.0.1:{ports[0]}")
        conf = conf.replace("10.0.0.2:18080", f"127.0.0.1:{ports[1]}")
        (d / "haproxy.cfg").write_text("global\n    maxconn 1024\n    log stderr format raw "
                                       "local0 info\n" + conf)
        self.hap = Proc("haproxy", [need("haproxy"), "-f", str(d / "haproxy.cfg"), "-db"],
                        procs.workdir)
        procs.all.append(self.hap)
        assert wait_until(self._up, T(5)), self.hap.stderr_tail()

    def _up(self):
        try:
            return http(self.addr, "GET", "/", HOST, tls=self.tls, timeout=2)[0] == 200
        except OSError:
            return False


@pytest.mark.parametrize("carrier", ["https", "websocket-lanes"])
def test_sessions_on_both_instances(procs, tmp_path, carrier):
    """Four sessions through HAProxy: the bridge pages alternate between the instances (their
    tokens begin with A and B), each session's requests reach its own instance, and each
    carries test_client's bytes (two streams) to the fake DC and back."""
    f = Fleet(procs, tmp_path, carrier)
    adapters = [Adapter(f.addr, HOST, f.dd, tls=f.tls, carrier=carrier) for _ in range(4)]
    owners = sorted(a.sess.token[0] for a in adapters)
    assert owners == ["A", "A", "B", "B"], owners
    assert all(a.sess.bootstrap[0] == a.sess.token[0] for a in adapters)
    bg = [procs.client_bg(a.addr, f.dd, "dd", 2, 100000, 300000, name=f"c{i}{k}")
          for i, a in enumerate(adapters) for k in range(2)]
    results = [procs.result(p, timeout=60) for p in bg]
    errors = [a.errors for a in adapters]
    for a in adapters:
        a.abandon()
    assert not any(errors), errors  # the adapters' own account first: it says which lane
    for r in results:
        assert_ok(r)


def test_tokens_stay_with_their_instance(procs, tmp_path):
    """A bootstrap minted by one instance is unknown to the other (the site's 404 there, the
    same as a visitor's) and buys one session where it was made (the same request again gets
    the same session); the session's polls sent to the other instance get the site too."""
    f = Fleet(procs, tmp_path, "https")
    st, _, page, _ = http(f.addr, "GET", "/?bridge=" + capability(f.plain, HOST), HOST,
                          tls=f.tls)
    assert st == 200
    boot = re.search(rb'bootstrap="([A-Za-z0-9_-]{43})"', page).group(1).decode()
    mine = "AB".index(boot[0])
    other = f.webs[1 - mine]
    visitor = http(other, "POST", "/api/v1/session", HOST)[3]
    hdrs = {"Authorization": f"Bearer {boot}", "Content-Type": "application/octet-stream"}
    raw = http(other, "POST", "/api/v1/session", HOST, hdrs, HELLO_FRAME)[3]
    assert raw == visitor, raw[:120]
    st, h, _, _ = http(f.addr, "POST", "/api/v1/session", HOST, hdrs, HELLO_FRAME, tls=f.tls)
    assert st == 200 and h["x-session-token"][0] == boot[0], (st, h)
    token = h["x-session-token"]
    st, h2, _, _ = http(f.addr, "POST", "/api/v1/session", HOST, hdrs, HELLO_FRAME, tls=f.tls)
    assert st == 200 and h2["x-session-token"] == token  # the same request: the same session
    down = {"Authorization": f"Bearer {token}", "X-Down-Cursor": "0"}
    raw = http(other, "POST", "/api/v1/down", HOST, down)[3]
    assert raw == http(other, "POST", "/api/v1/down", HOST)[3]
    st, _, _, _ = http(f.webs[mine], "DELETE", "/api/v1/session", HOST,
                       {"Authorization": f"Bearer {token}"})
    assert st == 204
