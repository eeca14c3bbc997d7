/* test_ja4stat.c: the JA4 heavy-hitter tables: keys, bounds, top-N of a skewed stream, merges. */
#include "users/ja4stat.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include <cmocka.h>

#include "core/sbuf.h"
#include "conn/conn.h"
#include "config/reload.h"
#include "users/users.h"

static const char *const known[] = {
    "t13d1516h2_8daaf6152771_e5627efa2ab1", /* the spec's example */
    "t13d1516h2_8daaf6152771_d8a2da3f94cd", /* the project's test client */
    "t13d1516h2_8daaf6152771_806a8c22fdea", /* TDLib 1.8.69 */
    "t12i0300ad_000000000000_000000000000",
};

/* A distinct, well-formed JA4 for i (the b part carries i). */
static void key_of(unsigned i, uint8_t key[JA4STAT_KEY_LEN])
{
    char s[JA4_LEN + 1];
    snprintf(s, sizeof s, "t13d1516h2_%012x_e5627efa2ab1", i);
    assert_int_equal(ja4stat_key(s, key), 0);
}

static void test_keys(void **state)
{
    (void)state;
    uint8_t k[JA4STAT_KEY_LEN];
    char s[JA4_LEN + 1];
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        assert_int_equal(ja4stat_key(known[i], k), 0);
        assert_string_equal(ja4stat_key_str(k, s), known[i]);
    }
    const char *bad[] = {NULL, "", "t13d1516h2_8daaf6152771_e5627efa2ab", /* short */
                         "t13d1516h2_8DAAF6152771_e5627efa2ab1",          /* upper hex */
                         "q13d1516h2_8daaf6152771_e5627efa2ab1", "t13d1516h2-8daaf6152771_e5627efa2ab1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ja4stat_key(bad[i], k), -1);
        assert_string_equal(ja4stat_key_str(k, s), "malformed");
    }
    memset(k, 0, sizeof k);
    assert_string_equal(ja4stat_key_str(k, s), "");
}

static struct ja4stat tabs[2];

static size_t merge_all(int n, struct ja4stat_row *rows, uint64_t *total)
{
    const struct ja4stat *t[2] = {&tabs[0], &tabs[1]};
    return ja4stat_merge(t, n, rows, 2 * JA4STAT_SLOTS, total);
}

/* 100,000 distinct keys: the table stays at JA4STAT_SLOTS entries whose counts sum to all. */
static void test_bounded(void **state)
{
    (void)state;
    memset(tabs, 0, sizeof tabs);
    uint8_t k[JA4STAT_KEY_LEN];
    for (unsigned i = 0; i < 100000; i++) {
        key_of(i, k);
        ja4stat_add(&tabs[0], k, (int)(i & 1));
    }
    struct ja4stat_row rows[2 * JA4STAT_SLOTS];
    uint64_t total;
    size_t n = merge_all(1, rows, &total);
    assert_int_equal(n, JA4STAT_SLOTS);
    assert_int_equal(total, 100000);
}

/* Ten heavy keys among noise: all ten are the top ten, each count at least its true count and at
 * most that plus total / JA4STAT_SLOTS (Space-Saving's bound), and the heaviest is first. */
static void test_skewed(void **state)
{
    (void)state;
    memset(tabs, 0, sizeof tabs);
    enum { HEAVY = 10, NOISE = 20000 };
    unsigned want[HEAVY], left[HEAVY], noise = 0, total_true = 0;
    for (int h = 0; h < HEAVY; h++) {
        total_true += left[h] = want[h] = 3000 - 200 * (unsigned)h;
    }
    total_true += NOISE;
    uint64_t rng = 88172645463325252ull;
    uint8_t k[JA4STAT_KEY_LEN];
    for (unsigned done = 0; done < total_true; done++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        unsigned pick = (unsigned)(rng % (total_true - done)), h = 0;
        /* draw without replacement: heavy h by its remaining count, else noise */
        for (; h < HEAVY && pick >= left[h]; h++)
            pick -= left[h];
        if (h < HEAVY) {
            left[h]--;
            key_of(h, k);
        } else
            key_of(1000 + noise++, k);
        ja4stat_add(&tabs[0], k, 1);
    }
    assert_int_equal(noise, NOISE);
    struct ja4stat_row rows[2 * JA4STAT_SLOTS];
    uint64_t total;
    size_t n = merge_all(1, rows, &total);
    assert_int_equal(total, total_true);
    assert_true(n >= HEAVY);
    uint8_t k0[JA4STAT_KEY_LEN];
    key_of(0, k0);
    assert_memory_equal(rows[0].key, k0, JA4STAT_KEY_LEN);
    for (int h = 0; h < HEAVY; h++) {
        key_of((unsigned)h, k);
        int found = 0;
        for (int r = 0; r < HEAVY; r++)
            if (!memcmp(rows[r].key, k, JA4STAT_KEY_LEN)) {
                found = 1;
                assert_true(rows[r].count >= want[h]);
                assert_true(rows[r].count <= want[h] + total_true / JA4STAT_SLOTS);
            }
        assert_true(found);
    }
}

/* Two workers: equal (key, valid) rows add up, valid and invalid stay apart. */
static void test_merge_workers(void **state)
{
    (void)state;
    memset(tabs, 0, sizeof tabs);
    uint8_t a[JA4STAT_KEY_LEN], b[JA4STAT_KEY_LEN];
    ja4stat_key(known[0], a);
    ja4stat_key(known[1], b);
    for (int i = 0; i < 3; i++)
        ja4stat_add(&tabs[0], a, 1);
    for (int i = 0; i < 5; i++)
        ja4stat_add(&tabs[1], a, 1);
    ja4stat_add(&tabs[1], a, 0);
    for (int i = 0; i < 4; i++)
        ja4stat_add(&tabs[0], b, 0);
    struct ja4stat_row rows[2 * JA4STAT_SLOTS];
    uint64_t total;
    size_t n = merge_all(2, rows, &total);
    assert_int_equal(n, 3);
    assert_int_equal(total, 13);
    assert_memory_equal(rows[0].key, a, JA4STAT_KEY_LEN);
    assert_int_equal(rows[0].valid, 1);
    assert_int_equal(rows[0].count, 8);
    assert_memory_equal(rows[1].key, b, JA4STAT_KEY_LEN);
    assert_int_equal(rows[1].valid, 0);
    assert_int_equal(rows[1].count, 4);
    assert_int_equal(rows[2].valid, 0);
    assert_int_equal(rows[2].count, 1);
}

/* A user's three slots: the fourth key takes the least-counted one, with its count plus one. */
static void test_user(void **state)
{
    (void)state;
    static struct ja4stat_user u[2];
    uint8_t k[4][JA4STAT_KEY_LEN];
    for (int i = 0; i < 4; i++)
        key_of((unsigned)i, k[i]);
    int reps[4] = {5, 3, 2, 1};
    for (int i = 0; i < 4; i++)
        for (int r = 0; r < reps[i]; r++)
            ja4stat_user_add(&u[0], k[i]);
    ja4stat_user_add(&u[1], k[1]);
    const struct ja4stat_user *t[2] = {&u[0], &u[1]};
    struct ja4stat_row rows[2 * JA4STAT_USER_SLOTS];
    uint64_t total;
    size_t n = ja4stat_user_merge(t, 2, rows, 2 * JA4STAT_USER_SLOTS, &total);
    assert_int_equal(n, 3);
    assert_int_equal(total, 12);
    assert_memory_equal(rows[0].key, k[0], JA4STAT_KEY_LEN);
    assert_int_equal(rows[0].count, 5);
    assert_memory_equal(rows[1].key, k[1], JA4STAT_KEY_LEN);
    assert_int_equal(rows[1].count, 4);
    assert_memory_equal(rows[2].key, k[3], JA4STAT_KEY_LEN); /* took k[2]'s slot: 2 + 1 */
    assert_int_equal(rows[2].count, 3);
    assert_int_equal(rows[2].valid, 1);
}

/* Sums the values of the lines of page starting with prefix. */
static uint64_t sum_lines(const char *page, const char *prefix, int *lines)
{
    uint64_t sum = 0;
    *lines = 0;
    for (const char *p = page; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, prefix, strlen(prefix))) {
            const char *v = strchr(p, ' ');
            sum += strtoull(v + 1, NULL, 10);
            (*lines)++;
        }
    return sum;
}

/* /metrics: the top JA4STAT_TOP and "other" per valid sum to every hello; a user's top three. */
static void test_render(void **state)
{
    (void)state;
    static struct proxy_worker pws[2];
    memset(pws, 0, sizeof pws);
    struct users u;
    assert_int_equal(users_init(&u, 2), 0);
    int32_t id = users_intern(&u, "alice");
    assert_true(id >= 0);
    static struct gen g;
    static struct secret sec;
    memset(&g, 0, sizeof g);
    snprintf(sec.name, sizeof sec.name, "alice");
    uint32_t uid = (uint32_t)id;
    g.opt.secrets = &sec;
    g.opt.nsecrets = 1;
    g.users = &u;
    g.uid = &uid;
    uint8_t k[JA4STAT_KEY_LEN];
    unsigned all = 0;
    for (unsigned i = 0; i < 30; i++) /* 30 fingerprints, i seen 30 - i times */
        for (unsigned r = 0; r < 30 - i; r++, all++) {
            key_of(i, k);
            ja4stat_add(&pws[(r + i) & 1].ja4stat, k, (int)(i % 3 != 0));
        }
    ja4stat_key(known[1], k);
    for (int w = 0; w < 2; w++)
        for (int r = 0; r < 2 + w; r++)
            ja4stat_user_add(&users_wstats(&u, w, uid)->ja4, k);
    struct sbuf b = {0};
    assert_int_equal(ja4stat_render_prometheus(pws, 2, &g, &b), 0);
    int lines;
    uint64_t sum = sum_lines(b.p, "mtproxy_tls_hello_fingerprint_total{", &lines);
    assert_int_equal(sum, all);
    assert_int_equal(lines, JA4STAT_TOP + 2);
    assert_int_equal(sum_lines(b.p, "mtproxy_tls_hello_fingerprint_total{ja4=\"other\"", &lines),
                     all - (30 + 29 + 28 + 27 + 26 + 25 + 24 + 23 + 22 + 21));
    assert_int_equal(lines, 2);
    assert_non_null(strstr(b.p, "mtproxy_tls_hello_fingerprint_total{ja4=\"t13d1516h2_"
                                "000000000000_e5627efa2ab1\",valid=\"no\"} 30\n"));
    assert_non_null(strstr(b.p, "mtproxy_tls_hello_fingerprint_share{ja4=\"t13d1516h2_"
                                "000000000001_e5627efa2ab1\",valid=\"yes\"} 0.062366\n"));
    assert_non_null(strstr(b.p, "mtproxy_user_tls_fingerprint_total{user=\"alice\",ja4=\""
                                "t13d1516h2_8daaf6152771_d8a2da3f94cd\"} 5\n"));
    sbuf_free(&b);
    assert_int_equal(ja4stat_render_json(pws, 2, &g, &b), 0);
    const char *head = ",\n{\"name\":\"mtproxy_tls_hello_fingerprint_total\",\"labels\":{\"ja4\":"
                       "\"t13d1516h2_000000000000_e5627efa2ab1\",\"valid\":\"no\"},\"value\":30},";
    assert_memory_equal(b.p, head, strlen(head));
    assert_non_null(strstr(b.p, ",\n{\"name\":\"mtproxy_user_tls_fingerprint_total\",\"labels\":{"
                                "\"user\":\"alice\",\"ja4\":\"t13d1516h2_8daaf6152771_d8a2da3f94cd\"},"
                                "\"value\":5}"));
    assert_null(strchr(b.p, '#'));
    sbuf_free(&b);
    users_destroy(&u);
}

/* A reader merging while the owner counts sees consistent copies: totals never go down and
 * never pass what was added. */
static struct ja4stat live;
static _Atomic unsigned added;

static void *writer(void *arg)
{
    (void)arg;
    uint8_t k[JA4STAT_KEY_LEN];
    for (unsigned i = 0; i < 200000; i++) {
        key_of(i % 97 * (i % 5 ? 1 : 1000), k);
        ja4stat_add(&live, k, (int)(i & 1));
        atomic_store(&added, i + 1);
    }
    return NULL;
}

static void test_concurrent(void **state)
{
    (void)state;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, writer, NULL), 0);
    uint64_t last = 0;
    struct ja4stat_row rows[JA4STAT_SLOTS];
    const struct ja4stat *tp = &live;
    while (atomic_load(&added) < 200000) {
        uint64_t total;
        unsigned before = atomic_load(&added);
        size_t n = ja4stat_merge(&tp, 1, rows, JA4STAT_SLOTS, &total);
        unsigned after = atomic_load(&added);
        assert_true(n <= JA4STAT_SLOTS);
        assert_true(total >= last && total >= before && total <= after + 1);
        last = total;
    }
    pthread_join(t, NULL);
    uint64_t total;
    ja4stat_merge(&tp, 1, rows, JA4STAT_SLOTS, &total);
    assert_int_equal(total, 200000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys),         cmocka_unit_test(test_bounded),
        cmocka_unit_test(test_skewed),       cmocka_unit_test(test_merge_workers),
        cmocka_unit_test(test_user),         cmocka_unit_test(test_render),
        cmocka_unit_test(test_concurrent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
