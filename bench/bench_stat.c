/* bench_stat.c: cost of one counter update (STAT_ADD) and one read (STAT_GET) in this build's stat_t representation. */
/*
 * Prints one line: representation (split = lo + two high words, for 32-bit targets; atomic64 =
 * _Atomic uint64_t), ns per STAT_ADD on a worker-local array of 32 counters (as the relay
 * bumps bytes and calls), ns per STAT_GET, median of 5 rounds. To compare the alternative on a
 * 32-bit target, build this file with -DMTPROXY_STAT_SPLIT=0 (64-bit atomics: libatomic, link
 * -latomic) and =1; see BENCHMARKS.md. Under qemu the figures are the emulator's, ratios only.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/stat.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    long n = argc > 1 && strcmp(argv[1], "--quick") == 0 ? 200000 : 20000000;
    static stat_t c[32];
    double add[5], get[5];
    uint64_t sink = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        for (long i = 0; i < n; i++)
            STAT_ADD(&c[i & 31], (uint64_t)i & 0xfff);
        double t1 = now_s();
        for (long i = 0; i < n; i++)
            sink += STAT_GET(&c[i & 31]);
        double t2 = now_s();
        add[r] = (t1 - t0) * 1e9 / (double)n;
        get[r] = (t2 - t1) * 1e9 / (double)n;
    }
    qsort(add, 5, sizeof add[0], cmp);
    qsort(get, 5, sizeof get[0], cmp);
    printf("stat_t %s (%zu bytes): STAT_ADD %.2f ns, STAT_GET %.2f ns (median of 5 x %ld; "
           "sink %llu)\n", MTPROXY_STAT_IS_SPLIT ? "split" : "atomic64", sizeof(stat_t), add[2],
           get[2], n, (unsigned long long)(sink & 1));
    return 0;
}
