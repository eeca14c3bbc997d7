/* bench_hello.c: CPU per FakeTLS hello checked (a probe's cost) by number of ee secrets. */
/*
 * A ~1.8 KB ClientHello as Telegram's apps send it (tests/tools/tlsclient.h), signed with a key
 * none of the secrets has (a probe), is parsed and verified against N ee secrets spread over
 * N/2 domains, with tls-sni-check on (only the secrets of the SNI's domain are tried) and off
 * (every secret is tried), and with an SNI that is none of ours. Median of 5 rounds.
 * CSV: secrets,sni,sni_check,us_per_hello,hmacs_per_hello
 * Then, on stdout only (the CSV file keeps its columns), the JA4 fingerprint's cost per hello
 * in ns (src/proto/ja4.c), for the hello in one record and cut into 8, beside the parse alone,
 * and what counting it adds (src/users/ja4stat.c: the key, then the worker table's Space-Saving
 * step) when the key is in the table and when every hello is a new key (a full table's miss).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crypto/crypto.h"
#include "proto/faketls.h"
#include "proto/ja4.h"
#include "proto/secret.h"
#include "users/ja4stat.h"
#include "../tests/tools/tlsclient.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The median of r[0..5) (sorts r). */
static double median5(double r[5])
{
    for (int i = 1; i < 5; i++) /* insertion sort of 5 */
        for (int j = i; j > 0 && r[j - 1] > r[j]; j--) {
            double t = r[j];
            r[j] = r[j - 1];
            r[j - 1] = t;
        }
    return r[2];
}

/* Median ns per call of ja4_from_hello (which = 0) or faketls_hello_parse (1) on hello. */
static double ns_per_hello(const uint8_t *hello, size_t len, int which, size_t iters)
{
    double rounds[5];
    for (int r = 0; r < 5; r++) {
        unsigned ok = 0;
        double t0 = now_s();
        for (size_t k = 0; k < iters; k++) {
            if (which == 0) {
                char fp[JA4_LEN + 1];
                ok += ja4_from_hello(hello, len, fp) == 0;
            } else {
                struct faketls_hello h;
                ok += faketls_hello_parse(hello, len, &h) == FAKETLS_OK;
            }
        }
        rounds[r] = (now_s() - t0) * 1e9 / (double)iters;
        if (ok != iters)
            return -1;
    }
    return median5(rounds);
}

/* Median ns per hello counted: ja4stat_key of one of nkeys JA4s in turn, then ja4stat_add. */
static double ns_per_count(unsigned nkeys, size_t iters)
{
    static struct ja4stat tab;
    static char ja4[1024][JA4_LEN + 1];
    if (nkeys > 1024)
        return -1;
    for (unsigned i = 0; i < nkeys; i++)
        snprintf(ja4[i], sizeof ja4[i], "t13d1516h2_%012x_e5627efa2ab1", i);
    double rounds[5];
    for (int r = 0; r < 5; r++) {
        memset(&tab, 0, sizeof tab);
        double t0 = now_s();
        for (size_t k = 0; k < iters; k++) {
            uint8_t key[JA4STAT_KEY_LEN];
            ja4stat_key(ja4[k % nkeys], key);
            ja4stat_add(&tab, key, (int)(k & 1));
        }
        rounds[r] = (now_s() - t0) * 1e9 / (double)iters;
    }
    return median5(rounds);
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
    static const size_t counts[] = {1, 64, 1000};
    FILE *out = csv ? fopen(csv, "w") : NULL;
    const char *hdr = "secrets,sni,sni_check,us_per_hello,hmacs_per_hello";
    printf("%s\n", hdr);
    if (out)
        fprintf(out, "%s\n", hdr);
    uint8_t wrong[16];
    crypto_random(wrong, sizeof wrong);
    for (size_t ci = 0; ci < 3; ci++) {
        size_t n = counts[ci];
        struct secret *secrets = calloc(n, sizeof *secrets);
        if (!secrets)
            return 1;
        for (size_t i = 0; i < n; i++) {
            secrets[i].kind = SECRET_EE;
            crypto_random(secrets[i].key, sizeof secrets[i].key);
            snprintf(secrets[i].domain, sizeof secrets[i].domain, "d%zu.example.net", i / 2);
        }
        for (int ours = 1; ours >= 0; ours--) {
            for (int check = 1; check >= 0; check--) {
                uint8_t hello[TLSC_HELLO_MAX];
                size_t len = tlsc_build_hello(hello, sizeof hello, wrong,
                                              ours ? "d0.example.net" : "not-ours.example.org",
                                              (uint32_t)time(NULL));
                struct faketls_hello h;
                if (!len || faketls_hello_parse(hello, len, &h) != FAKETLS_OK) {
                    fprintf(stderr, "bench_hello: hello did not parse\n");
                    return 1;
                }
                size_t iters = quick ? 20 : (n >= 1000 ? 200 : 2000);
                double rounds[5];
                unsigned tries = 0;
                for (int r = 0; r < 5; r++) {
                    double t0 = now_s();
                    for (size_t k = 0; k < iters; k++) {
                        struct faketls_match m;
                        faketls_hello_parse(hello, len, &h);
                        if (faketls_hello_verify_sni(hello, &h, secrets, n, 0, NULL, check, &m,
                                                     &tries) == FAKETLS_VERIFY_OK)
                            return 1; /* signed with a key no secret has */
                    }
                    rounds[r] = (now_s() - t0) * 1e6 / (double)iters;
                }
                qsort(rounds, 5, sizeof rounds[0], cmp_double);
                char line[160];
                snprintf(line, sizeof line, "%zu,%s,%s,%.2f,%u", n, ours ? "ours" : "other",
                         check ? "on" : "off", rounds[2], tries);
                printf("%s\n", line);
                if (out)
                    fprintf(out, "%s\n", line);
            }
        }
        free(secrets);
    }
    if (out)
        fclose(out);

    uint8_t hello[TLSC_HELLO_MAX], cut[TLSC_HELLO_MAX + 5 * 8];
    size_t len = tlsc_build_hello(hello, sizeof hello, wrong, "d0.example.net", 0);
    size_t clen = len ? tlsc_cut_hello(hello, len, 8, cut, sizeof cut) : 0;
    size_t iters = quick ? 2000 : 200000;
    double one = ns_per_hello(hello, len, 0, iters), eight = ns_per_hello(cut, clen, 0, iters);
    double parse = ns_per_hello(hello, len, 1, iters);
    if (!clen || one < 0 || eight < 0 || parse < 0) {
        fprintf(stderr, "bench_hello: ja4 failed on the test client's hello\n");
        return 1;
    }
    printf("# ja4 of a %zu-byte hello: %.0f ns in one record, %.0f ns cut into 8 "
           "(faketls_hello_parse alone: %.0f ns)\n",
           len, one, eight, parse);
    /* 1 key: always a hit in the first slot; 8: hits among 8 entries; 1000
     * keys in turn: every add misses a full table (a scan for the key, then for the minimum) */
    double hit1 = ns_per_count(1, iters), hit8 = ns_per_count(8, iters);
    double miss = ns_per_count(1000, iters);
    printf("# counting a hello by JA4 (key + Space-Saving add, %d slots): %.0f ns (1 key), "
           "%.0f ns (8 keys), %.0f ns (1000 keys, all misses)\n",
           JA4STAT_SLOTS, hit1, hit8, miss);
    return 0;
}
