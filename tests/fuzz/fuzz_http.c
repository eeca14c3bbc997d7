/* fuzz_http.c: libFuzzer target for http_parse_request, with prefix-consistency checks. */
#include "proto/http.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Input: the bytes a metrics client sends. On OK the head parses the same alone and every
 * shorter prefix is NEED_MORE; a BAD verdict carries a status and a reason and never turns
 * OK with more bytes; the fields are NUL-terminated within their bounds. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1); /* exact size: ASan sees any over-read */
    if (!buf)
        abort();
    if (size)
        memcpy(buf, data, size);
    const size_t max = 1024, maxh = 16;
    struct http_request r;
    enum http_status st = http_parse_request(buf, size, max, maxh, &r);
    if (st == HTTP_NEED_MORE) {
        FUZZ_CHECK(size < max);
    } else if (st == HTTP_BAD) {
        FUZZ_CHECK(r.why != NULL && r.code >= 400 && r.code <= 505);
        for (size_t i = 1; i < size && i < 256; i++) {
            struct http_request p;
            FUZZ_CHECK(http_parse_request(buf, i, max, maxh, &p) != HTTP_OK);
        }
    } else {
        FUZZ_CHECK(st == HTTP_OK);
        FUZZ_CHECK(r.consumed >= 4 && r.consumed <= size && r.consumed <= max);
        FUZZ_CHECK(r.path[0] == '/' && strlen(r.path) < HTTP_PATH_MAX);
        FUZZ_CHECK(strlen(r.token) < HTTP_TOKEN_MAX && strlen(r.bearer) < HTTP_TOKEN_MAX);
        FUZZ_CHECK((size_t)r.nheaders <= maxh);
        FUZZ_CHECK(r.method == HTTP_GET || r.method == HTTP_HEAD);
        struct http_request again;
        FUZZ_CHECK(http_parse_request(buf, r.consumed, max, maxh, &again) == HTTP_OK);
        FUZZ_CHECK(again.consumed == r.consumed && !strcmp(again.path, r.path) &&
                   !strcmp(again.token, r.token) && !strcmp(again.bearer, r.bearer));
        for (size_t i = 0; i < r.consumed; i++) {
            struct http_request p;
            FUZZ_CHECK(http_parse_request(buf, i, max, maxh, &p) == HTTP_NEED_MORE);
        }
    }
    /* The API's form: the same head with bodies allowed; a body bound is kept. */
    struct http_request b;
    enum http_status sb = http_parse_request_body(buf, size, max, maxh, 64, &b);
    if (sb == HTTP_OK) {
        FUZZ_CHECK(b.content_length <= 64 && b.consumed <= size && b.path[0] == '/');
        FUZZ_CHECK(b.method >= HTTP_GET && b.method <= HTTP_DELETE);
    } else if (sb == HTTP_BAD) {
        FUZZ_CHECK(b.why != NULL && b.code >= 400 && b.code <= 505);
    }
    if (st == HTTP_OK) /* what metrics accepts, the API form accepts too */
        FUZZ_CHECK(sb == HTTP_OK && b.consumed == r.consumed);
    free(buf);
    return 0;
}
