"""tdprobe.py: TDLib (the tdjson wheel's libtdjson) as an MTProxy client: a client whose only
proxy is an MTProxy on 127.0.0.1, whose first MTProto message (req_pq_multi) then goes through
it. Run it only inside tests/netns.sh's loopback-only namespace: TDLib also tries DNS and other
ways to reach Telegram's real addresses, which must fail there."""
import json
import os
import time

import tdjson

_verbosity_set = False


def _execute(req):
    res = tdjson.td_execute(json.dumps(req).encode())
    return json.loads(res) if res else None


def quiet():
    """TDLib's own log to stderr at fatal errors only (once per process)."""
    global _verbosity_set
    if not _verbosity_set:
        res = _execute({"@type": "setLogVerbosityLevel", "new_verbosity_level": 0})
        assert res and res["@type"] == "ok", res
        _verbosity_set = True


class Client:
    """One TDLib instance (database in db_dir) whose only proxy is the MTProxy at
    127.0.0.1:port with secret_hex. td_receive serves every instance of the process, so the
    instances of one process are driven one at a time from one thread (ours)."""

    def __init__(self, db_dir, port, secret_hex):
        assert os.environ.get("MTPROXY_IN_NETNS") == "1", "TDLib only in tests/netns.sh"
        quiet()
        self.id = tdjson.td_create_client_id()
        self.events = []  # this instance's updates and answers, in order
        self.errors = []
        self.closed = False
        self.send({"@type": "setTdlibParameters", "use_test_dc": False,
                   "database_directory": str(db_dir), "files_directory": str(db_dir),
                   "use_file_database": False, "use_chat_info_database": False,
                   "use_message_database": False, "use_secret_chats": False,
                   "api_id": 1, "api_hash": "a" * 32, "system_language_code": "en",
                   "device_model": "mtproxy test", "application_version": "1.0",
                   "@extra": "setTdlibParameters"})
        # TDLib 1.8.69's proxy object (older TDLibs took server, port and type flat)
        self.proxy = {"@type": "proxy", "server": "127.0.0.1", "port": port,
                      "type": {"@type": "proxyTypeMtproto", "secret": secret_hex}}
        self.send({"@type": "addProxy", "proxy": self.proxy, "enable": True,
                   "@extra": "addProxy"})

    def send(self, req):
        tdjson.td_send(self.id, json.dumps(req).encode())

    def pump(self, timeout):
        """Takes TDLib's output for up to timeout seconds (one td_receive); returns whether
        anything came for this instance."""
        raw = tdjson.td_receive(timeout)
        if not raw:
            return False
        ev = json.loads(raw)
        if ev.get("@client_id") != self.id:
            return False
        self.events.append(ev)
        if ev["@type"] == "error":
            self.errors.append(ev)
        st = ev.get("authorization_state", {}).get("@type")
        if ev["@type"] == "updateAuthorizationState" and st == "authorizationStateClosed":
            self.closed = True
        return True

    def wait(self, pred, timeout):
        """Pumps until pred() holds (True) or timeout seconds passed (False)."""
        end = time.monotonic() + timeout
        while not pred():
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.pump(min(left, 0.1))
        return True

    def test_proxy(self, dc_id, timeout):
        """testProxy: one connection through the proxy to DC dc_id, whose handshake begins with
        req_pq_multi; returns TDLib's answer (None if none came within timeout seconds)."""
        self.send({"@type": "testProxy", "proxy": self.proxy, "dc_id": dc_id,
                   "timeout": timeout, "@extra": f"testProxy{dc_id}"})
        self.wait(lambda: self.answer(f"testProxy{dc_id}"), timeout + 5)
        return self.answer(f"testProxy{dc_id}")

    def answer(self, extra):
        return next((e for e in self.events if e.get("@extra") == extra), None)

    def close(self, timeout=10):
        """close, then authorizationStateClosed within timeout seconds (True if it came)."""
        if not self.closed:
            self.send({"@type": "close"})
        return self.wait(lambda: self.closed, timeout)
