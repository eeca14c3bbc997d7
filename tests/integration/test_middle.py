"""test_middle.py: middle-proxy mode (ad tag) through the real binary to tests/tools/fake_me."""
import os
import re
import signal
import subprocess
import time
import urllib.request

import pytest

import tgprobe
from harness import EMULATOR, Proc, T, free_ports, new_secret, wait_until

AD_TAG = "0123456789abcdef0123456789abcdef"
REQ = (r"^REQ listener=(\d+) conn=([0-9a-f]{16}) flags=0x([0-9a-f]+) tag=(\w+) "
       r"remote=(\S+) ours=(\S+) len=(\d+) head=([0-9a-f]*)$")


def _bin(name):
    path = os.environ.get(name)
    if not path or not os.access(path, os.X_OK):
        pytest.skip(f"{name} not set")
    return path


class FakeME(Proc):
    """fake_me with listeners [(id, mode)]; .port[id]."""

    def __init__(self, workdir, listeners, secret_file, extra=(), name="fake_me", host="127.0.0.1"):
        ports = free_ports(len(listeners))
        self.port = {}
        self.host = host
        argv = EMULATOR + [_bin("FAKE_ME_BIN"), "--secret-file", secret_file] + list(extra)
        for (lid, mode), port in zip(listeners, ports):
            argv += ["--listen", f"{host}:{port},{lid},{mode}"]
            self.port[lid] = port
        super().__init__(name, argv, workdir)
        if not self.wait_line(r"^READY$", 10):
            self.stop()
            raise RuntimeError(f"fake_me did not start: {self.stderr_tail()}")

    def reqs(self, start=0):
        return self.matching(REQ, start)


class Middle:
    """A fake ME, Telegram's two files pointing at it, and mtproxy in middle mode."""

    def __init__(self, procs, listeners=((2, "normal"),), dcs=None, extra=(), me_extra=(),
                 default=2, nat=None, me_host="127.0.0.1"):
        self.procs = procs
        self.dir = procs.workdir
        self.secret_file = os.path.join(self.dir, "proxy-secret")
        with open(self.secret_file, "wb") as f:
            f.write(os.urandom(128))
        self.me = FakeME(self.dir, list(listeners), self.secret_file, extra=me_extra,
                         host=me_host)
        procs.all.append(self.me)
        self.config_file = os.path.join(self.dir, "proxy-multi.conf")
        self.write_config(dcs or [(lid, lid) for lid, _ in listeners], default)
        self.plain = new_secret()
        self.dd = "dd" + new_secret()
        self.ee = "ee" + new_secret() + b"www.example.com".hex()
        args = ["--ad-tag", AD_TAG, "--proxy-secret-file", self.secret_file,
                "--proxy-config-file", self.config_file, "--me-pool", "1",
                "--idle-timeout", "120s"] + list(extra)
        if nat:
            args += ["--nat-info", nat]
        self.proxy = procs.proxy([("plain", self.plain), ("padded", self.dd), ("tls", self.ee)],
                                 [], extra=args)

    def write_config(self, dcs, default=2):
        """dcs: [(dc id, listener id)]; written atomically like mtproxy-update-config."""
        text = "# fake getProxyConfig\n"
        if default:
            text += f"default {default};\n"
        for dc, lid in dcs:
            text += f"proxy_for {dc} {self.me.host}:{self.me.port[lid]};\n"
        tmp = self.config_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.config_file)

    def client(self, *args, secret=None, timeout=60):
        argv = EMULATOR + [_bin("ME_CLIENT_BIN"), "--proxy", self.proxy.addr,
                           "--secret", secret or self.plain] + [str(a) for a in args]
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=T(timeout))
        return p.returncode, p.stdout.decode(), p.stderr.decode()

    def client_bg(self, *args, secret=None):
        argv = EMULATOR + [_bin("ME_CLIENT_BIN"), "--proxy", self.proxy.addr,
                           "--secret", secret or self.plain] + [str(a) for a in args]
        p = Proc("me_client", argv, self.dir)
        self.procs.all.append(p)
        return p

    def log_wait(self, regex, timeout=10):
        return wait_until(lambda: re.search(regex, self.proxy.stderr_tail(4000), re.M), timeout)

    def stats(self):
        """The proxy's counters (SIGUSR1 -> stats lines in its log)."""
        before = self.proxy.stderr_tail(100000).count("stats: closed:")
        self.proxy.p.send_signal(signal.SIGUSR1)
        wait_until(lambda: self.proxy.stderr_tail(100000).count("stats: closed:") > before, 5)
        wait_until(lambda: self.proxy.stderr_tail(100000).count("stats: me ") > before, 5)
        text = self.proxy.stderr_tail(5000)
        out = {}
        for line in text.splitlines():
            if "stats: me " in line:
                words = line.split("stats: me ", 1)[1].split()
                out.update({"me_" + k: int(v) for k, v in zip(words[::2], words[1::2])})
            elif "stats: closed:" in line:
                words = line.split("stats: closed:", 1)[1].split()
                out.update({"closed_" + k: int(v) for k, v in zip(words[::2], words[1::2])})
        return out


def summary(out):
    m = re.search(r"^SUMMARY ok=(\d+) fail=(\d+) bytes=(\d+) secs=([\d.]+) mibps=([\d.]+) "
                  r"min_mibps=([\d.]+) med_mibps=([\d.]+) ", out, re.M)
    assert m, out
    return {"ok": int(m[1]), "fail": int(m[2]), "bytes": int(m[3]), "secs": float(m[4]),
            "mibps": float(m[5]), "min": float(m[6]), "med": float(m[7])}


def ports_of(out):
    return {int(m[1]): int(m[2]) for m in re.finditer(r"^CLIENT (\d+) port=(\d+)$", out, re.M)}


def wait_ready(mid, links=1):
    assert mid.me.wait_line(r"^HANDSHAKE_OK", 10), mid.me.lines
    wait_until(lambda: len(mid.me.matching(r"^HANDSHAKE_OK")) >= links, 5)


# Framing -> RPC_PROXY_REQ flags (PROTOCOL.md 6.5): MAGIC | EXTMODE2 | HAS_AD_TAG always.
FRAMING_FLAGS = {"ef": 0x40000000, "ee": 0x20000000, "dd": 0x28000000}


# (framing, secret kind): plain secrets carry ef/ee/dd; a dd secret dd; FakeTLS (an ee secret)
# is padded intermediate inside TLS records.
@pytest.mark.parametrize("tag,kind", [("ef", "plain"), ("ee", "plain"), ("dd", "dd"),
                                      ("dd", "tls")])
def test_every_framing_arrives_as_proxy_req(procs, tag, kind):
    v6 = free_ports(1)[0]
    mid = Middle(procs, extra=["--listen", f"[::1]:{v6}"])
    wait_ready(mid)
    secret = {"plain": mid.plain, "dd": mid.dd, "tls": mid.ee}[kind]
    for addr, host in ((mid.proxy.addr, "127.0.0.1"), (f"[::1]:{v6}", "[::1]")):
        mark = mid.me.mark()
        mid.proxy.addr, saved = addr, mid.proxy.addr
        rc, out, err = mid.client("--tag", tag, "--echo", 3, "--quickack", "--clients", 2,
                                  "--size", 600, secret=secret)
        mid.proxy.addr = saved
        assert rc == 0, out + err
        ports = set(ports_of(out).values())
        wait_until(lambda: len(mid.me.reqs(mark)) >= 6, 5)  # lines are read in a thread
        reqs = mid.me.reqs(mark)
        assert len(reqs) == 6, mid.me.lines[mark:]
        port = addr.rsplit(":", 1)[1]
        for r in reqs:
            flags = int(r[3], 16)
            assert flags & 0x1000 and flags & 0x20000 and flags & 0x8, hex(flags)
            assert flags & 0x68000000 == FRAMING_FLAGS[tag], hex(flags)
            assert flags & 0x80000000, "quick-ack request lost"
            assert not flags & 0x2  # encrypted-looking packets ("ECHOECHO" auth key id)
            assert r[4] == AD_TAG
            rhost, rport = r[5].rsplit(":", 1)
            assert rhost == host and int(rport) in ports, r[0]
            assert r[6] == f"{host}:{port}", r[0]
            assert int(r[7]) == 600
            assert r[8].startswith("4543484f4543484f")  # ECHOECHO
        assert len({r[2] for r in reqs}) == 2  # one conn id per client


def test_answers_reach_the_right_client_among_200(procs):
    mid = Middle(procs, extra=["--workers", "2"])  # each worker has its own links
    wait_ready(mid, 2)
    rc, out, err = mid.client("--tag", "ee", "--echo", 5, "--clients", 200, "--size", 256,
                              timeout=90)
    s = summary(out)
    assert rc == 0 and s["ok"] == 200, out[-3000:] + err
    # the harness reads the fake ME's lines in the background: they may trail the answers
    assert wait_until(lambda: len(mid.me.reqs()) == 1000, T(5)), mid.me.reqs()
    st = mid.stats()
    assert st["me_answers"] == 1000 and st["me_requests"] == 1000, st


def test_no_dc_pool_in_middle_mode(procs):
    # dc-pool is for direct mode: in middle mode no client dials a DC, so a DC in the table
    # gets no pre-connected socket (a pool here would only hold idle connections to Telegram).
    dc = procs.fake_dc([(2, "normal")])
    mid = Middle(procs, extra=["--dc", f"2 {dc.addr(2)}", "--dc-pool", "2"])
    wait_ready(mid)
    rc, out, err = mid.client("--tag", "dd", "--echo", 2, "--clients", 2, "--size", 64)
    assert rc == 0 and summary(out)["ok"] == 2, out[-3000:] + err
    time.sleep(0.5)
    assert dc.accepts() == 0, dc.lines


def test_ipv6_me(procs):
    mid = Middle(procs, me_host="[::1]")
    wait_ready(mid)
    rc, out, err = mid.client("--echo", 2, "--quickack")
    assert rc == 0, out + err
    # the harness reads the fake ME's lines in the background: they may trail the answers
    assert wait_until(lambda: len(mid.me.reqs()) == 2, T(5)), mid.me.reqs()


def test_unknown_and_media_dcs(procs):
    mid = Middle(procs, listeners=((2, "normal"), (4, "normal"), (5, "normal")),
                 dcs=[(2, 2), (4, 4), (-4, 5)])
    wait_ready(mid, 3)
    for dc, lid in ((4, 4), (-4, 5), (99, 2), (-99, 2), (2, 2)):
        mark = mid.me.mark()
        rc, out, err = mid.client("--dc", dc, "--echo", 1)
        assert rc == 0, out + err
        wait_until(lambda: mid.me.reqs(mark), 5)  # lines are read in a thread
        reqs = mid.me.reqs(mark)
        assert [int(r[1]) for r in reqs] == [lid], (dc, mid.me.lines[mark:])


def test_slow_client_does_not_slow_the_others(procs):
    # Small socket buffers so a client that stops reading backs up into the proxy quickly.
    mid = Middle(procs, extra=["--sndbuf", "65536"])
    wait_ready(mid)
    # (under an emulator: 256 KiB each, or the run takes minutes)
    each = (256 << 10) if EMULATOR else (1 << 20)
    common = ["--tag", "ee", "--clients", 200, "--download", each, "--chunk", 16384]

    def run(stall):
        args = common + (["--stall", 1, "--stall-bytes", 16 << 20, "--hold-ms", 1500]
                         if stall else [])
        rc, out, err = mid.client(*args, timeout=120)
        s = summary(out)
        assert rc == 0 and s["ok"] == 200, out[-3000:] + err
        return s

    runs = []  # stalled runs: each closes its stalled client as slow

    def pair():
        b = run(False)
        runs.append(1)
        return b, run(True)

    base, slow = pair()
    if slow["mibps"] < 0.8 * base["mibps"]:  # a loaded machine: measure both once more
        base, slow = pair()
    print(f"199 readers: {base['mibps']:.1f} MiB/s alone, {slow['mibps']:.1f} MiB/s beside a "
          f"client that stopped reading")
    assert slow["mibps"] >= 0.8 * base["mibps"], (base, slow)
    st = mid.stats()
    assert st["me_slow_closed"] == len(runs) and st["closed_slow-client"] == len(runs), st
    assert st["me_link_drops"] == 0, st


@pytest.mark.parametrize("mode,why", [("reset", "link lost"), ("drop", "link lost"),
                                      ("badcrc", r"link lost \(bad crc\)"),
                                      ("badseq", r"link lost \(wrong seqno\)")])
def test_link_failure_closes_its_clients_and_reconnects(procs, mode, why):
    mid = Middle(procs, listeners=((2, mode),))
    wait_ready(mid)
    rc, out, err = mid.client("--tag", "ef", "--download", 1 << 20, "--clients", 3, timeout=30)
    assert summary(out)["fail"] >= 1, out  # their link died under them
    assert mid.log_wait(why), mid.proxy.stderr_tail(40)
    st = mid.stats()
    assert st["me_link_drops"] >= 1 and st["me_dead_closed"] >= 1, st
    assert st["closed_me-link-lost"] == st["me_dead_closed"], st
    # back-off, then a new link
    assert wait_until(lambda: len(mid.me.matching(r"^HANDSHAKE_OK")) >= 2, T(10))
    assert mid.proxy.alive()


def test_silent_me_is_pinged_then_dropped(procs):
    mid = Middle(procs, listeners=((2, "mute"),), extra=["--me-ping-interval", "1s"])
    wait_ready(mid)
    client = mid.client_bg("--echo", 1, "--timeout", 20)
    assert mid.me.wait_line(r"^REQ listener=2 ", 10)  # read, never answered
    assert mid.log_wait(r"link lost \(no answer to a ping\), closing its 1 client", T(10)), \
        mid.proxy.stderr_tail(20)
    assert client.wait_line(r"^FAIL 0 why=eof", 5), client.lines
    st = mid.stats()
    assert st["me_dead_closed"] == 1 and st["me_link_drops"] >= 1, st
    assert wait_until(lambda: len(mid.me.matching(r"^HANDSHAKE_OK")) >= 2, T(10))


def test_bad_handshake_answer(procs):
    mid = Middle(procs, listeners=((2, "garbage"),))
    assert mid.me.wait_line(r"^GARBAGE", 10)
    assert mid.log_wait(r"ME handshake failed: check nat-info"), mid.proxy.stderr_tail(20)
    rc, out, err = mid.client("--echo", 1, timeout=30)
    assert rc != 0  # no ME to serve it: closed, not hung
    assert mid.stats()["me_handshake_fails"] >= 1


def test_stalled_handshake_times_out(procs):
    mid = Middle(procs, listeners=((2, "stall"),))
    assert mid.me.wait_line(r"^STALL", 10)
    assert mid.log_wait(r"ME handshake failed: check nat-info.*no handshake answer in time",
                        T(10)), mid.proxy.stderr_tail(20)


def test_wrong_nat_info_gives_the_log_line(procs):
    mid = Middle(procs, nat="127.0.0.1:10.9.8.7")
    assert mid.me.wait_line(r"^HANDSHAKE_BAD", 10), mid.me.lines
    assert mid.log_wait(r"ME handshake failed: check nat-info"), mid.proxy.stderr_tail(20)


def test_right_nat_info_works(procs):
    mid = Middle(procs, nat="127.0.0.1:10.9.8.7", me_extra=["--clt-ip", "10.9.8.7"])
    wait_ready(mid)
    rc, out, err = mid.client("--echo", 2)
    assert rc == 0, out + err
    # the harness reads the fake ME's lines in a thread: wait for the request's line
    assert wait_until(lambda: mid.me.reqs(), 5), mid.me.lines
    r = mid.me.reqs()[0]
    assert r[6].startswith("10.9.8.7:")  # our address as the ME knows it


def test_me_ping_answered(procs):
    mid = Middle(procs, me_extra=["--ping"])
    assert mid.me.wait_line(r"^PONG listener=2 id=4242$", 10), mid.me.lines
    assert mid.stats()["me_pings"] == 1


def test_client_close_tells_the_me_and_close_ext_closes_the_client(procs):
    mid = Middle(procs)
    wait_ready(mid)
    rc, out, err = mid.client("--echo", 1)
    assert rc == 0
    assert wait_until(lambda: mid.me.reqs(), 5), mid.me.lines  # read in a thread
    conn = mid.me.reqs()[0][2]
    assert mid.me.wait_line(rf"^CLOSE_CONN listener=2 conn={conn}$", 5)


def test_sighup_moves_new_clients_old_ones_finish(procs):
    mid = Middle(procs, listeners=((1, "normal"), (2, "normal")), dcs=[(2, 1)])
    wait_ready(mid)
    old = mid.client_bg("--echo", 30, "--gap-ms", 100)
    assert old.wait_line(r"^CLIENT 0 port=", 10)
    assert mid.me.wait_line(r"^REQ listener=1 ", 10)
    mid.write_config([(2, 2)])
    mark = mid.me.mark()
    mid.proxy.p.send_signal(signal.SIGHUP)
    assert mid.log_wait(r"SIGHUP: middle-proxy files reloaded"), mid.proxy.stderr_tail(20)
    assert mid.me.wait_line(r"^HANDSHAKE_OK listener=2", 10, start=mark)
    rc, out, err = mid.client("--echo", 2)
    assert rc == 0, out + err
    new = mid.me.reqs(mark)
    new_port = ports_of(out)[0]
    wait_until(lambda: len([r for r in mid.me.reqs(mark) if r[5].endswith(f":{new_port}")]) >= 2,
               5)  # lines are read in a thread
    new = mid.me.reqs(mark)
    assert [int(r[1]) for r in new if r[5].endswith(f":{new_port}")] == [2, 2]
    assert old.wait_line(r"^SUMMARY ok=1 fail=0", 20), old.lines
    # the old client kept its link to the old ME after the reload
    old_port = int(old.wait_line(r"^CLIENT 0 port=(\d+)", 1)[1])
    after = [int(r[1]) for r in mid.me.reqs(mark) if r[5].endswith(f":{old_port}")]
    assert after and set(after) == {1}, after
    # a bad file on SIGHUP keeps the current table
    with open(mid.config_file, "w") as f:
        f.write("proxy_for 2 nonsense;\n")
    mid.proxy.p.send_signal(signal.SIGHUP)
    assert mid.log_wait(r"not reloaded, keeping the current ones: .*proxy-multi.conf:1: "), \
        mid.proxy.stderr_tail(20)
    rc, out, err = mid.client("--echo", 1)
    assert rc == 0


def test_sighup_reloads_the_config_in_middle_mode(procs, tmp_path):
    """The config generation reaches the workers in middle mode too (one command handler per
    worker serves both reloads): a deny entry added on SIGHUP refuses new loopback clients."""
    conf = tmp_path / "m.conf"
    conf.write_text("# nothing yet\n")
    mid = Middle(procs, extra=["--config", str(conf)])
    wait_ready(mid)
    rc, out, err = mid.client("--echo", 1)
    assert rc == 0, out + err
    conf.write_text("deny = 127.0.0.0/8\n")
    mid.proxy.p.send_signal(signal.SIGHUP)
    assert mid.log_wait(r"configuration 2 loaded"), mid.proxy.stderr_tail(20)
    assert mid.log_wait(r"SIGHUP: middle-proxy files reloaded"), mid.proxy.stderr_tail(20)
    assert wait_until(lambda: mid.client("--echo", 1, timeout=20)[0] != 0, 5), \
        mid.proxy.stderr_tail(20)
    # and the ME links still serve once the entry is gone again
    conf.write_text("# open again\n")
    mid.proxy.p.send_signal(signal.SIGHUP)
    assert mid.log_wait(r"configuration 3 loaded"), mid.proxy.stderr_tail(20)
    assert wait_until(lambda: mid.client("--echo", 1, timeout=20)[0] == 0, 5), \
        mid.proxy.stderr_tail(20)


@pytest.mark.parametrize("tag", ["ef", "ee", "dd"])
def test_telethon_through_middle_mode(procs, tag):
    mid = Middle(procs)
    wait_ready(mid)
    nonce, res = tgprobe.req_pq_via_proxy(tag, mid.proxy.port, mid.plain, 2, timeout=T(10))
    assert isinstance(res, tgprobe.ResPQ), res
    assert res.nonce == nonce
    assert res.pq == bytes.fromhex("17ed48941a08f981")
    m = mid.me.wait_line(r"^REQ_PQ_MULTI listener=2 nonce=([0-9a-f]{32})$", 5)
    assert m and m[1] == tgprobe.nonce_hex(nonce)
    req = mid.me.reqs()[0]
    assert int(req[3], 16) & 0x2  # NOT_ENCRYPTED: auth_key_id 0


def run_check(bins, tmp_path, *args):
    from harness import mtproxy_argv
    argv = mtproxy_argv(bins, "--check-config", "--listen", "127.0.0.1:1", "--secret",
                        "a:" + new_secret(), *args)
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=T(20),
                       cwd=tmp_path)
    return p.returncode, p.stdout.decode() + p.stderr.decode()


def test_check_config(bins, tmp_path):
    if not bins["mtproxy"]:
        pytest.skip("no mtproxy")
    sec = tmp_path / "sec"
    sec.write_bytes(os.urandom(128))
    conf = tmp_path / "conf"
    conf.write_text("default 2;\nproxy_for 2 127.0.0.1:8888;\n")
    base = ["--ad-tag", AD_TAG, "--proxy-secret-file", str(sec), "--proxy-config-file",
            str(conf)]
    rc, out = run_check(bins, tmp_path, *base)
    assert rc == 0 and "middle-proxy mode: 1 ME address" in out, out
    conf.write_text("default 2;\nproxy_for 2 127.0.0.1:8888;\nproxy_for 3 1.2.3.4;\n")
    rc, out = run_check(bins, tmp_path, *base)
    assert rc == 2 and f"{conf}:3: bad address" in out, out
    conf.write_text("default 2;\nproxy_for 2 127.0.0.1:8888;\n")
    sec.write_bytes(os.urandom(16))
    rc, out = run_check(bins, tmp_path, *base)
    assert rc == 2 and "this file has 16" in out, out
    rc, out = run_check(bins, tmp_path, "--ad-tag", AD_TAG)
    assert rc == 2 and "needs proxy-secret-file and proxy-config-file" in out, out
    rc, out = run_check(bins, tmp_path, "--ad-tag", "xyz")
    assert rc == 2 and "ad-tag must be 32 hex digits" in out, out
    rc, out = run_check(bins, tmp_path, *base, "--nat-info", "10.0.0.1")
    assert rc == 2 and "nat-info must be PRIVATE:PUBLIC" in out, out
    sec.write_bytes(os.urandom(128))
    rc, out = run_check(bins, tmp_path, *base, "--nat-info", "[fd00::1]:[2001:db8::1]",
                        "--nat-info", "10.0.0.1:203.0.113.1", "--me-pool", "3")
    assert rc == 0, out


# --------------------------------------------------------------------------------------------
# ME links through a SOCKS5 server (socks5 = URL, #16)

def descendants(pid):
    """pid's child processes, and theirs."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except OSError:
        return []
    return kids + [d for k in kids for d in descendants(k)]


def metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=T(5)) as r:
        m = re.search(rf"^{name} (\d+)$", r.read().decode(), re.M)
    assert m, name
    return int(m[1])


def test_me_links_through_socks5(procs):
    from test_socks5 import RelaySocks
    relay = RelaySocks()
    mport = free_ports(1)[0]
    try:
        mid = Middle(procs, extra=["--socks5", f"socks5://127.0.0.1:{relay.port}",
                                   "--metrics", f"127.0.0.1:{mport}"])
        wait_ready(mid)
        me_port = mid.me.port[2]
        # the link went through the relay to the ME, and the keys matched the address the ME
        # saw (the relay's outgoing socket, which it reported): the handshake completed
        assert relay.targets and relay.targets[0][:2] == ("127.0.0.1", me_port), relay.targets
        assert not mid.me.matching(r"^HANDSHAKE_BAD")
        assert wait_until(lambda: metric(mport, "mtproxy_me_links_open") == 1, T(5))
        rc, out, err = mid.client("--tag", "dd", "--echo", 3, "--clients", 2, "--size", 600)
        assert rc == 0, out + err
        # the harness reads the fake ME's lines in the background: they may trail the answers
        assert wait_until(lambda: len(mid.me.reqs()) == 6, T(5)), mid.me.reqs()
        # the relay gone: the link fails (counted), the gauge drops, clients are not served
        relay.stop()
        assert wait_until(lambda: metric(mport, "mtproxy_me_links_open") == 0, T(10))
        assert wait_until(lambda: mid.stats()["me_link_drops"] >= 1, T(10))
        assert wait_until(lambda: mid.stats()["me_connect_fails"] >= 1, T(10))
        rc, out, err = mid.client("--tag", "dd", "--echo", 1, "--timeout", 3, timeout=20)
        assert rc != 0, out
        # back: the link reconnects through it (after its back-off) and serves again
        n = len(relay.targets)
        relay.start()
        assert wait_until(lambda: len(mid.me.matching(r"^HANDSHAKE_OK")) >= 2, T(40))
        assert len(relay.targets) > n
        assert wait_until(lambda: metric(mport, "mtproxy_me_links_open") == 1, T(5))
        rc, out, err = mid.client("--tag", "ef", "--echo", 2)
        assert rc == 0, out + err
    finally:
        relay.stop()


def test_me_links_through_dante(procs):
    # a real SOCKS5 server that reports its outgoing address: clients served end to end
    from test_socks5 import dante
    port, server = dante(procs)
    mid = Middle(procs, extra=["--socks5", f"socks5://127.0.0.1:{port}"])
    wait_ready(mid)
    me_port = mid.me.port[2]
    assert wait_until(lambda: re.search(rf"-> 127\.0\.0\.1\.\d+ 127\.0\.0\.1\.{me_port}\b",
                                        server.stderr_tail(50)), T(5)), server.stderr_tail(20)
    rc, out, err = mid.client("--tag", "ee", "--echo", 3, "--clients", 3, "--size", 2000)
    assert rc == 0, out + err
    # the harness reads the fake ME's lines in the background: they may trail the answers
    assert wait_until(lambda: len(mid.me.reqs()) == 9, T(5)), mid.me.reqs()
    assert mid.stats()["me_links_open"] == 1
    # the ME is reached only through it: danted and its children (which hold the relayed
    # link) killed, the link fails
    tree = descendants(server.pid)
    server.stop(signal.SIGKILL)
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert wait_until(lambda: mid.stats()["me_links_open"] == 0, T(10))


def test_me_refused_by_socks5_is_logged_and_counted(procs):
    from test_socks5 import ScriptedSocks
    srv = ScriptedSocks(5)
    try:
        mid = Middle(procs, extra=["--socks5", f"socks5://127.0.0.1:{srv.port}"])
        assert mid.log_wait(r"refused the ME: connection refused \(reply 5\)", T(10)), \
            mid.proxy.stderr_tail(40)
        assert srv.connects and srv.connects[0][:2] == b"\x05\x01"
        assert mid.stats()["me_connect_fails"] >= 1
        assert not mid.me.matching(r"^HANDSHAKE")  # nothing reached the ME
    finally:
        srv.close()


def test_me_through_microsocks(procs):
    # microsocks relays the link (its log names the ME) but reports no bound address (all
    # zeros): the port the ME sees is unknowable, so the keys cannot match; the proxy says
    # why and counts the failed handshakes (README: socks5 and middle mode).
    from test_socks5 import microsocks
    port, server = microsocks(procs)
    mid = Middle(procs, extra=["--socks5", f"socks5://127.0.0.1:{port}"])
    me_port = mid.me.port[2]
    assert wait_until(lambda: f"connected to 127.0.0.1:{me_port}" in server.stderr_tail(50),
                      T(10)), server.stderr_tail(20)
    assert mid.log_wait(r"the socks5 server did not say where it connects from", T(10))
    assert mid.me.wait_line(r"^HANDSHAKE_BAD", T(10)), mid.me.lines
    assert wait_until(lambda: mid.stats()["me_handshake_fails"] >= 1, T(10))
