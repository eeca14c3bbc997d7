/* benchutil.h: small helpers the in-process benches share (clock, medians, --quick/--csv). */
#ifndef MTPROXY_BENCH_BENCHUTIL_H
#define MTPROXY_BENCH_BENCHUTIL_H

#include <string.h>
#include <time.h>

/* Monotonic seconds. */
static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
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
