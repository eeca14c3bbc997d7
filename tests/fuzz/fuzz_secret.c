/* fuzz_secret.c: libFuzzer target for secret_parse / secret_parse_named, hex and link output. */
#include "proto/secret.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Properties of any parsed secret: a valid kind and name, and its hex form parses back. */
static void check_parsed(const struct secret *s, const char *host) {
    FUZZ_CHECK(s->kind == SECRET_PLAIN || s->kind == SECRET_DD || s->kind == SECRET_EE);
    FUZZ_CHECK(fuzz_terminated(s->name, sizeof s->name));
    FUZZ_CHECK(fuzz_terminated(s->domain, sizeof s->domain));
    FUZZ_CHECK((s->kind == SECRET_EE) == (s->domain[0] != 0));

    char hex[SECRET_HEX_MAX];
    int n = secret_to_hex(s, hex, sizeof hex);
    FUZZ_CHECK(n > 0 && (size_t)n == strlen(hex));
    FUZZ_CHECK(n == (s->kind == SECRET_PLAIN ? 32
                     : s->kind == SECRET_DD  ? 34
                                             : 34 + 2 * (int)strlen(s->domain)));
    /* A buffer one byte short fails cleanly; an exact one succeeds. */
    char *exact = malloc((size_t)n + 1);
    FUZZ_CHECK(exact);
    FUZZ_CHECK(secret_to_hex(s, exact, (size_t)n) == -1);
    FUZZ_CHECK(secret_to_hex(s, exact, (size_t)n + 1) == n && !strcmp(exact, hex));
    free(exact);

    struct secret back;
    char err[256] = "";
    if (secret_parse(s->name[0] ? s->name : NULL, hex, &back, err, sizeof err) != 0) {
        fprintf(stderr, "hex form '%s' does not parse back: %s\n", hex, err);
        abort();
    }
    FUZZ_CHECK(back.kind == s->kind && !memcmp(back.key, s->key, SECRET_KEY_LEN));
    FUZZ_CHECK(!strcmp(back.domain, s->domain) && !strcmp(back.name, s->name));

    /* Links: any host text, bounded buffers, and too-small buffers fail without overflow. */
    char tg[1024], https[1024];
    int rc = secret_links(s, host, 443, tg, sizeof tg, https, sizeof https);
    if (rc == 0) {
        FUZZ_CHECK(!strncmp(tg, "tg://proxy?server=", 18) && strstr(tg, hex));
        FUZZ_CHECK(!strncmp(https, "https://t.me/proxy?server=", 26) && strstr(https, hex));
        size_t tl = strlen(tg);
        char *small = malloc(tl);
        FUZZ_CHECK(small);
        FUZZ_CHECK(secret_links(s, host, 443, small, tl, https, sizeof https) == -1);
        free(small);
    }
    FUZZ_CHECK(secret_links(s, host, 0, tg, sizeof tg, https, sizeof https) == -1);
    FUZZ_CHECK(secret_links(s, host, 65536, tg, sizeof tg, https, sizeof https) == -1);
}

static void check_failed(int rc, const char *err, size_t errlen) {
    FUZZ_CHECK(rc == -1);
    FUZZ_CHECK(fuzz_terminated(err, errlen) && err[0] != 0);
}

/* Input: one mode byte, then text. Mode 0: secret_parse(NULL, text); 1: secret_parse_named;
 * 2: secret_parse(name, secret) with the text split at its first newline. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    int mode = data[0] % 3;
    char *text = fuzz_cstr(data + 1, size - 1);
    struct secret s;
    char err[256] = "";
    int rc;
    if (mode == 0) {
        rc = secret_parse(NULL, text, &s, err, sizeof err);
    } else if (mode == 1) {
        rc = secret_parse_named(text, &s, err, sizeof err);
    } else {
        char *nl = strchr(text, '\n');
        const char *name = NULL, *val = text;
        if (nl) {
            *nl = 0;
            name = text;
            val = nl + 1;
        }
        rc = secret_parse(name, val, &s, err, sizeof err);
    }
    if (rc == 0)
        check_parsed(&s, text);
    else
        check_failed(rc, err, sizeof err);

    /* Tiny and absent error buffers are fine too. */
    char e1[1];
    (void)secret_parse_named(text, &s, e1, sizeof e1);
    (void)secret_parse(NULL, text, &s, NULL, 0);
    free(text);
    return 0;
}
