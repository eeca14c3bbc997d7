/* bench_ipcount.c: per-IP table cost per add/delete for aimed (colliding) vs spread address sets. */
/*
 * Fills a per-IP table (sized for the set, as a worker sizes `strangers` for its connections)
 * with N distinct addresses, then deletes them all, and reports ns per operation (the best of
 * 9 rounds). Sets: random IPv4 / IPv6 addresses ("spread"), and the sets an outsider can aim
 * at a weak hash: every address of an IPv4 /16 (holding every /24 in it) and an IPv6 /64
 * varying its last 16 bits. ratio = the row's ns_per_op over the spread set of its family:
 * about 1 when the hash cannot be aimed, over 100 when it can.
 * Then the cost of one hash of 16 bytes alone (hash-* rows, keys = 0): SipHash-1-3 (what the
 * table uses), SipHash-2-4, and the unkeyed-high-bits mixer it replaced; ratio over the old one.
 * CSV: case,family,keys,ns_per_op,ratio
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "core/ipcount.h"
#include "core/siphash.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t next64(void)
{
    return bench_splitmix64(&rng);
}

enum set_kind { SPREAD, AIMED };

static void make_set(struct sockaddr_storage *v, size_t n, int v6, enum set_kind kind)
{
    for (size_t i = 0; i < n; i++) {
        struct sockaddr_storage *ss = &v[i];
        memset(ss, 0, sizeof *ss);
        uint64_t r = kind == SPREAD ? next64() : 0;
        if (v6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
            a->sin6_family = AF_INET6;
            inet_pton(AF_INET6, "2001:db8:7:9::", &a->sin6_addr);
            if (kind == SPREAD) {
                uint64_t r2 = next64();
                memcpy(a->sin6_addr.s6_addr, &r, 8);
                memcpy(a->sin6_addr.s6_addr + 8, &r2, 8);
            } else {
                a->sin6_addr.s6_addr[14] = (uint8_t)(i >> 8);
                a->sin6_addr.s6_addr[15] = (uint8_t)i;
            }
        } else {
            struct sockaddr_in *a = (struct sockaddr_in *)ss;
            a->sin_family = AF_INET;
            uint32_t x = kind == SPREAD ? (uint32_t)r : 0xc6120000u | (uint32_t)(i & 0xffff);
            a->sin_addr.s_addr = htonl(x);
        }
    }
}

/* ns per operation of adding all n then deleting all n (the fastest round: on a shared machine
 * the others measure the neighbours). */
static double time_table(const struct sockaddr_storage *v, size_t n, int rounds)
{
    double t[9];
    for (int r = 0; r < rounds; r++) {
        struct ipcount m;
        if (ipcount_init(&m, n))
            exit(1);
        double t0 = bench_now();
        for (size_t i = 0; i < n; i++)
            if (!ipcount_add(&m, (const struct sockaddr *)&v[i]))
                exit(1);
        for (size_t i = 0; i < n; i++)
            ipcount_del(&m, (const struct sockaddr *)&v[i]);
        t[r] = (bench_now() - t0) * 1e9 / (double)(2 * n);
        ipcount_free(&m);
    }
    qsort(t, (size_t)rounds, sizeof t[0], bench_cmp_double);
    return t[0];
}

/* The mixer the table used before (high bits of the second half never reach the low ones). */
static uint64_t old_hash(uint64_t seed, const uint8_t k[16])
{
    uint64_t a, b;
    memcpy(&a, k, 8);
    memcpy(&b, k + 8, 8);
    uint64_t h = (a ^ seed) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    h = (h ^ b) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

static volatile uint64_t sink;

/* ns per hash of 16 bytes (each key depends on the last hash, so calls do not overlap: this
 * is the latency an accept waits, not the throughput of independent hashes). */
#define TIME_HASH(name, expr)                                                                      \
    static double name(size_t iters)                                                               \
    {                                                                                              \
        struct siphash_key key = {{next64(), next64()}};                                           \
        uint8_t k[16] = {0};                                                                       \
        uint64_t h = 0;                                                                            \
        double t0 = bench_now();                                                                   \
        for (size_t i = 0; i < iters; i++) {                                                       \
            k[0] = (uint8_t)h;                                                                     \
            k[15] = (uint8_t)i;                                                                    \
            h = (expr);                                                                            \
        }                                                                                          \
        sink = h;                                                                                  \
        return (bench_now() - t0) * 1e9 / (double)iters;                                           \
    }
TIME_HASH(time_sip13, siphash13_16(&key, k))
TIME_HASH(time_sip24, siphash24(&key, k, 16))
TIME_HASH(time_old, old_hash(key.k[0], k))

int main(int argc, char **argv)
{
    int quick;
    const char *csv;
    bench_args(argc, argv, &quick, &csv);
    size_t n = quick ? 5000 : 30000;
    int rounds = quick ? 3 : 9;
    FILE *out = csv ? fopen(csv, "w") : NULL;
    if (csv && !out)
        return 1;
    const char *hdr = "case,family,keys,ns_per_op,ratio";
    printf("%s\n", hdr);
    if (out)
        fprintf(out, "%s\n", hdr);
    struct sockaddr_storage *v = malloc(n * sizeof *v);
    if (!v)
        return 1;
    for (int v6 = 0; v6 < 2; v6++) {
        double spread = 0;
        for (int kind = SPREAD; kind <= AIMED; kind++) {
            make_set(v, n, v6, (enum set_kind)kind);
            double ns = time_table(v, n, rounds);
            if (kind == SPREAD)
                spread = ns;
            const char *name = kind == SPREAD ? "spread" : v6 ? "aimed-/64" : "aimed-/16";
            char line[160];
            snprintf(line, sizeof line, "%s,%s,%zu,%.1f,%.2f", name, v6 ? "ipv6" : "ipv4", n,
                     ns, ns / spread);
            printf("%s\n", line);
            if (out)
                fprintf(out, "%s\n", line);
        }
    }
    size_t iters = quick ? 2000000 : 50000000;
    double old = time_old(iters);
    static const char *const names[] = {"hash-siphash13", "hash-siphash24", "hash-old-mixer"};
    for (int w = 0; w < 3; w++) {
        double ns = w == 0 ? time_sip13(iters) : w == 1 ? time_sip24(iters) : old;
        char line[160];
        snprintf(line, sizeof line, "%s,any,0,%.2f,%.2f", names[w], ns, ns / old);
        printf("%s\n", line);
        if (out)
            fprintf(out, "%s\n", line);
    }
    free(v);
    if (out)
        fclose(out);
    return 0;
}
