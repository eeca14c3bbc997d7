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

/* The keys an outsider can aim: every address of an IPv4 /16 (which holds every /24), or an
 * IPv6 /64 varying its last 16 bits, 30,000 of them. With a hash keyed over all 16 bytes they
 * spread like random keys; the old one put all of them on one home slot (one probe run of
 * 30,000: 26 us per add or delete). Fails when one run of occupied slots (what a lookup may
 * walk) holds more than 3% of them; random keys at this load give runs of a few dozen. */
enum { COLLIDE_KEYS = 30000, COLLIDE_MAX_RUN = COLLIDE_KEYS * 3 / 100 };

static struct sockaddr_storage aimed(int v6, unsigned i)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        inet_pton(AF_INET6, "2001:db8:7:9::", &a->sin6_addr);
        a->sin6_addr.s6_addr[14] = (uint8_t)(i >> 8);
        a->sin6_addr.s6_addr[15] = (uint8_t)i;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(0xc6120000u | (i & 0xffff)); /* 198.18.0.0/16 */
    }
    return ss;
}

/* The longest run of occupied slots (cyclic). */
static size_t longest_run(const struct ipcount *m)
{
    size_t cap = m->mask + 1, best = 0, run = 0, start = 0;
    while (start < cap && m->t[start].n) /* begin after an empty slot: runs may wrap */
        start++;
    for (size_t k = 1; k <= cap; k++) {
        if (m->t[(start + k) & m->mask].n) {
            if (++run > best)
                best = run;
        } else {
            run = 0;
        }
    }
    return best;
}

static void check_spread(int v6)
{
    struct ipcount m;
    assert_int_equal(ipcount_init(&m, COLLIDE_KEYS), 0);
    for (unsigned i = 0; i < COLLIDE_KEYS; i++) {
        struct sockaddr_storage ss = aimed(v6, i);
        assert_int_equal(ipcount_add(&m, (struct sockaddr *)&ss), 1);
    }
    size_t run = longest_run(&m);
    print_message("%s: %d aimed keys, longest probe run %zu slots (limit %d)\n",
                  v6 ? "IPv6 /64" : "IPv4 /16", COLLIDE_KEYS, run, COLLIDE_MAX_RUN);
    assert_true(run <= COLLIDE_MAX_RUN);
    for (unsigned i = 0; i < COLLIDE_KEYS; i++) {
        struct sockaddr_storage ss = aimed(v6, i);
        assert_int_equal(ipcount_get(&m, (struct sockaddr *)&ss), 1);
        ipcount_del(&m, (struct sockaddr *)&ss);
    }
    assert_int_equal(m.used, 0);
    assert_int_equal(longest_run(&m), 0);
    ipcount_free(&m);
}

static void test_aimed_v4_spread(void **state)
{
    (void)state;
    check_spread(0);
}

static void test_aimed_v6_spread(void **state)
{
    (void)state;
    check_spread(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model),
        cmocka_unit_test(test_v4_mapped_is_v4_and_full_table),
        cmocka_unit_test(test_aimed_v4_spread),
        cmocka_unit_test(test_aimed_v6_spread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
