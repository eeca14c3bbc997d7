/* benchutil.h: small helpers the in-process benches share (clock, medians, --quick/--csv). */
#ifndef MTPROXY_BENCH_BENCHUTIL_H
#define MTPROXY_BENCH_BENCHUTIL_H

#include <stdint.h>
#include <string.h>
#include <time.h>

/* Monotonic seconds. */
static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* splitmix64: the next of a reproducible stream of well-mixed 64-bit values. */
static inline uint64_t bench_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* qsort comparator for doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Reads --quick and --csv FILE from argv (other arguments are ignored). */
static inline void bench_args(int argc, char **argv, int *quick, const char **csv)
{
    *quick = 0;
    *csv = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            *quick = 1;
        else if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc)
            *csv = argv[++i];
    }
}

#endif
