"""test_middle_stall.py: clients that stop reading below me-client-buffer must not freeze their ME
link for everyone on it (issue 24, finding 3): a link paused past me-stall-grace closes them."""
import re

from harness import EMULATOR, T, wait_until
from test_middle import Middle, summary, wait_ready

STALL_BYTES = 3 << 20  # under me-client-buffer (4 MiB): never closed as slow


def test_stalled_clients_do_not_freeze_the_link(procs):
    # One link; three clients asking 3 MiB each and never reading hold about 8.5 MiB, past
    # me-link-buffer (6 MiB here, so the pause is certain whatever the kernel buffers take) and
    # far past its resume mark: before the fix the link stayed paused and no reader finished.
    mid = Middle(procs, extra=["--sndbuf", "65536", "--me-link-buffer", "6M"])  # grace: 2 s
    wait_ready(mid)
    readers = 40
    each = (256 << 10) if EMULATOR else (1 << 20)
    mark = mid.me.mark()
    stalled = mid.client_bg("--tag", "dd", "--clients", 3, "--stall", 3, "--download",
                            STALL_BYTES, "--hold-ms", int(T(60) * 1000), "--timeout", int(T(90)))
    # their requests first: the ME answers them in full before anything else
    assert wait_until(lambda: len(mid.me.reqs(mark)) >= 3, 10), mid.me.lines[mark:]
    rc, out, err = mid.client("--tag", "dd", "--clients", readers, "--download", each,
                              "--timeout", int(T(20)), timeout=40)
    s = summary(out)
    assert rc == 0 and s["ok"] == readers, out[-2000:] + err + mid.proxy.stderr_tail(2000)
    print(f"{readers} readers beside 3 stalled clients: {s['mibps']:.1f} MiB/s, "
          f"{s['secs']:.2f} s")
    st = mid.stats()
    assert st["me_link_pauses"] >= 1, st
    assert 1 <= st["me_stalled_evicted"] <= 3, st
    assert st["closed_slow-client"] == st["me_stalled_evicted"], st  # nobody else closed
    assert st["me_slow_closed"] == 0 and st["me_link_drops"] == 0, st
    log = mid.proxy.stderr_tail(200000)
    lines = re.findall(r"conn \d+ 127\.0\.0\.1:\d+: closed as stalled: held \d+ .*", log)
    assert len(lines) == st["me_stalled_evicted"], log[-3000:]
    # the link is read again: a new client gets its answers
    rc, out, err = mid.client("--tag", "dd", "--echo", 5, timeout=20)
    assert rc == 0, out + err
    stalled.stop()


def test_slow_readers_are_left_to_drain(procs):
    # Two readers at 128 KiB/s (through 64 KiB receive buffers: they read in bursts about a
    # second apart) hold a 1.5 MiB link paused past the grace (2 s; its resume mark is 3 s of
    # their reading away), but they read: nobody is closed, and each gets its whole download.
    mid = Middle(procs, extra=["--sndbuf", "65536", "--me-link-buffer", "1536k"])
    wait_ready(mid)
    rc, out, err = mid.client("--tag", "dd", "--clients", 2, "--download", 3 << 19, "--rate", 128,
                              "--timeout", int(T(40)), timeout=80)
    s = summary(out)
    assert rc == 0 and s["ok"] == 2, out[-2000:] + err
    st = mid.stats()
    assert st["me_link_pauses"] >= 1, st
    assert st["me_stalled_evicted"] == 0 and st["closed_slow-client"] == 0, st
    # the check ran and found them reading (the proxy logs at debug in the tests)
    checks = re.findall(r"paused [\d.]+ s, (\d+) clients hold \d+ bytes, (\d+) of them reading: "
                        r"closing (\d+)", mid.proxy.stderr_tail(200000))
    assert checks and all(c[0] == c[1] and c[2] == "0" for c in checks), checks
