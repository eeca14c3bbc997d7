"""test_tools.py: self-checks of fake_dc and test_client talking directly (no proxy involved), and
that `mtproxy doctor` reports the descriptor budget the proxy itself fits to."""
import json
import os
import re
import resource
import signal
import socket
import subprocess
import time

import pytest

import harness
import tgprobe
from harness import assert_ok, free_ports, mtproxy_argv, new_secret, T


@pytest.fixture
def dc(procs):
    return procs.fake_dc([(7, "normal"), (8, "reset"), (9, "stall"), (10, "close")])


def direct(procs, dc, lid, tag="ef", up=4096, down=4096, *extra):
    return procs.client(dc.addr(lid), "00" * 16, tag, 2, up, down, "--direct", *extra,
                        timeout=60)


@pytest.mark.parametrize("tag", ["ef", "ee", "dd"])
def test_direct_roundtrip(procs, dc, tag):
    res = direct(procs, dc, 7, tag, 300000, 500000, "--expect-id", 7, "--expect-dc", 2)
    assert_ok(res)
    assert res["ids"] == [7] and res["dcs"] == [2]
    assert dc.wait_line(r"^DONE listener=7 up_ok=300000 mismatch=none$", 5)


def test_direct_many_and_large(procs, dc):
    assert_ok(direct(procs, dc, 7, "dd", 10 << 20, 10 << 20))
    res = direct(procs, dc, 7, "ee", 65536, 65536, "--conns", 200)
    assert_ok(res)
    assert res["up_total"] == res["down_total"] == 200 * 65536


def test_wrong_keys_are_detected(procs, dc):
    # A secret-keyed header sent straight to the DC decrypts to garbage: no hello.
    res = procs.client(dc.addr(7), "11" * 16, "ef", 2, 10, 10, "--timeout", "3")
    assert not res["ok"] and res["hellos"] == 0, res
    assert dc.wait_line(r"^BAD_HEADER listener=7 ", 5)


def test_modes(procs, dc):
    err = direct(procs, dc, 8, "ef", 1, 1, "--timeout", 3)["errors"][0]
    # qemu-user hands SO_ERROR's value through untranslated: on MIPS, whose ECONNRESET is 131,
    # the x86 host's 104 then reads "Unknown error 104" (a real MIPS says "reset").
    reset = r"(reset|Unknown error 104)" if harness.EMULATOR else "reset"
    assert re.search(r"^conn 0: (connect|header|hello).*" + reset, err), err
    res = direct(procs, dc, 9, "ef", 1, 1, "--timeout", 2)
    assert "hello: timeout" in res["errors"][0]
    assert "hello: eof" in direct(procs, dc, 10, "ef", 1, 1, "--timeout", 3)["errors"][0]
    assert dc.wait_line(r"^CLOSED listener=10 reason=mode_close$", 5)


def test_client_options(procs, dc):
    assert_ok(direct(procs, dc, 7, "ef", 1 << 20, 1 << 20, "--close-halfway", "--conns", 3))
    assert_ok(direct(procs, dc, 7, "ee", 1 << 20, 1 << 20, "--rst-after-trailer"))
    t0 = time.monotonic()
    assert_ok(direct(procs, dc, 7, "dd", 1000, 400000, "--slow-read", 400000))
    assert time.monotonic() - t0 > 0.7
    res = direct(procs, dc, 7, "ef", 10, 10, "--hold", 1, "--events")
    assert_ok(res)
    assert res["seconds"] >= 1.0


def test_client_reads_what_came_before_a_reset(procs, dc):
    # The DC resets only once the client's kernel has acknowledged every byte: a client that
    # reads slowly still holds most of them when the RST lands, and must read them all before
    # it reports the reset (under qemu this raced: "reset" with 93 KiB still unread).
    res = direct(procs, dc, 7, "ef", 1000, 1 << 20, "--rst-after-trailer", "--slow-read", 4 << 20)
    assert_ok(res)
    assert res["down_total"] == 1 << 20


def test_loopback_guard():
    # Checked without dialing anything: the guard must refuse before any connect() happens.
    harness._check_loopback(("127.0.0.1", 1))
    harness._check_loopback(("::1", 1, 0, 0))
    for bad in [("192.0.2.1", 443), ("10.0.0.1", 80), ("2001:db8::1", 443, 0, 0),
                ("example.org", 443)]:
        with pytest.raises(AssertionError):
            harness._check_loopback(bad)


def test_no_network_but_loopback():
    # ctest runs every socket test through tests/netns.sh: a network namespace with only
    # loopback, so nothing a test starts can reach the real DCs of the built-in table (or any
    # other outside address), even by mistake. Checked without dialing anything.
    if os.environ.get("MTPROXY_IN_NETNS") != "1":
        if os.environ.get("MTPROXY_REQUIRE_NETNS") == "1":
            pytest.fail("not run through tests/netns.sh")
        pytest.skip("no network namespace here (needs root, unshare, ip)")
    with open("/proc/net/dev") as f:
        ifaces = [line.split(":")[0].strip() for line in f.read().splitlines()[2:]]
    assert ifaces == ["lo"]
    with open("/proc/net/route") as f:
        assert len(f.read().splitlines()) == 1  # the header only: no IPv4 route anywhere


@pytest.mark.parametrize("tag", ["ef", "ee", "dd"])
def test_telethon_direct_to_fake_dc(procs, dc, tag):
    nonce, res = tgprobe.req_pq_direct(tag, dc.port[7])
    assert isinstance(res, tgprobe.ResPQ)
    assert res.nonce == nonce
    assert res.pq == bytes.fromhex("17ed48941a08f981")
    assert len(res.server_public_key_fingerprints) == 1
    m = dc.wait_line(r"^REQ_PQ_MULTI listener=7 tag=(\w+) dc=(-?\d+) nonce=([0-9a-f]+)$", 5)
    assert m and m.group(1) == tag and m.group(3) == tgprobe.nonce_hex(nonce), json.dumps(
        dc.lines[-5:])


def test_doctor_counts_what_the_proxy_needs(bins, tmp_path):
    """doctor's file-limit figure is the proxy's own (one budget, proxy/preflight.c): with a
    hard limit too low, doctor's `raise it to N` is the N the proxy says max-connections needs
    (dc-pool sockets counted: 4 per worker for the one DC id here)."""
    port, dc_port = free_ports(2)
    args = ["--listen", f"127.0.0.1:{port}", "--secret", f"a:{new_secret()}",
            "--dc-builtin", "off", "--dc", f"2 127.0.0.1:{dc_port}", "--dc-pool", "4",
            "--workers", "1", "--max-connections", "1000", "--mask", "off",
            "--tls-profile", "off", "--public-host", "127.0.0.1",
            "--state-file", str(tmp_path / "fds.state")]

    def low_fds():
        resource.setrlimit(resource.RLIMIT_NOFILE, (600, 600))

    doc = subprocess.run(mtproxy_argv(bins, "doctor", "--offline", *args), capture_output=True,
                         timeout=T(60), preexec_fn=low_fds)
    out = doc.stdout.decode()
    m = re.search(r"fix: raise it to (\d+): LimitNOFILE", out)
    assert m, out
    doctor_need = int(m.group(1))
    p = subprocess.Popen(mtproxy_argv(bins, *args), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, preexec_fn=low_fds)
    lines = []
    try:
        for raw in p.stderr:
            lines.append(raw.decode(errors="replace").rstrip("\n"))
            if re.search(r" started, pid ", lines[-1]):
                break
    finally:
        p.send_signal(signal.SIGTERM)
        _, rest = p.communicate(timeout=T(15))
    lines += rest.decode(errors="replace").splitlines()
    assert p.returncode == 0, "\n".join(lines)
    text = "\n".join(lines)
    m = re.search(r"max-connections 1000 needs (\d+) file descriptors but RLIMIT_NOFILE is 600: "
                  r"using max-connections (\d+)", text)
    assert m, text
    assert int(m.group(1)) == doctor_need, (out, text)
    # and that figure counts the pool: 2 per connection + per worker (listener, epoll, eventfd,
    # accept spare, splice pipes) + slack + 4 pooled DC sockets
    assert doctor_need > 2 * 1000 + 32 + 4


def _state_secret(path):
    m = re.search(r"^secret = default:([0-9a-f]{32})$", open(path).read(), re.M)
    assert m, open(path).read()
    return m.group(1)


def test_links_and_doctor_read_the_generated_secret(procs, dc, bins, tmp_path):
    """No secret configured: the proxy draws one and keeps it in the state file; `links` and
    `doctor` read it from there (by the config's state-file or --state-file), never make one."""
    proxy = procs.proxy([], [(2, dc.addr(7))])
    state = os.path.join(procs.workdir, "mtproxy.state")
    secret = _state_secret(state)
    conf = tmp_path / "gen.conf"
    conf.write_text(f"listen = 127.0.0.1:{proxy.port}\nstate-file = {state}\n"
                    f"public-host = 127.0.0.1\ndc-builtin = off\ndc = 2 {dc.addr(7)}\nmask = off\n"
                    "tls-profile = off\n")
    runs = [["--config", str(conf)],
            ["--listen", f"127.0.0.1:{proxy.port}", "--public-host", "127.0.0.1",
             "--state-file", state]]
    for args in runs:
        p = subprocess.run(mtproxy_argv(bins, "links", "--no-qr", *args), capture_output=True,
                           timeout=T(30))
        out = p.stdout.decode() + p.stderr.decode()
        assert p.returncode == 0, out
        assert f"server=127.0.0.1&port={proxy.port}&secret={secret}" in out, out
        assert "user default:" in out, out
    doc = subprocess.run(mtproxy_argv(bins, "doctor", "--offline", "--config", str(conf)),
                         capture_output=True, timeout=T(60))
    out = doc.stdout.decode()
    assert re.search(r"OK +config: valid \(1 listen address, 1 user\)", out), out
    # stopped: the file is still there and still read
    proxy.stop()
    p = subprocess.run(mtproxy_argv(bins, "links", "--no-qr", *runs[1]), capture_output=True,
                       timeout=T(30))
    assert p.returncode == 0 and secret in p.stdout.decode(), p.stdout + p.stderr
    # no state file: nothing is made, and links says so
    other = str(tmp_path / "none.state")
    p = subprocess.run(mtproxy_argv(bins, "links", "--no-qr", "--state-file", other),
                       capture_output=True, timeout=T(30))
    assert p.returncode == 1 and b"no state file" in p.stderr, p.stderr
    assert not os.path.exists(other)


def test_doctor_knows_its_own_running_proxy(procs, dc, bins):
    """doctor against the running proxy's own config: its listen port is in use by this proxy
    (the pid in the state file's lock file), not a failure; a port that something else holds
    still fails, also while the proxy runs."""
    proxy = procs.proxy([("a", new_secret())], [(2, dc.addr(7))])
    state = os.path.join(procs.workdir, "mtproxy.state")
    base = ["doctor", "--offline", "--secret", f"a:{new_secret()}", "--dc-builtin", "off",
            "--dc", f"2 {dc.addr(7)}", "--mask", "off", "--tls-profile", "off", "--public-host", "127.0.0.1",
            "--state-file", state]
    doc = subprocess.run(mtproxy_argv(bins, *base, "--listen", f"127.0.0.1:{proxy.port}"),
                         capture_output=True, timeout=T(60))
    out = doc.stdout.decode()
    assert re.search(rf"OK +listen 127\.0\.0\.1:{proxy.port}: in use by this proxy "
                     rf"\(pid {proxy.pid}\)", out), out
    assert doc.returncode == 0, out
    other = socket.socket()
    try:
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        port = other.getsockname()[1]
        doc = subprocess.run(mtproxy_argv(bins, *base, "--listen", f"127.0.0.1:{port}"),
                             capture_output=True, timeout=T(60))
    finally:
        other.close()
    out = doc.stdout.decode()
    assert re.search(rf"FAIL +listen 127\.0\.0\.1:{port}: already in use", out), out
    assert doc.returncode == 1, out


def test_port_or_lock_held_exits_tempfail(procs, dc, bins, tmp_path):
    """A port or the state-file lock held by another process: exit 75 (EX_TEMPFAIL, worth a
    retry), not 2 (a bad config)."""
    proxy = procs.proxy([("a", new_secret())], [(2, dc.addr(7))])
    state = os.path.join(procs.workdir, "mtproxy.state")
    common = ["--secret", f"a:{new_secret()}", "--dc-builtin", "off", "--dc",
              f"2 {dc.addr(7)}", "--mask", "off", "--tls-profile", "off", "--workers", "1"]
    free = free_ports(1)[0]
    cases = [("--listen", f"127.0.0.1:{proxy.port}", "--state-file", str(tmp_path / "b.state")),
             ("--listen", f"127.0.0.1:{free}", "--state-file", state)]
    for case in cases:
        p = subprocess.run(mtproxy_argv(bins, *common, *case), capture_output=True,
                           timeout=T(30), stdin=subprocess.DEVNULL)
        assert p.returncode == 75, (case, p.returncode, p.stderr.decode())
    # a bad config is still 2, also with a port in use beside it
    p = subprocess.run(mtproxy_argv(bins, *common, "--listen", f"127.0.0.1:{proxy.port}",
                                    "--workers", "nope"), capture_output=True, timeout=T(30))
    assert p.returncode == 2, p.stderr.decode()


def _vm_rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^VmRSS:\s+(\d+)", f.read(), re.M).group(1))


def test_replay_cache_costs_nothing_until_used(procs, dc):
    """The replay cache's memory becomes resident as hellos fill it, not at start: a cache of
    12 MiB starts with about the RSS of a 1 MiB one (its shards, each under glibc's
    mmap threshold, were cleared from the heap at start: 10 MiB more)."""
    rss = {}
    for size in ("1M", "12M"):
        proxy = procs.proxy([("a", new_secret())], [(2, dc.addr(7))],
                            extra=["--replay-cache", size], name=f"replay{size}")
        time.sleep(0.5)
        rss[size] = _vm_rss_kb(proxy.pid)
        proxy.stop()
    assert rss["12M"] - rss["1M"] < 4 * 1024, rss
