"""test_acl.py: allow/deny lists and list files: refused sources get no byte, others are served."""
import os
import socket
import subprocess
import time

import pytest

from harness import (DC_IDS, T, assert_ok, free_ports, mtproxy_argv, new_secret, wait_until)
from proxyinfo import stats
import rawclient


def setup(procs, extra, listen6=False):
    secret = new_secret()
    dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
    extra = list(extra)
    v6port = None
    if listen6:
        v6port = free_ports(1)[0]
        extra += ["--listen", f"[::1]:{v6port}"]
    proxy = procs.proxy([("plain", secret)], [(i, dc.addr(i)) for i in DC_IDS], extra=extra)
    return secret, dc, proxy, v6port


def session(addr, secret, bind=None):
    """A valid header and test request from `bind`; returns (bytes received, how it ended,
    seconds). A served client gets fake_dc's hello within a second."""
    t0 = time.monotonic()
    try:
        s, _ = rawclient.start_session(addr, secret, tag="ee", dc=2, up=0, down=1000, bind=bind)
    except (ConnectionResetError, BrokenPipeError):
        return b"", "reset", time.monotonic() - t0
    s.settimeout(T(3))
    got, how = b"", "open"
    try:
        while len(got) < 64:
            chunk = s.recv(4096)
            if not chunk:
                how = "eof"
                break
            got += chunk
    except ConnectionResetError:
        how = "reset"
    except socket.timeout:
        how = "open"
    finally:
        s.close()
    return got, how, time.monotonic() - t0


def assert_refused(addr, secret, src):
    got, how, secs = session(addr, secret, bind=src)
    assert got == b"", f"{src} is refused but got {got[:32]!r}"
    assert how in ("eof", "reset"), f"{src}: connection left {how}"
    # Closed at accept: no handshake wait (the hold of a bad client lasts ~handshake-timeout).
    assert secs < T(0.5), f"{src}: closed after {secs:.2f} s"


def assert_served(addr, secret, src):
    got, how, _ = session(addr, secret, bind=src)
    assert len(got) >= 64, f"{src} is allowed but got {len(got)} bytes ({how})"


def test_deny_wins_and_files(procs, tmp_path):
    deny_file = tmp_path / "deny.netset"
    deny_file.write_text("# FireHOL-style list\n127.0.0.3\n\n127.0.9.0/24  # a block\n")
    secret, dc, proxy, _ = setup(procs, ["--allow", "127.0.0.0/8", "--deny", "127.0.0.2",
                                         "--deny-file", str(deny_file)])
    mark = dc.mark()
    for src in ("127.0.0.2", "127.0.0.3", "127.0.9.9"):
        assert_refused(proxy.addr, secret, src)
    # Nothing of a refused client reached the DC.
    assert dc.headers(mark) == 0
    for src in ("127.0.0.5", "127.0.8.255", "127.0.10.0"):
        assert_served(proxy.addr, secret, src)
    assert_ok(procs.client(proxy, secret, "ef", 2, 100000, 100000))
    st = stats(proxy)
    assert st["acl_denied"] == 3, st
    assert st["acl_not_allowed"] == 0, st


def test_allow_only(procs):
    secret, dc, proxy, v6port = setup(procs, ["--allow", "127.0.0.1", "--allow", "::1/128"],
                                      listen6=True)
    assert_refused(proxy.addr, secret, "127.0.0.4")
    assert_refused(proxy.addr, secret, "127.1.2.3")
    assert_served(proxy.addr, secret, "127.0.0.1")
    assert_served(f"[::1]:{v6port}", secret, None)
    st = stats(proxy)
    assert st["acl_not_allowed"] == 2 and st["acl_denied"] == 0, st


def test_ipv6_deny(procs):
    secret, dc, proxy, v6port = setup(procs, ["--deny", "::1"], listen6=True)
    assert_refused(f"[::1]:{v6port}", secret, None)
    assert_served(proxy.addr, secret, "127.0.0.1")
    assert stats(proxy)["acl_denied"] == 1


def test_100k_entry_list(procs, tmp_path):
    """100,000 entries load at start, and lookups still decide right at both ends."""
    path = tmp_path / "big.netset"
    with open(path, "w") as f:
        f.write("# 99,900 separate /32s in 10.0.0.0/8 and 100 /24s in 127.0.0.0/8\n")
        for i in range(100000 - 100):
            f.write(f"10.{i >> 15 & 255}.{i >> 7 & 255}.{(i & 127) * 2}\n")
        for i in range(100):
            f.write(f"127.{100 + i}.7.0/24\n")
    secret, dc, proxy, _ = setup(procs, ["--deny-file", str(path)])
    assert "access list: 0 allow and 100000 deny ranges" in proxy.stderr_tail(400)
    assert_refused(proxy.addr, secret, "127.100.7.1")
    assert_refused(proxy.addr, secret, "127.199.7.254")
    assert_served(proxy.addr, secret, "127.99.7.1")
    assert_served(proxy.addr, secret, "127.200.7.1")
    assert_served(proxy.addr, secret, "127.100.8.1")


def test_check_config_reports_list_lines(bins, tmp_path):
    if not bins["mtproxy"]:
        pytest.skip("MTPROXY_BIN not set")
    path = tmp_path / "bad.netset"
    path.write_text("10.0.0.0/8\n10.0.0.1/8\n\nnonsense\n")
    port = free_ports(1)[0]
    r = subprocess.run(mtproxy_argv(bins, "--check-config", "--listen", f"127.0.0.1:{port}",
                                    "--secret", f"a:{new_secret()}", "--dc-builtin", "off",
                                    "--dc", "2 127.0.0.1:1", "--mask", "off",
                                    "--allow-file", str(path), "--deny", "300.1.1.1"),
                       capture_output=True, timeout=T(20))
    out = (r.stdout + r.stderr).decode()
    assert r.returncode != 0, out
    assert f"{path}:2: " in out and "did you mean 10.0.0.0/8" in out, out
    assert f"{path}:4: " in out, out
    assert "--deny: " in out and "300.1.1.1" in out, out
    assert "3 configuration errors" in out, out
