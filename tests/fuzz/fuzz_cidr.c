/* fuzz_cidr.c: libFuzzer target for cidr_parse and the range set built from what parses. */
#include "core/cidr.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int contains_bytes(const struct cidr_set *s, int family, const uint8_t *addr)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        memcpy(&a->sin_addr, addr, 4);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        memcpy(&a->sin6_addr, addr, 16);
    }
    return cidr_set_contains(s, (struct sockaddr *)&ss);
}

/* Input: lines of text, each given to cidr_parse. Every network that parses must format and
 * parse back to itself, and after the set is built its first and last address must be in it. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    struct cidr_set s;
    cidr_set_init(&s);
    struct cidr got[64];
    int n = 0;
    for (char *line = text, *next; line && n < 64; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        struct cidr c;
        char err[256] = "";
        if (cidr_parse(line, &c, err, sizeof err) != 0) {
            FUZZ_CHECK(err[0] && fuzz_terminated(err, sizeof err));
            continue;
        }
        FUZZ_CHECK(c.family == AF_INET || c.family == AF_INET6);
        FUZZ_CHECK(c.prefix <= (c.family == AF_INET ? 32 : 128));
        char out[80];
        cidr_format(&c, out, sizeof out);
        struct cidr back;
        FUZZ_CHECK(cidr_parse(out, &back, err, sizeof err) == 0);
        FUZZ_CHECK(back.family == c.family && back.prefix == c.prefix &&
                   !memcmp(back.addr, c.addr, sizeof c.addr));
        FUZZ_CHECK(cidr_set_add(&s, &c) == 0);
        got[n++] = c;
    }
    cidr_set_finish(&s);
    FUZZ_CHECK(cidr_set_count(&s) <= (size_t)n);
    for (int i = 0; i < n; i++) {
        const struct cidr *c = &got[i];
        int bits = c->family == AF_INET ? 32 : 128;
        uint8_t last[16];
        memcpy(last, c->addr, 16);
        for (int b = c->prefix; b < bits; b++)
            last[b / 8] |= (uint8_t)(0x80u >> (b % 8));
        /* IPv4-mapped IPv6 addresses are looked up as IPv4 by design. */
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (c->family == AF_INET || memcmp(c->addr, mapped, 12))
            FUZZ_CHECK(contains_bytes(&s, c->family, c->addr));
        if (c->family == AF_INET || memcmp(last, mapped, 12))
            FUZZ_CHECK(contains_bytes(&s, c->family, last));
    }
    cidr_set_free(&s);
    free(text);
    return 0;
}
