"""fleetlib.py: a fleet for the tests: Redis, a fake DC, two mtproxy instances and HAProxy
(send-proxy-v2) in front of them (test_fleet.py, test_limits_store.py)."""
import os
import shutil
import signal
import socket
import subprocess

import pytest

from harness import DC_IDS, Proc, T, free_ports, mtproxy_argv, new_secret, wait_until

DOMAIN = "www.example.com"


def need(exe, package):
    path = shutil.which(exe) or (f"/usr/sbin/{exe}" if os.path.exists(f"/usr/sbin/{exe}") else None)
    if not path:
        pytest.skip(f"{exe} not installed (Debian package {package})")
    return path


def check_built_with_redis(bins):
    """Skips the module on a build without libhiredis (the cross builds' sysroots lack it);
    such a build must refuse the key with a clear message, which is checked here."""
    if not bins["mtproxy"]:
        pytest.skip("MTPROXY_BIN not set")
    r = subprocess.run(mtproxy_argv(bins, "--check-config", "--listen", "127.0.0.1:1",
                                    "--secret", f"a:{new_secret()}", "--dc-builtin", "off",
                                    "--dc", "2 127.0.0.1:1", "--mask", "off",
                                    "--replay-store", "redis://127.0.0.1:1"),
                       capture_output=True, timeout=T(20))
    out = (r.stdout + r.stderr).decode()
    if "built without Redis support" in out:
        assert r.returncode != 0, out
        pytest.skip("this mtproxy was built without libhiredis")
    assert r.returncode == 0, out


def port_up(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


class Redis:
    def __init__(self, procs, password=None):
        self.exe = need("redis-server", "redis-server")
        self.procs = procs
        self.port = free_ports(1)[0]
        self.password = password
        self.start()

    def start(self):
        argv = [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", self.procs.workdir, "--daemonize", "no"]
        if self.password:
            argv += ["--requirepass", self.password]
        self.p = Proc("redis", argv, self.procs.workdir)
        self.procs.all.append(self.p)
        assert wait_until(lambda: port_up(self.port), T(5)), "redis-server did not start"

    def stop(self):
        self.p.stop(signal.SIGKILL)
        assert wait_until(lambda: not port_up(self.port), T(3))

    def url(self):
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/3"


class Fleet:
    """Redis, one fake DC, two proxies with the same secrets and store (`stores`: the config
    keys given the Redis URL), and HAProxy with three frontends: `port` balances over both,
    `port1` and `port2` reach one each. `users` are more (name, secret) beside plain and tls; `extra_each` one instance's own
    arguments each."""

    def __init__(self, procs, extra=(), stores=("replay-store",), users=(), extra_each=((), ())):
        self.procs = procs
        self.stores = stores
        self.extra_users = dict(users)
        self.redis = Redis(procs, password="fleet-pass")
        self.plain = new_secret()
        self.tls = "ee" + new_secret() + DOMAIN.encode().hex()
        self.dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
        dcs = [(i, self.dc.addr(i)) for i in DC_IDS]
        common = ["--proxy-protocol", "on", "--proxy-protocol-from", "127.0.0.1"]
        for key in stores:
            common += [f"--{key}", self.redis.url()]
        common += list(extra)
        self.p = [procs.proxy([("plain", self.plain), ("tls", self.tls)] + list(users), dcs,
                              extra=common + list(extra_each[i - 1]), name=f"mtproxy{i}")
                  for i in (1, 2)]
        self.port, self.port1, self.port2 = free_ports(3)
        cfg = os.path.join(procs.workdir, "haproxy.cfg")
        srv = "send-proxy-v2 check check-send-proxy inter 300ms fall 1 rise 2"
        with open(cfg, "w") as f:
            f.write(f"""global
    maxconn 2000
defaults
    mode tcp
    timeout connect 2s
    timeout client 30s
    timeout server 30s
frontend fe
    bind 127.0.0.1:{self.port}
    default_backend both
frontend fe1
    bind 127.0.0.1:{self.port1}
    default_backend first
frontend fe2
    bind 127.0.0.1:{self.port2}
    default_backend second
backend both
    balance roundrobin
    server p1 {self.p[0].addr} {srv}
    server p2 {self.p[1].addr} {srv}
backend first
    server p1 {self.p[0].addr} {srv}
backend second
    server p2 {self.p[1].addr} {srv}
""")
        exe = need("haproxy", "haproxy")
        self.haproxy = Proc("haproxy", [exe, "-f", cfg, "-db"], procs.workdir)
        procs.all.append(self.haproxy)
        assert wait_until(lambda: all(port_up(p) for p in (self.port, self.port1, self.port2)),
                          T(5)), \
            self.haproxy.stderr_tail()
        for p in self.p:
            for key in stores:
                assert wait_until(lambda: f"{key}: connected" in p.stderr_tail(400), T(5))

    def client(self, port, *args, secret=None, **kw):
        return self.procs.client(f"127.0.0.1:{port}", secret or self.plain, *args, **kw)
