"""test_api.py: the management API (api = ADDR:PORT) against the real binary: every call, its
validation errors with the field named, the token, users-file written before the answer
(kill -9 right after it), concurrent creates, created/deleted/rotated users served or refused
by a client at once, a hand edit of users-file plus SIGHUP."""
import http.client
import json
import os
import pathlib
import re
import signal
import threading
import time

from harness import DC_IDS, T, free_ports, new_secret, wait_until
from test_users import reloaded, run_mtproxy, session

TOKEN = "test-token-0123456789abcdef"
DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"


def call(port, method, path, body=None, token=TOKEN, raw=None, timeout=None):
    """(status, parsed JSON answer) of one API request."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout or T(60))
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    c.request(method, path, body=data, headers=headers)
    r = c.getresponse()
    text = r.read()
    c.close()
    try:
        return r.status, json.loads(text) if text else None
    except ValueError:
        return r.status, text


def write_conf(conf, dc, users_file, api_port, extra=""):
    lines = [f"secret = admin:{new_secret()}"]
    lines += [f"dc = {i} {dc.addr(i)}" for i in DC_IDS]
    if users_file:
        lines.append(f"users-file = {users_file}")
    lines += [f"api = 127.0.0.1:{api_port}", f"api-token = {TOKEN}"]
    conf.write_text("\n".join(lines) + "\n" + extra)


class Api:
    """A proxy with the API on and users-file (unless without_file) beside its config."""

    def __init__(self, procs, tmp_path, without_file=False, extra="", name="mtproxy"):
        self.procs, self.name = procs, name
        self.dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
        self.port = free_ports(1)[0]
        self.conf = tmp_path / "mtproxy.conf"
        self.ufile = None if without_file else tmp_path / "users.conf"
        write_conf(self.conf, self.dc, self.ufile, self.port, extra)
        self.start()

    def start(self):
        self.proxy = self.procs.proxy([], [], extra=["--config", str(self.conf)], name=self.name)
        assert wait_until(lambda: "management API on" in self.proxy.stderr_tail(400), 5)

    def __call__(self, method, path, body=None, **kw):
        return call(self.port, method, "/api/v1" + path, body, **kw)

    def file_text(self):
        return self.ufile.read_text() if self.ufile.exists() else ""


def served(proxy, secret):
    return len(session(proxy.addr, secret, tag="ef")[0]) >= 64


def refused(proxy, secret):
    return session(proxy.addr, secret, tag="ef")[0] == b""


def test_every_call(procs, tmp_path):
    api = Api(procs, tmp_path)
    st, h = api("GET", "/health")
    assert st == 200 and h["status"] == "ok" and h["users"] == 1, h
    assert h["users_file"] == str(api.ufile), h

    st, u = api("POST", "/users", {"name": "alice", "limits": {"conns": 5, "quota": "1G",
                                                               "expires": "2099-01-01"}})
    assert st == 201, u
    assert u["name"] == "alice" and u["kind"] == "plain" and u["source"] == "users-file", u
    assert u["limits"]["conns"] == 5 and u["limits"]["quota"] == 1 << 30, u
    assert u["limits"]["expires"] == 4070908800, u
    assert u["links"]["tg"].startswith("tg://proxy?") and u["secret"] in u["links"]["https"]
    assert ("qr_svg" in u) == h["qr"], u.keys()
    assert f"secret = alice:{u['secret']}" in api.file_text()
    assert "limit = alice conns=5 quota=1G expires=2099-01-01" in api.file_text()
    assert oct(os.stat(api.ufile).st_mode & 0o777) == "0o600"
    assert served(api.proxy, u["secret"])  # at once: the answer came after the reload

    st, d = api("POST", "/users", {"name": "dd1", "kind": "dd"})
    assert st == 201 and d["kind"] == "dd" and d["secret"].startswith("dd"), d
    st, e = api("POST", "/users", {"name": "tls1", "kind": "ee", "domain": "example.com",
                                   "secret": "00112233445566778899aabbccddeeff"})
    assert st == 201 and e["kind"] == "ee" and e["domain"] == "example.com", e
    assert e["secret"] == "ee00112233445566778899aabbccddeeff" + b"example.com".hex(), e

    st, one = api("GET", "/users/alice")
    assert st == 200 and one["name"] == "alice" and one["usage"]["connections"] >= 1, one
    st, lst = api("GET", "/users")
    names = {x["name"]: x["source"] for x in lst["users"]}
    assert names == {"admin": "config", "alice": "users-file", "dd1": "users-file",
                     "tls1": "users-file"}, names

    st, p = api("PATCH", "/users/alice", {"limits": {"conns": 1, "quota": None, "rate": 1048576}})
    assert st == 200, p
    assert p["limit_line"] == "alice conns=1 expires=2099-01-01 rate=1048576/s", p
    assert p["limits"]["quota"] is None and p["limits"]["rate"] == 1048576, p
    assert "limit = alice conns=1 expires=2099-01-01 rate=1048576/s" in api.file_text()

    st, r = api("POST", "/reload")
    assert st == 200 and r["generation"] >= 6, r

    st, gone = api("DELETE", "/users/alice")
    assert st == 200 and gone["deleted"] == "alice", gone
    assert "alice" not in api.file_text()
    assert refused(api.proxy, u["secret"])  # new connections refused at once
    assert api("GET", "/users/alice")[0] == 404
    assert api("DELETE", "/users/alice")[0] == 404
    # the config's own users are not the API's to change
    st, err = api("DELETE", "/users/admin")
    assert st == 409 and "config file" in err["error"], err
    assert api("PATCH", "/users/admin", {"limits": {"conns": 1}})[0] == 409


def test_token_required(procs, tmp_path):
    api = Api(procs, tmp_path)
    for tok in (None, "wrong-token-0123456789", TOKEN + "x", ""):
        st, body = api("GET", "/health", token=tok)
        assert st == 401 and "token" in body["error"], (tok, st, body)
        st, body = api("POST", "/users", {"name": "eve"}, token=tok)
        assert st == 401, (tok, st, body)
    # the token in the URL (as metrics allows) is not taken: it would end up in logs
    st, _ = call(api.port, "GET", f"/api/v1/health?token={TOKEN}", token=None)
    assert st == 401
    assert "eve" not in api.file_text()


def test_validation_errors_name_the_field(procs, tmp_path):
    api = Api(procs, tmp_path)
    assert api("POST", "/users", {"name": "bob", "limits": {"ips": 2}})[0] == 201
    before = api.file_text()
    cases = [
        ({"name": "bad name"}, 400, "name"),
        ({"name": "x" * 80}, 400, "name"),
        ({"name": "a\nsecret = evil:00112233445566778899aabbccddeeff"}, 400, "name"),
        ({}, 400, "name"),
        ({"name": 5}, 400, "name"),
        ({"name": "carl", "kind": "xx"}, 400, "kind"),
        ({"name": "carl", "kind": "ee"}, 400, "domain"),
        ({"name": "carl", "domain": "example.com"}, 400, "domain"),
        ({"name": "carl", "secret": "0011"}, 400, "secret"),
        ({"name": "carl", "limits": {"conns": -1}}, 400, "limits.conns"),
        ({"name": "carl", "limits": {"conns": "3 ips=9"}}, 400, "limits.conns"),
        ({"name": "carl", "limits": {"quota": "lots"}}, 400, "limits.quota"),
        ({"name": "carl", "limits": {"expires": "tomorrow"}}, 400, "limits.expires"),
        ({"name": "carl", "limits": {"speed": 5}}, 400, "limits.speed"),
        ({"name": "carl", "limits": 5}, 400, "limits"),
        ({"name": "carl", "colour": "red"}, 400, "colour"),
        ({"name": "bob"}, 409, "name"),
        ({"name": "admin"}, 409, "name"),
    ]
    for body, code, field in cases:
        st, err = api("POST", "/users", body)
        assert (st, err.get("field")) == (code, field), (body, st, err)
        assert err["error"], err
    for raw in (b"{", b"[1]", b'{"name":"a","name":"b"}', b"\xff", b'{"a":{"b":{}}}'):
        st, err = api("POST", "/users", raw=raw)
        assert st == 400 and "JSON" in err["error"], (raw, st, err)
    st, err = api("PATCH", "/users/bob", {"limits": {"rate": "fast"}})
    assert (st, err["field"]) == (400, "limits.rate"), err
    assert api("PATCH", "/users/nobody", {"limits": {"conns": 1}})[0] == 404
    assert api("POST", "/users", raw=b" " * (65 << 10))[0] == 413
    assert api("PUT", "/users/bob", {"limits": {}})[0] == 405
    assert api("GET", "/nothing")[0] == 404
    assert api.file_text() == before  # no failed call changed users-file
    assert api("GET", "/users/bob")[1]["limits"]["ips"] == 2


def test_without_users_file_changes_are_409(procs, tmp_path):
    api = Api(procs, tmp_path, without_file=True)
    assert api("GET", "/users")[0] == 200
    st, err = api("POST", "/users", {"name": "alice"})
    assert st == 409 and "users-file" in err["error"], err
    assert api("POST", "/users/admin/rotate")[0] == 409


def test_create_is_on_disk_before_the_answer(procs, tmp_path):
    api = Api(procs, tmp_path)
    st, u = api("POST", "/users", {"name": "durable"})
    assert st == 201
    api.proxy.stop(signal.SIGKILL)  # right after the answer: nothing flushed later
    api.start()
    st, again = api("GET", "/users/durable")
    assert st == 200 and again["secret"] == u["secret"], again
    assert served(api.proxy, u["secret"])


def test_concurrent_creates_all_persisted(procs, tmp_path):
    api = Api(procs, tmp_path)
    results = {}

    def create(i):
        results[i] = api("POST", "/users", {"name": f"c{i}"})

    threads = [threading.Thread(target=create, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r[0] == 201 for r in results.values()), results
    text = api.file_text()
    assert all(f"secret = c{i}:" in text for i in range(20)), text
    names = {x["name"] for x in api("GET", "/users")[1]["users"]}
    assert names == {"admin"} | {f"c{i}" for i in range(20)}
    assert served(api.proxy, results[7][1]["secret"])


def test_rotate(procs, tmp_path):
    api = Api(procs, tmp_path)
    old = api("POST", "/users", {"name": "rot", "limits": {"conns": 3}})[1]["secret"]
    assert served(api.proxy, old)
    for bad in (-1, 1.5, "10", 10 ** 9):
        st, err = api("POST", "/users/rot/rotate", {"grace_seconds": bad})
        assert (st, err["field"]) == (400, "grace_seconds"), (bad, err)
    st, u = api("POST", "/users/rot/rotate")
    assert st == 200 and u["secret"] != old and u["limits"]["conns"] == 3, u
    assert refused(api.proxy, old)
    assert served(api.proxy, u["secret"])
    assert api("POST", "/users/nobody/rotate")[0] == 404


def test_rotate_with_grace(procs, tmp_path):
    """The old secret serves beside the new one for grace_seconds (as user NAME.prev with an
    expiry the proxy enforces by itself), then is refused; a later change drops its lines."""
    api = Api(procs, tmp_path)
    old = api("POST", "/users", {"name": "gr"})[1]["secret"]
    grace = max(3, int(T(3)))
    st, u = api("POST", "/users/gr/rotate", {"grace_seconds": grace})
    assert st == 200 and u["secret"] != old, u
    st, prev = api("GET", "/users/gr.prev")
    assert st == 200 and prev["secret"] == old and prev["limits"]["expires"], prev
    assert served(api.proxy, old) and served(api.proxy, u["secret"])
    assert wait_until(lambda: refused(api.proxy, old), grace + T(5), step=0.5)
    assert served(api.proxy, u["secret"])
    api("POST", "/users", {"name": "other"})  # any change drops the lapsed lines
    assert "gr.prev" not in api.file_text()
    assert api("POST", "/users", {"name": "x.prev"})[1]["field"] == "name"


def test_hand_edit_and_sighup(procs, tmp_path):
    api = Api(procs, tmp_path)
    api("POST", "/users", {"name": "viaapi"})
    sec = new_secret()
    with open(api.ufile, "a") as f:
        f.write(f"# added by hand\nsecret = byhand:{sec}\nlimit = byhand conns=2\n")
    serial = api("GET", "/health")[1]["generation"]
    os.kill(api.proxy.pid, signal.SIGHUP)
    assert reloaded(api.proxy, serial + 1), api.proxy.stderr_tail()
    st, u = api("GET", "/users/byhand")
    assert st == 200 and u["limits"]["conns"] == 2 and u["source"] == "users-file", u
    assert served(api.proxy, sec)
    # a bad hand edit: reported as users-file:LINE, the running users stay; the API refuses
    # to rewrite the file until it is fixed
    with open(api.ufile, "a") as f:
        f.write("secret = broken:zz\n")
    os.kill(api.proxy.pid, signal.SIGHUP)
    assert wait_until(lambda: f"{api.ufile}:6:" in api.proxy.stderr_tail(200), T(5)), \
        api.proxy.stderr_tail()
    assert served(api.proxy, sec)
    st, err = api("POST", "/users", {"name": "later"})
    assert st == 409 and f"{api.ufile}:6" in err["error"], err
    st, err = api("POST", "/reload")
    assert st == 400 and f"{api.ufile}:6" in err["error"], err


def test_reload_refusing_the_change_puts_the_file_back(procs, tmp_path):
    """A name the config file takes after users-file was read: the reload refuses the new
    file, the API puts the old one back and answers the error."""
    api = Api(procs, tmp_path)
    api("POST", "/users", {"name": "first"})
    before = api.file_text()
    text = api.conf.read_text() + f"secret = clash:{new_secret()}\n"
    api.conf.write_text(text)  # not reloaded yet: the running config has no 'clash'
    st, err = api("POST", "/users", {"name": "clash"})
    assert st == 400 and "clash" in err["error"], err
    assert api.file_text() == before


def test_api_needs_a_token_at_start(bins, tmp_path):
    for addr in ("0.0.0.0:9101", "127.0.0.1:9101"):
        rc, out = run_mtproxy(bins, ["--check-config", "--secret", f"a:{new_secret()}",
                                     "--api", addr])
        assert rc != 0 and "api-token" in out, (addr, rc, out)
    rc, out = run_mtproxy(bins, ["--check-config", "--secret", f"a:{new_secret()}",
                                 "--api", "0.0.0.0:9101", "--api-token", "short"])
    assert rc != 0 and "16 characters" in out, out
    rc, out = run_mtproxy(bins, ["--check-config", "--secret", f"a:{new_secret()}",
                                 "--api", "127.0.0.1:9101", "--api-token", TOKEN])
    assert rc == 0, out
    # the API could not write users-file there: found at start, not at the first call
    rc, out = run_mtproxy(bins, ["--check-config", "--secret", f"a:{new_secret()}",
                                 "--api", "127.0.0.1:9101", "--api-token", TOKEN,
                                 "--users-file", str(tmp_path / "missing" / "users.conf")])
    assert rc != 0 and "users-file" in out and "directory does not exist" in out, out


def test_created_user_served_to_telethon_at_once(procs, tmp_path):
    """A real client (Telethon's MTProxy classes) with the secret the API answered, at once:
    its req_pq_multi reaches the DC through the proxy and the ResPQ comes back."""
    import tgprobe
    api = Api(procs, tmp_path)
    st, u = api("POST", "/users", {"name": "tele", "kind": "dd"})
    assert st == 201, u
    nonce, res = tgprobe.req_pq_via_proxy("dd", api.proxy.port, u["secret"], 2, timeout=T(10))
    assert isinstance(res, tgprobe.ResPQ) and res.nonce == nonce, res
    assert api("DELETE", "/users/tele")[0] == 200
    try:
        _, res = tgprobe.req_pq_via_proxy("dd", api.proxy.port, u["secret"], 2, timeout=T(4))
    except Exception as e:  # refused: held, then closed
        res = e
    assert not isinstance(res, tgprobe.ResPQ), res


def live_session(proxy, secret):
    """A served session that streams (the DC sends without end) until the proxy ends it."""
    import rawclient
    s, _ = rawclient.start_session(proxy.addr, secret, tag="ef", dc=2, up=0, down=1 << 40)
    s.settimeout(T(5))
    assert len(rawclient.recv_upto(s, 64)) >= 64
    return s


def closed_soon(sock, timeout):
    """True if the proxy ends the live connection sock (EOF or reset) within timeout."""
    import socket
    import time
    end = time.monotonic() + timeout
    sock.settimeout(0.2)
    while time.monotonic() < end:
        try:
            if sock.recv(65536) == b"":
                return True
        except socket.timeout:
            continue
        except OSError:
            return True
    return False


def test_disable_enable(procs, tmp_path):
    """disable: new connections refused (reason "disabled"), a live one closed as for a
    removal (removed-user = close), kept in users-file across a restart; enable serves again."""
    api = Api(procs, tmp_path)
    u = api("POST", "/users", {"name": "dis", "limits": {"conns": 5}})[1]
    assert u["state"] == "active", u
    live = live_session(api.proxy, u["secret"])
    st, d = api("POST", "/users/dis/disable")
    assert st == 200 and d["state"] == "disabled", d
    assert d["limit_line"] == "dis conns=5 disabled" and d["limits"]["conns"] == 5, d
    assert "limit = dis conns=5 disabled" in api.file_text()
    assert refused(api.proxy, u["secret"])
    assert wait_until(lambda: "refused: disabled" in api.proxy.stderr_tail(200), T(5))
    assert closed_soon(live, T(5))
    live.close()
    # a change of limits keeps it disabled
    st, p = api("PATCH", "/users/dis", {"limits": {"conns": 2}})
    assert st == 200 and p["state"] == "disabled" and p["limit_line"] == "dis conns=2 disabled", p
    st, e = api("POST", "/users/dis/enable")
    assert st == 200 and e["state"] == "active" and e["limit_line"] == "dis conns=2", e
    assert served(api.proxy, u["secret"])
    # persisted: disabled across a restart (and a user with no other limit gets a line of
    # its own, which enable removes again)
    assert api("PATCH", "/users/dis", {"limits": {"conns": None}})[0] == 200
    assert api("POST", "/users/dis/disable")[1]["limit_line"] == "dis disabled"
    api.proxy.stop()
    api.start()
    st, again = api("GET", "/users/dis")
    assert st == 200 and again["state"] == "disabled", again
    assert refused(api.proxy, u["secret"])
    assert api("POST", "/users/dis/enable")[1]["limit_line"] is None
    assert "limit = dis" not in api.file_text()
    assert served(api.proxy, u["secret"])
    # errors
    assert api("POST", "/users/nobody/disable")[0] == 404
    assert api("GET", "/users/dis/disable")[0] == 405
    assert api("POST", "/users/admin/disable")[0] == 409  # a user of the config file


def test_disable_with_removed_user_drain(procs, tmp_path):
    """removed-user = drain: a disabled user's live connection goes on until drain-timeout,
    then is closed; enabled again within the drain, it stays."""
    drain = max(3, int(T(3)))
    api = Api(procs, tmp_path, extra=f"removed-user = drain\ndrain-timeout = {drain}s\n")
    u = api("POST", "/users", {"name": "dr"})[1]
    live = live_session(api.proxy, u["secret"])
    assert api("POST", "/users/dr/disable")[0] == 200
    assert refused(api.proxy, u["secret"])  # new ones refused at once
    assert not closed_soon(live, 1)  # the live one drains
    assert closed_soon(live, drain + T(5))
    live.close()
    # enabled again before the drain ends: the live connection stays
    assert api("POST", "/users/dr/enable")[0] == 200
    live = live_session(api.proxy, u["secret"])
    assert api("POST", "/users/dr/disable")[0] == 200
    assert api("POST", "/users/dr/enable")[0] == 200
    assert not closed_soon(live, drain + 2)
    live.close()


def test_disabled_by_hand_edit_and_check_config(bins, tmp_path):
    sec = new_secret()
    uf = tmp_path / "users.conf"
    uf.write_text(f"secret = hand:{sec}\nlimit = hand quota=1G disabled\n")
    rc, out = run_mtproxy(bins, ["--check-config", "--users-file", str(uf)])
    assert rc == 0, out
    uf.write_text(f"secret = hand:{sec}\nlimit = hand disabled disabled\n")
    rc, out = run_mtproxy(bins, ["--check-config", "--users-file", str(uf)])
    assert rc != 0 and "disabled given twice" in out, out


def test_reset_quota(procs, tmp_path):
    """A user refused for its quota is served again at once after reset-quota; the state
    file's value is zeroed too (a restart does not bring the usage back)."""
    api = Api(procs, tmp_path)
    u = api("POST", "/users", {"name": "qq", "limits": {"quota": "300k"}})[1]
    res = procs.client(api.proxy, u["secret"], "ef", 2, 1000, 400000)
    assert not res["ok"], res
    assert refused(api.proxy, u["secret"])
    st, before = api("GET", "/users/qq")
    assert before["state"] == "quota" and before["usage"]["quota_used"] >= 300 << 10, before
    us = before["usage"]
    assert us["quota_left"] == 0 and us["quota_period"] is None and us["quota_reset"] is None, us
    state = api.proxy.argv[api.proxy.argv.index("--state-file") + 1]
    def state_text():
        return open(state).read() if os.path.exists(state) else ""
    assert wait_until(lambda: "quota-used = qq " in state_text(), T(10))
    st, r = api("POST", "/users/qq/reset-quota")
    assert st == 200 and r["state"] == "active" and r["usage"]["quota_used"] == 0, r
    assert r["usage"]["quota_left"] == 300 << 10, r
    assert served(api.proxy, u["secret"])
    # the state file was rewritten before the answer (the usage left is below 300k): a kill -9
    # right after it does not bring the old usage back
    m = re.search(r"quota-used = qq (\d+)", state_text())
    assert not m or int(m.group(1)) < 300 << 10, state_text()
    api.proxy.stop(signal.SIGKILL)
    api.start()
    assert served(api.proxy, u["secret"])
    assert api("POST", "/users/nobody/reset-quota")[0] == 404
    assert api("GET", "/users/qq/reset-quota")[0] == 405
    # a user of the config file may be reset too (nothing is written to the config)
    assert api("POST", "/users/admin/reset-quota")[0] == 200
    # a periodic quota: what is left, its period and its next start (00:00 UTC, ahead)
    st, p = api("POST", "/users", {"name": "pp", "limits": {"quota": "1M/week"}})
    assert st == 201, p
    res = procs.client(api.proxy, p["secret"], "ef", 2, 1000, 100000)
    assert res["ok"], res
    st, p = api("GET", "/users/pp")
    us = p["usage"]
    assert us["quota_used"] >= 100000 and us["quota_left"] == (1 << 20) - us["quota_used"], us
    now = time.time()
    assert us["quota_period"] == "week" and now < us["quota_reset"] <= now + 7 * 86400, us
    assert us["quota_reset"] % 86400 == 0, us
    assert api("GET", "/users/admin")[1]["usage"]["quota_left"] is None


def openapi_ops():
    """{(path template, METHOD)} of docs/openapi.json."""
    doc = json.loads((DOCS / "openapi.json").read_text())
    assert doc["openapi"].startswith("3."), doc.get("openapi")
    ops = set()
    for path, item in doc["paths"].items():
        for m in item:
            if m in ("get", "post", "patch", "delete", "put", "head"):
                ops.add((path, m.upper()))
    return doc, ops


def template_of(path, templates):
    """The documented template a concrete /api/v1 path matches, or None."""
    for t in templates:
        rx = "^" + re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", re.escape(t)) + "$"
        if re.match(rx, path):
            return t
    return None


def test_openapi_lists_exactly_what_is_served(procs, tmp_path):
    doc, ops = openapi_ops()
    servers = [s["url"] for s in doc.get("servers", [])]
    base = "/api/v1"
    assert any(s.endswith(base) for s in servers), servers
    api = Api(procs, tmp_path)
    templates = {p for p, _ in ops}
    for path, method in sorted(ops):
        concrete = path.replace("{name}", "nosuchuser")
        st, body = api(method, concrete, {} if method in ("POST", "PATCH") else None)
        assert st != 405, (path, method, body)
        # a route that exists answers; an unknown user is "no user", never "not found"
        assert not (st == 404 and body["error"].startswith("not found")), (path, method, body)
    # what is not documented is not served
    for method, path in (("GET", "/users/x/frobnicate"), ("GET", "/nothing"),
                         ("POST", "/users/x/rotate/now"), ("GET", "/users/x/y")):
        st, body = api(method, path)
        assert st == 404 and body["error"].startswith("not found"), (method, path, body)
    for path in templates:
        documented = {m for p, m in ops if p == path}
        for method in {"GET", "POST", "PATCH", "DELETE", "PUT"} - documented - {"HEAD"}:
            concrete = path.replace("{name}", "nosuchuser")
            st, _ = api(method, concrete, {} if method != "GET" else None)
            assert st == 405, (path, method, st)
    # every call these tests make is documented (but the deliberately wrong ones)
    wrong = {("GET", "/nothing"), ("GET", "/users/x/frobnicate"), ("GET", "/users/x/y"),
             ("POST", "/users/x/rotate/now"), ("PUT", "/users/bob"),
             ("GET", "/users/dis/disable"), ("GET", "/users/qq/reset-quota")}  # 405 on purpose
    src = pathlib.Path(__file__).read_text()
    calls = set(re.findall(r'api\("([A-Z]+)", f?"(/[^"?]*)"', src))
    assert len(calls) >= 15, calls
    for method, path in calls - wrong:
        t = template_of(re.sub(r"\{[^}]*\}", "x", path), templates)
        assert (t, method) in ops, (method, path)
    # every documented error answer has the error schema
    for path, item in doc["paths"].items():
        for m, op in item.items():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            assert "401" in op["responses"], (path, m)
