/* test_rstore.c: the replay store's reply path without a socket: verdicts, limits, log text. */
#include "users/rstore.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static int parse(const char *bytes, enum rstore_verdict *v, size_t cap, char *text, size_t tl)
{
    return rstore_parse_replies(bytes, strlen(bytes), v, cap, text, tl);
}

static void test_replies(void **state)
{
    (void)state;
    enum rstore_verdict v[8];
    char text[64];
    if (parse("+OK\r\n", v, 8, text, sizeof text) < 0)
        skip(); /* built without hiredis: no reply path */
    assert_int_equal(parse("+OK\r\n$-1\r\n-ERR boom\r\n", v, 8, text, sizeof text), 3);
    assert_int_equal(v[0], RSTORE_NEW);
    assert_int_equal(v[1], RSTORE_SEEN);
    assert_int_equal(v[2], RSTORE_FAILED);
    assert_string_equal(text, "ERR boom");
    /* what is no answer to SET NX fails (the policy replay-store-fail decides), not "new" */
    assert_int_equal(parse(":1\r\n+QUEUED\r\n$2\r\nOK\r\n*1\r\n+OK\r\n", v, 8, NULL, 0), 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(v[i], RSTORE_FAILED);
    /* a reply cut short is not one yet; past cap replies are counted, not stored */
    assert_int_equal(parse("+OK\r\n+O", v, 8, NULL, 0), 1);
    assert_int_equal(parse("+OK\r\n+OK\r\n+OK\r\n", v, 1, NULL, 0), 3);
}

static void test_hostile_replies(void **state)
{
    (void)state;
    enum rstore_verdict v[4];
    char text[16];
    if (parse("+OK\r\n", v, 4, NULL, 0) < 0)
        skip();
    /* an array count the store has no reason to send: refused before any allocation */
    assert_int_equal(parse("*2147483647\r\n", v, 4, NULL, 0), -1);
    assert_int_equal(parse("*17\r\n", v, 4, NULL, 0), -1);
    assert_int_equal(parse("*-5\r\n", v, 4, NULL, 0), -1);
    assert_int_equal(parse("?what\r\n", v, 4, NULL, 0), -1);
    /* the store's text reaches a log line printable and bounded */
    assert_int_equal(parse("-ERR a\x1b[31m\tb and a long tail\r\n", v, 4, text, sizeof text), 1);
    assert_string_equal(text, "ERR a?[31m?b an");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replies),
        cmocka_unit_test(test_hostile_replies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
