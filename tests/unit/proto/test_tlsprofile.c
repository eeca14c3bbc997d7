/* test_tlsprofile.c: browser-shaped ClientHello, server flight reader, profile text form. */
#include "proto/tlsprofile.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

/* Appends a ServerHello record (extensions in the given order) to out; returns its length. */
static size_t server_hello(uint8_t *out, int versions_first, uint16_t version, uint16_t cipher)
{
    uint8_t body[200];
    size_t n = 0;
    body[n++] = 3;
    body[n++] = 3;
    memset(body + n, 0x42, 32);
    n += 32;
    body[n++] = 32;
    memset(body + n, 0x11, 32);
    n += 32;
    body[n++] = (uint8_t)(cipher >> 8);
    body[n++] = (uint8_t)cipher;
    body[n++] = 0;
    body[n++] = 0;
    body[n++] = 46;
    uint8_t ks[40] = {0x00, 0x33, 0x00, 0x24, 0x00, 0x1d, 0x00, 0x20};
    uint8_t sv[6] = {0x00, 0x2b, 0x00, 0x02, (uint8_t)(version >> 8), (uint8_t)version};
    if (versions_first) {
        memcpy(body + n, sv, 6);
        memcpy(body + n + 6, ks, 40);
    } else {
        memcpy(body + n, ks, 40);
        memcpy(body + n + 40, sv, 6);
    }
    n += 46;
    out[0] = 0x16;
    out[1] = 3;
    out[2] = 3;
    out[3] = (uint8_t)((n + 4) >> 8);
    out[4] = (uint8_t)(n + 4);
    out[5] = 2;
    out[6] = 0;
    out[7] = (uint8_t)(n >> 8);
    out[8] = (uint8_t)n;
    memcpy(out + 9, body, n);
    return n + 9;
}

static size_t appdata(uint8_t *out, size_t len)
{
    out[0] = 0x17;
    out[1] = 3;
    out[2] = 3;
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
    memset(out + 5, 0xa5, len);
    return len + 5;
}

static size_t flight(uint8_t *buf, const uint16_t *recs, size_t nrec, int ccs, int vfirst)
{
    size_t n = server_hello(buf, vfirst, 0x0304, 0x1301);
    if (ccs) {
        static const uint8_t c[6] = {0x14, 3, 3, 0, 1, 1};
        memcpy(buf + n, c, 6);
        n += 6;
    }
    for (size_t i = 0; i < nrec; i++)
        n += appdata(buf + n, recs[i]);
    return n;
}

static void test_client_hello_is_a_hello(void **state)
{
    (void)state;
    uint8_t out[TLSPROFILE_HELLO_MAX], r[32], sid[32], key[32];
    memset(r, 0x5a, 32);
    memset(sid, 7, 32);
    memset(key, 9, 32);
    size_t n = tlsprofile_client_hello(out, sizeof out, "www.example.com", r, sid, key);
    assert_true(n > 200 && n < TLSPROFILE_HELLO_MAX);
    struct faketls_hello h;
    /* our own ClientHello reader accepts it: one record, TLS 1.3 offered, SNI as given */
    assert_int_equal(faketls_hello_parse(out, n, &h), FAKETLS_OK);
    assert_int_equal(h.consumed, n);
    assert_true(faketls_hello_has_sni(&h, "www.example.com"));
    assert_int_equal(h.client.cipher_suite, 0x1301);
    assert_int_equal(h.tls13_suites, 7); /* 1301, 1302 and 1303 offered */
    assert_int_equal(h.client.sid_len, 32);
    assert_memory_equal(h.client.random, r, 32);
    assert_int_equal(tlsprofile_client_hello(out, 100, "www.example.com", r, sid, key), 0);
    assert_int_equal(tlsprofile_client_hello(out, sizeof out, "", r, sid, key), 0);
}

static void test_flight_openssl_shape(void **state)
{
    (void)state;
    static uint8_t buf[20000];
    const uint16_t recs[] = {25, 3001, 264, 53};
    size_t n = flight(buf, recs, 4, 1, 1);
    struct tlsprofile p;
    struct tlsprofile_flight f;
    assert_int_equal(tlsprofile_parse_flight(buf, n, &p, &f), FAKETLS_OK);
    assert_int_equal(f.consumed, n);
    assert_int_equal(p.version, 0x0304);
    assert_int_equal(p.cipher, 0x1301);
    assert_int_equal(p.ccs, 1);
    assert_int_equal(p.next, 2);
    assert_int_equal(p.ext[0], 0x002b);
    assert_int_equal(p.ext[1], 0x0033);
    assert_int_equal(tlsprofile_ext_order(&p), FAKETLS_VERSIONS_FIRST);
    assert_int_equal(p.nrec, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(p.rec_min[i], recs[i]);
    /* every shorter prefix asks for more, never claims more than is there */
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(tlsprofile_parse_flight(buf, k, &p, &f), FAKETLS_NEED_MORE);
        assert_true(f.need >= 1);
        assert_true(f.consumed <= k);
    }
    /* one single record, sent as the whole flight: only the quiet after it tells */
    const uint16_t packed[] = {3500};
    n = flight(buf, packed, 1, 1, 0);
    assert_int_equal(tlsprofile_parse_flight(buf, n, &p, &f), FAKETLS_NEED_MORE);
    assert_int_equal(f.quiet_ok, 1);
    assert_int_equal(f.consumed, n);
    assert_int_equal(p.nrec, 1);
    assert_int_equal(tlsprofile_ext_order(&p), FAKETLS_KEY_SHARE_FIRST);
    size_t lo, hi;
    tlsprofile_appdata_range(&p, 0, &lo, &hi);
    assert_int_equal(lo, 3500);
    assert_int_equal(hi, 3500);
}

static void test_flight_bad(void **state)
{
    (void)state;
    uint8_t buf[4096];
    struct tlsprofile p;
    struct tlsprofile_flight f;
    static const uint8_t alert[7] = {0x15, 3, 3, 0, 2, 2, 0x28};
    assert_int_equal(tlsprofile_parse_flight(alert, 7, &p, &f), FAKETLS_BAD);
    assert_string_equal(f.why, "alert");
    size_t n = server_hello(buf, 1, 0x0303, 0xc02f);
    assert_int_equal(tlsprofile_parse_flight(buf, n, &p, &f), FAKETLS_BAD);
    assert_string_equal(f.why, "tls12");
    n = server_hello(buf, 1, 0x0304, 0x1301);
    static const uint8_t hrr[32] = {0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11,
                                    0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
                                    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e,
                                    0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c};
    memcpy(buf + 11, hrr, 32);
    assert_int_equal(tlsprofile_parse_flight(buf, n, &p, &f), FAKETLS_BAD);
    assert_string_equal(f.why, "hello-retry");
    n = server_hello(buf, 1, 0x0304, 0x1301);
    buf[n] = 0x16; /* a second plain handshake record where encrypted ones belong */
    memcpy(buf + n + 1, "\x03\x03\x00\x01\x00", 5);
    assert_int_equal(tlsprofile_parse_flight(buf, n + 6, &p, &f), FAKETLS_BAD);
    buf[9] = 2; /* ServerHello length no longer matches its record */
    assert_int_equal(tlsprofile_parse_flight(buf, n, &p, &f), FAKETLS_BAD);
}

static void test_text_round_trip(void **state)
{
    (void)state;
    static uint8_t buf[20000];
    const uint16_t recs[] = {32, 2210, 96, 53};
    size_t n = flight(buf, recs, 4, 1, 1);
    struct tlsprofile p, q, r;
    struct tlsprofile_flight f;
    assert_int_equal(tlsprofile_parse_flight(buf, n, &p, &f), FAKETLS_OK);
    snprintf(p.host, sizeof p.host, "site.example");
    p.learned = 1732480000;
    p.idle_close_ms = 60000;
    q = p;
    q.rec_min[2] = q.rec_max[2] = 98;
    assert_int_equal(tlsprofile_merge(&p, &q), 0);
    assert_int_equal(p.rec_min[2], 96);
    assert_int_equal(p.rec_max[2], 98);
    q.nrec = 3;
    assert_int_equal(tlsprofile_merge(&p, &q), -1);
    char text[TLSPROFILE_FILE_MAX];
    size_t tl = tlsprofile_format(&p, text, sizeof text);
    assert_true(tl > 0);
    assert_non_null(strstr(text, "records 32/32 2210/2210 96/98 53/53\n"));
    assert_int_equal(tlsprofile_parse_text(text, tl, &r), FAKETLS_OK);
    assert_string_equal(r.host, "site.example");
    assert_int_equal(r.learned, 1732480000);
    assert_int_equal(r.nrec, 4);
    assert_int_equal(r.rec_max[2], 98);
    assert_int_equal(r.ext[0], 0x002b);
    assert_int_equal(r.idle_close_ms, 60000);
    size_t lo, hi;
    tlsprofile_appdata_range(&r, 2, &lo, &hi);
    assert_int_equal(lo, 32 + 2210 + 96 + 53 + 3 * 5 - 2);
    assert_int_equal(hi, 32 + 2210 + 98 + 53 + 3 * 5 + 2);
    char d[256];
    assert_true(tlsprofile_describe(&r, 1732480060, d, sizeof d) > 0);
    assert_non_null(strstr(d, "site.example (learned 60s ago)"));
    assert_non_null(strstr(d, "96-98"));
    assert_int_equal(tlsprofile_format(&p, text, 20), 0);
    /* no extensions: written as a bare key, read back as none (found by fuzz_tlsprofile) */
    r.next = 0;
    tl = tlsprofile_format(&r, text, sizeof text);
    assert_non_null(strstr(text, "\nextensions\n"));
    assert_int_equal(tlsprofile_parse_text(text, tl, &q), FAKETLS_OK);
    assert_int_equal(q.next, 0);
    /* a repeated records line replaces the first whole (found by fuzz_tlsprofile) */
    static const char twice[] = "host a\nversion 0304\nrecords 10 20 30\nrecords 40\n";
    assert_int_equal(tlsprofile_parse_text(twice, strlen(twice), &q), FAKETLS_OK);
    assert_int_equal(q.nrec, 1);
    assert_int_equal(q.rec_max[0], 40);
    assert_int_equal(q.rec_min[1], 0);
    static const char *const bad[] = {
        "host a\nrecords\nversion 0304\n",        /* no records */
        "records 5\nversion 0304\n",              /* no host */
        "host a\nrecords 5/4\nversion 0304\n",    /* max below min */
        "host a\nrecords 0\nversion 0304\n",      /* empty record */
        "host a\nrecords 99999\nversion 0304\n",  /* over the limit */
        "host a\nrecords 5\nversion 0303\n",      /* not TLS 1.3 */
        "host a\nrecords 5x\nversion 0304\n",
        "host a b\nrecords 5\nversion 0304\n",
        "host a\nrecords 5\nversion 0304\nccs 2\n",
        "noval\n",
        "host\nrecords 5\nversion 0304\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(tlsprofile_parse_text(bad[i], strlen(bad[i]), &r), FAKETLS_BAD);
}

static void test_builtins(void **state)
{
    (void)state;
    assert_true(tlsprofile_builtin_count() >= 2);
    for (size_t i = 0; i < tlsprofile_builtin_count(); i++) {
        const struct tlsprofile *b = tlsprofile_builtin(i);
        size_t lo, hi;
        tlsprofile_appdata_range(b, 0, &lo, &hi);
        assert_true(lo >= 1000 && hi <= FAKETLS_MAX_CIPHERTEXT && lo <= hi);
        char text[TLSPROFILE_FILE_MAX];
        struct tlsprofile r;
        size_t tl = tlsprofile_format(b, text, sizeof text);
        assert_int_equal(tlsprofile_parse_text(text, tl, &r), FAKETLS_OK);
        assert_int_equal(r.nrec, b->nrec);
    }
    assert_null(tlsprofile_builtin(tlsprofile_builtin_count()));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_client_hello_is_a_hello),
        cmocka_unit_test(test_flight_openssl_shape),
        cmocka_unit_test(test_flight_bad),
        cmocka_unit_test(test_text_round_trip),
        cmocka_unit_test(test_builtins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
