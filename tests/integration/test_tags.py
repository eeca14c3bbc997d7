"""test_tags.py: every obfuscated2 tag through plain and dd secrets; links written at start."""
import os
import re

import pytest

from harness import (MODES, Std, T, assert_ok, assert_rejected, HANDSHAKE_TIMEOUT_S, new_secret,
                     wait_until)


@pytest.fixture(params=sorted(MODES))
def env(procs, request):
    return Std(procs, extra=MODES[request.param])


@pytest.mark.parametrize("tag", ["ef", "ee", "dd"])
def test_plain_secret_every_tag(env, tag):
    res = env.client(tag, 2, 100000, 150000, "--expect-id", 2, "--expect-dc", 2)
    assert_ok(res)
    assert res["up_total"] == 100000 and res["down_total"] == 150000
    assert env.dc.wait_line(rf"^HEADER listener=2 tag={tag} dc=2$", 5)
    assert env.dc.wait_line(r"^DONE listener=2 up_ok=100000 mismatch=none$", 5)


def test_dd_secret_dd_tag(env):
    assert_ok(env.client("dd", 3, 100000, 100000, "--expect-id", 3, secret=env.dd))


@pytest.mark.parametrize("tag", ["ef", "ee"])
def test_dd_secret_rejects_ef_ee(env, tag):
    mark = env.dc.mark()
    res = env.client(tag, 2, 100, 100, "--timeout", 10, secret=env.dd)
    assert_rejected(res, max_seconds=3 * HANDSHAKE_TIMEOUT_S + 1)
    # A rejected client must not reach a DC.
    assert env.dc.headers(mark) == 0
    assert_ok(env.client("dd", 2, 1000, 1000, secret=env.dd))


def test_unknown_secret_rejected(env):
    mark = env.dc.mark()
    res = env.client("ee", 2, 100, 100, "--timeout", 10, secret=new_secret())
    assert_rejected(res, max_seconds=3 * HANDSHAKE_TIMEOUT_S + 1)
    assert env.dc.headers(mark) == 0


def test_links_written_not_logged(env, tmp_path):
    """The links carry the secrets: written to the links file (0600), not to stdout when it is
    not a terminal, and never to the log."""
    port = env.proxy.port
    path = str(tmp_path / "mtproxy.state.links")
    assert wait_until(lambda: os.path.exists(path), T(5))
    text = open(path).read()
    assert os.stat(path).st_mode & 0o777 == 0o600
    for key in (env.plain, env.dd):
        for scheme in ("tg://proxy", "https://t.me/proxy"):
            link = f"{scheme}?server=127.0.0.1&port={port}&secret={key}"
            assert link in text, (link, text)
    assert not any("tg://" in line for line in env.proxy.lines), env.proxy.lines
    log = env.proxy.stderr_tail(1000)
    assert env.plain not in log and env.dd[2:] not in log
    assert f"written to {path}" in log
