/* bench_delayline.c: a user-space delay line between two TUN devices (a real RTT without netem). */
/*
 * This kernel has neither the netem nor the prio qdisc, so a slow link is emulated in user space:
 *
 *     caller's network namespace            |  a fresh namespace made by this program
 *     tun "dlnear"  NEAR --peer--> FAR  <== delay D ==>  tun "dlfar"  FAR --peer--> NEAR
 *
 * Every IP packet the kernel routes into one TUN (SYN, ACK and FIN included) is written into the
 * other after --delay-ms D (one way: a round trip is 2 D), in order. A server goes to the far
 * side by creating its listening socket there (setns(2) on /proc/PID/ns/net, PID = this program;
 * bench_load --dc-netns, or nsenter --net=...) and listening on FAR; the near side dials FAR.
 * Both namespaces have no other interface than lo and these TUNs: nothing leaves the machine.
 *
 *   bench_delayline --delay-ms D [--near 10.77.0.1] [--far 10.77.0.2] [--mtu 1500]
 *                   [--queue 8192] [--ready FILE] [--seconds S]
 *
 * --ready FILE gets "PID\n" once both devices are up (write it atomically: tmp + rename). On
 * SIGTERM/SIGINT or after --seconds (default 600) it prints "delayline: up N down M dropped K"
 * (near->far packets, far->near packets, packets dropped because a direction's queue of --queue
 * packets was full) and exits 0; start-up failures exit 2. Needs root (TUN, unshare).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct pkt {
    uint64_t due;
    uint16_t len;
};

/* One direction: a FIFO of packets read from in_fd, due for out_fd at their time (a constant
 * delay keeps the order, so the head is always the next one due). */
struct dir {
    int in_fd, out_fd;
    size_t cap, head, n, slot;
    struct pkt *meta;
    uint8_t *data;
    unsigned long long passed, dropped;
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fail(const char *what)
{
    fprintf(stderr, "delayline: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void set_flags(int s, const char *name, short add)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
    if (ioctl(s, SIOCGIFFLAGS, &ifr) != 0)
        fail("SIOCGIFFLAGS");
    ifr.ifr_flags |= add;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0)
        fail("SIOCSIFFLAGS");
}

static void set_addr(int s, const char *name, unsigned long req, const char *ip)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
    struct sockaddr_in a = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
        fprintf(stderr, "delayline: bad address %s\n", ip);
        exit(2);
    }
    memcpy(&ifr.ifr_addr, &a, sizeof a);
    if (ioctl(s, req, &ifr) != 0)
        fail(req == SIOCSIFADDR ? "SIOCSIFADDR" : "SIOCSIFDSTADDR");
}

/* Opens TUN name in the current network namespace, addressed local peer remote, up. */
static int tun_open(const char *name, const char *local, const char *remote, int mtu)
{
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        fail("/dev/net/tun");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
    if (ioctl(fd, TUNSETIFF, &ifr) != 0)
        fail("TUNSETIFF");
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        fail("socket");
    set_addr(s, name, SIOCSIFADDR, local);
    set_addr(s, name, SIOCSIFDSTADDR, remote);
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
    ifr.ifr_mtu = mtu;
    if (ioctl(s, SIOCSIFMTU, &ifr) != 0)
        fail("SIOCSIFMTU");
    set_flags(s, name, IFF_UP | IFF_RUNNING);
    close(s);
    return fd;
}

static void dir_init(struct dir *d, int in_fd, int out_fd, size_t cap, size_t slot)
{
    memset(d, 0, sizeof *d);
    d->in_fd = in_fd;
    d->out_fd = out_fd;
    d->cap = cap;
    d->slot = slot;
    d->meta = calloc(cap, sizeof *d->meta);
    d->data = malloc(cap * slot);
    if (!d->meta || !d->data)
        fail("malloc");
}

static void dir_free(struct dir *d)
{
    free(d->meta);
    free(d->data);
}

/* Reads every packet waiting on the direction's input, stamping each due at now + delay. */
static void dir_read(struct dir *d, uint64_t delay)
{
    for (;;) {
        uint8_t scratch[65536];
        int full = d->n == d->cap;
        size_t at = (d->head + d->n) % d->cap;
        uint8_t *buf = full ? scratch : d->data + at * d->slot;
        ssize_t r = read(d->in_fd, buf, full ? sizeof scratch : d->slot);
        if (r < 0)
            return; /* EAGAIN (or an error: the loop goes on, a test sees the loss) */
        if (full || r == 0) {
            d->dropped++;
            continue;
        }
        d->meta[at].due = now_ns() + delay;
        d->meta[at].len = (uint16_t)r;
        d->n++;
    }
}

/* Writes the packets that are due; returns ns until the next one is (UINT64_MAX: none). */
static uint64_t dir_send(struct dir *d)
{
    uint64_t t = now_ns();
    while (d->n) {
        struct pkt *p = &d->meta[d->head];
        if (p->due > t)
            return p->due - t;
        if (write(d->out_fd, d->data + d->head * d->slot, p->len) == (ssize_t)p->len)
            d->passed++;
        else
            d->dropped++;
        d->head = (d->head + 1) % d->cap;
        d->n--;
    }
    return UINT64_MAX;
}

/* Traffic here may only stay on this machine: the caller's namespace must hold nothing but lo
 * (a bench run under unshare -n), so the line's addresses can route nowhere but the line. */
static int namespace_is_loopback_only(void)
{
    struct if_nameindex *ifs = if_nameindex();
    if (!ifs)
        return 0;
    int ok = 1;
    for (struct if_nameindex *i = ifs; i->if_index; i++)
        ok &= strcmp(i->if_name, "lo") == 0;
    if_freenameindex(ifs);
    return ok;
}

int main(int argc, char **argv)
{
    double delay_ms = -1, seconds = 600;
    const char *near = "10.77.0.1", *far = "10.77.0.2", *ready = NULL;
    int mtu = 1500;
    long queue = 8192;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            goto usage;
        i++;
        if (strcmp(a, "--delay-ms") == 0)
            delay_ms = atof(v);
        else if (strcmp(a, "--near") == 0)
            near = v;
        else if (strcmp(a, "--far") == 0)
            far = v;
        else if (strcmp(a, "--mtu") == 0)
            mtu = atoi(v);
        else if (strcmp(a, "--queue") == 0)
            queue = atol(v);
        else if (strcmp(a, "--ready") == 0)
            ready = v;
        else if (strcmp(a, "--seconds") == 0)
            seconds = atof(v);
        else
            goto usage;
    }
    if (delay_ms < 0 || delay_ms > 10000 || mtu < 576 || mtu > 65535 || queue < 16 ||
        queue > 1000000 || seconds <= 0)
        goto usage;
    if (!namespace_is_loopback_only()) {
        fprintf(stderr, "bench_delayline: this network namespace has interfaces besides lo; "
                        "run it inside one of its own (unshare -n)\n");
        return 2;
    }

    prctl(PR_SET_TIMERSLACK, 1UL); /* wake-ups to the µs, not the default 50 µs slack */
    int near_fd = tun_open("dlnear", near, far, mtu);
    if (unshare(CLONE_NEWNET) != 0)
        fail("unshare(CLONE_NEWNET)");
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        fail("socket");
    set_flags(s, "lo", IFF_UP);
    close(s);
    int far_fd = tun_open("dlfar", far, near, mtu);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    struct dir up, down;
    size_t slot = ((size_t)mtu + 63) & ~(size_t)63;
    dir_init(&up, near_fd, far_fd, (size_t)queue, slot);
    dir_init(&down, far_fd, near_fd, (size_t)queue, slot);
    if (ready) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", ready);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0 || rename(tmp, ready))
            fail("ready file");
    }

    uint64_t delay = (uint64_t)(delay_ms * 1e6), end = now_ns() + (uint64_t)(seconds * 1e9);
    struct pollfd pf[2] = {{.fd = near_fd, .events = POLLIN}, {.fd = far_fd, .events = POLLIN}};
    while (!stop && now_ns() < end) {
        uint64_t a = dir_send(&up), b = dir_send(&down), wait = a < b ? a : b;
        uint64_t left = end - now_ns();
        if (wait > left)
            wait = left;
        struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000u),
                              .tv_nsec = (long)(wait % 1000000000u)};
        int n = ppoll(pf, 2, &ts, NULL);
        if (n < 0 && errno != EINTR)
            fail("ppoll");
        if (n > 0) {
            if (pf[0].revents & POLLIN)
                dir_read(&up, delay);
            if (pf[1].revents & POLLIN)
                dir_read(&down, delay);
        }
    }
    fprintf(stderr, "delayline: up %llu down %llu dropped %llu\n", up.passed, down.passed,
            up.dropped + down.dropped);
    dir_free(&up);
    dir_free(&down);
    close(near_fd);
    close(far_fd);
    return 0;
usage:
    fprintf(stderr, "usage: bench_delayline --delay-ms D [--near IP] [--far IP] [--mtu N] "
                    "[--queue N] [--ready FILE] [--seconds S]\n");
    return 2;
}
