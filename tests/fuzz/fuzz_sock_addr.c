/* fuzz_sock_addr.c: libFuzzer target for sock_addr_parse, with a format/parse round trip. */
#include "core/sock.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Input: one flags byte (bit 0 resolve, bit 1 allow port 0), then the text. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    int resolve = data[0] & 1, port0 = (data[0] >> 1) & 1;
    char *text = fuzz_cstr(data + 1, size - 1);
    struct sock_addr a;
    char err[256] = "";
    if (sock_addr_parse(text, resolve, port0, &a, err, sizeof err) != 0) {
        FUZZ_CHECK(err[0] != 0 && fuzz_terminated(err, sizeof err));
        free(text);
        return 0;
    }
    int fam = a.u.sa.sa_family;
    FUZZ_CHECK(fam == AF_INET || fam == AF_INET6);
    FUZZ_CHECK(a.len == (fam == AF_INET ? sizeof a.u.in4 : sizeof a.u.in6));
    int port = sock_addr_port(&a);
    FUZZ_CHECK(port >= (port0 ? 0 : 1) && port <= 65535);

    /* What format writes, parse reads back to the same address (no resolving needed). */
    char out[SOCK_ADDR_STRLEN];
    sock_addr_format(&a, out, sizeof out);
    FUZZ_CHECK(fuzz_terminated(out, sizeof out));
    struct sock_addr b;
    if (sock_addr_parse(out, 0, port0, &b, err, sizeof err) != 0) {
        fprintf(stderr, "'%s' -> '%s' does not parse: %s\n", text, out, err);
        abort();
    }
    FUZZ_CHECK(b.len == a.len && b.u.sa.sa_family == fam && sock_addr_port(&b) == port);
    if (fam == AF_INET)
        FUZZ_CHECK(b.u.in4.sin_addr.s_addr == a.u.in4.sin_addr.s_addr);
    else
        FUZZ_CHECK(!memcmp(&b.u.in6.sin6_addr, &a.u.in6.sin6_addr, sizeof b.u.in6.sin6_addr));

    char host[SOCK_ADDR_STRLEN];
    sock_addr_host(&a, host, sizeof host);
    FUZZ_CHECK(fuzz_terminated(host, sizeof host) && host[0]);
    (void)sock_addr_is_any(&a);
    /* A short buffer truncates, never overflows. */
    char tiny[4];
    sock_addr_format(&a, tiny, sizeof tiny);
    FUZZ_CHECK(fuzz_terminated(tiny, sizeof tiny));
    free(text);
    return 0;
}
