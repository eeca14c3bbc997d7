/* middle.c: middle-proxy mode: ME links (connect, nonce, CBC handshake, frames, pings,
 * health, back-off), clients multiplexed over them by conn id, the three flow-control limits,
 * and the table reload. */
#include "upstream/middle_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "proto/faketls.h"
#include "proto/frame.h"
#include "proto/obfs2.h"
#include "conn/conn.h"
#include "upstream/dialer.h"
#include "relay/relay.h"
#include "config/reload.h"

#define ME_HANDSHAKE_TIMEOUT 5.0 /* connect + nonce + handshake */
#define ME_BACKOFF_MIN 0.5
#define ME_BACKOFF_MAX 30.0
#define ME_READS_PER_EVENT 8
#define ME_STALL_ALL 10 /* graces a link stays paused before draining clients are closed too */
#define ME_STALL_PROGRESS 8192 /* bytes a client's peer must take in a grace not to be stalled */

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

/* Ends client c from the link's side (not c's own event): detached from its link at once, so
 * nothing more reaches it, and marked to close with r before the loop sleeps. */
void middle_client_drop(struct conn *c, enum conn_reason r)
{
    middle_detach(c);
    conn_close_later(c, r);
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

/* --- answers toward clients ---------------------------------------------------------------- */

/* A paused link whose clients hold at most half of me-link-buffer is read again. */
static void link_resume(struct me_link *l)
{
    if (l->paused && l->undelivered <= l->m->pw->opt->me_link_buffer / 2) {
        l->paused = 0;
        ev_timer_stop(middle_loop_of(l->m), &l->stall);
        middle_link_rewatch(l);
    }
}

/* Keeps link->undelivered equal to what its clients hold queued; resumes a paused link. */
static void mc_sync(struct mclient *mc)
{
    struct me_link *l = mc->link;
    size_t q = mc->c->cli.queued;
    if (l->paused && q < mc->accounted) /* it reads: not what holds the link */
        mc->drained_epoch = l->pause_epoch;
    l->undelivered = l->undelivered - mc->accounted + q;
    mc->accounted = q;
    link_resume(l);
}

/* Queues p[0..n) (already encrypted for the client) toward c, in TLS records for an ee
 * client. Returns CR_NONE, or CR_NO_MEMORY with no block to be had. */
static enum conn_reason client_queue(struct conn *c, const uint8_t *p, size_t n)
{
    if (!c->tls)
        return side_queue(c, &c->cli, p, n);
    while (n) {
        size_t k = n < FAKETLS_MAX_PAYLOAD ? n : FAKETLS_MAX_PAYLOAD;
        uint8_t hdr[FAKETLS_RECORD_HDR_LEN];
        faketls_record_header(hdr, k);
        enum conn_reason r = side_queue(c, &c->cli, hdr, sizeof hdr);
        if (r == CR_NONE)
            r = side_queue(c, &c->cli, p, k);
        if (r != CR_NONE)
            return r;
        p += k;
        n -= k;
    }
    return CR_NONE;
}

/* Sends a packet (or a quick-ack token: ack = 1) to the client in its framing. Returns CR_NONE,
 * or why the client ends (the caller marks it: a link's message is not its event). */
enum conn_reason middle_client_deliver(struct mclient *mc, const uint8_t *data, size_t len,
                                       uint32_t confirm, int ack)
{
    struct middle *m = mc->link->m;
    struct conn *c = mc->c;
    struct proxy_worker *pw = m->pw;
    size_t need = len + 8;
    if (need > m->tmpcap) {
        uint8_t *t = realloc(m->tmp, need);
        if (!t)
            return CR_NO_MEMORY;
        m->tmp = t;
        m->tmpcap = need;
    }
    size_t n;
    if (ack) {
        frame_quickack(c->tag, confirm, m->tmp);
        n = 4;
    } else {
        uint8_t padb = 0;
        if (c->tag == OBFS2_TAG_PADDED)
            crypto_random(&padb, 1);
        size_t pad = c->tag == OBFS2_TAG_PADDED ? padb % 4 : 0;
        size_t h = frame_header(c->tag, len, pad, m->tmp);
        if (!h)
            return CR_NONE; /* not a whole number of words: nothing a client could parse */
        memcpy(m->tmp + h, data, len);
        if (pad)
            crypto_random(m->tmp + h + len, pad);
        n = h + len + pad;
    }
    crypto_ctr_apply(c->cli_enc, m->tmp, m->tmp, n);
    enum conn_reason r = client_queue(c, m->tmp, n);
    if (r != CR_NONE)
        return r;
    c->down_bytes += n;
    STAT_ADD(&pw->stats.bytes_down, n);
    c->last_io = ev_now(middle_loop_of(m));
    r = side_flush(c, &c->cli, &c->dc);
    if (r != CR_NONE)
        return r;
    if (c->cli.queued > c->gen->opt.me_client_buffer) {
        /* the link is never paused for one client: this one alone goes */
        STAT_INC(&pw->stats.me_slow_closed);
        return CR_SLOW;
    }
    mc_sync(mc);
    middle_client_watch(mc);
    return CR_NONE;
}

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

/* --- stalled clients ------------------------------------------------------------------------ */

static int holder_cmp(const void *a, const void *b)
{
    const struct middle_holder *x = a, *y = b;
    return x->held < y->held ? 1 : x->held > y->held ? -1 : 0;
}

int middle_stall_victims(struct middle_holder *h, int n, size_t fair, size_t target, int all)
{
    size_t total = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        total += h[i].held;
        h[i].evict = 0;
    }
    if (n > 1)
        qsort(h, (size_t)n, sizeof *h, holder_cmp);
    for (int i = 0; i < n && h[i].held; i++)
        if ((!h[i].progressed && h[i].held > fair) ||
            ((all || !h[i].progressed) && total > target)) {
            h[i].evict = 1;
            total -= h[i].held;
            k++;
        }
    return k;
}


/* Runs the stall check in s seconds; a new epoch (no client drained in it yet). */
void middle_link_stall_arm(struct me_link *l, double s)
{
    struct ev_loop *loop = middle_loop_of(l->m);
    l->pause_epoch++;
    ev_timer_stop(loop, &l->stall);
    ev_timer_set(&l->stall, s, 0);
    ev_timer_start(loop, &l->stall);
}

/* Bytes c's peer has yet to take: queued in the proxy and in the socket (unsent or unacked).
 * It only falls while the link is paused (nothing new arrives), and only as the peer reads.
 * *empty: the socket holds none (the peer took all it was sent: not what stalls the link). */
static size_t client_unread(const struct mclient *mc, int *empty)
{
    int outq = 0;
    if (ioctl(mc->c->cli.fd, TIOCOUTQ, &outq) || outq < 0)
        outq = -1;
    *empty = outq == 0;
    return mc->accounted + (size_t)(outq > 0 ? outq : 0);
}

/* The link is still paused: a quarter of me-stall-grace after the pause each holder's unread
 * bytes are noted; at the grace, and each grace after while it stays paused, the holders whose
 * peer took less than ME_STALL_PROGRESS meanwhile (nothing written from their queue, the
 * socket's unacked bytes not falling) close: the chosen of middle_stall_victims, which resumes
 * the link. Clients that read are left to drain until the link has been paused ME_STALL_ALL
 * graces: then the largest holders go whether they read or not. A pause shorter than a
 * quarter grace (a busy link) costs nothing here. */
void middle_on_link_stall(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct me_link *l = t->data;
    struct proxy_worker *pw = l->m->pw;
    double grace = pw->opt->me_stall_grace_ms / 1000.0, paused = ev_now(loop) - l->paused_at;
    if (!l->paused || l->state != ML_READY || !l->nclients)
        return;
    int judge = l->stall_judge, n = 0;
    struct middle_holder *h = judge ? calloc((size_t)l->nclients, sizeof *h) : NULL;
    for (struct mclient *mc = l->clients; mc; mc = mc->lnext) {
        if (!mc->accounted || mc->c->closing) /* holds nothing, or goes anyway */
            continue;
        int empty;
        size_t unread = client_unread(mc, &empty);
        int noted = mc->mark_epoch == l->pause_epoch; /* at the last check of this pause */
        if (h && n < l->nclients)
            h[n++] = (struct middle_holder){
                .who = mc, .held = mc->accounted,
                .progressed = mc->drained_epoch == l->pause_epoch || !noted || empty ||
                              unread + ME_STALL_PROGRESS <= mc->stall_mark};
        mc->stall_mark = unread;
        mc->mark_epoch = l->pause_epoch + 1; /* the epoch middle_link_stall_arm starts below */
    }
    int k = 0;
    if (n) {
        size_t fair = pw->opt->me_link_buffer / (size_t)l->nclients;
        k = middle_stall_victims(h, n, fair, pw->opt->me_link_buffer / 2,
                                 paused >= ME_STALL_ALL * grace);
    }
    char name[160];
    middle_link_name(l, name, sizeof name);
    if (judge && log_enabled(LOG_LVL_DEBUG)) {
        int reading = 0;
        for (int i = 0; i < n; i++)
            reading += h[i].progressed;
        log_debug("%s: paused %.1f s, %d clients hold %zu bytes, %d of them reading: "
                  "closing %d", name, paused, n, l->undelivered, reading, k);
    }
    for (int i = 0; i < n; i++) {
        struct mclient *mc = h[i].who;
        struct conn *c = mc->c;
        if (!h[i].evict || c->closing)
            continue;
        char peer[SOCK_ADDR_STRLEN];
        sock_addr_format(&c->peer, peer, sizeof peer);
        log_info("w%d conn %llu %s: closed as stalled: held %zu of the %zu bytes on %s, %s, "
                 "paused %.1f s (me-stall-grace)", pw->w->id, (unsigned long long)c->id, peer,
                 mc->accounted, l->undelivered, name,
                 h[i].progressed ? "the largest share" : "read none of them", paused);
        STAT_INC(&pw->stats.me_stalled_evicted);
        middle_client_drop(c, CR_SLOW); /* frees mc; the link resumes once under half */
    }
    free(h);
    if (l->paused) { /* its holders read, are closing already, or no memory */
        l->stall_judge = 1;
        middle_link_stall_arm(l, judge ? grace : grace * 3 / 4);
    }
}

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

/* --- clients ------------------------------------------------------------------------------- */

/* Picks a link for DC id dc: its own MEs, else the default DC's (as the official proxy does
 * for an id its config lacks, media ids included); ready links first, round robin. */
static struct me_link *link_pick(struct middle *m, int dc)
{
    struct me_table *t = m->cur;
    int want = dc, found = 0;
    for (int i = 0; i < t->naddrs && !found; i++)
        found = t->addrs[i].dc == dc;
    if (!found)
        want = t->default_dc;
    struct me_link *best = NULL, *any = NULL;
    unsigned seen = 0, pick = m->rr++;
    for (struct me_link *l = m->links; l; l = l->next) {
        int serves = 0; /* one of want's lines names this link's address */
        for (int i = 0; i < t->naddrs && !serves && l->t == t; i++)
            serves = t->addrs[i].dc == want && t->addrs[i].uniq == l->addr;
        if (l->draining || !serves)
            continue;
        if (!any || (pick % (seen + 1)) == 0)
            any = l;
        if (l->state == ML_READY && (!best || l->nclients < best->nclients))
            best = l;
        if (l->state != ML_WAIT && any && any->state == ML_WAIT)
            any = l; /* connecting beats waiting out a back-off */
        seen++;
    }
    return best ? best : any;
}

static void addr_of(const struct sockaddr_storage *ss, struct rpc_addr *a)
{
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
        const uint8_t *b = s6->sin6_addr.s6_addr;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(b, mapped, 12))
            rpc_addr_set(a, b + 12, 0, ntohs(s6->sin6_port));
        else
            rpc_addr_set(a, b, 1, ntohs(s6->sin6_port));
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
        rpc_addr_set(a, (const uint8_t *)&s4->sin_addr, 0, ntohs(s4->sin_port));
    }
}

/* Sends whole packets from p[0..n) as RPC_PROXY_REQ while the client's requests fit;
 * *used = bytes consumed. Returns CR_NONE, or why c ends. */
static enum conn_reason client_send(struct mclient *mc, const uint8_t *p, size_t n, size_t *used)
{
    struct conn *c = mc->c;
    struct proxy_worker *pw = c->pw;
    const struct options *o = &c->gen->opt;
    size_t off = 0;
    *used = 0;
    while (off < n && mc->pending_up < o->me_request_buffer) {
        struct frame f;
        enum frame_status st = frame_parse(c->tag, p + off, n - off, &f, NULL);
        if (st == FRAME_NEED_MORE)
            break;
        if (st == FRAME_BAD)
            return CR_CLIENT_PROTOCOL;
        const uint8_t *pkt = p + off + f.hdr_len;
        uint32_t flags = mc->flags | (f.quickack ? RPC_FLAG_QUICKACK : 0);
        static const uint8_t zero[8];
        if (f.len >= 8 && !memcmp(pkt, zero, 8))
            flags |= RPC_FLAG_NOT_ENCRYPTED;
        uint8_t hdr[RPC_REQ_HDR_MAX];
        size_t hl = rpc_proxy_req_header(hdr, flags, mc->conn_id, &mc->remote, &mc->ours,
                                         o->ad_tag);
        if (middle_link_send(mc->link, mc->conn_id, hdr, hl, pkt, f.len))
            return CR_NO_MEMORY;
        STAT_INC(&pw->stats.me_requests);
        off += f.total;
    }
    *used = off;
    return CR_NONE;
}

/* Appends n decrypted client bytes. Returns CR_NONE, or CR_CLIENT_PROTOCOL (more than a
 * packet can be, or no memory). */
static enum conn_reason client_append(struct mclient *mc, const uint8_t *p, size_t n)
{
    if (mc->inlen + n > mc->incap) {
        size_t cap = mc->incap ? mc->incap : 4096;
        while (cap < mc->inlen + n)
            cap *= 2;
        if (cap > FRAME_MAX_LEN + 2 * ME_READ_CHUNK)
            return CR_CLIENT_PROTOCOL;
        uint8_t *b = realloc(mc->in, cap);
        if (!b)
            return CR_CLIENT_PROTOCOL;
        mc->in = b;
        mc->incap = cap;
    }
    memcpy(mc->in + mc->inlen, p, n);
    mc->inlen += n;
    return CR_NONE;
}

/* Sends what mc->in holds; an emptied buffer is freed (an idle client holds none). Returns
 * CR_NONE, or why c ends. */
enum conn_reason middle_client_packets(struct mclient *mc)
{
    size_t used;
    enum conn_reason r = client_send(mc, mc->in, mc->inlen, &used);
    if (r != CR_NONE)
        return r;
    memmove(mc->in, mc->in + used, mc->inlen - used);
    mc->inlen -= used;
    if (!mc->inlen) {
        free(mc->in);
        mc->in = NULL;
        mc->incap = 0;
    }
    return CR_NONE;
}

/* New client bytes p[0..n): packets straight from p when nothing is held (no copy), the rest
 * kept. Returns CR_NONE, or why c ends. */
static enum conn_reason client_feed(struct mclient *mc, const uint8_t *p, size_t n)
{
    size_t used = 0;
    enum conn_reason r = CR_NONE;
    if (!mc->inlen && mc->link->state == ML_READY)
        r = client_send(mc, p, n, &used);
    if (r == CR_NONE && used < n)
        r = client_append(mc, p + used, n - used);
    if (r == CR_NONE && mc->inlen && mc->link->state == ML_READY)
        r = middle_client_packets(mc);
    return r;
}

enum conn_reason middle_attach(struct conn *c, uint8_t *extra, size_t n)
{
    struct proxy_worker *pw = c->pw;
    struct middle *m = pw->middle;
    struct me_link *l = link_pick(m, c->dc_id);
    struct mclient *mc = calloc(1, sizeof *mc);
    if (!l || !mc) {
        free(mc);
        return l ? CR_NO_MEMORY : CR_DC_UNREACHABLE;
    }
    mc->c = c;
    mc->link = l;
    c->mc = mc;
    do
        mc->conn_id = ++m->next_id;
    while (!mc->conn_id || middle_hash_find(m, mc->conn_id));
    struct mclient **slot = middle_hash_slot(m, mc->conn_id);
    mc->hnext = *slot;
    *slot = mc;
    mc->lnext = l->clients;
    if (l->clients)
        l->clients->lprev = mc;
    l->clients = mc;
    l->nclients++;
    mc->flags = RPC_FLAG_MAGIC | RPC_FLAG_EXTMODE2 |
                (c->tag == OBFS2_TAG_ABRIDGED ? RPC_FLAG_ABRIDGED
                 : c->tag == OBFS2_TAG_PADDED ? RPC_FLAG_INTERMEDIATE | RPC_FLAG_PAD
                                              : RPC_FLAG_INTERMEDIATE);
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    memcpy(&ss, &c->peer.u, c->peer.len < sizeof ss ? c->peer.len : sizeof ss);
    addr_of(&ss, &mc->remote);
    socklen_t sl = sizeof ss;
    memset(&ss, 0, sizeof ss);
    getsockname(c->cli.fd, (struct sockaddr *)&ss, &sl);
    struct rpc_endpoint e;
    middle_endpoint_of(&ss, &c->gen->opt, 1, &e);
    rpc_addr_set(&mc->ours, e.ip, e.v6, e.port);
    c->last_io = ev_now(pw->w->loop);
    if (log_enabled(LOG_LVL_DEBUG)) {
        char name[160];
        middle_link_name(l, name, sizeof name);
        log_debug("w%d conn %llu: dc %d via %s, conn id %016llx", pw->w->id,
                  (unsigned long long)c->id, c->dc_id, name, (unsigned long long)mc->conn_id);
    }
    if (n) {
        crypto_ctr_apply(c->cli_dec, extra, extra, n);
        c->up_bytes += n;
        STAT_ADD(&pw->stats.bytes_up, n);
        enum conn_reason r = client_feed(mc, extra, n);
        if (r != CR_NONE)
            return r;
    }
    middle_client_watch(mc);
    return CR_NONE;
}

void middle_detach(struct conn *c)
{
    struct mclient *mc = c->mc;
    struct me_link *l = mc->link;
    struct middle *m = l->m;
    c->mc = NULL;
    ev_clear_pending(middle_loop_of(m), &c->cli.io); /* a read fed by out_done */
    if (mc->conn_id) {
        middle_hash_remove(m, mc);
        if (l->state == ML_READY) { /* the ME forgets it too */
            uint8_t cl[12];
            rpc_msg_u64(cl, RPC_CLOSE_CONN, mc->conn_id);
            middle_link_send(l, 0, cl, sizeof cl, NULL, 0);
        }
    }
    if (mc->lprev)
        mc->lprev->lnext = mc->lnext;
    else
        l->clients = mc->lnext;
    if (mc->lnext)
        mc->lnext->lprev = mc->lprev;
    l->nclients--;
    l->undelivered -= mc->accounted < l->undelivered ? mc->accounted : l->undelivered;
    link_resume(l);
    free(mc->in);
    free(mc);
    if (l->draining && !l->nclients && !l->failing) /* freed from its own callback */
        ev_feed_event(middle_loop_of(m), &l->timer, EV_TIMER);
}

enum conn_reason middle_client_event(struct conn *c, int revents)
{
    struct mclient *mc = c->mc;
    struct proxy_worker *pw = c->pw;
    struct middle *m = pw->middle;
    enum conn_reason r;
    if (revents & EV_WRITE) {
        if ((r = side_flush(c, &c->cli, &c->dc)) != CR_NONE)
            return r;
        if (c->cli.rd_eof && !c->cli.queued)
            return CR_DONE;
        mc_sync(mc);
    }
    if (revents & EV_READ) {
        for (int round = 0; round < 4 && mc->pending_up < c->gen->opt.me_request_buffer &&
                            mc->link->state == ML_READY;
             round++) {
            ssize_t n = read(c->cli.fd, m->rd, sizeof m->rd);
            STAT_INC(&pw->stats.reads);
            if (n == 0) {
                c->cli.rd_eof = 1;
                if (!c->cli.queued)
                    return CR_DONE;
                break;
            }
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    break;
                return CR_CLIENT_CLOSED;
            }
            size_t k = (size_t)n;
            if (c->tls && faketls_deframe(&c->defr, m->rd, (size_t)n, &k) != FAKETLS_OK)
                return CR_CLIENT_PROTOCOL;
            crypto_ctr_apply(c->cli_dec, m->rd, m->rd, k);
            c->up_bytes += k;
            STAT_ADD(&pw->stats.bytes_up, k);
            c->last_io = ev_now(pw->w->loop);
            if ((r = client_feed(mc, m->rd, k)) != CR_NONE)
                return r;
            if ((size_t)n < sizeof m->rd)
                break;
        }
        if (mc->inlen && mc->link->state == ML_READY && (r = middle_client_packets(mc)) != CR_NONE)
            return r;
    }
    middle_client_watch(mc);
    return CR_NONE;
}
