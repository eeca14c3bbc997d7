/* test_users.c: users registry at scale, per-worker counters summed, limit parser, limit checks. */
#include "users/users.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/shared64.h"
#include "core/sock.h"
#include "config/options.h"

static struct sock_addr addr4(const char *ip)
{
    struct sock_addr a;
    char e[128];
    char text[64];
    snprintf(text, sizeof text, "%s:1", ip);
    assert_int_equal(sock_addr_parse(text, 1, 0, &a, e, sizeof e), 0);
    return a;
}

static void test_registry_10000(void **state)
{
    (void)state;
    struct users u;
    assert_int_equal(users_init(&u, 3), 0);
    char name[32];
    for (int i = 0; i < 10000; i++) {
        snprintf(name, sizeof name, "user%d", i);
        assert_int_equal(users_intern(&u, name), i);
    }
    assert_int_equal(users_count(&u), 10000);
    assert_int_equal(users_intern(&u, "user9999"), 9999); /* same name, same id */
    assert_int_equal(users_find(&u, "user4321"), 4321);
    assert_int_equal(users_find(&u, "nobody"), -1);
    assert_string_equal(users_name(&u, 9999), "user9999");
    /* counters of the last user in each worker add up */
    for (int w = 0; w < 3; w++) {
        struct user_stats *s = users_wstats(&u, w, 9999);
        STAT_ADD(&s->bytes_up, 100u * (unsigned)(w + 1));
        STAT_ADD(&s->bytes_down, 7);
        STAT_INC(&s->conns);
        STAT_INC(&s->refused[UR_IPS]);
    }
    STAT_INC(&users_wstats(&u, 1, 9998)->conns); /* another user: not summed in */
    struct user_totals t;
    users_stats_sum(&u, 9999, &t);
    assert_int_equal(t.bytes_up, 600);
    assert_int_equal(t.bytes_down, 21);
    assert_int_equal(t.conns, 3);
    assert_int_equal(t.refused[UR_IPS], 3);
    assert_int_equal(t.refused[UR_CONNS], 0);
    users_stats_sum(&u, 20000, &t); /* out of range: zeros */
    assert_int_equal(t.conns, 0);
    users_destroy(&u);
}

static void test_options_10000_secrets(void **state)
{
    (void)state;
    static struct options o;
    static struct config_parser p;
    assert_int_equal(options_init(&p, &o), 0);
    size_t cap = 10001 * 80, len = 0;
    char *text = malloc(cap);
    for (int i = 0; i < 10000; i++)
        len += (size_t)snprintf(text + len, cap - len, "secret = u%d:%032x\n", i, i + 1);
    assert_int_equal(config_load_buffer(&p, "t.conf", text, len), 0);
    assert_int_equal(o.nsecrets, 10000);
    assert_int_equal(options_find_secret(&o, "u9999"), 9999);
    assert_int_equal(o.secrets[9999].key[15], (10000) & 0xff);
    /* a repeated name is an error with file:line */
    assert_int_equal(config_load_buffer(&p, "t.conf", "secret = u5:00000000000000000000000000000001\n", 45), 1);
    assert_non_null(strstr(p.errors.msg[0], "t.conf:1:"));
    assert_non_null(strstr(p.errors.msg[0], "used twice"));
    free(text);
    options_free(&o);
}

static void test_limit_parse(void **state)
{
    (void)state;
    struct user_limit l;
    char err[256];
    assert_int_equal(users_limit_parse("alice conns=3 ips=2 quota=10G expires=2030-01-02 "
                                       "rate=1M/s", &l, err, sizeof err), 0);
    assert_string_equal(l.name, "alice");
    assert_int_equal(l.conns, 3);
    assert_int_equal(l.ips, 2);
    assert_int_equal(l.quota, 10ULL << 30);
    assert_int_equal(l.expires, 1893542400LL);
    assert_int_equal(l.rate, 1 << 20);
    assert_int_equal(users_limit_parse("bob expires=2024-02-29T23:59:59Z", &l, err, sizeof err),
                     0);
    assert_int_equal(l.expires, 1709251199LL);
    static const char *const bad[] = {
        "", "alice", "al ice=3", "alice conns=0", "alice conns=x", "alice conns=3 conns=4",
        "alice quota=0", "alice quota=1Q", "alice rate=1M", "alice rate=10/s",
        "alice expires=2023-02-29", "alice expires=2030-13-01", "alice expires=2030-01-01T25:00:00Z",
        "alice expires=2030-01-01T10:00:00", "alice speed=3", "alice conns=", "a/b conns=1",
        "alice expires=+030-01-01", "alice conns=3 junk",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        if (users_limit_parse(bad[i], &l, err, sizeof err) == 0)
            fail_msg("accepted '%s'", bad[i]);
        assert_true(err[0]);
    }
}

static void test_admit(void **state)
{
    (void)state;
    struct users u;
    assert_int_equal(users_init(&u, 1), 0);
    uint32_t id = (uint32_t)users_intern(&u, "a");
    struct user_limit l = {.conns = 2};
    struct sock_addr a1 = addr4("127.0.0.1"), a2 = addr4("127.0.0.2"), a3 = addr4("127.0.0.3");
    assert_int_equal(users_admit(&u, id, &l, &a1, 100, 3600), -1);
    assert_int_equal(users_admit(&u, id, &l, &a1, 100, 3600), -1);
    assert_int_equal(users_admit(&u, id, &l, &a1, 100, 3600), UR_CONNS);
    users_release(&u, id, &a1, 101);
    assert_int_equal(users_admit(&u, id, &l, &a1, 102, 3600), -1);
    users_release(&u, id, &a1, 103);
    users_release(&u, id, &a1, 103);
    /* ips: two distinct addresses within the window */
    l = (struct user_limit){.ips = 2};
    assert_int_equal(users_admit(&u, id, &l, &a1, 200, 60), -1);
    assert_int_equal(users_admit(&u, id, &l, &a2, 200, 60), -1);
    assert_int_equal(users_admit(&u, id, &l, &a3, 200, 60), UR_IPS);
    assert_int_equal(users_admit(&u, id, &l, &a1, 201, 60), -1); /* a known one: fine */
    users_release(&u, id, &a1, 210);
    users_release(&u, id, &a1, 210);
    users_release(&u, id, &a2, 210);
    assert_int_equal(users_admit(&u, id, &l, &a3, 260, 60), UR_IPS); /* still in the window */
    assert_int_equal(users_admit(&u, id, &l, &a3, 271, 60), -1);     /* a1, a2 forgotten */
    users_release(&u, id, &a3, 272);
    /* quota and expiry */
    l = (struct user_limit){.quota = 1000, .expires = 500};
    assert_int_equal(users_charge(&u, id, l.quota, 999), 0);
    assert_int_equal(users_admit(&u, id, &l, &a1, 300, 60), -1);
    users_release(&u, id, &a1, 300);
    assert_int_equal(users_charge(&u, id, l.quota, 1), 1);
    assert_int_equal(users_admit(&u, id, &l, &a1, 300, 60), UR_QUOTA);
    uint64_t was = shared64_load(&users_shared(&u, id)->used);
    assert_int_equal(users_charge(&u, id, 0, UINT64_MAX - 10), 0); /* saturates, no wrap */
    assert_true(shared64_load(&users_shared(&u, id)->used) == UINT64_MAX);
    assert_int_equal(users_charge(&u, id, l.quota, 5), 1);
    assert_true(shared64_load(&users_shared(&u, id)->used) == UINT64_MAX);
    shared64_store(&users_shared(&u, id)->used, was);
    l.quota = 0;
    assert_int_equal(users_admit(&u, id, &l, &a1, 500, 60), UR_EXPIRED);
    /* log once per minute */
    assert_int_equal(users_log_allowed(&u, id, 600), 1);
    assert_int_equal(users_log_allowed(&u, id, 610), 0);
    assert_int_equal(users_log_allowed(&u, id, 661), 1);
    /* 60 s from the last line count, not the calendar minute: a burst across a minute's turn
     * (770 s, then 781 s) is still one line */
    assert_int_equal(users_log_allowed(&u, id, 770), 1);
    assert_int_equal(users_log_allowed(&u, id, 781), 0);
    assert_int_equal(users_log_allowed(&u, id, 829), 0);
    assert_int_equal(users_log_allowed(&u, id, 831), 1);
    /* state: quota-used lines round-trip */
    char *buf = NULL;
    size_t cap = 0;
    assert_true(users_state_format(&u, &buf, &cap) > 0);
    assert_string_equal(buf, "quota-used = a 1000\n");
    struct users v;
    assert_int_equal(users_init(&v, 1), 0);
    char err[128];
    assert_int_equal(users_state_apply(&v, "a 1000", err, sizeof err), 0);
    assert_int_equal(users_state_apply(&v, "a -1", err, sizeof err), -1);
    assert_int_equal(users_state_apply(&v, "a", err, sizeof err), -1);
    struct user_totals t;
    users_stats_sum(&v, 0, &t);
    assert_int_equal(t.quota_used, 1000);
    free(buf);
    users_destroy(&v);
    users_destroy(&u);
}

static void test_rate(void **state)
{
    (void)state;
    struct users u;
    assert_int_equal(users_init(&u, 1), 0);
    uint32_t id = (uint32_t)users_intern(&u, "r");
    /* 1 MB/s with a 64k burst: 1 MB taken at once must wait about 1 s minus the burst */
    double w = users_rate_take(&u, id, 1, 1000000, 65536, 1000000, 10.0);
    assert_true(w > 0.93 && w < 0.94);
    /* the other direction is independent */
    assert_true(users_rate_take(&u, id, 0, 1000000, 65536, 1000, 10.0) == 0);
    /* after the wait, small reads go again */
    assert_true(users_rate_take(&u, id, 1, 1000000, 65536, 1000, 11.0) == 0);
    users_destroy(&u);
}

/* The quota period holding now: start and next reset (unix s), checked against dates. */
static void period_is(enum quota_period p, unsigned day, int64_t now, int64_t start,
                      int64_t next)
{
    int64_t n = -1;
    int64_t s = users_period_start(p, day, now, &n);
    if (s != start || n != next)
        fail_msg("period %d day %u at %lld: got %lld..%lld, want %lld..%lld", (int)p, day,
                 (long long)now, (long long)s, (long long)n, (long long)start, (long long)next);
}

static void test_quota_period(void **state)
{
    (void)state;
    const int64_t D = 86400;
    /* month, day 1: the last second of January, the first of February (exactly midnight) */
    period_is(QP_MONTH, 1, 1801439999, 1798761600, 1801440000); /* 2027-01-31 23:59:59 */
    period_is(QP_MONTH, 1, 1801440000, 1801440000, 1803859200); /* 2027-02-01 -> 03-01 */
    /* December to January */
    period_is(QP_MONTH, 1, 1797328800, 1796083200, 1798761600); /* 2026-12-15 10:00 */
    /* day 15 on 10 January: the period began on 15 December, the year before */
    period_is(QP_MONTH, 15, 1799539200, 1797292800, 1799971200);
    /* leap years: 2024-02-29 with day 1 and day 28; day 28 the day before */
    period_is(QP_MONTH, 1, 1709208000, 1706745600, 1709251200);
    period_is(QP_MONTH, 28, 1709208000, 1709078400, 1711584000);
    period_is(QP_MONTH, 28, 1709078399, 1706400000, 1709078400); /* 2024-02-27 23:59:59 */
    period_is(QP_MONTH, 28, 1709078400, 1709078400, 1711584000); /* exactly 02-28 00:00 */
    /* not a leap year: 2023-03-01 with day 28 is in the period of 2023-02-28 */
    period_is(QP_MONTH, 28, 1677628800, 1677542400, 1679961600);
    /* a day out of range counts as 1 */
    period_is(QP_MONTH, 0, 1801439999, 1798761600, 1801440000);
    period_is(QP_MONTH, 31, 1801439999, 1798761600, 1801440000);
    /* week: Monday (1) on Sunday 2027-01-31 23:59:59, then exactly Monday 00:00 */
    period_is(QP_WEEK, 1, 1801439999, 1800835200, 1801440000);
    period_is(QP_WEEK, 1, 1801440000, 1801440000, 1801440000 + 7 * D);
    /* Sunday (7): on that Sunday, and on the Saturday before */
    period_is(QP_WEEK, 7, 1801439999, 1801353600, 1801353600 + 7 * D);
    period_is(QP_WEEK, 7, 1801353600 - D / 2, 1801353600 - 7 * D, 1801353600);
    period_is(QP_WEEK, 5, 1798761600, 1798761600, 1798761600 + 7 * D); /* a Friday 00:00 */
    period_is(QP_WEEK, 4, 0, 0, 7 * D);                                 /* 1970-01-01: Thu */
    /* day: every midnight; before 1970 too */
    period_is(QP_DAY, 0, 1801439999, 1801353600, 1801440000);
    period_is(QP_DAY, 0, 1801440000, 1801440000, 1801440000 + D);
    period_is(QP_DAY, 0, -1, -D, 0);
    /* lifetime: none */
    period_is(QP_LIFETIME, 0, 1801439999, 0, 0);
    /* every day of 2020-2031 at 00:00 and 23:59:59: the period holds now, the next one starts
     * where it ends, months are 28-31 days and weeks 7 */
    for (int64_t t = 1577836800; t < 1956528000; t += D) {
        for (int64_t now = t; now <= t + D - 1; now += D - 1) {
            for (unsigned day = 1; day <= 28; day += 9) {
                int64_t next, next2;
                int64_t s = users_period_start(QP_MONTH, day, now, &next);
                assert_true(s <= now && now < next);
                assert_true(next - s >= 28 * D && next - s <= 31 * D && s % D == 0);
                assert_int_equal(users_period_start(QP_MONTH, day, next, &next2), next);
                s = users_period_start(QP_WEEK, day % 7 + 1, now, &next);
                assert_true(s <= now && now < next && next - s == 7 * D);
            }
        }
    }
}

/* limit lines with quota periods */
static void test_limit_parse_period(void **state)
{
    (void)state;
    struct user_limit l;
    char err[256];
    assert_int_equal(users_limit_parse("a quota=50G/month", &l, err, sizeof err), 0);
    assert_int_equal(l.quota, 50ULL << 30);
    assert_int_equal(l.quota_period, QP_MONTH);
    assert_int_equal(l.quota_day, 0); /* quota-reset-day, filled in by options_validate */
    assert_int_equal(users_limit_parse("a quota-day=28 quota=1M/month", &l, err, sizeof err), 0);
    assert_int_equal(l.quota_day, 28);
    assert_int_equal(users_limit_parse("a quota=1M/week", &l, err, sizeof err), 0);
    assert_int_equal(l.quota_period, QP_WEEK);
    assert_int_equal(l.quota_day, 1); /* Monday */
    assert_int_equal(users_limit_parse("a quota=1M/week quota-day=sun", &l, err, sizeof err), 0);
    assert_int_equal(l.quota_day, 7);
    assert_int_equal(users_limit_parse("a quota=1M/week quota-day=Friday", &l, err, sizeof err),
                     0);
    assert_int_equal(l.quota_day, 5);
    assert_int_equal(users_limit_parse("a quota=1M/week quota-day=3", &l, err, sizeof err), 0);
    assert_int_equal(l.quota_day, 3);
    assert_int_equal(users_limit_parse("a quota=1M/day conns=2", &l, err, sizeof err), 0);
    assert_int_equal(l.quota_period, QP_DAY);
    assert_int_equal(users_limit_parse("a quota=1M", &l, err, sizeof err), 0);
    assert_int_equal(l.quota_period, QP_LIFETIME);
    static const char *const bad[] = {
        "a quota=1M/year", "a quota=1M/", "a quota=/month", "a quota=1M/Month",
        "a quota=1M quota-day=3", "a quota=1M/day quota-day=3", "a quota-day=3",
        "a quota=1M/month quota-day=29", "a quota=1M/month quota-day=0",
        "a quota=1M/month quota-day=mon", "a quota=1M/week quota-day=8",
        "a quota=1M/week quota-day=fr", "a quota=1M/week quota-day=mondays",
        "a quota=1M/month quota-day=1x", "a quota=1M/month quota-day=-1",
        "a quota=1M/month quota-day=1 quota-day=2", "a quota=1M/week quota-day=mondaymondaymonday",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        if (users_limit_parse(bad[i], &l, err, sizeof err) == 0)
            fail_msg("accepted '%s'", bad[i]);
        assert_true(err[0]);
    }
    /* quota-reset-day is the default day of a monthly quota; a user's own day wins */
    static struct options o;
    static struct config_parser p;
    assert_int_equal(options_init(&p, &o), 0);
    static const char conf[] = "secret = a:00000000000000000000000000000011\n"
                               "secret = b:00000000000000000000000000000012\n"
                               "limit = a quota=1G/month\n"
                               "limit = b quota=1G/month quota-day=3\n"
                               "quota-reset-day = 15\n";
    assert_int_equal(config_load_buffer(&p, "t.conf", conf, sizeof conf - 1), 0);
    assert_int_equal(options_validate(&p, &o), 0);
    assert_int_equal(o.limits[0].quota_day, 15);
    assert_int_equal(o.limits[1].quota_day, 3);
    assert_int_equal(config_load_buffer(&p, "t.conf", "quota-reset-day = 29\n", 21), 1);
    options_free(&o);
}

/* Periodic quotas start over at the period's end; the state file keeps the period. */
static void test_quota_roll_and_state(void **state)
{
    (void)state;
    struct users u;
    assert_int_equal(users_init(&u, 1), 0);
    char err[128];
    /* a new line (period of 2027-01-01), a lifetime one, an old two-field one */
    assert_int_equal(users_state_apply(&u, "m 50 1798761600", err, sizeof err), 0);
    assert_int_equal(users_state_apply(&u, "l 70", err, sizeof err), 0);
    assert_int_equal(users_state_apply(&u, "o\t30", err, sizeof err), 0);
    /* the limits-store epoch after the period (kept, written back) */
    assert_int_equal(users_state_apply(&u, "e 40 0 3", err, sizeof err), 0);
    static const char *const bad[] = {"m 5 x", "m 5 6 7 8", "m 5 -6", "m 5 6x", "m 5 99999999999999",
                                      "m x 6", "m 5 6 x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (users_state_apply(&u, bad[i], err, sizeof err) == 0)
            fail_msg("accepted '%s'", bad[i]);
    struct user_limit lim[3] = {
        {.name = "m", .quota = 100, .quota_period = QP_MONTH, .quota_day = 1},
        {.name = "l", .quota = 100},
        {.name = "o", .quota = 100, .quota_period = QP_MONTH, .quota_day = 1},
    };
    uint32_t m = (uint32_t)users_find(&u, "m"), o = (uint32_t)users_find(&u, "o");
    /* in the same month: nothing starts over; the old line's bytes are this month's */
    assert_int_equal(users_quota_roll(&u, lim, 3, 1800403200), 0); /* 2027-01-20 */
    char *buf = NULL;
    size_t cap = 0;
    assert_true(users_state_format(&u, &buf, &cap) > 0);
    assert_string_equal(buf, "quota-used = m 50 1798761600\nquota-used = l 70\n"
                             "quota-used = o 30 1798761600\nquota-used = e 40 0 3\n");
    /* the round trip: the same lines read back give the same lines */
    struct users v;
    assert_int_equal(users_init(&v, 1), 0);
    for (char *line = buf; *line;) {
        char *nl = strchr(line, '\n');
        *nl = 0;
        assert_int_equal(users_state_apply(&v, line + strlen("quota-used = "), err, sizeof err),
                         0);
        line = nl + 1;
    }
    char *buf2 = NULL;
    size_t cap2 = 0;
    users_state_format(&v, &buf2, &cap2);
    assert_string_equal(buf2, "quota-used = m 50 1798761600\nquota-used = l 70\n"
                              "quota-used = o 30 1798761600\nquota-used = e 40 0 3\n");
    /* m used up: refused until February */
    struct sock_addr a = addr4("127.0.0.1");
    assert_int_equal(users_charge(&u, m, 100, 50), 1);
    assert_int_equal(users_admit(&u, m, &lim[0], &a, 1801439999, 60), UR_QUOTA);
    assert_int_equal(users_quota_roll(&u, lim, 3, 1801439999), 0); /* 2027-01-31 23:59:59 */
    assert_int_equal(users_quota_roll(&u, lim, 3, 1801440000), 2); /* 2027-02-01 00:00:00 */
    assert_int_equal(users_admit(&u, m, &lim[0], &a, 1801440000, 60), -1);
    users_release(&u, m, &a, 1801440000);
    struct user_totals t;
    users_stats_sum(&u, m, &t);
    assert_int_equal(t.quota_used, 0);
    users_stats_sum(&u, o, &t);
    assert_int_equal(t.quota_used, 0);
    users_stats_sum(&u, (uint32_t)users_find(&u, "l"), &t);
    assert_int_equal(t.quota_used, 70); /* lifetime: kept */
    assert_int_equal(users_quota_roll(&u, lim, 3, 1801440005), 0); /* once per period */
    users_charge(&u, m, 100, 10);
    /* the clock back into January: the bytes stay */
    assert_int_equal(users_quota_roll(&u, lim, 3, 1801439000), 0);
    users_stats_sum(&u, m, &t);
    assert_int_equal(t.quota_used, 10);
    free(buf);
    free(buf2);
    users_destroy(&v);
    users_destroy(&u);
}

/* `disabled` in a limit line: parsed (a bare word, once), refused first at admission;
 * users_quota_reset: served again at once, and the state file must be rewritten. */
static void test_disabled_and_quota_reset(void **state)
{
    (void)state;
    struct user_limit l;
    char err[256];
    assert_int_equal(users_limit_parse("a disabled", &l, err, sizeof err), 0);
    assert_int_equal(l.disabled, 1);
    assert_int_equal(users_limit_parse("a conns=2 disabled quota=1k", &l, err, sizeof err), 0);
    assert_true(l.disabled && l.conns == 2 && l.quota == 1024);
    assert_int_equal(users_limit_parse("a conns=2", &l, err, sizeof err), 0);
    assert_int_equal(l.disabled, 0);
    assert_int_equal(users_limit_parse("a disabled disabled", &l, err, sizeof err), -1);
    assert_non_null(strstr(err, "twice"));
    assert_int_equal(users_limit_parse("a disabled=yes", &l, err, sizeof err), -1);
    assert_int_equal(users_limit_parse("a disable", &l, err, sizeof err), -1);
    assert_string_equal(users_refusal_name(UR_DISABLED), "disabled");

    struct users u;
    assert_int_equal(users_init(&u, 1), 0);
    uint32_t id = (uint32_t)users_intern(&u, "a");
    struct sock_addr a = addr4("127.0.0.1");
    l = (struct user_limit){.quota = 1000, .disabled = 1};
    assert_int_equal(users_admit(&u, id, &l, &a, 100, 60), UR_DISABLED);
    l.disabled = 0;
    assert_int_equal(users_charge(&u, id, l.quota, 1000), 1);
    assert_int_equal(users_admit(&u, id, &l, &a, 100, 60), UR_QUOTA);
    uint32_t resets = u.resets;
    assert_int_equal(users_quota_reset(&u, id), 1000);
    assert_int_equal(u.resets, resets + 1);
    assert_int_equal(users_admit(&u, id, &l, &a, 100, 60), -1);
    users_release(&u, id, &a, 100);
    char *buf = NULL;
    size_t cap = 0;
    assert_int_equal(users_state_format(&u, &buf, &cap), 0); /* no line left */
    free(buf);
    users_destroy(&u);
}

/* limits-store's fleet counts at admission (proxy/lstore.h folds them in). */
static void test_fleet_counts_in_admit(void **state)
{
    (void)state;
    struct users u;
    assert_int_equal(users_init(&u, 1), 0);
    uint32_t id = (uint32_t)users_intern(&u, "a");
    struct user_shared *s = users_shared(&u, id);
    struct sock_addr a1 = addr4("127.0.0.1"), a2 = addr4("127.0.0.2");
    /* conns: another instance's live connection folded into active takes a slot */
    struct user_limit l = {.conns = 2};
    atomic_fetch_add(&s->active, 1);
    assert_int_equal(users_admit(&u, id, &l, &a1, 100, 60), -1);
    assert_int_equal(users_admit(&u, id, &l, &a1, 100, 60), UR_CONNS);
    atomic_fetch_sub(&s->active, 1);
    assert_int_equal(users_admit(&u, id, &l, &a1, 100, 60), -1);
    users_release(&u, id, &a1, 100);
    users_release(&u, id, &a1, 100);
    /* ips: the other instances' addresses count against the limit; one already here is
     * admitted again */
    l = (struct user_limit){.ips = 2};
    atomic_store(&s->fleet_ips, 1);
    assert_int_equal(users_admit(&u, id, &l, &a1, 200, 60), -1);
    assert_int_equal(users_admit(&u, id, &l, &a2, 200, 60), UR_IPS);
    assert_int_equal(users_admit(&u, id, &l, &a1, 200, 60), -1);
    assert_int_equal(users_ips_recent(&u, id, 200, 60), 1);
    users_release(&u, id, &a1, 200);
    users_release(&u, id, &a1, 200);
    assert_int_equal(users_ips_recent(&u, id, 200, 60), 1);   /* within the window */
    assert_int_equal(users_ips_recent(&u, id, 1000, 60), 0);  /* past it */
    atomic_store(&s->fleet_ips, 0);
    /* the store down with fail closed: users with limits are refused, others are not */
    atomic_store(&u.fleet_refuse, 1);
    l = (struct user_limit){.quota = 1000};
    assert_int_equal(users_admit(&u, id, &l, &a1, 300, 60), UR_STORE);
    l = (struct user_limit){.rate = 1000};
    assert_int_equal(users_admit(&u, id, &l, &a1, 300, 60), -1);
    users_release(&u, id, &a1, 300);
    assert_int_equal(users_admit(&u, id, NULL, &a1, 300, 60), -1);
    users_release(&u, id, &a1, 300);
    assert_string_equal(users_refusal_name(UR_STORE), "store");
    /* the quota is checked against used, which the flush sets to the fleet total */
    atomic_store(&u.fleet_refuse, 0);
    l = (struct user_limit){.quota = 1000};
    shared64_store(&s->used, 999);
    assert_int_equal(users_charge(&u, id, l.quota, 1), 1);
    assert_int_equal(users_admit(&u, id, &l, &a1, 400, 60), UR_QUOTA);
    users_destroy(&u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_10000), cmocka_unit_test(test_options_10000_secrets),
        cmocka_unit_test(test_limit_parse),   cmocka_unit_test(test_admit),
        cmocka_unit_test(test_rate),          cmocka_unit_test(test_quota_period),
        cmocka_unit_test(test_limit_parse_period), cmocka_unit_test(test_quota_roll_and_state),
        cmocka_unit_test(test_disabled_and_quota_reset),
        cmocka_unit_test(test_fleet_counts_in_admit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
