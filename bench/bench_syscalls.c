/* bench_syscalls.c: read(2)/write(2) throughput and call rate by buffer size, sockets, devices. */
/*
 * Method: a cell is (direction, transport, blocking or not, pinned or not, size). For "read" the
 * measured thread calls read(2) with that size while a peer thread writes 1 MiB blocks into the
 * other end, so the reader never starves; for "write" it calls write(2) while the peer drains with
 * 1 MiB reads. Each cell runs for a fixed time (not a fixed byte count, so 1 B stays bounded) on
 * a fresh connection; repeats are interleaved over all cells, and the run with the median MiB/s is
 * reported with the min..max. A run during which other processes used CPU time is redone.
 * It prints figures; it never judges them.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define BS_MAX_REPEAT 15
#define BS_MAX_SIZE ((size_t)256 << 20)
#define BS_DEFAULT_MAX_SIZE ((size_t)16 << 20)
#define BS_DEFAULT_PEER_SIZE ((size_t)1 << 20)
#define BS_IO_TIMEOUT_MS 5000 /* a blocked call longer than this is an error, not a figure */

enum bs_dir { BS_READ, BS_WRITE };

enum bs_kind { BS_SOCK_UNIX, BS_SOCK_TCP, BS_DEV_ZERO, BS_DEV_URANDOM, BS_DEV_NULL, BS_NKIND };

struct bs_transport {
    const char *name;
    const char *endpoint; /* what the measured side talks to; goes into the output */
    int can_read;
    int can_write;
};

/* /dev/zero and /dev/urandom are read-only sources: they have no write rows. Writes to a device
 * are measured on "null" (/dev/null), which has no read rows. */
static const struct bs_transport bs_transports[BS_NKIND] = {
    [BS_SOCK_UNIX] = {"unix", "socketpair(AF_UNIX)", 1, 1},
    [BS_SOCK_TCP] = {"tcp", "127.0.0.1", 1, 1},
    [BS_DEV_ZERO] = {"zero", "/dev/zero", 1, 0},
    [BS_DEV_URANDOM] = {"urandom", "/dev/urandom", 1, 0},
    [BS_DEV_NULL] = {"null", "/dev/null", 0, 1},
};

struct bs_opts {
    double duration;   /* seconds per cell and run */
    int sndbuf;        /* 0 = kernel default */
    int rcvbuf;        /* 0 = kernel default */
    unsigned pinning;  /* bit 0: unpinned cells, bit 1: pinned cells (two different CPUs) */
    unsigned kinds;    /* bit mask of enum bs_kind */
    size_t min_size;
    size_t max_size;
    unsigned step_log2; /* sizes grow by 2^step_log2 */
    int quick;
    const char *csv;
    int repeat;
    size_t peer_size;
    unsigned modes;    /* bit 0: blocking cells, bit 1: O_NONBLOCK + poll(2) cells */
    int nagle;         /* leave TCP_NODELAY off */
    double max_total;  /* refuse plans longer than this many seconds */
    int retries;       /* redo a run disturbed by other processes at most this often */
    double max_other;  /* a run is disturbed if others used more CPUs than this on average */
};

struct bs_sample {
    double secs;
    double cpu;       /* user+sys CPU seconds of the measured thread */
    uint64_t bytes;
    uint64_t calls;   /* every read/write call on the measured fd, EAGAIN ones included */
    uint64_t shorts;  /* calls that moved more than 0 but less than asked */
    uint64_t eagain;  /* calls that returned EAGAIN (non-blocking cells only) */
    double other;     /* CPUs of user-space time other processes used on average in the run */
};

struct bs_cell {
    enum bs_kind kind;
    enum bs_dir dir;
    int nonblock; /* measured socket is O_NONBLOCK and waits in poll(2) */
    int pinned;   /* measured side on cpus[0], peer on cpus[1] */
    size_t size;
    int n;
    int discarded; /* runs redone because other processes disturbed them */
    struct bs_sample runs[BS_MAX_REPEAT];
};

struct bs_peer {
    int fd;
    enum bs_dir dir; /* direction of the MEASURED side; the peer does the opposite */
    size_t size;
    unsigned char *buf;
    int cpu;         /* -1 = not pinned */
    atomic_int stop;
    int err;         /* errno of an unexpected failure, 0 if none */
};

static double bs_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double bs_thread_cpu(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0)
        return 0.0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* User-space CPU seconds this process (all its threads) has used. */
static double bs_self_user(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6;
}

/* User-space CPU seconds of the whole machine (user + nice in /proc/stat), or a negative number
 * if unknown. Tick-sampled: 10 ms resolution. Kernel time is left out on purpose: the kernel work
 * that our own sockets cause is not all charged to this process (softirqs), so it would look like
 * somebody else's; other processes that disturb a run (compilers, fuzzers) show as user time. */
static double bs_machine_user(void)
{
    unsigned long long user, nice;
    FILE *f = fopen("/proc/stat", "r");
    int got = f ? fscanf(f, "cpu %llu %llu", &user, &nice) : 0;
    if (f)
        fclose(f);
    if (got != 2)
        return -1.0;
    return (double)(user + nice) / (double)sysconf(_SC_CLK_TCK);
}

static void bs_fmt_size(char *out, size_t len, size_t size)
{
    if (size >= ((size_t)1 << 20) && size % ((size_t)1 << 20) == 0)
        snprintf(out, len, "%zu MiB", size >> 20);
    else if (size >= 1024 && size % 1024 == 0)
        snprintf(out, len, "%zu KiB", size >> 10);
    else
        snprintf(out, len, "%zu B", size);
}

/* Parses "123", "64K", "16M" (binary units). Returns 0 and fills *out, or -1. */
static int bs_parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    if (*end == 'k' || *end == 'K')
        v <<= 10, end++;
    else if (*end == 'm' || *end == 'M')
        v <<= 20, end++;
    if (*end == 'i' && end[1] == 'B')
        end += 2;
    else if (*end == 'B')
        end++;
    if (*end != '\0')
        return -1;
    *out = (size_t)v;
    return 0;
}

static int bs_parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int bs_parse_transports(const char *list, unsigned *mask)
{
    char tmp[256];
    if (strlen(list) >= sizeof(tmp))
        return -1;
    strcpy(tmp, list);
    *mask = 0;
    for (char *save = NULL, *tok = strtok_r(tmp, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int k = 0; k < BS_NKIND; k++) {
            if (strcmp(tok, bs_transports[k].name) == 0) {
                *mask |= 1u << k;
                found = 1;
            }
        }
        if (!found) {
            fprintf(stderr, "bench_syscalls: unknown transport '%s'\n", tok);
            return -1;
        }
    }
    return *mask ? 0 : -1;
}

/* Parses a comma list of the words `w0` and `w1` into bits 0 and 1 of *mask. */
static int bs_parse_pair(const char *list, const char *w0, const char *w1, unsigned *mask)
{
    char tmp[64];
    if (strlen(list) >= sizeof(tmp))
        return -1;
    strcpy(tmp, list);
    *mask = 0;
    for (char *save = NULL, *tok = strtok_r(tmp, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (strcmp(tok, w0) == 0)
            *mask |= 1;
        else if (strcmp(tok, w1) == 0)
            *mask |= 2;
        else
            return -1;
    }
    return *mask ? 0 : -1;
}

static void bs_usage(FILE *f)
{
    fprintf(f,
            "usage: bench_syscalls [options]\n"
            "  --duration S       seconds per cell and run (default 0.5; --quick: 0.02)\n"
            "  --repeat N         runs per cell, the run with the median MiB/s is reported\n"
            "                     (default 1, at most %d); runs are interleaved over cells\n"
            "  --transports LIST  comma list of unix,tcp,zero,urandom,null (default all)\n"
            "                     zero/urandom are read-only, null (/dev/null) is write-only\n"
            "  --min-size N       smallest buffer, bytes, K/M suffixes allowed (default 1)\n"
            "  --max-size N       largest buffer (default 16M, at most 256M)\n"
            "  --step-log2 N      sizes grow by 2^N (default 1; --quick: 4)\n"
            "  --peer-size N      block size of the unmeasured peer (default 1M)\n"
            "  --sndbuf N         SO_SNDBUF on both sockets (default: kernel's)\n"
            "  --rcvbuf N         SO_RCVBUF on both sockets (default: kernel's)\n"
            "  --pin              pin the measured side and the peer to two different CPUs\n"
            "  --nonblock         measured socket is O_NONBLOCK and waits in poll(2) on EAGAIN\n"
            "  --pinning LIST     no,yes: unpinned and/or pinned cells, interleaved (default no;\n"
            "                     --pin is --pinning yes)\n"
            "  --modes LIST       block,nonblock: blocking and/or non-blocking socket cells,\n"
            "                     interleaved (default block; --nonblock is --modes nonblock)\n"
            "  --nagle            leave TCP_NODELAY off (default: on, like the proxy)\n"
            "  --max-total S      refuse a plan longer than S seconds (default 1800)\n"
            "  --retries N        redo a run during which other processes used more than\n"
            "  --max-other C      C CPUs of user time on average (default 0.2), at most N times (2,\n"
            "                     --quick: 0); the least disturbed attempt is kept\n"
            "  --quick            tiny durations and a few sizes, to check it works (CI)\n"
            "  --csv FILE         also write the results as CSV to FILE\n"
            "Prints Markdown tables on stdout and progress on stderr. Loopback only.\n",
            BS_MAX_REPEAT);
}

static int bs_takes_value(const char *opt)
{
    static const char *const with_value[] = {
        "--duration", "--max-total", "--repeat", "--step-log2", "--sndbuf",     "--rcvbuf",
        "--min-size", "--max-size",  "--peer-size", "--transports", "--csv", "--pinning",
        "--modes",    "--retries",  "--max-other",
    };
    for (size_t i = 0; i < sizeof(with_value) / sizeof(with_value[0]); i++)
        if (strcmp(opt, with_value[i]) == 0)
            return 1;
    return 0;
}

static int bs_parse_args(int argc, char **argv, struct bs_opts *o)
{
    int have_duration = 0, have_step = 0;
    memset(o, 0, sizeof(*o));
    o->duration = 0.5;
    o->kinds = (1u << BS_NKIND) - 1;
    o->min_size = 1;
    o->max_size = BS_DEFAULT_MAX_SIZE;
    o->step_log2 = 1;
    o->repeat = 1;
    o->peer_size = BS_DEFAULT_PEER_SIZE;
    o->max_total = 1800.0;
    o->pinning = 1;
    o->modes = 1;
    o->retries = -1; /* 2, or 0 with --quick */
    o->max_other = 0.2;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        int takes = 1;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            bs_usage(stdout);
            exit(0);
        } else if (strcmp(a, "--quick") == 0) {
            o->quick = 1, takes = 0;
        } else if (strcmp(a, "--pin") == 0) {
            o->pinning = 2, takes = 0;
        } else if (strcmp(a, "--nonblock") == 0) {
            o->modes = 2, takes = 0;
        } else if (strcmp(a, "--nagle") == 0) {
            o->nagle = 1, takes = 0;
        } else if (!bs_takes_value(a)) {
            fprintf(stderr, "bench_syscalls: unknown option: %s\n", a);
            return -1;
        } else if (!v) {
            fprintf(stderr, "bench_syscalls: %s needs a value\n", a);
            return -1;
        } else if (strcmp(a, "--duration") == 0 || strcmp(a, "--max-total") == 0) {
            char *end;
            double d = strtod(v, &end);
            if (end == v || *end != '\0' || !(d > 0.0) || d > 3600.0) {
                fprintf(stderr, "bench_syscalls: %s wants seconds in (0, 3600]: %s\n", a, v);
                return -1;
            }
            if (strcmp(a, "--duration") == 0)
                o->duration = d, have_duration = 1;
            else
                o->max_total = d;
        } else if (strcmp(a, "--repeat") == 0) {
            if (bs_parse_int(v, 1, BS_MAX_REPEAT, &n) != 0) {
                fprintf(stderr, "bench_syscalls: --repeat wants 1..%d: %s\n", BS_MAX_REPEAT, v);
                return -1;
            }
            o->repeat = (int)n;
        } else if (strcmp(a, "--retries") == 0) {
            if (bs_parse_int(v, 0, 10, &n) != 0) {
                fprintf(stderr, "bench_syscalls: --retries wants 0..10: %s\n", v);
                return -1;
            }
            o->retries = (int)n;
        } else if (strcmp(a, "--max-other") == 0) {
            char *end;
            double d = strtod(v, &end);
            if (end == v || *end != '\0' || !(d > 0.0) || d > 1024.0) {
                fprintf(stderr, "bench_syscalls: --max-other wants CPUs in (0, 1024]: %s\n", v);
                return -1;
            }
            o->max_other = d;
        } else if (strcmp(a, "--step-log2") == 0) {
            if (bs_parse_int(v, 1, 8, &n) != 0) {
                fprintf(stderr, "bench_syscalls: --step-log2 wants 1..8: %s\n", v);
                return -1;
            }
            o->step_log2 = (unsigned)n, have_step = 1;
        } else if (strcmp(a, "--sndbuf") == 0 || strcmp(a, "--rcvbuf") == 0) {
            size_t s;
            if (bs_parse_size(v, &s) != 0 || s < 1 || s > ((size_t)1 << 30)) {
                fprintf(stderr, "bench_syscalls: %s wants bytes in [1, 1G]: %s\n", a, v);
                return -1;
            }
            if (strcmp(a, "--sndbuf") == 0)
                o->sndbuf = (int)s;
            else
                o->rcvbuf = (int)s;
        } else if (strcmp(a, "--min-size") == 0 || strcmp(a, "--max-size") == 0 ||
                   strcmp(a, "--peer-size") == 0) {
            size_t s;
            if (bs_parse_size(v, &s) != 0 || s < 1 || s > BS_MAX_SIZE) {
                fprintf(stderr, "bench_syscalls: %s wants bytes in [1, 256M]: %s\n", a, v);
                return -1;
            }
            if (strcmp(a, "--min-size") == 0)
                o->min_size = s;
            else if (strcmp(a, "--max-size") == 0)
                o->max_size = s;
            else
                o->peer_size = s;
        } else if (strcmp(a, "--transports") == 0) {
            if (bs_parse_transports(v, &o->kinds) != 0) {
                fprintf(stderr, "bench_syscalls: bad --transports: %s\n", v);
                return -1;
            }
        } else if (strcmp(a, "--pinning") == 0 || strcmp(a, "--modes") == 0) {
            int pin = strcmp(a, "--pinning") == 0;
            if (bs_parse_pair(v, pin ? "no" : "block", pin ? "yes" : "nonblock",
                              pin ? &o->pinning : &o->modes) != 0) {
                fprintf(stderr, "bench_syscalls: bad %s: %s\n", a, v);
                return -1;
            }
        } else if (strcmp(a, "--csv") == 0) {
            o->csv = v;
        }
        i += takes;
    }
    if (o->quick) {
        if (!have_duration)
            o->duration = 0.02;
        if (!have_step)
            o->step_log2 = 4;
    }
    if (o->retries < 0)
        o->retries = o->quick ? 0 : 2;
    if (o->min_size > o->max_size) {
        fprintf(stderr, "bench_syscalls: --min-size is larger than --max-size\n");
        return -1;
    }
    return 0;
}

static int bs_set_bufs(int fd, const struct bs_opts *o)
{
    if (o->sndbuf && setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &o->sndbuf, sizeof(o->sndbuf)) != 0)
        return -1;
    if (o->rcvbuf && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o->rcvbuf, sizeof(o->rcvbuf)) != 0)
        return -1;
    return 0;
}

static int bs_set_timeouts(int fd, int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0)
        return -1;
    return setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Makes a connected TCP pair on 127.0.0.1 (ephemeral port). fds[0] = client, fds[1] = accepted.
 * Buffer sizes go on before connect/listen so the window scale matches them. */
static int bs_tcp_pair(int fds[2], const struct bs_opts *o)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);
    int one = 1;
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int a = -1;
    if (l < 0 || c < 0)
        goto fail;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = 0;
    if (bs_set_bufs(l, o) != 0 || bs_set_bufs(c, o) != 0)
        goto fail;
    if (bind(l, (struct sockaddr *)&sin, sizeof(sin)) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&sin, &len) != 0)
        goto fail;
    if (connect(c, (struct sockaddr *)&sin, sizeof(sin)) != 0)
        goto fail;
    a = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (a < 0 || bs_set_bufs(a, o) != 0)
        goto fail;
    if (!o->nagle && (setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
                      setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0))
        goto fail;
    close(l);
    fds[0] = c;
    fds[1] = a;
    return 0;
fail:
    if (l >= 0)
        close(l);
    if (c >= 0)
        close(c);
    if (a >= 0)
        close(a);
    return -1;
}

static int bs_unix_pair(int fds[2], const struct bs_opts *o)
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
        return -1;
    if (bs_set_bufs(fds[0], o) != 0 || bs_set_bufs(fds[1], o) != 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    return 0;
}

static int bs_pin_self(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* The unmeasured side: writes (or drains) large blocks until told to stop. */
static void *bs_peer_main(void *arg)
{
    struct bs_peer *p = arg;
    if (p->cpu >= 0)
        bs_pin_self(p->cpu);
    while (!atomic_load(&p->stop)) {
        ssize_t n = p->dir == BS_READ ? send(p->fd, p->buf, p->size, MSG_NOSIGNAL)
                                      : recv(p->fd, p->buf, p->size, 0);
        if (n > 0)
            continue;
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            continue; /* EAGAIN: the SO_*TIMEO backstop fired; look at stop again */
        if (!atomic_load(&p->stop))
            p->err = n == 0 ? ECONNRESET : errno;
        break;
    }
    return NULL;
}

/* Runs read() or write() of `size` bytes on fd until `duration` has passed (at least one call).
 * Returns 0 and fills *out, or -1 with a message on stderr. */
static int bs_measure(int fd, enum bs_dir dir, size_t size, unsigned char *buf, double duration,
                      int nonblock, struct bs_sample *out)
{
    uint64_t calls = 0, bytes = 0, shorts = 0, eagain = 0;
    unsigned interval = 1, since = 0;
    double c0 = bs_thread_cpu();
    double m0 = bs_machine_user(), s0 = bs_self_user();
    double t0 = bs_now();
    double deadline = t0 + duration, t = t0, last = t0;

    for (;;) {
        ssize_t n = dir == BS_READ ? read(fd, buf, size) : write(fd, buf, size);
        calls++;
        if (n > 0) {
            bytes += (uint64_t)n;
            if ((size_t)n < size)
                shorts++;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            eagain++;
            if (!nonblock) {
                fprintf(stderr, "bench_syscalls: %s blocked for over %d ms\n",
                        dir == BS_READ ? "read" : "write", BS_IO_TIMEOUT_MS);
                return -1;
            }
            struct pollfd pfd = {.fd = fd, .events = dir == BS_READ ? POLLIN : POLLOUT};
            if (poll(&pfd, 1, BS_IO_TIMEOUT_MS) == 0) {
                fprintf(stderr, "bench_syscalls: poll timed out after %d ms\n",
                        BS_IO_TIMEOUT_MS);
                return -1;
            }
            since = interval; /* look at the clock after every wait */
        } else if (n < 0 && errno == EINTR) {
            /* counted as a call, nothing moved */
        } else {
            fprintf(stderr, "bench_syscalls: %s: %s\n", dir == BS_READ ? "read" : "write",
                    n == 0 ? "unexpected end of file" : strerror(errno));
            return -1;
        }
        /* Reading the clock every call would cost ~5% at 1 B; read it every `interval` calls,
         * keeping the gap between two looks between ~20 us and ~200 us. */
        if (++since >= interval) {
            since = 0;
            t = bs_now();
            if (t >= deadline)
                break;
            double gap = t - last;
            last = t;
            if (gap < 20e-6 && interval < 4096)
                interval *= 2;
            else if (gap > 200e-6 && interval > 1)
                interval /= 2;
        }
    }
    out->secs = t - t0;
    out->cpu = bs_thread_cpu() - c0;
    double m1 = bs_machine_user(), s1 = bs_self_user();
    out->other = m0 >= 0 && m1 >= 0 && out->secs > 0 ? ((m1 - m0) - (s1 - s0)) / out->secs : 0.0;
    if (out->other < 0)
        out->other = 0; /* tick sampling can make it slightly negative */
    out->bytes = bytes;
    out->calls = calls;
    out->shorts = shorts;
    out->eagain = eagain;
    return 0;
}

/* One run of one cell: sets up the transport, starts the peer if any, measures, tears down. */
static int bs_run_cell(const struct bs_opts *o, const struct bs_cell *c, unsigned char *buf,
                       unsigned char *peer_buf, const int cpus[2], const cpu_set_t *all,
                       struct bs_sample *out)
{
    int rc = -1;
    int err = c->pinned ? bs_pin_self(cpus[0])
                        : pthread_setaffinity_np(pthread_self(), sizeof(*all), all);
    if (err != 0) {
        fprintf(stderr, "bench_syscalls: setting CPU affinity: %s\n", strerror(err));
        return -1;
    }
    if (c->kind == BS_DEV_ZERO || c->kind == BS_DEV_URANDOM || c->kind == BS_DEV_NULL) {
        const char *path = bs_transports[c->kind].endpoint;
        int fd = open(path, (c->dir == BS_READ ? O_RDONLY : O_WRONLY) | O_CLOEXEC);
        if (fd < 0) {
            fprintf(stderr, "bench_syscalls: open %s: %s\n", path, strerror(errno));
            return -1;
        }
        rc = bs_measure(fd, c->dir, c->size, buf, o->duration, 0, out);
        close(fd);
        return rc;
    }

    int fds[2];
    if ((c->kind == BS_SOCK_UNIX ? bs_unix_pair(fds, o) : bs_tcp_pair(fds, o)) != 0) {
        fprintf(stderr, "bench_syscalls: %s socket setup: %s\n", bs_transports[c->kind].name,
                strerror(errno));
        return -1;
    }
    /* fds[0] is measured, fds[1] is the peer's. */
    if (bs_set_timeouts(fds[0], BS_IO_TIMEOUT_MS) != 0 || bs_set_timeouts(fds[1], 100) != 0 ||
        (c->nonblock && fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK) != 0)) {
        fprintf(stderr, "bench_syscalls: socket options: %s\n", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    struct bs_peer peer = {.fd = fds[1], .dir = c->dir, .size = o->peer_size, .buf = peer_buf,
                           .cpu = c->pinned ? cpus[1] : -1};
    atomic_init(&peer.stop, 0);
    pthread_t th;
    err = pthread_create(&th, NULL, bs_peer_main, &peer);
    if (err != 0) {
        fprintf(stderr, "bench_syscalls: pthread_create: %s\n", strerror(err));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    rc = bs_measure(fds[0], c->dir, c->size, buf, o->duration, c->nonblock, out);
    atomic_store(&peer.stop, 1);
    shutdown(fds[1], SHUT_RDWR); /* wakes the peer if it is blocked in send/recv */
    shutdown(fds[0], SHUT_RDWR);
    pthread_join(th, NULL);
    close(fds[0]);
    close(fds[1]);
    if (rc == 0 && peer.err) {
        fprintf(stderr, "bench_syscalls: peer: %s\n", strerror(peer.err));
        rc = -1;
    }
    return rc;
}

static double bs_mibs(const struct bs_sample *s)
{
    return s->secs > 0 ? (double)s->bytes / s->secs / 1048576.0 : 0.0;
}

static double bs_calls_per_s(const struct bs_sample *s)
{
    return s->secs > 0 ? (double)s->calls / s->secs : 0.0;
}

/* The run with the median MiB/s (the lower middle one for an even count), so that all reported
 * figures of a cell come from one and the same run. */
static const struct bs_sample *bs_median(const struct bs_cell *c, double *lo, double *hi)
{
    int idx[BS_MAX_REPEAT];
    for (int i = 0; i < c->n; i++)
        idx[i] = i;
    for (int i = 1; i < c->n; i++) {
        for (int j = i; j > 0 && bs_mibs(&c->runs[idx[j - 1]]) > bs_mibs(&c->runs[idx[j]]); j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    }
    *lo = bs_mibs(&c->runs[idx[0]]);
    *hi = bs_mibs(&c->runs[idx[c->n - 1]]);
    return &c->runs[idx[(c->n - 1) / 2]];
}

static const char *bs_dir_name(enum bs_dir d)
{
    return d == BS_READ ? "read" : "write";
}

static const char *bs_mode(const struct bs_cell *c)
{
    return c->nonblock ? "nonblock" : "block";
}

static int bs_is_socket(enum bs_kind k)
{
    return k == BS_SOCK_UNIX || k == BS_SOCK_TCP;
}

#define BS_CSV_HEADER                                                                              \
    "transport,endpoint,direction,mode,size,sndbuf,rcvbuf,pinned,repeats,duration_s,bytes,calls,"  \
    "short_calls,eagain_calls,mib_per_s,mib_per_s_min,mib_per_s_max,calls_per_s,cpu_s,"          \
    "other_cpus,discarded\n"

static int bs_write_csv(const struct bs_opts *o, const struct bs_cell *cells, int ncells)
{
    FILE *f = fopen(o->csv, "w");
    if (!f) {
        fprintf(stderr, "bench_syscalls: %s: %s\n", o->csv, strerror(errno));
        return -1;
    }
    fputs(BS_CSV_HEADER, f);
    for (int i = 0; i < ncells; i++) {
        const struct bs_cell *c = &cells[i];
        double lo, hi;
        const struct bs_sample *s = bs_median(c, &lo, &hi);
        int sock = bs_is_socket(c->kind);
        fprintf(f,
                "%s,%s,%s,%s,%zu,%d,%d,%d,%d,%.6f,%llu,%llu,%llu,%llu,%.3f,%.3f,%.3f,%.1f,"
                "%.6f,%.3f,%d\n",
                bs_transports[c->kind].name, bs_transports[c->kind].endpoint, bs_dir_name(c->dir),
                bs_mode(c), c->size, sock ? o->sndbuf : 0, sock ? o->rcvbuf : 0, c->pinned, c->n,
                s->secs, (unsigned long long)s->bytes, (unsigned long long)s->calls,
                (unsigned long long)s->shorts, (unsigned long long)s->eagain, bs_mibs(s), lo, hi,
                bs_calls_per_s(s), s->cpu, s->other, c->discarded);
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "bench_syscalls: %s: %s\n", o->csv, strerror(errno));
        return -1;
    }
    return 0;
}

/* "tcp read", with " nb" for non-blocking and " pin" for pinned cells. */
static void bs_series_name(char *out, size_t len, const struct bs_cell *c)
{
    snprintf(out, len, "%s %s%s%s", bs_transports[c->kind].name, bs_dir_name(c->dir),
             c->nonblock ? " nb" : "", c->pinned ? " pin" : "");
}

/* One wide table: rows are sizes, one column per series. The cells of a series are consecutive,
 * one per size, in the order of `sizes`. */
static void bs_print_summary(const struct bs_cell *cells, int n, int nsizes, int calls)
{
    char name[64];
    printf("| size |");
    for (int i = 0; i < n; i += nsizes) {
        bs_series_name(name, sizeof(name), &cells[i]);
        printf(" %s |", name);
    }
    printf("\n|---:|");
    for (int i = 0; i < n; i += nsizes)
        printf("---:|");
    printf("\n");
    for (int j = 0; j < nsizes; j++) {
        bs_fmt_size(name, sizeof(name), cells[j].size);
        printf("| %s |", name);
        for (int i = 0; i < n; i += nsizes) {
            double lo, hi;
            const struct bs_sample *s = bs_median(&cells[i + j], &lo, &hi);
            if (calls)
                printf(" %.0f |", bs_calls_per_s(s));
            else
                printf(" %.1f |", bs_mibs(s));
        }
        printf("\n");
    }
}

/* The first three fields of /proc/loadavg, or "?" : other load on the machine skews the figures. */
static void bs_loadavg(char *out, size_t len)
{
    double a[3];
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf %lf %lf", &a[0], &a[1], &a[2]) == 3)
        snprintf(out, len, "%.2f %.2f %.2f", a[0], a[1], a[2]);
    else
        snprintf(out, len, "?");
    if (f)
        fclose(f);
}

static void bs_print_markdown(const struct bs_opts *o, const struct bs_cell *cells, int n,
                              int nsizes, const int cpus[2], const char *load_start)
{
    char load_end[64];
    bs_loadavg(load_end, sizeof(load_end));
    struct utsname u;
    char peer[32];
    char when[64];
    time_t now = time(NULL);
    bs_fmt_size(peer, sizeof(peer), o->peer_size);
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M UTC", gmtime(&now));
    if (uname(&u) != 0)
        strcpy(u.release, "?");

    printf("# read(2) / write(2) by buffer size\n\n");
    printf("- run: %s, Linux %s, %ld CPUs online\n", when, u.release,
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("- load average (1, 5, 15 min) at start: %s, at end: %s (this program's own threads "
           "count too)\n",
           load_start, load_end);
    printf("- per cell: %.3g s; %d run(s) per cell, interleaved; the run with the median MiB/s "
           "is shown\n",
           o->duration, o->repeat);
    printf("- sockets: TCP_NODELAY %s, SO_SNDBUF %d, SO_RCVBUF %d (0 = kernel default), a new "
           "connection per cell and run; the measured fd is %s\n",
           o->nagle ? "off" : "on", o->sndbuf, o->rcvbuf,
           o->modes == 1   ? "blocking"
           : o->modes == 2 ? "O_NONBLOCK, poll(2) on EAGAIN (\"nb\")"
                           : "blocking, or O_NONBLOCK with poll(2) on EAGAIN where marked \"nb\"");
    if (o->pinning & 2)
        printf("- %s: measured side on CPU %d, peer on CPU %d%s\n",
               o->pinning == 2 ? "pinned" : "pinned where marked \"pin\"", cpus[0], cpus[1],
               cpus[0] == cpus[1] ? " (only one CPU is usable)" : "");
    if (o->pinning & 1)
        printf("- %s: the scheduler places the measured side and the peer\n",
               o->pinning == 1 ? "not pinned" : "unmarked columns are not pinned");
    printf("- read rows: the peer writes %s blocks; write rows: the peer drains %s blocks\n",
           peer, peer);
    printf("- unix = socketpair(AF_UNIX, SOCK_STREAM); tcp = 127.0.0.1; zero, urandom = "
           "/dev/zero, /dev/urandom (read only, no write rows); null = /dev/null (write only)\n");
    printf("- short = calls that moved less than asked (but more than 0)\n");
    printf("- others = CPUs of user-space time that other processes used on average during the "
           "run (/proc/stat less this process); a run above %.2g was redone, at most %d time(s), "
           "keeping the least disturbed (\"redone\" counts them)\n\n",
           o->max_other, o->retries);

    printf("## MiB/s\n\n");
    bs_print_summary(cells, n, nsizes, 0);
    printf("\n## calls/s\n\n");
    bs_print_summary(cells, n, nsizes, 1);

    printf("\n## all figures\n\n");
    printf("| series | size | MiB/s | MiB/s min..max | calls/s | calls | short | EAGAIN | CPU %% | "
           "seconds | bytes | others | redone |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n; i++) {
        const struct bs_cell *c = &cells[i];
        double lo, hi;
        const struct bs_sample *s = bs_median(c, &lo, &hi);
        char sz[32], name[64];
        bs_fmt_size(sz, sizeof(sz), c->size);
        bs_series_name(name, sizeof(name), c);
        printf("| %s | %s | %.1f | %.1f..%.1f | %.0f | %llu | %llu | %llu | %.0f | %.3f | %llu | "
               "%.2f | %d |\n",
               name, sz, bs_mibs(s), lo, hi,
               bs_calls_per_s(s), (unsigned long long)s->calls, (unsigned long long)s->shorts,
               (unsigned long long)s->eagain, s->secs > 0 ? 100.0 * s->cpu / s->secs : 0.0,
               s->secs, (unsigned long long)s->bytes, s->other, c->discarded);
    }
}

static void bs_on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "bench_syscalls: time limit exceeded, giving up\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)w;
    _exit(3);
}

int main(int argc, char **argv)
{
    struct bs_opts o;
    if (bs_parse_args(argc, argv, &o) != 0) {
        bs_usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    size_t sizes[64];
    int nsizes = 0;
    for (size_t s = o.min_size; s <= o.max_size && nsizes < 64; s <<= o.step_log2)
        sizes[nsizes++] = s;

    /* Series (direction, transport, mode, pinning), each with one cell per size, in that order.
     * Devices have no mode and no peer: one series each, pinned only if nothing else is asked. */
    struct bs_cell *cells = calloc((size_t)nsizes * BS_NKIND * 2 * 2 * 2, sizeof(*cells));
    if (!cells) {
        fprintf(stderr, "bench_syscalls: out of memory\n");
        return 1;
    }
    int ncells = 0;
    for (int d = BS_READ; d <= BS_WRITE; d++) {
        for (int k = 0; k < BS_NKIND; k++) {
            if (!(o.kinds & (1u << k)) ||
                (d == BS_READ ? !bs_transports[k].can_read : !bs_transports[k].can_write))
                continue;
            for (int nb = 0; nb <= 1; nb++) {
                for (int pin = 0; pin <= 1; pin++) {
                    if (bs_is_socket((enum bs_kind)k)
                            ? !(o.modes & (1u << nb)) || !(o.pinning & (1u << pin))
                            : nb || pin != (o.pinning == 2))
                        continue;
                    for (int i = 0; i < nsizes; i++) {
                        cells[ncells].kind = (enum bs_kind)k;
                        cells[ncells].dir = (enum bs_dir)d;
                        cells[ncells].nonblock = nb;
                        cells[ncells].pinned = pin;
                        cells[ncells].size = sizes[i];
                        ncells++;
                    }
                }
            }
        }
    }

    /* Every run lasts `duration` plus setup; a single call of a large size can overshoot, so
     * allow for that in the watchdog rather than in the plan. */
    double plan = (double)ncells * o.repeat * (o.duration + 0.005);
    if (plan > o.max_total) {
        fprintf(stderr, "bench_syscalls: the plan takes ~%.0f s, over --max-total %.0f s\n", plan,
                o.max_total);
        return 2;
    }
    unsigned limit = (unsigned)(plan * (2.0 + o.retries) + 60.0);
    signal(SIGALRM, bs_on_alarm);
    alarm(limit);

    /* Unpinned cells run with the affinity the program started with; pinned ones use the first
     * two CPUs of it. */
    int cpus[2] = {-1, -1};
    cpu_set_t all;
    if (sched_getaffinity(0, sizeof(all), &all) != 0) {
        fprintf(stderr, "bench_syscalls: sched_getaffinity: %s\n", strerror(errno));
        return 1;
    }
    if (o.pinning & 2) {
        int got = 0;
        for (int c = 0; c < CPU_SETSIZE && got < 2; c++)
            if (CPU_ISSET(c, &all))
                cpus[got++] = c;
        if (got == 1) /* one CPU: "pinned" puts both sides on it, and the header says so */
            cpus[1] = cpus[0];
    }

    unsigned char *buf = NULL, *peer_buf = NULL;
    if (posix_memalign((void **)&buf, 4096, o.max_size) != 0 ||
        posix_memalign((void **)&peer_buf, 4096, o.peer_size) != 0) {
        fprintf(stderr, "bench_syscalls: out of memory\n");
        return 1;
    }
    memset(buf, 0x5a, o.max_size); /* fault the pages in before anything is timed */
    memset(peer_buf, 0xa5, o.peer_size);

    char load_start[64];
    bs_loadavg(load_start, sizeof(load_start));
    fprintf(stderr, "bench_syscalls: %d cells x %d run(s) x %.3g s, ~%.0f s (limit %u s)\n",
            ncells, o.repeat, o.duration, plan, limit);
    int disturbed = 0;
    for (int r = 0; r < o.repeat; r++) {
        for (int i = 0; i < ncells; i++) {
            struct bs_cell *c = &cells[i];
            for (int attempt = 0;; attempt++) {
                struct bs_sample s;
                if (bs_run_cell(&o, c, buf, peer_buf, cpus, &all, &s) != 0) {
                    char name[64];
                    bs_series_name(name, sizeof(name), c);
                    fprintf(stderr, "bench_syscalls: failed at %s, %zu B\n", name, c->size);
                    return 1;
                }
                /* the least disturbed attempt that moved bytes is kept: one that moved none
                 * (its peer not scheduled within a --quick cell on a loaded machine) measured
                 * nothing, and is tried again up to 3 times even with --retries 0 */
                if (attempt == 0 || (s.bytes && !c->runs[c->n].bytes) ||
                    (!!s.bytes == !!c->runs[c->n].bytes && s.other < c->runs[c->n].other))
                    c->runs[c->n] = s;
                if (!c->runs[c->n].bytes && attempt < 3) {
                    c->discarded++;
                    disturbed++;
                    continue;
                }
                if (s.other <= o.max_other || attempt >= o.retries)
                    break;
                c->discarded++;
                disturbed++;
            }
            c->n++;
        }
        fprintf(stderr, "bench_syscalls: run %d/%d done, %d run(s) redone so far\n", r + 1,
                o.repeat, disturbed);
    }
    alarm(0);

    bs_print_markdown(&o, cells, ncells, nsizes, cpus, load_start);
    int rc = 0;
    if (o.csv && bs_write_csv(&o, cells, ncells) != 0)
        rc = 1;
    if (fflush(stdout) != 0)
        rc = 1;
    free(buf);
    free(peer_buf);
    free(cells);
    return rc;
}
