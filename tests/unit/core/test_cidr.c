/* test_cidr.c: CIDR parsing, set merging and lookups against a brute-force model, list files. */
#include "core/cidr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testutil.h"

static int has(const struct cidr_set *s, const char *addr)
{
    struct sockaddr_storage ss = sockaddr_of(addr);
    assert_int_not_equal(ss.ss_family, 0);
    return cidr_set_contains(s, (struct sockaddr *)&ss);
}

static void add(struct cidr_set *s, const char *text)
{
    struct cidr c;
    char err[256];
    if (cidr_parse(text, &c, err, sizeof err))
        fail_msg("%s: %s", text, err);
    assert_int_equal(cidr_set_add(s, &c), 0);
}

static void test_parse(void **state)
{
    (void)state;
    struct cidr c;
    char err[256], out[80];
    assert_int_equal(cidr_parse("10.1.2.0/24", &c, err, sizeof err), 0);
    assert_int_equal(c.family, AF_INET);
    assert_int_equal(c.prefix, 24);
    cidr_format(&c, out, sizeof out);
    assert_string_equal(out, "10.1.2.0/24");
    assert_int_equal(cidr_parse("192.0.2.7", &c, err, sizeof err), 0);
    assert_int_equal(c.prefix, 32);
    assert_int_equal(cidr_parse("0.0.0.0/0", &c, err, sizeof err), 0);
    assert_int_equal(c.prefix, 0);
    assert_int_equal(cidr_parse("2001:db8::/32", &c, err, sizeof err), 0);
    assert_int_equal(c.family, AF_INET6);
    assert_int_equal(c.prefix, 32);
    assert_int_equal(cidr_parse("::1", &c, err, sizeof err), 0);
    assert_int_equal(c.prefix, 128);
    assert_int_equal(cidr_parse("::/0", &c, err, sizeof err), 0);
    assert_int_equal(c.prefix, 0);

    /* Host bits set: an error that says what was meant. */
    assert_int_equal(cidr_parse("10.0.0.1/8", &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "did you mean 10.0.0.0/8"));
    assert_int_equal(cidr_parse("2001:db8::1/64", &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "2001:db8::/64"));

    const char *bad[] = {"", "/24", "10.0.0.0/", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/8x",
                         "10.0.0.0/0008", "::/129", "10.0.0", "1.2.3.4.5", "[::1]", "::1/",
                         "10.0.0.0 /8", " 10.0.0.0", "example.com", "10.0.0.0/8/8",
                         "1.2.3.256", "gggg::"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (cidr_parse(bad[i], &c, err, sizeof err) != -1)
            fail_msg("'%s' parsed", bad[i]);
        assert_true(err[0] != '\0');
    }
}

static void test_set_edges(void **state)
{
    (void)state;
    struct cidr_set s;
    cidr_set_init(&s);
    add(&s, "10.0.0.0/8");
    add(&s, "10.1.0.0/16"); /* inside the first: merged */
    add(&s, "192.168.1.0/24");
    add(&s, "192.168.2.0/24"); /* adjacent: merged */
    add(&s, "203.0.113.9");
    add(&s, "2001:db8::/32");
    add(&s, "::1");
    cidr_set_finish(&s);
    assert_int_equal(s.n4, 3);
    assert_int_equal(s.n6, 2);
    assert_true(has(&s, "10.0.0.0"));
    assert_true(has(&s, "10.255.255.255"));
    assert_false(has(&s, "11.0.0.0"));
    assert_false(has(&s, "9.255.255.255"));
    assert_true(has(&s, "192.168.1.0"));
    assert_true(has(&s, "192.168.2.255"));
    assert_false(has(&s, "192.168.3.0"));
    assert_false(has(&s, "192.168.0.255"));
    assert_true(has(&s, "203.0.113.9"));
    assert_false(has(&s, "203.0.113.8"));
    assert_false(has(&s, "203.0.113.10"));
    assert_true(has(&s, "2001:db8::"));
    assert_true(has(&s, "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"));
    assert_false(has(&s, "2001:db9::"));
    assert_true(has(&s, "::1"));
    assert_false(has(&s, "::2"));
    assert_false(has(&s, "::"));
    /* An IPv4-mapped IPv6 source (a dual-stack listener) is checked as IPv4. */
    assert_true(has(&s, "::ffff:10.2.3.4"));
    assert_false(has(&s, "::ffff:11.2.3.4"));
    /* Families do not mix. */
    assert_false(has(&s, "0.0.0.1"));
    cidr_set_free(&s);

    cidr_set_init(&s);
    add(&s, "0.0.0.0/0");
    add(&s, "255.255.255.255"); /* merging at the top must not wrap */
    add(&s, "::/0");
    cidr_set_finish(&s);
    assert_int_equal(s.n4, 1);
    assert_int_equal(s.n6, 1);
    assert_true(has(&s, "0.0.0.0"));
    assert_true(has(&s, "255.255.255.255"));
    assert_true(has(&s, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"));
    assert_true(has(&s, "::"));
    cidr_set_free(&s);

    /* Two ranges ending at the top of the space, and an empty set. */
    cidr_set_init(&s);
    add(&s, "ffff::/16");
    add(&s, "ffff:ffff::/32");
    add(&s, "8000::/1");
    cidr_set_finish(&s);
    assert_int_equal(s.n6, 1);
    assert_true(has(&s, "8000::"));
    assert_false(has(&s, "7fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"));
    cidr_set_free(&s);
    cidr_set_init(&s);
    cidr_set_finish(&s);
    assert_false(has(&s, "1.2.3.4"));
    assert_false(has(&s, "::1"));
    cidr_set_free(&s);
}

/* A deterministic generator for the model test. */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int model_match(const struct cidr *c, const uint8_t *addr, int family)
{
    if (c->family != family)
        return 0;
    int full = c->prefix / 8, rest = c->prefix % 8;
    if (memcmp(c->addr, addr, (size_t)full) != 0)
        return 0;
    uint8_t mask = (uint8_t)(0xff00u >> rest);
    return rest == 0 || (c->addr[full] & mask) == (addr[full] & mask);
}

/* 100,000 random networks of both families with overlaps; 4,000 probes (half drawn near
 * the networks' edges) agree with a linear scan over the raw list. */
static void test_model_100k(void **state)
{
    (void)state;
    enum { N = 100000, PROBES = 4000 };
    struct cidr *list = calloc(N, sizeof *list);
    assert_non_null(list);
    struct cidr_set s;
    cidr_set_init(&s);
    for (int i = 0; i < N; i++) {
        struct cidr *c = &list[i];
        uint64_t r = next64();
        c->family = (r & 3) ? AF_INET : AF_INET6;
        int bits = c->family == AF_INET ? 32 : 128;
        /* Prefixes clustered in a small corner of the space so that ranges overlap. */
        c->prefix = (uint8_t)(c->family == AF_INET ? 20 + next64() % 13 : 24 + next64() % 105);
        for (int b = 0; b < 16; b++)
            c->addr[b] = (uint8_t)next64();
        c->addr[0] = (uint8_t)(10 + (next64() & 1));
        for (int b = c->prefix; b < bits; b++)
            c->addr[b / 8] &= (uint8_t) ~(0x80u >> (b % 8));
        if (c->family == AF_INET)
            memset(c->addr + 4, 0, 12);
        assert_int_equal(cidr_set_add(&s, c), 0);
    }
    cidr_set_finish(&s);
    assert_true(cidr_set_count(&s) < N); /* overlaps merged */
    int hits = 0;
    for (int p = 0; p < PROBES; p++) {
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof ss);
        uint8_t a[16];
        const struct cidr *near = &list[next64() % N];
        int family = (p & 1) ? near->family : ((next64() & 3) ? AF_INET : AF_INET6);
        for (int b = 0; b < 16; b++)
            a[b] = (uint8_t)next64();
        a[0] = (uint8_t)(10 + (next64() & 1));
        if ((p & 1) && near->family == family) {
            /* Just inside or just outside one network's edge. */
            memcpy(a, near->addr, 16);
            int bits = family == AF_INET ? 32 : 128;
            if (next64() & 1) {
                for (int b = near->prefix; b < bits; b++)
                    a[b / 8] |= (uint8_t)(0x80u >> (b % 8));
                if (next64() & 1) { /* one past the last address */
                    for (int b = bits / 8 - 1; b >= 0 && ++a[b] == 0; b--)
                        ;
                }
            } else if (next64() & 1) { /* one before the first */
                for (int b = bits / 8 - 1; b >= 0 && a[b]-- == 0; b--)
                    ;
            }
        }
        if (family == AF_INET) {
            struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
            s4->sin_family = AF_INET;
            memcpy(&s4->sin_addr, a, 4);
        } else {
            struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
            s6->sin6_family = AF_INET6;
            if (a[0] == 0)
                a[0] = 1; /* keep clear of IPv4-mapped addresses */
            memcpy(&s6->sin6_addr, a, 16);
        }
        int want = 0;
        for (int i = 0; i < N && !want; i++)
            want = model_match(&list[i], a, family);
        int got = cidr_set_contains(&s, (struct sockaddr *)&ss);
        if (got != want) {
            char t[64];
            inet_ntop(family, a, t, sizeof t);
            fail_msg("%s: set says %d, model %d", t, got, want);
        }
        hits += want;
    }
    /* Both answers occur often enough for the comparison to mean something. */
    assert_true(hits > PROBES / 10);
    assert_true(hits < PROBES * 9 / 10);
    free(list);
    cidr_set_free(&s);
}

struct reported {
    int n;
    char first[3][256];
};
static void collect(void *ctx, const char *msg)
{
    struct reported *r = ctx;
    if (r->n < 3)
        snprintf(r->first[r->n], sizeof r->first[0], "%s", msg);
    r->n++;
}

static void test_load_file(void **state)
{
    (void)state;
    char path[] = "/tmp/test_cidr_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    /* FireHOL netset style: header comments, entries, blank lines, trailing comments, CRLF. */
    static const char text[] = "#\n# firehol_level1 (test copy)\n#\n\n"
                               "192.0.2.0/24\n"
                               "  198.51.100.7   # one host\n"
                               "2001:db8::/48\r\n"
                               "\t\n"
                               "10.0.0.1/8\n"         /* line 9: host bits */
                               "not-an-address\n"     /* line 10 */
                               "203.0.113.0/24\n";
    assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    assert_int_equal(write(fd, "1.2.3.4\0 5.6.7.8\n", 17), 17); /* line 12: NUL */
    close(fd);
    struct cidr_set s;
    cidr_set_init(&s);
    struct reported r = {0};
    assert_int_equal(cidr_set_load_file(&s, path, collect, &r), 3);
    assert_int_equal(r.n, 3);
    char want[300];
    snprintf(want, sizeof want, "%s:9: ", path);
    assert_memory_equal(r.first[0], want, strlen(want));
    snprintf(want, sizeof want, "%s:10: ", path);
    assert_memory_equal(r.first[1], want, strlen(want));
    snprintf(want, sizeof want, "%s:12: NUL byte", path);
    assert_string_equal(r.first[2], want);
    cidr_set_finish(&s);
    assert_int_equal(s.added, 4);
    assert_true(has(&s, "192.0.2.200"));
    assert_true(has(&s, "198.51.100.7"));
    assert_false(has(&s, "198.51.100.8"));
    assert_true(has(&s, "2001:db8:0:ffff::1"));
    assert_false(has(&s, "2001:db8:1::"));
    assert_true(has(&s, "203.0.113.1"));
    assert_false(has(&s, "1.2.3.4"));
    cidr_set_free(&s);
    unlink(path);

    r.n = 0;
    assert_int_equal(cidr_set_load_file(&s, "/nonexistent/list.netset", collect, &r), -1);
    assert_int_equal(r.n, 1);
    assert_non_null(strstr(r.first[0], "/nonexistent/list.netset: cannot open"));
    cidr_set_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_set_edges),
        cmocka_unit_test(test_model_100k),
        cmocka_unit_test(test_load_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
