/* test_webcap.c: WEB bridge capability: the contract's vectors, host rules, base64url, matching. */
#include "proto/webcap.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "proto/secret.h"

/* The normative vectors of tproxy-server's PLAN.md 3.2 and PROTOCOL.md ("Bridge URL"). */
#define VEC_HOST "proxy.example.com"
#define VEC_PLAIN "MHLEY5PmW1GWqJkSrlmJpvJUiLhBH_QKy6yKg8a0JPk"
#define VEC_DD "IpJrt3e7sKtzPyoXy6w-Zj6GGEvsvclN66JzQEfPYLA"

static void test_vectors(void **state)
{
    (void)state;
    uint8_t key[17];
    char cap[WEBCAP_LEN + 1];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    assert_int_equal(webcap_derive(key, 16, VEC_HOST, cap), 0);
    assert_string_equal(cap, VEC_PLAIN);
    key[0] = 0xdd;
    for (int i = 0; i < 16; i++)
        key[i + 1] = (uint8_t)i;
    assert_int_equal(webcap_derive(key, 17, VEC_HOST, cap), 0);
    assert_string_equal(cap, VEC_DD);
    /* The host is canonicalised first: case and a trailing dot do not change it. */
    assert_int_equal(webcap_derive(key, 17, "Proxy.EXAMPLE.com.", cap), 0);
    assert_string_equal(cap, VEC_DD);
}

static void test_from_secret(void **state)
{
    (void)state;
    struct secret s;
    char err[256], cap[WEBCAP_LEN + 1];
    uint8_t key[WEBCAP_SECRET_MAX];
    /* Hex and base64url spellings of the same bytes derive the same capability. */
    const char *texts[] = {"000102030405060708090a0b0c0d0e0f", "AAECAwQFBgcICQoLDA0ODw",
                           "dd000102030405060708090a0b0c0d0e0f", "3QABAgMEBQYHCAkKCwwNDg8"};
    const char *want[] = {VEC_PLAIN, VEC_PLAIN, VEC_DD, VEC_DD};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(secret_parse("w", texts[i], &s, err, sizeof err), 0);
        int n = webcap_secret_bytes(&s, key);
        assert_int_equal(n, i < 2 ? 16 : 17);
        assert_int_equal(webcap_derive(key, (size_t)n, VEC_HOST, cap), 0);
        assert_string_equal(cap, want[i]);
    }
    assert_int_equal(secret_parse("w", "ee000102030405060708090a0b0c0d0e0f6578616d706c652e636f6d",
                                  &s, err, sizeof err), 0);
    assert_int_equal(webcap_secret_bytes(&s, key), -1);
}

static void test_host(void **state)
{
    (void)state;
    char h[WEBCAP_HOST_MAX + 1];
    assert_int_equal(webcap_host("Site.Example", 12, h, sizeof h), 12);
    assert_string_equal(h, "site.example");
    assert_int_equal(webcap_host("a-b.xn--p1ai.", 13, h, sizeof h), 12);
    assert_string_equal(h, "a-b.xn--p1ai");
    assert_int_equal(webcap_host("1.2.3.example", 13, h, sizeof h), 13);
    const char *bad[] = {"", ".", "localhost", "a..b", ".a.b", "a.b..", "-a.b", "a-.b", "a_b.c",
                         "1.2.3.4", "[::1]", "a.b:443", "a b.c", "h\xc3\xa9.example", "a.b/c",
                         "user@a.b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (webcap_host(bad[i], strlen(bad[i]), h, sizeof h) != -1)
            fail_msg("accepted host \"%s\"", bad[i]);
    char longname[300];
    memset(longname, 'a', sizeof longname);
    longname[64] = '.';
    assert_int_equal(webcap_host(longname, 66, h, sizeof h), -1); /* a 64-character label */
    longname[64] = 'a';
    for (size_t i = 63; i < 260; i += 64)
        longname[i] = '.';
    assert_int_equal(webcap_host(longname + 1, 253, h, sizeof h), 253);
    assert_int_equal(webcap_host(longname + 1, 254, h, sizeof h), -1);
    assert_int_equal(webcap_host("a.bc", 4, h, 4), -1); /* no room for the NUL */
    char cap[WEBCAP_LEN + 1];
    uint8_t key[16] = {0};
    assert_int_equal(webcap_derive(key, 16, "127.0.0.1", cap), -1);
    assert_string_equal(cap, "");
}

static void test_b64url(void **state)
{
    (void)state;
    char out[16];
    /* RFC 4648 section 10's vectors, unpadded, and the two URL-safe characters. */
    const char *in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar", "\xfb\xff"};
    const char *want[] = {"", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmE", "Zm9vYmFy", "-_8"};
    for (size_t i = 0; i < 8; i++) {
        size_t n = strlen(in[i]);
        assert_int_equal(webcap_b64url((const uint8_t *)in[i], n, out, sizeof out),
                         strlen(want[i]));
        assert_string_equal(out, want[i]);
    }
    assert_int_equal(webcap_b64url((const uint8_t *)"foo", 3, out, 4), 0);
    assert_string_equal(out, "");
    assert_int_equal(webcap_b64url((const uint8_t *)"foo", 3, out, 5), 4);
}

static void test_match(void **state)
{
    (void)state;
    char caps[3][WEBCAP_LEN + 1] = {VEC_PLAIN, VEC_DD, VEC_PLAIN};
    assert_int_equal(webcap_match(VEC_DD, WEBCAP_LEN, caps[1]), 1);
    assert_int_equal(webcap_match(VEC_PLAIN, WEBCAP_LEN, caps[1]), 0);
    assert_int_equal(webcap_match(VEC_DD, WEBCAP_LEN - 1, caps[1]), 0);
    assert_int_equal(webcap_match(VEC_DD "A", WEBCAP_LEN + 1, caps[1]), 0);
    char last[WEBCAP_LEN + 1];
    memcpy(last, VEC_DD, sizeof last);
    last[WEBCAP_LEN - 1] = 'B'; /* the same 32 bytes except the unused low bits */
    assert_int_equal(webcap_match(last, WEBCAP_LEN, caps[1]), 0);
    assert_int_equal(webcap_find(VEC_DD, WEBCAP_LEN, caps, 3), 1);
    assert_int_equal(webcap_find(VEC_PLAIN, WEBCAP_LEN, caps, 3), 2);
    assert_int_equal(webcap_find(last, WEBCAP_LEN, caps, 3), -1);
    assert_int_equal(webcap_find(VEC_DD, WEBCAP_LEN, caps, 0), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors), cmocka_unit_test(test_from_secret),
        cmocka_unit_test(test_host),    cmocka_unit_test(test_b64url),
        cmocka_unit_test(test_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
