/* conn.c: client connection state machine (header -> DC connect -> relay) and the relay. */
#include "proxy/conn.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/log.h"
#include "core/replay.h"
#include "proto/proxyproto.h"
#include "proxy/middle.h"
#include "proxy/relay.h"
#include "proxy/tlslearn.h"

#define HOLD_DISCARD_MAX (64 * 1024) /* a held bad client may send this much, then is ignored */


static const char *const reason_names[CR_COUNT] = {
    [CR_DONE] = "done",
    [CR_CLIENT_CLOSED] = "client-closed",
    [CR_DC_CLOSED] = "dc-closed",
    [CR_CLIENT_EARLY_EOF] = "client-early-eof",
    [CR_HANDSHAKE_TIMEOUT] = "handshake-timeout",
    [CR_BAD_HEADER] = "bad-header",
    [CR_DC_UNREACHABLE] = "dc-unreachable",
    [CR_IDLE] = "idle-timeout",
    [CR_NO_MEMORY] = "no-memory",
    [CR_CLIENT_PROTOCOL] = "client-protocol-error",
    [CR_MASK_UNREACHABLE] = "mask-unreachable",
    [CR_SHUTDOWN] = "shutdown",
    [CR_REFUSED] = "refused",
    [CR_ME_LINK] = "me-link-lost",
    [CR_SLOW] = "slow-client",
    [CR_LIMIT] = "user-limit",
    [CR_USER_REMOVED] = "user-removed",
    [CR_HANDSHAKE_CAP] = "handshake-cap",
    [CR_ACCEPT_RATE] = "accept-rate",
    [CR_UNKNOWN_SNI] = "unknown-sni",
};

const char *conn_reason_name(enum conn_reason r)
{
    if ((int)r < 0 || r >= CR_COUNT)
        return "none";
    return r < CR_COUNT ? reason_names[r] : "?";
}

const char *conn_kind_name(enum conn_kind k)
{
    static const char *const names[CK_COUNT] = {"none", "obfs2", "dd", "tls", "fronted"};
    return k < CK_COUNT ? names[k] : "?";
}

int conn_dc_slot(int id)
{
    if (id >= 1 && id <= 5)
        return id - 1;
    if (id <= -1 && id >= -5)
        return 4 - id;
    return id == 203 ? 10 : 11;
}

const char *conn_dc_slot_name(int slot)
{
    static const char *const names[CONN_DC_SLOTS] = {"1",  "2",  "3",  "4",   "5",    "-1",
                                                     "-2", "-3", "-4", "-5", "203", "other"};
    return slot >= 0 && slot < CONN_DC_SLOTS ? names[slot] : "other";
}

/* c is now known to be kind k: counted in total and while open. */
static void conn_set_kind(struct conn *c, enum conn_kind k)
{
    struct proxy_stats *st = &c->pw->stats;
    if (c->kind)
        STAT_DEC(&st->kind_active[c->kind]);
    c->kind = (uint8_t)k;
    STAT_INC(&st->kind_total[k]);
    STAT_INC(&st->kind_active[k]);
}

void conn_byte_counters(struct conn *c, int down, stat_t *out[3])
{
    struct proxy_stats *st = &c->pw->stats;
    out[0] = down ? &st->bytes_down : &st->bytes_up;
    out[1] = c->us ? (down ? &c->us->bytes_down : &c->us->bytes_up) : NULL;
    out[2] = c->mode == CONN_MODE_MTPROTO ? &st->dc_bytes[conn_dc_slot(c->dc_resolved)][down]
                                          : NULL;
}

static void on_cli_io(struct ev_loop *loop, ev_io *io, int revents);
static void on_dc_io(struct ev_loop *loop, ev_io *io, int revents);
static const char *const state_names[] = {
    [CS_FREE] = "free",           [CS_HEADER] = "header",       [CS_TLS_HELLO] = "tls-hello",
    [CS_TLS_HEADER] = "tls-header", [CS_CONNECTING] = "connecting", [CS_RELAY] = "relay",
    [CS_HOLD] = "hold",           [CS_PROXY_HDR] = "proxy-header", [CS_STORE_WAIT] = "store-wait",
};

const char *conn_state_name(enum conn_state s)
{
    return (unsigned)s < sizeof state_names / sizeof *state_names && state_names[s]
               ? state_names[s]
               : "?";
}

static void on_timer(struct ev_loop *loop, ev_timer *t, int revents);
static void hbuf_free(struct conn *c);

/* --- accept-side limits -------------------------------------------------------------- */

/* Pauses accepting while the connection slots or the buffer arena are used up. */
void conn_check_accept(struct proxy_worker *pw)
{
    if (pool_full(&pw->conns) || relay_blocks_full(pw) || arena_exhausted(&pw->arena))
        worker_pause_accept(pw->w);
    else
        worker_resume_accept(pw->w);
}

/* --- descriptor reserve ------------------------------------------------------------------ */

/* The worker holds a descriptor in reserve for a connection from accept until it opens its
 * upstream socket or knows it never will (held, closed), so that socket is not refused when
 * accept took the last free descriptor. The handshake states are the ones that hold it: this
 * gives it back when the connection leaves them (call it before changing the state). */
static void reserve_release(struct conn *c)
{
    if (c->state == CS_HEADER || c->state == CS_TLS_HELLO || c->state == CS_TLS_HEADER ||
        c->state == CS_PROXY_HDR || c->state == CS_STORE_WAIT)
        worker_reserve_release(c->pw->w);
}

/* --- strangers: connections that have not proven a secret, per source address ------------- */

/* The connection proved a secret (or is closing): it stops counting against its address. */
static void stranger_done(struct conn *c)
{
    if (c->stranger) {
        ipcount_del(&c->pw->strangers, &c->peer.u.sa);
        c->stranger = 0;
    }
}

/* Counts a connection from a new address (at accept, or once a PROXY header named it).
 * Returns 1 (counted as refused) if its address has probe-limit-per-ip strangers already. */
static int stranger_refused(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    if (!pw->strangers_max)
        return 0;
    uint32_t n = ipcount_add(&pw->strangers, &c->peer.u.sa);
    if (n)
        c->stranger = 1;
    if (n > pw->strangers_max || n == 0) { /* 0: the table is full of other addresses */
        STAT_INC(&pw->stats.strangers_refused);
        return 1;
    }
    return 0;
}

/* --- log rate limit ------------------------------------------------------------------------ */

#define LOG_BURST 5          /* lines per reason per window before they are only counted */
#define LOG_WINDOW 10.0      /* seconds */
#define LOGLIM_REJECT CR_COUNT

/* 1 if a line about a stranger (slot: a close reason or LOGLIM_REJECT) may be written now; a
 * flood of probes costs a handful of lines and one summary per window, not a line each. */
static int loglim_allow(struct proxy_worker *pw, int slot)
{
    if (pw->loglim[slot].shown < LOG_BURST) {
        pw->loglim[slot].shown++;
        if (!ev_is_active(&pw->loglim_timer)) {
            ev_timer_set(&pw->loglim_timer, LOG_WINDOW, 0);
            ev_timer_start(pw->w->loop, &pw->loglim_timer);
        }
        return 1;
    }
    pw->loglim[slot].dropped++;
    return 0;
}

static void on_loglim_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct proxy_worker *pw = t->data;
    int again = 0;
    for (int i = 0; i <= CR_COUNT; i++) {
        if (pw->loglim[i].dropped)
            log_info("w%d: %u more %s%s in the last %.0f s (not logged one by one)", pw->w->id,
                     pw->loglim[i].dropped, i == LOGLIM_REJECT ? "rejected clients" : "closes: ",
                     i == LOGLIM_REJECT ? "" : conn_reason_name((enum conn_reason)i), LOG_WINDOW);
        again |= pw->loglim[i].shown != 0;
        pw->loglim[i].shown = pw->loglim[i].dropped = 0;
    }
    if (again) { /* keep the window running while strangers keep coming */
        ev_timer_set(t, LOG_WINDOW, 0);
        ev_timer_start(loop, t);
    }
}

/* --- unfinished handshakes (max-handshakes) ------------------------------------------------ */

/* The connection left the handshake (proved a secret, or is rejected/closing). */
static void handshake_done(struct conn *c)
{
    if (c->handshaking) {
        c->handshaking = 0;
        c->pw->handshakes--;
    }
}

/* Counts a new connection's handshake; at the cap the oldest unfinished one is closed (the
 * live list is newest first). */
static void handshake_start(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    if (!pw->handshakes_max)
        return;
    while (pw->handshakes >= pw->handshakes_max) {
        struct conn *old = NULL;
        for (struct conn *x = pw->live; x; x = x->next)
            if (x != c && x->handshaking && !x->closing)
                old = x;
        if (!old)
            break;
        STAT_INC(&pw->stats.handshake_cap);
        conn_close_later(old, CR_HANDSHAKE_CAP);
        handshake_done(old); /* its slot is free now: it closes before the loop sleeps */
    }
    c->handshaking = 1;
    pw->handshakes++;
}

/* --- users: limits at admission --------------------------------------------------------- */

/* A client proved secret idx (of c->gen): its user is admitted under its limits, or refused.
 * Returns 0 (admitted: c->uid, c->us, c->lim set, counted), or -1 (refused: counted and
 * logged once per user per minute; the caller rejects it like a bad client). */
static int user_admit(struct conn *c, uint32_t idx)
{
    struct proxy_worker *pw = c->pw;
    const struct gen *g = c->gen;
    uint32_t uid = g->uid[idx];
    const struct user_limit *lim = g->lim[idx];
    double now = ev_now(pw->w->loop);
    /* Started under an older generation: a user removed since is refused. */
    const struct gen *cur = pw->gen;
    int r = (g != cur && (uid >= cur->nusers || !cur->live[uid]))
                ? UR_COUNT
                : users_admit(pw->users, uid, lim, &c->peer, now,
                              g->opt.ips_window_ms / 1000.0);
    if (r < 0) {
        c->uid = (int32_t)uid;
        c->lim = lim;
        c->us = users_wstats(pw->users, pw->w->id, uid);
        STAT_INC(&c->us->conns);
        STAT_INC(&c->us->active);
        handshake_done(c);
        return 0;
    }
    STAT_INC(&pw->stats.user_refused);
    if (r < UR_COUNT)
        STAT_INC(&users_wstats(pw->users, pw->w->id, uid)->refused[r]);
    if (users_log_allowed(pw->users, uid, now)) {
        char peer[SOCK_ADDR_STRLEN];
        sock_addr_format(&c->peer, peer, sizeof peer);
        log_info("user %s: new connection from %s refused: %s (logged once a minute per user)",
                 users_name(pw->users, uid), peer,
                 r == UR_COUNT ? "user removed" : users_refusal_name((enum user_refusal)r));
    }
    return -1;
}

/* --- close ----------------------------------------------------------------------------- */

/* rst-on-close: the coming close(2) of fd sends a TCP reset instead of a FIN (SO_LINGER 0). */
static void reset_on_close(int fd)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
}

/* Takes a marked connection off the worker's close queue. */
static void closing_unlink(struct proxy_worker *pw, struct conn *c)
{
    for (struct conn **p = &pw->closing; *p; p = &(*p)->close_next)
        if (*p == c) {
            *p = c->close_next;
            break;
        }
    c->close_next = NULL;
}

/* Ends a connection: logs once, counts, frees everything. The caller must not touch c
 * afterwards; every path that may close returns -1 up to the callback. */
int conn_close(struct conn *c, enum conn_reason r)
{
    struct proxy_worker *pw = c->pw;
    if (c->closing) { /* marked before: closed now, with the reason it was marked for */
        closing_unlink(pw, c);
        r = (enum conn_reason)c->close_reason;
    }
    const struct options *o = &c->gen->opt;
    if (c->uid >= 0 && o->log_connections && log_enabled(LOG_LVL_INFO)) {
        /* A client that proved a secret: one line for the operator (never a secret). */
        char peer[SOCK_ADDR_STRLEN];
        sock_addr_format(&c->peer, peer, sizeof peer);
        log_info("w%d conn %llu closed: user %s client %s dc %d kind %s%s up %llu down %llu "
                 "bytes duration %.1f s reason %s state %s",
                 pw->w->id, (unsigned long long)c->id, users_name(pw->users, (uint32_t)c->uid),
                 peer, c->dc_id, c->tls ? "faketls-" : "", obfs2_tag_name(c->tag),
                 (unsigned long long)c->up_bytes, (unsigned long long)c->down_bytes,
                 ev_now(pw->w->loop) - c->born, conn_reason_name(r),
                 conn_state_name((enum conn_state)c->state));
    } else {
        /* Normal ends, and connections that closed before saying anything (health checks,
         * port scanners), are debug; the rest are worth an operator's eye. */
        enum log_level lvl = (r == CR_DONE || r == CR_CLIENT_CLOSED || r == CR_SHUTDOWN ||
                              r == CR_REFUSED || r == CR_ACCEPT_RATE || c->uid >= 0 ||
                              (r == CR_CLIENT_EARLY_EOF && c->hdr_len == 0))
                                 ? LOG_LVL_DEBUG
                                 : LOG_LVL_INFO;
        if (log_enabled(lvl) && (lvl != LOG_LVL_INFO || c->authed || loglim_allow(pw, (int)r))) {
            char peer[SOCK_ADDR_STRLEN];
            sock_addr_format(&c->peer, peer, sizeof peer);
            log_msg(lvl, "w%d conn %llu %s dc %d: closed (%s, state %s), up %llu down %llu bytes",
                    pw->w->id, (unsigned long long)c->id, peer, c->dc_id, conn_reason_name(r),
                    conn_state_name((enum conn_state)c->state),
                    (unsigned long long)c->up_bytes, (unsigned long long)c->down_bytes);
        }
    }
    if (c->uid >= 0) {
        users_release(pw->users, (uint32_t)c->uid, &c->peer, ev_now(pw->w->loop));
        STAT_DEC(&c->us->active);
        if (r == CR_LIMIT || r == CR_USER_REMOVED)
            STAT_INC(&c->us->closed_limit);
    }
    handshake_done(c);
    ev_timer_stop(pw->w->loop, &c->rate_timer);
    STAT_INC(&pw->stats.closed[r]);
    STAT_DEC(&pw->stats.active);
    int rst = pw->opt->rst_on_close;
    if (c->cli.fd >= 0 && (rst == RST_ALWAYS || (rst == RST_PROBES && !c->authed))) {
        /* a reset instead of a FIN, as servers behind some balancers do */
        reset_on_close(c->cli.fd);
    }
    if (c->kind)
        STAT_DEC(&pw->stats.kind_active[c->kind]);
    stranger_done(c);
    reserve_release(c);
    ev_timer_stop(pw->w->loop, &c->timer);
    if (c->waiting_block)
        waiters_remove(pw, c);
    if (c->batched)
        batch_remove(pw, c);
    if (c->mc)
        middle_detach(c);
    side_release(c, &c->cli);
    side_release(c, &c->dc);
    hbuf_free(c);
    for (int i = 0; i < 4; i++)
        crypto_ctr_wipe(&c->ctr[i]);
    if (c->prev)
        c->prev->next = c->next;
    else
        pw->live = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->state = CS_FREE;
    gen_unref(c->gen);
    c->gen = NULL;
    pool_put(&pw->conns, c);
    waiters_wake(pw);
    conn_check_accept(pw);
    return -1;
}

void conn_close_later(struct conn *c, enum conn_reason r)
{
    struct proxy_worker *pw = c->pw;
    if (c->closing)
        return;
    c->closing = 1;
    c->close_reason = (int8_t)r;
    /* Nothing reaches it any more: no I/O, no timer, no buffer wake-up, no batch flush, no
     * bytes from an ME link. */
    side_watch(c, &c->cli, 0);
    side_watch(c, &c->dc, 0);
    ev_timer_stop(pw->w->loop, &c->timer);
    ev_timer_stop(pw->w->loop, &c->rate_timer);
    if (c->waiting_block)
        waiters_remove(pw, c);
    if (c->batched)
        batch_remove(pw, c);
    if (c->mc)
        middle_detach(c);
    c->close_next = pw->closing;
    pw->closing = c;
    if (!ev_is_active(&pw->close_prepare))
        ev_prepare_start(pw->w->loop, &pw->close_prepare);
}

/* Before the loop sleeps: closes the connections marked in this pass (redis's
 * freeClientsInAsyncFreeQueue, haproxy's stream_shutdown then process_stream). A prepare
 * watcher, not a check watcher: a check runs only after the next wake-up, and the marked
 * connections' sockets would stay open for as long as the loop sleeps. */
static void on_close_prepare(struct ev_loop *loop, ev_prepare *p, int revents)
{
    struct proxy_worker *pw = p->data;
    while (pw->closing)
        conn_close(pw->closing, (enum conn_reason)pw->closing->close_reason);
    ev_prepare_stop(loop, p);
}

/* --- DC connect ------------------------------------------------------------------------ */

static void timer_arm(struct conn *c, double seconds)
{
    ev_timer_stop(c->pw->w->loop, &c->timer);
    ev_timer_set(&c->timer, seconds, 0);
    ev_timer_start(c->pw->w->loop, &c->timer);
}

/* The address of upstream attempt i: a DC address, or the fronting target. */
static const struct sock_addr *target_addr(const struct conn *c, int i)
{
    if (c->mode == CONN_MODE_MASK)
        return &c->mask->addr;
    return &c->gen->dcs.e[c->dc_first + i].addr;
}

static void log_attempt(struct conn *c, const struct sock_addr *a, int err)
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
static int via_socks(const struct conn *c)
{
    const struct options *o = &c->gen->opt;
    return o->socks5_on && (c->mode == CONN_MODE_MTPROTO || o->socks5_mask);
}

/* Starts connecting to the next candidate address (through the socks5 server, whose TCP
 * connect comes first, if configured). Returns 0, or -1 if closed. */
static int dc_connect_next(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    while (c->dc_try < c->dc_count) {
        const struct sock_addr *target = target_addr(c, c->dc_try++);
        const struct sock_addr *a = via_socks(c) ? &pw->opt->socks5_addr : target;
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
            return 0;
        }
        if (fd < 0) {
            STAT_INC(&pw->stats.dc_connect_fails);
            log_attempt(c, target, errno);
            continue;
        }
        c->dc.fd = fd;
        c->dc.events = 0;
        ev_io_init(&c->dc.io, on_dc_io, fd, EV_WRITE);
        c->dc.io.data = c;
        side_watch(c, &c->dc, EV_WRITE);
        timer_arm(c, c->gen->opt.connect_timeout_ms / 1000.0);
        return 0;
    }
    return conn_close(c, c->mode == CONN_MODE_MASK ? CR_MASK_UNREACHABLE : CR_DC_UNREACHABLE);
}

/* Closes the current upstream attempt and goes on with the next address. */
static int dc_drop_attempt(struct conn *c)
{
    side_watch(c, &c->dc, 0);
    close(c->dc.fd);
    c->dc.fd = -1;
    return dc_connect_next(c);
}

/* Drops the current attempt (failed or timed out) and tries the next address. */
static int dc_retry(struct conn *c, int err)
{
    STAT_INC(&c->pw->stats.dc_connect_fails);
    log_attempt(c, target_addr(c, c->dc_try - 1), err);
    return dc_drop_attempt(c);
}
static int dc_established(struct conn *c);

/* The socks5 handshake failed for this attempt: say why (the server's own reason for a
 * refused CONNECT), then the next address. */
static int socks_failed(struct conn *c, const char *why, int code)
{
    struct proxy_worker *pw = c->pw;
    STAT_INC(&pw->stats.dc_connect_fails);
    STAT_INC(&pw->stats.socks_fails);
    if (log_enabled(LOG_LVL_INFO)) {
        char t[SOCK_ADDR_STRLEN], sv[SOCK_ADDR_STRLEN];
        sock_addr_format(target_addr(c, c->dc_try - 1), t, sizeof t);
        sock_addr_format(&pw->opt->socks5_addr, sv, sizeof sv);
        if (code > 0)
            log_info("w%d conn %llu: socks5 %s refused %s %s: %s (reply %d)", pw->w->id,
                     (unsigned long long)c->id, sv, c->mode == CONN_MODE_MASK ? "mask" : "dc", t,
                     why, code);
        else
            log_info("w%d conn %llu: socks5 %s, connecting %s %s: %s", pw->w->id,
                     (unsigned long long)c->id, sv, c->mode == CONN_MODE_MASK ? "mask" : "dc", t,
                     why);
    }
    return dc_drop_attempt(c);
}

/* CONNECTING through socks5: the server's TCP connect succeeded (start) or it sent bytes. */
static int socks_step(struct conn *c)
{
    const struct options *o = &c->gen->opt;
    const char *why = "socks5: handshake failed";
    int code = 0;
    enum socks_result r =
        c->sd.step == SOCKS_STEP_NONE
            ? socks_dial_start(&c->sd, c->dc.fd, &o->socks5, &why)
            : socks_dial_read(&c->sd, c->dc.fd, &o->socks5, &target_addr(c, c->dc_try - 1)->u.sa,
                              &why, &code);
    if (r == SOCKS_DIAL_FAIL)
        return socks_failed(c, why, code);
    if (r == SOCKS_DIAL_WAIT) {
        side_watch(c, &c->dc, EV_READ);
        return 0;
    }
    return dc_established(c);
}

/* The upstream socket is connected: what is queued for it (our obfuscated2 header and any
 * early client bytes, or the replayed probe) goes out, and the relay starts. */
static int dc_established(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    if (c->mode == CONN_MODE_MTPROTO) {
        STAT_INC(&pw->stats.dc_connects);
        /* Our 64-byte header goes first, straight from the connection, so a client is never
         * dropped for want of a buffer block (a fresh socket takes it whole; the rest of a
         * short write goes to the head of the queue, before any early client bytes). */
        ssize_t w = send(c->dc.fd, c->hdr, OBFS2_HDR_LEN, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return conn_close(c, CR_DC_CLOSED);
        if (w < OBFS2_HDR_LEN) {
            size_t done = w > 0 ? (size_t)w : 0;
            struct arena_block *b = arena_get(&pw->arena);
            if (!b)
                return conn_close(c, CR_NO_MEMORY);
            memcpy(b->data, c->hdr + done, OBFS2_HDR_LEN - done);
            b->end = (uint32_t)(OBFS2_HDR_LEN - done);
            b->next = c->dc.qhead;
            c->dc.qhead = b;
            if (!c->dc.qtail)
                c->dc.qtail = b;
            c->dc.queued += b->end;
        }
    }
    if (pw->opt->buffers && relay_reserve(c))
        return conn_close(c, CR_NO_MEMORY);
    c->state = CS_RELAY;
    c->last_io = ev_now(pw->w->loop);
    const struct options *o = &c->gen->opt; /* its own generation's timeouts */
    timer_arm(c, (c->mode == CONN_MODE_MASK ? o->mask_idle_ms : o->idle_timeout_ms) / 1000.0);
    enum conn_reason r = side_flush(c, &c->dc, &c->cli);
    if (r != CR_NONE)
        return conn_close(c, r);
    relay_watch(c);
    return 0;
}

/* Connects the upstream side: a pooled DC socket if one is ready, else a new connect. The
 * client is read again only once the relay runs (its bytes wait in its socket). */
static void upstream_start(struct conn *c)
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
        ev_io_init(&c->dc.io, on_dc_io, fd, EV_READ);
        c->dc.io.data = c;
        dc_established(c);
        return;
    }
    dc_connect_next(c);
}

/* --- rejecting: fronting or holding ------------------------------------------------------ */

static void hbuf_free(struct conn *c)
{
    c->pw->hbuf_bytes -= c->hcap;
    free(c->hbuf);
    c->hbuf = NULL;
    c->hlen = c->hcap = 0;
}

/* Enters HOLD: the client gets no answer; it is read and discarded, then closed when the site
 * itself closes an idle connection (the learned idle close T, counted from accept, drawn in
 * [0.97 T, 1.03 T]); with no idle close known, at a random time between 0.5 and 1.5
 * handshake timeouts. */
static void hold(struct conn *c)
{
    uint16_t r = 0;
    crypto_random(&r, sizeof r);
    double base = c->gen->opt.handshake_timeout_ms / 1000.0, at = base * (0.5 + r / 65535.0);
    const struct tlsprofile *prof = c->pw->learn ? tlslearn_current(c->pw->learn) : NULL;
    if (prof && prof->idle_close_ms) {
        double t = prof->idle_close_ms / 1000.0 * (0.97 + 0.06 * (r / 65535.0));
        at = t - (ev_now(c->pw->w->loop) - c->born);
        if (at < 0.01)
            at = 0.01;
    }
    hbuf_free(c);
    reserve_release(c);
    c->state = CS_HOLD;
    c->up_bytes = 0; /* in HOLD, up_bytes counts what was discarded */
    side_watch(c, &c->cli, EV_READ);
    timer_arm(c, at);
}

/* A client we will not serve (we have not answered it yet): forward it, with every byte it
 * sent so far, to the real web server; or hold it if there is none. seen may point into
 * c->hbuf. */
static void reject(struct conn *c, const uint8_t *seen, size_t n, const char *sni,
                   const char *why)
{
    struct proxy_worker *pw = c->pw;
    STAT_INC(&pw->stats.rejected);
    const struct mask_target *m = mask_lookup(&c->gen->masks, sni);
    if (log_enabled(LOG_LVL_INFO) && loglim_allow(pw, LOGLIM_REJECT)) {
        char peer[SOCK_ADDR_STRLEN];
        sock_addr_format(&c->peer, peer, sizeof peer);
        log_info("w%d conn %llu %s: %s; %s", pw->w->id, (unsigned long long)c->id, peer, why,
                 m ? "fronting" : "holding");
    }
    if (!m) {
        hold(c);
        return;
    }
    STAT_INC(&pw->stats.masked);
    conn_set_kind(c, CK_FRONTED);
    c->mode = CONN_MODE_MASK;
    c->tls = 0;
    c->mask = m;
    c->dc_count = 1;
    c->splice = 0; /* fronted bytes go through their own block budget, never a pipe */
    if (pw->opt->mask_proxy_protocol) {
        struct sock_addr local;
        local.len = sizeof local.u;
        uint8_t ph[128];
        size_t phl = 0;
        if (getsockname(c->cli.fd, &local.u.sa, &local.len) == 0)
            phl = mask_proxy_header(ph, sizeof ph, pw->opt->mask_proxy_protocol, &c->peer,
                                    &local);
        if (phl && side_queue(c, &c->dc, ph, phl) != CR_NONE) {
            conn_close(c, CR_NO_MEMORY);
            return;
        }
    }
    if (n && side_queue(c, &c->dc, seen, n) != CR_NONE) {
        conn_close(c, CR_NO_MEMORY);
        return;
    }
    hbuf_free(c);
    upstream_start(c);
}

/* --- the fleet's replay store (replay-store) ---------------------------------------------- */

enum store_gate { STORE_GO = 0, STORE_WAIT, STORE_REPLAY };

static void store_answer(void *owner, uint64_t token, enum rstore_verdict v);

/* Asks the replay store about a handshake the local cache passed (key: its 16 identifying
 * bytes). GO: go on now (store off, already answered new, or not answering with fail open);
 * WAIT: the connection waits in STORE_WAIT and the check runs again with the answer; REPLAY:
 * seen by some instance (or not answering with fail closed): refuse it as a replay. The
 * secret that matched is kept in c->secret_idx so the re-run tries that one only. */
static enum store_gate store_gate(struct conn *c, const uint8_t *key, unsigned ttl_ms)
{
    struct proxy_worker *pw = c->pw;
    const struct options *o = pw->opt;
    if (!o->rstore.on)
        return STORE_GO;
    if (!c->rs_verdict) {
        if (rstore_check(&pw->rstore, key, ttl_ms, store_answer, c, c->id) == 0) {
            c->rs_resume = c->state;
            c->state = CS_STORE_WAIT;
            side_watch(c, &c->cli, 0);
            timer_arm(c, o->rstore_timeout_ms / 1000.0);
            return STORE_WAIT;
        }
        c->rs_verdict = RSTORE_FAILED + 1; /* down right now */
    }
    switch (c->rs_verdict - 1) {
    case RSTORE_NEW:
        return STORE_GO;
    case RSTORE_SEEN:
        STAT_INC(&pw->stats.store_replays);
        return STORE_REPLAY;
    default:
        STAT_INC(&pw->stats.store_failed);
        return o->rstore_fail_closed ? STORE_REPLAY : STORE_GO;
    }
}

static void tls_hello_check(struct conn *c);
static void header_done(struct conn *c, uint8_t *extra, size_t n);

/* The store answered (or its deadline passed: RSTORE_FAILED): the handshake check runs again
 * from where it stopped, with the answer. */
static void store_resume(struct conn *c, enum rstore_verdict v)
{
    c->rs_verdict = (uint8_t)(v + 1);
    c->state = c->rs_resume;
    timer_arm(c, c->gen->opt.handshake_timeout_ms / 1000.0);
    if (c->state == CS_TLS_HELLO)
        tls_hello_check(c);
    else
        header_done(c, NULL, 0);
}

static void store_answer(void *owner, uint64_t token, enum rstore_verdict v)
{
    struct conn *c = owner; /* a pool slot: its memory outlives the connection */
    if (c->state != CS_STORE_WAIT || c->id != token)
        return; /* closed (or gave up waiting) meanwhile */
    store_resume(c, v);
}

/* --- obfuscated2 header ------------------------------------------------------------------ */

/* The client's 64-byte header is complete (c->hdr). extra[0..n) are client bytes that came
 * after it (inside TLS records), still encrypted with the client's stream. */
static void header_done(struct conn *c, uint8_t *extra, size_t n)
{
    struct proxy_worker *pw = c->pw;
    const struct options *o = &c->gen->opt;
    struct obfs2_hello h;
    enum obfs2_status st;
    if (c->tls) {
        /* Inside FakeTLS: the secret that signed the hello, padded intermediate only. */
        struct secret s = o->secrets[c->secret_idx];
        s.kind = SECRET_DD;
        st = obfs2_parse(c->hdr, &s, 1, OBFS2_ALLOW_PADDED, &h);
        h.secret_index = c->secret_idx;
    } else {
        unsigned allow = (o->allow_plain ? OBFS2_ALLOW_ABRIDGED | OBFS2_ALLOW_INTERMEDIATE : 0) |
                         (o->allow_dd ? OBFS2_ALLOW_PADDED : 0);
        /* After the replay store answered, only the secret that matched before is tried. */
        size_t first = c->rs_verdict ? c->secret_idx : 0;
        size_t count = c->rs_verdict ? 1 : (size_t)o->nsecrets;
        st = obfs2_parse(c->hdr, o->secrets + first, count, allow, &h);
        if (st == OBFS2_OK)
            h.secret_index += (int)first;
    }
    if (st != OBFS2_OK) {
        if (c->tls) /* we answered its hello: too late to front */
            conn_close(c, CR_BAD_HEADER);
        else
            reject(c, c->hdr, OBFS2_HDR_LEN, NULL, "bad header (no secret matches)");
        return;
    }
    /* Replays of a plain/dd header (FakeTLS hellos were checked already): the key and IV
     * material is 48 random bytes chosen by the client; 16 of them identify it. */
    if (!c->tls && !c->rs_verdict && pw->replay &&
        replay_check_and_add_timeless(pw->replay, c->hdr + 8, (uint32_t)ev_now(pw->w->loop))) {
        STAT_INC(&pw->stats.replays);
        reject(c, c->hdr, OBFS2_HDR_LEN, NULL, "replayed header");
        return;
    }
    if (!c->tls) {
        c->secret_idx = (uint32_t)h.secret_index;
        enum store_gate g = store_gate(c, c->hdr + 8, o->rstore_ttl_ms);
        if (g == STORE_WAIT)
            return;
        if (g == STORE_REPLAY) {
            STAT_INC(&pw->stats.replays);
            reject(c, c->hdr, OBFS2_HDR_LEN, NULL, "replayed header (replay store)");
            return;
        }
    }
    c->secret_idx = (uint32_t)h.secret_index;
    if (!c->tls && user_admit(c, c->secret_idx)) {
        reject(c, c->hdr, OBFS2_HDR_LEN, NULL, "user over a limit");
        return;
    }
    STAT_INC(&pw->stats.handshakes);
    c->authed = 1;
    stranger_done(c);
    c->tag = h.tag;
    c->dc_id = h.dc;
    conn_set_kind(c, c->tls ? CK_TLS : h.tag == OBFS2_TAG_PADDED ? CK_DD : CK_OBFS2);
    uint8_t skip[OBFS2_HDR_LEN], wire[OBFS2_HDR_LEN];
    if (crypto_ctr_init(c->cli_dec, h.keys.fwd.key, h.keys.fwd.iv) ||
        (!c->fast && crypto_ctr_init(c->cli_enc, h.keys.rev.key, h.keys.rev.iv))) {
        conn_close(c, CR_NO_MEMORY);
        return;
    }
    crypto_ctr_apply(c->cli_dec, c->hdr, skip, sizeof skip); /* the stream goes on at 64 */
    if (pw->middle) { /* middle mode: an ME link instead of a DC connection */
        reserve_release(c);
        enum conn_reason r = middle_attach(c, extra, n);
        if (r != CR_NONE) {
            conn_close(c, r);
            return;
        }
        c->state = CS_RELAY; /* no upstream socket: its reserved descriptor was released */
        timer_arm(c, c->gen->opt.idle_timeout_ms / 1000.0);
        return;
    }
    /* The client's header is spent: build ours toward the DC in its place. In fast mode its
     * key material is the client's download key and IV (reversed), so the DC encrypts for
     * the client and the download direction needs no crypto here (PROTOCOL.md 5.2). */
    struct obfs2_keys k;
    if (obfs2_build(c->hdr, h.tag, h.dc, c->fast ? &h.keys.rev : NULL)) {
        conn_close(c, CR_NO_MEMORY);
        return;
    }
    obfs2_derive(c->hdr, NULL, &k);
    if (crypto_ctr_init(c->dc_enc, k.fwd.key, k.fwd.iv) ||
        (!c->fast && crypto_ctr_init(c->dc_dec, k.rev.key, k.rev.iv))) {
        conn_close(c, CR_NO_MEMORY);
        return;
    }
    obfs2_seal(c->hdr, c->dc_enc, wire);
    memcpy(c->hdr, wire, sizeof wire); /* sent from here on connect: needs no buffer block */
    if (n) {
        crypto_ctr_apply(c->cli_dec, extra, extra, n);
        crypto_ctr_apply(c->dc_enc, extra, extra, n);
        c->up_bytes += n;
        STAT_ADD(&pw->stats.bytes_up, n);
    }
    if (n && side_queue(c, &c->dc, extra, n) != CR_NONE) {
        conn_close(c, CR_NO_MEMORY);
        return;
    }
    int resolved = 0;
    c->dc_count = dc_lookup(&c->gen->dcs, h.dc, &c->dc_first, &resolved);
    c->dc_resolved = (int16_t)resolved;
    if (n) { /* the bytes after the header, counted in the total above */
        stat_t *ctr[3];
        conn_byte_counters(c, 0, ctr);
        for (int i = 1; i < 3; i++)
            if (ctr[i])
                STAT_ADD(ctr[i], n);
    }
    if (log_enabled(LOG_LVL_DEBUG)) {
        char peer[SOCK_ADDR_STRLEN];
        sock_addr_format(&c->peer, peer, sizeof peer);
        log_debug("w%d conn %llu %s: secret %s, %s%s, dc %d -> %d", pw->w->id,
                  (unsigned long long)c->id, peer, o->secrets[h.secret_index].name,
                  c->tls ? "faketls " : "", obfs2_tag_name(h.tag), h.dc, resolved);
    }
    upstream_start(c);
}

/* --- FakeTLS handshake ------------------------------------------------------------------- */

/* Grows the hello buffer to at least want bytes. Returns 0, or -1. */
static int hbuf_reserve(struct conn *c, size_t want)
{
    if (want <= c->hcap)
        return 0;
    size_t cap = c->hcap ? c->hcap : 1024;
    while (cap < want)
        cap *= 2;
    /* Hello buffers of all connections in handshake count against a worker budget (the
     * fronted connections' one): partial hellos cannot eat memory without bound. */
    while (c->pw->hbuf_bytes + (cap - c->hcap) > c->pw->hbuf_max) {
        /* Full: the oldest unfinished hello goes (a flood of stalled hellos cannot lock new
         * clients out; the live list is newest first). */
        struct conn *old = NULL;
        for (struct conn *x = c->pw->live; x; x = x->next)
            if (x != c && x->state == CS_TLS_HELLO && x->hcap)
                old = x;
        STAT_INC(&c->pw->stats.hello_budget);
        if (!old)
            return -1;
        conn_close_later(old, CR_HANDSHAKE_TIMEOUT);
        hbuf_free(old); /* its budget is free now: it closes before the loop sleeps */
    }
    uint8_t *p = realloc(c->hbuf, cap);
    if (!p)
        return -1;
    c->pw->hbuf_bytes += cap - c->hcap;
    c->hbuf = p;
    c->hcap = (uint32_t)cap;
    return 0;
}

/* Answers a verified hello and moves on to reading the obfuscated2 header in records. */
static void tls_answer(struct conn *c, const struct faketls_hello *h, int secret_idx)
{
    struct proxy_worker *pw = c->pw;
    const struct options *o = &c->gen->opt;
    struct faketls_reply r = {.order = (enum faketls_ext_order)o->tls_ext_order};
    uint16_t suite = 0;
    size_t lo = (size_t)o->tls_appdata_min, hi = (size_t)o->tls_appdata_max;
    if (pw->learn && o->tls_profile) {
        /* the site's shape: its extension order, and its encrypted records' bytes in one */
        const struct tlsprofile *p = tlslearn_current(pw->learn);
        r.order = tlsprofile_ext_order(p);
        tlsprofile_appdata_range(p, (unsigned)o->tls_profile_vary, &lo, &hi);
        /* the suite the site chose for a browser, if this client offered it too */
        if (p->cipher >= 0x1301 && p->cipher <= 0x1303 &&
            (h->tls13_suites & (1u << (p->cipher - 0x1301))))
            suite = p->cipher;
    }
    r.app_data_len = faketls_draw_len(lo, hi);
    size_t len = faketls_server_hello_len(h->client.sid_len, r.app_data_len);
    struct faketls_client client = h->client; /* h points into the buffer we overwrite */
    if (suite)
        client.cipher_suite = suite;
    if (hbuf_reserve(c, len) ||
        faketls_server_hello(c->hbuf, c->hcap, o->secrets[secret_idx].key, &client, &r) != len ||
        side_queue(c, &c->cli, c->hbuf, len) != CR_NONE) {
        conn_close(c, CR_NO_MEMORY);
        return;
    }
    hbuf_free(c);
    STAT_INC(&pw->stats.tls_handshakes);
    c->authed = 1;
    stranger_done(c);
    c->tls = 1;
    c->secret_idx = (uint32_t)secret_idx;
    c->hdr_len = 0;
    faketls_deframer_init(&c->defr);
    c->state = CS_TLS_HEADER;
    /* Answered: the client has the rest of the handshake timeout (not just probe-wait) to send
     * its header, one round trip later. */
    double left = o->handshake_timeout_ms / 1000.0 - (ev_now(pw->w->loop) - c->born);
    timer_arm(c, left > 0.1 ? left : 0.1);
    enum conn_reason fr = side_flush(c, &c->cli, &c->dc);
    if (fr != CR_NONE) {
        conn_close(c, fr);
        return;
    }
    side_watch(c, &c->cli, EV_READ | (c->cli.queued ? EV_WRITE : 0));
}

/* 1 if the hello names one of our ee domains. */
static int hello_names_ours(const struct options *o, const struct faketls_hello *h)
{
    for (int i = 0; i < o->nsecrets; i++)
        if (o->secrets[i].kind == SECRET_EE && faketls_hello_has_sni(h, o->secrets[i].domain))
            return 1;
    return 0;
}

/* unknown-sni drop or reject: a hello naming none of our domains is closed, after a fatal
 * unrecognized_name alert for reject (what a server without that name says). */
static void unknown_sni(struct conn *c, const char *sni)
{
    struct proxy_worker *pw = c->pw;
    STAT_INC(&pw->stats.rejected);
    STAT_INC(&pw->stats.unknown_sni);
    int reject = pw->opt->unknown_sni == SNI_REJECT;
    if (log_enabled(LOG_LVL_INFO) && loglim_allow(pw, LOGLIM_REJECT)) {
        char peer[SOCK_ADDR_STRLEN];
        sock_addr_format(&c->peer, peer, sizeof peer);
        log_info("w%d conn %llu %s: hello names an unknown server (%.64s); %s", pw->w->id,
                 (unsigned long long)c->id, peer, sni ? sni : "no SNI",
                 reject ? "unrecognized_name alert" : "dropped");
    }
    if (reject) {
        /* alert record: level fatal (2), unrecognized_name (112); one send, best effort */
        static const uint8_t alert[7] = {0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70};
        ssize_t w = send(c->cli.fd, alert, sizeof alert, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
    }
    conn_close(c, CR_UNKNOWN_SNI);
}

/* Looks at the hello bytes so far: waits for more, rejects, or answers. */
static void tls_hello_check(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    const struct options *o = &c->gen->opt;
    struct faketls_hello h;
    char why[96];
    enum faketls_status st = faketls_hello_parse(c->hbuf, c->hlen, &h);
    if (st == FAKETLS_NEED_MORE) {
        if (hbuf_reserve(c, c->hlen + h.need))
            conn_close(c, CR_NO_MEMORY);
        return;
    }
    if (st == FAKETLS_BAD) {
        snprintf(why, sizeof why, "not a FakeTLS hello (%s)", faketls_reason_name(h.reason));
        reject(c, c->hbuf, c->hlen, NULL, why);
        return;
    }
    const char *sni = h.nsni ? h.sni[0] : NULL;
    if (o->unknown_sni != SNI_MASK && o->tls_sni_check && !hello_names_ours(o, &h)) {
        unknown_sni(c, sni);
        return;
    }
    if (h.consumed != c->hlen) {
        reject(c, c->hbuf, c->hlen, sni, "bytes after the hello");
        return;
    }
    int64_t now = (int64_t)ev_now(pw->w->loop);
    uint32_t skew = o->tls_time_skew_ms / 1000;
    struct faketls_time tp = {skew, skew, o->tls_ignore_time};
    struct faketls_match m;
    size_t first = c->rs_verdict ? c->secret_idx : 0; /* after the store: that secret only */
    size_t count = c->rs_verdict ? 1 : (size_t)o->nsecrets;
    unsigned tries = 0;
    /* With tls-sni-check, the hello's candidates come from the generation's domain index. */
    enum faketls_verify v =
        o->tls_sni_check && !c->rs_verdict
            ? faketls_hello_verify_index(c->hbuf, &h, o->secrets, &c->gen->sni, now, &tp, &m,
                                         &tries)
            : faketls_hello_verify_sni(c->hbuf, &h, o->secrets + first, count, now, &tp,
                                       o->tls_sni_check, &m, &tries);
    STAT_ADD(&pw->stats.tls_hmacs, tries);
    if (v == FAKETLS_VERIFY_OK)
        m.secret_index += (int)first;
    if (v != FAKETLS_VERIFY_OK) {
        snprintf(why, sizeof why, "FakeTLS hello: %s", faketls_verify_name(v));
        reject(c, c->hbuf, c->hlen, sni, why);
        return;
    }
    const struct secret *s = &o->secrets[m.secret_index];
    if (o->tls_sni_check && !faketls_hello_has_sni(&h, s->domain)) {
        reject(c, c->hbuf, c->hlen, sni, "FakeTLS hello: SNI is not the secret's domain");
        return;
    }
    if (!c->rs_verdict && pw->replay &&
        replay_check_and_add(pw->replay, h.client.random, (uint32_t)now)) {
        STAT_INC(&pw->stats.replays);
        reject(c, c->hbuf, c->hlen, sni, "FakeTLS hello: replayed");
        return;
    }
    c->secret_idx = (uint32_t)m.secret_index;
    /* A hello is only valid within the time skew: the store keeps it that long (both ways). */
    enum store_gate g = store_gate(c, h.client.random, 2 * o->tls_time_skew_ms);
    if (g == STORE_WAIT)
        return;
    if (g == STORE_REPLAY) {
        STAT_INC(&pw->stats.replays);
        reject(c, c->hbuf, c->hlen, sni, "FakeTLS hello: replayed (replay store)");
        return;
    }
    if (user_admit(c, (uint32_t)m.secret_index)) { /* fronted like a probe */
        reject(c, c->hbuf, c->hlen, sni, "FakeTLS hello: user over a limit");
        return;
    }
    tls_answer(c, &h, m.secret_index);
}

static void tls_hello_read(struct conn *c)
{
    if (c->hlen == c->hcap && hbuf_reserve(c, (size_t)c->hcap + 1)) {
        conn_close(c, CR_NO_MEMORY);
        return;
    }
    ssize_t n = read(c->cli.fd, c->hbuf + c->hlen, c->hcap - c->hlen);
    if (n > 0) {
        c->hlen += (uint32_t)n;
        tls_hello_check(c);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    conn_close(c, CR_CLIENT_EARLY_EOF);
}

/* After our answer: records carrying the obfuscated2 header, maybe followed by data. */
static void tls_header_read(struct conn *c, int revents)
{
    enum conn_reason fr = revents & EV_WRITE ? side_flush(c, &c->cli, &c->dc) : CR_NONE;
    if (fr != CR_NONE) {
        conn_close(c, fr);
        return;
    }
    if (revents & EV_READ) {
        uint8_t buf[4096];
        ssize_t n = read(c->cli.fd, buf, sizeof buf);
        if (n <= 0) {
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return;
            conn_close(c, CR_CLIENT_EARLY_EOF);
            return;
        }
        size_t m;
        if (faketls_deframe(&c->defr, buf, (size_t)n, &m) != FAKETLS_OK) {
            conn_close(c, CR_CLIENT_PROTOCOL);
            return;
        }
        size_t want = (size_t)(OBFS2_HDR_LEN - c->hdr_len), k = want < m ? want : m;
        memcpy(c->hdr + c->hdr_len, buf, k);
        c->hdr_len += (uint8_t)k;
        if (c->hdr_len == OBFS2_HDR_LEN) {
            header_done(c, buf + k, m - k);
            return;
        }
    }
    side_watch(c, &c->cli, EV_READ | (c->cli.queued ? EV_WRITE : 0));
}

/* --- first bytes ------------------------------------------------------------------------- */

/* 1 if the first bytes start a TLS handshake record (16 03 01 or 16 03 03). A plain client's
 * random header does so with probability 2^-23: such a client is fronted, never misread. */
static int looks_tls(const uint8_t *p)
{
    return p[0] == 0x16 && p[1] == 0x03 && (p[2] == 0x01 || p[2] == 0x03);
}

/* 1 if the first n bytes a plain connection sent can start no client's obfuscated2 header:
 * clients never send these (PROTOCOL.md 1.2: HTTP verbs, transport markers, a TLS hello start,
 * zeros at 4..7), so such a connection is fronted at once, with no silence a probe could time. */
static int cannot_be_obfs2(const uint8_t *p, size_t n)
{
    static const char *const words[] = {"HEAD", "POST", "GET ", "OPTI", "\xdd\xdd\xdd\xdd",
                                        "\xee\xee\xee\xee", "\x16\x03\x01\x02"};
    if (n >= 1 && p[0] == 0xef)
        return 1;
    for (size_t i = 0; n >= 4 && i < sizeof words / sizeof words[0]; i++)
        if (memcmp(p, words[i], 4) == 0)
            return 1;
    return n >= 8 && !(p[4] | p[5] | p[6] | p[7]);
}

static void header_read(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    const struct options *o = pw->opt;
    ssize_t n = read(c->cli.fd, c->hdr + c->hdr_len, OBFS2_HDR_LEN - c->hdr_len);
    if (n <= 0) {
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        conn_close(c, CR_CLIENT_EARLY_EOF);
        return;
    }
    size_t before = c->hdr_len;
    c->hdr_len += (uint8_t)n;
    if (before < 3 && c->hdr_len >= 3) {
        if (looks_tls(c->hdr) && pw->tls_enabled) {
            if (hbuf_reserve(c, 1024)) {
                conn_close(c, CR_NO_MEMORY);
                return;
            }
            memcpy(c->hbuf, c->hdr, c->hdr_len);
            c->hlen = c->hdr_len;
            c->state = CS_TLS_HELLO;
            tls_hello_check(c);
            return;
        }
        if (!o->allow_plain && !o->allow_dd) { /* TLS-only: nothing else is a client */
            reject(c, c->hdr, c->hdr_len, NULL, "not TLS (TLS-only proxy)");
            return;
        }
    }
    if (c->hdr_len < OBFS2_HDR_LEN && cannot_be_obfs2(c->hdr, c->hdr_len)) {
        reject(c, c->hdr, c->hdr_len, NULL, "not an obfuscated2 header (HTTP or similar)");
        return;
    }
    if (c->hdr_len == OBFS2_HDR_LEN)
        header_done(c, NULL, 0);
}

/* --- PROXY protocol (proxy-protocol = on) ------------------------------------------------ */

#define PP_V2_CAP 512 /* a balancer's v2 header with its TLVs: a few dozen bytes in practice */

/* The access list's verdict for a client address: 1 (and counted) if refused. */
/* accept-rate: 1 (counted) if this source opened its share of new connections this second
 * at this worker already. Counts per second in a table cleared each second. */
static int accept_rate_refuses(struct proxy_worker *pw, const struct sock_addr *peer)
{
    if (!pw->accepts_max)
        return 0;
    ev_tstamp sec = (ev_tstamp)(long long)ev_now(pw->w->loop);
    if (sec != pw->accepts_second) {
        pw->accepts_second = sec;
        ipcount_free(&pw->accepts);
        if (ipcount_init(&pw->accepts, pw->conns.max_objs * 2 + 64))
            return 0;
    }
    uint32_t n = ipcount_add(&pw->accepts, &peer->u.sa);
    if (n == 0 || n > pw->accepts_max) { /* 0: the table is full of other addresses */
        STAT_INC(&pw->stats.acc_rate);
        STAT_INC(&pw->stats.closed[CR_ACCEPT_RATE]);
        return 1;
    }
    return 0;
}

static int acl_refuses(struct proxy_worker *pw, const struct sock_addr *peer)
{
    if (!pw->acl || !acl_active(pw->acl))
        return 0;
    enum acl_verdict v = acl_check(pw->acl, &peer->u.sa);
    if (v == ACL_PASS)
        return 0;
    /* Logged at debug only: a scan from a denied network must not fill the log. */
    STAT_INC(v == ACL_DENIED ? &pw->stats.acl_denied : &pw->stats.acl_not_allowed);
    if (log_enabled(LOG_LVL_DEBUG)) {
        char a[SOCK_ADDR_STRLEN];
        sock_addr_format(peer, a, sizeof a);
        log_debug("w%d refused %s: %s", pw->w->id, a,
                  v == ACL_DENIED ? "denied" : "not allowed");
    }
    return 1;
}

/* Reads the PROXY header, and nothing of the client's own bytes: each call peeks at what has
 * arrived; while the header is incomplete every byte seen belongs to it (a v1 line before its
 * CR LF, a v2 header shorter than its length) and is consumed into hbuf, so the socket never
 * stays readable with a partial header (no busy loop); once complete, exactly its rest is
 * consumed and the client's bytes wait in the socket for HEADER. */
static void proxy_hdr_read(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    if (hbuf_reserve(c, 16 + PP_V2_CAP)) {
        conn_close(c, CR_NO_MEMORY);
        return;
    }
    ssize_t n = recv(c->cli.fd, c->hbuf + c->hlen, 16 + PP_V2_CAP - c->hlen, MSG_PEEK);
    if (n <= 0) {
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        STAT_INC(&pw->stats.pp_bad);
        conn_close(c, CR_CLIENT_EARLY_EOF);
        return;
    }
    struct proxyproto_result r;
    enum proxyproto_status st = proxyproto_parse(c->hbuf, c->hlen + (size_t)n, PP_V2_CAP, &r);
    if (st == PROXYPROTO_BAD || (st == PROXYPROTO_NEED_MORE && r.need > 16 + PP_V2_CAP)) {
        STAT_INC(&pw->stats.pp_bad);
        if (log_enabled(LOG_LVL_DEBUG)) {
            char a[SOCK_ADDR_STRLEN];
            sock_addr_format(&c->peer, a, sizeof a);
            log_debug("w%d conn %llu %s: bad PROXY header: %s", pw->w->id,
                      (unsigned long long)c->id, a, r.why ? r.why : "too long");
        }
        conn_close(c, CR_REFUSED);
        return;
    }
    size_t take = st == PROXYPROTO_OK ? r.consumed - c->hlen : (size_t)n;
    if (recv(c->cli.fd, c->hbuf + c->hlen, take, 0) != (ssize_t)take) {
        conn_close(c, CR_CLIENT_EARLY_EOF); /* peeked bytes vanished: a reset */
        return;
    }
    c->hlen += (uint32_t)take;
    if (st == PROXYPROTO_NEED_MORE)
        return;
    hbuf_free(c);
    if (r.kind == PROXYPROTO_LOCAL) {
        STAT_INC(&pw->stats.pp_local);
        conn_close(c, CR_DONE);
        return;
    }
    if (r.kind == PROXYPROTO_PROXIED) {
        memset(&c->peer, 0, sizeof c->peer);
        if (r.src.ss_family == AF_INET) {
            memcpy(&c->peer.u.in4, &r.src, sizeof c->peer.u.in4);
            c->peer.len = sizeof c->peer.u.in4;
        } else {
            memcpy(&c->peer.u.in6, &r.src, sizeof c->peer.u.in6);
            c->peer.len = sizeof c->peer.u.in6;
        }
    } /* UNKNOWN: the balancer's own address stands, as the specification says */
    if (acl_refuses(pw, &c->peer) || stranger_refused(c)) {
        conn_close(c, CR_REFUSED);
        return;
    }
    c->state = CS_HEADER; /* the handshake timer keeps running from accept */
}

static void hold_read(struct conn *c)
{
    uint8_t sink[4096];
    ssize_t n = read(c->cli.fd, sink, sizeof sink);
    if (n > 0) {
        c->up_bytes += (uint64_t)n;
        if (c->up_bytes >= HOLD_DISCARD_MAX)
            side_watch(c, &c->cli, 0); /* enough: let its window fill up */
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    conn_close(c, CR_BAD_HEADER);
}

/* --- callbacks ------------------------------------------------------------------------- */

static void on_cli_io(struct ev_loop *loop, ev_io *io, int revents)
{
    struct conn *c = io->data;
    if (c->closing)
        return;
    switch (c->state) {
    case CS_PROXY_HDR:
        proxy_hdr_read(c);
        break;
    case CS_HEADER:
        header_read(c);
        break;
    case CS_TLS_HELLO:
        tls_hello_read(c);
        break;
    case CS_TLS_HEADER:
        tls_header_read(c, revents);
        break;
    case CS_CONNECTING: { /* our ServerHello may still be going out */
        enum conn_reason r = side_flush(c, &c->cli, &c->dc);
        if (r != CR_NONE)
            conn_close(c, r);
        else
            side_watch(c, &c->cli, c->cli.queued ? EV_WRITE : 0);
        break;
    }
    case CS_HOLD:
        hold_read(c);
        break;
    case CS_RELAY: {
        enum conn_reason r = c->mc ? middle_client_event(c, revents)
                                   : relay_event(c, &c->cli, revents);
        if (r != CR_NONE)
            conn_close(c, r);
        break;
    }
    default:
        break;
    }
}

static void on_dc_io(struct ev_loop *loop, ev_io *io, int revents)
{
    struct conn *c = io->data;
    if (c->closing)
        return;
    if (c->state == CS_CONNECTING) {
        if (via_socks(c) && c->sd.step != SOCKS_STEP_NONE) {
            socks_step(c);
            return;
        }
        int err = sock_connect_result(c->dc.fd);
        if (err)
            dc_retry(c, err);
        else if (via_socks(c))
            socks_step(c);
        else
            dc_established(c);
        return;
    }
    if (c->state == CS_RELAY) {
        enum conn_reason r = relay_event(c, &c->dc, revents);
        if (r != CR_NONE)
            conn_close(c, r);
    }
}

static void on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct conn *c = t->data;
    if (c->closing)
        return;
    switch (c->state) {
    case CS_HEADER:
    case CS_TLS_HELLO:
        /* No valid handshake in time: like any other non-client, it goes to the real site
         * (which decides how long to wait), or is closed when there is none. */
        if (mask_lookup(&c->gen->masks, NULL)) {
            if (c->state == CS_TLS_HELLO)
                reject(c, c->hbuf, c->hlen, NULL, "handshake timeout");
            else
                reject(c, c->hdr, c->hdr_len, NULL, "handshake timeout");
        } else {
            conn_close(c, CR_HANDSHAKE_TIMEOUT);
        }
        break;
    case CS_TLS_HEADER:
        conn_close(c, CR_HANDSHAKE_TIMEOUT);
        break;
    case CS_STORE_WAIT: /* the store is slow: its failure policy decides */
        store_resume(c, RSTORE_FAILED);
        break;
    case CS_PROXY_HDR: /* never fronted: this is the balancer, not a client or a probe */
        STAT_INC(&c->pw->stats.pp_bad);
        conn_close(c, CR_HANDSHAKE_TIMEOUT);
        break;
    case CS_HOLD:
        conn_close(c, CR_BAD_HEADER);
        break;
    case CS_CONNECTING:
        if (c->dc.fd < 0)
            dc_connect_next(c); /* after a wait for a free descriptor */
        else
            dc_retry(c, 0);
        break;
    case CS_RELAY: {
        /* The idle timer is armed lazily: traffic only moves last_io. A fronted connection
         * has a shorter idle time and a bound on its whole life. */
        const struct options *o = &c->gen->opt;
        int mask = c->mode == CONN_MODE_MASK;
        double idle = (mask ? o->mask_idle_ms : o->idle_timeout_ms) / 1000.0;
        double left = c->last_io + idle - ev_now(loop);
        double life = mask ? c->born + o->mask_lifetime_ms / 1000.0 - ev_now(loop) : left;
        if (left <= 0 || life <= 0)
            conn_close(c, CR_IDLE);
        else
            timer_arm(c, left < life ? left : life);
        break;
    }
    default:
        break;
    }
}

/* --- accept ---------------------------------------------------------------------------- */

/* Points the connection's stream pointers at its inline streams (un-keyed, no context). */
static void conn_ciphers(struct conn *c)
{
    struct crypto_ctr **s[4] = {&c->cli_dec, &c->cli_enc, &c->dc_enc, &c->dc_dec};
    for (int i = 0; i < 4; i++)
        *s[i] = &c->ctr[i];
}

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

/* Rate limit: a paused direction's time came; read again. */
static void on_rate_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct conn *c = t->data;
    if (c->closing)
        return;
    ev_tstamp now = ev_now(loop), next = 0;
    for (int d = 0; d < 2; d++) {
        if (c->rate_until[d] && c->rate_until[d] <= now + 0.0005)
            c->rate_until[d] = 0;
        else if (c->rate_until[d] && (!next || c->rate_until[d] < next))
            next = c->rate_until[d];
    }
    if (next) {
        ev_timer_set(t, next - now, 0);
        ev_timer_start(loop, t);
    }
    if (c->state == CS_RELAY)
        relay_watch(c);
}

void conn_rate_pause(struct conn *c, int dir, double wait)
{
    struct ev_loop *loop = c->pw->w->loop;
    ev_tstamp until = ev_now(loop) + wait;
    c->rate_until[dir] = until;
    if (ev_is_active(&c->rate_timer)) {
        if (ev_timer_remaining(loop, &c->rate_timer) <= wait)
            return;
        ev_timer_stop(loop, &c->rate_timer);
    }
    ev_timer_set(&c->rate_timer, wait, 0);
    ev_timer_start(loop, &c->rate_timer);
}

/* Every second: live connections of users whose quota ran out (on any worker) or who expired
 * are ended. */
static void on_sweep_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct proxy_worker *pw = t->data;
    double now = ev_now(loop);
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
    pw->tls_enabled = 0;
    for (int i = 0; i < o->nsecrets; i++)
        pw->tls_enabled |= o->allow_ee && o->secrets[i].kind == SECRET_EE;
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
    if (old) { /* users the new generation does not have lose their connections */
        for (struct conn *c = pw->live, *next; c; c = next) {
            next = c->next;
            if (c->uid >= 0 && ((uint32_t)c->uid >= g->nusers || !g->live[c->uid]))
                conn_close(c, CR_USER_REMOVED);
        }
    }
    const struct reload *r = g->r;
    for (int i = 0; r && i < r->nhooks; i++)
        if (r->hooks[i]->adopt)
            r->hooks[i]->adopt(pw, g, g->hook_data[i], old);
    gen_unref(old);
}

static void proxy_on_cmd(struct worker *w, int cmd)
{
    struct proxy_worker *pw = w->ctx;
    if (cmd & PROXY_CMD_GEN) {
        struct gen *g = atomic_exchange(&pw->next_gen, NULL);
        if (g)
            gen_adopt(pw, g);
    }
    if (cmd & MIDDLE_CMD_RELOAD) /* one handler per worker: middle mode's reload goes through it */
        middle_on_cmd(w, cmd);
}

void proxy_worker_post_gen(struct proxy_worker *pw, struct gen *g)
{
    gen_ref(g);
    struct gen *prev = atomic_exchange(&pw->next_gen, g);
    gen_unref(prev); /* a generation the worker never took: superseded */
    worker_post(pw->w, PROXY_CMD_GEN);
}

void proxy_on_accept(struct worker *w, int fd, const struct sock_addr *peer)
{
    struct proxy_worker *pw = w->ctx;
    /* Checked before any byte is read: the access list (on the socket's peer unless a PROXY
     * header will name the client), or who may send PROXY headers. */
    int refused = pw->opt->proxy_protocol
                      ? pw->acl && !acl_pp_trusted(pw->acl, &peer->u.sa)
                      : acl_refuses(pw, peer);
    if (refused) {
        if (pw->opt->proxy_protocol)
            STAT_INC(&pw->stats.pp_untrusted);
        if (pw->opt->rst_on_close != RST_OFF)
            reset_on_close(fd);
        close(fd);
        worker_reserve_release(w);
        return;
    }
    if (accept_rate_refuses(pw, peer)) {
        close(fd);
        worker_reserve_release(w);
        return;
    }
    struct conn *c = pool_get(&pw->conns);
    if (!c) {
        close(fd); /* not reached while accepting pauses at the cap */
        worker_reserve_release(w);
        conn_check_accept(pw);
        return;
    }
    STAT_INC(&pw->stats.accepted);
    STAT_INC(&pw->stats.active);
    memset(c, 0, sizeof *c); /* a freed slot's streams were wiped (no context held) */
    conn_ciphers(c);
    c->pw = pw;
    c->id = ++pw->next_id;
    c->peer = *peer;
    c->uid = -1;
    c->gen = pw->gen;
    gen_ref(c->gen);
    c->cli.fd = fd;
    c->dc.fd = -1;
    c->state = pw->opt->proxy_protocol ? CS_PROXY_HDR : CS_HEADER;
    c->born = ev_now(w->loop);
    c->fast = (uint8_t)(pw->opt->fast_mode && !pw->middle); /* middle mode reframes */
    c->splice = (uint8_t)(c->fast && pw->opt->splice);
    c->cli.pipe_r = c->cli.pipe_w = c->dc.pipe_r = c->dc.pipe_w = -1;
    c->next = pw->live;
    if (pw->live)
        pw->live->prev = c;
    pw->live = c;
    ev_init(&c->timer, on_timer);
    c->timer.data = c;
    ev_init(&c->rate_timer, on_rate_timer);
    c->rate_timer.data = c;
    handshake_start(c);
    /* Behind a balancer the address is known only from the PROXY header (counted there). */
    if (!pw->opt->proxy_protocol && stranger_refused(c)) {
        conn_close(c, CR_REFUSED);
        return;
    }
    sock_tune(fd, &pw->sockopts);
    if (pw->opt->client_mss && log_enabled(LOG_LVL_DEBUG)) {
        int mss = 0;
        socklen_t ml = sizeof mss;
        getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &ml);
        log_debug("w%d conn %llu: client mss %d", w->id, (unsigned long long)c->id, mss);
    }
    ev_io_init(&c->cli.io, on_cli_io, fd, EV_READ);
    c->cli.io.data = c;
    side_watch(c, &c->cli, EV_READ);
    /* A client sends its whole header (or hello) at once: a connection still short of one after
     * probe-wait is a probe, fronted then (never later than the handshake timeout). */
    unsigned first = pw->opt->probe_wait_ms < pw->opt->handshake_timeout_ms
                         ? pw->opt->probe_wait_ms
                         : pw->opt->handshake_timeout_ms;
    /* With nowhere to front to, a silent connection is closed when the site would close it
     * (hold() then closes at once), if that comes first. */
    const struct tlsprofile *prof = pw->learn ? tlslearn_current(pw->learn) : NULL;
    if (prof && prof->idle_close_ms && !pw->masks->enabled && prof->idle_close_ms < first)
        first = prof->idle_close_ms;
    timer_arm(c, first / 1000.0);
    conn_check_accept(pw);
}

void proxy_on_stop(struct worker *w)
{
    struct proxy_worker *pw = w->ctx;
    dcpool_stop(&pw->dcpool);
    rstore_stop(&pw->rstore);
    relay_stop(pw);
    while (pw->live)
        conn_close(pw->live, CR_SHUTDOWN);
    ev_prepare_stop(w->loop, &pw->close_prepare);
    middle_stop(pw);
    ev_timer_stop(w->loop, &pw->loglim_timer);
    ev_timer_stop(w->loop, &pw->sweep_timer);
    if (pw->learn && w->id == 0)
        tlslearn_stop(pw->learn);
    crypto_thread_cleanup(); /* the thread's one-shot cipher context */
}

/* --- worker setup ---------------------------------------------------------------------- */

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
    ev_prepare_init(&pw->close_prepare, on_close_prepare);
    pw->close_prepare.data = pw;
    ev_init(&pw->loglim_timer, on_loglim_timer);
    pw->loglim_timer.data = pw;
    ev_timer_init(&pw->sweep_timer, on_sweep_timer, 1.0, 1.0);
    pw->sweep_timer.data = pw;
    ev_timer_start(w->loop, &pw->sweep_timer);
    if (opt->max_handshakes)
        pw->handshakes_max = (uint32_t)((opt->max_handshakes + nworkers - 1) / nworkers);
    gen_ref(g);
    gen_adopt(pw, g);
    w->on_cmd = proxy_on_cmd;
    w->ctx = pw;
    w->on_accept = proxy_on_accept;
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

void proxy_stats_add(struct proxy_stats *dst, const struct proxy_stats *src)
{
#define ADD(f) STAT_ADD(&dst->f, STAT_GET(&src->f))
    ADD(accepted);
    ADD(active);
    ADD(handshakes);
    ADD(dc_connects);
    ADD(dc_connect_fails);
    ADD(bytes_up);
    ADD(bytes_down);
    ADD(reads);
    ADD(writes);
    ADD(spliced);
    ADD(pipe_full);
    ADD(block_waits);
    ADD(tls_handshakes);
    ADD(rejected);
    ADD(masked);
    ADD(replays);
    ADD(acl_denied);
    ADD(acl_not_allowed);
    ADD(pp_untrusted);
    ADD(pp_bad);
    ADD(pp_local);
    ADD(socks_fails);
    ADD(store_replays);
    ADD(store_failed);
    ADD(tls_hmacs);
    ADD(ctr_parked);
    ADD(wide_reads);
    ADD(user_refused);
    ADD(acc_rate);
    ADD(handshake_cap);
    ADD(unknown_sni);
    ADD(strangers_refused);
    ADD(hello_budget);
    ADD(me_handshakes);
    ADD(me_handshake_fails);
    ADD(me_connect_fails);
    ADD(me_link_drops);
    ADD(me_links_open);
    ADD(me_dead_closed);
    ADD(me_slow_closed);
    ADD(me_link_pauses);
    ADD(me_requests);
    ADD(me_answers);
    ADD(me_acks);
    ADD(me_pings);
    ADD(me_unknown);
    for (int i = 0; i < CR_COUNT; i++)
        ADD(closed[i]);
    for (int i = 0; i < CK_COUNT; i++) {
        ADD(kind_total[i]);
        ADD(kind_active[i]);
    }
    for (int i = 0; i < CONN_DC_SLOTS; i++) {
        ADD(dc_bytes[i][0]);
        ADD(dc_bytes[i][1]);
    }
#undef ADD
}
