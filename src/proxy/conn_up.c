/* conn_up.c: upstream connect: a DC (or the fronting target) address by address, via socks5. */
#include "proxy/conn_int.h"

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

/* 1 if this connection's upstream goes through the socks5 server. */
int up_via_socks(const struct conn *c)
{
    const struct options *o = &c->gen->opt;
    return o->socks5_on && (c->mode == CONN_MODE_MTPROTO || o->socks5_mask);
}

/* Starts connecting to the next candidate address (through the socks5 server, whose TCP
 * connect comes first, if configured). Returns CR_NONE (connecting, or waiting for a free
 * descriptor), or the reason every address failed. */
enum conn_reason up_connect_next(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    while (c->dc_try < c->dc_count) {
        const struct sock_addr *target = up_target_addr(c, c->dc_try++);
        const struct sock_addr *a = up_via_socks(c) ? &c->gen->opt.socks5_addr : target;
        c->sd.step = SOCKS_STEP_NONE;
        int fd = sock_connect(a, &pw->sockopts);
        /* Out of descriptors although one was released for this socket (another worker took
         * it): the worker's spare goes to this accepted client, not to a new one. */
        if (fd < 0 && (errno == EMFILE || errno == ENFILE) && !worker_reserve_spend(pw->w))
            fd = sock_connect(a, &pw->sockopts);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
            /* Still out of descriptors: not this address's fault. The client waits (and new
             * ones wait in the backlog) until one frees, within the connect timeout. */
            c->dc_try--;
            worker_backoff_accept(pw->w, errno);
            if (++c->fd_waits * 100u > c->gen->opt.connect_timeout_ms) {
                STAT_INC(&pw->stats.dc_connect_fails);
                break;
            }
            timer_arm(c, 0.1);
            return CR_NONE;
        }
        if (fd < 0) {
            STAT_INC(&pw->stats.dc_connect_fails);
            up_log_attempt(c, target, errno);
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

/* Closes the current upstream attempt and goes on with the next address. */
static enum conn_reason up_drop_attempt(struct conn *c)
{
    side_watch(c, &c->dc, 0);
    close(c->dc.fd);
    c->dc.fd = -1;
    return up_connect_next(c);
}

/* Drops the current attempt (failed or timed out) and tries the next address. */
static enum conn_reason up_retry(struct conn *c, int err)
{
    STAT_INC(&c->pw->stats.dc_connect_fails);
    up_log_attempt(c, up_target_addr(c, c->dc_try - 1), err);
    return up_drop_attempt(c);
}

/* The socks5 handshake failed for this attempt: say why (the server's own reason for a
 * refused CONNECT), then the next address. */
static enum conn_reason up_established(struct conn *c);

static enum conn_reason up_socks_failed(struct conn *c, const char *why, int code)
{
    struct proxy_worker *pw = c->pw;
    STAT_INC(&pw->stats.dc_connect_fails);
    STAT_INC(&pw->stats.socks_fails);
    if (log_enabled(LOG_LVL_INFO)) {
        char t[SOCK_ADDR_STRLEN], sv[SOCK_ADDR_STRLEN];
        sock_addr_format(up_target_addr(c, c->dc_try - 1), t, sizeof t);
        sock_addr_format(&c->gen->opt.socks5_addr, sv, sizeof sv);
        if (code > 0)
            log_info("w%d conn %llu: socks5 %s refused %s %s: %s (reply %d)", pw->w->id,
                     (unsigned long long)c->id, sv, c->mode == CONN_MODE_MASK ? "mask" : "dc", t,
                     why, code);
        else
            log_info("w%d conn %llu: socks5 %s, connecting %s %s: %s", pw->w->id,
                     (unsigned long long)c->id, sv, c->mode == CONN_MODE_MASK ? "mask" : "dc", t,
                     why);
    }
    return up_drop_attempt(c);
}

/* CONNECTING through socks5: the server's TCP connect succeeded (start) or it sent bytes. */
static enum conn_reason up_socks_step(struct conn *c)
{
    const struct options *o = &c->gen->opt;
    const char *why = "socks5: handshake failed";
    int code = 0;
    enum socks_result r =
        c->sd.step == SOCKS_STEP_NONE
            ? socks_dial_start(&c->sd, c->dc.fd, &o->socks5, &why)
            : socks_dial_read(&c->sd, c->dc.fd, &o->socks5, &up_target_addr(c, c->dc_try - 1)->u.sa,
                              &why, &code);
    if (r == SOCKS_DIAL_FAIL)
        return up_socks_failed(c, why, code);
    if (r == SOCKS_DIAL_WAIT) {
        side_watch(c, &c->dc, EV_READ);
        return CR_NONE;
    }
    return up_established(c);
}

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
    enum conn_reason r = conn_side_flush(c, &c->dc, &c->cli);
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
 * descriptor goes back). The machine, not middle.c, then moves c to RELAY and arms its idle
 * timer. */
enum conn_reason up_middle(struct conn *c, uint8_t *extra, size_t n)
{
    reserve_release(c);
    c->state = CS_CONNECTING; /* holds no reserve from here (a close must not give it twice) */
    enum conn_reason r = conn_middle_attach(c, extra, n);
    if (conn_stop(r) || c->closing)
        return r;
    c->state = CS_RELAY;
    timer_arm(c, c->gen->opt.idle_timeout_ms / 1000.0);
    return CR_NONE;
}

enum conn_reason up_event(struct conn *c)
{
    if (up_via_socks(c) && c->sd.step != SOCKS_STEP_NONE)
        return up_socks_step(c);
    int err = sock_connect_result(c->dc.fd);
    if (err)
        return up_retry(c, err);
    if (up_via_socks(c))
        return up_socks_step(c);
    return up_established(c);
}

enum conn_reason up_timeout(struct conn *c)
{
    if (c->dc.fd < 0)
        return up_connect_next(c); /* after a wait for a free descriptor */
    return up_retry(c, 0);
}
