/* conn.h: the proxy's per-worker state and a connection's public calls (types: conn_types.h). */
#ifndef MTPROXY_PROXY_CONN_H
#define MTPROXY_PROXY_CONN_H

#include <ev.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/arena.h"   /* struct arena, struct pool */
#include "core/ipcount.h" /* struct ipcount */
#include "core/sock.h"    /* struct sock_opts */
#include "core/stat.h"    /* stat_t */
#include "conn/counters.h" /* PROXY_STATS_FIELDS */
#include "conn/conn_types.h"
#include "upstream/dcpool.h" /* struct dcpool_set */
#include "users/rstore.h" /* struct rstore, rstore_cb */

/* Not needed by this header: kept for files that still get them through it (relay.c, middle_*.c,
 * main.c, tools.c, metrics.c, tests); each should include what it uses, then these go. */
#include "core/worker.h"

struct acl;
struct dc_table;
struct gen;
struct mask_table;
struct middle;
struct options;
struct replay;
struct tlslearn;
struct users;
struct worker;

/* Seconds without a byte either way after which a connection's cipher contexts are parked. */
#define CONN_PARK_IDLE 1.0

/* Counters of one worker; written by it only (relaxed), summed by readers. Its fields are
 * the table's (proxy/counters.h), which also makes their sum, /metrics, /stats and SIGUSR1. */
struct proxy_stats {
    PROXY_STATS_FIELDS
};

/* Counter updates: core/stat.h (STAT_INC, STAT_ADD, STAT_DEC, STAT_GET). */

/* Pipes a worker may lend out at once for splice (2 descriptors each, held only while
 * bytes are in flight); main counts them in the descriptor budget. */
#define PROXY_PIPES_PER_WORKER 64

/* Per-worker proxy state (the worker's ctx). */
struct proxy_worker {
    struct worker *w;
    const struct options *opt;
    const struct dc_table *dcs;
    const struct mask_table *masks;
    struct replay *replay;             /* shared by all workers; NULL = off */
    struct tlslearn *learn;            /* the site's TLS profile (shared; worker 0 learns) */
    uint64_t rng;                      /* xorshift state for record-size noise */
    struct rstore rstore;              /* this worker's link to the fleet's replay store */
    rstore_cb store_answer;            /* the state machine's entry point for its answers */
    const struct acl *acl;             /* shared, read-only; NULL or empty = everyone */
    struct gen *gen;                   /* the generation new connections take (one ref) */
    struct gen *_Atomic next_gen;      /* posted by main (proxy_worker_post_gen), one ref */
    struct users *users;               /* the users registry (shared) */
    ev_timer sweep_timer;              /* every second: quota / expiry of live connections */
    ev_timer drain_timer;              /* removed-user = drain: the next drain_at of a live
                                        * connection (stopped while none drains) */
    int draining;                      /* some live connection drains (drain_schedule) */
    struct ipcount accepts;            /* accept-rate: per source, accepts in this second */
    ev_tstamp accepts_second;
    uint32_t accepts_max;              /* accept-rate for this worker (0 = off) */
    uint32_t handshakes, handshakes_max; /* unfinished handshakes / max-handshakes share */
    int nworkers;
    int tls_enabled;                   /* allow-ee and at least one ee secret */
    struct arena arena;
    struct pool conns;
    struct conn *live;
    struct conn *waiters;
    struct conn *mask_waiters;         /* fronted connections waiting for their own budget */
    size_t mask_blocks, mask_blocks_max; /* arena blocks fronted connections hold / may hold */
    size_t relay_blocks_max;           /* the rest of the arena, for relays (0 = no cap) */
    struct ipcount strangers;          /* per source address: connections not (yet) proven */
    uint32_t strangers_max;            /* probe-limit-per-ip for this worker (0 = off) */
    size_t hbuf_bytes, hbuf_max;       /* hello/PROXY/ServerHello buffers held, and the cap */
    struct conn *closing;              /* marked by conn_close_later, closed before the loop
                                        * sleeps again (close_prepare) */
    ev_prepare close_prepare;
    struct conn *batch;                /* connections whose small writes wait for batch_timer */
    ev_timer batch_timer;
    uint64_t next_id;
    struct sock_opts sockopts;
    struct dcpool_set dcpool;
    struct middle *middle;             /* middle mode (ad-tag); NULL in direct mode */
    /* Log lines about strangers (rejected or failed handshakes), per close reason (and one
     * more slot for reject lines): LOG_BURST a window, the rest counted and summed up. */
    struct {
        uint32_t shown, dropped;
    } loglim[CR_COUNT + 1];
    ev_timer loglim_timer;
    /* Idle pipes for splice; pipes_out counts those held by connections. */
    int (*pipes)[2];
    int npipes, pipes_out, pipes_cap;
    int pipe_size;
    /* A service on this worker's loop besides the proxy (the WEB listener on worker 0): it
     * stops first when the worker stops (proxy_on_stop), in the worker's thread. */
    void (*service_stop)(void *arg);
    void *service;
    struct proxy_stats stats;
    struct ja4stat ja4stat;            /* hellos by JA4 (proxy/ja4stat.h), read by metrics */
};

/* Sets up the proxy state of worker w (index, of nworkers) from generation g (the worker
 * takes a reference) and registers the proxy's handlers (accept, stop, commands) and itself as
 * w's ctx. Limits are the options' process-wide values divided by nworkers. users is the
 * process's registry. Returns 0, or -1. */
int proxy_worker_init(struct proxy_worker *pw, struct worker *w, struct gen *g,
                      struct users *users, struct replay *replay, int nworkers);

/* worker_add_listener_tag: the listen-prefix listener (its connections' local address names
 * the user they may be). */
#define PROXY_LISTENER_PREFIX 1

/* Command bit for worker_post: a new generation waits in next_gen. */
#define PROXY_CMD_GEN 1

/* Main or the reloader thread: hands generation g to the worker (takes a reference for it);
 * the worker adopts it in its own thread (new connections use it; connections of users g no
 * longer has are closed; live ones keep theirs). Only a g that removed users wakes the worker
 * (their connections end now); any other waits for the worker's next accept, which takes it
 * before anything else, or its next sweep (within a second): a reload that changes nothing
 * for the live connections costs the relay loop no wake-up. */
void proxy_worker_post_gen(struct proxy_worker *pw, struct gen *g);

/* Worker thread: adopts the generation main posted, if there is one (a relaxed load if not). */
void proxy_worker_take_gen(struct proxy_worker *pw);

/* Frees the pools (after the worker's loop has ended). */
void proxy_worker_destroy(struct proxy_worker *pw);

/* Handlers given to core/worker (exposed for tests). */
void proxy_on_accept(struct worker *w, int fd, const struct sock_addr *peer);
void proxy_on_stop(struct worker *w);

/* Ends a connection: logs the reason once (with the state it was in), counts it, frees
 * everything. The caller must not touch c afterwards. Only the state machine's entry points
 * (client I/O, upstream I/O, timers, an asynchronous answer) call it, on a connection whose
 * event they are handling; the steps they call return a verdict (enum conn_reason, CR_NONE to
 * go on) instead. Returns -1 (kept while callers still propagate "closed"). */
int conn_close(struct conn *c, enum conn_reason r);

/* Closing another connection than the one being handled (an ME link died, a batch flush
 * failed, max-handshakes evicts the oldest): marks c with reason r and queues it; no event
 * reaches it any more, and the worker closes the queue before its loop sleeps again. A second
 * mark keeps the first reason. */
void conn_close_later(struct conn *c, enum conn_reason r);

/* Takes c off its worker's list of connections waiting for a block (conn_mark.c). */
void waiters_remove(struct proxy_worker *pw, struct conn *c);

/* Takes c off its worker's batch list (conn_mark.c). */
void batch_remove(struct proxy_worker *pw, struct conn *c);

/* The per-worker counters bytes of connection c go to in direction down (0 client->DC,
 * 1 DC->client): out[0] the total, out[1] the user's (NULL if c proved no secret), out[2]
 * the DC's (NULL if fronted). */
void conn_byte_counters(struct conn *c, int down, stat_t *out[3]);

#endif
