"""test_telethon.py: Telethon's MTProxy classes via the real proxy to the fake DC (req_pq_multi)."""
import asyncio

import pytest

import tgprobe
from harness import MODES, Std, T, new_secret, MEDIA_4_LISTENER

REQ = r"^REQ_PQ_MULTI listener=(\d+) tag=(\w+) dc=(-?\d+) nonce=([0-9a-f]{32})$"


# Each Telethon MTProxy connect costs 2 s (it waits for an early close), so the full case
# list runs in two modes and the others get a smaller list.
@pytest.fixture(params=["fast-splice", "nofast"])
def env(procs, request):
    return Std(procs, extra=MODES[request.param])


CASES = [
    # (telethon tag, secret kind, client dc, expected listener)
    ("ef", "plain", 2, 2),
    ("ee", "plain", 1, 1),
    ("dd", "plain", 5, 5),
    ("ee", "plain", -3, 3),
    ("dd", "dd", 4, 4),
    ("dd", "dd", -4, MEDIA_4_LISTENER),
    ("ef", "plain", 203, 203),
]


def check_req_pq(env, tag, kind, dc, listener):
    secret = env.plain if kind == "plain" else env.dd
    mark = env.dc.mark()
    nonce, res = tgprobe.req_pq_via_proxy(tag, env.proxy.port, secret, dc, timeout=T(10))
    # (b) Telethon parsed a ResPQ answering our nonce.
    assert isinstance(res, tgprobe.ResPQ), res
    assert res.nonce == nonce
    assert res.pq == bytes.fromhex("17ed48941a08f981")
    assert len(res.server_public_key_fingerprints) == 1
    # (a) The DC got the very same request, framed with the tag Telethon chose.
    m = env.dc.wait_line(REQ, 5, start=mark)
    assert m, env.dc.lines[mark:]
    assert int(m.group(1)) == listener
    assert m.group(2) == tag
    assert int(m.group(3)) == dc
    assert m.group(4) == tgprobe.nonce_hex(nonce)


@pytest.mark.parametrize("tag,kind,dc,listener", CASES)
def test_req_pq_multi(env, tag, kind, dc, listener):
    check_req_pq(env, tag, kind, dc, listener)


@pytest.mark.parametrize("mode", ["fast-copy", "dcpool"])
@pytest.mark.parametrize("tag,kind,dc,listener", [CASES[0], CASES[4]])
def test_req_pq_multi_other_modes(procs, mode, tag, kind, dc, listener):
    check_req_pq(Std(procs, extra=MODES[mode]), tag, kind, dc, listener)


def test_dd_secret_refuses_abridged(env):
    mark = env.dc.mark()
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError,
                        OSError)):
        tgprobe.req_pq_via_proxy("ef", env.proxy.port, env.dd, 2, timeout=T(6))
    assert not env.dc.matching(REQ, mark)
    assert env.dc.headers(mark) == 0


def test_wrong_secret_gets_nothing(env):
    mark = env.dc.mark()
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError,
                        OSError)):
        tgprobe.req_pq_via_proxy("ee", env.proxy.port, new_secret(), 2, timeout=T(6))
    assert env.dc.headers(mark) == 0
