"""test_web_tls.py: WEB proxy mode behind real TLS terminators, nginx, HAProxy and Caddy, each
with a certificate of a test CA, in the test's network namespace: the https carrier through them
carries test_client's plain and dd MTProxy bytes to the fake DC and back (one stream, and 50
at once in one session); probes get the ordinary site, the same as a plain visitor through the
same terminator. The terminators run the README's own snippets (its WEB proxy mode section), on
test ports and certificates."""
import os
import re
import shutil
import ssl
import subprocess

import pytest

from harness import Proc, T, assert_ok, free_ports, new_secret, wait_until
from test_web import HOST, Web
from webclient import Adapter, capability, http


def need(exe):
    path = shutil.which(exe) or (f"/usr/sbin/{exe}" if os.path.exists(f"/usr/sbin/{exe}") else None)
    assert path, f"{exe} is not installed: the README's test command installs it (.ci/debian-packages)"
    return path


def make_ca(d):
    """A test CA and a certificate for HOST signed by it, in d; the client's context that
    trusts only that CA."""
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=mtproxy test CA")
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={HOST}")
    (d / "ext.cnf").write_text(f"subjectAltName=DNS:{HOST}\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "ext.cnf")
    (d / "server.pem").write_bytes((d / "server.crt").read_bytes() +
                                   (d / "server.key").read_bytes())
    return ssl.create_default_context(cafile=str(d / "ca.crt"))


README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def readme_snippet(lang):
    """The README's ```lang block (its WEB proxy mode section)."""
    text = open(README).read()
    m = re.search(r"^```" + lang + r"\n(.*?)^```$", text, re.M | re.S)
    assert m, f"README.md has no {lang} snippet"
    return m.group(1)


def swap(text, old, new):
    assert old in text, f"{old!r} is not in the README's snippet"
    return text.replace(old, new)


def nginx_conf(d, port, web_port):
    """The README's nginx server block on a test port and certificate, in a whole config."""
    server = readme_snippet("nginx")
    server = swap(server, "listen 443 ssl http2;", f"listen 127.0.0.1:{port} ssl http2;")
    server = swap(server, "/etc/letsencrypt/live/proxy.example.com/fullchain.pem",
                  f"{d}/server.crt")
    server = swap(server, "/etc/letsencrypt/live/proxy.example.com/privkey.pem",
                  f"{d}/server.key")
    server = swap(server, "127.0.0.1:18080", f"127.0.0.1:{web_port}")
    return f"""daemon off;
master_process off;
worker_processes 1;
error_log {d}/nginx-error.log warn;
pid {d}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
access_log off;
{server}}}
"""


def haproxy_conf(d, port, web_port):
    """The README's HAProxy frontend and backend on a test port and certificate, with a
    global section that logs to stderr."""
    fb = readme_snippet("haproxy")
    fb = swap(fb, "bind :443 ssl crt /etc/haproxy/certs/proxy.example.com.pem",
              f"bind 127.0.0.1:{port} ssl crt {d}/server.pem")
    fb = swap(fb, "127.0.0.1:18080", f"127.0.0.1:{web_port}")
    return f"""global
    maxconn 1024
    log stderr format raw local0 info
defaults
    log global
    option httplog
{fb}"""


def caddy_conf(d, port, web_port):
    """The README's Caddy site on a test port, address and certificate (no ACME), with global
    options that keep Caddy's state in d and its admin endpoint off."""
    site = readme_snippet("caddy")
    site = swap(site, "proxy.example.com {", f"https://{HOST}:{port} {{\n    bind 127.0.0.1\n"
                f"    tls {d}/server.crt {d}/server.key")
    site = swap(site, "127.0.0.1:18080", f"127.0.0.1:{web_port}")
    return f"""{{
    admin off
    auto_https disable_redirects
    skip_install_trust
    storage file_system {d}/caddy-data
}}
{site}"""


class Terminated:
    """Web() (the proxy, fake DC, plain and dd users) with web-trusted-proxies 127.0.0.1, and
    the terminator `kind` in front of web-listen on `self.addr`, TLS with a test CA."""

    def __init__(self, procs, tmp_path, kind, carrier="https", extra=()):
        self.w = Web(procs, extra=["--web-trusted-proxies", "127.0.0.1/32",
                                   "--web-carrier", carrier, *extra])
        d = tmp_path / kind
        d.mkdir()
        self.tls = make_ca(d)
        port = free_ports(1)[0]
        self.addr = ("127.0.0.1", port)
        if kind == "nginx":
            (d / "nginx.conf").write_text(nginx_conf(d, port, self.w.web[1]))
            argv = [need("nginx"), "-p", str(d), "-c", str(d / "nginx.conf")]
        elif kind == "caddy":
            (d / "Caddyfile").write_text(caddy_conf(d, port, self.w.web[1]))
            # its state under d, not the home directory
            argv = ["env", f"HOME={d}", f"XDG_DATA_HOME={d}", f"XDG_CONFIG_HOME={d}",
                    need("caddy"), "run", "--config", str(d / "Caddyfile"), "--adapter",
                    "caddyfile"]
        else:
            (d / "haproxy.cfg").write_text(haproxy_conf(d, port, self.w.web[1]))
            argv = [need("haproxy"), "-f", str(d / "haproxy.cfg"), "-db"]
        self.p = Proc(kind, argv, procs.workdir)
        procs.all.append(self.p)
        assert wait_until(lambda: self._up(), T(5)), self.p.stderr_tail()

    def _up(self):
        try:
            return http(self.addr, "GET", "/", HOST, tls=self.tls, timeout=2)[0] == 200
        except OSError:
            return False

    def get(self, method, path, headers=None, body=b""):
        """(status, headers without the terminator's Date, body) through the terminator."""
        st, h, b, _ = http(self.addr, method, path, HOST, headers, body, tls=self.tls)
        h.pop("date", None)
        return st, h, b


@pytest.fixture(params=["nginx", "haproxy", "caddy"])
def term(procs, tmp_path, request):
    return Terminated(procs, tmp_path, request.param)


@pytest.mark.parametrize("kind", ["plain", "dd"])
def test_transfer_through_tls(term, kind):
    secret = term.w.plain if kind == "plain" else term.w.dd
    a = Adapter(term.addr, HOST, secret, tls=term.tls)
    res = term.w.client(a, "dd" if kind == "dd" else "ef", 1 << 20, 2 << 20, secret,
                        "--expect-dc", 2)
    assert_ok(res)
    assert res["up_total"] == 1 << 20 and res["down_total"] == 2 << 20
    assert not a.errors, a.errors
    a.abandon()


def test_fifty_streams_in_one_session(term):
    a = Adapter(term.addr, HOST, term.w.dd, tls=term.tls)
    bg = [term.w.procs.client_bg(a.addr, term.w.dd, "dd", 2, 20000, 50000, name=f"c{i}")
          for i in range(50)]
    for p in bg:
        assert_ok(term.w.procs.result(p, timeout=T(90)))
    assert a.next_id == 51  # fifty streams, one session
    assert not a.errors, a.errors
    a.abandon()


def test_probes_through_tls_get_the_site(term):
    """Through the terminator: a wrong capability, a capability of another host, a bad bearer
    and an unknown path get what a plain visitor gets there."""
    index = term.get("GET", "/")
    assert index[0] == 200
    assert term.get("GET", "/?bridge=" + capability(new_secret(), HOST)) == index
    assert term.get("GET", "/?bridge=" + capability(term.w.plain, "other.example.com")) == index
    page404 = term.get("GET", "/wp-login.php")
    assert page404[0] == 404
    bad = term.get("POST", "/api/v1/up", {"Authorization": "Bearer " + "A" * 43,
                                          "Content-Type": "application/octet-stream",
                                          "X-Up-Seq": "1"}, b"\x01\x00\x00\x01\x00\x00\x00\x00")
    assert bad == term.get("POST", "/api/v1/up")
    st, h, page = term.get("GET", "/?bridge=" + capability(term.w.dd, HOST))
    assert st == 200 and b'bootstrap="' in page and "'nonce-" in h["content-security-policy"]


@pytest.mark.parametrize("tag,kind,dc", [("ef", "plain", 2), ("dd", "dd", 4), ("ee", "plain", -3)])
def test_telethon_through_tls(term, tag, kind, dc):
    """Telethon's own MTProxy classes (the bytes a real client library sends) through the WEB
    adapter and the terminator: its req_pq_multi reaches the fake DC and its ResPQ comes back."""
    import tgprobe
    secret = term.w.plain if kind == "plain" else term.w.dd
    a = Adapter(term.addr, HOST, secret, tls=term.tls)
    mark = term.w.dc.mark()
    port = int(a.addr.rsplit(":", 1)[1])
    nonce, res = tgprobe.req_pq_via_proxy(tag, port, secret, dc, timeout=T(10))
    assert isinstance(res, tgprobe.ResPQ) and res.nonce == nonce, res
    m = term.w.dc.wait_line(r"^REQ_PQ_MULTI listener=(-?\d+) tag=(\w+) dc=(-?\d+) "
                            r"nonce=([0-9a-f]{32})$", T(5), start=mark)
    assert m and m.group(2) == tag and int(m.group(3)) == dc, term.w.dc.lines[mark:]
    assert m.group(4) == tgprobe.nonce_hex(nonce)
    assert not a.errors, a.errors
    a.abandon()


@pytest.mark.parametrize("kind", ["nginx", "haproxy", "caddy"])
@pytest.mark.parametrize("carrier", ["websocket", "https-lanes", "websocket-lanes"])
def test_other_carriers_through_tls(procs, tmp_path, kind, carrier):
    """The other three carriers behind the terminator: the README's snippet passes the upgrades
    (one WebSocket per session, or per stream) and the lanes' polls; ten streams of one session
    carry their bytes both ways."""
    t = Terminated(procs, tmp_path, kind, carrier=carrier)
    a = Adapter(t.addr, HOST, t.w.dd, tls=t.tls, carrier=carrier)
    res = t.w.client(a, "dd", 1 << 20, 2 << 20, t.w.dd, "--expect-dc", 2)
    assert not a.errors, a.errors  # the adapter's own account first
    assert_ok(res)
    bg = [t.w.procs.client_bg(a.addr, t.w.dd, "dd", 2, 100000, 300000, name=f"c{i}")
          for i in range(10)]
    for p in bg:
        assert_ok(t.w.procs.result(p, timeout=T(60)))
    assert not a.errors, a.errors
    a.abandon()


@pytest.mark.parametrize("kind", ["nginx", "haproxy"])
def test_loss_stall_and_gone_through_tls(procs, tmp_path, kind):
    """Behind the terminator (https-lanes, the carrier with the most requests in flight): lost,
    duplicated and reordered answers keep 20 streams byte-exact beside one stalled stream that
    finishes nothing meanwhile; then the client goes away mid-session and its connections live
    through web-grace (2 s here), then are cleaned up."""
    import random
    import time
    from webclient import LossySession
    t = Terminated(procs, tmp_path, kind, carrier="https-lanes",
                   extra=["--web-grace", "2s", "--web-poll", "1s"])
    sess = LossySession(t.addr, HOST, t.w.dd, tls=t.tls, rng=random.Random(11),
                        mode="https-lanes")
    a = Adapter(t.addr, HOST, t.w.dd, tls=t.tls, session=sess, carrier="https-lanes")
    slow = t.w.procs.client_bg(a.addr, t.w.dd, "dd", 2, 1000, 8 << 20, "--slow-read", 20000,
                               "--timeout", 300, name="slow")
    bg = [t.w.procs.client_bg(a.addr, t.w.dd, "dd", 2, 100000, 300000, name=f"c{i}")
          for i in range(20)]
    for p in bg:
        assert_ok(t.w.procs.result(p, timeout=T(60)))
    assert slow.alive(), "the stalled stream finished: it stalled nothing"
    assert not a.errors, a.errors
    assert not sess.mismatches, sess.mismatches
    assert min(sess.lost, sess.duplicated, sess.delayed) >= 3, \
        (sess.lost, sess.duplicated, sess.delayed)
    dmark = t.w.dc.mark()
    a.abandon()
    gone = time.monotonic()
    assert t.w.dc.wait_line(r"^CLOSED listener=2 reason=", T(10), start=dmark)
    assert time.monotonic() - gone >= 1.5  # not before the grace
    slow.stop()
