/* test_preflight.c: the file-descriptor budget start-up fits max-connections to and doctor reports (dc-pool sockets, ME links), the worker count. */
#include "config/preflight.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cmocka.h>

#include "conn/conn.h"
#include "upstream/middle.h"

static char sec_a[] = "a:00112233445566778899aabbccddeef1";

/* Options from `--key value` arguments (checked: no errors). */
static struct options *opts(int argc, char **argv)
{
    static struct config_parser p;
    struct options *o = calloc(1, sizeof *o);
    assert_non_null(o);
    memset(&p, 0, sizeof p);
    options_init(&p, o);
    config_load_args(&p, argc, argv);
    options_validate(&p, o);
    if (p.errors.count)
        fail_msg("%s", p.errors.msg[0]);
    return o;
}

static void done(struct options *o)
{
    options_free(o);
    free(o);
}

/* Per worker: listeners, epoll + eventfd + the accept spare (5 with one listener), two per
 * splice pipe; plus 32. */
#define BASE(w) ((long long)(w) * (1 + 5 + 2 * PROXY_PIPES_PER_WORKER) + 32)

static void test_direct(void **state)
{
    (void)state;
    char *a[] = {"--listen", "127.0.0.1:9443", "--secret", sec_a, "--workers", "3",
                 "--max-connections", "1000", "--dc-pool", "0", "--mask", "off"};
    struct options *o = opts(12, a);
    struct preflight_fds b;
    preflight_fds(o, preflight_workers(o), NULL, RLIM_INFINITY, &b);
    assert_int_equal(preflight_workers(o), 3);
    assert_int_equal(b.reserve, BASE(3));
    assert_int_equal(b.need, 2000 + BASE(3));
    assert_true(b.fits);
    /* a limit it does not fit: the max-connections it holds */
    preflight_fds(o, 3, NULL, (unsigned long long)BASE(3) + 801, &b);
    assert_false(b.fits);
    assert_int_equal(b.fit, 400);
    preflight_fds(o, 3, NULL, 10, &b); /* not even the reserve */
    assert_false(b.fits);
    assert_int_equal(b.fit, 0);
    done(o);
}

/* dc-pool: idle pre-connected sockets per worker per DC id (the built-in table's 6 ids and
 * those of dc lines). */
static void test_dc_pool(void **state)
{
    (void)state;
    char *a[] = {"--listen", "127.0.0.1:9443", "--secret", sec_a, "--workers", "2",
                 "--max-connections", "1000", "--dc-pool", "4", "--mask", "off"};
    struct options *o = opts(12, a);
    struct preflight_fds b;
    preflight_fds(o, 2, NULL, RLIM_INFINITY, &b);
    assert_int_equal(b.reserve, BASE(2) + 2 * 4 * 6);
    assert_int_equal(b.need, 2000 + BASE(2) + 2 * 4 * 6);
    done(o);
    char *c[] = {"--listen", "127.0.0.1:9443", "--secret", sec_a, "--dc-pool", "3",
                 "--dc-builtin", "off", "--dc", "2 127.0.0.1:1", "--dc", "2 127.0.0.1:2",
                 "--dc", "4 127.0.0.1:3", "--mask", "off"};
    o = opts(16, c);
    preflight_fds(o, 1, NULL, RLIM_INFINITY, &b);
    assert_int_equal(b.reserve, BASE(1) + 3 * 2); /* two ids */
    done(o);
}

/* Middle mode: me-pool links per worker per ME address, twice (a reload's new set while the
 * old one drains). */
static void test_middle(void **state)
{
    (void)state;
    char *a[] = {"--listen", "127.0.0.1:9443", "--secret", sec_a, "--ad-tag",
                 "0123456789abcdef0123456789abcdef", "--me-pool", "3", "--dc-pool", "0",
                 "--mask", "off", "--proxy-secret-file", "/nonexistent/s",
                 "--proxy-config-file", "/nonexistent/c"};
    struct options *o = opts(16, a);
    struct me_table *me = calloc(1, sizeof *me);
    assert_non_null(me);
    me->naddrs = 5;
    struct preflight_fds b;
    preflight_fds(o, 2, me, RLIM_INFINITY, &b);
    assert_int_equal(b.reserve, BASE(2) + 2 * 2 * 3 * 5);
    preflight_fds(o, 2, NULL, RLIM_INFINITY, &b); /* before the table is known */
    assert_int_equal(b.reserve, BASE(2));
    free(me);
    done(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_direct),
        cmocka_unit_test(test_dc_pool),
        cmocka_unit_test(test_middle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
