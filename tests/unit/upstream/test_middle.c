/* test_middle.c: the choice of whom a paused ME link closes (middle_stall_victims). */
#include "upstream/middle.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define MIB ((size_t)1 << 20)

/* h[i].who = &ids[i]: which of the original entries a sorted one is. */
static int ids[64];

static void fill(struct middle_holder *h, int n, const size_t *held, const int *progressed)
{
    for (int i = 0; i < n; i++) {
        ids[i] = i;
        h[i] = (struct middle_holder){.who = &ids[i], .held = held[i],
                                      .progressed = progressed ? progressed[i] : 0};
    }
}

/* Whether original entry id was chosen. */
static int chosen(const struct middle_holder *h, int n, int id)
{
    for (int i = 0; i < n; i++)
        if (*(int *)h[i].who == id)
            return h[i].evict;
    fail_msg("entry %d lost", id);
    return 0;
}

/* Three stalled clients of 3 MiB beside 40 readers that drained during the pause: the three go,
 * no reader does (the case). */
static void test_stalled_go_readers_stay(void **state)
{
    (void)state;
    struct middle_holder h[43];
    size_t held[43];
    int prog[43];
    for (int i = 0; i < 43; i++) {
        held[i] = i < 3 ? 3 * MIB - 100000 : 20000; /* readers: a little, still draining */
        prog[i] = i >= 3;
    }
    fill(h, 43, held, prog);
    assert_int_equal(middle_stall_victims(h, 43, 8 * MIB / 43, 4 * MIB, 0), 3);
    for (int i = 0; i < 43; i++)
        assert_int_equal(chosen(h, 43, i), i < 3);
}

/* Every stalled client over its fair share goes, even when fewer would reach the resume mark;
 * a stalled one under its share stays. */
static void test_every_stalled_over_fair_share(void **state)
{
    (void)state;
    struct middle_holder h[5];
    size_t held[5] = {900000, 3 * MIB, 800000, 50000, 0};
    fill(h, 5, held, NULL);
    assert_int_equal(middle_stall_victims(h, 5, 100000, 4 * MIB, 0), 3);
    assert_true(chosen(h, 5, 0) && chosen(h, 5, 1) && chosen(h, 5, 2));
    assert_false(chosen(h, 5, 3) || chosen(h, 5, 4));
    /* sorted, largest first */
    for (int i = 1; i < 5; i++)
        assert_true(h[i - 1].held >= h[i].held);
}

/* Still over the target after those: the largest that made no progress go, one by one, until
 * the rest hold at most the target, even under their fair share; clients that drain stay. */
static void test_largest_stalled_until_target(void **state)
{
    (void)state;
    struct middle_holder h[5];
    size_t held[5] = {1 * MIB, 3 * MIB, 2 * MIB, 2 * MIB, 3 * MIB};
    int prog[5] = {0, 1, 0, 0, 1};
    fill(h, 5, held, prog);
    /* 11 MiB held, target 4 MiB, fair 3 MiB: the three stalled go (2 + 2 + 1), the two
     * draining 3 MiB ones stay although 6 MiB remain */
    assert_int_equal(middle_stall_victims(h, 5, 3 * MIB, 4 * MIB, 0), 3);
    assert_true(chosen(h, 5, 0) && chosen(h, 5, 2) && chosen(h, 5, 3));
    assert_false(chosen(h, 5, 1) || chosen(h, 5, 4));
    /* stalled ones under their share are not closed while the link holds at most the target */
    fill(h, 5, held, prog);
    assert_int_equal(middle_stall_victims(h, 5, 3 * MIB, 11 * MIB, 0), 0);
}

/* The link stayed paused for ME_STALL_ALL graces (all = 1): the largest go, draining or not,
 * one by one until the rest hold at most the target. */
static void test_all_largest_until_target(void **state)
{
    (void)state;
    struct middle_holder h[4];
    size_t held[4] = {1 * MIB, 3 * MIB, 2 * MIB, 2 * MIB};
    int prog[4] = {1, 1, 1, 1};
    fill(h, 4, held, prog);
    assert_int_equal(middle_stall_victims(h, 4, 2 * MIB, 4 * MIB, 0), 0);
    /* 8 MiB held, target 4 MiB: 3 MiB goes (5 left), then a 2 MiB one (3 left) */
    fill(h, 4, held, prog);
    assert_int_equal(middle_stall_victims(h, 4, 2 * MIB, 4 * MIB, 1), 2);
    assert_true(chosen(h, 4, 1));
    assert_false(chosen(h, 4, 0));
    assert_int_equal(chosen(h, 4, 2) + chosen(h, 4, 3), 1);
}

/* Already under the target, and everyone drained or holds at most its share: nobody. A
 * client holding nothing is never chosen. */
static void test_nobody(void **state)
{
    (void)state;
    struct middle_holder h[3];
    size_t held[3] = {100, 0, 4096};
    int prog[3] = {0, 0, 1};
    fill(h, 3, held, prog);
    assert_int_equal(middle_stall_victims(h, 3, 4096, 65536, 1), 0);
    size_t none[2] = {0, 0};
    fill(h, 2, none, NULL);
    assert_int_equal(middle_stall_victims(h, 2, 0, 0, 1), 0);
    assert_int_equal(middle_stall_victims(h, 0, 0, 0, 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stalled_go_readers_stay),
        cmocka_unit_test(test_every_stalled_over_fair_share),
        cmocka_unit_test(test_largest_stalled_until_target),
        cmocka_unit_test(test_all_largest_until_target),
        cmocka_unit_test(test_nobody),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
