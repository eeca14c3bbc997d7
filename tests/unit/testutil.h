/* testutil.h: small helpers shared by the unit tests (header-only; each test is one file). */
#ifndef MTPROXY_TESTS_UNIT_TESTUTIL_H
#define MTPROXY_TESTS_UNIT_TESTUTIL_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The bytes of the test vector name (a path below $MTPROXY_VECTORS, else below tests/vectors)
 * in a malloc'd block with a NUL after them, so a text vector is a string; *len (if not NULL)
 * is their count. NULL if the file cannot be read. The caller frees. */
static inline char *testutil_vector(const char *name, size_t *len) {
    const char *dir = getenv("MTPROXY_VECTORS");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "tests/vectors", name);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    char *buf = NULL;
    long n = fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
    if (n >= 0 && fseek(fp, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL &&
        fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    if (buf) {
        buf[n] = 0;
        if (len)
            *len = (size_t)n;
    }
    return buf;
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
