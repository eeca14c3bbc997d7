/* test_prefix.c: listen-prefix: address derivation (known answers), the map, the kept state. */
#include "config/prefix.h"

#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static struct in6_addr ip6(const char *s)
{
    struct in6_addr a;
    assert_int_equal(inet_pton(AF_INET6, s, &a), 1);
    return a;
}

static void assert_addr(const struct in6_addr *a, const char *want)
{
    char got[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, a, got, sizeof got);
    assert_string_equal(got, want);
}

/* Known answers computed apart (Python: hmac.new(key, b"mtproxy-addr\0" + name + b"\0" +
 * gen.to_bytes(4, "little"), sha256), its first host-bits bits OR'ed into the prefix). */
static void test_derivation(void **state)
{
    (void)state;
    uint8_t key[PREFIX_KEY_LEN];
    for (int i = 0; i < PREFIX_KEY_LEN; i++)
        key[i] = (uint8_t)i;
    struct in6_addr net = ip6("2001:db8:1:2::"), a;
    prefix_user_addr(key, &net, 64, "alice", 0, &a);
    assert_addr(&a, "2001:db8:1:2:a260:436c:564e:8bf0");
    prefix_user_addr(key, &net, 64, "alice", 1, &a);
    assert_addr(&a, "2001:db8:1:2:4cba:6f55:4784:5b1a");
    net = ip6("fd00::");
    prefix_user_addr(key, &net, 48, "bob", 0, &a);
    assert_addr(&a, "fd00::d640:a857:ca55:3bfd:4045");
    net = ip6("2001:db8::");
    prefix_user_addr(key, &net, 96, "alice", 0, &a);
    assert_addr(&a, "2001:db8::a260:436c");
    key[0] ^= 1; /* another key: another address */
    struct in6_addr was = ip6("2001:db8::a260:436c");
    prefix_user_addr(key, &net, 96, "alice", 0, &a);
    assert_int_not_equal(memcmp(&a, &was, sizeof a), 0);
}

static void test_map(void **state)
{
    (void)state;
    struct prefix_map m;
    assert_int_equal(prefix_map_init(&m, 10000), 0);
    uint8_t key[PREFIX_KEY_LEN] = {7};
    struct in6_addr net = ip6("fd00:6d74:7072::"), a;
    char name[32];
    for (int i = 0; i < 10000; i++) {
        snprintf(name, sizeof name, "u%d", i);
        prefix_user_addr(key, &net, 64, name, 0, &a);
        assert_int_equal(prefix_map_add(&m, &a, i, i == 5 ? 100.0 : 0), 0);
    }
    for (int i = 0; i < 10000; i += 97) {
        snprintf(name, sizeof name, "u%d", i);
        prefix_user_addr(key, &net, 64, name, 0, &a);
        assert_int_equal(prefix_map_lookup(&m, &a, 50.0), i);
        assert_int_equal(prefix_map_add(&m, &a, i, 0), 0);      /* the same again: fine */
        assert_int_equal(prefix_map_add(&m, &a, i + 1, 0), -1); /* another user's: refused */
    }
    prefix_user_addr(key, &net, 64, "u5", 0, &a);
    assert_int_equal(prefix_map_lookup(&m, &a, 99.9), 5);
    assert_int_equal(prefix_map_lookup(&m, &a, 100.0), PREFIX_NOBODY); /* its grace ended */
    a = ip6("fd00:6d74:7072::1");
    assert_int_equal(prefix_map_lookup(&m, &a, 0), PREFIX_NOBODY);
    prefix_map_free(&m);
    /* full: refused, never an endless probe */
    assert_int_equal(prefix_map_init(&m, 1), 0);
    int added = 0;
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "x%d", i);
        prefix_user_addr(key, &net, 64, name, 0, &a);
        added += prefix_map_add(&m, &a, i, 0) == 0;
    }
    assert_true(added >= 1 && added < 100);
    prefix_map_free(&m);
}

static void test_state_file(void **state)
{
    (void)state;
    char path[] = "/tmp/test_prefix_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    unlink(path);
    char err[600];
    struct prefix_state st;
    assert_int_equal(prefix_state_load(path, &st, err, sizeof err), 0); /* missing: empty */
    assert_int_equal(st.has_key, 0);
    for (int i = 0; i < PREFIX_KEY_LEN; i++)
        st.key[i] = (uint8_t)(0xa0 + i);
    st.has_key = 1;
    st.n = 2;
    st.u = calloc(2, sizeof *st.u);
    snprintf(st.u[0].name, sizeof st.u[0].name, "alice");
    st.u[0].gen = 3;
    st.u[0].rotated = 1800000000;
    snprintf(st.u[1].name, sizeof st.u[1].name, "bob");
    assert_int_equal(prefix_state_save(path, &st, err, sizeof err), 0);
    struct prefix_state back;
    assert_int_equal(prefix_state_load(path, &back, err, sizeof err), 0);
    assert_true(back.has_key && !memcmp(back.key, st.key, sizeof st.key));
    const struct prefix_user_gen *e = prefix_state_find(&back, "alice");
    assert_non_null(e);
    assert_int_equal(e->gen, 3);
    assert_int_equal(e->rotated, 1800000000);
    assert_null(prefix_state_find(&back, "carol"));
    prefix_state_free(&back);
    prefix_state_free(&st);
    FILE *f = fopen(path, "w");
    fputs("key = 1234\n", f); /* a short key: refused with its line */
    fclose(f);
    assert_int_equal(prefix_state_load(path, &back, err, sizeof err), -1);
    assert_non_null(strstr(err, ":1:"));
    f = fopen(path, "w");
    fputs("# c\nuser = a 1\n", f);
    fclose(f);
    assert_int_equal(prefix_state_load(path, &back, err, sizeof err), -1);
    assert_non_null(strstr(err, ":2:"));
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_derivation),
        cmocka_unit_test(test_map),
        cmocka_unit_test(test_state_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
