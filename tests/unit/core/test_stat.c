/* test_stat.c: the 32-bit counter representation (lo + two high words): carries, borrows, torn reads. */
#define MTPROXY_STAT_SPLIT 1 /* the representation 32-bit targets use, tested on any host */
#include "core/stat.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static void test_split_is_used(void **state)
{
    (void)state;
    assert_int_equal(MTPROXY_STAT_IS_SPLIT, 1);
    assert_int_equal(sizeof(stat_t), 12);
}

static void test_carry_and_borrow(void **state)
{
    (void)state;
    stat_t s;
    memset(&s, 0, sizeof s);
    assert_true(STAT_GET(&s) == 0);
    STAT_ADD(&s, 0xfffffffeu);
    STAT_INC(&s);
    assert_true(STAT_GET(&s) == 0xffffffffu);
    STAT_INC(&s); /* carry into the high word */
    assert_true(STAT_GET(&s) == 0x100000000ull);
    STAT_DEC(&s); /* borrow back */
    assert_true(STAT_GET(&s) == 0xffffffffu);
    STAT_ADD(&s, 0x500000001ull);
    assert_true(STAT_GET(&s) == 0x600000000ull);
    stat_t arr[3] = {0};
    STAT_INC(&arr[1]);
    assert_true(STAT_GET(&arr[0]) == 0 && STAT_GET(&arr[1]) == 1 && STAT_GET(&arr[2]) == 0);
}

/* The owner adds STEP (which changes the high word every few additions) while this thread
 * reads: every value read must be a multiple of STEP (a torn read mixing two high words is
 * not) and never smaller than the one before. */
enum { ROUNDS = 20000000 };
#define STEP 0x40000001ull
static stat_t shared;
static atomic_int writer_done, reader_ready;

static void *writer(void *arg)
{
    (void)arg;
    while (!atomic_load(&reader_ready))
        ;
    for (int i = 0; i < ROUNDS; i++)
        STAT_ADD(&shared, STEP);
    atomic_store(&writer_done, 1);
    return NULL;
}

static void test_concurrent_reads_are_consistent(void **state)
{
    (void)state;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, writer, NULL), 0);
    uint64_t prev = 0, reads = 0, bad = 0, backwards = 0;
    atomic_store(&reader_ready, 1);
    while (!atomic_load(&writer_done)) {
        uint64_t v = STAT_GET(&shared);
        bad += v % STEP != 0;
        backwards += v < prev;
        prev = v;
        reads++;
    }
    pthread_join(t, NULL);
    assert_int_equal(bad, 0);
    assert_int_equal(backwards, 0);
    assert_true(STAT_GET(&shared) == STEP * ROUNDS);
    assert_true(reads > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_is_used),
        cmocka_unit_test(test_carry_and_borrow),
        cmocka_unit_test(test_concurrent_reads_are_consistent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
