"""test_check_config.py: --check-config reports every bad line as path:LINE: and exits non-zero."""
import re
import subprocess

import pytest

from harness import T, free_ports, mtproxy_argv


@pytest.fixture
def mtproxy(bins):
    if not bins["mtproxy"]:
        pytest.skip("MTPROXY_BIN not set")
    return bins["mtproxy"]


def check(mtproxy, path, *extra):
    r = subprocess.run(mtproxy_argv({"mtproxy": mtproxy}, "--check-config", "--config", path,
                                    *extra), capture_output=True, timeout=T(20))
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


def good_config(port):
    return "\n".join([
        "# a complete, valid configuration",
        f"listen = 127.0.0.1:{port}",
        "secret = alice:00112233445566778899aabbccddeeff",
        "secret = bob:dd0123456789abcdef0123456789abcdee",
        "dc = 2 127.0.0.1:1",
        "dc = 2 127.0.0.1:2",
        "dc = -2 127.0.0.1:3",
        "dc-builtin = off",
        "workers = 2   # trailing comment",
        'log-level = "debug"',
        "handshake-timeout = 1500ms",
        "",
    ])


def test_good_file(mtproxy, tmp_path):
    path = tmp_path / "good.conf"
    path.write_text(good_config(free_ports(1)[0]))
    rc, out = check(mtproxy, path)
    assert rc == 0, out


def test_bad_lines_each_reported(mtproxy, tmp_path):
    port = free_ports(1)[0]
    lines = [
        "# comment",                                        # 1
        f"listen = 127.0.0.1:{port}",                      # 2 ok
        "workers = many",                                   # 3 bad int
        "no-such-key = 1",                                  # 4 unknown key
        "secret = alice:0123",                              # 5 short secret
        "dc = 2 127.0.0.1:443",                             # 6 ok
        "dc-builtin = off",                                 # 7 ok
        "max-connections = -5",                             # 8 out of range
        "idle-timeout = forever",                           # 9 bad duration
        "just some words",                                  # 10 no '='
        "dc = two 127.0.0.1:443",                           # 11 bad dc id
        "log-level = loud",                                 # 12 bad enum
        "",                                                 # 13
    ]
    path = tmp_path / "bad.conf"
    path.write_text("\n".join(lines))
    rc, out = check(mtproxy, path)
    assert rc != 0, out
    for n in (3, 4, 5, 8, 9, 10, 11, 12):
        assert re.search(rf"^{re.escape(str(path))}:{n}: \S", out, re.M), \
            f"line {n} not reported:\n{out}"
    for n in (1, 2, 6, 7, 13):
        assert not re.search(rf"^{re.escape(str(path))}:{n}:", out, re.M), \
            f"good line {n} reported:\n{out}"


def test_missing_file(mtproxy, tmp_path):
    rc, out = check(mtproxy, tmp_path / "nope.conf")
    assert rc != 0 and "nope.conf" in out, out


def test_command_line_errors(mtproxy, tmp_path):
    path = tmp_path / "good.conf"
    path.write_text(good_config(free_ports(1)[0]))
    rc, out = check(mtproxy, path, "--workers", "-1")
    assert rc != 0 and "workers" in out, out
    rc, out = check(mtproxy, path, "--bogus-option", "1")
    assert rc != 0 and "bogus-option" in out, out


def test_check_config_does_not_serve(mtproxy, tmp_path):
    import socket
    port = free_ports(1)[0]
    path = tmp_path / "good.conf"
    path.write_text(good_config(port))
    rc, out = check(mtproxy, path)
    assert rc == 0, out
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
