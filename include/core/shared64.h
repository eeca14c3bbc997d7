/* shared64.h: 64-bit values that several threads update (per-user quota and rate state). */
#ifndef MTPROXY_CORE_SHARED64_H
#define MTPROXY_CORE_SHARED64_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* A 64-bit value any thread may read and update. Use these functions only:
 *   shared64_load(p)              the value
 *   shared64_store(p, v)          sets it
 *   shared64_fetch_add(p, n)      adds n, returns the value before
 *   shared64_cas(p, &expected, v) if the value is expected, sets v and returns true; else
 *                                 puts the value into expected and returns false
 * A zeroed shared64 is 0. All orders are relaxed: these carry counts and clocks, not
 * publication of other memory.
 *
 * Two representations, same API:
 * - 64-bit targets: an _Atomic uint64_t (lock-free).
 * - 32-bit targets (MIPS32 and others without 64-bit atomics; -DMTPROXY_SHARED64_LOCK=1 to
 *   test it anywhere): the value behind a one-byte spin lock (atomic_flag, lock-free on every
 *   target). 64-bit _Atomic operations there become calls into libatomic, which OpenWrt does
 *   not install by default; the lock is taken only on the handshake and per relayed read of a
 *   user with a quota or rate limit, never on the per-worker counters (core/stat.h). */
#if defined(MTPROXY_SHARED64_LOCK) ? MTPROXY_SHARED64_LOCK : (UINTPTR_MAX <= 0xffffffffu)
#define MTPROXY_SHARED64_IS_LOCK 1

typedef struct {
    atomic_flag lock;
    uint64_t v;
} shared64;

static inline void shared64_lock_(shared64 *p)
{
    while (atomic_flag_test_and_set_explicit(&p->lock, memory_order_acquire))
        ;
}

static inline void shared64_unlock_(shared64 *p)
{
    atomic_flag_clear_explicit(&p->lock, memory_order_release);
}

static inline uint64_t shared64_load(const shared64 *cp)
{
    shared64 *p = (shared64 *)cp;
    shared64_lock_(p);
    uint64_t v = p->v;
    shared64_unlock_(p);
    return v;
}

static inline void shared64_store(shared64 *p, uint64_t v)
{
    shared64_lock_(p);
    p->v = v;
    shared64_unlock_(p);
}

static inline uint64_t shared64_fetch_add(shared64 *p, uint64_t n)
{
    shared64_lock_(p);
    uint64_t v = p->v;
    p->v = v + n;
    shared64_unlock_(p);
    return v;
}

static inline bool shared64_cas(shared64 *p, uint64_t *expected, uint64_t v)
{
    shared64_lock_(p);
    bool ok = p->v == *expected;
    if (ok)
        p->v = v;
    else
        *expected = p->v;
    shared64_unlock_(p);
    return ok;
}
#else
#define MTPROXY_SHARED64_IS_LOCK 0

typedef _Atomic uint64_t shared64;

static inline uint64_t shared64_load(const shared64 *p)
{
    return atomic_load_explicit((shared64 *)p, memory_order_relaxed);
}

static inline void shared64_store(shared64 *p, uint64_t v)
{
    atomic_store_explicit(p, v, memory_order_relaxed);
}

static inline uint64_t shared64_fetch_add(shared64 *p, uint64_t n)
{
    return atomic_fetch_add_explicit(p, n, memory_order_relaxed);
}

static inline bool shared64_cas(shared64 *p, uint64_t *expected, uint64_t v)
{
    return atomic_compare_exchange_weak_explicit(p, expected, v, memory_order_relaxed,
                                                 memory_order_relaxed);
}
#endif

#endif
