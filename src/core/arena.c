/* arena.c: slab data blocks and a free-list object pool, one per worker (no locks). */
#include "core/arena.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct arena_slab {
    struct arena_slab *prev, *next;
    struct arena_block *free; /* free blocks of this slab */
    size_t nfree;
    size_t map_len;
};

static size_t block_stride(const struct arena *a)
{
    size_t s = sizeof(struct arena_block) + a->block_size;
    return (s + 63) & ~(size_t)63; /* cache-line aligned blocks */
}

void arena_init(struct arena *a, size_t block_size, size_t max_blocks, size_t reserve)
{
    memset(a, 0, sizeof *a);
    a->block_size = block_size;
    a->max_blocks = max_blocks;
    a->reserve = reserve;
}

static void slab_unlink(struct arena_slab **head, struct arena_slab *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        *head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
}

static void slab_push(struct arena_slab **head, struct arena_slab *s)
{
    s->prev = NULL;
    s->next = *head;
    if (*head)
        (*head)->prev = s;
    *head = s;
}

static struct arena_slab *slab_new(struct arena *a)
{
    size_t stride = block_stride(a);
    size_t hdr = (sizeof(struct arena_slab) + 63) & ~(size_t)63;
    size_t len = hdr + stride * ARENA_SLAB_BLOCKS;
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    struct arena_slab *s = m;
    s->map_len = len;
    s->nfree = ARENA_SLAB_BLOCKS;
    s->free = NULL;
    for (size_t i = ARENA_SLAB_BLOCKS; i-- > 0;) {
        struct arena_block *b = (struct arena_block *)((char *)m + hdr + i * stride);
        b->slab = s;
        b->next = s->free;
        s->free = b;
    }
    a->allocated += ARENA_SLAB_BLOCKS;
    return s;
}

int arena_exhausted(const struct arena *a)
{
    return !a->partial && a->max_blocks && a->allocated + ARENA_SLAB_BLOCKS > a->max_blocks;
}

struct arena_block *arena_get(struct arena *a)
{
    struct arena_slab *s = a->partial;
    if (!s) {
        if (arena_exhausted(a) || !(s = slab_new(a)))
            return NULL;
        slab_push(&a->partial, s);
    }
    struct arena_block *b = s->free;
    s->free = b->next;
    if (--s->nfree == 0) {
        slab_unlink(&a->partial, s);
        slab_push(&a->full, s);
    }
    b->next = NULL;
    b->start = b->end = 0;
    if (++a->in_use > a->peak_in_use)
        a->peak_in_use = a->in_use;
    return b;
}

void arena_put(struct arena *a, struct arena_block *b)
{
    if (!b)
        return;
    struct arena_slab *s = b->slab;
    b->next = s->free;
    s->free = b;
    a->in_use--;
    if (s->nfree++ == 0) {
        slab_unlink(&a->full, s);
        slab_push(&a->partial, s);
    }
    if (s->nfree == ARENA_SLAB_BLOCKS && a->allocated - a->in_use > a->reserve + ARENA_SLAB_BLOCKS) {
        slab_unlink(&a->partial, s);
        a->allocated -= ARENA_SLAB_BLOCKS;
        munmap(s, s->map_len);
    }
}

void arena_destroy(struct arena *a)
{
    struct arena_slab *lists[2] = {a->partial, a->full};
    for (int i = 0; i < 2; i++) {
        for (struct arena_slab *s = lists[i], *n; s; s = n) {
            n = s->next;
            munmap(s, s->map_len);
        }
    }
    a->partial = a->full = NULL;
    a->allocated = a->in_use = 0;
}

/* --- object pool ---------------------------------------------------------------------- */

#define POOL_CHUNK_OBJS 64

struct pool_chunk {
    struct pool_chunk *next;
    size_t count;
    _Alignas(16) unsigned char objs[];
};

void pool_init(struct pool *p, size_t obj_size, size_t max_objs)
{
    memset(p, 0, sizeof *p);
    p->obj_size = (obj_size + 15) & ~(size_t)15;
    if (p->obj_size < sizeof(void *))
        p->obj_size = sizeof(void *);
    p->max_objs = max_objs;
}

int pool_full(const struct pool *p)
{
    return p->max_objs && p->in_use >= p->max_objs;
}

void *pool_get(struct pool *p)
{
    if (pool_full(p))
        return NULL;
    if (p->free) {
        void *o = p->free;
        memcpy(&p->free, o, sizeof(void *));
        p->in_use++;
        return o;
    }
    size_t n = POOL_CHUNK_OBJS;
    if (p->max_objs && p->max_objs - p->allocated < n)
        n = p->max_objs - p->allocated;
    /* calloc only promises max_align_t (8 bytes on 32-bit ARM): objects are 16-aligned. */
    void *mem = NULL;
    size_t bytes = sizeof(struct pool_chunk) + n * p->obj_size;
    if (posix_memalign(&mem, 16, bytes) != 0)
        return NULL;
    memset(mem, 0, bytes);
    struct pool_chunk *c = mem;
    c->count = n;
    c->next = p->chunks;
    p->chunks = c;
    p->allocated += n;
    /* Hand out the first object; the rest go to the free list. */
    for (size_t i = n; i-- > 1;) {
        void *o = c->objs + i * p->obj_size;
        memcpy(o, &p->free, sizeof(void *));
        p->free = o;
    }
    p->in_use++;
    return c->objs;
}

void pool_put(struct pool *p, void *obj)
{
    memcpy(obj, &p->free, sizeof(void *));
    p->free = obj;
    p->in_use--;
}

void pool_destroy(struct pool *p, void (*fn)(void *obj))
{
    for (struct pool_chunk *c = p->chunks, *n; c; c = n) {
        n = c->next;
        if (fn)
            for (size_t i = 0; i < c->count; i++)
                fn(c->objs + i * p->obj_size);
        free(c);
    }
    memset(p, 0, sizeof *p);
}
