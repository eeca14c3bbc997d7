/* bench_crypto.c: AES-256-CTR speed through crypto.h at the relay block sizes (crypto bound). */
/*
 * For each buffer size (4, 8, 16, 32, 64 KiB; --quick: shorter runs) applies crypto_ctr_apply
 * in place, repeatedly, for --seconds per size and prints MB/s (10^6 bytes per second). The
 * relay does two passes per byte when it decrypts and re-encrypts (fast mode off), so half this
 * figure is the most one connection can move through one core. CSV: size,seconds,bytes,mb_s.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crypto/crypto.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    double seconds = 1.0;
    const char *csv = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            seconds = 0.05;
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc)
            csv = argv[++i];
        else {
            fprintf(stderr, "usage: bench_crypto [--quick] [--seconds S] [--csv FILE]\n");
            return 2;
        }
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
