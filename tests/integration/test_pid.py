"""test_pid.py: mtproxy runs and relays with a process id above 65535 (no 16-bit pid bug)."""
import os
import re
import shutil
import signal
import subprocess

import pytest

import harness
from harness import assert_ok, new_secret, wait_until

TARGET_PID = 70000  # the pid mtproxy gets inside its own pid namespace

# Runs mtproxy "$@" as pid TARGET in a new pid namespace with its own /proc: the namespace's
# init (a shell) sets ns_last_pid and forks once, and passes mtproxy's exit status out through
# unshare. unshare ignores SIGTERM, so this outer shell forwards SIGTERM/SIGINT/SIGHUP/SIGUSR1
# to mtproxy itself (the grandchild of unshare); if the outer shell is killed, --kill-child
# takes the namespace down.
LAUNCHER = r"""#!/bin/sh
# pid launcher written by test_pid.py: runs mtproxy as pid {target} in a new pid namespace.
unshare --pid --fork --mount-proc --kill-child=SIGKILL sh -c '
echo {last} > /proc/sys/kernel/ns_last_pid || exit 97
"$@" &
wait $!' sh {mtproxy} "$@" &
u=$!
fwd() {{
    for init in $(cat /proc/$u/task/$u/children 2>/dev/null); do
        for m in $(cat /proc/$init/task/$init/children 2>/dev/null); do kill -"$1" "$m"; done
    done
}}
trap 'fwd TERM' TERM
trap 'fwd INT' INT
trap 'fwd HUP' HUP
trap 'fwd USR1' USR1
while :; do
    wait $u
    rc=$?
    kill -0 $u 2>/dev/null || break
done
exit $rc
"""


def _pidns_usable():
    """None if a pid namespace with a chosen pid can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root (unshare --pid and writing ns_last_pid)"
    if not shutil.which("unshare"):
        return "unshare (util-linux) is not installed"
    try:
        r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c",
                            f"echo {TARGET_PID - 1} > /proc/sys/kernel/ns_last_pid && "
                            "sh -c 'echo $$'"], capture_output=True, timeout=20)
    except OSError as e:
        return f"unshare failed: {e}"
    if r.returncode != 0:
        return f"unshare --pid not permitted here: {r.stderr.decode(errors='replace').strip()}"
    if r.stdout.decode().strip() != str(TARGET_PID):
        return f"ns_last_pid did not take effect (got pid {r.stdout.decode().strip()})"
    return None


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _nspid(pid, tid=None):
    """The NSpid line of a process (or thread): its id in each namespace, outermost first."""
    path = f"/proc/{pid}/task/{tid}/status" if tid else f"/proc/{pid}/status"
    with open(path) as f:
        for line in f:
            if line.startswith("NSpid:"):
                return [int(x) for x in line.split()[1:]]
    return []


def test_proxy_serves_with_pid_above_65535(procs, bins, tmp_path):
    why = _pidns_usable()
    if harness.EMULATOR:
        why = "the pid-namespace launcher script cannot run behind MTPROXY_EMULATOR; runs natively"
    if why:
        pytest.skip(f"cannot run mtproxy with a pid above 65535: {why}")
    if not bins["mtproxy"]:
        pytest.skip("MTPROXY_BIN not set or not executable")

    launcher = tmp_path / "pidns_launcher.sh"
    launcher.write_text(LAUNCHER.format(target=TARGET_PID, last=TARGET_PID - 1,
                                        mtproxy="'" + bins["mtproxy"] + "'"))
    launcher.chmod(0o755)
    wrapped = dict(bins, mtproxy=str(launcher))  # the harness runs the launcher as "mtproxy"
    secret, dd = new_secret(), "dd" + new_secret()
    dc = procs.fake_dc([(2, "normal"), (4, "normal")])
    proxy = harness.Proxy(wrapped, procs.workdir, [("plain", secret), ("padded", dd)],
                          [(2, dc.addr(2)), (4, dc.addr(4))], workers=2, name="mtproxy_pid")
    procs.all.append(proxy)  # stopped (SIGTERM, forwarded) and checked at teardown

    # mtproxy says which pid it has, and the kernel agrees, for every thread.
    m = wait_until(lambda: re.search(r"started, pid (\d+)", proxy.stderr_tail(200)), 10)
    assert m, f"no start line from mtproxy:\n{proxy.stderr_tail()}"
    assert int(m.group(1)) == TARGET_PID, m.group(0)
    unshare = _children(proxy.pid)
    inits = [c for u in unshare for c in _children(u)]
    found = [c for i in inits for c in _children(i) if _nspid(c)[-1:] == [TARGET_PID]]
    assert len(found) == 1, f"mtproxy not found under the launcher {proxy.pid}"
    host_pid = found[0]
    tids = [int(t) for t in os.listdir(f"/proc/{host_pid}/task")]
    assert len(tids) >= 3, tids  # main + 2 workers
    for t in tids:
        assert _nspid(host_pid, t)[-1] > 65535, (t, _nspid(host_pid, t))

    # End to end, every byte checked both ways, on both secrets and several connections.
    assert_ok(procs.client(proxy, secret, "ee", 2, 200000, 300000, "--expect-id", 2,
                           "--conns", 8))
    assert_ok(procs.client(proxy, secret, "ef", 4, 10000, 10000, "--expect-id", 4))
    assert_ok(procs.client(proxy, dd, "dd", 2, 50000, 50000, "--expect-id", 2))
    assert dc.wait_line(r"^DONE listener=4 up_ok=10000 mismatch=none$", 5)

    # SIGTERM (forwarded into the namespace): a clean exit, status 0.
    rc, _secs = proxy.stop(signal.SIGTERM, timeout=10)
    assert rc == 0, f"mtproxy exited with {rc}:\n{proxy.stderr_tail()}"
    assert "stopped" in proxy.stderr_tail(20)
