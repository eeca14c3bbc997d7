/* arena.h: per-worker memory: slab-allocated data blocks and a fixed-size object pool. */
#ifndef MTPROXY_CORE_ARENA_H
#define MTPROXY_CORE_ARENA_H

#include <stddef.h>
#include <stdint.h>

struct arena_slab;

/* A data block: bytes [start, end) of data[] are queued. Blocks chain into queues. */
struct arena_block {
    struct arena_block *next;
    struct arena_slab *slab;
    uint32_t start, end;
    uint8_t data[];
};

/*
 * Blocks are carved from slabs of ARENA_SLAB_BLOCKS blocks (one mmap each). A slab that
 * becomes entirely free is returned to the OS once more than `reserve` blocks are free, so
 * memory follows load; a block taken and given back right away stays hot (LIFO).
 * One arena per worker: no locks.
 */
#define ARENA_SLAB_BLOCKS 16

struct arena {
    size_t block_size; /* usable bytes per block */
    size_t max_blocks; /* cap on blocks allocated (0 = no cap) */
    size_t reserve;    /* free blocks kept before empty slabs are unmapped */
    size_t allocated;  /* blocks in live slabs */
    size_t in_use;     /* blocks handed out */
    size_t peak_in_use;
    struct arena_slab *partial; /* slabs with at least one free block */
    struct arena_slab *full;    /* slabs with every block handed out */
};

/* Sets up an empty arena (allocates nothing). block_size > 0. */
void arena_init(struct arena *a, size_t block_size, size_t max_blocks, size_t reserve);

/* Takes a block with start = end = 0, or NULL if the cap is reached or mmap failed. */
struct arena_block *arena_get(struct arena *a);

/* Gives a block back (NULL is fine). */
void arena_put(struct arena *a, struct arena_block *b);

/* 1 if arena_get would fail without mapping a new slab beyond the cap. */
int arena_exhausted(const struct arena *a);

/* Unmaps every slab. Blocks still out become invalid. */
void arena_destroy(struct arena *a);

/* A fixed-size object pool with a free list: objects are allocated in chunks, never moved,
 * and reused LIFO; a cap bounds how many may be out at once. The first pointer-sized word of
 * an object belongs to the pool while it is free; the rest is zero on first use and kept as
 * the user left it on reuse, so a user may keep state (e.g. cipher contexts) across reuse. */
struct pool {
    size_t obj_size;
    size_t max_objs;   /* 0 = no cap */
    size_t allocated;  /* objects ever allocated (alive in chunks) */
    size_t in_use;
    void *free;        /* free list threaded through the first word of each object */
    void *chunks;      /* chunk list, for destroy */
};

void pool_init(struct pool *p, size_t obj_size, size_t max_objs);

/* Returns an object, or NULL if at the cap or out of memory. */
void *pool_get(struct pool *p);

void pool_put(struct pool *p, void *obj);

/* 1 if pool_get would fail because of the cap. */
int pool_full(const struct pool *p);

/* Calls fn (if not NULL) on every object ever allocated, then frees all chunks. */
void pool_destroy(struct pool *p, void (*fn)(void *obj));

#endif
