/* test_ipcount.c: per-address connection counts against a model, IPv4 and IPv6, table full. */
#include "core/ipcount.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

static struct sockaddr_storage nth(unsigned i)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (i & 1) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(0x0a000000u + i);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr.s6_addr[0] = 0x20;
        memcpy(&a->sin6_addr.s6_addr[12], &i, 4);
    }
    return ss;
}

static void test_model(void **state)
{
    (void)state;
    enum { ADDRS = 500, OPS = 200000 };
    struct ipcount m;
    assert_int_equal(ipcount_init(&m, ADDRS), 0);
    uint32_t *model = calloc(ADDRS, sizeof *model);
    uint64_t r = 88172645463325252ull;
    for (int op = 0; op < OPS; op++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        unsigned i = (unsigned)(r % ADDRS);
        struct sockaddr_storage ss = nth(i);
        if ((r >> 32) % 3 != 0 || model[i] == 0) {
            assert_int_equal(ipcount_add(&m, (struct sockaddr *)&ss), ++model[i]);
        } else {
            ipcount_del(&m, (struct sockaddr *)&ss);
            model[i]--;
        }
        if (op % 997 == 0)
            for (unsigned k = 0; k < ADDRS; k++) {
                struct sockaddr_storage s2 = nth(k);
                assert_int_equal(ipcount_get(&m, (struct sockaddr *)&s2), model[k]);
            }
    }
    free(model);
    ipcount_free(&m);
}

static void test_v4_mapped_is_v4_and_full_table(void **state)
{
    (void)state;
    struct ipcount m;
    assert_int_equal(ipcount_init(&m, 4), 0); /* 16 slots: up to 8 addresses */
    struct sockaddr_storage a = sockaddr_of("192.0.2.1"), b = sockaddr_of("::ffff:192.0.2.1");
    assert_int_equal(ipcount_add(&m, (struct sockaddr *)&a), 1);
    assert_int_equal(ipcount_add(&m, (struct sockaddr *)&b), 2);
    unsigned counted = 1;
    for (unsigned i = 0; i < 20; i++) {
        struct sockaddr_storage s = nth(i);
        counted += ipcount_add(&m, (struct sockaddr *)&s) != 0;
    }
    assert_int_equal(counted, 8);
    /* an address already present still counts when the table is full */
    assert_int_equal(ipcount_add(&m, (struct sockaddr *)&a), 3);
    ipcount_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model),
        cmocka_unit_test(test_v4_mapped_is_v4_and_full_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
