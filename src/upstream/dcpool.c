/* dcpool.c: keeps a few connected sockets per DC so a new client skips the TCP connect. */
#include "upstream/dcpool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"

#define DCPOOL_BACKOFF_MIN 1.0
#define DCPOOL_BACKOFF_MAX 60.0
#define DCPOOL_SHORT_LIFE 1.0 /* a socket dropped sooner than this counts as a failure */


static void slot_connect(struct dcpool_slot *sl);

static void slot_clear(struct dcpool_slot *sl)
{
    struct ev_loop *loop = sl->pool->set->loop;
    ev_io_stop(loop, &sl->io);
    ev_timer_stop(loop, &sl->timer);
    if (sl->fd >= 0)
        close(sl->fd);
    sl->fd = -1;
    if (sl->ready)
        STAT_DEC(&sl->pool->set->stats.ready);
    sl->ready = 0;
}

/* Waits before the next attempt: doubling from 1 s to 60 s while failures repeat. */
static void slot_backoff(struct dcpool_slot *sl)
{
    struct dcpool *p = sl->pool;
    double d = DCPOOL_BACKOFF_MIN;
    for (int i = 1; i < p->fails && d < DCPOOL_BACKOFF_MAX; i++)
        d *= 2;
    if (d > DCPOOL_BACKOFF_MAX)
        d = DCPOOL_BACKOFF_MAX;
    ev_timer_set(&sl->timer, d, 0);
    ev_timer_start(p->set->loop, &sl->timer);
}

/* The current attempt failed: try the next address, or back off after the last. */
static void slot_failed(struct dcpool_slot *sl)
{
    struct dcpool *p = sl->pool;
    STAT_INC(&p->set->stats.failures);
    slot_clear(sl);
    if (++sl->addr_try < p->count) {
        slot_connect(sl);
        return;
    }
    sl->addr_try = 0;
    p->fails++;
    slot_backoff(sl);
}

/* Arms a ready socket's recycle timer: DCPOOL_MAX_IDLE after it became ready, or
 * DCPOOL_RECYCLE_SHARE of the DC's learnt idle timeout (at once if that already passed). */
static void slot_arm_recycle(struct dcpool_slot *sl)
{
    struct dcpool *p = sl->pool;
    struct ev_loop *loop = p->set->loop;
    double life = DCPOOL_MAX_IDLE;
    if (p->idle_life > 0 && p->idle_life * DCPOOL_RECYCLE_SHARE < life)
        life = p->idle_life * DCPOOL_RECYCLE_SHARE;
    double left = sl->born + life - ev_now(loop);
    ev_timer_stop(loop, &sl->timer);
    ev_timer_set(&sl->timer, left > 0 ? left : 0, 0);
    ev_timer_start(loop, &sl->timer);
}

/* Where slot sl's current attempt goes. */
static struct dial_to slot_to(const struct dcpool_slot *sl)
{
    const struct dcpool *p = sl->pool;
    const struct dcpool_set *s = p->set;
    return (struct dial_to){.target = &s->dcs->e[p->first + sl->addr_try].addr,
                            .socks = s->socks, .socks_addr = &s->socks_addr, .opts = &s->opts};
}

static void slot_watch(struct dcpool_slot *sl, int events)
{
    struct ev_loop *loop = sl->pool->set->loop;
    ev_io_stop(loop, &sl->io);
    ev_io_set(&sl->io, sl->fd, events);
    ev_io_start(loop, &sl->io);
}

static void on_slot_io(struct ev_loop *loop, ev_io *io, int revents)
{
    struct dcpool_slot *sl = io->data;
    struct dcpool *p = sl->pool;
    if (!sl->ready) {
        struct dial_to to = slot_to(sl);
        struct dial_result r;
        enum dial_verdict v = dial_step(&sl->dial, sl->fd, &to, revents, &r);
        if (v > 0) { /* not yet: the events to wait for */
            slot_watch(sl, v);
            return;
        }
        if (v != DIAL_DONE) {
            if (r.socks)
                log_debug("dc pool %d: %s", p->id, r.why);
            slot_failed(sl);
            return;
        }
        sl->ready = 1;
        STAT_INC(&p->set->stats.ready);
        sl->born = ev_now(loop);
        p->fails = 0;
        STAT_INC(&p->set->stats.connects);
        slot_arm_recycle(sl);
        slot_watch(sl, EV_READ); /* an idle pooled socket reads only EOF/RST */
        return;
    }
    /* Readable while idle: the DC closed it (or sent something unexpected). Replace it. */
    STAT_INC(&p->set->stats.dropped);
    double life = ev_now(loop) - sl->born;
    slot_clear(sl);
    if (life < DCPOOL_SHORT_LIFE) {
        p->fails++;
        slot_backoff(sl);
        return;
    }
    /* The DC's idle timeout: learnt from two drops in a row of this slot (the longer life),
     * so a single early close (a DC restart, a path reset) teaches nothing that would make
     * the pool reconnect more often than it must; a DC that really shortens its timeout is
     * followed after two drops. The other ready sockets are re-armed (recycled now if their
     * time already passed). */
    if (sl->last_drop > 0) {
        p->idle_life = life > sl->last_drop ? life : sl->last_drop;
        for (int k = 0; k < p->set->per_dc; k++)
            if (p->slots[k].ready)
                slot_arm_recycle(&p->slots[k]);
    }
    sl->last_drop = life;
    slot_connect(sl);
}

static void on_slot_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct dcpool_slot *sl = t->data;
    if (sl->ready) { /* unused for its whole life: replace it before the DC drops it */
        STAT_INC(&sl->pool->set->stats.recycled);
        slot_clear(sl);
        slot_connect(sl);
    } else if (sl->fd >= 0) {
        slot_failed(sl); /* connect timed out */
    } else {
        slot_connect(sl); /* back-off over */
    }
}

static void slot_connect(struct dcpool_slot *sl)
{
    struct dcpool *p = sl->pool;
    struct dcpool_set *s = p->set;
    if (s->stopped)
        return;
    struct dial_to to = slot_to(sl);
    struct dial_result r;
    enum dial_verdict v = dial_start(&sl->dial, &to, &sl->fd, &r);
    if (v == DIAL_NO_FD) {
        /* Out of descriptors: not the DC's fault, and the reserve kept for accepted clients
         * is not ours to take. Try again later, without growing the DC's back-off. */
        ev_timer_set(&sl->timer, DCPOOL_BACKOFF_MIN, 0);
        ev_timer_start(s->loop, &sl->timer);
        return;
    }
    if (v == DIAL_FAIL) {
        slot_failed(sl);
        return;
    }
    ev_io_set(&sl->io, sl->fd, EV_WRITE);
    ev_io_start(s->loop, &sl->io);
    ev_timer_set(&sl->timer, s->connect_timeout, 0);
    ev_timer_start(s->loop, &sl->timer);
}

int dcpool_init(struct dcpool_set *s, struct ev_loop *loop, const struct dc_table *dcs,
                int per_dc, const struct sock_opts *opts, double connect_timeout,
                const struct socks5_server *socks, const struct sock_addr *socks_addr)
{
    memset(s, 0, sizeof *s);
    s->socks = socks;
    if (socks)
        s->socks_addr = *socks_addr;
    s->loop = loop;
    s->dcs = dcs;
    s->opts = *opts;
    s->per_dc = per_dc;
    s->connect_timeout = connect_timeout;
    if (per_dc <= 0)
        return 0;
    /* Entries of one id are contiguous in the table (dc_table_build groups them). */
    s->pools = calloc((size_t)dcs->n, sizeof *s->pools);
    if (!s->pools)
        return -1;
    for (int i = 0; i < dcs->n;) {
        struct dcpool *p = &s->pools[s->npools++];
        p->set = s;
        p->id = dcs->e[i].id;
        p->first = i;
        while (i < dcs->n && dcs->e[i].id == p->id)
            i++;
        p->count = i - p->first;
        p->slots = calloc((size_t)per_dc, sizeof *p->slots);
        if (!p->slots)
            return -1;
        for (int k = 0; k < per_dc; k++) {
            struct dcpool_slot *sl = &p->slots[k];
            sl->pool = p;
            sl->fd = -1;
            ev_init(&sl->io, on_slot_io);
            sl->io.data = sl;
            ev_init(&sl->timer, on_slot_timer);
            sl->timer.data = sl;
            slot_connect(sl);
        }
    }
    return 0;
}

int dcpool_claim(struct dcpool_set *s, int id)
{
    for (int i = 0; i < s->npools; i++) {
        struct dcpool *p = &s->pools[i];
        if (p->id != id)
            continue;
        for (int k = 0; k < s->per_dc; k++) {
            struct dcpool_slot *sl = &p->slots[k];
            if (!sl->ready)
                continue;
            /* A close from the DC may not have been seen yet: never hand out a dead one. */
            char probe;
            ssize_t n = recv(sl->fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT);
            if (!(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) {
                STAT_INC(&s->stats.dropped);
                slot_clear(sl);
                slot_connect(sl);
                continue;
            }
            int fd = sl->fd;
            sl->fd = -1; /* the caller owns it now */
            slot_clear(sl);
            STAT_INC(&s->stats.claims);
            slot_connect(sl); /* replace it */
            return fd;
        }
        return -1;
    }
    return -1;
}

void dcpool_stop(struct dcpool_set *s)
{
    s->stopped = 1;
    for (int i = 0; i < s->npools; i++)
        for (int k = 0; k < s->per_dc; k++)
            slot_clear(&s->pools[i].slots[k]);
}

void dcpool_destroy(struct dcpool_set *s)
{
    for (int i = 0; i < s->npools; i++)
        free(s->pools[i].slots);
    free(s->pools);
    s->pools = NULL;
    s->npools = 0;
}
