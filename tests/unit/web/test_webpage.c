/* test_webpage.c: the bridge page: one bootstrap token in a Bearer literal, CSP nonce, no URLs. */
#include "web/webpage.h"

#include "proto/webcap.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#define TOKEN "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcde"
#define HOST "proxy.example.com"

static int b64url(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

/* Checks every run of 43 or more base64url characters in p is exactly the token; returns how
 * many there are. */
static int token_runs(const char *p, const char *token)
{
    int n = 0;
    while (*p) {
        size_t k = 0;
        while (b64url(p[k]))
            k++;
        if (k >= 43) {
            assert_int_equal(k, 43);
            assert_memory_equal(p, token, 43);
            n++;
        }
        p += k ? k : 1;
    }
    return n;
}

static void test_page(void **state)
{
    (void)state;
    struct sbuf b = {0};
    char csp[WEBPAGE_CSP_MAX];
    assert_int_equal(strlen(TOKEN), 43);
    assert_int_equal(webpage_render(TOKEN, WEBSESS_HTTPS, HOST, &b, csp), 0);
    const char *page = b.p;
    /* The token: once as bootstrap="...", once in the Bearer literal, nowhere else. */
    assert_int_equal(token_runs(page, TOKEN), 2);
    assert_non_null(strstr(page, "'Bearer " TOKEN "'"));
    assert_non_null(strstr(page, "bootstrap=\"" TOKEN "\""));
    assert_non_null(strstr(page, "const carrier = 'https';"));
    /* The CSP's nonce is the script tag's, and the only script is that one. */
    const char *n = strstr(csp, "'nonce-");
    assert_non_null(n);
    n += strlen("'nonce-");
    assert_int_equal(strcspn(n, "'"), WEBPAGE_NONCE_LEN);
    char tag[64];
    snprintf(tag, sizeof tag, "<script nonce=\"%.*s\">", WEBPAGE_NONCE_LEN, n);
    const char *script = strstr(page, "<script");
    assert_ptr_equal(script, strstr(page, tag));
    assert_null(strstr(script + 1, "<script"));
    assert_non_null(strstr(csp, "default-src 'none'"));
    assert_non_null(strstr(csp, "connect-src 'self' wss://" HOST ";"));
    assert_non_null(strstr(csp, "frame-ancestors http://127.0.0.1:*;"));
    assert_non_null(strstr(csp, "sandbox allow-same-origin allow-scripts"));
    assert_null(strstr(csp, "unsafe"));
    /* No other origin: no absolute http(s) URL, nothing loaded. */
    assert_null(strstr(page, "http://"));
    assert_null(strstr(page, "https://"));
    assert_null(strstr(page, " src="));
    assert_null(strstr(page, "@"));
    /* The boundaries and endpoints the script speaks. */
    const char *need[] = {"TelegramWebProxy", "tproxy-android-init", "tproxy-init", "'127.0.0.1'",
                          "/api/v1/session", "/api/v1/up", "/api/v1/down", "X-Up-Seq",
                          "X-Down-Cursor", "X-Session-Token", "X-Carrier-Mode", "/api/v1/ws",
                          "'tproxy-v1.'", "X-Lane-ID", "X-Lane-Closed", "'tproxy-lane-v1.'"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        assert_non_null(strstr(page, need[i]));
    /* A new nonce every time. */
    struct sbuf b2 = {0};
    char csp2[WEBPAGE_CSP_MAX];
    assert_int_equal(webpage_render(TOKEN, WEBSESS_WEBSOCKET, HOST, &b2, csp2), 0);
    assert_string_not_equal(csp, csp2);
    assert_non_null(strstr(b2.p, "const carrier = 'websocket';"));
    sbuf_free(&b);
    sbuf_free(&b2);
    /* The lanes carriers by their names, the ones X-Carrier-Mode says. */
    const struct {
        enum websess_mode mode;
        const char *line;
    } lanes[] = {{WEBSESS_HTTPS_LANES, "const carrier = 'https-lanes';"},
                 {WEBSESS_WEBSOCKET_LANES, "const carrier = 'websocket-lanes';"}};
    for (size_t i = 0; i < sizeof lanes / sizeof lanes[0]; i++) {
        struct sbuf bl = {0};
        assert_int_equal(webpage_render(TOKEN, lanes[i].mode, HOST, &bl, csp2), 0);
        assert_non_null(strstr(bl.p, lanes[i].line));
        assert_int_equal(token_runs(bl.p, TOKEN), 2);
        sbuf_free(&bl);
    }
}

static void test_bad_token(void **state)
{
    (void)state;
    struct sbuf b = {0};
    char csp[WEBPAGE_CSP_MAX];
    assert_int_equal(webpage_render("short", WEBSESS_HTTPS, HOST, &b, csp), -1);
    assert_int_equal(webpage_render(TOKEN "x", WEBSESS_HTTPS, HOST, &b, csp), -1);
    char bad[] = TOKEN;
    bad[5] = '"';
    assert_int_equal(webpage_render(bad, WEBSESS_HTTPS, HOST, &b, csp), -1);
    assert_int_equal(webpage_render(NULL, WEBSESS_HTTPS, HOST, &b, csp), -1);
    /* the host goes into the CSP: only a canonical name */
    assert_int_equal(webpage_render(TOKEN, WEBSESS_HTTPS, NULL, &b, csp), -1);
    assert_int_equal(webpage_render(TOKEN, WEBSESS_HTTPS, "Proxy.example.com", &b, csp), -1);
    assert_int_equal(webpage_render(TOKEN, WEBSESS_HTTPS, "a.example.com; x", &b, csp), -1);
    assert_int_equal(b.len, 0);
    /* the longest name still leaves the whole policy room */
    char longest[WEBCAP_HOST_MAX + 1];
    for (size_t i = 0; i < WEBCAP_HOST_MAX; i++)
        longest[i] = i % 2 ? '.' : 'a';
    longest[WEBCAP_HOST_MAX] = 0;
    assert_int_equal(webpage_render(TOKEN, WEBSESS_HTTPS, longest, &b, csp), 0);
    assert_non_null(strstr(csp, "sandbox allow-same-origin allow-scripts"));
    sbuf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_page),
        cmocka_unit_test(test_bad_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
