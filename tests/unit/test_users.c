/* test_users.c: users registry at scale, per-worker counters summed, limit parser, limit checks. */
#include "proxy/users.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/sock.h"
#include "proxy/options.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_10000), cmocka_unit_test(test_options_10000_secrets),
        cmocka_unit_test(test_limit_parse),   cmocka_unit_test(test_admit),
        cmocka_unit_test(test_rate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
