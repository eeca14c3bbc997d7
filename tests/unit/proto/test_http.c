/* test_http.c: the metrics server's request parser: good heads, each malformation, limits, split reads. */
#include "proto/http.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static enum http_status parse(const char *s, struct http_request *r)
{
    return http_parse_request((const uint8_t *)s, strlen(s), 4096, 32, r);
}

static void test_get(void **state)
{
    struct http_request r;
    const char *req = "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\nGET / HTTP/1.1\r\n";
    assert_int_equal(parse(req, &r), HTTP_OK);
    assert_int_equal(r.method, HTTP_GET);
    assert_int_equal(r.minor, 1);
    assert_string_equal(r.path, "/metrics");
    assert_int_equal(r.nheaders, 2);
    assert_int_equal(r.consumed, strlen("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n"));
    assert_false(r.has_token);
    assert_false(r.has_bearer);
}

static void test_tokens(void **state)
{
    struct http_request r;
    assert_int_equal(parse("HEAD /stats?a=1&token=ab%2Fc+d&b HTTP/1.0\r\n"
                           "authorization:   bearer  xyz  \r\n\r\n", &r), HTTP_OK);
    assert_int_equal(r.method, HTTP_HEAD);
    assert_string_equal(r.path, "/stats");
    assert_true(r.has_token);
    assert_string_equal(r.token, "ab/c d");
    assert_true(r.has_bearer);
    assert_string_equal(r.bearer, "xyz");
    assert_int_equal(parse("GET /?token=%zz HTTP/1.1\r\n\r\n", &r), HTTP_BAD);
    assert_int_equal(parse("GET /?token=%2 HTTP/1.1\r\n\r\n", &r), HTTP_BAD);
    assert_int_equal(parse("GET /?token=%00 HTTP/1.1\r\n\r\n", &r), HTTP_BAD);
    assert_int_equal(parse("GET / HTTP/1.1\r\nAuthorization: Bearer a\r\n"
                           "Authorization: Bearer b\r\n\r\n", &r), HTTP_BAD);
    assert_int_equal(parse("GET / HTTP/1.1\r\nAuthorization: Basic YQ==\r\n\r\n", &r), HTTP_OK);
    assert_false(r.has_bearer);
    assert_true(http_token_equal("abc", "abc"));
    assert_false(http_token_equal("abc", "abd"));
    assert_false(http_token_equal("abc", "abcd"));
    assert_false(http_token_equal("", "a"));
}

static void test_bad(void **state)
{
    static const struct {
        const char *req;
        int code;
    } cases[] = {
        {"POST / HTTP/1.1\r\n\r\n", 405},
        {"GET / HTTP/2.0\r\n\r\n", 505},
        {"GET / HTTP/1.2\r\n\r\n", 505},
        {"GET http://x/ HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTP/1.1\n\n", 400},
        {"GET  / HTTP/1.1\r\n\r\n", 400},
        {"GET /a b HTTP/1.1\r\n\r\n", 400},
        {"GET /\x01 HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n folded\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nNo colon\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n: empty\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nA\x01: b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 400},
        {"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", 400},
        {"\r\n", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct http_request r;
        assert_int_equal(parse(cases[i].req, &r), HTTP_BAD);
        assert_int_equal(r.code, cases[i].code);
        assert_non_null(r.why);
    }
    struct http_request r;
    assert_int_equal(parse("GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &r), HTTP_OK);
}

static void test_limits(void **state)
{
    struct http_request r;
    char big[8192];
    /* A path of HTTP_PATH_MAX bytes is too long. */
    int n = snprintf(big, sizeof big, "GET /%0*d HTTP/1.1\r\n\r\n", HTTP_PATH_MAX - 1, 0);
    assert_int_equal(http_parse_request((uint8_t *)big, (size_t)n, 4096, 32, &r), HTTP_BAD);
    assert_int_equal(r.code, 414);
    /* 33 headers with a cap of 32. */
    n = snprintf(big, sizeof big, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < 33; i++)
        n += snprintf(big + n, sizeof big - (size_t)n, "X-%d: y\r\n", i);
    n += snprintf(big + n, sizeof big - (size_t)n, "\r\n");
    assert_int_equal(http_parse_request((uint8_t *)big, (size_t)n, 4096, 32, &r), HTTP_BAD);
    assert_int_equal(r.code, 431);
    assert_int_equal(http_parse_request((uint8_t *)big, (size_t)n, 4096, 33, &r), HTTP_OK);
    /* A head that never ends within max. */
    memset(big, 'a', sizeof big);
    memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
    assert_int_equal(http_parse_request((uint8_t *)big, 100, 4096, 32, &r), HTTP_NEED_MORE);
    assert_int_equal(http_parse_request((uint8_t *)big, 4096, 4096, 32, &r), HTTP_BAD);
    assert_int_equal(r.code, 431);
    assert_int_equal(http_parse_request((uint8_t *)big, 5, 4, 32, &r), HTTP_BAD);
    assert_int_equal(r.code, 414);
}

/* Every prefix of a good head needs more; the whole parses; early bytes that no request
 * holds are BAD before the head ends. */
static void test_split(void **state)
{
    const char *req = "GET /stats?token=t HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer b\r\n\r\n";
    size_t n = strlen(req);
    struct http_request r;
    for (size_t i = 0; i < n; i++)
        assert_int_equal(http_parse_request((const uint8_t *)req, i, 4096, 32, &r),
                         HTTP_NEED_MORE);
    assert_int_equal(http_parse_request((const uint8_t *)req, n, 4096, 32, &r), HTTP_OK);
    assert_int_equal(parse("GET / HTTP/1.1\r\nX: a\0b", &r), HTTP_NEED_MORE); /* strlen stops */
    assert_int_equal(http_parse_request((const uint8_t *)"GET / HTTP/1.1\r\nX: a\0b", 23, 4096,
                                        32, &r), HTTP_BAD);
    assert_int_equal(parse("GET / HTTP/1.1\r\nX: a\rb", &r), HTTP_BAD);
    assert_int_equal(parse("BREW / HTTP/1.1\r\n", &r), HTTP_BAD);
}

/* Host is taken (trimmed, as sent); a second one or an overlong one is BAD. */
static void test_host(void **state)
{
    struct http_request r;
    assert_int_equal(parse("GET / HTTP/1.1\r\nhOsT:  Evil.Example:19090 \r\n\r\n", &r), HTTP_OK);
    assert_true(r.has_host);
    assert_string_equal(r.host, "Evil.Example:19090");
    assert_int_equal(parse("GET / HTTP/1.0\r\n\r\n", &r), HTTP_OK);
    assert_false(r.has_host);
    assert_string_equal(r.host, "");
    assert_int_equal(parse("GET / HTTP/1.1\r\nHost: a\r\nHost: localhost\r\n\r\n", &r),
                     HTTP_BAD);
    assert_int_equal(r.code, 400);
    char req[600];
    snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: %0*d\r\n\r\n", HTTP_HOST_MAX, 0);
    assert_int_equal(parse(req, &r), HTTP_BAD);
    snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: %0*d\r\n\r\n", HTTP_HOST_MAX - 1, 0);
    assert_int_equal(parse(req, &r), HTTP_OK);
}

static enum http_status parse_body(const char *s, size_t max_body, struct http_request *r)
{
    return http_parse_request_body((const uint8_t *)s, strlen(s), 4096, 32, max_body, r);
}

/* The API's form: methods with a body of Content-Length bytes, bounded. */
static void test_body(void **state)
{
    struct http_request r;
    const char *req = "POST /api/v1/users HTTP/1.1\r\nContent-Length: 10\r\n\r\n{\"name\":1}";
    assert_int_equal(parse_body(req, 64, &r), HTTP_OK);
    assert_int_equal(r.method, HTTP_POST);
    assert_int_equal(r.content_length, 10);
    assert_int_equal(r.consumed, strlen(req) - 10);
    assert_int_equal(parse_body("PATCH /x HTTP/1.1\r\n\r\n", 64, &r), HTTP_OK);
    assert_int_equal(r.method, HTTP_PATCH);
    assert_int_equal(r.content_length, 0);
    assert_int_equal(parse_body("DELETE /x HTTP/1.1\r\ncontent-length: 0\r\n\r\n", 64, &r),
                     HTTP_OK);
    assert_int_equal(r.method, HTTP_DELETE);
    assert_int_equal(parse_body("PUT /x HTTP/1.1\r\n\r\n", 64, &r), HTTP_OK);
    assert_int_equal(r.method, HTTP_PUT);
    /* without max_body: as before, GET and HEAD only and no body */
    assert_int_equal(parse_body(req, 0, &r), HTTP_BAD);
    assert_int_equal(r.code, 405);
    assert_int_equal(parse("GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\n", &r), HTTP_BAD);
    /* too large, malformed, repeated, chunked */
    assert_int_equal(parse_body("POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n", 64, &r),
                     HTTP_BAD);
    assert_int_equal(r.code, 413);
    assert_int_equal(parse_body("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n"
                                "\r\n", 64, &r), HTTP_BAD);
    assert_int_equal(r.code, 413);
    assert_int_equal(parse_body("POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 64, &r),
                     HTTP_BAD);
    assert_int_equal(r.code, 400);
    assert_int_equal(parse_body("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 64, &r),
                     HTTP_BAD);
    assert_int_equal(parse_body("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", 64, &r),
                     HTTP_BAD);
    assert_int_equal(parse_body("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1"
                                "\r\n\r\n", 64, &r), HTTP_BAD);
    assert_int_equal(parse_body("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 64,
                                &r), HTTP_BAD);
    assert_int_equal(parse_body("TRACE / HTTP/1.1\r\n\r\n", 64, &r), HTTP_BAD);
    assert_int_equal(r.code, 405);
}

static void test_header(void **state)
{
    struct http_request r;
    const char *req = "POST /up HTTP/1.1\r\nX-Up-Seq:  12 \r\nx-a: 1\r\nX-A: 2\r\n"
                      "X-Empty:\r\n\r\n";
    assert_int_equal(parse_body(req, 64, &r), HTTP_OK);
    const char *v = NULL;
    size_t vn = 0;
    assert_int_equal(http_header((const uint8_t *)req, r.consumed, "x-up-seq", &v, &vn), 1);
    assert_int_equal(vn, 2);
    assert_memory_equal(v, "12", 2);
    assert_int_equal(http_header((const uint8_t *)req, r.consumed, "x-a", &v, &vn), 2);
    assert_memory_equal(v, "1", 1);
    assert_int_equal(http_header((const uint8_t *)req, r.consumed, "x-empty", &v, &vn), 1);
    assert_int_equal(vn, 0);
    assert_int_equal(http_header((const uint8_t *)req, r.consumed, "x-up", &v, &vn), 0);
    assert_int_equal(http_header((const uint8_t *)req, r.consumed, "post /up http/1.1", &v,
                                 &vn), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get),    cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_bad),    cmocka_unit_test(test_limits),
        cmocka_unit_test(test_split),  cmocka_unit_test(test_host),
        cmocka_unit_test(test_body),   cmocka_unit_test(test_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
