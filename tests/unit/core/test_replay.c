/* test_replay.c: replay cache tests: add/check, time window, FIFO eviction, a model, threads. */
#include "core/replay.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* A key from a number (and a tag so threads can own disjoint ranges). */
static void mkkey(uint8_t key[REPLAY_KEY_LEN], uint32_t tag, uint64_t n) {
    memset(key, 0, REPLAY_KEY_LEN);
    memcpy(key, &n, sizeof n);
    memcpy(key + 12, &tag, sizeof tag);
}

static struct replay *make(size_t max_entries, uint32_t window, unsigned shards) {
    const struct replay_config cfg = {max_entries, window, shards};
    struct replay *r = replay_new(&cfg);
    assert_non_null(r);
    return r;
}

static void test_add_check(void **state) {
    (void)state;
    struct replay *r = make(1000, 600, 0);
    uint8_t a[16], b[16];
    mkkey(a, 0, 1);
    mkkey(b, 0, 2);
    assert_int_equal(replay_contains(r, a, 100), 0);
    assert_int_equal(replay_check_and_add(r, a, 100), 0);
    assert_int_equal(replay_check_and_add(r, a, 100), 1);
    assert_int_equal(replay_check_and_add(r, a, 101), 1);
    assert_int_equal(replay_contains(r, a, 101), 1);
    assert_int_equal(replay_contains(r, b, 101), 0);
    assert_int_equal(replay_contains(r, b, 101), 0); /* contains never adds */
    assert_int_equal(replay_check_and_add(r, b, 101), 0);
    /* keys differing in one byte anywhere are different */
    for (int i = 0; i < 16; i++) {
        uint8_t c[16];
        memcpy(c, a, 16);
        c[i] ^= 0x80;
        assert_int_equal(replay_check_and_add(r, c, 102), 0);
    }
    struct replay_stats st;
    replay_stats(r, &st);
    assert_int_equal(st.entries, 18);
    assert_int_equal(st.hits, 3);
    assert_int_equal(st.lookups, 24);
    assert_true(st.capacity >= 1000);
    assert_int_equal(st.memory, replay_memory_for(&(struct replay_config){1000, 600, 0}));
    replay_free(r);

    /* a NULL cache is "disabled": nothing is ever a replay */
    assert_int_equal(replay_check_and_add(NULL, a, 1), 0);
    assert_int_equal(replay_check_and_add(NULL, a, 1), 0);
    assert_int_equal(replay_contains(NULL, a, 1), 0);
    replay_stats(NULL, &st);
    assert_int_equal(st.entries, 0);
    replay_free(NULL);
}

static void test_config(void **state) {
    (void)state;
    static const struct replay_config bad[] = {
        {0, 10, 0},                  /* no entries */
        {REPLAY_MAX_ENTRIES + 1, 10, 0},
        {100, 10, 3},                /* not a power of two */
        {100, 10, REPLAY_MAX_SHARDS * 2},
        {100, (uint32_t)INT32_MAX + 1, 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_null(replay_new(&bad[i]));
        assert_int_equal(replay_memory_for(&bad[i]), 0);
    }
    /* automatic sharding, and what memory the header promises */
    struct replay_stats st;
    struct replay *r = make(65536, 600, 0);
    replay_stats(r, &st);
    assert_int_equal(st.shards, 64);
    assert_int_equal(st.capacity, 65536);
    assert_true(st.memory >= 65536 * 28 && st.memory <= 65536 * 36 + 64 * 1024);
    replay_free(r);
    r = make(10, 600, 0);
    replay_stats(r, &st);
    assert_int_equal(st.shards, 1);
    replay_free(r);
    r = make(1, 0, 0); /* one entry */
    uint8_t a[16], b[16];
    mkkey(a, 0, 1);
    mkkey(b, 0, 2);
    assert_int_equal(replay_check_and_add(r, a, 5), 0);
    assert_int_equal(replay_check_and_add(r, a, 5), 1);
    assert_int_equal(replay_check_and_add(r, b, 5), 0);
    assert_int_equal(replay_check_and_add(r, a, 5), 0);
    replay_free(r);
    r = make(100, 10, 1024); /* more shards than entries: each gets one */
    replay_stats(r, &st);
    assert_int_equal(st.shards, 1024);
    assert_int_equal(st.capacity, 1024);
    replay_free(r);
}

static void test_window(void **state) {
    (void)state;
    struct replay *r = make(100, 10, 1);
    uint8_t a[16], b[16];
    mkkey(a, 0, 1);
    mkkey(b, 0, 2);
    assert_int_equal(replay_check_and_add(r, a, 1000), 0);
    assert_int_equal(replay_check_and_add(r, a, 1010), 1);   /* 10 s old: inside */
    assert_int_equal(replay_contains(r, a, 1011), 0);        /* 11 s old: gone */
    assert_int_equal(replay_check_and_add(r, a, 1011), 0);   /* and taken afresh */
    assert_int_equal(replay_check_and_add(r, a, 1021), 1);
    assert_int_equal(replay_check_and_add(r, a, 1022), 0);
    /* another thread's clock a little behind: not "expired" */
    assert_int_equal(replay_check_and_add(r, a, 1020), 1);
    assert_int_equal(replay_check_and_add(r, b, 1025), 0);

    /* expired entries are reclaimed when their turn comes */
    struct replay_stats st;
    for (uint64_t i = 10; i < 20; i++) {
        uint8_t k[16];
        mkkey(k, 0, i);
        assert_int_equal(replay_check_and_add(r, k, 2000), 0);
    }
    replay_stats(r, &st);
    assert_int_equal(st.entries, 10); /* a and b (and a's dead slots) were dropped */
    assert_int_equal(st.evicted, 0);
    assert_true(st.expired >= 4);
    replay_free(r);

    /* window 0: only FIFO */
    r = make(10, 0, 1);
    assert_int_equal(replay_check_and_add(r, a, 1), 0);
    assert_int_equal(replay_check_and_add(r, a, 4000000000u), 1);
    replay_free(r);
}

/* Timeless entries (obfuscated2 headers) outlive the window; only FIFO eviction drops them,
 * and they do not stop expired timed entries from counting as absent. */
static void test_timeless(void **state) {
    (void)state;
    struct replay *r = make(4, 10, 1);
    uint8_t a[16], b[16], c[16];
    mkkey(a, 0, 1);
    mkkey(b, 0, 2);
    mkkey(c, 0, 3);
    assert_int_equal(replay_check_and_add_timeless(r, a, 100), 0);
    assert_int_equal(replay_check_and_add(r, b, 100), 0);
    /* long after the window: the timed key is forgotten, the timeless one is not */
    assert_int_equal(replay_check_and_add_timeless(r, a, 100000), 1);
    assert_int_equal(replay_contains(r, a, 4000000000u), 1);
    assert_int_equal(replay_contains(r, b, 100000), 0);
    assert_int_equal(replay_check_and_add(r, b, 100000), 0); /* re-added, now fresh */
    assert_int_equal(replay_check_and_add(r, b, 100001), 1);
    /* a full shard evicts the oldest, timeless or not */
    for (uint64_t i = 10; i < 14; i++) {
        mkkey(c, 1, i);
        assert_int_equal(replay_check_and_add(r, c, 100002), 0);
    }
    assert_int_equal(replay_contains(r, a, 100002), 0);
    replay_free(r);
}

static void test_capacity_fifo(void **state) {
    (void)state;
    struct replay *r = make(8, 3600, 1);
    uint8_t k[16];
    for (uint64_t i = 0; i < 8; i++) {
        mkkey(k, 0, i);
        assert_int_equal(replay_check_and_add(r, k, 100), 0);
    }
    for (uint64_t i = 0; i < 8; i++) {
        mkkey(k, 0, i);
        assert_int_equal(replay_contains(r, k, 100), 1);
    }
    mkkey(k, 0, 8);
    assert_int_equal(replay_check_and_add(r, k, 100), 0); /* evicts key 0, the oldest */
    mkkey(k, 0, 0);
    assert_int_equal(replay_contains(r, k, 100), 0);
    for (uint64_t i = 1; i <= 8; i++) {
        mkkey(k, 0, i);
        assert_int_equal(replay_contains(r, k, 100), 1);
    }
    /* hits do not refresh: key 1 is next out even though it was just seen */
    mkkey(k, 0, 1);
    assert_int_equal(replay_check_and_add(r, k, 100), 1);
    mkkey(k, 0, 9);
    assert_int_equal(replay_check_and_add(r, k, 100), 0);
    mkkey(k, 0, 1);
    assert_int_equal(replay_contains(r, k, 100), 0);
    struct replay_stats st;
    replay_stats(r, &st);
    assert_int_equal(st.evicted, 2);
    assert_int_equal(st.entries, 8);
    replay_free(r);
}

/* A key refreshed after expiry leaves a dead ring slot behind. A dead slot can sit in the
 * middle of the ring when clocks passed by threads go slightly backwards; evicting it later must
 * not remove the index slot of the live copy of the same key. */
static void test_dead_slot(void **state) {
    (void)state;
    struct replay *r = make(4, 10, 1);
    uint8_t a[16], c[16], d[16], e[16], f[16], y[16];
    mkkey(a, 0, 1);
    mkkey(c, 0, 3);
    mkkey(d, 0, 4);
    mkkey(e, 0, 5);
    mkkey(f, 0, 6);
    mkkey(y, 0, 9);
    assert_int_equal(replay_check_and_add(r, y, 5), 0);
    assert_int_equal(replay_check_and_add(r, a, 0), 0);  /* a thread with an older clock */
    assert_int_equal(replay_check_and_add(r, a, 11), 0); /* a expired: refreshed, slot dead */
    assert_int_equal(replay_check_and_add(r, c, 11), 0); /* ring: y5 a0(dead) a11 c11 */
    assert_int_equal(replay_check_and_add(r, d, 12), 0); /* full: evicts y */
    assert_int_equal(replay_contains(r, y, 12), 0);
    assert_int_equal(replay_check_and_add(r, e, 13), 0); /* full: passes the dead slot */
    assert_int_equal(replay_contains(r, a, 13), 1);      /* the live copy is intact */
    assert_int_equal(replay_contains(r, c, 13), 1);
    assert_int_equal(replay_contains(r, d, 13), 1);
    assert_int_equal(replay_contains(r, e, 13), 1);
    assert_int_equal(replay_check_and_add(r, f, 13), 0); /* now the live a goes */
    assert_int_equal(replay_contains(r, a, 13), 0);
    assert_int_equal(replay_contains(r, f, 13), 1);
    replay_free(r);
}

/* Against a model: with window 0 a key is present iff it is among the last `cap` keys that
 * were added (returned 0). Small key universe: many hits, evictions and index deletions. */
static void test_model(void **state) {
    (void)state;
    enum { CAP = 64, UNIVERSE = 200, OPS = 200000 };
    struct replay *r = make(CAP, 0, 1);
    uint64_t recent[CAP];
    size_t nrecent = 0, head = 0;
    srand(1234);
    for (int op = 0; op < OPS; op++) {
        uint64_t x = (uint64_t)(rand() % UNIVERSE);
        int want = 0;
        for (size_t i = 0; i < nrecent; i++)
            if (recent[i] == x)
                want = 1;
        uint8_t k[16];
        mkkey(k, 7, x);
        int got = rand() % 4 ? replay_check_and_add(r, k, 1) : -1;
        if (got < 0) {
            assert_int_equal(replay_contains(r, k, 1), want);
            continue;
        }
        if (got != want)
            fail_msg("op %d key %llu: got %d want %d", op, (unsigned long long)x, got, want);
        if (!got) {
            recent[head] = x;
            head = (head + 1) % CAP;
            if (nrecent < CAP)
                nrecent++;
        }
    }
    replay_free(r);
}

/* ---- threads ---- */

enum { THREADS = 4, OWN = 20000, SHARED = 20000 };

struct worker_arg {
    struct replay *r;
    uint32_t tag;
    uint8_t shared_new[SHARED]; /* 1 where this thread's add of shared key i returned 0 */
    int own_errors;
};

static void *worker(void *p) {
    struct worker_arg *w = p;
    uint8_t k[16];
    /* interleave own keys and shared keys, shared ones in a per-thread order */
    for (uint64_t i = 0; i < OWN; i++) {
        mkkey(k, w->tag + 1, i);
        if (replay_check_and_add(w->r, k, 1000) != 0)
            w->own_errors++;
        static const uint64_t mult[THREADS] = {1, 3, 7, 9}; /* coprime with SHARED */
        uint64_t s = (i * mult[w->tag] + w->tag * 977) % SHARED; /* a permutation */
        mkkey(k, 0, s);
        w->shared_new[s] = replay_check_and_add(w->r, k, 1000) == 0;
    }
    for (uint64_t i = 0; i < OWN; i++) {
        mkkey(k, w->tag + 1, i);
        if (replay_check_and_add(w->r, k, 1001) != 1)
            w->own_errors++;
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    /* twice the keys, so no shard fills up however unevenly they spread */
    struct replay *r = make(2 * (THREADS * OWN + SHARED), 600, 0);
    static struct worker_arg args[THREADS];
    pthread_t th[THREADS];
    for (uint32_t t = 0; t < THREADS; t++) {
        memset(&args[t], 0, sizeof args[t]);
        args[t].r = r;
        args[t].tag = t;
        assert_int_equal(pthread_create(&th[t], NULL, worker, &args[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(args[t].own_errors, 0);
    for (size_t s = 0; s < SHARED; s++) {
        int firsts = 0;
        for (int t = 0; t < THREADS; t++)
            firsts += args[t].shared_new[s];
        if (firsts != 1)
            fail_msg("shared key %zu was new for %d threads", s, firsts);
    }
    struct replay_stats st;
    replay_stats(r, &st);
    assert_int_equal(st.entries, THREADS * OWN + SHARED);
    assert_int_equal(st.lookups, THREADS * (3 * OWN));
    assert_int_equal(st.hits, THREADS * OWN + (THREADS - 1) * SHARED);
    assert_int_equal(st.evicted, 0);
    replay_free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_check),     cmocka_unit_test(test_config),
        cmocka_unit_test(test_window),        cmocka_unit_test(test_capacity_fifo),
        cmocka_unit_test(test_dead_slot),     cmocka_unit_test(test_model),
        cmocka_unit_test(test_threads),       cmocka_unit_test(test_timeless),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
