/* bench_handshake.c: the proxy's own CPU per FakeTLS handshake, step by step, in process. */
/*
 * What the worker computes for one ee client between its hello and its first relayed byte,
 * without any socket: parse and verify the hello (one secret), draw the ApplicationData
 * length, build the ServerHello (X25519 key share, fake ApplicationData, HMAC), then the
 * obfuscated2 header inside the records: parse it, key the client's stream, build, seal and
 * key the DC's header (fast mode: 2 CTR streams). Each step is timed alone over many rounds
 * (median of 5), then all of them together. The ApplicationData fill is timed both ways (the
 * system RNG, RAND_bytes, as before; the AES-CTR keystream used now).
 * CSV (stdout adds what each step is): step,us_per_handshake
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
#include "benchutil.h"

enum step { S_VERIFY, S_DRAW, S_X25519, S_FILL_RAND, S_FILL_FAST, S_HMAC, S_HELLO, S_OBFS2,
            S_ALL, S_COUNT };
/* step ids (CSV) and what each is */
static const char *const names[S_COUNT] = {"verify",  "draw_len",     "x25519", "fill_rand",
                                           "fill_fast", "hmac",       "server_hello", "obfs2",
                                           "total"};
static const char *const what[S_COUNT] = {
    "hello parse + HMAC verify (1 secret)", "ApplicationData length draw", "X25519 key share",
    "ApplicationData fill with RAND_bytes (before)",
    "ApplicationData fill with the AES-CTR keystream (now)", "ServerHello HMAC (3.7 KB)",
    "ServerHello built (all of it)", "obfuscated2: parse, keys, DC header (fast mode)",
    "whole handshake, ours (verify + ServerHello + obfuscated2)"};

struct ctx {
    uint8_t hello[TLSC_HELLO_MAX];
    size_t hello_len;
    struct secret ee, dd;
    uint8_t out[FAKETLS_HELLO_BUF_MAX + 8192];
    uint8_t hdr[OBFS2_HDR_LEN];
    struct crypto_ctr *cli_dec, *dc_enc;
};

static int run_step(struct ctx *x, enum step s)
{
    struct faketls_hello h;
    struct faketls_match m;
    struct faketls_reply r = {.app_data_len = 3000};
    uint8_t pub[32], mac[32];
    switch (s) {
    case S_VERIFY:
        return faketls_hello_parse(x->hello, x->hello_len, &h) != FAKETLS_OK ||
               faketls_hello_verify_sni(x->hello, &h, &x->ee, 1, 0, NULL, 1, &m, NULL) !=
                   FAKETLS_VERIFY_OK;
    case S_DRAW:
        return faketls_draw_len(FAKETLS_APPDATA_MIN, FAKETLS_APPDATA_MAX) < FAKETLS_APPDATA_MIN;
    case S_X25519:
        return crypto_x25519_public(pub);
    case S_FILL_RAND:
        return crypto_random(x->out, 3600);
    case S_FILL_FAST:
        return crypto_random_fast(x->out, 3600);
    case S_HMAC: {
        const struct crypto_span sp[2] = {{x->hello, 32}, {x->out, 3700}};
        crypto_hmac_sha256_spans(x->ee.key, 16, sp, 2, mac);
        return 0;
    }
    case S_HELLO:
    case S_ALL: {
        if (s == S_ALL && run_step(x, S_VERIFY))
            return 1;
        if (faketls_hello_parse(x->hello, x->hello_len, &h) != FAKETLS_OK)
            return 1;
        r.app_data_len = faketls_draw_len(FAKETLS_APPDATA_MIN, FAKETLS_APPDATA_MAX);
        if (!faketls_server_hello(x->out, sizeof x->out, x->ee.key, &h.client, &r))
            return 1;
        return s == S_ALL ? run_step(x, S_OBFS2) : 0;
    }
    case S_OBFS2: {
        struct obfs2_hello oh;
        struct obfs2_keys k;
        uint8_t skip[OBFS2_HDR_LEN], plain[OBFS2_HDR_LEN], wire[OBFS2_HDR_LEN];
        if (obfs2_parse(x->hdr, &x->dd, 1, OBFS2_ALLOW_PADDED, &oh) != OBFS2_OK ||
            crypto_ctr_init(x->cli_dec, oh.keys.fwd.key, oh.keys.fwd.iv))
            return 1;
        crypto_ctr_apply(x->cli_dec, x->hdr, skip, sizeof skip);
        if (obfs2_build(plain, oh.tag, oh.dc, &oh.keys.rev))
            return 1;
        obfs2_derive(plain, NULL, &k);
        if (crypto_ctr_init(x->dc_enc, k.fwd.key, k.fwd.iv))
            return 1;
        obfs2_seal(plain, x->dc_enc, wire);
        return 0;
    }
    default:
        return 1;
    }
}

int main(int argc, char **argv)
{
    int quick;
    const char *csv;
    bench_args(argc, argv, &quick, &csv);
    static struct ctx x;
    x.ee.kind = SECRET_EE;
    x.dd.kind = SECRET_DD;
    crypto_random(x.ee.key, sizeof x.ee.key);
    crypto_random(x.dd.key, sizeof x.dd.key);
    snprintf(x.ee.domain, sizeof x.ee.domain, "example.com");
    x.hello_len = tlsc_build_hello(x.hello, sizeof x.hello, x.ee.key, "example.com",
                                   (uint32_t)time(NULL));
    /* a client's obfuscated2 header for the dd secret: built and sealed as a client does */
    uint8_t plain[OBFS2_HDR_LEN];
    struct obfs2_keys ck;
    x.cli_dec = crypto_ctr_new();
    x.dc_enc = crypto_ctr_new();
    if (!x.hello_len || !x.cli_dec || !x.dc_enc || obfs2_build(plain, OBFS2_TAG_PADDED, 2, NULL))
        return 1;
    obfs2_derive(plain, x.dd.key, &ck);
    crypto_ctr_init(x.dc_enc, ck.fwd.key, ck.fwd.iv);
    obfs2_seal(plain, x.dc_enc, x.hdr);
    FILE *out = csv ? fopen(csv, "w") : NULL;
    printf("step,us_per_handshake,what\n");
    if (out)
        fprintf(out, "step,us_per_handshake\n");
    for (int s = 0; s < S_COUNT; s++) {
        int iters = quick ? 20 : 2000;
        double rounds[5];
        for (int r = 0; r < 5; r++) {
            double t0 = bench_now();
            for (int i = 0; i < iters; i++)
                if (run_step(&x, (enum step)s)) {
                    fprintf(stderr, "bench_handshake: step %s failed\n", names[s]);
                    return 1;
                }
            rounds[r] = (bench_now() - t0) * 1e6 / iters;
        }
        qsort(rounds, 5, sizeof rounds[0], bench_cmp_double);
        printf("%s,%.2f,%s\n", names[s], rounds[2], what[s]);
        if (out)
            fprintf(out, "%s,%.2f\n", names[s], rounds[2]);
    }
    crypto_ctr_free(x.cli_dec);
    crypto_ctr_free(x.dc_enc);
    crypto_thread_cleanup();
    if (out)
        fclose(out);
    return 0;
}
