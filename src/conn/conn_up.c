/* conn_up.c: upstream connect: a DC (or the fronting target) address by address, via socks5. */
#include "conn/conn_int.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"

/* The address of upstream attempt i: a DC address, or the fronting target. */
static const struct sock_addr *up_target_addr(const struct conn *c, int i)
{
    if (c->mode == CONN_MODE_MASK)
        return &c->mask->addr;
    return &c->gen->dcs.e[c->dc_first + i].addr;
}

static void up_log_attempt(struct conn *c, const struct sock_addr *a, int err)
{
    if (!log_enabled(LOG_LVL_DEBUG))
        return;
    char t[SOCK_ADDR_STRLEN];
    sock_addr_format(a, t, sizeof t);
    log_debug("w%d conn %llu: connect %s %d %s: %s", c->pw->w->id, (unsigned long long)c->id,
              c->mode == CONN_MODE_MASK ? "mask" : "dc", c->dc_resolved, t,
              err ? strerror(err) : "timed out");
}

/* Where upstream attempt i goes: through the socks5 server of the connection's own generation
 * when it applies to this mode (the dialer does the TCP connect and the SOCKS5 steps). */
static struct dial_to up_to(const struct conn *c, int i)
{
    const struct options *o = &c->gen->opt;
    int socks = o->socks5_on && (c->mode == CONN_MODE_MTPROTO || o->socks5_mask);
    return (struct dial_to){.target = up_target_addr(c, i), .socks = socks ? &o->socks5 : NULL,
                            .socks_addr = &o->socks5_addr, .opts = &c->pw->sockopts};
}

/* Starts connecting to the next candidate address. Returns CR_NONE (connecting, or waiting
 * for a free descriptor), or the reason every address failed. */
enum conn_reason up_connect_next(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    while (c->dc_try < c->dc_count) {
        struct dial_to to = up_to(c, c->dc_try++);
        struct dial_result r;
        int fd = -1;
        enum dial_verdict v = dial_start(&c->dial, &to, &fd, &r);
        /* Out of descriptors although one was released for this socket (another worker took
         * it): the worker's spare goes to this accepted client, not to a new one. */
        if (v == DIAL_NO_FD && !worker_reserve_spend(pw->w))
            v = dial_start(&c->dial, &to, &fd, &r);
        if (v == DIAL_NO_FD) {
            /* Still out of descriptors: not this address's fault. The client waits (and new
             * ones wait in the backlog) until one frees, within the connect timeout. */
            c->dc_try--;
            worker_backoff_accept(pw->w, r.err);
            if (++c->fd_waits * 100u > c->gen->opt.connect_timeout_ms) {
                STAT_INC(&pw->stats.dc_connect_fails);
                break;
            }
            timer_arm(c, 0.1);
            return CR_NONE;
        }
        if (v == DIAL_FAIL) {
            STAT_INC(&pw->stats.dc_connect_fails);
            up_log_attempt(c, to.target, r.err);
            continue;
        }
        c->dc.fd = fd;
        c->dc.events = 0;
        ev_io_set(&c->dc.io, fd, EV_WRITE); /* its callback: set at accept */
        side_watch(c, &c->dc, EV_WRITE);
        timer_arm(c, c->gen->opt.connect_timeout_ms / 1000.0);
        return CR_NONE;
    }
    return c->mode == CONN_MODE_MASK ? CR_MASK_UNREACHABLE : CR_DC_UNREACHABLE;
}

/* Drops the current attempt (failed, or timed out when r is NULL): counted, said why, and
 * the next address. */
static enum conn_reason up_retry(struct conn *c, const struct dial_to *to,
                                 const struct dial_result *r)
{
    struct proxy_worker *pw = c->pw;
    STAT_INC(&pw->stats.dc_connect_fails);
    if (r && r->socks) { /* the server's own reason for a refused CONNECT, if it gave one */
        STAT_INC(&pw->stats.socks_fails);
        if (log_enabled(LOG_LVL_INFO)) {
            char t[SOCK_ADDR_STRLEN], sv[SOCK_ADDR_STRLEN];
            sock_addr_format(to->target, t, sizeof t);
            sock_addr_format(to->socks_addr, sv, sizeof sv);
            const char *kind = c->mode == CONN_MODE_MASK ? "mask" : "dc";
            if (r->code > 0)
                log_info("w%d conn %llu: socks5 %s refused %s %s: %s (reply %d)", pw->w->id,
                         (unsigned long long)c->id, sv, kind, t, r->why, r->code);
            else
                log_info("w%d conn %llu: socks5 %s, connecting %s %s: %s", pw->w->id,
                         (unsigned long long)c->id, sv, kind, t, r->why);
        }
    } else {
        up_log_attempt(c, to->target, r ? r->err : 0);
    }
    side_watch(c, &c->dc, 0);
    close(c->dc.fd);
    c->dc.fd = -1;
    return up_connect_next(c);
}

static enum conn_reason up_established(struct conn *c);

/* The upstream socket is connected: what is queued for it (our obfuscated2 header and any
 * early client bytes, or the replayed probe) goes out, and the relay starts (CS_RELAY). */
static enum conn_reason up_established(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    if (c->mode == CONN_MODE_MTPROTO) {
        STAT_INC(&pw->stats.dc_connects);
        /* Our 64-byte header goes first, straight from the connection, so a client is never
         * dropped for want of a buffer block (a fresh socket takes it whole; the rest of a
         * short write goes to the head of the queue, before any early client bytes). */
        ssize_t w = send(c->dc.fd, c->hdr, OBFS2_HDR_LEN, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return CR_DC_CLOSED;
        if (w < OBFS2_HDR_LEN) {
            size_t done = w > 0 ? (size_t)w : 0;
            struct arena_block *b = arena_get(&pw->arena);
            if (!b)
                return CR_NO_MEMORY;
            memcpy(b->data, c->hdr + done, OBFS2_HDR_LEN - done);
            b->end = (uint32_t)(OBFS2_HDR_LEN - done);
            b->next = c->dc.qhead;
            c->dc.qhead = b;
            if (!c->dc.qtail)
                c->dc.qtail = b;
            c->dc.queued += b->end;
        }
    }
    if (c->gen->opt.buffers && relay_reserve(c))
        return CR_NO_MEMORY;
    c->state = CS_RELAY;
    c->last_io = ev_now(pw->w->loop);
    const struct options *o = &c->gen->opt; /* its own generation's timeouts */
    timer_arm(c, (c->mode == CONN_MODE_MASK ? o->mask_idle_ms : o->idle_timeout_ms) / 1000.0);
    enum conn_reason r = side_flush(c, &c->dc, &c->cli);
    if (conn_stop(r))
        return r;
    relay_watch(c);
    return CR_NONE;
}

/* Connects the upstream side: a pooled DC socket if one is ready, else a new connect. The
 * client is read again only once the relay runs (its bytes wait in its socket). Returns the
 * verdict of the first step. */
enum conn_reason up_start(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    /* Claimed before the reserved descriptor is given back, so the pool's refill of the slot
     * cannot take it (a refill out of descriptors just retries later). */
    int fd = c->mode == CONN_MODE_MTPROTO ? dcpool_claim(&pw->dcpool, c->dc_resolved) : -1;
    reserve_release(c);
    c->state = CS_CONNECTING;
    c->dc_try = 0;
    side_watch(c, &c->cli, c->cli.queued ? EV_WRITE : 0);
    if (fd >= 0) { /* pre-connected: the header goes out now, no TCP handshake to wait for */
        c->dc.fd = fd;
        c->dc.events = 0;
        ev_io_set(&c->dc.io, fd, EV_READ);
        return up_established(c);
    }
    return up_connect_next(c);
}

/* Middle mode: an ME link instead of a DC connection (no upstream socket: the reserved
 * descriptor goes back). The machine, not middle_*.c, then moves c to RELAY and arms its idle
 * timer. */
enum conn_reason up_middle(struct conn *c, uint8_t *extra, size_t n)
{
    reserve_release(c);
    c->state = CS_CONNECTING; /* holds no reserve from here (a close must not give it twice) */
    enum conn_reason r = middle_attach(c, extra, n);
    if (conn_stop(r) || c->closing)
        return r;
    c->state = CS_RELAY;
    timer_arm(c, c->gen->opt.idle_timeout_ms / 1000.0);
    return CR_NONE;
}

/* CONNECTING: an event on the upstream socket moves the dial on. */
enum conn_reason up_event(struct conn *c, int revents)
{
    struct dial_to to = up_to(c, c->dc_try - 1);
    struct dial_result r;
    enum dial_verdict v = dial_step(&c->dial, c->dc.fd, &to, revents, &r);
    if (v == DIAL_DONE)
        return up_established(c);
    if (v > 0) { /* not yet: the events to wait for */
        side_watch(c, &c->dc, (unsigned)v);
        return CR_NONE;
    }
    return up_retry(c, &to, &r);
}

enum conn_reason up_timeout(struct conn *c)
{
    if (c->dc.fd < 0)
        return up_connect_next(c); /* after a wait for a free descriptor */
    struct dial_to to = up_to(c, c->dc_try - 1);
    return up_retry(c, &to, NULL);
}
