/* test_shared64.c: the lock representation of core/shared64.h (the one 32-bit targets use),
 * forced on here so that it is tested on every build host. */
#define MTPROXY_SHARED64_LOCK 1
#include "core/shared64.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#define THREADS 4
#define ROUNDS 200000

static void test_is_the_lock_form(void **state)
{
    (void)state;
    assert_int_equal(MTPROXY_SHARED64_IS_LOCK, 1);
}

static void test_ops_across_the_32_bit_boundary(void **state)
{
    (void)state;
    shared64 v = {0};
    assert_true(shared64_load(&v) == 0);
    shared64_store(&v, 0xfffffffeull);
    assert_true(shared64_fetch_add(&v, 3) == 0xfffffffeull);
    assert_true(shared64_load(&v) == 0x100000001ull);
    uint64_t exp = 5;
    assert_false(shared64_cas(&v, &exp, 7));
    assert_true(exp == 0x100000001ull);
    assert_true(shared64_cas(&v, &exp, 0x123456789abcdefull));
    assert_true(shared64_load(&v) == 0x123456789abcdefull);
}

static shared64 counter, clock_;

static void *hammer(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        shared64_fetch_add(&counter, 0x100000001ull); /* carries into the high word */
        uint64_t old = shared64_load(&clock_), nt;
        do
            nt = old + 1;
        while (!shared64_cas(&clock_, &old, nt));
    }
    return NULL;
}

/* Increments from several threads are never lost (a torn or unlocked update would lose some). */
static void test_no_lost_updates(void **state)
{
    (void)state;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, hammer, NULL), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    assert_true(shared64_load(&counter) == (uint64_t)THREADS * ROUNDS * 0x100000001ull);
    assert_true(shared64_load(&clock_) == (uint64_t)THREADS * ROUNDS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_is_the_lock_form),
        cmocka_unit_test(test_ops_across_the_32_bit_boundary),
        cmocka_unit_test(test_no_lost_updates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
