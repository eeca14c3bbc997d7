/* bench_users.c: handshake CPU by number of users (1, 100, 1,000, 10,000) for plain, dd and ee. */
/*
 * Finding which secret a handshake belongs to tries the secrets in turn. This measures the CPU
 * of one handshake check against N users, with the client being the LAST user (the most
 * tries) and with a probe that matches nobody (what a censor pays us to make us compute):
 *   plain / dd: obfs2_parse over N secrets of that kind (a 64-byte header);
 *   ee:         faketls_hello_parse + faketls_hello_verify_sni over N ee secrets, every user with
 *               a domain of its own ("sni": tls-sni-check narrows to one secret by walking the
 *               users' domains; "index": through the domain index the proxy uses) and all users
 *               on one domain ("one-domain": every secret is an HMAC over the hello).
 * Median of 5 rounds. CSV: users,kind,case,us_per_handshake
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crypto/crypto.h"
#include "proto/faketls.h"
#include "proto/obfs2.h"
#include "proto/secret.h"
#include "../tests/tools/tlsclient.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A client's wire header for secret s (or a random probe if s is NULL). */
static void header(const struct secret *s, uint32_t tag, uint8_t wire[OBFS2_HDR_LEN])
{
    uint8_t plain[OBFS2_HDR_LEN];
    if (!s || obfs2_build(plain, tag, 2, NULL)) {
        crypto_random(wire, OBFS2_HDR_LEN);
        return;
    }
    struct obfs2_keys k;
    obfs2_derive(plain, s->key, &k);
    struct crypto_ctr *enc = crypto_ctr_new();
    crypto_ctr_init(enc, k.fwd.key, k.fwd.iv);
    obfs2_seal(plain, enc, wire);
    crypto_ctr_free(enc);
}

static FILE *out;

static void row(size_t n, const char *kind, const char *which, double us)
{
    char line[160];
    snprintf(line, sizeof line, "%zu,%s,%s,%.2f", n, kind, which, us);
    printf("%s\n", line);
    if (out)
        fprintf(out, "%s\n", line);
}

/* Median microseconds per call of check() over rounds of iters. */
#define MEDIAN_US(iters, body)                                                                 \
    ({                                                                                         \
        double rounds_[5];                                                                     \
        for (int r_ = 0; r_ < 5; r_++) {                                                       \
            double t0_ = now_s();                                                              \
            for (size_t k_ = 0; k_ < (iters); k_++) {                                          \
                body;                                                                          \
            }                                                                                  \
            rounds_[r_] = (now_s() - t0_) * 1e6 / (double)(iters);                             \
        }                                                                                      \
        qsort(rounds_, 5, sizeof rounds_[0], cmp_double);                                      \
        rounds_[2];                                                                            \
    })

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
    static const size_t counts[] = {1, 100, 1000, 10000};
    size_t ncounts = quick ? 3 : 4;
    out = csv ? fopen(csv, "w") : NULL;
    const char *hdr = "users,kind,case,us_per_handshake";
    printf("%s\n", hdr);
    if (out)
        fprintf(out, "%s\n", hdr);
    for (size_t ci = 0; ci < ncounts; ci++) {
        size_t n = counts[ci];
        struct secret *s = calloc(n, sizeof *s);
        if (!s)
            return 1;
        size_t budget = quick ? 20000 : 500000; /* secret tries per measurement round */
        size_t iters = budget / n ? budget / n : 1;
        for (int kind = 0; kind < 2; kind++) { /* plain, dd */
            for (size_t i = 0; i < n; i++) {
                s[i].kind = kind ? SECRET_DD : SECRET_PLAIN;
                crypto_random(s[i].key, sizeof s[i].key);
            }
            uint32_t tag = kind ? OBFS2_TAG_PADDED : OBFS2_TAG_ABRIDGED;
            unsigned allow = kind ? OBFS2_ALLOW_PADDED : OBFS2_ALLOW_ALL;
            for (int probe = 0; probe < 2; probe++) {
                uint8_t wire[OBFS2_HDR_LEN];
                header(probe ? NULL : &s[n - 1], tag, wire);
                struct obfs2_hello h;
                if (!probe && obfs2_parse(wire, s, n, allow, &h) != OBFS2_OK) {
                    fprintf(stderr, "bench_users: the last user's header was refused\n");
                    return 1;
                }
                double us = MEDIAN_US(iters, obfs2_parse(wire, s, n, allow, &h));
                row(n, kind ? "dd" : "plain", probe ? "probe" : "last-user", us);
            }
        }
        /* ee: a 1.8 KB hello as Telegram's apps send it */
        for (int one_domain = 0; one_domain < 2; one_domain++) {
            for (size_t i = 0; i < n; i++) {
                s[i].kind = SECRET_EE;
                crypto_random(s[i].key, sizeof s[i].key);
                snprintf(s[i].domain, sizeof s[i].domain, "u%zu.example.net",
                         one_domain ? 0 : i);
            }
            for (int probe = 0; probe < 2; probe++) {
                uint8_t hello[TLSC_HELLO_MAX], wrong[16];
                crypto_random(wrong, sizeof wrong);
                char sni[64];
                snprintf(sni, sizeof sni, "u%zu.example.net", one_domain ? 0 : n - 1);
                size_t len = tlsc_build_hello(hello, sizeof hello, probe ? wrong : s[n - 1].key,
                                              sni, (uint32_t)time(NULL));
                struct faketls_hello h;
                struct faketls_match m;
                if (!len || faketls_hello_parse(hello, len, &h) != FAKETLS_OK) {
                    fprintf(stderr, "bench_users: hello did not parse\n");
                    return 1;
                }
                int want = probe ? FAKETLS_VERIFY_OK + 1 : FAKETLS_VERIFY_OK;
                if (!probe && faketls_hello_verify_sni(hello, &h, s, n, (int64_t)time(NULL),
                                                       NULL, 1, &m, NULL) != FAKETLS_VERIFY_OK) {
                    fprintf(stderr, "bench_users: the last user's hello was refused\n");
                    return 1;
                }
                (void)want;
                size_t it = one_domain ? (quick ? 2000 : 200000) / n + 1 : (quick ? 200 : 20000);
                double us = MEDIAN_US(it, {
                    faketls_hello_parse(hello, len, &h);
                    faketls_hello_verify_sni(hello, &h, s, n, (int64_t)time(NULL), NULL, 1, &m,
                                             NULL);
                });
                row(n, "ee", one_domain ? (probe ? "one-domain-probe" : "one-domain-last-user")
                                        : (probe ? "sni-probe" : "sni-last-user"),
                    us);
                if (one_domain)
                    continue;
                /* what the proxy runs with tls-sni-check: the domain index */
                struct faketls_sni_index x;
                if (faketls_sni_index_build(&x, s, n))
                    return 1;
                us = MEDIAN_US(it, {
                    faketls_hello_parse(hello, len, &h);
                    faketls_hello_verify_index(hello, &h, s, &x, (int64_t)time(NULL), NULL, &m,
                                               NULL);
                });
                faketls_sni_index_free(&x);
                row(n, "ee", probe ? "index-probe" : "index-last-user", us);
            }
        }
        free(s);
    }
    if (out)
        fclose(out);
    return 0;
}
