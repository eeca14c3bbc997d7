"""test_mgmt_restart.py: a randomized run of the management API under kill -9 (issue 35):
users created, rotated, reset and deleted, traffic, and the proxy killed -9 at random moments
(also in the middle of a call), with and without limits-store (its Redis restarted empty at
random). Then: every user answered "created" exists, every user answered "deleted" does not,
and no user's quota usage went below what was on disk (or what the store held) except by a
reset. MTPROXY_RESTART_SEED replays a run."""
import os
import random
import re
import signal
import subprocess
import threading
import time

import pytest

from harness import T
from test_api import Api
from test_mgmt_races import redis_total

NAMES = [f"r{i}" for i in range(5)]
STEPS = 80


def state_usage(path):
    """{user: quota-used} of a state file (what a kill -9 keeps)."""
    text = open(path).read() if os.path.exists(path) else ""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^quota-used = (\S+) (\d+)", text,
                                                             re.M)}


class Run:
    def __init__(self, procs, tmp_path, rnd, redis):
        self.procs, self.rnd, self.redis = procs, rnd, redis
        extra = ""
        if redis:
            extra = f"limits-store = {redis.url()}\nlimits-store-interval = 200ms\n"
        self.api = Api(procs, tmp_path, extra=extra)
        self.state = self.api.proxy.argv[self.api.proxy.argv.index("--state-file") + 1]
        self.users = {}      # name -> secret: answered created (and not deleted since)
        self.deleted = set() # answered deleted (and not created since)
        self.unsure = set()  # a call without an answer (killed): either outcome is right
        self.floor = {}      # name -> the usage it may not go below
        self.fresh = set()   # answered created, no traffic since: its usage is 0
        self.log = []

    def __call__(self, method, path, body=None):
        return self.api(method, path, body, timeout=T(20))

    def used(self, name):
        st, u = self("GET", f"/users/{name}")
        assert st == 200, (" | ".join(self.log), name, u)
        return u["usage"]["quota_used"]

    def evidence(self, name):
        """What a failure report needs: the state file and the store's hash of name."""
        text = open(self.state).read() if os.path.exists(self.state) else ""
        if not self.redis:
            return text
        rc = lambda *a: subprocess.run(["redis-cli", "-p", str(self.redis.port), "-n", "3", *a],
                                       capture_output=True, text=True, timeout=T(5)).stdout
        keys = rc("--scan", "--pattern", f"mtproxy:l:q:{name}:*").split()
        return text, {k: rc("hgetall", k) for k in keys}

    def check(self):
        """Every promise so far, against the running proxy."""
        names = {u["name"] for u in self("GET", "/users")[1]["users"]}
        for n in self.users:
            assert n in names or n in self.unsure, (" | ".join(self.log), n, names)
        for n in self.deleted:
            assert n not in names or n in self.unsure, (" | ".join(self.log), n, names)
        for n in list(self.users):
            if n in names:
                got = self.used(n)
                # made again after a delete: the old usage did not follow the name (with
                # limits-store the fleet's count of a name stays: docs/api.md, DELETE)
                assert n not in self.fresh or self.redis or got == 0, \
                    (" | ".join(self.log), n, got)
                assert got >= self.floor.get(n, 0), (" | ".join(self.log), n, got,
                                                     self.floor.get(n), self.evidence(n))
                self.floor[n] = max(self.floor.get(n, 0), got)

    def settle(self, name, st, ok_codes, fresh=False, gone=False):
        if st is None:
            self.unsure.add(name)
            self.floor[name] = 0
            self.fresh.discard(name)
            return
        if st == 404:  # it does not exist: whatever was unsure
            self.unsure.discard(name)
            self.users.pop(name, None)
            self.deleted.add(name)
            self.floor.pop(name, None)
            return
        if st in ok_codes:
            self.unsure.discard(name)
            if not gone:
                self.deleted.discard(name)
            if gone:
                self.users.pop(name, None)
                self.deleted.add(name)
                self.floor.pop(name, None)
            if fresh:
                self.deleted.discard(name)
                self.floor[name] = 0
                self.fresh.add(name)

    def op(self, kind, name):
        """One call; None as its status if the proxy died before answering."""
        try:
            if kind == "create":
                st, u = self("POST", "/users", {"name": name, "limits": {"quota": "100M"}})
                if st == 201:
                    self.users[name] = u["secret"]
                self.settle(name, st, (201,), fresh=True)
                if st == 409 and name in self.unsure:  # a create without an answer landed
                    self.users[name] = self("GET", f"/users/{name}")[1]["secret"]
                    self.settle(name, 200, (200,))
            elif kind == "rotate":
                body = {"grace_seconds": 600} if self.rnd.random() < 0.5 else None
                st, u = self("POST", f"/users/{name}/rotate", body)
                if st == 200:
                    self.users[name] = u["secret"]
                self.settle(name, st, (200,))
            elif kind == "reset":
                st, _ = self("POST", f"/users/{name}/reset-quota")
                if st == 200:
                    self.floor[name] = 0
                self.settle(name, st, (200,))
            elif kind == "delete":
                st, _ = self("DELETE", f"/users/{name}")
                self.settle(name, st, (200,), gone=True)
        except OSError:
            self.settle(name, None, ())

    def restart(self):
        """kill -9 (sometimes in the middle of a call); the floor is what is on disk (and,
        with limits-store, what the store had: the larger is kept)."""
        kind, name = self.rnd.choice(["create", "rotate", "reset", "delete"]), \
            self.rnd.choice(NAMES)
        t = threading.Thread(target=self.op, args=(kind, name))
        if self.rnd.random() < 0.5:
            t.start()
            time.sleep(self.rnd.random() * 0.05)
        self.api.proxy.stop(signal.SIGKILL)
        if t.ident:
            t.join()
        self.log.append(f"kill -9 during {kind} {name}")
        disk = state_usage(self.state)
        empty = self.redis and self.rnd.random() < 0.4
        for n in self.floor:
            kept = disk.get(n, 0)
            if self.redis and not empty:
                kept = max(kept, redis_total(self.redis, n))
            self.floor[n] = min(self.floor[n], kept)
            self.log.append(f"({n}: disk {disk.get(n, 0)} kept {kept})")
        if empty:
            self.redis.stop()
            self.redis.start()
            self.log.append("redis restarted empty")
        self.api.start()
        if self.redis:  # the store's figure comes with the first flush (200 ms)
            time.sleep(0.5)

    def traffic(self, name):
        self.fresh.discard(name)
        self.procs.client(self.api.proxy, self.users[name], "ef", 2, 2000,
                          self.rnd.randrange(10000, 60000))


# CI runs seed 1 (MTPROXY_RESTART_SEED=N replays N, =random draws one). With limits-store,
# seed 27544291 fails in most runs (a usage below its floor after kill -9 during a rotate with
# Redis restarted empty: issue 35, open; its moments depend on timing, so not every run).


def run(procs, tmp_path, redis, seed=None):
    env = os.environ.get("MTPROXY_RESTART_SEED", "1")
    if seed is None:
        seed = random.randrange(1 << 30) if env == "random" else int(env)
    r = Run(procs, tmp_path, random.Random(seed), redis)
    r.log.append(f"seed {seed}")
    end = time.monotonic() + T(25)
    for _ in range(STEPS):
        if time.monotonic() > end:
            break
        what = r.rnd.choices(["create", "rotate", "reset", "delete", "traffic", "restart",
                              "save"], [4, 2, 1, 2, 5, 2, 2])[0]
        name = r.rnd.choice(NAMES)
        if what == "traffic" and name in r.users and name not in r.unsure:
            r.traffic(name)
            r.log.append(f"traffic {name}")
        elif what == "restart":
            r.restart()
        elif what == "save":  # the periodic state save (every 5 s), now
            os.kill(r.api.proxy.pid, signal.SIGUSR2)
            time.sleep(0.1)
            r.log.append("state saved")
        elif what != "traffic":
            r.op(what, name)
            r.log.append(f"{what} {name}")
        r.check()
    r.restart()
    r.check()


def test_random_restarts(procs, tmp_path):
    run(procs, tmp_path, None)


def test_random_restarts_with_limits_store(procs, bins, tmp_path):
    fleetlib = __import__("fleetlib")
    fleetlib.check_built_with_redis(bins)
    run(procs, tmp_path, fleetlib.Redis(procs))

