/* sbuf.c: growable text buffer (see sbuf.h). */
#include "core/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reserve(struct sbuf *b, size_t more)
{
    if (b->failed)
        return -1;
    if (b->len + more + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more + 1)
        cap *= 2;
    if (b->max && cap > b->max + 1)
        cap = b->max + 1;
    char *p = cap >= b->len + more + 1 ? realloc(b->p, cap) : NULL;
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

int sbuf_add(struct sbuf *b, const void *s, size_t n)
{
    if (reserve(b, n))
        return -1;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int sbuf_printf(struct sbuf *b, const char *fmt, ...)
{
    if (b->failed)
        return -1;
    for (int pass = 0; pass < 2; pass++) {
        size_t room = b->cap > b->len ? b->cap - b->len : 0;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(room ? b->p + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return -1;
        }
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return 0;
        }
        if (reserve(b, (size_t)n))
            return -1;
    }
    b->failed = 1;
    return -1;
}

void sbuf_free(struct sbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
}
