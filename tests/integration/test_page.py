"""test_page.py: the status page for many users: /users (paging, search, sort), /users/NAME
(links only with the token or on loopback), /history (per-second rings), and the page itself
with 10,000 users in headless Chromium (Debian's package, driven over the DevTools protocol)."""
import json
import os
import shutil
import time

import pytest

from harness import DC_IDS, T, assert_ok, free_ports, new_secret, wait_until
from test_metrics import BUILD, Chrome, http_get, need

N = 10000


def write_conf(path, users, dc, extra=""):
    lines = [f"secret = {n}:{s}" for n, s in users]
    lines += [f"dc = {i} {dc.addr(i)}" for i in DC_IDS]
    path.write_text("\n".join(lines) + "\n" + extra)


class Many:
    """A proxy with N users (u00000..u09999) from a generated config, and its metrics server."""

    def __init__(self, procs, tmp_path, host="127.0.0.1", extra=""):
        self.dc = procs.fake_dc([(i, "normal") for i in DC_IDS])
        self.users = [(f"u{i:05d}", new_secret()) for i in range(N)]
        self.mport = free_ports(1)[0]
        conf = tmp_path / "many.conf"
        write_conf(conf, self.users, self.dc,
                   f"metrics = {host}:{self.mport}\npublic-host = proxy.example.net\n" + extra)
        self.proxy = procs.proxy([], [], workers=2, extra=["--config", str(conf)])
        self.procs = procs
        assert wait_until(lambda: self.status("/history")[0] in (200, 401), T(10))

    def status(self, path, headers=None):
        try:
            return http_get(self.mport, path, headers=headers)[0::2]
        except OSError:
            return (0, b"")

    def get(self, path, headers=None):
        code, body = self.status(path, headers)
        assert code == 200, (path, code, body[:300])
        return json.loads(body)

    def client(self, i, up, down):
        return self.procs.client(self.proxy, self.users[i][1], "ef", 2, up, down)


def test_users_paging_search_sort(procs, tmp_path):
    m = Many(procs, tmp_path)
    # Traffic on three users, so that sorting by bytes and connections has an order to find.
    assert_ok(m.client(7777, 1000, 300000))
    assert_ok(m.client(42, 1000, 100000))
    assert_ok(m.client(42, 1000, 100000))
    assert_ok(m.client(9999, 50000, 1000))
    p = m.get("/users")
    assert p["total"] == N and p["matched"] == N and p["offset"] == 0 and p["limit"] == 50
    assert [u["name"] for u in p["users"]] == [f"u{i:05d}" for i in range(50)]
    assert all("https" not in u and "tg" not in u for u in p["users"])  # no links in pages
    assert "summary" in p and p["summary"]["accepted"] >= 4
    # Paging: the last page is short; beyond the end is empty.
    p = m.get("/users?offset=9990&limit=20")
    assert [u["name"] for u in p["users"]] == [f"u{i:05d}" for i in range(9990, N)]
    assert m.get("/users?offset=20000")["users"] == []
    # Search: a case-insensitive substring of the name, percent-decoded.
    p = m.get("/users?q=U0777&limit=500")
    assert p["matched"] == 10 and {u["name"] for u in p["users"]} == {
        f"u0777{i}" for i in range(10)}
    assert m.get("/users?q=%75%30%37%37%37%37")["users"][0]["name"] == "u07777"
    assert m.get("/users?q=nobody")["matched"] == 0
    # Sort: bytes and connections descending by default, name ascending; order flips.
    top = [u["name"] for u in m.get("/users?sort=bytes&limit=3")["users"]]
    assert top == ["u07777", "u00042", "u09999"], top
    assert m.get("/users?sort=conns&limit=1")["users"][0]["name"] == "u00042"
    assert m.get("/users?sort=bytes&order=asc&limit=1")["users"][0]["bytes_down"] == 0
    assert m.get("/users?order=desc&limit=1")["users"][0]["name"] == "u09999"
    p = m.get("/users?q=u0004&sort=conns&limit=2")
    assert [u["name"] for u in p["users"]] == ["u00042", "u00040"] and p["matched"] == 10
    # Bad queries: a clear 400, never a crash.
    for bad in ("limit=0", "limit=501", "offset=-1", "offset=x", "sort=size", "order=up",
                "q=%zz", "q=" + "a" * 64, "q=%00"):
        code, body = m.status("/users?" + bad)
        assert code == 400 and body.strip(), (bad, code, body)
    assert m.proxy.alive()
    # Cost: a sorted page of 10,000 users, measured (printed; the bound is loose for CI).
    for q in ("", "?sort=bytes", "?q=u05&sort=conns"):
        t0 = time.monotonic()
        for _ in range(10):
            m.get("/users" + q)
        ms = (time.monotonic() - t0) * 100
        print(f"GET /users{q} with {N} users: {ms:.1f} ms per request (10 in a row)")
        assert ms < T(500)
    t0 = time.monotonic()
    code, stats = m.status("/stats")
    page = m.status("/users?limit=20")[1]
    print(f"sizes with {N} users: /users?limit=20 {len(page)} bytes, /stats {len(stats)} bytes "
          f"({(time.monotonic() - t0) * 1000:.0f} ms for both)")
    assert code == 200 and len(page) * 50 < len(stats)


def test_user_links_only_with_token_or_loopback(procs, tmp_path):
    m = Many(procs, tmp_path)
    u = m.get("/users/u01234")
    assert u["links"] is True and u["user"]["name"] == "u01234"
    assert u["user"]["https"].startswith("https://t.me/proxy?server=proxy.example.net")
    assert m.users[1234][1] in u["user"]["tg"]
    assert m.status("/users/nobody")[0] == 404
    assert m.status("/users/")[0] == 404
    assert m.status("/users/%zz")[0] == 404
    # The DNS-rebinding guard of loopback holds for the new paths too.
    assert m.status("/users/u01234", {"Host": "evil.example"})[0] == 421
    assert m.status("/users", {"Host": "evil.example"})[0] == 421


def test_user_links_need_the_token_off_loopback(procs, tmp_path):
    """Not on loopback, no token (metrics-public = on): no links, as /stats."""
    m = Many(procs, tmp_path, host="0.0.0.0", extra="metrics-public = on\n")
    u = m.get("/users/u00001")
    assert u["links"] is False and u["user"]["name"] == "u00001"
    assert "https" not in u["user"] and "tg" not in u["user"]
    assert m.get("/users?limit=1")["links"] is False
    assert m.status("/qr/u00001.svg")[0] == 404


def test_user_links_with_token(procs, tmp_path):
    m = Many(procs, tmp_path, host="0.0.0.0", extra="metrics-token = s3cret-token-xyz\n")
    for path in ("/users/u00001", "/users", "/history", "/history/u00001"):
        assert m.status(path)[0] == 401, path
        assert m.status(path + "?token=wrong")[0] == 401, path
    u = m.get("/users/u00001?token=s3cret-token-xyz")
    assert u["links"] is True and u["user"]["https"].startswith("https://t.me/proxy?")
    u = m.get("/users/u00002", {"Authorization": "Bearer s3cret-token-xyz"})
    assert m.users[2][1] in u["user"]["tg"]
    p = m.get("/users?token=s3cret-token-xyz&limit=2&q=u0000")
    assert p["matched"] == 10 and len(p["users"]) == 2


def test_history_grows_per_second(procs, tmp_path):
    m = Many(procs, tmp_path)
    h0 = m.get("/history")
    assert h0["user"] is None and h0["users_kept"] == 16
    n0 = h0["history"]["len"]
    time.sleep(3.2)
    h1 = m.get("/history")["history"]
    assert h1["len"] >= n0 + 2, (n0, h1["len"])
    assert len(h1["bytes"]) == len(h1["conns"]) == len(h1["active"]) == h1["len"]
    # A user's ring starts when first asked for; its traffic shows in it.
    assert m.get("/history/u00500")["history"]["len"] == 0
    assert m.status("/history/nobody")[0] == 404
    time.sleep(1.5)
    assert_ok(m.client(500, 1000, 200000))
    assert wait_until(lambda: sum(m.get("/history/u00500")["history"]["bytes"]) >= 201000, T(5))
    hu = m.get("/history/u00500")["history"]
    assert sum(hu["conns"]) == 1, hu["conns"]
    assert wait_until(lambda: sum(m.get("/history")["history"]["bytes"]) >= 201000, T(5))
    # At most 16 user rings: the least recently viewed goes (then starts again, empty).
    for i in range(16):
        m.get(f"/history/u{i:05d}")
    assert m.get("/history/u00500")["history"]["len"] == 0


# --- the page in Chromium --------------------------------------------------------------------

def test_page_10000_users_in_chromium(procs, bins, tmp_path):
    need("chromium")
    m = Many(procs, tmp_path)
    assert_ok(m.client(3, 1000, 500000))
    time.sleep(2.2)  # a few seconds of history
    chrome = Chrome(tmp_path)
    try:
        base = f"http://127.0.0.1:{m.mport}/"
        t0 = time.monotonic()
        chrome.call("Page.navigate", url=base)
        assert wait_until(lambda: chrome.eval(
            "document.querySelectorAll('.user').length === 20 && "
            "window.mtproxyFirstPaint !== undefined"), T(20))
        wall = time.monotonic() - t0
        first = chrome.eval("window.mtproxyFirstPaint")
        print(f"first paint with {N} users: {first:.0f} ms after navigation start "
              f"(page shown {wall * 1000:.0f} ms after Page.navigate)")
        assert first < 1000, first
        assert chrome.eval("document.getElementById('range').textContent") == \
            f"1\u201320 of {N} users"
        assert chrome.eval("document.querySelectorAll('.user img').length") == 0  # on demand
        # Search: typed, answered by the proxy, drawn.
        took = chrome.eval("""new Promise(function (res) {
            var t0 = performance.now(), s = document.getElementById('search');
            s.value = 'u0999'; s.dispatchEvent(new Event('input'));
            (function w() {
              if (document.getElementById('users').dataset.q === 'u0999') res(performance.now() - t0);
              else setTimeout(w, 5);
            })();
        })""")
        print(f"search among {N} users: {took:.0f} ms from typing to the list drawn "
              f"(120 ms of it the typing debounce)")
        assert took < 1000, took
        names = chrome.eval("[...document.querySelectorAll('.user')].map(e => e.dataset.name)")
        assert names == [f"u0999{i}" for i in range(10)], names
        # Sort by traffic: user 3 first.
        chrome.eval("var s = document.getElementById('sort'); s.value = 'bytes';"
                    "s.dispatchEvent(new Event('change'))")
        assert wait_until(lambda: chrome.eval(
            "document.getElementById('users').dataset.sort === 'bytes desc' && "
            "document.querySelector('.user').dataset.name"), T(5))
        chrome.eval("var s = document.getElementById('search'); s.value = '';"
                    "s.dispatchEvent(new Event('input'))")
        assert wait_until(lambda: chrome.eval(
            "document.getElementById('users').dataset.q === '' && "
            "document.querySelector('.user').dataset.name === 'u00003'"), T(5))
        # One user's links and QR code, on demand.
        chrome.eval("document.querySelector('.user[data-name=u00003] .acts button').click()")
        assert wait_until(lambda: chrome.eval(
            "[...document.querySelectorAll('.user img')].filter(i => i.complete && "
            "i.naturalWidth > 0).length === 1"), T(10))
        assert m.users[3][1] in chrome.eval(
            "document.querySelector('.user[data-name=u00003] .link input').value")
        # The chart: the whole proxy's, then user 3's (its ring starts now).
        assert wait_until(lambda: chrome.eval(
            "document.getElementById('chart-bytes').getAttribute('d').split('L').length") >= 2,
            T(10))
        d = chrome.eval("document.getElementById('chart-bytes').getAttribute('d')")
        assert d.startswith("M") and "L" in d, d
        # Laid out for a phone too (no sideways scrolling); the pictures are kept for a look.
        for width in (390, 1280):
            shot = tmp_path / f"page-{width}.png"
            assert chrome.screenshot(width, shot) <= width
            shutil.copy(shot, os.path.join(BUILD, f"status-page-10000-users-{width}px.png"))
        chrome.eval("document.querySelector('.user[data-name=u00003] .acts button:last-child')"
                    ".click()")
        assert wait_until(lambda: chrome.eval(
            "document.getElementById('chart-title').textContent") ==
            "Traffic, last hour: user u00003", T(5))
        chrome.pump(1)
        errors = chrome.errors()
        assert not errors, errors
        urls = chrome.request_urls()
        assert len(urls) >= 6, urls
        assert all(u.startswith(base) or u.startswith("data:") for u in urls), urls
        # Requests are per page and per user asked for: never 10,000 at once.
        assert len(urls) < 60, len(urls)
    finally:
        chrome.close()
