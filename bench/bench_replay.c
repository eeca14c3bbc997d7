/* bench_replay.c: replay cache lookup cost (ns per replay_check_and_add) and memory, by size. */
/*
 * Sizes the cache the way main.c does for a --replay-cache BYTES budget (entries = bytes / 36,
 * shrunk until replay_memory_for fits), fills it to capacity with random keys, then times
 * misses (new keys: the normal case, one per handshake) and hits (keys already present).
 * CSV: budget_bytes,entries,memory_bytes,bytes_per_entry,ns_add_miss,ns_hit.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/replay.h"
#include "crypto/crypto.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng = 0x243f6a8885a308d3ull;

static void key_next(uint8_t k[REPLAY_KEY_LEN])
{
    for (int i = 0; i < 2; i++) { /* splitmix64: keys as random as client randoms */
        uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        memcpy(k + 8 * i, &z, 8);
    }
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    const char *csv = NULL;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc)
            csv = argv[++i];
    static const size_t budgets[] = {256 * 1024, 4 * 1024 * 1024, 64 * 1024 * 1024};
    size_t nb = quick ? 2 : 3;
    FILE *out = csv ? fopen(csv, "w") : NULL;
    const char *hdr = "budget_bytes,entries,memory_bytes,bytes_per_entry,ns_add_miss,ns_hit";
    printf("%s\n", hdr);
    if (out)
        fprintf(out, "%s\n", hdr);
    for (size_t b = 0; b < nb; b++) {
        struct replay_config rc = {.window = 600};
        rc.max_entries = budgets[b] / 36 + 1;
        while (rc.max_entries > 1 && replay_memory_for(&rc) > budgets[b])
            rc.max_entries -= rc.max_entries / 16 + 1;
        struct replay *r = replay_new(&rc);
        if (!r) {
            fprintf(stderr, "bench_replay: replay_new failed\n");
            return 1;
        }
        uint32_t now = (uint32_t)time(NULL);
        uint8_t k[REPLAY_KEY_LEN];
        uint64_t start = rng;
        for (size_t i = 0; i < rc.max_entries; i++) { /* fill */
            key_next(k);
            replay_check_and_add(r, k, now);
        }
        size_t n = quick ? 20000 : 2000000;
        double t0 = now_s();
        for (size_t i = 0; i < n; i++) {
            key_next(k);
            if (replay_check_and_add(r, k, now)) {
                fprintf(stderr, "bench_replay: false replay\n");
                return 1;
            }
        }
        double miss = (now_s() - t0) * 1e9 / (double)n;
        /* hits: the most recent keys are still present */
        size_t nh = n < rc.max_entries / 2 ? n : rc.max_entries / 2;
        uint64_t end = rng;
        rng = end - (uint64_t)(2 * nh) * 0x9e3779b97f4a7c15ull;
        size_t hits = 0;
        t0 = now_s();
        for (size_t i = 0; i < nh; i++) {
            key_next(k);
            hits += (size_t)replay_check_and_add(r, k, now);
        }
        double hit = (now_s() - t0) * 1e9 / (double)(nh ? nh : 1);
        rng = end;
        (void)start;
        size_t mem = replay_memory_for(&rc);
        char row[256];
        snprintf(row, sizeof row, "%zu,%zu,%zu,%.1f,%.1f,%.1f", budgets[b], rc.max_entries, mem,
                 (double)mem / (double)rc.max_entries, miss, hits == nh ? hit : 0.0);
        printf("%s\n", row);
        if (out)
            fprintf(out, "%s\n", row);
        replay_free(r);
    }
    if (out)
        fclose(out);
    return 0;
}
