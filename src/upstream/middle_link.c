/* middle_link.c: the ME links: connect, nonce, CBC handshake, frames in, pings, back-off. */
#include "upstream/middle_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "conn/conn.h"
#include "upstream/dialer.h"
#include "config/reload.h"

#define ME_HANDSHAKE_TIMEOUT 5.0 /* connect + nonce + handshake */
#define ME_BACKOFF_MIN 0.5
#define ME_BACKOFF_MAX 30.0
#define ME_READS_PER_EVENT 8

/* Takes one more reference of t (never NULL). */
static struct me_table *table_get(struct me_table *t)
{
    atomic_fetch_add(&t->refs, 1);
    return t;
}

/* --- link life ------------------------------------------------------------------------- */

static void on_link_io(struct ev_loop *loop, ev_io *io, int revents);
static void on_link_timer(struct ev_loop *loop, ev_timer *t, int revents);

static double ping_interval(const struct me_link *l)
{
    return l->m->pw->opt->me_ping_ms / 1000.0;
}

static void link_timer(struct me_link *l, double s)
{
    ev_timer_stop(middle_loop_of(l->m), &l->timer);
    ev_timer_set(&l->timer, s, 0);
    ev_timer_start(middle_loop_of(l->m), &l->timer);
}

/* Closes the socket and forgets the session (queued frames, keys, buffers). */
static void link_reset(struct me_link *l)
{
    middle_link_watch(l, 0);
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    for (struct me_out *o = l->ohead, *n; o; o = n) {
        n = o->next;
        free(o);
    }
    l->ohead = l->otail = NULL;
    crypto_cbc_free(l->enc);
    crypto_cbc_free(l->dec);
    l->enc = l->dec = NULL;
    free(l->rbuf);
    l->rbuf = NULL;
    l->rlen = l->rcap = l->rdec = 0;
    l->err = l->ping_out = l->paused = 0;
    ev_timer_stop(middle_loop_of(l->m), &l->stall);
    if (l->state == ML_READY)
        STAT_DEC(&l->m->pw->stats.me_links_open);
    l->state = ML_WAIT;
}

static void link_free(struct me_link *l)
{
    struct middle *m = l->m;
    link_reset(l);
    ev_timer_stop(middle_loop_of(m), &l->timer);
    for (struct me_link **pp = &m->links; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    middle_table_put(l->t);
    free(l);
}

/* The link is gone: its clients are marked to close (counted; not their event: closed before
 * the loop sleeps), and it reconnects after a back-off (a draining link is freed instead). */
static void link_fail(struct me_link *l, const char *why)
{
    struct proxy_worker *pw = l->m->pw;
    char name[160];
    middle_link_name(l, name, sizeof name);
    if (l->state == ML_HANDSHAKE) {
        STAT_INC(&pw->stats.me_handshake_fails);
        log_warn("%s: ME handshake failed: check nat-info (the ME must see us at the "
                 "address the keys were derived with) (%s)", name, why);
    } else if (l->state == ML_READY) {
        STAT_INC(&pw->stats.me_link_drops);
        log_warn("%s: link lost (%s), closing its %d client%s", name, why, l->nclients,
                 l->nclients == 1 ? "" : "s");
    } else if (l->state == ML_NONCE) {
        STAT_INC(&pw->stats.me_connect_fails);
        log_warn("%s: no nonce from the ME (%s): is proxy-secret-file current?", name, why);
    } else {
        STAT_INC(&pw->stats.me_connect_fails);
        log_info("%s: %s", name, why);
    }
    link_reset(l);
    l->failing = 1;
    while (l->clients) {
        STAT_INC(&pw->stats.me_dead_closed);
        middle_client_drop(l->clients->c, CR_ME_LINK);
    }
    l->failing = 0;
    if (l->draining) {
        link_free(l);
        return;
    }
    l->backoff = l->backoff < ME_BACKOFF_MIN ? ME_BACKOFF_MIN
                 : l->backoff * 2 > ME_BACKOFF_MAX ? ME_BACKOFF_MAX
                                                   : l->backoff * 2;
    link_timer(l, l->backoff);
}

/* Where link l dials: its ME address, through the socks5 server if one is set (the bound
 * address the server reports is kept for the keys). */
static struct dial_to link_to(struct me_link *l)
{
    struct proxy_worker *pw = l->m->pw;
    const struct options *o = pw->opt;
    return (struct dial_to){.target = &l->t->addrs[l->addr].addr,
                            .socks = o->socks5_on ? &o->socks5 : NULL,
                            .socks_addr = &o->socks5_addr, .opts = &pw->sockopts,
                            .bound = l->bound};
}

static void link_connect(struct me_link *l)
{
    struct dial_to to = link_to(l);
    struct dial_result r;
    if (dial_start(&l->dial, &to, &l->fd, &r) != DIAL_WAIT_WRITE) {
        char why[96];
        snprintf(why, sizeof why, "connect: %s", r.why);
        link_fail(l, why);
        return;
    }
    l->state = ML_CONNECTING;
    l->events = 0;
    ev_io_init(&l->io, on_link_io, l->fd, EV_WRITE);
    l->io.data = l;
    middle_link_rewatch(l);
    link_timer(l, ME_HANDSHAKE_TIMEOUT);
}

static void link_connected(struct me_link *l);

/* Connecting: the TCP connect ended (to the ME, or to the socks5 server) or the socks5 server
 * sent bytes. A refused CONNECT is logged with the server's reason and counted; the link
 * backs off. */
static void link_dial_step(struct me_link *l, int revents)
{
    struct proxy_worker *pw = l->m->pw;
    const struct options *o = pw->opt;
    struct dial_to to = link_to(l);
    struct dial_result r;
    enum dial_verdict v = dial_step(&l->dial, l->fd, &to, revents, &r);
    if (v == DIAL_DONE) {
        link_connected(l);
        return;
    }
    if (v > 0) { /* not yet: the events to wait for */
        middle_link_watch(l, (unsigned)v);
        return;
    }
    char sv[SOCK_ADDR_STRLEN], msg[200];
    if (!r.socks) {
        snprintf(msg, sizeof msg, "connect%s: %s", o->socks5_on ? " to socks5" : "", r.why);
        link_fail(l, msg);
        return;
    }
    STAT_INC(&pw->stats.socks_fails);
    sock_addr_format(&o->socks5_addr, sv, sizeof sv);
    if (r.code > 0)
        snprintf(msg, sizeof msg, "socks5 %s refused the ME: %s (reply %d)", sv, r.why, r.code);
    else
        snprintf(msg, sizeof msg, "socks5 %s: %s", sv, r.why);
    link_fail(l, msg);
}

/* Connected: our nonce goes out in clear. The keys are derived with the addresses the ME
 * sees: through socks5 the ME is the target (not our peer) and we are where the SOCKS server
 * connected from (its reply's bound address; our own local one, through nat-info, if it
 * reported none). */
static void link_connected(struct me_link *l)
{
    struct proxy_worker *pw = l->m->pw;
    const struct options *o = pw->opt;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    memset(&ss, 0, sizeof ss);
    if (!o->socks5_on || socks_bound_addr(l->bound, &ss)) {
        if (o->socks5_on) {
            char name[160];
            middle_link_name(l, name, sizeof name);
            log_info("%s: the socks5 server did not say where it connects from: the keys use "
                     "our own address (through nat-info) and port", name);
        }
        getsockname(l->fd, (struct sockaddr *)&ss, &sl);
    }
    middle_endpoint_of(&ss, o, 1, &l->clt);
    if (o->socks5_on) {
        memcpy(&ss, &l->t->addrs[l->addr].addr.u, sizeof l->t->addrs[l->addr].addr.u);
    } else {
        sl = sizeof ss;
        getpeername(l->fd, (struct sockaddr *)&ss, &sl);
    }
    middle_endpoint_of(&ss, o, 0, &l->srv);
    l->nonce.key_select = (uint32_t)l->t->secret[0] | (uint32_t)l->t->secret[1] << 8 |
                          (uint32_t)l->t->secret[2] << 16 | (uint32_t)l->t->secret[3] << 24;
    l->nonce.schema = 1;
    l->nonce.ts = (uint32_t)time(NULL);
    crypto_random(l->nonce.nonce, sizeof l->nonce.nonce);
    uint8_t buf[RPC_NONCE_LEN + RPC_FRAME_OVERHEAD];
    rpc_nonce_build(buf + 8, &l->nonce);
    size_t n = rpc_frame_build(buf, RPC_SEQ_NONCE, buf + 8, RPC_NONCE_LEN);
    ssize_t w = send(l->fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w != (ssize_t)n) {
        link_fail(l, "cannot send the nonce");
        return;
    }
    l->state = ML_NONCE;
    middle_link_rewatch(l);
}

/* The ME's nonce: derive the keys, send our handshake (the first encrypted frame). */
static int link_nonce(struct me_link *l, const struct rpc_frame *f)
{
    struct rpc_nonce srv;
    if (rpc_nonce_parse(f->payload, f->len, &srv) || srv.key_select != l->nonce.key_select ||
        srv.schema != 1) {
        link_fail(l, "bad nonce answer (is proxy-secret-file current?)");
        return -1;
    }
    struct rpc_kdf_in in = {.clt_ts = l->nonce.ts, .clt = l->clt, .srv = l->srv,
                            .secret = l->t->secret, .secret_len = l->t->secret_len};
    memcpy(in.nonce_srv, srv.nonce, 16);
    memcpy(in.nonce_clt, l->nonce.nonce, 16);
    uint8_t wk[32], wiv[16], rk[32], riv[16];
    rpc_kdf(&in, "CLIENT", wk, wiv);
    rpc_kdf(&in, "SERVER", rk, riv);
    l->enc = crypto_cbc_new(wk, wiv, 1);
    l->dec = crypto_cbc_new(rk, riv, 0);
    memset(wk, 0, sizeof wk);
    memset(rk, 0, sizeof rk);
    if (!l->enc || !l->dec) {
        link_fail(l, "out of memory");
        return -1;
    }
    /* sender pid: our IPv4 (host order, LE), port 0, pid, start time; peer: the ME's */
    memset(l->pid, 0, sizeof l->pid);
    if (!l->clt.v6)
        for (int i = 0; i < 4; i++)
            l->pid[i] = l->clt.ip[3 - i];
    uint16_t pid = (uint16_t)getpid();
    l->pid[6] = (uint8_t)pid;
    l->pid[7] = (uint8_t)(pid >> 8);
    for (int i = 0; i < 4; i++) /* start time, u32 LE like every field */
        l->pid[8 + i] = (uint8_t)(l->nonce.ts >> (8 * i));
    uint8_t peer[RPC_PID_LEN], hs[RPC_HANDSHAKE_LEN];
    memset(peer, 0, sizeof peer);
    if (!l->srv.v6)
        for (int i = 0; i < 4; i++)
            peer[i] = l->srv.ip[3 - i];
    peer[4] = (uint8_t)l->srv.port;
    peer[5] = (uint8_t)(l->srv.port >> 8);
    rpc_handshake_build(hs, 0, l->pid, peer);
    l->seq_out = RPC_SEQ_HANDSHAKE;
    if (middle_link_send(l, 0, hs, sizeof hs, NULL, 0)) {
        link_fail(l, "out of memory");
        return -1;
    }
    l->state = ML_HANDSHAKE;
    return 0;
}

/* The ME's handshake answer: the link is ready; waiting clients are read. */
static int link_handshake(struct me_link *l, const struct rpc_frame *f)
{
    uint32_t flags;
    uint8_t sender[RPC_PID_LEN], peer[RPC_PID_LEN];
    int r = rpc_handshake_parse(f->payload, f->len, &flags, sender, peer);
    if (r) {
        link_fail(l, r == -2 ? "RPC_HANDSHAKE_ERROR" : "not a handshake");
        return -1;
    }
    /* its peer pid must be ours (zero fields are wildcards) */
    for (int i = 0; i < RPC_PID_LEN; i++) {
        int field = i < 4 ? 0 : i < 6 ? 4 : i < 8 ? 6 : 8, flen = i < 4 ? 4 : i < 8 ? 2 : 4;
        int zero = 1;
        for (int k = field; k < field + flen; k++)
            zero &= peer[k] == 0;
        if (!zero && peer[i] != l->pid[i]) {
            link_fail(l, "handshake names another peer");
            return -1;
        }
    }
    if (flags & 0xff) {
        link_fail(l, "handshake asks for an unknown mode");
        return -1;
    }
    struct proxy_worker *pw = l->m->pw;
    STAT_INC(&pw->stats.me_handshakes);
    if (log_enabled(LOG_LVL_DEBUG)) {
        char name[160];
        middle_link_name(l, name, sizeof name);
        log_debug("%s: link ready", name);
    }
    l->state = ML_READY;
    STAT_INC(&pw->stats.me_links_open);
    l->seq_in = 0;
    l->seq_out = 0;
    l->backoff = 0;
    l->last_rx = ev_now(middle_loop_of(l->m));
    link_timer(l, ping_interval(l));
    for (struct mclient *mc = l->clients, *next; mc; mc = next) {
        next = mc->lnext;
        struct conn *c = mc->c;
        if (c->closing) /* marked by someone else: it closes before the loop sleeps */
            continue;
        /* what came with its header */
        enum conn_reason v = mc->inlen ? middle_client_packets(mc) : CR_NONE;
        if (v != CR_NONE)
            middle_client_drop(c, v); /* frees mc */
        else
            middle_client_watch(mc);
    }
    return 0;
}

/* --- link input ------------------------------------------------------------------------------ */

/* One message from a ready link. Returns 0, or -1 if the link failed. */
static int link_message(struct me_link *l, const struct rpc_frame *f)
{
    struct middle *m = l->m;
    struct proxy_worker *pw = m->pw;
    struct rpc_msg msg;
    if (rpc_msg_parse(f->payload, f->len, &msg) != RPC_OK) {
        link_fail(l, "short message");
        return -1;
    }
    struct mclient *mc = NULL;
    switch (msg.type) {
    case RPC_PING: {
        uint8_t pong[12];
        rpc_msg_u64(pong, RPC_PONG, msg.ping_id);
        STAT_INC(&pw->stats.me_pings);
        if (middle_link_send(l, 0, pong, sizeof pong, NULL, 0))
            l->err = 1;
        return 0;
    }
    case RPC_PONG:
        return 0;
    case RPC_PROXY_ANS:
    case RPC_SIMPLE_ACK:
    case RPC_CLOSE_EXT:
    case RPC_CLOSE_CONN:
        mc = middle_hash_find(m, msg.conn_id);
        if (!mc || mc->link != l) {
            /* a client we no longer know: tell the ME once per answer */
            STAT_INC(&pw->stats.me_unknown);
            if (msg.type == RPC_PROXY_ANS && msg.conn_id != l->last_unknown) {
                l->last_unknown = msg.conn_id; /* once per run of late answers */
                uint8_t cl[12];
                rpc_msg_u64(cl, RPC_CLOSE_CONN, msg.conn_id);
                middle_link_send(l, 0, cl, sizeof cl, NULL, 0);
            }
            return 0;
        }
        if (mc->c->closing) /* marked: it closes before the loop sleeps, and takes nothing more */
            return 0;
        break;
    default:
        return 0; /* unknown types are ignored */
    }
    /* Not the client's event: a client that ends here is marked (detached from l at once, so
     * nothing more reaches it) and closed before the loop sleeps. */
    struct conn *c = mc->c;
    enum conn_reason r = CR_DC_CLOSED;
    if (msg.type == RPC_CLOSE_EXT || msg.type == RPC_CLOSE_CONN) {
        mc->conn_id = 0; /* closed by the ME: no RPC_CLOSE_CONN back */
        middle_hash_remove(m, mc);
    } else if (msg.type == RPC_SIMPLE_ACK) {
        STAT_INC(&pw->stats.me_acks);
        r = middle_client_deliver(mc, NULL, 0, msg.confirm, 1);
    } else {
        STAT_INC(&pw->stats.me_answers);
        r = middle_client_deliver(mc, msg.data, msg.len, 0, 0);
    }
    if (r != CR_NONE)
        middle_client_drop(c, r);
    return 0;
}

/* Parses what was read. Returns 0, or -1 if the link failed. */
static int link_input(struct me_link *l)
{
    /* decrypt whole blocks once encrypted frames flow (after the nonce) */
    if (l->dec && l->rlen - l->rdec >= CRYPTO_CBC_BLOCK) {
        size_t k = (l->rlen - l->rdec) & ~(size_t)(CRYPTO_CBC_BLOCK - 1);
        crypto_cbc_apply(l->dec, l->rbuf + l->rdec, l->rbuf + l->rdec, k);
        l->rdec += k;
    }
    size_t off = 0;
    for (;;) {
        size_t avail = (l->state == ML_NONCE ? l->rlen : l->rdec) - off;
        int32_t want = l->state == ML_NONCE       ? RPC_SEQ_NONCE
                       : l->state == ML_HANDSHAKE ? RPC_SEQ_HANDSHAKE
                                                  : l->seq_in;
        struct rpc_frame f;
        size_t need = 0;
        const char *why = "?";
        enum rpc_status st = rpc_frame_parse(l->rbuf + off, avail, want, &f, &need, &why);
        if (st == RPC_NEED_MORE)
            break;
        if (st == RPC_BAD) {
            link_fail(l, why);
            return -1;
        }
        off += f.total;
        if (!f.payload)
            continue;
        int r = 0;
        if (l->state == ML_NONCE) {
            r = link_nonce(l, &f);
            if (!r) { /* what follows the nonce is encrypted: decrypt it from here */
                memmove(l->rbuf, l->rbuf + off, l->rlen - off);
                l->rlen -= off;
                l->rdec = 0;
                return link_input(l);
            }
        } else if (l->state == ML_HANDSHAKE) {
            r = link_handshake(l, &f);
        } else {
            l->seq_in++;
            r = link_message(l, &f);
        }
        if (r)
            return -1;
        if (l->err) {
            link_fail(l, "write failed");
            return -1;
        }
    }
    if (off) {
        memmove(l->rbuf, l->rbuf + off, l->rlen - off);
        l->rlen -= off;
        l->rdec -= off < l->rdec ? off : l->rdec;
    }
    return 0;
}

/* --- link events ----------------------------------------------------------------------------- */

static void link_read(struct me_link *l)
{
    struct proxy_worker *pw = l->m->pw;
    for (int round = 0; round < ME_READS_PER_EVENT; round++) {
        if (l->rcap - l->rlen < ME_READ_CHUNK) {
            size_t cap = l->rcap ? l->rcap * 2 : 2 * ME_READ_CHUNK;
            if (cap > RPC_FRAME_MAX + 2 * ME_READ_CHUNK)
                cap = RPC_FRAME_MAX + 2 * ME_READ_CHUNK;
            if (cap <= l->rcap) {
                link_fail(l, "frame too large");
                return;
            }
            uint8_t *b = realloc(l->rbuf, cap);
            if (!b) {
                link_fail(l, "out of memory");
                return;
            }
            l->rbuf = b;
            l->rcap = cap;
        }
        ssize_t n = read(l->fd, l->rbuf + l->rlen, l->rcap - l->rlen);
        STAT_INC(&pw->stats.reads);
        if (n == 0) {
            link_fail(l, "closed by the ME");
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            char why[96];
            snprintf(why, sizeof why, "read: %s", strerror(errno));
            link_fail(l, why);
            return;
        }
        l->rlen += (size_t)n;
        l->last_rx = ev_now(middle_loop_of(l->m));
        l->ping_out = 0;
        if (link_input(l))
            return;
        if (l->state == ML_READY && l->undelivered > pw->opt->me_link_buffer) {
            if (!l->paused) { /* clients that hold it past me-stall-grace will be closed */
                l->paused_at = ev_now(middle_loop_of(l->m));
                l->stall_judge = 0;
                middle_link_stall_arm(l, pw->opt->me_stall_grace_ms / 4000.0);
            }
            l->paused = 1; /* read again once its clients drained half of it */
            STAT_INC(&pw->stats.me_link_pauses);
            break;
        }
        if ((size_t)n < ME_READ_CHUNK)
            break;
    }
    if (l->err) {
        link_fail(l, "write failed");
        return;
    }
    middle_link_rewatch(l);
}

static void on_link_io(struct ev_loop *loop, ev_io *io, int revents)
{
    struct me_link *l = io->data;
    if (l->state == ML_CONNECTING) {
        link_dial_step(l, revents);
        return;
    }
    if (revents & EV_WRITE) {
        middle_link_flush(l);
        if (l->err) {
            link_fail(l, "write failed");
            return;
        }
    }
    if (revents & EV_READ)
        link_read(l);
}

static void on_link_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct me_link *l = t->data;
    if (l->draining && !l->nclients) {
        link_free(l);
        return;
    }
    if (l->err) {
        link_fail(l, "write failed");
        return;
    }
    switch (l->state) {
    case ML_WAIT:
        link_connect(l);
        break;
    case ML_CONNECTING:
    case ML_NONCE:
        link_fail(l, "no answer in time");
        break;
    case ML_HANDSHAKE:
        link_fail(l, "no handshake answer in time");
        break;
    case ML_READY: {
        if (l->paused) /* not read: its silence is ours (the stall check ends the pause) */
            l->last_rx = ev_now(loop);
        double quiet = ev_now(loop) - l->last_rx, every = ping_interval(l);
        if (quiet >= every) {
            if (l->ping_out) {
                link_fail(l, "no answer to a ping");
                return;
            }
            uint8_t ping[12];
            uint64_t id;
            crypto_random(&id, sizeof id);
            rpc_msg_u64(ping, RPC_PING, id);
            l->ping_out = 1;
            l->last_rx = ev_now(loop); /* a full interval for the answer */
            if (middle_link_send(l, 0, ping, sizeof ping, NULL, 0) || l->err) {
                link_fail(l, "write failed");
                return;
            }
            quiet = 0;
        }
        link_timer(l, every - quiet);
        break;
    }
    }
}

/* Adds a link to the worker for address i of t; it connects once the loop runs. */
static int link_add(struct middle *m, struct me_table *t, int i)
{
    struct me_link *l = calloc(1, sizeof *l);
    if (!l)
        return -1;
    l->m = m;
    l->t = table_get(t);
    l->addr = i;
    l->fd = -1;
    ev_init(&l->timer, on_link_timer);
    l->timer.data = l;
    ev_init(&l->stall, middle_on_link_stall);
    l->stall.data = l;
    l->next = m->links;
    m->links = l;
    /* spread first connects a little so workers do not start in lockstep */
    ev_timer_set(&l->timer, 0.001 * (double)(m->pw->w->id + 1), 0);
    ev_timer_start(middle_loop_of(m), &l->timer);
    return 0;
}

static int links_add(struct middle *m, struct me_table *t)
{
    for (int i = 0; i < t->naddrs; i++)
        for (int k = 0; k < m->pw->opt->me_pool && t->addrs[i].uniq == i; k++)
            if (link_add(m, t, i))
                return -1;
    return 0;
}

/* --- worker setup and reload --------------------------------------------------------------- */

void middle_adopt(struct proxy_worker *pw, const struct gen *g, const struct gen *old)
{
    struct middle *m = pw->middle;
    if (!m || !old || !g->me || g->me == m->cur)
        return;
    /* old links take no new clients and go once empty; new ones start now */
    for (struct me_link *l = m->links, *next; l; l = next) {
        next = l->next;
        l->draining = 1;
        if (!l->nclients)
            link_free(l);
    }
    middle_table_put(m->cur);
    m->cur = table_get(g->me);
    if (links_add(m, m->cur))
        log_error("w%d: out of memory adding ME links", pw->w->id);
    log_info("w%d: ME table reloaded: %d ME address%s", pw->w->id, m->cur->naddrs,
             m->cur->naddrs == 1 ? "" : "es");
}

int middle_init(struct proxy_worker *pw)
{
    struct me_table *t = pw->gen->me;
    struct middle *m = calloc(1, sizeof *m);
    if (!m)
        return -1;
    m->pw = pw;
    pw->middle = m;
    size_t want = 256;
    while (want < (size_t)pw->opt->max_connections && want < 65536)
        want *= 2;
    m->hash = calloc(want, sizeof *m->hash);
    if (!m->hash)
        return -1;
    m->hmask = want - 1;
    crypto_random(&m->next_id, sizeof m->next_id);
    m->cur = table_get(t);
    return links_add(m, t);
}

void middle_stop(struct proxy_worker *pw)
{
    struct middle *m = pw->middle;
    if (!m)
        return;
    while (m->links) {
        struct me_link *l = m->links;
        /* proxy_on_stop closed every connection first (conn_close detaches it): a client
         * still here would only be detached. */
        while (l->clients)
            middle_detach(l->clients->c);
        link_free(l);
    }
}

void middle_destroy(struct proxy_worker *pw)
{
    struct middle *m = pw->middle;
    if (!m)
        return;
    while (m->links)
        link_free(m->links); /* only if the loop never ran its stop */
    middle_table_put(m->cur);
    free(m->hash);
    free(m->tmp);
    free(m);
    pw->middle = NULL;
}
