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


# A bad socks5 = / replay-store = URL never shows its password (issue 24, finding 7): every
# malformed shape, in a file and on the command line, in --check-config and in a real start.
PASSWORD = "Hunter2pwX9"
BAD_SOCKS5 = [
    f"http://alice:{PASSWORD}@127.0.0.1:1080",       # wrong scheme
    f"alice:{PASSWORD}@127.0.0.1:1080",              # no scheme
    f"socks5:/alice:{PASSWORD}@127.0.0.1:1080",      # one slash
    f"SOCKS5://alice:{PASSWORD}@127.0.0.1:1080",     # scheme case
    f"socks5://alice:{PASSWORD}:127.0.0.1:1080",     # '@' left out
    f"socks5://alice{PASSWORD}@127.0.0.1:1080",      # ':' left out
    f"socks5://alice:{PASSWORD}@127.0.0.1",          # no port
    f"socks5://alice:{PASSWORD}@127.0.0.1:99999",    # port out of range
    f"socks5://alice:{PASSWORD}@127.0.0.1:1080x",    # junk after the port
    f"socks5://alice:{PASSWORD}@[::1:1080",          # unclosed bracket
    f"socks5://alice:{PASSWORD}@[zz]:1080",          # not IPv6
    f"socks5://alice:{PASSWORD}%zz@127.0.0.1:1080",  # bad escape
    f"socks5://alice:{PASSWORD}@bad/host:1080",      # bad host character
    f"socks5://[alice:{PASSWORD}@::1]:1080",         # brackets around everything
]
BAD_RSTORE = [
    f"rediss://:{PASSWORD}@127.0.0.1:6379",
    f":{PASSWORD}@127.0.0.1:6379",
    f"redis:/:{PASSWORD}@127.0.0.1:6379",
    f"redis://{PASSWORD}@127.0.0.1:6379",            # ':' before the password left out
    f"redis://:{PASSWORD}:127.0.0.1:6379",           # '@' left out
    f"redis://:{PASSWORD}@127.0.0.1",                # no port
    f"redis://:{PASSWORD}@127.0.0.1:6379/x",         # bad /DB
    f"redis://:{PASSWORD}@[::1:6379",                # unclosed bracket
    f"redis://:{PASSWORD}@/tmp/redis.sock?db=x",     # bad ?db=
]


def base_config(port):
    return "\n".join([f"listen = 127.0.0.1:{port}", "secret = alice:00112233445566778899aabbccddeeff",
                      "dc = 2 127.0.0.1:1", "dc-builtin = off", "mask = off", ""])


def no_password(rc, out, what):
    assert rc != 0, f"{what}: accepted\n{out}"
    assert out.strip(), f"{what}: no error at all"
    assert PASSWORD not in out, f"{what}: the password is in the output:\n{out}"


@pytest.mark.parametrize("key,url", [("socks5", u) for u in BAD_SOCKS5] +
                         [("replay-store", u) for u in BAD_RSTORE])
def test_bad_url_never_shows_its_password(mtproxy, tmp_path, key, url):
    port = free_ports(1)[0]
    path = tmp_path / "url.conf"
    path.write_text(base_config(port) + f"{key} = {url}\n")
    rc, out = check(mtproxy, path)
    no_password(rc, out, f"file: {key} = {url}")
    assert f"{path}:6: " in out, out  # the line is still named
    path.write_text(base_config(port))
    rc, out = check(mtproxy, path, f"--{key}", url)
    no_password(rc, out, f"--{key} {url}")
    assert f"--{key}: " in out, out


def test_url_typed_wrong_never_shows_its_password(mtproxy, tmp_path):
    """A URL where a key or a 'key = value' line was expected: the error quotes no part of it
    past the scheme (file: no '='; command line: no --key, or the URL as the key)."""
    port = free_ports(1)[0]
    path = tmp_path / "url.conf"
    url = f"socks5://alice:{PASSWORD}@127.0.0.1:1080"
    for line in (f"socks5 {url}", url, f"{url} = on", f"secret alice:{PASSWORD}"):
        path.write_text(base_config(port) + line + "\n")
        rc, out = check(mtproxy, path)
        no_password(rc, out, line)
    path.write_text(base_config(port))
    for args in ([url], [f"--{url}"], [f"--{url}", "x"], [f"--{url}=on"]):
        rc, out = check(mtproxy, path, *args)
        no_password(rc, out, " ".join(args))


def test_bad_url_at_a_real_start(mtproxy, tmp_path):
    """Not only --check-config: a start that fails on the URL says so without the password."""
    port = free_ports(1)[0]
    path = tmp_path / "url.conf"
    path.write_text(base_config(port) + f"socks5 = socks5://alice:{PASSWORD}:127.0.0.1:1080\n")
    r = subprocess.run(mtproxy_argv({"mtproxy": mtproxy}, "--config", str(path)),
                       capture_output=True, timeout=T(20))
    no_password(r.returncode, (r.stdout + r.stderr).decode(errors="replace"), "start")
