"""test_ja4stat.py: FakeTLS hellos counted by JA4 in /metrics and /stats, per user, in the close line."""
import json
import os
import re
import socket
import urllib.error
import urllib.request

from harness import T, assert_ok, free_ports, new_secret, wait_until
from test_faketls import TlsEnv, ee
from test_metrics import samples

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.normpath(os.path.join(HERE, "..", "vectors", "ja4"))


def expected_ja4():
    """{vector file: JA4} from tests/vectors/ja4/expected.txt (checked against the spec)."""
    out = {}
    with open(os.path.join(VECTORS, "expected.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                name, ja4 = line.split()[:2]
                out[name] = ja4
    return out


def http_get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=T(5)) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def fingerprints(smp, name="mtproxy_tls_hello_fingerprint_total"):
    """{(ja4, valid): value} of one family."""
    return {(dict(k)["ja4"], dict(k)["valid"]): v for (n, k), v in smp.items() if n == name}


def send_raw(env, data):
    """Sends data as a client would, reads what comes back (the mask server echoes it), closes."""
    with socket.create_connection(("127.0.0.1", env.proxy.port), timeout=T(5)) as s:
        s.sendall(data)
        got = b""
        while len(got) < len(data):
            b = s.recv(65536)
            if not b:
                break
            got += b
    return got


def test_fingerprints_counted(procs):
    known = expected_ja4()
    client_ja4, spec_ja4 = known["tlsclient.hello"], known["spec.hello"]
    mport = free_ports(1)[0]
    env = TlsEnv(procs, extra=["--metrics", f"127.0.0.1:{mport}"], workers=2)
    assert wait_until(lambda: http_get(mport, "/metrics")[0] == 200, T(10))

    for _ in range(3):  # valid: the project's test client with user "tls"'s secret
        assert_ok(env.client(2, 1000, 1000))
    for _ in range(2):  # the same client with a secret nobody has: fronted
        res = env.client(2, 1000, 1000, secret=ee(new_secret()))
        assert not res["ok"] and res["tls"] == "echoed", res
    # a public example hello (no FakeTLS HMAC can be right): fronted, echoed back
    spec = open(os.path.join(VECTORS, "spec.hello"), "rb").read()
    assert send_raw(env, spec) == spec
    # a record that starts like a hello but whose ClientHello is 2 bytes long: malformed
    bad = bytes.fromhex("160301000601000002" "0303")
    assert send_raw(env, bad) == bad

    def page():
        return samples(http_get(mport, "/metrics")[1].decode())

    # counted when each connection closes
    assert wait_until(lambda: sum(fingerprints(page()).values()) == 7, T(10)), \
        fingerprints(page())
    smp = page()
    fp = fingerprints(smp)
    assert fp[(client_ja4, "yes")] == 3, fp
    assert fp[(client_ja4, "no")] == 2, fp
    assert fp[(spec_ja4, "no")] == 1, fp
    assert fp[("malformed", "no")] == 1, fp
    assert fp[("other", "yes")] == 0 and fp[("other", "no")] == 0, fp
    assert len(fp) == 6, fp
    share = fingerprints(smp, "mtproxy_tls_hello_fingerprint_share")
    assert abs(share[(client_ja4, "yes")] - 3 / 7) < 1e-5, share
    assert abs(sum(share.values()) - 1) < 1e-5, share
    users = {(dict(k)["user"], dict(k)["ja4"]): v for (n, k), v in smp.items()
             if n == "mtproxy_user_tls_fingerprint_total"}
    assert users == {("tls", client_ja4): 3}, users

    # /stats: the same samples in its metrics array
    st = json.loads(http_get(mport, "/stats")[1])
    jm = {(m["name"], frozenset(m["labels"].items())): m["value"] for m in st["metrics"]
          if "fingerprint" in m["name"]}
    assert jm == {k: v for k, v in smp.items() if "fingerprint" in k[0]}, jm

    # the close lines (debug) name the fingerprint of every TLS connection
    with open(env.proxy.stderr_path, errors="replace") as f:
        ja4s = sorted(re.findall(r" closed.* ja4=(\S+)\n", f.read()))
    assert ja4s == sorted([client_ja4] * 5 + [spec_ja4, "malformed"]), ja4s
