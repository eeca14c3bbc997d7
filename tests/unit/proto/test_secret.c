/* test_secret.c: secret parsing (hex, base64url, named), error messages, hex and link output. */
#include "proto/secret.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"


/* The MTG docs/tests secret (PROTOCOL.md 2 and 9.2): ee | key | "storage.googleapis.com". */
#define KEY_HEX "367a189aee18fa31c190054efd4a8e95"
#define KEY_HEX_UPPER "367A189AEE18FA31C190054EFD4A8E95"
#define DOMAIN_HEX "73746f726167652e676f6f676c65617069732e636f6d"
#define EE_HEX "ee" KEY_HEX DOMAIN_HEX
/* RFC 4648 section 5 unpadded encodings of the same binary forms (Python base64). */
#define PLAIN_B64 "NnoYmu4Y-jHBkAVO_UqOlQ"
#define DD_B64 "3TZ6GJruGPoxwZAFTv1KjpU"
#define EE_B64 "7jZ6GJruGPoxwZAFTv1KjpVzdG9yYWdlLmdvb2dsZWFwaXMuY29t"

static void assert_key(const struct secret *s, const char *hex) {
    uint8_t key[SECRET_KEY_LEN];
    unhex(hex, key);
    assert_memory_equal(s->key, key, SECRET_KEY_LEN);
}

static void test_plain(void **state) {
    struct secret s;
    char err[256];
    memset(&s, 0x5a, sizeof(s));
    assert_int_equal(secret_parse(NULL, KEY_HEX, &s, err, sizeof(err)), 0);
    assert_int_equal(s.kind, SECRET_PLAIN);
    assert_key(&s, KEY_HEX);
    assert_string_equal(s.name, "");
    assert_string_equal(s.domain, "");

    memset(&s, 0, sizeof(s));
    assert_int_equal(secret_parse("alice", KEY_HEX_UPPER, &s, err, sizeof(err)), 0);
    assert_int_equal(s.kind, SECRET_PLAIN);
    assert_key(&s, KEY_HEX);
    assert_string_equal(s.name, "alice");
}

static void test_dd(void **state) {
    struct secret s;
    char err[256];
    assert_int_equal(secret_parse(NULL, "dd" KEY_HEX, &s, err, sizeof(err)), 0);
    assert_int_equal(s.kind, SECRET_DD);
    assert_key(&s, KEY_HEX);
    assert_string_equal(s.domain, "");

    memset(&s, 0, sizeof(s));
    assert_int_equal(secret_parse(NULL, "DD" KEY_HEX_UPPER, &s, err, sizeof(err)), 0);
    assert_int_equal(s.kind, SECRET_DD);
    assert_key(&s, KEY_HEX);
}

static void test_ee(void **state) {
    struct secret s;
    char err[256];
    assert_int_equal(secret_parse(NULL, EE_HEX, &s, err, sizeof(err)), 0);
    assert_int_equal(s.kind, SECRET_EE);
    assert_key(&s, KEY_HEX);
    assert_string_equal(s.domain, "storage.googleapis.com");

    /* mixed case hex; single-label domain "localhost"; underscore allowed */
    memset(&s, 0, sizeof(s));
    assert_int_equal(
        secret_parse(NULL, "EE" KEY_HEX_UPPER "6C6F63616C686F7374", &s, err, sizeof(err)), 0);
    assert_string_equal(s.domain, "localhost");
    assert_int_equal(secret_parse(NULL, "ee" KEY_HEX "615f622e6333", &s, err, sizeof(err)), 0);
    assert_string_equal(s.domain, "a_b.c3");
}

static void test_base64url(void **state) {
    struct secret s;
    char err[256];
    memset(&s, 0, sizeof(s));
    assert_int_equal(secret_parse(NULL, PLAIN_B64, &s, err, sizeof(err)), 0);
    assert_int_equal(s.kind, SECRET_PLAIN);
    assert_key(&s, KEY_HEX);

    memset(&s, 0, sizeof(s));
    assert_int_equal(secret_parse(NULL, DD_B64, &s, err, sizeof(err)), 0);
    assert_int_equal(s.kind, SECRET_DD);
    assert_key(&s, KEY_HEX);

    memset(&s, 0, sizeof(s));
    assert_int_equal(secret_parse(NULL, EE_B64, &s, err, sizeof(err)), 0);
    assert_int_equal(s.kind, SECRET_EE);
    assert_key(&s, KEY_HEX);
    assert_string_equal(s.domain, "storage.googleapis.com");
}

static void test_hex_wins(void **state) {
    struct secret s;
    char err[256];
    /* 32 hex digits are also 32 base64url characters (24 bytes): read as hex */
    assert_int_equal(secret_parse(NULL, "00112233445566778899aabbccddeeff", &s, err, sizeof(err)),
                     0);
    assert_int_equal(s.kind, SECRET_PLAIN);
    assert_key(&s, "00112233445566778899aabbccddeeff");

    /* 22 hex digits are 11 bytes as hex (no form) but 16 bytes as base64url: read as base64url
     * (expected bytes from Python base64.urlsafe_b64decode) */
    memset(&s, 0, sizeof(s));
    assert_int_equal(secret_parse(NULL, "0123456789abcdef012345", &s, err, sizeof(err)), 0);
    assert_int_equal(s.kind, SECRET_PLAIN);
    assert_key(&s, "d35db7e39ebbf3d69b71d79fd35db7e3");
}

static void test_named(void **state) {
    struct secret s;
    char err[256];
    assert_int_equal(secret_parse_named("bob.2-x_y:dd" KEY_HEX, &s, err, sizeof(err)), 0);
    assert_string_equal(s.name, "bob.2-x_y");
    assert_int_equal(s.kind, SECRET_DD);
    assert_key(&s, KEY_HEX);

    assert_int_equal(secret_parse_named("tls:" EE_B64, &s, err, sizeof(err)), 0);
    assert_string_equal(s.name, "tls");
    assert_string_equal(s.domain, "storage.googleapis.com");

    /* longest name: 63 characters */
    char text[128];
    snprintf(text, sizeof(text), "%063d:%s", 7, KEY_HEX);
    assert_int_equal(secret_parse_named(text, &s, err, sizeof(err)), 0);
    assert_int_equal(strlen(s.name), 63);
}

/* Expects secret_parse (name, text) to fail, leave *out alone, and say something containing
 * want. */
static void expect_error(const char *name, const char *text, const char *want) {
    struct secret s, before;
    char err[512];
    memset(&s, 0x5a, sizeof(s));
    memcpy(&before, &s, sizeof(s));
    err[0] = '\0';
    assert_int_equal(secret_parse(name, text, &s, err, sizeof(err)), -1);
    if (!strstr(err, want))
        fail_msg("error for \"%s\" is \"%s\", expected it to contain \"%s\"", text, err, want);
    assert_memory_equal(&s, &before, sizeof(s));
}

static void expect_named_error(const char *text, const char *want) {
    struct secret s;
    char err[512];
    err[0] = '\0';
    assert_int_equal(secret_parse_named(text, &s, err, sizeof(err)), -1);
    if (!strstr(err, want))
        fail_msg("error for \"%s\" is \"%s\", expected it to contain \"%s\"",
                 text ? text : "(null)", err, want);
}

static void test_error_length(void **state) {
    struct secret s;
    char err[256];
    assert_int_equal(secret_parse(NULL, "367a189aee18fa31c190054efd4a8e", &s, err, sizeof(err)),
                     -1);
    assert_string_equal(err, "secret must be 32 hex digits, dd + 32 hex digits, or ee + 32 hex "
                             "digits + hex domain (got 30 characters)");
    expect_error(NULL, KEY_HEX "5", "(got 33 characters)");
    expect_error(NULL, "ab" KEY_HEX, "a secret of 34 hex digits must start with dd (got ab)");
    expect_error(NULL, "dd" KEY_HEX "00",
                 "dd secret must be dd + exactly 32 hex digits "
                 "(got 36 characters)");
    expect_error(NULL, "", "secret is empty");
    expect_error(NULL, NULL, "secret is empty");
    /* base64url-looking text of the wrong size */
    expect_error(NULL, "QQQQQ", "base64url secret has an impossible length (5 characters)");
    expect_error(NULL, "QQQQQQ",
                 "base64url secret must decode to 16 bytes, dd + 16 bytes, or "
                 "ee + 16 bytes + domain (got 4 bytes)");
    expect_error(NULL, "3TZ6GJruGPoxwZAFTv1KjpUA",
                 "dd secret must decode to dd + exactly 16 "
                 "bytes (got 18 bytes)");
}

static void test_error_characters(void **state) {
    expect_error(NULL, "367a189aee18fa31c190054efd4a8e9g",
                 "secret is not valid hex: character 32 ('g') is not a hex digit");
    expect_error(NULL, "dd367a189aee18fa31c190054efd4a8e9x",
                 "character 34 ('x') is not a hex digit");
    expect_error(NULL, "367a189aee18fa31 c190054efd4a8e95",
                 "secret has invalid character 0x20 at character 17");
    expect_error(NULL, "NnoYmu4Y+jHBkAVO/UqOlQ",
                 "'+' at character 9: base64 secrets must use "
                 "the URL-safe alphabet");
    expect_error(NULL, "NnoYmu4Y-jHBkAVO_UqOlQ==",
                 "'=' at character 23: base64url secrets are "
                 "written without padding");
}

static void test_error_ee_domain(void **state) {
    expect_error(NULL, "ee" KEY_HEX, "ee secret has no domain");
    expect_error(NULL, "ee" KEY_HEX_UPPER, "ee secret has no domain");
    expect_error(NULL, "7jZ6GJruGPoxwZAFTv1KjpU", "ee secret has no domain"); /* base64url */
    /* "exa mple.com" */
    expect_error(NULL, "ee" KEY_HEX "657861206d706c652e636f6d",
                 "ee secret domain has invalid character 0x20 at position 4");
    /* "a..b" and ".a" */
    expect_error(NULL, "ee" KEY_HEX "612e2e62", "ee secret domain \"a..b\" has an empty label");
    expect_error(NULL, "ee" KEY_HEX "2e61", "has an empty label");
    /* "-a.b" */
    expect_error(NULL, "ee" KEY_HEX "2d612e62", "label starting or ending with '-'");
    /* a 0x00 byte inside the domain */
    expect_error(NULL, "ee" KEY_HEX "610062", "invalid character 0x00 at position 2");

    /* 182 bytes (three 60-byte labels and two dots) is the limit; 183 is one too many */
    char text[2 + 32 + 2 * 183 + 1];
    char *p = text + sprintf(text, "ee%s", KEY_HEX);
    for (int i = 0; i < 182; i++)
        p += sprintf(p, "%s", (i == 60 || i == 121) ? "2e" : "61");
    struct secret s;
    char err[256];
    assert_int_equal(secret_parse(NULL, text, &s, err, sizeof(err)), 0);
    assert_int_equal(strlen(s.domain), 182);
    sprintf(p, "61");
    expect_error(NULL, text, "ee secret domain is 183 bytes long; the limit is 182");

    /* a 64-character label */
    p = text + sprintf(text, "ee%s", KEY_HEX);
    for (int i = 0; i < 64; i++)
        p += sprintf(p, "61");
    expect_error(NULL, text, "a label of 64 characters; the limit is 63");
}

static void test_error_names(void **state) {
    expect_error("bad name", KEY_HEX, "secret name has invalid character 0x20");
    expect_error("caf\xc3\xa9", KEY_HEX, "secret name has invalid character 0xc3");
    expect_error("a/b", KEY_HEX, "secret name has invalid character '/'");
    expect_error("", KEY_HEX, "secret name is empty");
    char name[80];
    memset(name, 'n', 64);
    name[64] = '\0';
    expect_error(name, KEY_HEX, "secret name is 64 characters long; the limit is 63");

    expect_named_error("alice" KEY_HEX, "expected NAME:SECRET, but there is no ':'");
    expect_named_error(NULL, "expected NAME:SECRET");
    expect_named_error(":" KEY_HEX, "secret name is empty (expected NAME:SECRET)");
    expect_named_error("al ice:" KEY_HEX, "secret name has invalid character 0x20");
    expect_named_error("alice:", "secret is empty");
    expect_named_error("alice:" KEY_HEX ":x", "secret has invalid character ':'");
}

static void test_error_buffer_small(void **state) {
    /* a tiny or absent error buffer is not overrun */
    struct secret s;
    char err[8];
    memset(err, 'x', sizeof(err));
    assert_int_equal(secret_parse(NULL, "zz", &s, err, 4), -1);
    assert_int_equal(err[3], '\0');
    assert_int_equal(err[4], 'x');
    assert_int_equal(secret_parse(NULL, "zz", &s, NULL, 0), -1);
}

static void test_hex_round_trip(void **state) {
    static const char *const inputs[] = {KEY_HEX_UPPER, ("Dd" KEY_HEX), EE_B64, DD_B64};
    static const char *const outputs[] = {KEY_HEX, ("dd" KEY_HEX), EE_HEX, ("dd" KEY_HEX)};
    for (size_t i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
        struct secret s, again;
        char err[256], hex[SECRET_HEX_MAX];
        assert_int_equal(secret_parse(NULL, inputs[i], &s, err, sizeof(err)), 0);
        int n = secret_to_hex(&s, hex, sizeof(hex));
        assert_int_equal(n, (int)strlen(outputs[i]));
        assert_string_equal(hex, outputs[i]);
        assert_int_equal(secret_parse(NULL, hex, &again, err, sizeof(err)), 0);
        assert_memory_equal(&again, &s, sizeof(s));

        /* exactly enough room, then one byte short */
        char exact[SECRET_HEX_MAX];
        assert_int_equal(secret_to_hex(&s, exact, (size_t)n + 1), n);
        assert_string_equal(exact, outputs[i]);
        assert_int_equal(secret_to_hex(&s, exact, (size_t)n), -1);
    }

    /* the longest form fits SECRET_HEX_MAX */
    struct secret s;
    memset(&s, 0, sizeof(s));
    s.kind = SECRET_EE;
    memset(s.domain, 'a', SECRET_DOMAIN_MAX);
    s.domain[SECRET_DOMAIN_MAX] = '\0';
    char hex[SECRET_HEX_MAX];
    assert_int_equal(secret_to_hex(&s, hex, sizeof(hex)), SECRET_HEX_MAX - 1);
    /* an ee secret without a domain is not a secret */
    s.domain[0] = '\0';
    assert_int_equal(secret_to_hex(&s, hex, sizeof(hex)), -1);
}

static void test_links(void **state) {
    struct secret s;
    char err[256], tg[600], https[600];
    assert_int_equal(secret_parse(NULL, EE_HEX, &s, err, sizeof(err)), 0);
    assert_int_equal(
        secret_links(&s, "proxy.example.org", 443, tg, sizeof(tg), https, sizeof(https)), 0);
    assert_string_equal(tg, "tg://proxy?server=proxy.example.org&port=443&secret=" EE_HEX);
    assert_string_equal(https,
                        "https://t.me/proxy?server=proxy.example.org&port=443&secret=" EE_HEX);

    assert_int_equal(secret_parse(NULL, "dd" KEY_HEX, &s, err, sizeof(err)), 0);
    assert_int_equal(secret_links(&s, "192.0.2.7", 8443, tg, sizeof(tg), https, sizeof(https)), 0);
    assert_string_equal(tg, "tg://proxy?server=192.0.2.7&port=8443&secret=dd" KEY_HEX);
    assert_string_equal(https, "https://t.me/proxy?server=192.0.2.7&port=8443&secret=dd" KEY_HEX);

    /* IPv6: bare, with or without brackets given */
    assert_int_equal(secret_parse(NULL, KEY_HEX, &s, err, sizeof(err)), 0);
    assert_int_equal(secret_links(&s, "[2001:db8::1]", 1, tg, sizeof(tg), https, sizeof(https)), 0);
    assert_string_equal(tg, "tg://proxy?server=2001:db8::1&port=1&secret=" KEY_HEX);
    assert_string_equal(https, "https://t.me/proxy?server=2001:db8::1&port=1&secret=" KEY_HEX);
    assert_int_equal(secret_links(&s, "2001:db8::1", 65535, tg, sizeof(tg), https, sizeof(https)),
                     0);
    assert_string_equal(tg, "tg://proxy?server=2001:db8::1&port=65535&secret=" KEY_HEX);

    /* characters that would break the query are percent-encoded */
    assert_int_equal(secret_links(&s, "a&b c%", 443, tg, sizeof(tg), https, sizeof(https)), 0);
    assert_string_equal(tg, "tg://proxy?server=a%26b%20c%25&port=443&secret=" KEY_HEX);
}

static void test_web_links(void **state) {
    struct secret s;
    char err[256], tg[600], https[600];
    assert_int_equal(secret_parse(NULL, "dd" KEY_HEX, &s, err, sizeof(err)), 0);
    assert_int_equal(secret_web_links(&s, "proxy.example.org", tg, sizeof tg, https, sizeof https),
                     0);
    assert_string_equal(tg, "tg://webproxy?server=proxy.example.org&secret=dd" KEY_HEX);
    assert_string_equal(https, "https://t.me/webproxy?server=proxy.example.org&secret=dd" KEY_HEX);
    assert_int_equal(secret_parse(NULL, KEY_HEX, &s, err, sizeof(err)), 0);
    assert_int_equal(secret_web_links(&s, "p.example", tg, sizeof tg, https, sizeof https), 0);
    assert_string_equal(tg, "tg://webproxy?server=p.example&secret=" KEY_HEX);
    assert_int_equal(secret_web_links(&s, "", tg, sizeof tg, https, sizeof https), -1);
    assert_int_equal(secret_parse(NULL, EE_HEX, &s, err, sizeof(err)), 0);
    assert_int_equal(secret_web_links(&s, "p.example", tg, sizeof tg, https, sizeof https), -1);
}

static void test_links_errors(void **state) {
    struct secret s;
    char err[256], tg[200], https[200];
    assert_int_equal(secret_parse(NULL, KEY_HEX, &s, err, sizeof(err)), 0);
    const char *expect = "https://t.me/proxy?server=h&port=443&secret=" KEY_HEX;
    size_t need = strlen(expect) + 1;
    /* exactly enough for the https link; one less fails */
    assert_int_equal(secret_links(&s, "h", 443, tg, sizeof(tg), https, need), 0);
    assert_string_equal(https, expect);
    assert_int_equal(secret_links(&s, "h", 443, tg, sizeof(tg), https, need - 1), -1);
    assert_int_equal(secret_links(&s, "h", 443, tg, 10, https, sizeof(https)), -1);
    assert_int_equal(secret_links(&s, "h", 443, tg, 0, https, sizeof(https)), -1);
    assert_int_equal(secret_links(&s, "h", 0, tg, sizeof(tg), https, sizeof(https)), -1);
    assert_int_equal(secret_links(&s, "h", 65536, tg, sizeof(tg), https, sizeof(https)), -1);
    assert_int_equal(secret_links(&s, "", 443, tg, sizeof(tg), https, sizeof(https)), -1);
    assert_int_equal(secret_links(&s, NULL, 443, tg, sizeof(tg), https, sizeof(https)), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_dd),
        cmocka_unit_test(test_ee),
        cmocka_unit_test(test_base64url),
        cmocka_unit_test(test_hex_wins),
        cmocka_unit_test(test_named),
        cmocka_unit_test(test_error_length),
        cmocka_unit_test(test_error_characters),
        cmocka_unit_test(test_error_ee_domain),
        cmocka_unit_test(test_error_names),
        cmocka_unit_test(test_error_buffer_small),
        cmocka_unit_test(test_hex_round_trip),
        cmocka_unit_test(test_links),
        cmocka_unit_test(test_web_links), cmocka_unit_test(test_links_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
