#!/usr/bin/env python3
"""test-luci.py: luci-app-mtproxy: the JS views parse, the menu and ACL JSON hold together, the
view's options are exactly the ones the init script reads, and the rpcd plugin answers.

Usage: test-luci.py (node on PATH; run in a loopback-only network namespace: it serves a fake
metrics endpoint on 127.0.0.1)."""
import http.server
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
OWRT = os.path.dirname(HERE)
APP = os.path.join(OWRT, "luci-app-mtproxy")
VIEWS = os.path.join(APP, "htdocs/luci-static/resources/view/mtproxy")
MENU = os.path.join(APP, "root/usr/share/luci/menu.d/luci-app-mtproxy.json")
ACL = os.path.join(APP, "root/usr/share/rpcd/acl.d/luci-app-mtproxy.json")
PLUGIN = os.path.join(APP, "root/usr/libexec/rpcd/luci.mtproxy")
GEN = os.path.join(OWRT, "files/mtproxy-uci-gen.sh")
INIT = os.path.join(OWRT, "files/mtproxy.init")
# Modules LuCI (23.05+) ships in luci-base that a view may 'require'.
LUCI_MODULES = {"view", "form", "rpc", "uci", "poll", "dom", "ui", "fs", "uqr", "network"}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)
    return cond


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# 1. Every view parses as LuCI loads it: the file is the body of a function (it ends in a
# top-level `return view.extend(...)`), so plain `node --check` cannot take it as it is.
PARSE = r"""
const vm = require('vm'), fs = require('fs');
for (const f of process.argv.slice(1)) {
    const src = fs.readFileSync(f, 'utf8');
    try { new vm.Script('(function(){' + src + '\n})', { filename: f }); }
    catch (e) { console.error(f + ': ' + e); process.exitCode = 1; }
}
"""
views = sorted(os.path.join(VIEWS, f) for f in os.listdir(VIEWS) if f.endswith(".js"))
check(len(views) == 2, "two views (settings, status): %s" % views)
r = subprocess.run(["node", "-e", PARSE] + views, capture_output=True, text=True)
check(r.returncode == 0, "views parse: " + r.stderr.strip())
for v in views:
    src = read(v)
    check(re.search(r"^return view\.extend\(", src, re.M) is not None, v + ": returns view.extend")
    for mod in re.findall(r"^'require ([\w.]+)';", src, re.M):
        check(mod in LUCI_MODULES, "%s: requires unknown module %s" % (v, mod))

# 2. The JSON files parse, the menu's views exist, the ACL is the one the menu depends on and
# grants the mtproxy UCI config and the rpcd methods the views call.
menu = json.loads(read(MENU))
acl = json.loads(read(ACL))
for path, entry in menu.items():
    check(path.startswith("admin/services/mtproxy"), "menu path " + path)
    act = entry.get("action", {})
    if act.get("type") == "view":
        check(os.path.exists(os.path.join(APP, "htdocs/luci-static/resources/view",
                                          act["path"] + ".js")), "menu view exists: " + act["path"])
for dep in menu["admin/services/mtproxy"]["depends"]["acl"]:
    check(dep in acl, "menu's ACL %s is defined" % dep)
grant = acl["luci-app-mtproxy"]
check("mtproxy" in grant["read"]["uci"] and "mtproxy" in grant["write"]["uci"],
      "ACL reads and writes uci mtproxy")
called = set()
for v in views:
    src = read(v)
    for obj, meth in re.findall(r"object:\s*'([\w.]+)',\s*method:\s*'(\w+)'", src):
        called.add((obj, meth))
granted = {(o, m) for o, ms in grant["read"].get("ubus", {}).items() for m in ms}
check(called <= granted, "ACL grants every ubus call of the views: missing %s" % (called - granted))
plugin_methods = set(json.loads(subprocess.run(["sh", PLUGIN, "list"], capture_output=True,
                                               text=True).stdout))
check({m for o, m in called if o == "luci.mtproxy"} == plugin_methods,
      "the plugin lists the methods the views call: %s" % plugin_methods)

# 3. Options: what the settings view writes == what the init script (and the generator it
# sources) reads.
settings = read(os.path.join(VIEWS, "settings.js"))
written = set(re.findall(r"taboption\('\w+',\s*form\.\w+,\s*'(\w+)'", settings))
written |= set(re.findall(r"\b(?:onoff|text)\(s,\s*'\w+',\s*'(\w+)'", settings))
gen = read(GEN)
spec = re.search(r"MTPROXY_UCI_OPTIONS='\n(.*?)'", gen, re.S).group(1)
readopts = {line.split(":")[0] for line in spec.split("\n") if line}
readopts |= set(re.findall(r'config_get \w+ "\$mtproxy_uci_sec" (\w+)', gen))
readopts |= set(re.findall(r'mtproxy_uci_list "\$mtproxy_uci_sec" (\w+)', gen))
readopts |= set(re.findall(r"config_get \w+ main (\w+)", read(INIT)))
readopts |= set(re.findall(r"config_get \w+ \"\$1\" (\w+)", gen))
readopts = {o for o in readopts if not o.endswith("_LENGTH")}
check(written - readopts == set(), "view writes options the init script ignores: %s" % (written - readopts))
check(readopts - written == set(), "init script reads options the view lacks: %s" % (readopts - written))
status_src = read(os.path.join(VIEWS, "status.js"))
used = set(re.findall(r"uci\.get\('mtproxy', 'main', '(\w+)'\)", status_src))
check(used and used <= readopts, "status reads known options: %s" % used)
print("options: %d written by the view, %d read by the init script" % (len(written), len(readopts)))

# 4. The rpcd plugin: links from the links file, counters from the metrics endpoint.
tmp = tempfile.mkdtemp()
state = os.path.join(tmp, "mtproxy.state")
with open(state + ".links", "w") as f:
    f.write("secret alice: tg://proxy?server=r.example.org&port=443&secret=00112233\n"
            "secret alice: https://t.me/proxy?server=r.example.org&port=443&secret=00112233\n"
            "something else\n")
uci_values = {"state_file": state}
fake_uci = os.path.join(tmp, "uci")


def write_uci():
    with open(fake_uci, "w") as f:
        f.write("#!/bin/sh\n# fake uci: uci -q get mtproxy.main.OPTION\ncase \"$3\" in\n")
        for k, v in uci_values.items():
            f.write("mtproxy.main.%s) echo '%s' ;;\n" % (k, v))
        f.write("*) exit 1 ;;\nesac\n")
    os.chmod(fake_uci, stat.S_IRWXU)


fake_fetch = os.path.join(tmp, "fetch")
with open(fake_fetch, "w") as f:  # uclient-fetch -q -T S -O - URL, in Python
    f.write("#!%s\nimport sys, urllib.request\n"
            "sys.stdout.write(urllib.request.urlopen(sys.argv[-1], timeout=3).read().decode())\n"
            % sys.executable)
os.chmod(fake_fetch, stat.S_IRWXU)
env = dict(os.environ, MTPROXY_UCI=fake_uci, MTPROXY_FETCH=fake_fetch)


def call(method):
    out = subprocess.run(["sh", PLUGIN, "call", method], capture_output=True, text=True,
                         env=env).stdout
    try:
        return json.loads(out)
    except ValueError:
        check(False, "plugin %s answers JSON: %r" % (method, out))
        return {}


write_uci()
st = call("status")
check(st.get("links_file") == state + ".links", "status names the links file")
check([l["name"] for l in st.get("links", [])] == ["alice", "alice"]
      and st["links"][0]["url"].startswith("tg://proxy?server=r.example.org&port=443"),
      "status lists the links: %s" % st.get("links"))
check(st.get("metrics") == "", "no metrics set")
check("error" in call("stats"), "stats without metrics is an error")

STATS = {"connections": {"accepted": 7, "active": 1}, "bytes": {"up": 10, "down": 20}}


class Handler(http.server.BaseHTTPRequestHandler):
    token = ""  # metrics-token: /stats answers only with it, as mtproxy does

    def do_GET(self):
        ok = self.path == "/stats" + ("?token=" + self.token if self.token else "")
        body = json.dumps(STATS).encode() if ok else b"no"
        self.send_response(200 if ok else 401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=srv.serve_forever, daemon=True).start()
uci_values["metrics"] = "0.0.0.0:%d" % srv.server_port  # the plugin asks 127.0.0.1
write_uci()
check(call("status").get("metrics") == uci_values["metrics"], "status shows the metrics address")
check(call("stats") == STATS, "stats passes the endpoint's /stats JSON through")
Handler.token = uci_values["metrics_token"] = "c2VjcmV0_x.y~z-1"
write_uci()
check(call("stats") == STATS, "stats asks with the metrics_token")
srv.shutdown()
got = call("stats")
check("error" in got and "no answer" in got["error"], "a dead endpoint is an error: %s" % got)

if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("luci-app-mtproxy: views parse, JSON valid, options match, rpcd plugin answers")
