/* middle_wire.c: under the ME links and their clients: the conn-id hash, a link's output. */
#include "upstream/middle_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "conn/conn.h"
#include "relay/relay.h"
#include "config/reload.h"

#define ME_IOV_MAX 32

/* --- conn-id hash ------------------------------------------------------------------------ */

struct mclient **middle_hash_slot(struct middle *m, uint64_t id)
{
    return &m->hash[(id * 0x9e3779b97f4a7c15ull >> 20) & m->hmask];
}

struct mclient *middle_hash_find(struct middle *m, uint64_t id)
{
    for (struct mclient *mc = *middle_hash_slot(m, id); mc; mc = mc->hnext)
        if (mc->conn_id == id)
            return mc;
    return NULL;
}

void middle_hash_remove(struct middle *m, struct mclient *mc)
{
    for (struct mclient **pp = middle_hash_slot(m, mc->conn_id); *pp; pp = &(*pp)->hnext)
        if (*pp == mc) {
            *pp = mc->hnext;
            return;
        }
}

/* --- link output --------------------------------------------------------------------------- */

void middle_link_watch(struct me_link *l, unsigned events)
{
    if (l->fd < 0 || l->events == events)
        return;
    if (l->events)
        ev_io_stop(middle_loop_of(l->m), &l->io);
    l->events = events;
    if (events) {
        ev_io_set(&l->io, l->fd, (int)events);
        ev_io_start(middle_loop_of(l->m), &l->io);
    }
}

void middle_link_rewatch(struct me_link *l)
{
    unsigned ev = 0;
    if (l->state == ML_CONNECTING || l->ohead)
        ev |= EV_WRITE;
    if (l->state >= ML_NONCE && !l->paused)
        ev |= EV_READ;
    middle_link_watch(l, ev);
}

/* A request of a client left the link: it may be read again. */
static void out_done(struct me_link *l, struct me_out *o)
{
    if (!o->conn_id)
        return;
    struct mclient *mc = middle_hash_find(l->m, o->conn_id);
    if (!mc || mc->link != l)
        return;
    size_t was = mc->pending_up, max = mc->c->gen->opt.me_request_buffer;
    mc->pending_up -= o->len < mc->pending_up ? o->len : mc->pending_up;
    if (was >= max && mc->pending_up < max) {
        middle_client_watch(mc);
        if (mc->inlen) /* whole packets it held back: sent from its own callback */
            ev_feed_event(middle_loop_of(l->m), &mc->c->cli.io, EV_READ);
    }
}

/* Writes what is queued. Never fails the link itself (callers may be deep in a client's
 * code): a write error sets l->err and the link fails from its own callbacks. */
void middle_link_flush(struct me_link *l)
{
    struct proxy_worker *pw = l->m->pw;
    while (l->ohead && !l->err) {
        struct iovec iov[ME_IOV_MAX];
        int n = 0;
        for (struct me_out *o = l->ohead; o && n < ME_IOV_MAX; o = o->next) {
            iov[n].iov_base = o->data + o->off;
            iov[n].iov_len = o->len - o->off;
            n++;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(l->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        STAT_INC(&pw->stats.writes);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                l->err = 1;
                ev_feed_event(middle_loop_of(l->m), &l->timer, EV_TIMER);
            }
            break;
        }
        while (w > 0) {
            struct me_out *o = l->ohead;
            size_t left = o->len - o->off;
            if ((size_t)w < left) {
                o->off += (size_t)w;
                break;
            }
            w -= (ssize_t)left;
            l->ohead = o->next;
            if (!l->ohead)
                l->otail = NULL;
            out_done(l, o);
            free(o);
        }
    }
    middle_link_rewatch(l);
}

/* Queues one frame of a + b (either may be empty) with the next seqno, CBC-encrypted and
 * padded to 16 bytes, on behalf of conn_id (0 = control). Returns 0, or -1 (no memory). */
int middle_link_send(struct me_link *l, uint64_t conn_id, const uint8_t *a, size_t alen,
                     const uint8_t *b, size_t blen)
{
    size_t len = alen + blen;
    struct me_out *o = malloc(sizeof *o + len + RPC_FRAME_OVERHEAD + 16);
    if (!o)
        return -1;
    memcpy(o->data + 8, a, alen);
    if (blen)
        memcpy(o->data + 8 + alen, b, blen);
    size_t n = rpc_frame_build(o->data, l->seq_out++, o->data + 8, len);
    n = rpc_frame_pad16(o->data, n);
    crypto_cbc_apply(l->enc, o->data, o->data, n);
    o->next = NULL;
    o->conn_id = conn_id;
    o->len = n;
    o->off = 0;
    if (l->otail)
        l->otail->next = o;
    else
        l->ohead = o;
    l->otail = o;
    if (conn_id) {
        struct mclient *mc = middle_hash_find(l->m, conn_id);
        if (mc)
            mc->pending_up += n;
    }
    if (o == l->ohead)
        middle_link_flush(l);
    return 0;
}

/* Reads the client while its link is ready and its requests fit; writes while bytes wait. */
void middle_client_watch(struct mclient *mc)
{
    struct conn *c = mc->c;
    const struct options *o = &c->gen->opt;
    unsigned ev = 0;
    if (!c->cli.rd_eof && mc->link->state == ML_READY && mc->pending_up < o->me_request_buffer)
        ev |= EV_READ;
    if (c->cli.queued)
        ev |= EV_WRITE;
    side_watch(c, &c->cli, ev);
}

/* --- names ----------------------------------------------------------------------------------- */

void middle_link_name(const struct me_link *l, char *buf, size_t len)
{
    char a[SOCK_ADDR_STRLEN];
    sock_addr_format(&l->t->addrs[l->addr].addr, a, sizeof a);
    snprintf(buf, len, "w%d ME %s (dc %d)", l->m->pw->w->id, a, l->t->addrs[l->addr].dc);
}

/* Where the ME sees us: the socket's local address, through nat-info. */
void middle_endpoint_of(const struct sockaddr_storage *ss, const struct options *o, int nat,
                        struct rpc_endpoint *e)
{
    memset(e, 0, sizeof *e);
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        e->v6 = 1;
        memcpy(e->ip, &a->sin6_addr, 16);
        e->port = ntohs(a->sin6_port);
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        memcpy(e->ip, &a->sin_addr, 4);
        e->port = ntohs(a->sin_port);
    }
    for (int i = 0; nat && i < o->nnat; i++)
        if (o->nat[i].v6 == e->v6 && !memcmp(o->nat[i].priv, e->ip, e->v6 ? 16 : 4)) {
            memcpy(e->ip, o->nat[i].pub, 16);
            break;
        }
}
