/* bench_prefix.c: listen-prefix: the cost of an accept when the local address names the user. */
/*
 * Inside a network namespace (root: bench/prefix.sh runs it under unshare -n) a ULA /64 is
 * routed to lo (AnyIP), N users get their addresses in it (prefix_user_addr) and the map
 * (prefix_map). One listener on [::]:PORT takes K connections, made round-robin to the N
 * users' addresses: each accept is timed alone (accept4) and, interleaved, with what
 * listen-prefix adds (getsockname, the prefix check and the map lookup: prefix_accept); each
 * answer is checked against the user dialled; the figures are medians. The lookup alone is
 * timed over the N addresses as well (mean).
 * CSV: users,accepts,accept_us,accept_prefix_us,added_us,lookup_ns
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/anyip.h"
#include "config/prefix.h"
#include "config/reload.h"
#include "benchutil.h"

static int listen_any(int *port)
{
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};
    socklen_t len = sizeof a;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 64) ||
        getsockname(fd, (struct sockaddr *)&a, &len))
        return -1;
    *port = ntohs(a.sin6_port);
    return fd;
}

/* One connection to addr:port (blocking; loopback answers at once); closed with a reset (no
 * TIME_WAIT piling up). Returns the client fd, or -1. */
static int dial(const struct in6_addr *addr, int port)
{
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
                             .sin6_addr = *addr};
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static double now_s(void)
{
    return bench_now();
}

/* Runs K accepts over n users; fills the row. Returns 0, or -1. */
static int run(struct gen *g, const struct in6_addr *addrs, int n, int k, FILE *csv)
{
    int port, lfd = listen_any(&port);
    if (lfd < 0) {
        perror("bench_prefix: listen");
        return -1;
    }
    double *plain = malloc((size_t)k * sizeof *plain), *with = malloc((size_t)k * sizeof *with);
    int wrong = 0;
    if (!plain || !with)
        return -1;
    for (int i = 0; i < 2 * k; i++) {
        int user = (i / 2) % n, prefix = i & 1; /* plain and prefix accepts interleaved */
        int c = dial(&addrs[user], port);
        if (c < 0) {
            perror("bench_prefix: connect");
            return -1;
        }
        double t0 = now_s();
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        int32_t uid = prefix ? prefix_accept(g, fd, 0) : user;
        double t1 = now_s();
        if (fd < 0) {
            perror("bench_prefix: accept");
            return -1;
        }
        wrong += uid != user;
        (prefix ? with : plain)[i / 2] = t1 - t0;
        close(fd);
        close(c);
    }
    close(lfd);
    if (wrong) {
        fprintf(stderr, "bench_prefix: %d accepts named the wrong user\n", wrong);
        return -1;
    }
    /* the lookup alone, over every user's address */
    int rounds = 2000000 / n + 1;
    volatile uint32_t sink = 0; /* unsigned: the sum of user ids wraps, as it may */
    double t0 = now_s();
    for (int r = 0; r < rounds; r++)
        for (int u = 0; u < n; u++)
            sink += (uint32_t)prefix_map_lookup(g->pmap, &addrs[u], 0);
    double lookup_ns = (now_s() - t0) / ((double)rounds * n) * 1e9;
    (void)sink;
    /* medians: a preempted accept (2 shared cores) would swamp a mean */
    qsort(plain, (size_t)k, sizeof *plain, bench_cmp_double);
    qsort(with, (size_t)k, sizeof *with, bench_cmp_double);
    double a = plain[k / 2] * 1e6, b = with[k / 2] * 1e6;
    free(plain);
    free(with);
    fprintf(csv, "%d,%d,%.3f,%.3f,%.3f,%.1f\n", n, k, a, b, b - a, lookup_ns);
    printf("users %5d: accept %.2f us, accept + getsockname + lookup %.2f us (+%.2f us), "
           "lookup alone %.1f ns\n", n, a, b, b - a, lookup_ns);
    return 0;
}

int main(int argc, char **argv)
{
    int quick;
    const char *csvpath;
    bench_args(argc, argv, &quick, &csvpath);
    int k = quick ? 300 : 20000;
    struct gen *g = calloc(1, sizeof *g);
    struct in6_addr *addrs = calloc(10000, sizeof *addrs);
    if (!g || !addrs)
        return 1;
    g->opt.prefix_on = 1;
    g->opt.prefix_len = 64;
    inet_pton(AF_INET6, "fd00:6d74:7072::", &g->opt.prefix);
    char err[256];
    if (!anyip_ready(&g->opt.prefix, 64) &&
        anyip_route_add(&g->opt.prefix, 64, err, sizeof err)) {
        fprintf(stderr, "bench_prefix: %s (run it as root inside unshare -n: bench/prefix.sh)\n",
                err);
        return 77;
    }
    uint8_t key[PREFIX_KEY_LEN];
    for (int i = 0; i < PREFIX_KEY_LEN; i++)
        key[i] = (uint8_t)(i * 7 + 1);
    FILE *csv = csvpath ? fopen(csvpath, "w") : stdout;
    if (!csv)
        return 1;
    fprintf(csv, "users,accepts,accept_us,accept_prefix_us,added_us,lookup_ns\n");
    const int sizes[] = {1, 10000};
    for (size_t s = 0; s < 2; s++) {
        int n = sizes[s];
        struct prefix_map m;
        if (prefix_map_init(&m, (uint32_t)n))
            return 1;
        for (int u = 0; u < n; u++) {
            char name[16];
            snprintf(name, sizeof name, "u%d", u);
            prefix_user_addr(key, &g->opt.prefix, 64, name, 0, &addrs[u]);
            if (prefix_map_add(&m, &addrs[u], u, 0))
                return 1;
        }
        g->pmap = &m;
        int rc = run(g, addrs, n, k, csv);
        prefix_map_free(&m);
        if (rc)
            return 1;
    }
    if (csv != stdout)
        fclose(csv);
    free(addrs);
    free(g);
    return 0;
}
