/* test_arena.c: slab data blocks (LIFO, cap, unmap past the reserve, peak) and the object pool. */
#include "core/arena.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* --- blocks ----------------------------------------------------------------------------- */

static void test_init_allocates_nothing(void **state) {
    (void)state;
    struct arena a;
    arena_init(&a, 4096, 0, 0);
    assert_int_equal(a.allocated, 0);
    assert_int_equal(a.in_use, 0);
    assert_null(a.partial);
    assert_null(a.full);
    assert_false(arena_exhausted(&a));
    arena_put(&a, NULL); /* harmless */
    arena_destroy(&a);
}

static void test_get_is_usable_and_reset(void **state) {
    (void)state;
    struct arena a;
    arena_init(&a, 1000, 0, 0);
    struct arena_block *b = arena_get(&a);
    assert_non_null(b);
    assert_int_equal(b->start, 0);
    assert_int_equal(b->end, 0);
    assert_null(b->next);
    memset(b->data, 0xab, 1000); /* every usable byte is writable */
    b->start = 3;
    b->end = 900;
    assert_int_equal(a.allocated, ARENA_SLAB_BLOCKS);
    assert_int_equal(a.in_use, 1);
    arena_put(&a, b);
    struct arena_block *c = arena_get(&a);
    assert_ptr_equal(c, b); /* LIFO: the block just given back comes out first */
    assert_int_equal(c->start, 0);
    assert_int_equal(c->end, 0);
    arena_put(&a, c);
    arena_destroy(&a);
}

static void test_blocks_distinct_and_aligned(void **state) {
    (void)state;
    struct arena a;
    arena_init(&a, 100, 0, 0);
    struct arena_block *b[3 * ARENA_SLAB_BLOCKS];
    for (size_t i = 0; i < 3 * ARENA_SLAB_BLOCKS; i++) {
        b[i] = arena_get(&a);
        assert_non_null(b[i]);
        assert_int_equal((uintptr_t)b[i] % 64, 0);
        memset(b[i]->data, (int)i, 100);
    }
    for (size_t i = 0; i < 3 * ARENA_SLAB_BLOCKS; i++)
        for (size_t j = 0; j < 100; j++)
            assert_int_equal(b[i]->data[j], (uint8_t)i); /* no block overlaps another */
    assert_int_equal(a.allocated, 3 * ARENA_SLAB_BLOCKS);
    assert_non_null(a.full); /* every slab handed out entirely */
    assert_null(a.partial);
    /* LIFO across puts: the last put is the next get */
    arena_put(&a, b[5]);
    arena_put(&a, b[40]);
    assert_ptr_equal(arena_get(&a), b[40]);
    assert_ptr_equal(arena_get(&a), b[5]);
    arena_destroy(&a);
    assert_int_equal(a.allocated, 0);
}

static void test_cap(void **state) {
    (void)state;
    struct arena a;
    /* a cap of 40 blocks admits two slabs of 16; a third would pass it */
    arena_init(&a, 512, 40, 0);
    struct arena_block *b[2 * ARENA_SLAB_BLOCKS];
    for (size_t i = 0; i < 2 * ARENA_SLAB_BLOCKS; i++) {
        assert_false(arena_exhausted(&a));
        b[i] = arena_get(&a);
        assert_non_null(b[i]);
    }
    assert_true(arena_exhausted(&a));
    assert_null(arena_get(&a));
    assert_int_equal(a.in_use, 2 * ARENA_SLAB_BLOCKS);
    assert_int_equal(a.allocated, 2 * ARENA_SLAB_BLOCKS);
    arena_put(&a, b[7]);
    assert_false(arena_exhausted(&a));
    assert_ptr_equal(arena_get(&a), b[7]);
    assert_true(arena_exhausted(&a));
    arena_destroy(&a);
}

static void test_cap_exact_multiple(void **state) {
    (void)state;
    struct arena a;
    arena_init(&a, 512, ARENA_SLAB_BLOCKS, 0);
    for (size_t i = 0; i < ARENA_SLAB_BLOCKS; i++)
        assert_non_null(arena_get(&a));
    assert_true(arena_exhausted(&a));
    assert_null(arena_get(&a));
    arena_destroy(&a);
}

static void test_slab_unmapped_past_reserve(void **state) {
    (void)state;
    struct arena a;
    size_t reserve = ARENA_SLAB_BLOCKS; /* keep one free slab's worth */
    arena_init(&a, 256, 0, reserve);
    struct arena_block *b[4 * ARENA_SLAB_BLOCKS];
    for (size_t i = 0; i < 4 * ARENA_SLAB_BLOCKS; i++)
        b[i] = arena_get(&a);
    assert_int_equal(a.allocated, 4 * ARENA_SLAB_BLOCKS);
    /* give everything back: empty slabs are unmapped while more than reserve + one slab
     * of blocks would stay free, so memory follows load down */
    for (size_t i = 0; i < 4 * ARENA_SLAB_BLOCKS; i++)
        arena_put(&a, b[i]);
    assert_int_equal(a.in_use, 0);
    assert_true(a.allocated <= reserve + ARENA_SLAB_BLOCKS);
    assert_true(a.allocated >= reserve);
    assert_int_equal(a.allocated % ARENA_SLAB_BLOCKS, 0);
    assert_null(a.full);
    /* what is left is reused without mapping more */
    size_t kept = a.allocated;
    for (size_t i = 0; i < kept; i++)
        assert_non_null(arena_get(&a));
    assert_int_equal(a.allocated, kept);
    arena_destroy(&a);
}

static void test_no_reserve_unmaps_down_to_one_slab(void **state) {
    (void)state;
    struct arena a;
    arena_init(&a, 256, 0, 0);
    struct arena_block *b[3 * ARENA_SLAB_BLOCKS];
    for (size_t i = 0; i < 3 * ARENA_SLAB_BLOCKS; i++)
        b[i] = arena_get(&a);
    for (size_t i = 0; i < 3 * ARENA_SLAB_BLOCKS; i++)
        arena_put(&a, b[i]);
    assert_int_equal(a.allocated, ARENA_SLAB_BLOCKS); /* one hot slab stays */
    arena_destroy(&a);
}

static void test_peak(void **state) {
    (void)state;
    struct arena a;
    arena_init(&a, 64, 0, 0);
    struct arena_block *b[20];
    for (int i = 0; i < 20; i++)
        b[i] = arena_get(&a);
    for (int i = 0; i < 15; i++)
        arena_put(&a, b[i]);
    assert_int_equal(a.in_use, 5);
    assert_int_equal(a.peak_in_use, 20);
    for (int i = 0; i < 10; i++)
        b[i] = arena_get(&a);
    assert_int_equal(a.peak_in_use, 20);
    for (int i = 10; i < 16; i++)
        b[i] = arena_get(&a);
    assert_int_equal(a.in_use, 21);
    assert_int_equal(a.peak_in_use, 21);
    arena_destroy(&a);
}

/* --- pool ------------------------------------------------------------------------------- */

struct obj {
    void *link; /* the pool's while free */
    int state;
    char bytes[40];
};

static void test_pool_zeroed_and_distinct(void **state) {
    (void)state;
    struct pool p;
    pool_init(&p, sizeof(struct obj), 0);
    struct obj *o[200];
    for (int i = 0; i < 200; i++) {
        o[i] = pool_get(&p);
        assert_non_null(o[i]);
        assert_int_equal((uintptr_t)o[i] % 16, 0);
        assert_int_equal(o[i]->state, 0); /* fresh objects are zero beyond the first word */
        for (size_t j = 0; j < sizeof o[i]->bytes; j++)
            assert_int_equal(o[i]->bytes[j], 0);
        o[i]->state = i;
        memset(o[i]->bytes, i, sizeof o[i]->bytes);
    }
    for (int i = 0; i < 200; i++) {
        assert_int_equal(o[i]->state, i);
        assert_int_equal(o[i]->bytes[39], (char)i);
    }
    assert_int_equal(p.in_use, 200);
    assert_true(p.allocated >= 200);
    pool_destroy(&p, NULL);
}

static void test_pool_cap(void **state) {
    (void)state;
    struct pool p;
    pool_init(&p, sizeof(struct obj), 3);
    void *a = pool_get(&p), *b = pool_get(&p), *c = pool_get(&p);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_true(pool_full(&p));
    assert_null(pool_get(&p));
    assert_int_equal(p.allocated, 3); /* the chunk is no larger than the cap */
    pool_put(&p, b);
    assert_false(pool_full(&p));
    assert_ptr_equal(pool_get(&p), b);
    assert_true(pool_full(&p));
    pool_destroy(&p, NULL);
}

static void test_pool_reuse_keeps_state(void **state) {
    (void)state;
    struct pool p;
    pool_init(&p, sizeof(struct obj), 0);
    struct obj *a = pool_get(&p), *b = pool_get(&p);
    a->state = 1234;
    strcpy(a->bytes, "kept across reuse");
    b->state = 5;
    pool_put(&p, b);
    pool_put(&p, a);
    struct obj *again = pool_get(&p);
    assert_ptr_equal(again, a); /* LIFO */
    assert_int_equal(again->state, 1234);
    assert_string_equal(again->bytes, "kept across reuse");
    assert_ptr_equal(pool_get(&p), b);
    assert_int_equal(b->state, 5);
    pool_destroy(&p, NULL);
}

static int destroyed;
static long destroyed_sum;

static void on_destroy(void *o) {
    destroyed++;
    destroyed_sum += ((struct obj *)o)->state;
}

static void test_pool_destroy_calls_fn_on_all(void **state) {
    (void)state;
    struct pool p;
    pool_init(&p, sizeof(struct obj), 0);
    struct obj *o[100];
    long sum = 0;
    for (int i = 0; i < 100; i++) {
        o[i] = pool_get(&p);
        o[i]->state = i + 1;
        sum += i + 1;
    }
    for (int i = 0; i < 100; i += 2)
        pool_put(&p, o[i]); /* free and live objects alike */
    size_t allocated = p.allocated;
    destroyed = 0;
    destroyed_sum = 0;
    pool_destroy(&p, on_destroy);
    assert_int_equal(destroyed, (int)allocated); /* every object ever allocated */
    assert_int_equal(destroyed_sum, sum);        /* never-used ones have state 0 */
    assert_int_equal(p.allocated, 0);
    assert_null(p.chunks);
}

static void test_pool_tiny_objects(void **state) {
    (void)state;
    struct pool p;
    pool_init(&p, 1, 0);
    assert_true(p.obj_size >= sizeof(void *));
    void *a = pool_get(&p), *b = pool_get(&p);
    assert_true((char *)b - (char *)a >= (ptrdiff_t)sizeof(void *) ||
                (char *)a - (char *)b >= (ptrdiff_t)sizeof(void *));
    pool_put(&p, a);
    pool_put(&p, b);
    pool_destroy(&p, NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_allocates_nothing),
        cmocka_unit_test(test_get_is_usable_and_reset),
        cmocka_unit_test(test_blocks_distinct_and_aligned),
        cmocka_unit_test(test_cap),
        cmocka_unit_test(test_cap_exact_multiple),
        cmocka_unit_test(test_slab_unmapped_past_reserve),
        cmocka_unit_test(test_no_reserve_unmaps_down_to_one_slab),
        cmocka_unit_test(test_peak),
        cmocka_unit_test(test_pool_zeroed_and_distinct),
        cmocka_unit_test(test_pool_cap),
        cmocka_unit_test(test_pool_reuse_keeps_state),
        cmocka_unit_test(test_pool_destroy_calls_fn_on_all),
        cmocka_unit_test(test_pool_tiny_objects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
