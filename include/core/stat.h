/* stat.h: counters that one worker thread writes and other threads read (stats, metrics). */
#ifndef MTPROXY_CORE_STAT_H
#define MTPROXY_CORE_STAT_H

#include <stdatomic.h>
#include <stdint.h>

/* A counter written only by its owning worker; any thread may read it with STAT_GET. Use
 * these macros only (never touch a stat_t directly), so the representation can change. */
typedef _Atomic uint64_t stat_t;

/* Reads a counter (relaxed; from any thread). */
#define STAT_GET(p) atomic_load_explicit((p), memory_order_relaxed)
/* Updates by the owning thread (relaxed: plain loads and stores, no lock prefix). */
#define STAT_ADD(p, n)                                                                         \
    atomic_store_explicit((p), atomic_load_explicit((p), memory_order_relaxed) + (n),          \
                          memory_order_relaxed)
#define STAT_INC(p) STAT_ADD(p, 1)
#define STAT_DEC(p) STAT_ADD(p, (uint64_t)-1)

#endif
