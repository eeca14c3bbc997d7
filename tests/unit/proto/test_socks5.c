/* test_socks5.c: SOCKS5 URL parsing, greeting/auth/CONNECT bytes, replies and every failure code. */
#include "proto/socks5.h"

#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

static void test_url(void **state)
{
    (void)state;
    struct socks5_server s;
    char err[256];
    assert_int_equal(socks5_parse_url("socks5://127.0.0.1:1080", &s, err, sizeof err), 0);
    assert_string_equal(s.host, "127.0.0.1");
    assert_int_equal(s.port, 1080);
    assert_false(s.auth);
    assert_int_equal(socks5_parse_url("socks5://bob:s%3Acr%40t%25@[::1]:9050", &s, err,
                                      sizeof err), 0);
    assert_string_equal(s.host, "::1");
    assert_int_equal(s.port, 9050);
    assert_true(s.auth);
    assert_string_equal(s.user, "bob");
    assert_string_equal(s.pass, "s:cr@t%");
    assert_int_equal(socks5_parse_url("socks5://u:p:q@proxy.example:1", &s, err, sizeof err), 0);
    assert_string_equal(s.pass, "p:q");
    assert_string_equal(s.host, "proxy.example");

    const char *bad[] = {"http://127.0.0.1:1080", "socks5://127.0.0.1", "socks5://:1080",
                         "socks5://127.0.0.1:0", "socks5://127.0.0.1:65536",
                         "socks5://127.0.0.1:80x", "socks5://[::1:1080", "socks5://[nope]:1",
                         "socks5://user@127.0.0.1:1", "socks5://:p@127.0.0.1:1",
                         "socks5://u:@127.0.0.1:1", "socks5://u:%zz@127.0.0.1:1",
                         "socks5://u:%00@127.0.0.1:1", "socks5://u:%4@127.0.0.1:1",
                         "socks5://a b:1", "socks5://a/b:1", "socks5://1.2.3.4:5/"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        if (socks5_parse_url(bad[i], &s, err, sizeof err) != -1)
            fail_msg("accepted %s", bad[i]);
        assert_true(err[0] != 0);
    }
    char longuser[400] = "socks5://";
    memset(longuser + 9, 'u', 256);
    strcpy(longuser + 265, ":p@h:1");
    assert_int_equal(socks5_parse_url(longuser, &s, err, sizeof err), -1);
}

static void test_greeting_and_method(void **state)
{
    (void)state;
    struct socks5_server s = {.host = "h", .port = 1};
    uint8_t b[16];
    const char *why = NULL;
    int m = -1;
    assert_int_equal(socks5_greeting(&s, b, sizeof b), 3);
    assert_memory_equal(b, "\x05\x01\x00", 3);
    assert_int_equal(socks5_parse_method(&s, (const uint8_t *)"\x05", 1, &m, &why),
                     SOCKS5_NEED_MORE);
    assert_int_equal(socks5_parse_method(&s, (const uint8_t *)"\x05\x00", 2, &m, &why), SOCKS5_OK);
    assert_int_equal(m, 0);
    assert_int_equal(socks5_parse_method(&s, (const uint8_t *)"\x05\x02", 2, &m, &why),
                     SOCKS5_BAD); /* not offered */
    assert_int_equal(socks5_parse_method(&s, (const uint8_t *)"\x05\xff", 2, &m, &why), SOCKS5_BAD);
    assert_non_null(strstr(why, "requires a login"));
    assert_int_equal(socks5_parse_method(&s, (const uint8_t *)"\x04", 1, &m, &why), SOCKS5_BAD);

    strcpy(s.user, "alice");
    strcpy(s.pass, "pw");
    s.auth = 1;
    assert_int_equal(socks5_greeting(&s, b, sizeof b), 4);
    assert_memory_equal(b, "\x05\x02\x00\x02", 4);
    assert_int_equal(socks5_parse_method(&s, (const uint8_t *)"\x05\x02", 2, &m, &why), SOCKS5_OK);
    assert_int_equal(m, 2);
    assert_int_equal(socks5_parse_method(&s, (const uint8_t *)"\x05\xff", 2, &m, &why), SOCKS5_BAD);
    assert_non_null(strstr(why, "no username/password"));
    assert_int_equal(socks5_auth_request(&s, b, sizeof b), 10);
    assert_memory_equal(b, "\x01\x05" "alice" "\x02" "pw", 10);
    assert_int_equal(socks5_auth_request(&s, b, 9), 0);
    assert_int_equal(socks5_parse_auth((const uint8_t *)"\x01", 1, &why), SOCKS5_NEED_MORE);
    assert_int_equal(socks5_parse_auth((const uint8_t *)"\x01\x00", 2, &why), SOCKS5_OK);
    assert_int_equal(socks5_parse_auth((const uint8_t *)"\x01\x01", 2, &why), SOCKS5_BAD);
    assert_non_null(strstr(why, "refused the username/password"));
}

static void test_connect_request(void **state)
{
    (void)state;
    uint8_t b[300];
    struct sockaddr_storage a4 = sockaddr_of("192.0.2.51");
    ((struct sockaddr_in *)&a4)->sin_port = htons(443);
    assert_int_equal(socks5_connect_request((struct sockaddr *)&a4, NULL, 0, b, sizeof b), 10);
    assert_memory_equal(b, "\x05\x01\x00\x01\xc0\x00\x02\x33\x01\xbb", 10);
    struct sockaddr_storage a6 = sockaddr_of("2001:db8::1");
    ((struct sockaddr_in6 *)&a6)->sin6_port = htons(8443);
    assert_int_equal(socks5_connect_request((struct sockaddr *)&a6, NULL, 0, b, sizeof b), 22);
    assert_memory_equal(b, "\x05\x01\x00\x04\x20\x01\x0d\xb8", 8);
    assert_memory_equal(b + 20, "\x20\xfb", 2);
    assert_int_equal(socks5_connect_request(NULL, "www.example.com", 443, b, sizeof b), 22);
    assert_memory_equal(b, "\x05\x01\x00\x03\x0f" "www.example.com" "\x01\xbb", 22);
    assert_int_equal(socks5_connect_request(NULL, "x", 443, b, 7), 0);
    assert_int_equal(socks5_connect_request(NULL, "", 443, b, sizeof b), 0);
}

static void test_replies(void **state)
{
    (void)state;
    size_t used = 0;
    int code = -1;
    const char *why = NULL;
    static const uint8_t ok4[] = {5, 0, 0, 1, 10, 0, 0, 1, 0x30, 0x39, 'D', 'C'};
    for (size_t i = 0; i < 10; i++)
        assert_int_equal(socks5_parse_reply(ok4, i, &used, &code, &why), SOCKS5_NEED_MORE);
    assert_int_equal(socks5_parse_reply(ok4, sizeof ok4, &used, &code, &why), SOCKS5_OK);
    assert_int_equal(used, 10); /* the DC's first bytes after the reply are not consumed */
    static const uint8_t ok6[22] = {5, 0, 0, 4};
    assert_int_equal(socks5_parse_reply(ok6, 21, &used, &code, &why), SOCKS5_NEED_MORE);
    assert_int_equal(socks5_parse_reply(ok6, 22, &used, &code, &why), SOCKS5_OK);
    assert_int_equal(used, 22);
    static const uint8_t okname[] = {5, 0, 0, 3, 3, 'a', 'b', 'c', 0, 80};
    assert_int_equal(socks5_parse_reply(okname, sizeof okname, &used, &code, &why), SOCKS5_OK);
    assert_int_equal(used, 10);
    /* Each failure code gives its RFC 1928 text, as soon as the code byte is in. */
    const char *texts[] = {NULL, "general SOCKS server failure", "connection not allowed by ruleset",
                           "network unreachable", "host unreachable", "connection refused",
                           "TTL expired", "command not supported", "address type not supported"};
    for (int c = 1; c <= 8; c++) {
        uint8_t r[2] = {5, (uint8_t)c};
        assert_int_equal(socks5_parse_reply(r, 2, &used, &code, &why), SOCKS5_BAD);
        assert_int_equal(code, c);
        assert_string_equal(why, texts[c]);
    }
    uint8_t r9[2] = {5, 9};
    assert_int_equal(socks5_parse_reply(r9, 2, &used, &code, &why), SOCKS5_BAD);
    assert_string_equal(why, "unassigned reply code");
    static const uint8_t badver[] = {4, 0};
    assert_int_equal(socks5_parse_reply(badver, 2, &used, &code, &why), SOCKS5_BAD);
    static const uint8_t badrsv[] = {5, 0, 1};
    assert_int_equal(socks5_parse_reply(badrsv, 3, &used, &code, &why), SOCKS5_BAD);
    static const uint8_t badatyp[] = {5, 0, 0, 2, 0};
    assert_int_equal(socks5_parse_reply(badatyp, 5, &used, &code, &why), SOCKS5_BAD);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url),
        cmocka_unit_test(test_greeting_and_method),
        cmocka_unit_test(test_connect_request),
        cmocka_unit_test(test_replies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
