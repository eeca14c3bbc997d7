/* test_proxyproto.c: PROXY protocol v1/v2 parsing: good, malformed, truncated, split, round trip. */
#include "proto/proxyproto.h"

#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "upstream/fronting.h"
#include "testutil.h"

#define MAXV2 4096

static enum proxyproto_status parse(const void *b, size_t n, struct proxyproto_result *r)
{
    return proxyproto_parse((const uint8_t *)b, n, MAXV2, r);
}

static void assert_addr(const struct sockaddr_storage *ss, const char *host, int port)
{
    char h[64];
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, h, sizeof h);
        assert_int_equal(ntohs(a->sin_port), port);
    } else {
        assert_int_equal(ss->ss_family, AF_INET6);
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, h, sizeof h);
        assert_int_equal(ntohs(a->sin6_port), port);
    }
    assert_string_equal(h, host);
}

/* Every proper prefix of a good header asks for more (never BAD), and need grows. */
static void assert_prefixes_need_more(const uint8_t *b, size_t n)
{
    struct proxyproto_result r;
    for (size_t i = 0; i < n; i++) {
        if (parse(b, i, &r) != PROXYPROTO_NEED_MORE)
            fail_msg("prefix of %zu of %zu bytes: not NEED_MORE (%s)", i, n, r.why ? r.why : "");
        assert_true(r.need > i && r.need <= n);
    }
}

static void test_v1_good(void **state)
{
    (void)state;
    struct proxyproto_result r;
    const char *h = "PROXY TCP4 192.0.2.10 203.0.113.5 51234 443\r\nAFTER";
    assert_int_equal(parse(h, strlen(h), &r), PROXYPROTO_OK);
    assert_int_equal(r.version, 1);
    assert_int_equal(r.kind, PROXYPROTO_PROXIED);
    assert_int_equal(r.consumed, strlen(h) - 5);
    assert_addr(&r.src, "192.0.2.10", 51234);
    assert_addr(&r.dst, "203.0.113.5", 443);
    assert_prefixes_need_more((const uint8_t *)h, r.consumed);

    h = "PROXY TCP6 2001:db8::1 ::1 0 65535\r\n";
    assert_int_equal(parse(h, strlen(h), &r), PROXYPROTO_OK);
    assert_addr(&r.src, "2001:db8::1", 0);
    assert_addr(&r.dst, "::1", 65535);

    h = "PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n";
    assert_int_equal(parse(h, strlen(h), &r), PROXYPROTO_OK);
    assert_int_equal(r.kind, PROXYPROTO_UNKNOWN);
    assert_int_equal(r.consumed, strlen(h));
    h = "PROXY UNKNOWN\r\n";
    assert_int_equal(parse(h, strlen(h), &r), PROXYPROTO_OK);
    assert_int_equal(r.kind, PROXYPROTO_UNKNOWN);

    /* The longest legal line: 107 bytes with CR LF. */
    char longest[128];
    snprintf(longest, sizeof longest, "PROXY TCP6 %s %s 65535 65535\r\n",
             "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
    assert_int_equal(strlen(longest), 104);
    assert_int_equal(parse(longest, strlen(longest), &r), PROXYPROTO_OK);
}

static void test_v1_bad(void **state)
{
    (void)state;
    const char *bad[] = {
        "PROXY TCP5 1.2.3.4 1.2.3.4 1 2\r\n",        /* protocol */
        "PROXY TCP4 1.2.3.4 1.2.3.4 1\r\n",          /* missing field */
        "PROXY TCP4 1.2.3.4 1.2.3.4 1 2 3\r\n",      /* extra field */
        "PROXY TCP4 1.2.3.4 1.2.3.4 65536 2\r\n",    /* port range */
        "PROXY TCP4 1.2.3.4 1.2.3.4 01 2\r\n",       /* leading zero */
        "PROXY TCP4 1.2.3.4 1.2.3.4 -1 2\r\n",       /* sign */
        "PROXY TCP4 1.2.3.256 1.2.3.4 1 2\r\n",      /* address */
        "PROXY TCP4 ::1 1.2.3.4 1 2\r\n",            /* family mismatch */
        "PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
        "PROXY TCP4  1.2.3.4 1.2.3.4 1 2\r\n",       /* double space */
        "PROXY TCP4 1.2.3.4 1.2.3.4 1 2 \r\n",       /* trailing space */
        "PROXY TCP4 1.2.3.4 1.2.3.4 1 2\rX",          /* CR without LF */
        "PROXY TCP4 1.2.3.4\n1.2.3.4 1 2\r\n",        /* control byte */
        "PROXY \r\n",                                 /* nothing */
        "proxy TCP4 1.2.3.4 1.2.3.4 1 2\r\n",        /* case */
        "GET / HTTP/1.1\r\n",                         /* not a header at all */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct proxyproto_result r;
        if (parse(bad[i], strlen(bad[i]), &r) != PROXYPROTO_BAD)
            fail_msg("accepted: %s", bad[i]);
        assert_non_null(r.why);
    }
    /* No CR LF within 107 bytes: more is asked for until then, then BAD. */
    char line[200];
    memset(line, 'A', sizeof line);
    memcpy(line, "PROXY UNKNOWN ", 14);
    struct proxyproto_result r;
    assert_int_equal(parse(line, 106, &r), PROXYPROTO_NEED_MORE);
    assert_int_equal(parse(line, 107, &r), PROXYPROTO_BAD);
    assert_int_equal(parse(line, 200, &r), PROXYPROTO_BAD);
    memcpy(line + 106, "\r\n", 2); /* 108 bytes with CR LF */
    assert_int_equal(parse(line, 108, &r), PROXYPROTO_BAD);
    memcpy(line + 105, "\r\n", 2); /* 107 */
    assert_int_equal(parse(line, 107, &r), PROXYPROTO_OK);
    assert_int_equal(r.consumed, 107);
}

static const uint8_t SIG[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
                                0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};

static size_t v2(uint8_t *out, uint8_t vercmd, uint8_t fam, const uint8_t *body, size_t blen)
{
    memcpy(out, SIG, 12);
    out[12] = vercmd;
    out[13] = fam;
    out[14] = (uint8_t)(blen >> 8);
    out[15] = (uint8_t)blen;
    if (blen)
        memcpy(out + 16, body, blen);
    return 16 + blen;
}

static void test_v2_good(void **state)
{
    (void)state;
    uint8_t b[600], body[400];
    struct proxyproto_result r;
    /* TCP4 with two TLVs (ALPN "h2" and a 0-length NOOP) and the client's first bytes after. */
    uint8_t a4[12] = {192, 0, 2, 10, 203, 0, 113, 5, 0xc8, 0x22, 0x01, 0xbb};
    memcpy(body, a4, 12);
    memcpy(body + 12, "\x01\x00\x02h2\x04\x00\x00", 8);
    size_t n = v2(b, 0x21, 0x11, body, 20);
    memcpy(b + n, "\xef\xef", 2);
    assert_int_equal(parse(b, n + 2, &r), PROXYPROTO_OK);
    assert_int_equal(r.version, 2);
    assert_int_equal(r.kind, PROXYPROTO_PROXIED);
    assert_int_equal(r.consumed, n);
    assert_addr(&r.src, "192.0.2.10", 51234);
    assert_addr(&r.dst, "203.0.113.5", 443);
    assert_prefixes_need_more(b, n);

    uint8_t a6[36] = {0};
    a6[0] = 0x20, a6[1] = 0x01, a6[2] = 0x0d, a6[3] = 0xb8, a6[15] = 7;
    a6[31] = 1;
    a6[32] = 0x30, a6[33] = 0x39, a6[34] = 0x20, a6[35] = 0xfb;
    n = v2(b, 0x21, 0x21, a6, 36);
    assert_int_equal(parse(b, n, &r), PROXYPROTO_OK);
    assert_addr(&r.src, "2001:db8::7", 12345);
    assert_addr(&r.dst, "::1", 8443);

    /* LOCAL (a health check), with or without an address block: no address is used. */
    n = v2(b, 0x20, 0x00, NULL, 0);
    assert_int_equal(parse(b, n, &r), PROXYPROTO_OK);
    assert_int_equal(r.kind, PROXYPROTO_LOCAL);
    n = v2(b, 0x20, 0x11, a4, 12);
    assert_int_equal(parse(b, n, &r), PROXYPROTO_OK);
    assert_int_equal(r.kind, PROXYPROTO_LOCAL);
    assert_int_equal(r.consumed, 28);

    /* UNIX stream and UDP over IPv4: a header we skip but whose address we cannot use. */
    memset(body, 'x', 216);
    n = v2(b, 0x21, 0x31, body, 216);
    assert_int_equal(parse(b, n, &r), PROXYPROTO_OK);
    assert_int_equal(r.kind, PROXYPROTO_UNKNOWN);
    n = v2(b, 0x21, 0x12, a4, 12);
    assert_int_equal(parse(b, n, &r), PROXYPROTO_OK);
    assert_int_equal(r.kind, PROXYPROTO_UNKNOWN);
}

static void test_v2_bad(void **state)
{
    (void)state;
    uint8_t b[70000], body[64] = {0};
    struct proxyproto_result r;
    size_t n = v2(b, 0x11, 0x11, body, 12); /* version 1 */
    assert_int_equal(parse(b, n, &r), PROXYPROTO_BAD);
    n = v2(b, 0x22, 0x11, body, 12); /* command 2 */
    assert_int_equal(parse(b, n, &r), PROXYPROTO_BAD);
    n = v2(b, 0x21, 0x41, body, 12); /* family 4 */
    assert_int_equal(parse(b, n, &r), PROXYPROTO_BAD);
    n = v2(b, 0x21, 0x13, body, 12); /* transport 3 */
    assert_int_equal(parse(b, n, &r), PROXYPROTO_BAD);
    n = v2(b, 0x21, 0x21, body, 12); /* IPv6 needs 36 */
    assert_int_equal(parse(b, n, &r), PROXYPROTO_BAD);
    /* Told as soon as the fixed part is in, before the body arrives. */
    assert_int_equal(parse(b, 16, &r), PROXYPROTO_BAD);
    /* TLVs that do not tile the rest. */
    memcpy(body + 12, "\x01\x00\x05h2", 5); /* says 5, has 2 */
    n = v2(b, 0x21, 0x11, body, 17);
    assert_int_equal(parse(b, n, &r), PROXYPROTO_BAD);
    memcpy(body + 12, "\x01\x00", 2); /* a TLV header cut short */
    n = v2(b, 0x21, 0x11, body, 14);
    assert_int_equal(parse(b, n, &r), PROXYPROTO_BAD);
    /* Over the cap: refused from the 16 fixed bytes, no waiting for 64 KiB. */
    memcpy(b, SIG, 12);
    b[12] = 0x21, b[13] = 0x11, b[14] = 0xff, b[15] = 0xff;
    assert_int_equal(parse(b, 16, &r), PROXYPROTO_BAD);
    assert_int_equal(proxyproto_parse(b, 16, PROXYPROTO_V2_MAX, &r), PROXYPROTO_NEED_MORE);
    assert_int_equal(r.need, PROXYPROTO_V2_MAX);
    /* A signature that diverges is BAD at the first wrong byte. */
    memcpy(b, SIG, 12);
    b[5] = 0;
    assert_int_equal(parse(b, 6, &r), PROXYPROTO_BAD);
    assert_int_equal(parse(b, 5, &r), PROXYPROTO_NEED_MORE);
    uint8_t tls[3] = {0x16, 0x03, 0x01};
    assert_int_equal(parse(tls, 1, &r), PROXYPROTO_BAD);
}

/* What fronting.c sends to a fronted server, this parser reads back. */
static void test_round_trip_with_builder(void **state)
{
    (void)state;
    const char *pairs[][2] = {{"192.0.2.77", "198.51.100.1"}, {"2001:db8::42", "::1"}};
    for (int v = 1; v <= 2; v++) {
        for (int i = 0; i < 2; i++) {
            struct sock_addr src, dst;
            char text[80], err[128];
            snprintf(text, sizeof text, strchr(pairs[i][0], ':') ? "[%s]:40000" : "%s:40000",
                     pairs[i][0]);
            assert_int_equal(sock_addr_parse(text, 0, 0, &src, err, sizeof err), 0);
            snprintf(text, sizeof text, strchr(pairs[i][1], ':') ? "[%s]:443" : "%s:443",
                     pairs[i][1]);
            assert_int_equal(sock_addr_parse(text, 0, 0, &dst, err, sizeof err), 0);
            uint8_t hdr[256];
            size_t n = mask_proxy_header(hdr, sizeof hdr, v, &src, &dst);
            assert_true(n > 0);
            struct proxyproto_result r;
            assert_int_equal(parse(hdr, n, &r), PROXYPROTO_OK);
            assert_int_equal(r.version, v);
            assert_int_equal(r.consumed, n);
            assert_addr(&r.src, pairs[i][0], 40000);
            assert_addr(&r.dst, pairs[i][1], 443);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v1_good),
        cmocka_unit_test(test_v1_bad),
        cmocka_unit_test(test_v2_good),
        cmocka_unit_test(test_v2_bad),
        cmocka_unit_test(test_round_trip_with_builder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
