#!/usr/bin/env python3
"""relay_report.py: turns relay.sh / memory.sh CSVs into Markdown tables and gnuplot PNGs.

Usage: relay_report.py OUTDIR            (reads relay.csv, crypto.csv, replay.csv)
       relay_report.py --memory OUTDIR   (reads memory.csv)
Every figure is the median over the repeated runs of one cell. Stdlib only.
"""
import csv
import os
import shutil
import statistics
import subprocess
import sys


def rows(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def med(vals):
    vals = [float(v) for v in vals]
    return statistics.median(vals) if vals else 0.0


def group(rs, keys):
    out = {}
    for r in rs:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


def table(head, body):
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def f1(x):
    return "%.1f" % x


def f2(x):
    return "%.2f" % x


def plot(out, name, title, ylabel, series, xlabel="block size (KiB)", logx=True):
    """series: list of (title, [(x, y), ...]); writes name.png with gnuplot if installed."""
    if not shutil.which("gnuplot") or not series:
        return
    dat = os.path.join(out, name + ".dat")
    with open(dat, "w") as f:
        for i, (_, pts) in enumerate(series):
            f.write("# %d\n" % i)
            for x, y in pts:
                f.write("%s %s\n" % (x, y))
            f.write("\n\n")
    plots = ", ".join("'%s' index %d with linespoints title '%s'" % (dat, i, t)
                      for i, (t, _) in enumerate(series))
    script = ("set terminal pngcairo size 800,500\nset output '%s'\nset title '%s'\n"
              "set xlabel '%s'\nset ylabel '%s'\n%sset key outside right\nset grid\nplot %s\n"
              % (os.path.join(out, name + ".png"), title, xlabel, ylabel,
                 "set logscale x 2\n" if logx else "", plots))
    subprocess.run(["gnuplot"], input=script.encode(), check=False)
    os.remove(dat)


def relay(out):
    rs = [r for r in rows(os.path.join(out, "relay.csv")) if r["errors"] == "0"]
    bad = [r for r in rows(os.path.join(out, "relay.csv")) if r["errors"] != "0"]
    crypto = {int(r["size"]): float(r["mb_s"]) for r in rows(os.path.join(out, "crypto.csv"))}
    md = []
    if crypto:
        md.append("## AES-256-CTR through crypto.h (the crypto bound)\n")
        md.append(table(["buffer", "MB/s", "half (two passes per byte)"],
                        [[f"{s // 1024} KiB", f1(v), f1(v / 2)]
                         for s, v in sorted(crypto.items())]))
    # A. block sweep
    blk = [r for r in rs if r["label"].startswith("block=")]
    body = []
    series = {}
    for key, g in sorted(group(blk, ["label", "client", "workload", "conns"]).items(),
                         key=lambda kv: (int(kv[0][0][6:]), kv[0][1], kv[0][2], int(kv[0][3]))):
        b = int(key[0][6:])
        wl = key[2]
        down = med(r["mb_s_down"] for r in g)
        up = med(r["mb_s_up"] for r in g)
        mbs = up if wl.endswith("up") else down
        bound = crypto.get(b, 0) / 2
        lat = ""
        if wl == "small":
            lat = "%s / %s" % (f1(med(r["lat_p50_us"] for r in g)),
                               f1(med(r["lat_p99_us"] for r in g)))
        body.append([b // 1024, key[1], wl, key[3], f1(down), f1(up),
                     ("%.0f%%" % (100 * mbs / bound)) if bound and wl != "small" else "",
                     f2(med(r["cpu_s_per_gb"] for r in g)), f1(med(r["reads_per_mb"] for r in g)),
                     f1(med(r["writes_per_mb"] for r in g)), lat, len(g)])
        if wl in ("bulk-down", "bulk-up"):
            series.setdefault("%s %s %s conn" % (key[1], wl, key[3]), []).append(
                (b // 1024, mbs))
    if body:
        md.append("\n## Relay throughput by block size (fast mode + splice on, one worker)\n")
        md.append("MB/s = 10^6 bytes/s verified by the receiver; 'of half AES' = the direction's "
                  "MB/s over half the AES-256-CTR speed at that buffer size; CPU s/GB, reads/MB "
                  "and writes/MB are the proxy's (both directions' bytes); small = 200-byte "
                  "messages echoed, latency p50/p99 in microseconds.\n\n")
        md.append(table(["block KiB", "client", "workload", "conns", "MB/s down", "MB/s up",
                         "of half AES", "proxy CPU s/GB", "reads/MB", "writes/MB",
                         "RTT p50/p99 us", "runs"], body))
        bound = [(s // 1024, v / 2) for s, v in sorted(crypto.items())]
        plot(out, "relay_throughput_1conn", "Relay throughput, 1 connection", "MB/s",
             [(t, p) for t, p in sorted(series.items()) if t.endswith(" 1 conn")] +
             ([("half AES-256-CTR", bound)] if bound else []))
        plot(out, "relay_throughput_64conn", "Relay throughput, 64 connections", "MB/s",
             [(t, p) for t, p in sorted(series.items()) if t.endswith(" 64 conn")] +
             ([("half AES-256-CTR", bound)] if bound else []))
        cpu = {}
        for key, g in group(blk, ["label", "client", "workload", "conns"]).items():
            if key[2] in ("bulk-down", "bulk-up") and key[3] == "1":
                cpu.setdefault("%s %s" % (key[1], key[2]), []).append(
                    (int(key[0][6:]) // 1024, med(r["cpu_s_per_gb"] for r in g)))
        plot(out, "relay_cpu_per_gb", "Proxy CPU seconds per GB, 1 connection", "CPU s / GB",
             [(t, sorted(p)) for t, p in sorted(cpu.items())])
    with open(os.path.join(out, "relay.md"), "w") as f:
        f.write("# Relay benchmark (bench/relay.sh)\n\n" + "".join(md))
        if bad:
            f.write("\n%d run(s) reported errors and are left out.\n" % len(bad))
    # B. fast path
    fp = [r for r in rs if r["label"].startswith("fast=")]
    if fp:
        g = group(fp, ["label", "client", "workload"])
        body = []
        for client in ("dd", "tls"):
            for wl in ("bulk-down", "bulk-up"):
                base = med(r["cpu_s_per_gb"] for r in g.get(("fast=off", client, wl), [])) or 0
                for mode in ("off", "on", "splice-tlscopy", "splice"):
                    cell = g.get(("fast=" + mode, client, wl), [])
                    if not cell:
                        continue
                    c = med(r["cpu_s_per_gb"] for r in cell)
                    col = "mb_s_down" if wl == "bulk-down" else "mb_s_up"
                    body.append([client, wl, {"off": "off", "on": "on, splice off",
                                              "splice-tlscopy": "on + splice, splice-tls off",
                                              "splice": "on + splice"}[mode],
                                 f1(med(r[col] for r in cell)), f2(c),
                                 f2(c / base) if base else "",
                                 f1(med(r["reads_per_mb"] for r in cell)),
                                 f1(med(r["writes_per_mb"] for r in cell)),
                                 f1(med(float(r["proxy_spliced"]) / 1e6 for r in cell)),
                                 f2(med(r["load_cpu_s"] for r in cell)), len(cell)])
        with open(os.path.join(out, "fastpath.md"), "w") as f:
            f.write("# Fast mode and splice (bench/relay.sh, 1 connection, one worker)\n\n")
            f.write(table(["client", "direction", "fast mode", "MB/s", "proxy CPU s/GB",
                           "vs fast off", "reads/MB", "writes/MB", "MB spliced", "load tool CPU s",
                           "runs"], body))
    # C. batching
    bt = [r for r in rs if r["label"].startswith("batch=")]
    if bt:
        body = []

        def window(label):  # "batch=10:cork" -> (10, "cork"); "batch=0" -> (0, "")
            w, _, m = label[6:].partition(":")
            return int(w), m

        for key, g in sorted(group(bt, ["label", "client", "workload"]).items(),
                             key=lambda kv: (kv[0][2], kv[0][1], window(kv[0][0]))):
            w, m = window(key[0])
            body.append([w, m or "-", key[1], key[2],
                         f1(med(float(r["msgs"]) / float(r["seconds"])
                                                    for r in g)),
                         f2(med(r["mb_s_down"] for r in g)), f1(med(r["lat_p50_us"] for r in g)),
                         f1(med(r["lat_p99_us"] for r in g)),
                         f1(med(r["writes_per_mb"] for r in g)),
                         f1(med(r["reads_per_mb"] for r in g)),
                         f2(med(r["cpu_s_per_gb"] for r in g)),
                         len(g)])
        with open(os.path.join(out, "batching.md"), "w") as f:
            f.write("# Write batching (bench/relay.sh): 200-byte messages echoed, 64 connections; "
                    "small: 4 in flight each (lock-step); trickle: one sent per ms per connection "
                    "without waiting\n\n")
            f.write(table(["write-batch ms", "write-batch-mode", "client", "workload", "messages/s", "MB/s each way",
                           "RTT p50 us", "RTT p99 us", "writes/MB", "reads/MB", "proxy CPU s/GB",
                           "runs"], body))
    # F. socket buffers
    sb = [r for r in rs if r["label"].startswith("sockbuf=")]
    if sb:
        def size(label):  # "sockbuf=256k" -> 262144 (0 = kernel default)
            v = label[8:]
            return int(v[:-1]) << {"k": 10, "M": 20}[v[-1]] if v[-1] in "kM" else int(v)

        body = []
        for key, g in sorted(group(sb, ["label", "client", "workload", "conns"]).items(),
                             key=lambda kv: (kv[0][1], kv[0][2], int(kv[0][3]),
                                             size(kv[0][0]))):
            col = "mb_s_up" if key[2].endswith("up") else "mb_s_down"
            body.append([key[0][8:] if key[0] != "sockbuf=0" else "0 (kernel, autotuned)",
                         key[1], key[2], key[3], f1(med(r[col] for r in g)),
                         f2(med(r["cpu_s_per_gb"] for r in g)),
                         f1(med(r["reads_per_mb"] for r in g)),
                         f1(med(r["writes_per_mb"] for r in g)), len(g)])
        with open(os.path.join(out, "sockbuf.md"), "w") as f:
            f.write("# Socket buffers (bench/relay.sh): SO_SNDBUF = SO_RCVBUF on every proxy "
                    "socket, 16 KiB blocks, one worker\n\n")
            f.write(table(["sndbuf = rcvbuf", "client", "workload", "conns", "MB/s",
                           "proxy CPU s/GB", "reads/MB", "writes/MB", "runs"], body))
    # D/E. handshakes and dc pool
    hs = [r for r in rs if r["label"] == "handshake"]
    pool = [r for r in rs if r["label"].startswith("pool=")]
    with open(os.path.join(out, "handshake.md"), "w") as f:
        if hs:
            f.write("# Handshakes per second, one worker (16 in flight)\n\n")
            f.write(table(["client", "handshakes/s", "connect->first DC byte p50 us", "p99 us",
                           "proxy CPU s", "runs"],
                          [[k[0], f1(med(r["handshakes_per_s"] for r in g)),
                            f1(med(r["connect_p50_us"] for r in g)),
                            f1(med(r["connect_p99_us"] for r in g)),
                            f2(med(r["proxy_cpu_s"] for r in g)), len(g)]
                           for k, g in sorted(group(hs, ["client"]).items())]))
        if pool:
            f.write("\n# Client connect to first DC byte, dc-pool off vs on "
                    "(dd, one at a time)\n\n")
            f.write(table(["dc-pool", "handshakes/s", "p50 us", "p99 us", "runs"],
                          [[k[0][5:], f1(med(r["handshakes_per_s"] for r in g)),
                            f1(med(r["connect_p50_us"] for r in g)),
                            f1(med(r["connect_p99_us"] for r in g)), len(g)]
                           for k, g in sorted(group(pool, ["label"]).items())]))
    rp = rows(os.path.join(out, "replay.csv"))
    if rp:
        with open(os.path.join(out, "replay.md"), "w") as f:
            f.write("# Replay cache (bench/bench_replay, sized as main.c sizes --replay-cache)\n\n")
            f.write(table(["budget", "entries", "memory bytes", "bytes/entry",
                           "ns per check_and_add (new key)", "ns (replay hit)"],
                          [["%d KiB" % (int(r["budget_bytes"]) // 1024), r["entries"],
                            r["memory_bytes"], r["bytes_per_entry"], r["ns_add_miss"], r["ns_hit"]]
                           for r in rp]))


def memory(out):
    rs = [r for r in rows(os.path.join(out, "memory.csv"))]
    body = []
    cells = group(rs, ["label", "workload", "conns"])
    per = {}
    for key, g in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1], int(kv[0][2]))):
        n = int(key[2])
        base = med(r["rss_base_kb"] for r in g)
        col = "rss_ready_kb" if key[1] == "idle" else "rss_end_kb"
        rss = med(r[col] for r in g)
        per.setdefault((key[0], key[1]), []).append((n, rss))
        body.append([key[0], key[1], n, "%.0f" % base, "%.0f" % rss,
                     "%.0f" % med(r["heap_kb"] for r in g), "%.0f" % med(r["anon_kb"] for r in g),
                     "%.0f" % med(r["stack_kb"] for r in g),
                     "%.2f" % ((rss - base) / n), med(r["errors"] for r in g) and "yes" or "",
                     len(g)])
    slopes = []
    for (label, wl), pts in sorted(per.items()):
        pts.sort()
        for (n1, r1), (n2, r2) in zip(pts, pts[1:]):
            slopes.append([label, wl, "%d -> %d" % (n1, n2), "%.2f" % ((r2 - r1) / (n2 - n1))])
    with open(os.path.join(out, "memory.md"), "w") as f:
        f.write("# Proxy memory per connection (bench/memory.sh, one worker)\n\n")
        f.write("RSS = VmRSS; heap = [heap] Rss; anon = other anonymous mappings (arena slabs, "
                "malloc arenas); stack = [stack] + 8 MiB thread stacks; all KiB. Per conn = "
                "(RSS - RSS of the fresh proxy before any client) / N.\n\n")
        f.write(table(["config", "workload", "N", "base KiB", "RSS KiB", "heap KiB", "anon KiB",
                       "stack KiB", "KiB per conn", "errors", "runs"], body))
        f.write("\n## Slope between two N (KiB per added connection)\n\n")
        f.write(table(["config", "workload", "between", "KiB per conn"], slopes))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--memory":
        memory(sys.argv[2])
    elif len(sys.argv) == 2:
        relay(sys.argv[1])
    else:
        sys.exit(__doc__)
