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

#endif
