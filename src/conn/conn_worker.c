/* conn_worker.c: the worker's life: set-up, stop, the sweep, cipher parking, generations. */
#include "conn/conn_int.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "upstream/tlslearn.h"

/* Hands back the cipher contexts of connections that moved no byte for CONN_PARK_IDLE
 * seconds (the next byte takes one again), and the freed memory to the system. */
static void ciphers_park_idle(struct proxy_worker *pw, double now)
{
    int freed = 0;
    for (struct conn *c = pw->live; c; c = c->next) {
        if (c->state != CS_RELAY || now - c->last_io < CONN_PARK_IDLE)
            continue;
        int held = 0;
        for (int i = 0; i < 4; i++) {
            held |= c->ctr[i].ctx != NULL;
            freed += crypto_ctr_park(&c->ctr[i]);
        }
        if (held)
            STAT_INC(&pw->stats.ctr_parked);
    }
#ifdef __GLIBC__
    if (freed >= 64)
        malloc_trim(0); /* glibc keeps freed chunks mapped; the contexts were ~0.9 KB each */
#endif
}

/* Every second: live connections of users whose quota ran out (on any worker) or who expired
 * are ended. */
static void on_sweep_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct proxy_worker *pw = t->data;
    double now = ev_now(loop);
    proxy_worker_take_gen(pw); /* one posted without a wake-up */
    ciphers_park_idle(pw, now);
    for (struct conn *c = pw->live, *next; c; c = next) {
        next = c->next;
        const struct user_limit *l = c->lim;
        if (!l || c->uid < 0)
            continue;
        struct user_shared *us = users_shared(pw->users, (uint32_t)c->uid);
        if ((l->quota && shared64_load(&us->used) >= l->quota) ||
            (l->expires && now >= (double)l->expires))
            conn_close(c, CR_LIMIT);
    }
}

/* removed-user = drain: the drain timer is set for the earliest drain_at among the live
 * connections (next; 0 = none drains: stopped). */
static void drain_schedule(struct proxy_worker *pw, double next)
{
    struct ev_loop *loop = pw->w->loop;
    ev_timer_stop(loop, &pw->drain_timer);
    pw->draining = next != 0;
    if (next == 0)
        return;
    double in = next - ev_now(loop);
    ev_timer_set(&pw->drain_timer, in > 0 ? in : 0, 0);
    ev_timer_start(loop, &pw->drain_timer);
}

/* The drain timer: connections of removed users whose drain-timeout passed are closed. Walks
 * the live list only when a drain ends (the data path never looks at drain_at). */
static void on_drain_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct proxy_worker *pw = t->data;
    proxy_worker_take_gen(pw); /* a user back in a generation posted since stops draining */
    double now = ev_now(loop), next = 0;
    for (struct conn *c = pw->live, *n; c; c = n) {
        n = c->next;
        if (c->drain_at == 0)
            continue;
        if (c->drain_at <= now)
            conn_close(c, CR_DRAINED);
        else if (next == 0 || c->drain_at < next)
            next = c->drain_at;
    }
    drain_schedule(pw, next);
}

/* A new generation: users it does not have lose their live connections at once
 * (removed-user = close) or once drain-timeout has passed (drain); users it has again stop
 * draining (gen_user_fate). */
static void gen_users_apply(struct proxy_worker *pw, const struct gen *g)
{
    double now = ev_now(pw->w->loop), next = 0;
    unsigned started = 0;
    for (struct conn *c = pw->live, *n; c; c = n) {
        n = c->next;
        int was = c->drain_at != 0;
        switch (gen_user_fate(g, c->uid, now, &c->drain_at)) {
        case GEN_CLOSE:
            conn_close(c, CR_USER_REMOVED);
            break;
        case GEN_DRAIN:
            started += !was;
            if (next == 0 || c->drain_at < next)
                next = c->drain_at;
            break;
        case GEN_KEEP:
            break;
        }
    }
    if (started)
        log_info("w%d: live connections of removed users go on (removed-user = drain): %u, "
                 "closed in %.0f s at the latest", pw->w->id, started,
                 g->opt.drain_timeout_ms / 1000.0);
    drain_schedule(pw, next);
}

/* Worker thread: switches to the generation main posted. */
static void gen_adopt(struct proxy_worker *pw, struct gen *g)
{
    struct gen *old = pw->gen;
    const struct options *o = &g->opt;
    pw->gen = g;
    pw->opt = o;
    pw->dcs = &g->dcs;
    pw->masks = &g->masks;
    pw->acl = &g->acl;
    pw->tls_enabled = o->allow_ee && g->has_ee;
    pw->accepts_max = (uint32_t)((o->accept_rate + (unsigned)pw->nworkers - 1) /
                                 (unsigned)pw->nworkers);
    /* Pieces set up at start keep their settings (restart keys); they point at the new copy. */
    pw->rstore.cfg = &o->rstore;
    if (pw->dcpool.socks)
        pw->dcpool.socks = &o->socks5;
    if (old && (old->dcs.n != g->dcs.n || memcmp(old->dcs.e, g->dcs.e, sizeof g->dcs.e)) &&
        o->dc_pool && !o->middle) {
        /* A new DC table: the pool of idle pre-connected sockets starts over (no client
         * holds a pool socket: a claimed one belongs to its connection). */
        struct dcpool_stats keep = pw->dcpool.stats;
        dcpool_stop(&pw->dcpool);
        dcpool_destroy(&pw->dcpool);
        dcpool_init(&pw->dcpool, pw->w->loop, &g->dcs, o->dc_pool, &pw->sockopts,
                    o->connect_timeout_ms / 1000.0, o->socks5_on ? &o->socks5 : NULL,
                    &o->socks5_addr);
        pw->dcpool.stats = keep;
    } else {
        pw->dcpool.dcs = &g->dcs;
    }
    /* The live connections are looked at only if a user may be gone or back: g removed some
     * from the one before it, a generation between old and g was never taken, or drains
     * are under way (a user back in g stops draining; not the drain timer's activity: it is
     * stopped while its own callback takes a generation). */
    if (old && (g->removed || g->serial != old->serial + 1 || pw->draining))
        gen_users_apply(pw, g);
    middle_adopt(pw, g, old); /* another ME table: links to it, the old ones drain */
    gen_unref(old);           /* with a reaper (the proxy's), main frees it */
}

void proxy_worker_take_gen(struct proxy_worker *pw)
{
    if (!atomic_load_explicit(&pw->next_gen, memory_order_relaxed))
        return;
    struct gen *g = atomic_exchange(&pw->next_gen, NULL);
    if (g)
        gen_adopt(pw, g);
}

/* A generation posted without a wake-up is taken before a new connection picks one. */
static void on_accept(struct worker *w, int fd, const struct sock_addr *peer)
{
    proxy_worker_take_gen(w->ctx);
    proxy_on_accept(w, fd, peer);
}

static void proxy_on_cmd(struct worker *w, int cmd)
{
    if (cmd & PROXY_CMD_GEN)
        proxy_worker_take_gen(w->ctx);
}

void proxy_worker_post_gen(struct proxy_worker *pw, struct gen *g)
{
    gen_ref(g);
    struct gen *prev = atomic_exchange(&pw->next_gen, g);
    gen_unref(prev); /* a generation the worker never took: superseded */
    if (g->removed) /* a skipped one that removed users woke the worker already */
        worker_post(pw->w, PROXY_CMD_GEN);
}

void proxy_on_stop(struct worker *w)
{
    struct proxy_worker *pw = w->ctx;
    if (pw->service_stop)
        pw->service_stop(pw->service);
    dcpool_stop(&pw->dcpool);
    rstore_stop(&pw->rstore);
    relay_stop(pw);
    while (pw->live)
        conn_close(pw->live, CR_SHUTDOWN);
    ev_prepare_stop(w->loop, &pw->close_prepare);
    middle_stop(pw);
    ev_timer_stop(w->loop, &pw->loglim_timer);
    ev_timer_stop(w->loop, &pw->sweep_timer);
    ev_timer_stop(w->loop, &pw->drain_timer);
    if (pw->learn && w->id == 0)
        tlslearn_stop(pw->learn);
    crypto_thread_cleanup(); /* the thread's one-shot cipher context */
}

/* --- worker setup ---------------------------------------------------------------------- */

/* The worker's share of the process-wide budgets: connection slots, buffer blocks (relays'
 * and fronted connections'), hello buffers, the strangers table. Returns 0, or -1. */
static int worker_budgets(struct proxy_worker *pw, const struct options *opt, int nworkers)
{
    size_t per_conns = ((size_t)opt->max_connections + (size_t)nworkers - 1) / (size_t)nworkers;
    pool_init(&pw->conns, sizeof(struct conn), per_conns);
    size_t max_blocks = 0;
    if (opt->buffer_memory) {
        max_blocks = opt->buffer_memory / (size_t)nworkers / opt->block_size;
        if (max_blocks < ARENA_SLAB_BLOCKS)
            max_blocks = ARENA_SLAB_BLOCKS;
    }
    size_t mask_max = opt->mask_buffer_memory / (size_t)nworkers / opt->block_size;
    if (mask_max < ARENA_SLAB_BLOCKS)
        mask_max = ARENA_SLAB_BLOCKS;
    pw->relay_blocks_max = max_blocks;
    pw->mask_blocks_max = mask_max;
    pw->hbuf_max = opt->mask_buffer_memory / (size_t)nworkers;
    arena_init(&pw->arena, opt->block_size, max_blocks ? max_blocks + mask_max : 0,
               ARENA_SLAB_BLOCKS * 2);
    if (opt->probe_limit_per_ip) {
        pw->strangers_max = (uint32_t)((opt->probe_limit_per_ip + nworkers - 1) / nworkers);
        if (ipcount_init(&pw->strangers, per_conns))
            return -1;
    }
    return 0;
}

int proxy_worker_init(struct proxy_worker *pw, struct worker *w, struct gen *g,
                      struct users *users, struct replay *replay, int nworkers)
{
    memset(pw, 0, sizeof *pw);
    const struct options *opt = &g->opt;
    const struct dc_table *dcs = &g->dcs;
    pw->w = w;
    pw->users = users;
    pw->nworkers = nworkers;
    pw->replay = replay;
    if (crypto_random(&pw->rng, sizeof pw->rng) || !pw->rng)
        pw->rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)pw;
    if (worker_budgets(pw, opt, nworkers))
        return -1;
    relay_init(pw);
    pw->pipes_cap = PROXY_PIPES_PER_WORKER;
    pw->pipes = calloc((size_t)pw->pipes_cap, sizeof *pw->pipes);
    if (!pw->pipes)
        return -1;
    pw->pipe_size = (int)opt->max_buffer;
    pw->sockopts.nodelay = opt->tcp_nodelay;
    pw->sockopts.keepalive_s = (int)(opt->tcp_keepalive_ms / 1000);
    pw->sockopts.sndbuf = (int)opt->sndbuf;
    pw->sockopts.rcvbuf = (int)opt->rcvbuf;
    /* middle mode never dials a DC: no pool (the dc-pool key applies to direct mode) */
    if (dcpool_init(&pw->dcpool, w->loop, dcs, opt->middle ? 0 : opt->dc_pool, &pw->sockopts,
                    opt->connect_timeout_ms / 1000.0, opt->socks5_on ? &opt->socks5 : NULL,
                    &opt->socks5_addr))
        return -1;
    rstore_init(&pw->rstore, w->loop, &opt->rstore);
    pw->store_answer = conn_store_answer;
    ev_prepare_init(&pw->close_prepare, conn_close_prepare);
    pw->close_prepare.data = pw;
    ev_init(&pw->loglim_timer, conn_loglim_timer);
    pw->loglim_timer.data = pw;
    ev_timer_init(&pw->sweep_timer, on_sweep_timer, 1.0, 1.0);
    pw->sweep_timer.data = pw;
    ev_timer_start(w->loop, &pw->sweep_timer);
    ev_init(&pw->drain_timer, on_drain_timer);
    pw->drain_timer.data = pw;
    if (opt->max_handshakes)
        pw->handshakes_max = (uint32_t)((opt->max_handshakes + nworkers - 1) / nworkers);
    gen_ref(g);
    gen_adopt(pw, g);
    w->on_cmd = proxy_on_cmd;
    w->ctx = pw;
    w->on_accept = on_accept;
    w->on_stop = proxy_on_stop;
    return 0;
}

static void conn_free_ciphers(void *obj)
{
    struct conn *c = obj;
    for (int i = 0; i < 4; i++)
        crypto_ctr_wipe(&c->ctr[i]);
}

void proxy_worker_destroy(struct proxy_worker *pw)
{
    dcpool_destroy(&pw->dcpool);
    middle_destroy(pw);
    pool_destroy(&pw->conns, conn_free_ciphers);
    for (int i = 0; i < pw->npipes; i++) {
        close(pw->pipes[i][0]);
        close(pw->pipes[i][1]);
    }
    free(pw->pipes);
    pw->pipes = NULL;
    arena_destroy(&pw->arena);
    ipcount_free(&pw->strangers);
    ipcount_free(&pw->accepts);
    gen_unref(atomic_exchange(&pw->next_gen, NULL));
    gen_unref(pw->gen);
    pw->gen = NULL;
}
