/* test_dc.c: the DC table: built-ins, dc-line overrides, address family order, id lookup. */
#include "upstream/dc.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "loopback_guard.h"

static struct options O;
static struct config_parser P;
static struct dc_table T;

/* Options from config text (must be clean), then the table built from them. */
static void build(const char *text) {
    assert_int_equal(options_init(&P, &O), 0);
    assert_int_equal(config_load_buffer(&P, "dc.conf", text, strlen(text)), 0);
    assert_int_equal(dc_table_build(&T, &O), 0);
}

/* The addresses used for a client's dc id, as "ADDR,ADDR,..."; *resolved gets the id. */
static const char *lookup(int id, int *resolved) {
    static char out[1024];
    int first = -1;
    int n = dc_lookup(&T, id, &first, resolved);
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        char a[SOCK_ADDR_STRLEN];
        assert_int_equal(T.e[first + i].id, *resolved); /* entries of one id are contiguous */
        sock_addr_format(&T.e[first + i].addr, a, sizeof a);
        snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? "," : "", a);
    }
    return out;
}

static int count_id(int id) {
    int n = 0;
    for (int i = 0; i < T.n; i++)
        n += T.e[i].id == id;
    return n;
}

static void test_builtin(void **state) {
    (void)state;
    build("");
    int r;
    static const int ids[] = {1, 2, 3, 4, 5, 203};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        const char *s = lookup(ids[i], &r);
        assert_int_equal(r, ids[i]);
        assert_true(strlen(s) > 0);
        assert_true(s[0] != '[');        /* IPv4 first by default */
        assert_non_null(strchr(s, '[')); /* and IPv6 after it */
    }
    assert_string_equal(lookup(2, &r), "149.154.167.51:443,95.161.76.100:443,"
                                       "[2001:67c:4e8:f002::a]:443");
    assert_string_equal(lookup(1, &r), "149.154.175.50:443,[2001:b28:f23d:f001::a]:443");
}

/* The built-in table holds Telegram's real addresses; this test binary (like every unit
 * test) must never dial them. connect() on a descriptor that is not open: with the guard it
 * fails EACCES before the kernel sees anything; without it the kernel says EBADF, and still
 * nothing is sent. A loopback address passes through to the kernel (EBADF). */
static void test_builtin_never_dialed(void **state) {
    (void)state;
    build("");
    assert_true(T.n >= 6);
    for (int i = 0; i < T.n; i++) {
        assert_false(loopback_guard_allows(&T.e[i].addr.u.sa, T.e[i].addr.len));
        errno = 0;
        assert_int_equal(connect(-1, &T.e[i].addr.u.sa, T.e[i].addr.len), -1);
        assert_int_equal(errno, EACCES);
    }
    build("dc-builtin = off\ndc = 2 127.0.0.1:1\ndc = 2 [::1]:1\ndc = 3 127.1.2.3:1\n");
    for (int i = 0; i < T.n; i++) {
        assert_true(loopback_guard_allows(&T.e[i].addr.u.sa, T.e[i].addr.len));
        errno = 0;
        assert_int_equal(connect(-1, &T.e[i].addr.u.sa, T.e[i].addr.len), -1);
        assert_int_equal(errno, EBADF);
    }
}

static void test_prefer_ipv6_and_only_ipv4(void **state) {
    (void)state;
    int r;
    build("prefer-ipv6 = on\n");
    assert_string_equal(lookup(2, &r), "[2001:67c:4e8:f002::a]:443,149.154.167.51:443,"
                                       "95.161.76.100:443");
    build("only-ipv4 = on\n");
    for (int i = 0; i < T.n; i++)
        assert_int_equal(T.e[i].addr.u.sa.sa_family, AF_INET);
    assert_string_equal(lookup(2, &r), "149.154.167.51:443,95.161.76.100:443");
    /* only-ipv4 also drops configured IPv6 lines */
    build("only-ipv4 = on\ndc = 7 [::1]:1\ndc = 7 127.0.0.1:2\n");
    assert_string_equal(lookup(7, &r), "127.0.0.1:2");
}

static void test_dc_line_replaces_builtin(void **state) {
    (void)state;
    int r;
    build("dc = 2 127.0.0.1:9002\n");
    assert_string_equal(lookup(2, &r), "127.0.0.1:9002"); /* none of DC 2's built-ins */
    assert_int_equal(count_id(2), 1);
    assert_int_equal(r, 2);
    assert_string_equal(lookup(1, &r), "149.154.175.50:443,[2001:b28:f23d:f001::a]:443");
    assert_int_equal(count_id(203), 2); /* other ids keep theirs */
}

static void test_builtin_off(void **state) {
    (void)state;
    int r;
    build("dc-builtin = off\ndc = 3 127.0.0.1:3\ndefault-dc = 3\n");
    assert_int_equal(T.n, 1);
    assert_string_equal(lookup(3, &r), "127.0.0.1:3");
    assert_string_equal(lookup(1, &r), "127.0.0.1:3"); /* unknown here: the default dc */
    assert_int_equal(r, 3);
}

static void test_order_within_and_across_ids(void **state) {
    (void)state;
    int r;
    build("dc-builtin = off\n"
          "dc = 2 [::1]:21\n"
          "dc = 3 127.0.0.1:31\n"
          "dc = 2 127.0.0.1:22\n"
          "dc = 2 127.0.0.2:23\n"
          "dc = 3 [::1]:32\n"
          "dc = 2 [::2]:24\n");
    /* groups stay together; IPv4 before IPv6; configured order inside a family */
    assert_string_equal(lookup(2, &r), "127.0.0.1:22,127.0.0.2:23,[::1]:21,[::2]:24");
    assert_string_equal(lookup(3, &r), "127.0.0.1:31,[::1]:32");
    build("dc-builtin = off\nprefer-ipv6 = yes\n"
          "dc = 2 [::1]:21\n"
          "dc = 3 127.0.0.1:31\n"
          "dc = 2 127.0.0.1:22\n"
          "dc = 2 127.0.0.2:23\n"
          "dc = 2 [::2]:24\n");
    assert_string_equal(lookup(2, &r), "[::1]:21,[::2]:24,127.0.0.1:22,127.0.0.2:23");
    assert_string_equal(lookup(3, &r), "127.0.0.1:31");
}

static void test_negative_and_unknown_ids(void **state) {
    (void)state;
    int r;
    build("dc-builtin = off\ndefault-dc = 2\n"
          "dc = 2 127.0.0.1:2\n"
          "dc = 4 127.0.0.1:4\n"
          "dc = -4 127.0.0.1:904\n"
          "dc = 203 127.0.0.1:203\n");
    assert_string_equal(lookup(-4, &r), "127.0.0.1:904"); /* a configured media id is used */
    assert_int_equal(r, -4);
    assert_string_equal(lookup(-2, &r), "127.0.0.1:2"); /* else |id| */
    assert_int_equal(r, 2);
    assert_string_equal(lookup(-203, &r), "127.0.0.1:203");
    assert_int_equal(r, 203);
    assert_string_equal(lookup(9, &r), "127.0.0.1:2"); /* unknown: the default dc */
    assert_int_equal(r, 2);
    assert_string_equal(lookup(0, &r), "127.0.0.1:2");
    assert_string_equal(lookup(-9, &r), "127.0.0.1:2");
    assert_string_equal(lookup(-32768, &r), "127.0.0.1:2"); /* |id| does not overflow */
    assert_string_equal(lookup(32767, &r), "127.0.0.1:2");
}

static void test_default_without_addresses(void **state) {
    (void)state;
    int r, first = -1;
    build("dc-builtin = off\ndefault-dc = 5\ndc = 2 127.0.0.1:2\n");
    assert_int_equal(dc_lookup(&T, 9, &first, &r), 0);
    assert_int_equal(r, 5);
}

static void test_full_table(void **state) {
    (void)state;
    /* the most dc lines plus every built-in still fit, and groups stay contiguous */
    assert_int_equal(options_init(&P, &O), 0);
    char line[64];
    for (int i = 0; i < OPT_MAX_DC_ADDRS; i++) {
        snprintf(line, sizeof line, "%d 127.0.0.1:%d", 10 + i % 7, 1000 + i);
        assert_int_equal(config_set(&P, "dc", line, CFG_FROM_FILE, "x"), 0);
    }
    assert_int_equal(dc_table_build(&T, &O), 0);
    assert_true(T.n > OPT_MAX_DC_ADDRS);
    assert_true(T.n <= DC_MAX_ADDRS);
    int r;
    for (int id = 10; id < 17; id++) {
        lookup(id, &r);
        assert_int_equal(r, id);
        assert_int_equal(count_id(id), (OPT_MAX_DC_ADDRS + 16 - id) / 7);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin),
        cmocka_unit_test(test_builtin_never_dialed),
        cmocka_unit_test(test_prefer_ipv6_and_only_ipv4),
        cmocka_unit_test(test_dc_line_replaces_builtin),
        cmocka_unit_test(test_builtin_off),
        cmocka_unit_test(test_order_within_and_across_ids),
        cmocka_unit_test(test_negative_and_unknown_ids),
        cmocka_unit_test(test_default_without_addresses),
        cmocka_unit_test(test_full_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
