#!/usr/bin/env python3
"""tdlib_hello.py: captures the FakeTLS ClientHello that TDLib (the tdjson wheel) sends to a proxy.

Makes tests/vectors/ja4/tdlib-VERSION.hello. Run it with no network but loopback, e.g.
  python3 -m venv /tmp/td && /tmp/td/bin/pip install tdjson
  unshare -n sh -c 'ip link set lo up; /tmp/td/bin/python tests/tools/tdlib_hello.py OUT'
TDLib is told to use an MTProto proxy with an ee secret at 127.0.0.1:PORT, where a listener
keeps the first record(s) it receives; nothing answers, and nothing leaves the machine.
Then: python3 tests/tools/ja4.py OUT (and add a line to tests/vectors/ja4/expected.txt).
"""
import json
import os
import socket
import sys
import threading
import time

import tdjson

PORT = 18443
DOMAIN = b"www.google.com"
SECRET = "ee" + "00112233445566778899aabbccddeeff" + DOMAIN.hex()


def listen(got):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", PORT))
    s.listen(8)
    s.settimeout(30)
    c, _ = s.accept()
    c.settimeout(5)
    buf = b""
    try:
        while len(buf) < 5 or len(buf) < 5 + int.from_bytes(buf[3:5], "big"):
            d = c.recv(65536)
            if not d:
                break
            buf += d
    except socket.timeout:
        pass
    got["data"] = buf


def only_loopback():
    """TDLib knows Telegram's real addresses: refuse to run where anything but lo exists."""
    others = [n for n in os.listdir("/sys/class/net") if n != "lo"]
    if others:
        sys.exit(f"tdlib_hello.py: this namespace has {', '.join(others)} besides lo: run it "
                 "under unshare -n (see the top of this file)")


def main(out):
    only_loopback()
    got = {}
    t = threading.Thread(target=listen, args=(got,), daemon=True)
    t.start()
    time.sleep(0.2)
    tdjson.td_execute(json.dumps({"@type": "setLogVerbosityLevel",
                                  "new_verbosity_level": 1}).encode())
    cid = tdjson.td_create_client_id()

    def send(q):
        tdjson.td_send(cid, json.dumps(q).encode())

    send({"@type": "addProxy", "enable": True,
          "proxy": {"@type": "proxy", "server": "127.0.0.1", "port": PORT,
                    "type": {"@type": "proxyTypeMtproto", "secret": SECRET}}})
    send({"@type": "setTdlibParameters", "use_test_dc": False,
          "database_directory": "/tmp/tdlib_hello_db", "use_message_database": False,
          "use_secret_chats": False, "api_id": 1, "api_hash": "0" * 32,
          "system_language_code": "en", "device_model": "test", "application_version": "1.0"})
    end = time.time() + 30
    while time.time() < end and "data" not in got:
        tdjson.td_receive(0.5)
    data = got.get("data", b"")
    if not data:
        print("tdlib_hello: nothing captured", file=sys.stderr)
        os._exit(1)
    with open(out, "wb") as f:
        f.write(data)
    print("tdjson %s: %d bytes to %s" % (tdjson.__version__, len(data), out))
    os._exit(0)  # TDLib's threads would keep the process up


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
