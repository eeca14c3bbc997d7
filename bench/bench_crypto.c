/* bench_crypto.c: AES-256-CTR speed through crypto.h at the relay block sizes (crypto bound). */
/*
 * For each buffer size (4, 8, 16, 32, 64 KiB; --quick: shorter runs) applies crypto_ctr_apply
 * in place, repeatedly, for --seconds per size and prints MB/s (10^6 bytes per second). The
 * relay does two passes per byte when it decrypts and re-encrypts (fast mode off), so half this
 * figure is the most one connection can move through one core. CSV: size,seconds,bytes,mb_s.
 *
 * --relay: the upload's two passes as the relay makes them, and the alternative of one pass
 * (issue 19): 64 KiB "reads" (a memcpy from a 4 MiB source stands in for the kernel's copy into
 * the blocks), each cut into pieces (4 or 16 KiB) that get
 *   two-pass      decrypt in place, then encrypt in place (two crypto_ctr_apply calls)
 *   keystream-xor both keystreams into L1-resident scratch, then data ^= ks1 ^ ks2 in one pass
 *   copy-only     neither (the stand-in copy alone, to subtract)
 * and prints CPU-s per GB of data. CSV: method,piece,seconds,bytes,cpu_s_per_gb.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crypto/crypto.h"

#define RELAY_READ (64 * 1024)
#define RELAY_SRC (4u << 20)

enum relay_method { RM_TWO_PASS, RM_KEYSTREAM_XOR, RM_COPY_ONLY };
static const char *const relay_methods[] = {"two-pass", "keystream-xor", "copy-only"};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs one --relay cell for `seconds`; returns CPU-s per GB (10^9 bytes), or -1. */
static double relay_cell(enum relay_method m, size_t piece, double seconds, uint64_t *bytes_out,
                         double *secs_out)
{
    static uint8_t ks1[16384] __attribute__((aligned(64))), ks2[16384] __attribute__((aligned(64)));
    uint8_t *src = malloc(RELAY_SRC), *buf = malloc(RELAY_READ);
    struct crypto_ctr *a = crypto_ctr_new(), *b = crypto_ctr_new();
    uint8_t k1[CRYPTO_KEY_LEN], k2[CRYPTO_KEY_LEN], iv1[CRYPTO_IV_LEN], iv2[CRYPTO_IV_LEN];
    double r = -1;
    if (!src || !buf || !a || !b || piece > sizeof ks1 || crypto_random(k1, sizeof k1) ||
        crypto_random(k2, sizeof k2) || crypto_random(iv1, sizeof iv1) ||
        crypto_random(iv2, sizeof iv2) || crypto_ctr_init(a, k1, iv1) ||
        crypto_ctr_init(b, k2, iv2))
        goto out;
    memset(src, 0x5a, RELAY_SRC);
    size_t off = 0;
    uint64_t bytes = 0;
    double t0 = now_s(), t;
    do {
        for (int k = 0; k < 16; k++) {
            memcpy(buf, src + off, RELAY_READ);
            off = off + 2 * RELAY_READ > RELAY_SRC ? 0 : off + RELAY_READ;
            for (size_t p = 0; p < RELAY_READ && m != RM_COPY_ONLY; p += piece) {
                uint8_t *d = buf + p;
                if (m == RM_TWO_PASS) {
                    crypto_ctr_apply(a, d, d, piece);
                    crypto_ctr_apply(b, d, d, piece);
                    continue;
                }
                memset(ks1, 0, piece); /* CTR over zeros: the keystream itself */
                memset(ks2, 0, piece);
                crypto_ctr_apply(a, ks1, ks1, piece);
                crypto_ctr_apply(b, ks2, ks2, piece);
                for (size_t i = 0; i < piece; i += 8) { /* 8 bytes a step (-O3 vectorizes) */
                    uint64_t x, y, z;
                    memcpy(&x, d + i, 8);
                    memcpy(&y, ks1 + i, 8);
                    memcpy(&z, ks2 + i, 8);
                    x ^= y ^ z;
                    memcpy(d + i, &x, 8);
                }
            }
            bytes += RELAY_READ;
        }
        t = now_s();
    } while (t - t0 < seconds);
    *bytes_out = bytes;
    *secs_out = t - t0;
    r = (t - t0) / ((double)bytes / 1e9);
out:
    crypto_ctr_free(a);
    crypto_ctr_free(b);
    free(src);
    free(buf);
    return r;
}

static int relay_main(double seconds, FILE *out)
{
    static const size_t pieces[] = {4096, 16384};
    const char *hdr = "method,piece,seconds,bytes,cpu_s_per_gb";
    printf("%s\n", hdr);
    if (out)
        fprintf(out, "%s\n", hdr);
    for (int m = RM_TWO_PASS; m <= RM_COPY_ONLY; m++) {
        for (size_t i = 0; i < sizeof pieces / sizeof *pieces; i++) {
            uint64_t bytes = 0;
            double secs = 0;
            double v = relay_cell((enum relay_method)m, pieces[i], seconds, &bytes, &secs);
            if (v < 0) {
                fprintf(stderr, "bench_crypto: set-up failed\n");
                return 1;
            }
            char line[128];
            snprintf(line, sizeof line, "%s,%zu,%.3f,%llu,%.4f\n", relay_methods[m], pieces[i],
                     secs, (unsigned long long)bytes, v);
            fputs(line, stdout);
            if (out)
                fputs(line, out);
            if (m == RM_COPY_ONLY)
                break; /* the piece does not matter without crypto */
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    double seconds = 1.0;
    const char *csv = NULL;
    int relay = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            seconds = 0.05;
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc)
            csv = argv[++i];
        else if (strcmp(argv[i], "--relay") == 0)
            relay = 1;
        else {
            fprintf(stderr, "usage: bench_crypto [--quick] [--seconds S] [--csv FILE] [--relay]\n");
            return 2;
        }
    }
    if (relay) {
        FILE *out = csv ? fopen(csv, "w") : NULL;
        if (csv && !out) {
            fprintf(stderr, "bench_crypto: cannot write %s\n", csv);
            return 1;
        }
        int rc = relay_main(seconds, out);
        if (out)
            fclose(out);
        return rc;
    }
    static const size_t sizes[] = {4096, 8192, 16384, 32768, 65536};
    uint8_t key[CRYPTO_KEY_LEN], iv[CRYPTO_IV_LEN];
    uint8_t *buf = malloc(65536);
    struct crypto_ctr *c = crypto_ctr_new();
    if (!buf || !c || crypto_random(key, sizeof key) || crypto_random(iv, sizeof iv) ||
        crypto_ctr_init(c, key, iv) != 0) {
        fprintf(stderr, "bench_crypto: set-up failed\n");
        return 1;
    }
    memset(buf, 0x5a, 65536);
    FILE *out = csv ? fopen(csv, "w") : NULL;
    if (csv && !out) {
        fprintf(stderr, "bench_crypto: cannot write %s\n", csv);
        return 1;
    }
    const char *hdr = "size,seconds,bytes,mb_s";
    printf("%s\n", hdr);
    if (out)
        fprintf(out, "%s\n", hdr);
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        size_t n = sizes[s];
        for (int w = 0; w < 64; w++) /* warm up */
            crypto_ctr_apply(c, buf, buf, n);
        uint64_t bytes = 0;
        double t0 = now_s(), t;
        do {
            for (int k = 0; k < 32; k++)
                crypto_ctr_apply(c, buf, buf, n);
            bytes += 32 * (uint64_t)n;
            t = now_s();
        } while (t - t0 < seconds);
        double mbs = (double)bytes / (t - t0) / 1e6;
        printf("%zu,%.3f,%llu,%.1f\n", n, t - t0, (unsigned long long)bytes, mbs);
        if (out)
            fprintf(out, "%zu,%.3f,%llu,%.1f\n", n, t - t0, (unsigned long long)bytes, mbs);
    }
    if (out)
        fclose(out);
    crypto_ctr_free(c);
    free(buf);
    return 0;
}
