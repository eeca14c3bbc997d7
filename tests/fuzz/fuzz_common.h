/* fuzz_common.h: helpers shared by the libFuzzer targets (one target per binary includes it). */
#ifndef MTPROXY_FUZZ_COMMON_H
#define MTPROXY_FUZZ_COMMON_H

#include <arpa/inet.h>
#include <netdb.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Aborts with a message: libFuzzer reports it as a crash and saves the input. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A heap copy of data with a NUL appended, sized exactly so ASan sees any over-read. */
static inline char *fuzz_cstr(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s)
        abort();
    if (size)
        memcpy(s, data, size);
    s[size] = 0;
    return s;
}

/* 1 if s is NUL-terminated within cap bytes. */
static inline int fuzz_terminated(const char *s, size_t cap) {
    return memchr(s, 0, cap) != NULL;
}

/*
 * No network while fuzzing: these definitions take the place of the C library's resolver for
 * the whole fuzz binary (sock_addr_parse with resolve set calls getaddrinfo). Only "localhost"
 * resolves (to 127.0.0.1); every other name fails at once and no packet is ever sent.
 */
int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res) {
    (void)service;
    (void)hints;
    if (!node || strcmp(node, "localhost") != 0)
        return EAI_NONAME;
    struct {
        struct addrinfo ai;
        struct sockaddr_in sin;
    } *r = calloc(1, sizeof *r);
    if (!r)
        return EAI_MEMORY;
    r->sin.sin_family = AF_INET;
    r->sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    r->ai.ai_family = AF_INET;
    r->ai.ai_socktype = SOCK_STREAM;
    r->ai.ai_addrlen = sizeof r->sin;
    r->ai.ai_addr = (struct sockaddr *)&r->sin;
    *res = &r->ai;
    return 0;
}

void freeaddrinfo(struct addrinfo *res) {
    free(res); /* the addrinfo is the first member of the block getaddrinfo allocated */
}


/* URL errors must quote no credentials. The check: the same URL with every letter after its
 * first `from` bytes replaced by another of its class (a-f among a-f, g-z among g-z, the same
 * for capitals; digits and punctuation kept, so percent escapes, IPv6 addresses, ports and
 * database numbers keep their values' validity) must fail with the very same message; a
 * message that quotes any of those letters differs. Returns the rotated copy (free it). */
static inline char rotate_char(char c) {
    if ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))
        return c == 'f' ? 'a' : c == 'F' ? 'A' : (char)(c + 1);
    if ((c >= 'g' && c <= 'z') || (c >= 'G' && c <= 'Z'))
        return c == 'z' ? 'g' : c == 'Z' ? 'G' : (char)(c + 1);
    return c;
}

static inline char *fuzz_rotated(const char *s, size_t from) {
    size_t n = strlen(s);
    char *r = fuzz_cstr((const uint8_t *)s, n);
    for (size_t i = from; i < n; i++)
        r[i] = rotate_char(r[i]);
    return r;
}

/* Fails when the error err that parse gave url changes with url's letters past scheme (see
 * fuzz_rotated): an error quoting the URL. parse returns 0 (accepted) or -1 with err. */
static inline void fuzz_check_url_error(const char *url, const char *scheme, const char *err,
                                        int (*parse)(const char *url, char *err, size_t n)) {
    size_t sl = strlen(scheme);
    size_t from = strncmp(url, scheme, sl) ? 0 : sl;
    char *rot = fuzz_rotated(url, from);
    char err2[256] = "";
    if ((from || strncmp(rot, scheme, sl)) && parse(rot, err2, sizeof err2) != 0 &&
        strcmp(err, err2) != 0) {
        fprintf(stderr, "url %s\n -> %s\nrotated %s\n -> %s\n", url, err, rot, err2);
        FUZZ_CHECK(!"a URL error quotes the URL");
    }
    free(rot);
}

#endif
