/* test_lstore.c: limits-store's pure parts: values, fleet totals with epochs, the local
 * delta and adjust arithmetic, hostile replies (the fleet counts at admission: test_users). */
#include "config/lstore.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "users/rstore.h"
#include "users/users.h"

static void test_values(void **state)
{
    (void)state;
    uint32_t c = 9, i = 9;
    uint64_t e = 9, b = 9;
    assert_int_equal(lstore_parse_live("3 2", 3, &c, &i), 0);
    assert_int_equal(c, 3);
    assert_int_equal(i, 2);
    assert_int_equal(lstore_parse_share("7 123456789012", 14, &e, &b), 0);
    assert_int_equal(e, 7);
    assert_int_equal(b, 123456789012ULL);
    const char *bad[] = {"", " ", "3", "3 ", " 3", "3  2", "-1 2", "3 x", "3 2 1", "3\t2",
                         "99999999999999999999 1", "4294967296 1"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        assert_int_equal(lstore_parse_live(bad[k], strlen(bad[k]), &c, &i), -1);
    /* a length that stops before the end: only those bytes are read */
    assert_int_equal(lstore_parse_live("3 25", 3, &c, &i), 0);
    assert_int_equal(i, 2);
    assert_int_equal(lstore_parse_u64("1234567890123456789", 19, &b), 0);
    assert_int_equal(lstore_parse_u64("12345678901234567890", 20, &b), -1);
}

#define KV(k, v) {k, v, sizeof k - 1, sizeof v - 1}

static void test_quota_total(void **state)
{
    (void)state;
    uint64_t e;
    size_t bad;
    /* no epoch field: epoch 0; every share of epoch 0 counts */
    struct lstore_kv a[] = {KV("h1:1:aa", "0 100"), KV("h2:2:bb", "0 250")};
    assert_int_equal(lstore_quota_total(a, 2, &e, &bad), 350);
    assert_int_equal(e, 0);
    assert_int_equal(bad, 0);
    /* after a reset (e = 2): shares of older epochs do not count; malformed ones are skipped */
    struct lstore_kv b[] = {KV("h1:1:aa", "1 100"), KV("e", "2"), KV("h2:2:bb", "2 250"),
                            KV("h3:3:cc", "2 5"), KV("h4:4:dd", "x")};
    assert_int_equal(lstore_quota_total(b, 5, &e, &bad), 255);
    assert_int_equal(e, 2);
    assert_int_equal(bad, 1);
    /* a share beyond what one user can move is garbage: skipped */
    struct lstore_kv c[] = {KV("x", "0 9223372036854775807"), KV("y", "0 18446744073709551615"),
                            KV("z", "0 7")};
    assert_int_equal(lstore_quota_total(c, 3, &e, &bad), 7);
    assert_int_equal(bad, 2);
    /* a total beyond it: refused (UINT64_MAX), never wraps */
    struct lstore_kv d[] = {KV("x", "0 72057594037927936"), KV("y", "0 72057594037927936"),
                            KV("z", "0 1")};
    assert_int_equal(lstore_quota_total(d, 1, &e, &bad), 72057594037927936ULL);
    assert_true(lstore_quota_total(d, 3, &e, &bad) == UINT64_MAX);
    assert_int_equal(lstore_quota_total(NULL, 0, &e, NULL), 0);
}

static void test_arithmetic(void **state)
{
    (void)state;
    int stale;
    /* bytes since the last flush */
    assert_int_equal(lstore_delta(1500, 1000), 500);
    assert_int_equal(lstore_delta(300, 1000), 300); /* reset since: all of it is new */
    /* the fleet total plus what was counted here while the flush was in flight */
    assert_int_equal(lstore_adjust(1200, 1000, 5000, &stale), 5200);
    assert_int_equal(stale, 0);
    assert_int_equal(lstore_adjust(1000, 1000, 700, &stale), 700);
    assert_int_equal(stale, 0);
    /* a local reset while in flight: kept as it is, flagged */
    assert_int_equal(lstore_adjust(10, 1000, 5000, &stale), 10);
    assert_int_equal(stale, 1);
    assert_true(lstore_adjust(UINT64_MAX, 0, 5, &stale) == UINT64_MAX);

    /* a flush cycle by hand: mine grows by the deltas, used follows the fleet */
    uint64_t used = 0, base = 0, mine = 0, other = 0;
    for (int round = 1; round <= 5; round++) {
        used += 1000;                                  /* this instance's traffic */
        uint64_t snap = used;
        mine += lstore_delta(snap, base);              /* sent */
        base = snap;
        used += 10;                                    /* while in flight */
        other += 3000;                                 /* another instance's share */
        uint64_t fleet = mine + other;                 /* answered */
        used = lstore_adjust(used, snap, fleet, &stale);
        base = fleet;
        assert_int_equal(mine, (uint64_t)round * 1010 - 10);
        assert_int_equal(used, fleet + 10);
    }
}

static void test_expiry(void **state)
{
    (void)state;
    /* live counts: three intervals, never under 2 s */
    assert_int_equal(lstore_live_ttl_ms(1000), 3000);
    assert_int_equal(lstore_live_ttl_ms(250), 2000);
    assert_int_equal(lstore_live_ttl_ms(100), 2000);
    assert_int_equal(lstore_live_ttl_ms(60000), 180000);
    /* a periodic quota's hash: a day past its period's end; a lifetime one: none */
    assert_int_equal(lstore_quota_ttl_ms(0, 1000), 0);
    assert_true(lstore_quota_ttl_ms(1000 + 3600, 1000) == (3600LL + 86400) * 1000);
    /* a clock past the end (a late flush): still a day, never 0 or negative */
    assert_true(lstore_quota_ttl_ms(1000, 1000 + 86400 * 2) == 1000);
    /* with users_period_start: a monthly quota's hash outlives the month by a day */
    int64_t next, now = 1798761600 + 5 * 86400; /* 2027-01-06 */
    users_period_start(QP_MONTH, 1, now, &next);
    assert_true(lstore_quota_ttl_ms(next, now) == (26LL * 86400 + 86400) * 1000);
}

static void test_hostile_replies(void **state)
{
    (void)state;
    if (lstore_parse_replies("+OK\r\n", 5) < 0)
        skip(); /* built without hiredis */
    const char ok[] = "*4\r\n$1\r\ne\r\n$1\r\n3\r\n$4\r\nh:1x\r\n$3\r\n3 9\r\n"
                      "*2\r\n$1\r\na\r\n$5\r\nnot a\r\n*-1\r\n:5\r\n";
    assert_int_equal(lstore_parse_replies(ok, sizeof ok - 1), 4);
    /* an array past RSTORE_BIG_MAX_ELEMENTS is refused before anything is allocated */
    char big[64];
    snprintf(big, sizeof big, "*%d\r\n", RSTORE_BIG_MAX_ELEMENTS + 1);
    assert_int_equal(lstore_parse_replies(big, strlen(big)), -1);
    assert_int_equal(lstore_parse_replies("*2147483647\r\n", 13), -1);
    assert_int_equal(lstore_parse_replies("?what\r\n", 7), -1);
    /* odd arrays, nested arrays, integers where strings belong: read and ignored */
    const char odd[] = "*3\r\n:1\r\n:2\r\n:3\r\n*2\r\n*1\r\n:1\r\n$1\r\nx\r\n";
    assert_int_equal(lstore_parse_replies(odd, sizeof odd - 1), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_quota_total),
        cmocka_unit_test(test_arithmetic),
        cmocka_unit_test(test_expiry),
        cmocka_unit_test(test_hostile_replies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
