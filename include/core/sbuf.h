/* sbuf.h: a growable byte buffer for text built at run time (metrics pages, link lists). */
#ifndef MTPROXY_CORE_SBUF_H
#define MTPROXY_CORE_SBUF_H

#include <stddef.h>

/* Zero-initialise (`struct sbuf b = {0}`) to start empty. A failed allocation or a growth
 * past max (0 = no cap) sets failed; later appends do nothing. p is NUL-terminated when len
 * is not 0 and failed is 0. */
struct sbuf {
    char *p;
    size_t len, cap, max;
    int failed;
};

/* Appends n bytes of s. Returns 0, or -1 (failed set). */
int sbuf_add(struct sbuf *b, const void *s, size_t n);

/* Appends printf-formatted text. Returns 0, or -1 (failed set). */
int sbuf_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Frees the memory and empties b (max is kept). */
void sbuf_free(struct sbuf *b);

#endif
