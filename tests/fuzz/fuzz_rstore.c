/* fuzz_rstore.c: libFuzzer target for the replay store's reply path and its redis:// URL parser. */
#include "users/rstore.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAXV 64

/* The store's bytes as they arrive: whatever they hold, a verdict per complete reply, a log
 * text that is printable, and a prefix that reads as the whole's first replies (or fails). */
static void check_replies(const char *buf, size_t size)
{
    enum rstore_verdict v[MAXV], w[MAXV];
    char text[64];
    memset(text, 'x', sizeof text);
    int n = rstore_parse_replies(buf, size, v, MAXV, text, sizeof text);
    FUZZ_CHECK(n >= -1);
    FUZZ_CHECK(fuzz_terminated(text, sizeof text));
    for (const char *p = text; *p; p++)
        FUZZ_CHECK(*p >= 0x20 && *p < 0x7f);
    for (int i = 0; i < n && i < MAXV; i++)
        FUZZ_CHECK(v[i] == RSTORE_NEW || v[i] == RSTORE_SEEN || v[i] == RSTORE_FAILED);
    if (n < 0)
        return;
    size_t cut = size / 2;
    int m = rstore_parse_replies(buf, cut, w, MAXV, NULL, 0);
    FUZZ_CHECK(m >= 0 && m <= n);
    for (int i = 0; i < m && i < MAXV; i++)
        FUZZ_CHECK(w[i] == v[i]);
}

static int parse_url(const char *url, char *err, size_t n)
{
    struct rstore_config c;
    return rstore_parse_url(url, &c, err, n);
}

/* The URL: a result is well-formed, and an error quotes no byte of the URL past its scheme
 * (fuzz_check_url_error). */
static void check_url(const char *url)
{
    struct rstore_config c;
    char err[256] = "";
    if (rstore_parse_url(url, &c, err, sizeof err) == 0) {
        FUZZ_CHECK(c.on);
        FUZZ_CHECK(fuzz_terminated(c.host, sizeof c.host) &&
                   fuzz_terminated(c.path, sizeof c.path) &&
                   fuzz_terminated(c.password, sizeof c.password));
        FUZZ_CHECK(c.path[0] ? c.path[0] == '/' : (c.host[0] && c.port >= 1 && c.port <= 65535));
        FUZZ_CHECK(c.db >= 0 && c.db <= 1000000);
        return;
    }
    FUZZ_CHECK(err[0] && fuzz_terminated(err, sizeof err));
    fuzz_check_url_error(url, "redis://", err, parse_url);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int url = data[0] & 1;
    char *buf = fuzz_cstr(data + 1, size - 1); /* exact size (+ NUL): ASan sees over-reads */
    if (url)
        check_url(buf);
    else
        check_replies(buf, size - 1);
    free(buf);
    return 0;
}
