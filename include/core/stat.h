/* stat.h: counters that one worker thread writes and other threads read (stats, metrics). */
#ifndef MTPROXY_CORE_STAT_H
#define MTPROXY_CORE_STAT_H

#include <stdatomic.h>
#include <stdint.h>

/* A counter written only by its owning worker; any thread may read it with STAT_GET. Use
 * these macros only (never touch a stat_t directly), so the representation can change:
 *   STAT_GET(p)     the value (any thread; a consistent 64-bit value, never a torn one)
 *   STAT_ADD(p, n)  adds n (owner only), STAT_INC(p) / STAT_DEC(p) add 1 / -1
 * A zeroed stat_t (calloc, memset, = {0}) is a counter at 0.
 *
 * Two representations, same API:
 * - 64-bit targets: an _Atomic uint64_t; relaxed loads and stores compile to plain moves.
 * - 32-bit targets (MIPS32, ARMv7, i386; or -DMTPROXY_STAT_SPLIT=1 to test it anywhere): three
 *   32-bit words, lo and the high word twice (hi1, hi2). An update stores lo only, with a plain
 *   store; when the high word changes (once per 4 Gi increments) it writes hi1, lo, hi2 in that
 *   order with release fences. A reader reads hi2, lo, hi1 (acquire) and retries while hi1 and
 *   hi2 differ (Lamport's two-copies read). No 64-bit atomics, so no libatomic and no lock or
 *   ll/sc loop on the hot path. A counter that goes down (STAT_DEC) must stay below 2^32 on
 *   such targets to be read consistently (gauges such as active connections do). */
#if defined(MTPROXY_STAT_SPLIT) ? MTPROXY_STAT_SPLIT : (UINTPTR_MAX <= 0xffffffffu)
#define MTPROXY_STAT_IS_SPLIT 1

typedef struct {
    _Atomic uint32_t lo, hi1, hi2;
} stat_t;

/* The high word changed: hi1 first, then lo, then hi2 (readers see hi1 != hi2 in between). */
static inline void stat_carry_(stat_t *p, uint64_t v)
{
    atomic_store_explicit(&p->hi1, (uint32_t)(v >> 32), memory_order_relaxed);
    /* Orders hi1 before this lo store and every later fast-path lo store. */
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&p->lo, (uint32_t)v, memory_order_relaxed);
    atomic_store_explicit(&p->hi2, (uint32_t)(v >> 32), memory_order_release);
}

static inline void stat_add_(stat_t *p, uint64_t n)
{
    uint32_t lo = atomic_load_explicit(&p->lo, memory_order_relaxed);
    uint32_t hi = atomic_load_explicit(&p->hi2, memory_order_relaxed);
    uint64_t v = ((uint64_t)hi << 32 | lo) + n;
    if ((uint32_t)(v >> 32) == hi)
        atomic_store_explicit(&p->lo, (uint32_t)v, memory_order_relaxed);
    else
        stat_carry_(p, v);
}

static inline uint64_t stat_get_(const stat_t *p)
{
    stat_t *q = (stat_t *)p; /* C11's atomic loads take non-const pointers */
    for (;;) {
        uint32_t h2 = atomic_load_explicit(&q->hi2, memory_order_acquire);
        uint32_t lo = atomic_load_explicit(&q->lo, memory_order_acquire);
        uint32_t h1 = atomic_load_explicit(&q->hi1, memory_order_relaxed);
        if (h1 == h2)
            return (uint64_t)h2 << 32 | lo;
    }
}

#define STAT_GET(p) stat_get_(p)
#define STAT_ADD(p, n) stat_add_((p), (uint64_t)(n))
#else
#define MTPROXY_STAT_IS_SPLIT 0

typedef _Atomic uint64_t stat_t;

/* Reads a counter (relaxed; from any thread). */
#define STAT_GET(p) atomic_load_explicit((p), memory_order_relaxed)
/* Updates by the owning thread (relaxed: plain loads and stores, no lock prefix). */
#define STAT_ADD(p, n)                                                                         \
    atomic_store_explicit((p), atomic_load_explicit((p), memory_order_relaxed) + (n),          \
                          memory_order_relaxed)
#endif

#define STAT_INC(p) STAT_ADD(p, 1)
#define STAT_DEC(p) STAT_ADD(p, (uint64_t)-1)

#endif
