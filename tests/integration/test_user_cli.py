"""test_user_cli.py: `mtproxy user ...` against a running proxy (through its API) and a stopped
one (users-file and the state file edited in-process, in force at the next start); bad usage
and bad values give exit codes 2 and 1 with a message."""
import json
import os
import re
import subprocess
import urllib.request

from harness import T, free_ports, mtproxy_argv, wait_until
from test_api import Api, refused, served


def cli(bins, api, *args, extra=()):
    """(rc, stdout, stderr) of `mtproxy user ARGS --config CONF --state-file STATE`."""
    state = api.proxy.argv[api.proxy.argv.index("--state-file") + 1]
    argv = mtproxy_argv(bins, "user", *args, "--config", api.conf, "--state-file", state,
                        *extra)
    p = subprocess.run(argv, capture_output=True, text=True, timeout=T(120))
    return p.returncode, p.stdout, p.stderr


def secret_of(out):
    m = re.search(r"secret: (\S+)", out)
    assert m, out
    return m.group(1)


def test_cli_against_the_running_proxy(procs, bins, tmp_path):
    api = Api(procs, tmp_path)
    rc, out, err = cli(bins, api, "add", "bob", "--limit", "conns=2 quota=50G/month")
    assert rc == 0, (out, err)
    assert "tg://proxy?" in out and "https://t.me/proxy?" in out, out
    sec = secret_of(out)
    assert served(api.proxy, sec)  # at once: the API answered after its reload
    assert "limit = bob conns=2 quota=50G/month" in api.file_text()
    assert "not running" not in err, err
    rc, out, err = cli(bins, api, "add", "carl", "--dd")
    assert rc == 0 and secret_of(out).startswith("dd"), (out, err)
    rc, out, err = cli(bins, api, "add", "tina", "--tls", "example.com", "--secret",
                       "00112233445566778899aabbccddeeff", "--json")
    assert rc == 0, err
    t = json.loads(out)
    assert t["kind"] == "ee" and t["domain"] == "example.com", t
    assert t["secret"] == "ee00112233445566778899aabbccddeeff" + b"example.com".hex(), t

    rc, out, err = cli(bins, api, "list")
    assert rc == 0 and re.search(r"^bob\s+plain\s+active\s+users-file", out, re.M), out
    # tina's domain is a fronting target: the CLI resolves no name (musl's resolver waits 5 s
    # for a DNS server that this namespace does not have)
    assert "resolve" not in err, err
    rc, out, _ = cli(bins, api, "list", "--json")
    assert {u["name"] for u in json.loads(out)["users"]} == {"admin", "bob", "carl", "tina"}
    rc, out, _ = cli(bins, api, "show", "bob")
    assert rc == 0 and sec in out and "conns=2 quota=50G/month" in out, out
    rc, out, _ = cli(bins, api, "show", "bob", "--qr")
    assert rc == 0 and sec in out, out
    if api("GET", "/health")[1]["qr"]:
        assert "\u2580" in out or "\u2584" in out or "\u2588" in out, out  # half blocks

    rc, out, err = cli(bins, api, "set", "bob", "--limit", "conns=1 quota=none", "--json")
    assert rc == 0, err
    assert json.loads(out)["limit_line"] == "bob conns=1", out
    assert api("GET", "/users/bob")[1]["limits"]["conns"] == 1

    rc, out, _ = cli(bins, api, "disable", "bob")
    assert rc == 0 and "disabled" in out, out
    assert refused(api.proxy, sec)
    rc, out, _ = cli(bins, api, "enable", "bob", "--json")
    assert rc == 0 and json.loads(out)["state"] == "active", out
    assert served(api.proxy, sec)

    rc, out, _ = cli(bins, api, "rotate", "bob")
    new = secret_of(out)
    assert rc == 0 and new != sec, out
    assert refused(api.proxy, sec) and served(api.proxy, new)
    rc, out, _ = cli(bins, api, "rotate", "bob", "--grace", "1h", "--json")
    assert rc == 0, out
    assert api("GET", "/users/bob.prev")[1]["secret"] == new
    assert served(api.proxy, new)  # the old one serves for its grace

    rc, out, _ = cli(bins, api, "reset-quota", "bob", "--json")
    assert rc == 0 and json.loads(out)["usage"]["quota_used"] == 0, out

    rc, out, _ = cli(bins, api, "del", "bob")
    assert rc == 0 and "bob deleted" in out, out
    assert refused(api.proxy, new)  # bob.prev went with it
    assert "bob" not in api.file_text()

    # errors: from the API (exit 1, the message and the field) and usage (exit 2)
    rc, _, err = cli(bins, api, "show", "nobody")
    assert rc == 1 and "no user 'nobody'" in err, err
    rc, out, err = cli(bins, api, "show", "nobody", "--json")
    assert rc == 1 and json.loads(out)["error"], out
    rc, _, err = cli(bins, api, "set", "carl", "--limit", "conns=lots")
    assert rc == 1 and "limits.conns" in err, err
    rc, _, err = cli(bins, api, "add", "carl")
    assert rc == 1 and "exists already" in err, err
    rc, _, err = cli(bins, api, "add", "bad name!")
    assert rc == 1 and "name" in err, err
    for args, what in ((["add"], "needs a user NAME"), (["frob", "x"], "unknown command"),
                       (["set", "carl"], "--limit"), (["set", "carl", "--limit", "conns"],
                                                      "KEY=VALUE"),
                       (["add", "x", "--dd", "--tls", "a.com"], "--dd and --tls"),
                       (["list", "--grace", "1h"], "does not go"),
                       (["rotate", "carl", "--grace", "soon"], "--grace")):
        rc, _, err = cli(bins, api, *args)
        assert rc == 2 and what in err, (args, rc, err)
    rc, out, _ = cli(bins, api, "--help")
    assert rc == 0 and "reset-quota NAME" in out, out

    # running but its API unreachable (another port): nothing is changed behind its back
    rc, _, err = cli(bins, api, "add", "eve", extra=["--api", f"127.0.0.1:{free_ports(1)[0]}"])
    assert rc == 1 and "is running" in err, err
    assert "eve" not in api.file_text()
    # running and no `api` in the config: the same, with what to do
    rc, _, err = cli(bins, api, "add", "eve", extra=["--api", "off"])
    assert rc == 1 and "is running" in err and "no `api`" in err, err
    assert "eve" not in api.file_text()
    p = subprocess.run(mtproxy_argv(bins, "user"), capture_output=True, text=True, timeout=T(30))
    assert p.returncode == 2 and "Usage: mtproxy user" in p.stderr, p


def test_cli_with_the_proxy_stopped(procs, bins, tmp_path):
    """Stopped: users-file (and the state file) edited directly with the same checks; the
    next start has the changes."""
    api = Api(procs, tmp_path)
    q = api("POST", "/users", {"name": "q", "limits": {"quota": "300k"}})[1]["secret"]
    off = api("POST", "/users", {"name": "off"})[1]["secret"]
    gone = api("POST", "/users", {"name": "gone"})[1]["secret"]
    assert not procs.client(api.proxy, q, "ef", 2, 1000, 400000)["ok"]
    assert refused(api.proxy, q)
    state = api.proxy.argv[api.proxy.argv.index("--state-file") + 1]
    assert wait_until(lambda: os.path.exists(state) and "quota-used = q " in open(state).read(),
                      T(10))
    api.proxy.stop()

    rc, out, err = cli(bins, api, "add", "dave", "--limit", "conns=3")
    assert rc == 0 and "tg://proxy?" in out, (out, err)
    assert "not running" in err and "next start" in err, err
    dave = secret_of(out)
    assert f"secret = dave:{dave}" in api.file_text()
    rc, out, err = cli(bins, api, "disable", "off")
    assert rc == 0 and "disabled" in out, (out, err)
    rc, _, err = cli(bins, api, "del", "gone")
    assert rc == 0, err
    rc, out, err = cli(bins, api, "reset-quota", "q", "--json")
    assert rc == 0 and json.loads(out)["usage"]["quota_used"] == 0, (out, err)
    assert "quota-used = q " not in open(state).read()
    rc, out, _ = cli(bins, api, "list", "--json")  # the same JSON as the API's
    users = {u["name"]: u for u in json.loads(out)["users"]}
    assert set(users) == {"admin", "q", "off", "dave"}, users
    assert users["off"]["state"] == "disabled" and users["dave"]["limits"]["conns"] == 3
    # the same checks as the API
    rc, _, err = cli(bins, api, "set", "dave", "--limit", "quota=lots")
    assert rc == 1 and "limits.quota" in err, err
    rc, _, err = cli(bins, api, "add", "admin")
    assert rc == 1 and "exists already" in err, err

    api.start()
    assert served(api.proxy, dave) and served(api.proxy, q)
    assert refused(api.proxy, off) and refused(api.proxy, gone)
    st, d = api("GET", "/users/dave")
    assert st == 200 and d["limits"]["conns"] == 3, d


def test_add_web(procs, bins, tmp_path):
    """`user add --web`: a dd user with its tg://webproxy links (WEB proxy mode on); the API's
    user and the status page's user carry them; refused with --tls, or with WEB mode off."""
    wport, mport = free_ports(2)
    api = Api(procs, tmp_path, extra=f"web-listen = 127.0.0.1:{wport}\n"
                                     "web-host = proxy.example.com\n"
                                     f"metrics = 127.0.0.1:{mport}\n")
    rc, out, err = cli(bins, api, "add", "wendy", "--web")
    assert rc == 0, (out, err)
    sec = secret_of(out)
    assert sec.startswith("dd") and len(sec) == 34, out
    assert f"web:    tg://webproxy?server=proxy.example.com&secret={sec}" in out, out
    assert f"web:    https://t.me/webproxy?server=proxy.example.com&secret={sec}" in out, out
    st, u = api("GET", "/users/wendy")
    assert st == 200 and u["links"]["web_tg"].startswith("tg://webproxy?"), u
    assert u["links"]["web_https"] == f"https://t.me/webproxy?server=proxy.example.com&secret={sec}"
    # the status page's user (its links box shows them)
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/users/wendy", timeout=T(5)) as r:
        page = json.loads(r.read())["user"]
    assert page["web_tg"] == u["links"]["web_tg"], page
    rc, out, err = cli(bins, api, "add", "eve", "--web", "--tls", "example.com")
    assert rc == 2 and "ee secrets are not WEB secrets" in err, (out, err)
    rc, out, _ = cli(bins, api, "add", "ed", "--tls", "example.com")
    assert rc == 0 and "web:" not in out, out  # an ee user: no WEB links
    assert "web_tg" not in api("GET", "/users/ed")[1]["links"]

    (tmp_path / "off").mkdir()
    api2 = Api(procs, tmp_path / "off", name="off")
    rc, out, err = cli(bins, api2, "add", "wes", "--web")
    assert rc == 2 and "WEB proxy mode is off" in err, (out, err)
    assert "wes" not in api2.file_text()
