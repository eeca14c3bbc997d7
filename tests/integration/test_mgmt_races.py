"""test_mgmt_races.py: the management surfaces (`mtproxy user` offline, the API, the state
file) under races and restarts: concurrent offline changes serialized by the state file's
lock, a proxy that starts during one waits for it, a rotated user's old secret keeps its
limits (issue 35)."""
import fcntl
import os
import re
import subprocess
import threading
import time

from harness import T, mtproxy_argv, new_secret, wait_until
from test_api import Api, refused, served


def state_of(api):
    return api.proxy.argv[api.proxy.argv.index("--state-file") + 1]


def cli_argv(bins, api, *args):
    return mtproxy_argv(bins, "user", *args, "--config", api.conf, "--state-file",
                        state_of(api))


def test_concurrent_offline_adds_all_land(procs, bins, tmp_path):
    """Twelve `mtproxy user add` at once with the proxy stopped: each is written, or fails
    with a message and prints no link."""
    api = Api(procs, tmp_path)
    api.proxy.stop()
    names = [f"c{i}" for i in range(12)]
    ps = {n: subprocess.Popen(cli_argv(bins, api, "add", n), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for n in names}
    res = {n: (p.wait(T(60)), p.stdout.read(), p.stderr.read()) for n, p in ps.items()}
    text = api.file_text()
    for n, (rc, out, err) in res.items():
        m = re.search(r"secret: (\S+)", out)
        if m:
            assert f"secret = {n}:{m.group(1)}" in text, (n, out, text)
        assert rc == 0, (n, rc, out, err)  # none refused: they wait for each other
    api.start()
    assert all(served(api.proxy, re.search(r"secret: (\S+)", res[n][1]).group(1))
               for n in names[:2])


def test_proxy_started_during_an_offline_change_waits(procs, bins, tmp_path):
    """A proxy that starts while the lock is held by an offline change (here: held by the
    test, which edits users-file meanwhile) waits and reads the changed file."""
    api = Api(procs, tmp_path)
    api.proxy.stop()
    sec = new_secret()
    fd = os.open(state_of(api) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)

    def change():
        time.sleep(1.0)
        with open(api.ufile, "a") as f:
            f.write(f"secret = late:{sec}\n")
        os.close(fd)  # the lock is released

    t = threading.Thread(target=change)
    t.start()
    api.start()
    t.join()
    assert served(api.proxy, sec)
    st, u = api("GET", "/users/late")
    assert st == 200, u


def test_rotate_with_grace_keeps_limits_and_quota(procs, tmp_path):
    """The old secret of a rotation with a grace is the same user: its limits (disabled
    too), its quota and usage, until the grace ends; a later change reaches it."""
    api = Api(procs, tmp_path)
    old = api("POST", "/users", {"name": "q", "limits": {"quota": "300k"}})[1]["secret"]
    dold = api("POST", "/users", {"name": "d", "limits": {"quota": "1M"}})[1]["secret"]
    assert api("POST", "/users/d/disable")[0] == 200
    assert api("POST", "/users/q/rotate", {"grace_seconds": 3600})[0] == 200
    assert api("POST", "/users/d/rotate", {"grace_seconds": 3600})[0] == 200
    text = api.file_text()
    assert re.search(r"^limit = q\.prev quota=300k expires=\S+Z$", text, re.M), text
    assert re.search(r"^limit = d\.prev quota=1M disabled expires=\S+Z$", text, re.M), text
    assert refused(api.proxy, dold)
    assert not procs.client(api.proxy, old, "ef", 2, 1000, 1000000)["ok"]  # cut at 300k
    assert refused(api.proxy, old)
    used = api("GET", "/users/q")[1]["usage"]["quota_used"]
    assert 300000 <= used < 1000000, used  # counted against q itself
    assert api("GET", "/users/q.prev")[1]["usage"]["quota_used"] == used
    # a later change of q reaches its old secret, whose grace end stays
    exp = re.search(r"^limit = q\.prev .*expires=(\S+)$", text, re.M).group(1)
    assert api("PATCH", "/users/q", {"limits": {"quota": "10M"}})[0] == 200
    assert f"limit = q.prev quota=10M expires={exp}" in api.file_text(), api.file_text()
    assert served(api.proxy, old)
