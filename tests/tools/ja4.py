#!/usr/bin/env python3
"""ja4.py: JA4 of a raw TLS ClientHello, written from FoxIO's public JA4 spec on its own.

A second implementation to check src/proto/ja4.c against (they share no code).

Usage:
  ja4.py FILE...              prints "JA4 JA4_r" of each hello file (raw bytes: the records)
  ja4.py --check DIR          every DIR/*.hello against DIR/expected.txt lines "NAME JA4 JA4_r"
  ja4.py --self-test          the spec's public examples, built from their lists
Exit 0 when everything matched, 1 otherwise.
"""
import hashlib
import os
import struct
import sys

VERSIONS = {0x0304: "13", 0x0303: "12", 0x0302: "11", 0x0301: "10", 0x0300: "s3",
            0x0002: "s2", 0xfeff: "d1", 0xfefd: "d2", 0xfefc: "d3"}


def is_grease(v):
    hi, lo = v >> 8, v & 0xff
    return hi == lo and (lo & 0x0f) == 0x0a


def message(data):
    """Joins the handshake records (16 03 0x LLLL) into the ClientHello message."""
    msg = b""
    pos = 0
    for _ in range(32):
        if len(data) - pos < 5:
            raise ValueError("short record header")
        typ, major, minor, rlen = struct.unpack(">BBBH", data[pos:pos + 5])
        if typ != 0x16 or major != 3 or minor > 4 or not 1 <= rlen <= 16384:
            raise ValueError("not a handshake record")
        if len(data) - pos - 5 < rlen:
            raise ValueError("short record")
        msg += data[pos + 5:pos + 5 + rlen]
        pos += 5 + rlen
        if len(msg) >= 4:
            if msg[0] != 1:
                raise ValueError("not a ClientHello")
            total = 4 + int.from_bytes(msg[1:4], "big")
            if total > 16384:
                raise ValueError("hello too long")
            if len(msg) >= total:
                return msg[:total]
    raise ValueError("hello incomplete")


class Reader:
    def __init__(self, b):
        self.b, self.p = b, 0

    def take(self, n):
        if n > len(self.b) - self.p:
            raise ValueError("truncated")
        s = self.b[self.p:self.p + n]
        self.p += n
        return s

    def u8(self):
        return self.take(1)[0]

    def u16(self):
        return int.from_bytes(self.take(2), "big")

    def left(self):
        return len(self.b) - self.p


def fields(msg):
    """(legacy_version, ciphers, [(ext_type, ext_data)]) of a ClientHello message."""
    r = Reader(msg[4:])
    legacy = r.u16()
    r.take(32)
    sid = r.u8()
    if sid > 32:
        raise ValueError("session id")
    r.take(sid)
    cs = r.take(r.u16())
    if len(cs) % 2:
        raise ValueError("cipher list")
    ciphers = [int.from_bytes(cs[i:i + 2], "big") for i in range(0, len(cs), 2)]
    r.take(r.u8())
    exts = []
    if r.left():
        block = r.take(r.u16())
        if r.left():
            raise ValueError("bytes after the extensions")
        e = Reader(block)
        while e.left():
            t = e.u16()
            exts.append((t, e.take(e.u16())))
    return legacy, ciphers, exts


def u16_list(b):
    if len(b) % 2:
        raise ValueError("odd list")
    return [int.from_bytes(b[i:i + 2], "big") for i in range(0, len(b), 2)]


def alpn_chars(data):
    r = Reader(data)
    lst = r.take(r.u16())
    if r.left():
        raise ValueError("alpn length")
    if not lst:
        return "00"
    p = Reader(lst)
    name = p.take(p.u8())
    if not name:
        return "00"
    first, last = name[0], name[-1]
    if chr(first).isascii() and chr(first).isalnum() and chr(last).isascii() and \
            chr(last).isalnum():
        return chr(first) + chr(last)
    h = name.hex()
    return h[0] + h[-1]


def ja4(data):
    """(JA4, JA4_r) of the raw hello records in data; ValueError if malformed."""
    legacy, ciphers, exts = fields(message(data))
    ciphers = [c for c in ciphers if not is_grease(c)]
    exts = [(t, d) for t, d in exts if not is_grease(t)]
    types = [t for t, _ in exts]
    version = legacy
    sigs = []
    alpn = "00"
    seen = set()
    for t, d in exts:
        first = t not in seen
        seen.add(t)
        if not first:
            continue
        if t == 0x002b:
            r = Reader(d)
            vs = u16_list(r.take(r.u8()))
            vs = [v for v in vs if not is_grease(v)]
            version = max(vs) if vs else 0
        elif t == 0x000d:
            r = Reader(d)
            sigs = [s for s in u16_list(r.take(r.u16())) if not is_grease(s)]
        elif t == 0x0010:
            alpn = alpn_chars(d)
    a = "t%s%s%02d%02d%s" % (VERSIONS.get(version, "00"), "d" if 0 in types else "i",
                             min(len(ciphers), 99), min(len(types), 99), alpn)
    b_raw = ",".join("%04x" % c for c in sorted(ciphers))
    c_exts = sorted(t for t in types if t not in (0x0000, 0x0010))
    c_raw = ",".join("%04x" % t for t in c_exts)
    if sigs:
        c_raw += "_" + ",".join("%04x" % s for s in sigs)

    def h12(s, empty):
        return "0" * 12 if empty else hashlib.sha256(s.encode()).hexdigest()[:12]

    return ("%s_%s_%s" % (a, h12(b_raw, not ciphers), h12(c_raw, not c_exts)),
            "%s_%s_%s" % (a, b_raw, c_raw))


def build_hello(ciphers, exts, legacy=0x0303):
    """A one-record ClientHello with the given cipher values and (type, data) extensions."""
    body = struct.pack(">H", legacy) + bytes(32) + b"\x00"
    body += struct.pack(">H", 2 * len(ciphers)) + b"".join(struct.pack(">H", c) for c in ciphers)
    body += b"\x01\x00"
    eb = b"".join(struct.pack(">HH", t, len(d)) + d for t, d in exts)
    body += struct.pack(">H", len(eb)) + eb
    msg = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x01" + struct.pack(">H", len(msg)) + msg


def ext_data(t, sigs):
    """Plausible data for extension t (what JA4 reads of it must be right)."""
    if t == 0x0000:
        name = b"example.com"
        return struct.pack(">HBH", len(name) + 3, 0, len(name)) + name
    if t == 0x0010:
        lst = b"\x02h2\x08http/1.1"
        return struct.pack(">H", len(lst)) + lst
    if t == 0x000d:
        return struct.pack(">H", 2 * len(sigs)) + b"".join(struct.pack(">H", s) for s in sigs)
    if t == 0x002b:
        return b"\x04\x03\x04\x03\x03"
    return b""


def spec_examples():
    """(name, hello, JA4, JA4_r) built from the public examples' value lists."""
    out = []
    # FoxIO JA4 spec (technical_details/JA4.md): the example with its original-order lists.
    ciphers = [0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013,
               0xc014, 0x009c, 0x009d, 0x002f, 0x0035]
    exts = [0x001b, 0x0000, 0x0033, 0x0010, 0x4469, 0x0017, 0x002d, 0x000d, 0x0005, 0x0023,
            0x0012, 0x002b, 0xff01, 0x000b, 0x000a, 0x0015]
    sigs = [0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601]
    out.append(("spec", build_hello(ciphers, [(t, ext_data(t, sigs)) for t in exts]),
                "t13d1516h2_8daaf6152771_e5627efa2ab1",
                "t13d1516h2_002f,0035,009c,009d,1301,1302,1303,c013,c014,c02b,c02c,c02f,c030,"
                "cca8,cca9_0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,4469,"
                "ff01_0403,0804,0401,0503,0805,0501,0806,0601"))
    # FoxIO python/test/testdata/sigalg-grease.pcapng.json: Chrome with ECH and ML-DSA sigalgs
    # (JA4_ro gives the lists in the hello's order); GREASE added here must not count.
    exts2 = [0xfe0d, 0x0010, 0x0017, 0x0033, 0x44cd, 0xff01, 0x000a, 0x000d, 0x0023, 0x002b,
             0x000b, 0xca34, 0x002d, 0x0000, 0x0005, 0x001b, 0x0012]
    sigs2 = [0x0904, 0x0905, 0x0906, 0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806,
             0x0601]
    g = [(0x2a2a, b"")] + [(t, ext_data(t, [0x5a5a] + sigs2)) for t in exts2] + [(0xfafa, b"\0")]
    out.append(("sigalg-grease", build_hello([0x7a7a] + ciphers, g),
                "t13d1517h2_8daaf6152771_cb7bf5808d99", None))
    return out


def main(argv):
    if len(argv) >= 2 and argv[1] == "--self-test":
        bad = 0
        for name, hello, want, want_r in spec_examples():
            got, got_r = ja4(hello)
            ok = got == want and (want_r is None or got_r == want_r)
            bad += not ok
            print("%s %s: %s (want %s)" % ("ok" if ok else "FAIL", name, got, want))
        print("%d passed, %d failed" % (len(spec_examples()) - bad, bad))
        return 1 if bad else 0
    if len(argv) == 3 and argv[1] == "--check":
        d = argv[2]
        bad = n = 0
        with open(os.path.join(d, "expected.txt")) as f:
            for line in f:
                if not line.strip() or line.startswith("#"):
                    continue
                name, want, want_r = line.split()
                with open(os.path.join(d, name), "rb") as h:
                    got, got_r = ja4(h.read())
                n += 1
                ok = got == want and got_r == want_r
                bad += not ok
                print("%s %s: %s" % ("ok" if ok else "FAIL", name, got))
        print("%d passed, %d failed" % (n - bad, bad))
        return 1 if bad or n == 0 else 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    rc = 0
    for path in argv[1:]:
        with open(path, "rb") as f:
            try:
                print("%s %s" % ja4(f.read()))
            except ValueError as e:
                print("%s: malformed: %s" % (path, e), file=sys.stderr)
                rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
