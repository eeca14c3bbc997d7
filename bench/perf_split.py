#!/usr/bin/env python3
"""perf_split.py: where a relay's CPU goes, from `perf record -g` samples of the proxy.

    bench/perf_split.py PERF.DATA [--cpu-per-gb X] [--floor F]
    bench/perf_split.py --runs SOFTIRQ.CSV PERF_DIR
    bench/perf_split.py --self-test

Reads `perf script` of PERF.DATA and puts each sample in one bucket, by its call chain:
  softirq     under the softirq handler (on loopback mostly the peers' TCP receive and send)
  aes         in libcrypto (the two AES-CTR passes)
  copy        the kernel's user copies (_copy_to_iter / _copy_from_iter and the like)
  wake        _raw_spin_unlock_irqrestore etc. outside softirq: waking a peer, timers
              (in a VM with cpu-clock sampling, time with interrupts off lands here)
  tcp-recv    the rest of read/readv/recvmsg (tcp_recvmsg, the ACKs it sends...)
  tcp-send    the rest of write/writev/sendmsg (tcp_sendmsg, transmit)
  epoll       epoll_wait / epoll_ctl
  syscall     other syscalls and entry/exit
  user        our code, libc, libev
Prints each bucket's share of the samples and, with --cpu-per-gb (the run's proxy CPU-s per
GB), its CPU-s per GB; with --floor too, each as a multiple of that floor.
--runs: for a bench/softirq.sh run made with --keep-perf PERF_DIR (and --floor): each kept
perf.data with its CSV row (the files are numbered in row order), every bucket as a multiple of
that repetition's AES floor; prints a markdown table of the medians per client and build.
"""
import collections
import csv
import glob
import re
import statistics
import subprocess
import sys

COPY = ("_copy_to_iter", "_copy_from_iter", "copy_user_enhanced_fast_string",
        "copy_user_generic", "rep_movs_alternative", "__copy_user", "copyout", "copyin",
        "copy_page_to_iter", "copy_page_from_iter", "skb_copy_datagram_iter",
        "__skb_datagram_iter", "skb_do_copy_data_nocache", "_copy_from_iter_full")
WAKE = ("_raw_spin_unlock_irqrestore", "_raw_spin_unlock_irq", "try_to_wake_up",
        "__wake_up_common", "__wake_up_sync_key", "sock_def_readable", "sk_stream_write_space")
RECV = ("tcp_recvmsg", "sock_recvmsg", "do_readv", "ksys_read", "__sys_recvfrom", "vfs_readv",
        "sock_read_iter")
SEND = ("tcp_sendmsg", "__sys_sendmsg", "sock_write_iter", "do_writev", "ksys_write",
        "__sys_sendto", "tcp_sendmsg_locked")
EPOLL = ("do_epoll_wait", "__x64_sys_epoll_wait", "do_epoll_ctl", "ep_poll",
         "__x64_sys_epoll_ctl", "do_epoll_pwait")
SOFTIRQ = ("handle_softirqs", "__do_softirq")
ORDER = ("softirq", "aes", "copy", "wake", "tcp-recv", "tcp-send", "epoll", "syscall", "user",
         "kernel-other")


def bucket(frames):
    """frames: [(sym, dso)], innermost first."""
    syms = [f[0] for f in frames]
    if any(s in SOFTIRQ for s in syms):
        return "softirq"
    if not frames:
        return "kernel-other"
    top, dso = frames[0]
    if "libcrypto" in dso:
        return "aes"
    if "kernel" not in dso:
        return "user"
    if top in COPY or top.startswith("copy_user") or top.startswith("rep_mov"):
        return "copy"
    if top in WAKE:
        return "wake"
    if any(s in RECV for s in syms):
        return "tcp-recv"
    if any(s in SEND for s in syms):
        return "tcp-send"
    if any(s in EPOLL for s in syms):
        return "epoll"
    if any(s.startswith("do_syscall") or s.startswith("entry_SYSCALL") or
           s.startswith("syscall_exit") for s in syms):
        return "syscall"
    return "kernel-other"


def samples(path):
    out = subprocess.run(["perf", "script", "-i", path, "-F", "ip,sym,dso"],
                         capture_output=True, text=True, check=True).stdout
    return parse_script(out)


def parse_script(out):
    """Call chains from `perf script -F ip,sym,dso` text: one sample per blank-line-separated
    paragraph, each line "ADDR SYM+OFF (DSO)", innermost first."""
    frames = []
    for line in out.splitlines() + [""]:
        line = line.strip()
        if not line:
            if frames:
                yield frames
            frames = []
            continue
        parts = line.split(None, 1)
        rest = parts[1] if len(parts) > 1 else ""
        sym, _, dso = rest.rpartition(" (")
        sym = sym.split("+")[0]
        frames.append((sym, dso.rstrip(")")))


def runs_table(csv_path, perf_dir):
    rows = list(csv.DictReader(open(csv_path)))
    cells = collections.defaultdict(list)
    for path in glob.glob(perf_dir + "/*.data"):
        m = re.search(r"([a-z]+)-([a-z]+)-([a-z]+)-(\d+)\.data$", path)
        if not m:
            continue
        row = rows[int(m.group(4)) - 1]
        if row["client"] != m.group(1) or row["build"] != m.group(3):
            print("perf_split.py: %s does not match row %s" % (path, m.group(4)), file=sys.stderr)
            return 1
        floor, cpu = float(row["floor_s_per_gb"]), float(row["cpu_s_per_gb"])
        if floor <= 0:
            print("perf_split.py: %s has no floor (run softirq.sh with --floor)" % csv_path,
                  file=sys.stderr)
            return 1
        counts = collections.Counter(bucket(fr) for fr in samples(path))
        total = sum(counts.values()) or 1
        share = {k: counts[k] / total for k in ORDER}
        share["process"] = 1 - share["softirq"]
        cells[(m.group(1), m.group(2), m.group(3))].append(
            {k: cpu * v / floor for k, v in share.items()})
    keys = [k for k in ORDER if k != "softirq"] + ["process", "softirq"]
    print("| client | mode | build | " + " | ".join(keys) + " | runs |")
    print("|---|---|---|" + "---|" * (len(keys) + 1))
    for (client, mode, build), runs in sorted(cells.items()):
        print("| %s | %s | %s | " % (client, mode, build) +
              " | ".join("%.2f" % statistics.median(r[k] for r in runs) for k in keys) +
              " | %d |" % len(runs))
    return 0


SELF_TEST_SCRIPT = """\
\tffffffff8201024d _copy_to_iter+0x1d ([kernel.kallsyms])
\tffffffff820113ae tcp_recvmsg+0x6e ([kernel.kallsyms])
\t           fddfd __GI___readv+0x4d (/usr/lib/x86_64-linux-gnu/libc.so.6)

\t          de175 [unknown] (/usr/lib/x86_64-linux-gnu/libcrypto.so.3)

\tffffffff81000001 tcp_v4_rcv+0x1 ([kernel.kallsyms])
\tffffffff81000002 handle_softirqs+0x2 ([kernel.kallsyms])
\tffffffff81000003 __tcp_transmit_skb+0x3 ([kernel.kallsyms])
\tffffffff81000004 tcp_sendmsg+0x4 ([kernel.kallsyms])

\tffffffff81000005 _raw_spin_unlock_irqrestore+0x5 ([kernel.kallsyms])
\tffffffff81000006 tcp_write_xmit+0x6 ([kernel.kallsyms])
\tffffffff81000007 tcp_sendmsg+0x7 ([kernel.kallsyms])

\tffffffff81000008 tcp_sendmsg_locked+0x8 ([kernel.kallsyms])
\tffffffff81000009 tcp_sendmsg+0x9 ([kernel.kallsyms])

\tffffffff8100000a tcp_recvmsg_locked+0xa ([kernel.kallsyms])
\tffffffff8100000b sock_recvmsg+0xb ([kernel.kallsyms])

\tffffffff8100000c ep_poll+0xc ([kernel.kallsyms])
\tffffffff8100000d do_epoll_wait+0xd ([kernel.kallsyms])

\tffffffff8100000e syscall_exit_to_user_mode+0xe ([kernel.kallsyms])
\tffffffff8100000f do_syscall_64+0xf ([kernel.kallsyms])

\t            f445 relay_event+0x15 (/work/build/mtproxy)

\tffffffff81000010 schedule+0x10 ([kernel.kallsyms])
"""
SELF_TEST_WANT = ["copy", "aes", "softirq", "wake", "tcp-send", "tcp-recv", "epoll", "syscall",
                  "user", "kernel-other"]


def self_test():
    got = [bucket(fr) for fr in parse_script(SELF_TEST_SCRIPT)]
    if got != SELF_TEST_WANT:
        print("self-test: buckets %s, expected %s" % (got, SELF_TEST_WANT))
        return 1
    first = next(iter(parse_script(SELF_TEST_SCRIPT)))
    if first[0] != ("_copy_to_iter", "[kernel.kallsyms]") or len(first) != 3:
        print("self-test: first sample parsed as %s" % (first,))
        return 1
    print("self-test: ok")
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    if argv[1] == "--runs" and len(argv) == 4:
        return runs_table(argv[2], argv[3])
    cpu = floor = None
    if "--cpu-per-gb" in argv:
        cpu = float(argv[argv.index("--cpu-per-gb") + 1])
    if "--floor" in argv:
        floor = float(argv[argv.index("--floor") + 1])
    counts = dict.fromkeys(ORDER, 0)
    for fr in samples(argv[1]):
        counts[bucket(fr)] += 1
    total = sum(counts.values()) or 1
    proc = total - counts["softirq"]
    for k in ORDER:
        line = "%-12s %6.1f %%" % (k, 100.0 * counts[k] / total)
        if cpu is not None:
            v = cpu * counts[k] / total
            line += "  %.3f CPU-s/GB" % v
            if floor:
                line += "  %.2f x floor" % (v / floor)
        print(line)
    line = "%-12s %6.1f %%" % ("process", 100.0 * proc / total)
    if cpu is not None:
        v = cpu * proc / total
        line += "  %.3f CPU-s/GB" % v
        if floor:
            line += "  %.2f x floor" % (v / floor)
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
