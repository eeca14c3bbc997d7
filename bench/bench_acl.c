/* bench_acl.c: access-list lookup cost (ns and lookups/s) and memory, by list size and family. */
/*
 * Builds a set of N random host entries (IPv4 /32s, or IPv6 /64s) the way a deny-file of N
 * lines is loaded (cidr_set_add each, then cidr_set_finish), then times lookups of random
 * addresses of which about half are in the set (drawn from the entries). Median of 5 rounds.
 * CSV: family,entries,ranges,memory_bytes,bytes_per_entry,build_ms,ns_lookup,lookups_per_s,hits
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "benchutil.h"
#include "core/cidr.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t next64(void)
{
    return bench_splitmix64(&rng);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int quick = 0;
    const char *csv = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc)
            csv = argv[++i];
    }
    static const size_t sizes[] = {1000, 10000, 100000, 1000000};
    size_t nsizes = quick ? 3 : 4;
    size_t nlook = quick ? 200000 : 2000000;
    FILE *out = csv ? fopen(csv, "w") : NULL;
    const char *hdr = "family,entries,ranges,memory_bytes,bytes_per_entry,build_ms,ns_lookup,"
                      "lookups_per_s,hits";
    printf("%s\n", hdr);
    if (out)
        fprintf(out, "%s\n", hdr);
    struct sockaddr_in6 *probes = malloc(nlook * sizeof *probes);
    if (!probes)
        return 1;
    for (int fam = 0; fam < 2; fam++) {
        for (size_t si = 0; si < nsizes; si++) {
            size_t n = sizes[si];
            struct cidr *entries = malloc(n * sizeof *entries);
            if (!entries)
                return 1;
            for (size_t i = 0; i < n; i++) {
                struct cidr *c = &entries[i];
                memset(c, 0, sizeof *c);
                uint64_t a = next64(), b = next64();
                memcpy(c->addr, &a, 8);
                memcpy(c->addr + 8, &b, 8);
                if (fam == 0) {
                    c->family = AF_INET;
                    c->prefix = 32;
                    memset(c->addr + 4, 0, 12);
                } else {
                    c->family = AF_INET6;
                    c->prefix = 64;
                    c->addr[0] = 0x20; /* global unicast, never IPv4-mapped */
                    memset(c->addr + 8, 0, 8);
                }
            }
            double t0 = now_s();
            struct cidr_set s;
            cidr_set_init(&s);
            for (size_t i = 0; i < n; i++)
                if (cidr_set_add(&s, &entries[i]))
                    return 1;
            cidr_set_finish(&s);
            double build_ms = (now_s() - t0) * 1e3;
            for (size_t i = 0; i < nlook; i++) {
                struct sockaddr_in6 *p = &probes[i];
                memset(p, 0, sizeof *p);
                const struct cidr *e = &entries[next64() % n];
                uint64_t r = next64();
                uint8_t addr[16];
                memcpy(addr, e->addr, 16);
                if (r & 1) { /* a miss: another random address */
                    uint64_t a = next64(), b = next64();
                    memcpy(addr, &a, 8);
                    memcpy(addr + 8, &b, 8);
                    if (fam == 1)
                        addr[0] = 0x20;
                } else if (fam == 1) {
                    uint64_t b = next64(); /* any host in the /64 */
                    memcpy(addr + 8, &b, 8);
                }
                if (fam == 0) {
                    struct sockaddr_in *p4 = (struct sockaddr_in *)p;
                    p4->sin_family = AF_INET;
                    memcpy(&p4->sin_addr, addr, 4);
                } else {
                    p->sin6_family = AF_INET6;
                    memcpy(&p->sin6_addr, addr, 16);
                }
            }
            double rounds[5];
            size_t hits = 0;
            for (int r = 0; r < 5; r++) {
                hits = 0;
                double t1 = now_s();
                for (size_t i = 0; i < nlook; i++)
                    hits += (size_t)cidr_set_contains(&s, (struct sockaddr *)&probes[i]);
                rounds[r] = (now_s() - t1) * 1e9 / (double)nlook;
            }
            qsort(rounds, 5, sizeof rounds[0], cmp_double);
            double ns = rounds[2];
            size_t mem = cidr_set_memory(&s);
            char line[256];
            snprintf(line, sizeof line, "%s,%zu,%zu,%zu,%.1f,%.2f,%.1f,%.0f,%zu",
                     fam == 0 ? "ipv4" : "ipv6", n, cidr_set_count(&s), mem,
                     (double)mem / (double)n, build_ms, ns, 1e9 / ns, hits);
            printf("%s\n", line);
            if (out)
                fprintf(out, "%s\n", line);
            cidr_set_free(&s);
            free(entries);
        }
    }
    free(probes);
    if (out)
        fclose(out);
    return 0;
}
