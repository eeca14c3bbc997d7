/* test_sbuf.c: the growable text buffer: appends, printf growth, the cap, failure stickiness. */
#include "core/sbuf.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static void test_grow(void **state)
{
    struct sbuf b = {0};
    assert_int_equal(sbuf_add(&b, "ab", 2), 0);
    for (int i = 0; i < 10000; i++)
        assert_int_equal(sbuf_printf(&b, "%05d,", i), 0);
    assert_int_equal(b.len, 2 + 6 * 10000);
    assert_memory_equal(b.p, "ab00000,00001,", 14);
    assert_string_equal(b.p + b.len - 6, "09999,");
    assert_int_equal(b.failed, 0);
    sbuf_free(&b);
    assert_null(b.p);
    assert_int_equal(b.len, 0);
}

static void test_cap(void **state)
{
    struct sbuf b = {.max = 100};
    char big[64];
    memset(big, 'x', sizeof big);
    assert_int_equal(sbuf_add(&b, big, 64), 0);
    assert_int_equal(sbuf_add(&b, big, 36), 0); /* exactly max */
    assert_int_equal(b.len, 100);
    assert_int_equal(sbuf_add(&b, "y", 1), -1);
    assert_int_equal(b.failed, 1);
    assert_int_equal(sbuf_printf(&b, "%d", 1), -1); /* sticky */
    assert_int_equal(b.len, 100);
    sbuf_free(&b);
    assert_int_equal(b.max, 100);
    assert_int_equal(sbuf_printf(&b, "%s", "fresh"), 0);
    assert_string_equal(b.p, "fresh");
    assert_int_equal(sbuf_printf(&b, "%0200d", 7), -1); /* over the cap in one go */
    sbuf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_grow), cmocka_unit_test(test_cap)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
