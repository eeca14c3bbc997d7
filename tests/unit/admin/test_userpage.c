/* test_userpage.c: the status page's pure parts: the per-second history ring, the users-viewed
 * rings (bounded, least recently viewed evicted), the user list's query, search and sort, and
 * the query decoding they use (http_query_param). */
#include "admin/userpage.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/http.h"

static struct hist_ring *ring_new(void)
{
    struct hist_ring *r = calloc(1, sizeof *r);
    assert_non_null(r);
    return r;
}

/* The ring as JSON, for comparing. */
static char *ring_text(const struct hist_ring *r)
{
    struct sbuf b = {0};
    hist_json(r, &b);
    assert_int_equal(b.failed, 0);
    return b.p;
}

static void test_ring_deltas(void **state)
{
    struct hist_ring *r = ring_new();
    hist_sample(r, 100, 5000, 7, 1); /* primes: no entry */
    assert_int_equal(r->n, 0);
    hist_sample(r, 100, 6000, 8, 1); /* same second: nothing */
    assert_int_equal(r->n, 0);
    hist_sample(r, 101, 6000, 9, 2);
    hist_sample(r, 102, 6500, 9, 0);
    char *t = ring_text(r);
    assert_string_equal(t, "{\"interval\":1,\"end\":102,\"len\":2,\"bytes\":[1000,500],"
                           "\"conns\":[2,0],\"active\":[2,0]}");
    free(t);
    /* A late timer: 4 seconds share 10 bytes (the remainder last) and 3 connections. */
    hist_sample(r, 106, 6510, 12, 3);
    assert_int_equal(r->n, 6);
    t = ring_text(r);
    assert_non_null(strstr(t, "\"bytes\":[1000,500,2,2,3,3]"));
    assert_non_null(strstr(t, "\"conns\":[2,0,0,1,1,1]"));
    free(t);
    /* A counter that went back (a user removed by a reload) counts as 0, then from there. */
    hist_sample(r, 107, 100, 0, 0);
    hist_sample(r, 108, 150, 1, 0);
    assert_int_equal(r->bytes[(r->head + HIST_LEN - 2) % HIST_LEN], 0);
    assert_int_equal(r->bytes[(r->head + HIST_LEN - 1) % HIST_LEN], 50);
    free(r);
}

static void test_ring_wraps(void **state)
{
    struct hist_ring *r = ring_new();
    hist_sample(r, 0, 0, 0, 0);
    for (int64_t s = 1; s <= HIST_LEN + 10; s++)
        hist_sample(r, s, (uint64_t)(s * (s + 1) / 2), 0, 0); /* second s: s bytes */
    assert_int_equal(r->n, HIST_LEN);
    char *t = ring_text(r), *b = strstr(t, "\"bytes\":[");
    assert_non_null(b);
    assert_int_equal(strncmp(b, "\"bytes\":[11,12,13,", 18), 0); /* the oldest ten went */
    assert_non_null(strstr(t, ",3609,3610],\"conns\""));
    free(t);
    /* An hour or more missed: one hour of entries, not more. */
    hist_sample(r, 100000, 0, 0, 0);
    hist_sample(r, 200000, 36000, 0, 0);
    assert_int_equal(r->n, HIST_LEN);
    assert_int_equal(r->bytes[(r->head + HIST_LEN - 1) % HIST_LEN], 10);
    /* The clock going back only primes again. */
    hist_sample(r, 5, 1, 1, 0);
    assert_int_equal(r->last, 5);
    free(r);
}

static void test_users_lru(void **state)
{
    struct hist_users h = {0};
    char name[16];
    assert_null(hist_users_get(&h, "", 1));
    char longname[80];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    assert_null(hist_users_get(&h, longname, 1));
    struct hist_ring *first = hist_users_get(&h, "u0", 1);
    assert_non_null(first);
    hist_sample(first, 1, 0, 0, 0);
    hist_sample(first, 2, 10, 0, 0);
    assert_ptr_equal(hist_users_get(&h, "u0", 2), first); /* the same ring, kept */
    assert_int_equal(first->n, 1);
    for (int i = 1; i < HIST_USERS; i++) {
        snprintf(name, sizeof name, "u%d", i);
        assert_non_null(hist_users_get(&h, name, 10 + i));
    }
    assert_ptr_equal(hist_users_get(&h, "u0", 100), first); /* u0 viewed last now */
    /* A 17th user: the least recently viewed (u1) goes; u0 stays. */
    struct hist_ring *r17 = hist_users_get(&h, "u16", 101);
    assert_non_null(r17);
    assert_int_equal(r17->n, 0);
    assert_int_equal(first->n, 1);
    int names = 0, has_u1 = 0;
    for (int i = 0; i < HIST_USERS; i++) {
        names += h.u[i].name[0] != 0;
        has_u1 |= !strcmp(h.u[i].name, "u1");
    }
    assert_int_equal(names, HIST_USERS);
    assert_false(has_u1);
    /* u1 again: a fresh ring (its history was dropped), u2 evicted. */
    struct hist_ring *again = hist_users_get(&h, "u1", 102);
    assert_int_equal(again->n, 0);
    assert_int_equal(again->primed, 0);
    hist_users_free(&h);
    assert_int_equal(h.u[0].name[0], 0);
}

static void test_query_param(void **state)
{
    char v[8];
    const char *q = "a=1&q=hello+w%6Frld&empty=&flag&b=%zz&long=123456789";
    assert_int_equal(http_query_param(q, strlen(q), "a", v, sizeof v), 1);
    assert_string_equal(v, "1");
    assert_int_equal(http_query_param(q, strlen(q), "q", v, sizeof v), -1); /* 11 > 7 */
    char w[16];
    assert_int_equal(http_query_param(q, strlen(q), "q", w, sizeof w), 1);
    assert_string_equal(w, "hello world");
    assert_int_equal(http_query_param(q, strlen(q), "empty", v, sizeof v), 1);
    assert_string_equal(v, "");
    assert_int_equal(http_query_param(q, strlen(q), "flag", v, sizeof v), 1);
    assert_int_equal(http_query_param(q, strlen(q), "fla", v, sizeof v), 0);
    assert_int_equal(http_query_param(q, strlen(q), "b", v, sizeof v), -1);
    assert_int_equal(http_query_param(q, strlen(q), "long", v, sizeof v), -1);
    assert_int_equal(http_query_param(q, strlen(q), "none", v, sizeof v), 0);
    assert_int_equal(http_query_param("x=%00", 5, "x", v, sizeof v), -1);
    assert_int_equal(http_query_param("x=%4", 4, "x", v, sizeof v), -1);
    assert_int_equal(http_pct_decode("a+b", 3, v, sizeof v, 0), 3);
    assert_string_equal(v, "a+b");
}

static void test_parse(void **state)
{
    struct upage_query uq;
    const char *why = NULL;
    assert_int_equal(upage_parse("", &uq, &why), 0);
    assert_int_equal(uq.offset, 0);
    assert_int_equal(uq.limit, UPAGE_LIMIT_DEFAULT);
    assert_string_equal(uq.q, "");
    assert_int_equal(uq.sort, UP_NAME);
    assert_int_equal(uq.desc, 0);
    assert_int_equal(upage_parse("token=x&offset=40&limit=20&q=Bob%20&sort=bytes", &uq, &why),
                     0);
    assert_int_equal(uq.offset, 40);
    assert_int_equal(uq.limit, 20);
    assert_string_equal(uq.q, "Bob ");
    assert_int_equal(uq.sort, UP_BYTES);
    assert_int_equal(uq.desc, 1); /* counts: the largest first */
    assert_int_equal(upage_parse("sort=quota&order=asc", &uq, &why), 0);
    assert_int_equal(uq.sort, UP_QUOTA);
    assert_int_equal(uq.desc, 0);
    assert_int_equal(upage_parse("order=desc", &uq, &why), 0);
    assert_int_equal(uq.desc, 1);
    static const char *const bad[] = {"offset=", "offset=-1", "offset=1x", "offset=999999999999",
                                      "limit=0", "limit=501", "limit=+5", "sort=size",
                                      "order=up", "q=%zz", "sort"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why = NULL;
        assert_int_equal(upage_parse(bad[i], &uq, &why), -1);
        assert_non_null(why);
    }
    assert_int_equal(upage_parse("limit=500", &uq, &why), 0);
    assert_int_equal(uq.limit, 500);
}

static void test_filter_sort(void **state)
{
    struct upage_row rows[] = {
        {.name = "carol", .idx = 0, .bytes = 10, .conns = 5, .active = 1, .quota_used = 9},
        {.name = "Alice", .idx = 1, .bytes = 30, .conns = 1, .active = 0, .quota_used = 0},
        {.name = "bob", .idx = 2, .bytes = 30, .conns = 2, .active = 3, .quota_used = 1},
        {.name = "alicia", .idx = 3, .bytes = 0, .conns = 0, .active = 0, .quota_used = 4},
    };
    size_t n = sizeof rows / sizeof *rows;
    upage_sort(rows, n, UP_NAME, 0);
    assert_string_equal(rows[0].name, "Alice"); /* byte order: upper case first */
    assert_string_equal(rows[3].name, "carol");
    upage_sort(rows, n, UP_NAME, 1);
    assert_string_equal(rows[0].name, "carol");
    /* ties (Alice and bob: 30 bytes) by name ascending in either order */
    upage_sort(rows, n, UP_BYTES, 1);
    assert_string_equal(rows[0].name, "Alice");
    assert_string_equal(rows[1].name, "bob");
    assert_string_equal(rows[2].name, "carol");
    upage_sort(rows, n, UP_BYTES, 0);
    assert_string_equal(rows[0].name, "alicia");
    assert_string_equal(rows[1].name, "carol");
    assert_string_equal(rows[2].name, "Alice");
    upage_sort(rows, n, UP_CONNS, 1);
    assert_string_equal(rows[0].name, "carol");
    upage_sort(rows, n, UP_ACTIVE, 1);
    assert_string_equal(rows[0].name, "bob");
    upage_sort(rows, n, UP_QUOTA, 1);
    assert_string_equal(rows[0].name, "carol");
    assert_string_equal(rows[1].name, "alicia");
    /* search: case-insensitive substring, order kept */
    upage_sort(rows, n, UP_NAME, 0);
    assert_int_equal(upage_filter(rows, n, ""), n);
    size_t k = upage_filter(rows, n, "ALI");
    assert_int_equal(k, 2);
    assert_string_equal(rows[0].name, "Alice");
    assert_string_equal(rows[1].name, "alicia");
    assert_int_equal(upage_filter(rows, k, "icia"), 1);
    assert_string_equal(rows[0].name, "alicia");
    assert_int_equal(upage_filter(rows, 1, "zz"), 0);
    assert_string_equal(upage_sort_name(UP_CONNS), "conns");
}

/* 10,000 rows: sorted and searched well within the page's budget (printed). */
static void test_many(void **state)
{
    enum { N = 10000 };
    struct upage_row *rows = calloc(N, sizeof *rows);
    char(*names)[16] = calloc(N, sizeof *names);
    assert_non_null(rows);
    assert_non_null(names);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "user%05d", (i * 7919) % N);
        rows[i] = (struct upage_row){.name = names[i], .idx = (uint32_t)i,
                                     .bytes = (uint64_t)((i * 31) % 977)};
    }
    upage_sort(rows, N, UP_NAME, 0);
    for (int i = 0; i < N; i++) {
        char want[16];
        snprintf(want, sizeof want, "user%05d", i);
        assert_string_equal(rows[i].name, want);
    }
    upage_sort(rows, N, UP_BYTES, 1);
    for (int i = 1; i < N; i++)
        assert_true(rows[i - 1].bytes > rows[i].bytes ||
                    (rows[i - 1].bytes == rows[i].bytes &&
                     strcmp(rows[i - 1].name, rows[i].name) < 0));
    assert_int_equal(upage_filter(rows, N, "USER0999"), 10);
    free(rows);
    free(names);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_deltas), cmocka_unit_test(test_ring_wraps),
        cmocka_unit_test(test_users_lru),   cmocka_unit_test(test_query_param),
        cmocka_unit_test(test_parse),       cmocka_unit_test(test_filter_sort),
        cmocka_unit_test(test_many),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
