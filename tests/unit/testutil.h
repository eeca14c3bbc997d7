/* testutil.h: small helpers shared by the unit tests (header-only; each test is one file). */
#ifndef MTPROXY_TESTS_UNIT_TESTUTIL_H
#define MTPROXY_TESTS_UNIT_TESTUTIL_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

/* Decodes a hex string (either case) into out, which must hold strlen(hex) / 2 bytes;
 * returns that length. Test vectors only: no validation. */
static inline size_t unhex(const char *hex, uint8_t *out) {
    size_t n = strlen(hex) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        for (int j = 0; j < 2; j++) {
            char c = hex[2 * i + j];
            v = v << 4 | (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
        }
        out[i] = (uint8_t)v;
    }
    return n;
}

/* A socket address (port 0) from an IPv4 or IPv6 address in text; family 0 if neither. */
static inline struct sockaddr_storage sockaddr_of(const char *text) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, text, &a4->sin_addr) == 1)
        a4->sin_family = AF_INET;
    else if (inet_pton(AF_INET6, text, &a6->sin6_addr) == 1)
        a6->sin6_family = AF_INET6;
    return ss;
}

#endif
