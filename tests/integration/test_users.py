"""test_users.py: many users, per-user counters, limits (conns, ips, quota, expiry, rate), reload."""
import os
import re
import signal
import socket
import time

import pytest

from harness import (DC_IDS, T, assert_ok, new_secret, wait_until)
from proxyinfo import stats
import rawclient


def user_stats(proxy, name):
    """{counter: int} of user `name` from the SIGUSR1 lines ("user NAME: conns N ...")."""
    stats(proxy)
    lines = re.findall(rf"user {re.escape(name)}: (.*)", proxy.stderr_tail(200000))
    if not lines:
        return {}
    text = lines[-1]
    out = {k: int(v) for k, v in re.findall(r"([a-z_]+) (\d+)", text.split("refused")[0])}
    ref = text.split("refused", 1)[1]
    out.update({"refused_" + k: int(v) for k, v in re.findall(r"([a-z_]+) (\d+)", ref)})
    return out


def write_conf(path, users, dc, extra=""):
    """A config file with users [(name, secret)] and the fake DC."""
    lines = [f"secret = {n}:{s}" for n, s in users]
    lines += [f"dc = {i} {dc.addr(i)}" for i in DC_IDS]
    path.write_text("\n".join(lines) + "\n" + extra)


def test_10000_users_last_served(procs, tmp_path):
    dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
    users = [(f"u{i}", new_secret()) for i in range(10000)]
    conf = tmp_path / "many.conf"
    write_conf(conf, users, dc)
    proxy = procs.proxy([], [], extra=["--config", str(conf)])
    last_name, last = users[-1]
    assert_ok(procs.client(proxy, last, "ef", 2, 100000, 200000))
    assert_ok(procs.client(proxy, "dd" + users[5000][1], "dd", 2, 1000, 1000))
    st = user_stats(proxy, last_name)
    assert st["conns"] == 1 and st["active"] == 0, st
    assert st["bytes_up"] >= 100000 and st["bytes_down"] >= 200000, st
    assert user_stats(proxy, "u5000")["conns"] == 1
    assert user_stats(proxy, "u4999") == {}  # no traffic: no line
