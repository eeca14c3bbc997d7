#!/usr/bin/env python3
"""bench/web_adapter.py WEB_HOST:PORT HOST SECRET [CARRIER]: the test WEB client (tests/
integration/webclient.py: every local TCP connection a stream of one WEB session over the
carrier: https (the default), https-lanes, websocket or websocket-lanes) as a process for the
benches; prints "ADAPTER 127.0.0.1:PORT" when it listens, then serves until killed."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from webclient import Adapter  # noqa: E402

host, port = sys.argv[1].rsplit(":", 1)
a = Adapter((host, int(port)), sys.argv[2], sys.argv[3],
            carrier=sys.argv[4] if len(sys.argv) > 4 else "https")
print("ADAPTER", a.addr, flush=True)
while not a.errors:
    time.sleep(0.5)
print("adapter failed:", a.errors, file=sys.stderr)
sys.exit(1)
