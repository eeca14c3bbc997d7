/* middle_mux.c: clients over the ME links by conn id: the three flow-control limits, stalls. */
#include "upstream/middle_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "proto/faketls.h"
#include "proto/frame.h"
#include "proto/obfs2.h"
#include "conn/conn.h"
#include "relay/relay.h"
#include "config/reload.h"

#define ME_STALL_ALL 10 /* graces a link stays paused before draining clients are closed too */
#define ME_STALL_PROGRESS 8192 /* bytes a client's peer must take in a grace not to be stalled */

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

/* --- clients ------------------------------------------------------------------------------- */

/* Ends client c from the link's side (not c's own event): detached from its link at once, so
 * nothing more reaches it, and marked to close with r before the loop sleeps. */
void middle_client_drop(struct conn *c, enum conn_reason r)
{
    middle_detach(c);
    conn_close_later(c, r);
}

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
