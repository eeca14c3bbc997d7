/* fuzz_socks5.c: libFuzzer target for the SOCKS5 reply parsers and the socks5:// URL parser. */
#include "proto/socks5.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The CONNECT reply, as bytes arrive: on OK every shorter prefix is NEED_MORE and the reply
 * alone parses the same; BAD always says why, and a prefix of a BAD reply is never OK. */
static void check_reply(const uint8_t *buf, size_t size)
{
    size_t consumed = 0;
    int code = -1;
    const char *why = NULL;
    enum socks5_status st = socks5_parse_reply(buf, size, &consumed, &code, &why);
    if (st == SOCKS5_OK) {
        FUZZ_CHECK(consumed >= 4 + 1 + 2 && consumed <= size && consumed <= 4 + 256 + 2);
        FUZZ_CHECK(code == 0);
        size_t c2 = 0;
        int code2;
        const char *why2 = NULL;
        FUZZ_CHECK(socks5_parse_reply(buf, consumed, &c2, &code2, &why2) == SOCKS5_OK);
        FUZZ_CHECK(c2 == consumed);
        for (size_t i = 0; i < consumed; i++)
            FUZZ_CHECK(socks5_parse_reply(buf, i, &c2, &code2, &why2) == SOCKS5_NEED_MORE);
    } else if (st == SOCKS5_BAD) {
        FUZZ_CHECK(why != NULL && why[0]);
        for (size_t i = 0; i < size && i < 300; i++) {
            size_t c2;
            int code2;
            const char *why2 = NULL;
            FUZZ_CHECK(socks5_parse_reply(buf, i, &c2, &code2, &why2) != SOCKS5_OK);
        }
    } else {
        FUZZ_CHECK(st == SOCKS5_NEED_MORE);
    }
    FUZZ_CHECK(socks5_reply_name(code)[0]);
}

static void check_method_and_auth(const uint8_t *buf, size_t size)
{
    for (int auth = 0; auth < 2; auth++) {
        struct socks5_server s;
        memset(&s, 0, sizeof s);
        s.auth = auth;
        int method = -1;
        const char *why = NULL;
        enum socks5_status st = socks5_parse_method(&s, buf, size, &method, &why);
        if (st == SOCKS5_OK)
            FUZZ_CHECK(method == 0 || (auth && method == 2));
        else if (st == SOCKS5_BAD)
            FUZZ_CHECK(why != NULL);
    }
    const char *why = NULL;
    enum socks5_status st = socks5_parse_auth(buf, size, &why);
    FUZZ_CHECK(st == SOCKS5_OK || st == SOCKS5_NEED_MORE || (st == SOCKS5_BAD && why));
}

static int parse_url(const char *url, char *err, size_t n)
{
    struct socks5_server s;
    return socks5_parse_url(url, &s, err, n);
}

/* The URL: a result is well-formed, a request built from it fits, and an error quotes no
 * letter of the URL past its scheme (fuzz_check_url_error). */
static void check_url(const uint8_t *data, size_t size)
{
    char *url = fuzz_cstr(data, size);
    struct socks5_server s;
    char err[256] = "";
    if (socks5_parse_url(url, &s, err, sizeof err) == 0) {
        FUZZ_CHECK(s.port >= 1 && s.port <= 65535);
        FUZZ_CHECK(s.host[0] && fuzz_terminated(s.host, sizeof s.host));
        FUZZ_CHECK(fuzz_terminated(s.user, sizeof s.user) &&
                   fuzz_terminated(s.pass, sizeof s.pass));
        if (s.auth) {
            FUZZ_CHECK(s.user[0] && s.pass[0]);
            uint8_t req[3 + 2 * SOCKS5_NAME_MAX];
            size_t n = socks5_auth_request(&s, req, sizeof req);
            FUZZ_CHECK(n == 3 + strlen(s.user) + strlen(s.pass));
        }
        uint8_t g[4];
        FUZZ_CHECK(socks5_greeting(&s, g, sizeof g) > 0);
    } else {
        FUZZ_CHECK(err[0] && fuzz_terminated(err, sizeof err));
        fuzz_check_url_error(url, "socks5://", err, parse_url);
    }
    free(url);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    data++, size--;
    uint8_t *buf = malloc(size ? size : 1); /* exact size: ASan sees any over-read */
    if (!buf)
        abort();
    if (size)
        memcpy(buf, data, size);
    switch (mode % 3) {
    case 0: check_reply(buf, size); break;
    case 1: check_method_and_auth(buf, size); break;
    default: check_url(buf, size); break;
    }
    free(buf);
    return 0;
}
