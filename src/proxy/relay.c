/* relay.c: moving bytes between a connection's two sockets: interest, queues, pipes, pump. */
#include "proxy/relay.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/log.h"
#include "proto/faketls.h"

#define RELAY_IOV_MAX 16
#define RELAY_READS_PER_EVENT 4 /* fairness: at most this many reads per readiness */
#ifndef RELAY_WIDE_MAX /* a measurement knob: -DRELAY_WIDE_MAX=16 (BENCHMARKS.md, #19) */
#define RELAY_WIDE_MAX 4 /* a bulk connection's read fills up to this many blocks */
#endif

/* --- interest management --------------------------------------------------------------- */

/* Starts io with exactly `events` (no syscall if unchanged: libev batches the change). */
void side_watch(struct conn *c, struct conn_side *s, unsigned events)
{
    if (s->fd < 0 || s->events == events)
        return;
    struct ev_loop *loop = c->pw->w->loop;
    if (s->events)
        ev_io_stop(loop, &s->io);
    s->events = events;
    if (events) {
        ev_io_set(&s->io, s->fd, (int)events);
        ev_io_start(loop, &s->io);
    }
}

/* In RELAY: read a side while it has not ended, its sink has room and no block is awaited;
 * watch for writability while bytes are queued to it. */
void relay_watch(struct conn *c)
{
    size_t max = c->pw->opt->max_buffer;
    unsigned ce = 0, de = 0;
    if (!c->cli.rd_eof && c->dc.queued < max && !c->dc.pipe_full && !c->waiting_block &&
        !c->rate_until[0])
        ce |= EV_READ;
    if (!c->dc.rd_eof && c->cli.queued < max && !c->cli.pipe_full && !c->waiting_block &&
        !c->rate_until[1])
        de |= EV_READ;
    /* write-batch-mode buffer: a batched write waits for the batch timer */
    int hold = c->batched && c->pw->opt->write_batch_mode == WB_BUFFER;
    if (c->cli.queued && !hold)
        ce |= EV_WRITE;
    if (c->dc.queued && !hold)
        de |= EV_WRITE;
    side_watch(c, &c->cli, ce);
    side_watch(c, &c->dc, de);
}

/* --- pipes for splice ------------------------------------------------------------------ */

/* Lends a pipe to side s. Returns 0, or -1 if none can be had (use the block path). */
static int pipe_take(struct proxy_worker *pw, struct conn_side *s)
{
    if (pw->npipes) {
        pw->npipes--;
        s->pipe_r = pw->pipes[pw->npipes][0];
        s->pipe_w = pw->pipes[pw->npipes][1];
    } else {
        int fds[2];
        if (pw->pipes_out >= pw->pipes_cap || pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0)
            return -1;
        if (pw->pipe_size)
            fcntl(fds[1], F_SETPIPE_SZ, pw->pipe_size);
        s->pipe_r = fds[0];
        s->pipe_w = fds[1];
    }
    pw->pipes_out++;
    return 0;
}

/* Gives side s's pipe back: kept for reuse when empty, closed when it still holds bytes. */
static void pipe_give(struct proxy_worker *pw, struct conn_side *s)
{
    if (s->pipe_r < 0)
        return;
    if (s->piped == 0 && pw->npipes < pw->pipes_cap) {
        pw->pipes[pw->npipes][0] = s->pipe_r;
        pw->pipes[pw->npipes][1] = s->pipe_w;
        pw->npipes++;
    } else {
        close(s->pipe_r);
        close(s->pipe_w);
    }
    pw->pipes_out--;
    s->pipe_r = s->pipe_w = -1;
    s->queued -= s->piped;
    s->piped = 0;
}


/* Fronted connections (probes, browsers, scanners: anyone without a secret) draw arena
 * blocks from a small budget of their own (mask-buffer-memory), relays from the rest: a flood
 * of fronted connections that never read can hold at most that budget, never a relay's
 * blocks, and accepting never pauses for blocks they hold. */
static struct arena_block *arena_take(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    if (c->mode == CONN_MODE_MASK ? pw->mask_blocks >= pw->mask_blocks_max
                                  : relay_blocks_full(pw))
        return NULL;
    struct arena_block *b = arena_get(&pw->arena);
    if (b && c->mode == CONN_MODE_MASK)
        pw->mask_blocks++;
    return b;
}

static void arena_give(struct conn *c, struct arena_block *b)
{
    struct proxy_worker *pw = c->pw;
    if (!b)
        return;
    arena_put(&pw->arena, b);
    if (c->mode == CONN_MODE_MASK) {
        pw->mask_blocks--;
        if (pw->mask_waiters) { /* one fronted connection over budget may read again */
            struct conn *w = pw->mask_waiters;
            pw->mask_waiters = w->wait_next;
            w->wait_next = NULL;
            w->waiting_block = 0;
            if (w->state == CS_RELAY)
                relay_watch(w);
        }
    }
}

int relay_blocks_full(const struct proxy_worker *pw)
{
    return pw->relay_blocks_max && pw->arena.in_use - pw->mask_blocks >= pw->relay_blocks_max;
}

/* A block for the queue of side s: its own spare (buffers = per-connection), else the
 * worker's arena. NULL if none can be had. */
static struct arena_block *block_get(struct conn *c, struct conn_side *s)
{
    struct arena_block *b = s->spare;
    if (!b)
        return arena_take(c);
    s->spare = NULL;
    b->next = NULL;
    b->start = b->end = 0;
    return b;
}

/* Gives a drained block back: kept as side s's spare in per-connection mode, else to the
 * arena (where it stays hot for the next reader: LIFO). */
static void block_put(struct conn *c, struct conn_side *s, struct arena_block *b)
{
    if (c->pw->opt->buffers && !s->spare && s->fd >= 0)
        s->spare = b;
    else
        arena_give(c, b);
}

int relay_reserve(struct conn *c)
{
    struct conn_side *sides[2] = {&c->cli, &c->dc};
    for (int i = 0; i < 2; i++)
        if (!sides[i]->spare && !(sides[i]->spare = arena_take(c)))
            return -1;
    return 0;
}

void side_release(struct conn *c, struct conn_side *s)
{
    struct proxy_worker *pw = c->pw;
    side_watch(c, s, 0);
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    for (struct arena_block *b = s->qhead, *n; b; b = n) {
        n = b->next;
        arena_give(c, b);
    }
    arena_give(c, s->spare);
    s->spare = NULL;
    s->qhead = s->qtail = NULL;
    pipe_give(pw, s);
    s->queued = 0;
}

/* Unlinks c from a singly linked list of connections threaded through the member at
 * link_off (wait_next or batch_next). */
static void conn_unlink(struct conn **head, struct conn *c, size_t link_off)
{
    for (struct conn **pp = head; *pp; pp = (struct conn **)(void *)((char *)*pp + link_off)) {
        if (*pp == c) {
            struct conn **link = (struct conn **)(void *)((char *)c + link_off);
            *pp = *link;
            *link = NULL;
            return;
        }
    }
}

void waiters_remove(struct proxy_worker *pw, struct conn *c)
{
    conn_unlink(c->mode == CONN_MODE_MASK ? &pw->mask_waiters : &pw->waiters, c,
                offsetof(struct conn, wait_next));
    c->waiting_block = 0;
}

/* Wakes connections waiting for a block, as many as there are free blocks now. */
void waiters_wake(struct proxy_worker *pw)
{
    while (pw->waiters && !arena_exhausted(&pw->arena) && !relay_blocks_full(pw)) {
        struct conn *c = pw->waiters;
        pw->waiters = c->wait_next;
        c->wait_next = NULL;
        c->waiting_block = 0;
        if (c->state == CS_RELAY)
            relay_watch(c);
        if (!pw->arena.partial)
            break; /* the next get maps a new slab: wake one at a time */
    }
}

/* --- relay ----------------------------------------------------------------------------- */

/* Piped bytes toward an ee client leave in TLS records (only its side gets a pipe for them,
 * with splice-tls on; a fronted connection has tls cleared). */
static int side_records(const struct conn *c, const struct conn_side *s)
{
    return c->tls && s == &c->cli;
}

/* record-sizing (what web servers do): records toward an ee client start at about one TCP
 * segment and grow to full size once RS_GROW_BYTES went out or RS_GROW_TIME passed; after
 * RS_IDLE without a record they start small again. */
#define RS_GROW_BYTES (64u * 1024)
#define RS_GROW_TIME 1.0
#define RS_IDLE 1.0
#define RS_SEGMENT_MAX 1448 /* an Ethernet path's segment with TCP timestamps */
#define RS_NOISE 64         /* a small record is up to this much shorter, at random */

/* Payload bytes the next record toward the client may carry (record_sent counts what it
 * did). Costs a compare and a clock read once the stream is in bulk. */
static size_t record_cap(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    if (!pw->opt->record_sizing)
        return FAKETLS_MAX_PAYLOAD;
    ev_tstamp now = ev_now(pw->w->loop);
    int idle = now - c->rs_last >= RS_IDLE;
    c->rs_last = now;
    if (idle)
        c->rs_sent = 0;
    if (c->rs_sent >= RS_GROW_BYTES)
        return FAKETLS_MAX_PAYLOAD;
    if (c->rs_sent == 0)
        c->rs_start = now;
    else if (now - c->rs_start >= RS_GROW_TIME) {
        c->rs_sent = RS_GROW_BYTES;
        return FAKETLS_MAX_PAYLOAD;
    }
    if (!c->rs_mss) {
        int mss = 0;
        socklen_t ml = sizeof mss;
        if (getsockopt(c->cli.fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &ml) != 0 || mss <= 0)
            mss = RS_SEGMENT_MAX;
        c->rs_mss = (uint16_t)(mss < RS_SEGMENT_MAX ? mss : RS_SEGMENT_MAX);
    }
    uint64_t x = pw->rng; /* xorshift64: noise, not secrets */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    pw->rng = x;
    return c->rs_mss > FAKETLS_RECORD_HDR_LEN + RS_NOISE + 64
               ? c->rs_mss - FAKETLS_RECORD_HDR_LEN - (size_t)(x % RS_NOISE)
               : 64;
}

/* A record of n payload bytes left toward the client (counted until the records are full). */
static void record_sent(struct conn *c, size_t n)
{
    if (c->rs_sent < RS_GROW_BYTES)
        c->rs_sent += (uint32_t)n;
}

/* Records: writes (what is left of) the header of the record that starts the pipe, choosing
 * its length first if no record is open. Returns 1 when the header is out, 0 when the socket
 * is full, -1 on error (errno set). */
static int record_header_flush(struct conn *c, struct conn_side *s)
{
    struct proxy_worker *pw = c->pw;
    if (!s->rec_left) {
        size_t cap = record_cap(c);
        s->rec_left = (uint32_t)(s->piped < cap ? s->piped : cap);
        record_sent(c, s->rec_left);
        s->rec_hdr_left = FAKETLS_RECORD_HDR_LEN;
    }
    while (s->rec_hdr_left) {
        uint8_t hdr[FAKETLS_RECORD_HDR_LEN];
        faketls_record_header(hdr, s->rec_left);
        /* MSG_MORE: the header waits for the payload spliced right after it */
        ssize_t w = send(s->fd, hdr + FAKETLS_RECORD_HDR_LEN - s->rec_hdr_left,
                         s->rec_hdr_left, MSG_NOSIGNAL | MSG_DONTWAIT | MSG_MORE);
        STAT_INC(&pw->stats.writes);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        }
        s->rec_hdr_left -= (uint8_t)w;
    }
    return 1;
}

/* Writes what is queued to side s. Returns 0, or -1 if the connection was closed. Once the
 * queue drains and the opposite side has ended, s is shut for writing (half-close). */
int side_flush(struct conn *c, struct conn_side *s, struct conn_side *from)
{
    struct proxy_worker *pw = c->pw;
    int more = s->corked && pw->opt->write_batch_mode == WB_MORE;
    int records = side_records(c, s);
    while (s->piped) {
        size_t len = s->piped;
        unsigned flags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK | (more ? SPLICE_F_MORE : 0);
        if (records) { /* header, payload, header, payload, ... */
            int r = record_header_flush(c, s);
            if (r <= 0) {
                if (r == 0)
                    return 0;
                return conn_close(c, CR_CLIENT_CLOSED);
            }
            len = s->rec_left;
            if (s->piped > len)
                flags |= SPLICE_F_MORE; /* the next record follows at once */
        }
        ssize_t w = splice(s->pipe_r, NULL, s->fd, NULL, len, flags);
        STAT_INC(&pw->stats.writes);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (errno == EINTR)
                continue;
            return conn_close(c, s == &c->cli ? CR_CLIENT_CLOSED : CR_DC_CLOSED);
        }
        s->piped -= (size_t)w;
        s->queued -= (size_t)w;
        s->pipe_full = 0;
        if (records)
            s->rec_left -= (uint32_t)w;
    }
    if (s->pipe_r >= 0)
        pipe_give(pw, s); /* drained: an idle connection holds no pipe */
    while (s->qhead) {
        struct iovec iov[RELAY_IOV_MAX];
        int n = 0;
        for (struct arena_block *b = s->qhead; b && n < RELAY_IOV_MAX; b = b->next) {
            iov[n].iov_base = b->data + b->start;
            iov[n].iov_len = b->end - b->start;
            n++;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT | (more ? MSG_MORE : 0));
        STAT_INC(&pw->stats.writes);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (errno == EINTR)
                continue;
            return conn_close(c, s == &c->cli ? CR_CLIENT_CLOSED : CR_DC_CLOSED);
        }
        s->queued -= (size_t)w;
        while (w > 0) {
            struct arena_block *b = s->qhead;
            size_t len = b->end - b->start;
            if ((size_t)w < len) {
                b->start += (uint32_t)w;
                break;
            }
            w -= (ssize_t)len;
            s->qhead = b->next;
            if (!s->qhead)
                s->qtail = NULL;
            block_put(c, s, b);
        }
        if (s->qhead)
            return 0; /* short write: the socket is full, wait for EV_WRITE */
    }
    if (pw->waiters)
        waiters_wake(pw);
    if (from->rd_eof && !s->wr_shut) {
        shutdown(s->fd, SHUT_WR);
        s->wr_shut = 1;
    }
    return 0;
}

int side_queue(struct conn *c, struct conn_side *s, const uint8_t *p, size_t n)
{
    struct proxy_worker *pw = c->pw;
    size_t bs = pw->arena.block_size;
    while (n) {
        struct arena_block *b = s->qtail;
        if (!b || b->end == bs) {
            if (!(b = block_get(c, s)))
                return -1;
            if (s->qtail)
                s->qtail->next = b;
            else
                s->qhead = b;
            s->qtail = b;
        }
        size_t k = bs - b->end < n ? bs - b->end : n;
        memcpy(b->data + b->end, p, k);
        b->end += (uint32_t)k;
        s->queued += k;
        p += k;
        n -= k;
    }
    return 0;
}

/* Puts c on the worker's batch list, starting the window if none is open. */
static void batch_join(struct conn *c)
{
    struct proxy_worker *pw = c->pw;
    if (!c->batched) {
        c->batched = 1;
        c->batch_next = pw->batch;
        pw->batch = c;
        if (!ev_is_active(&pw->batch_timer)) {
            ev_timer_set(&pw->batch_timer, pw->opt->write_batch_ms / 1000.0, 0);
            ev_timer_start(pw->w->loop, &pw->batch_timer);
        }
    }
}

/* Writes dst now, or holds the bytes until the worker's batch timer so that several small
 * reads leave in fewer, fuller segments: write-batch-mode buffer keeps less than a block in
 * user space; cork and msg-more write at once into a socket told to hold partial segments. */
static int flush_or_batch(struct conn *c, struct conn_side *dst, struct conn_side *src)
{
    struct proxy_worker *pw = c->pw;
    const struct options *o = pw->opt;
    if (!o->write_batch_ms)
        return side_flush(c, dst, src);
    if (o->write_batch_mode == WB_BUFFER) {
        if (dst->piped || dst->queued >= pw->arena.block_size)
            return side_flush(c, dst, src);
        batch_join(c);
        return 0;
    }
    if (!dst->corked) {
        int one = 1;
        if (o->write_batch_mode == WB_CORK)
            setsockopt(dst->fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one);
        dst->corked = 1;
        batch_join(c);
    }
    return side_flush(c, dst, src);
}

/* Window closed: lets the kernel send what a corked side holds (clearing TCP_CORK, or setting
 * TCP_NODELAY, pushes partial segments). */
static void side_uncork(struct conn *c, struct conn_side *s)
{
    if (!s->corked)
        return;
    s->corked = 0;
    if (s->fd < 0)
        return;
    int zero = 0, one = 1;
    if (c->pw->opt->write_batch_mode == WB_CORK)
        setsockopt(s->fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero);
    else
        setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void relay_settle(struct conn *c);

static void on_batch_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct proxy_worker *pw = t->data;
    struct conn *list = pw->batch;
    pw->batch = NULL;
    for (struct conn *c = list, *next; c; c = next) {
        next = c->batch_next;
        c->batch_next = NULL;
        c->batched = 0;
        side_uncork(c, &c->dc);
        side_uncork(c, &c->cli);
        if (side_flush(c, &c->dc, &c->cli) || side_flush(c, &c->cli, &c->dc))
            continue; /* closed */
        relay_settle(c);
    }
}

void relay_init(struct proxy_worker *pw)
{
    ev_init(&pw->batch_timer, on_batch_timer);
    pw->batch_timer.data = pw;
}

void relay_stop(struct proxy_worker *pw)
{
    ev_timer_stop(pw->w->loop, &pw->batch_timer);
}

void batch_remove(struct proxy_worker *pw, struct conn *c)
{
    conn_unlink(&pw->batch, c, offsetof(struct conn, batch_next));
    c->batched = 0;
}

/* One direction of the relay: what is read from src is deframed (tls_in: FakeTLS records
 * from the client), decrypted with dec, encrypted with enc (either may be NULL: no crypto),
 * framed (tls_out: one TLS record per read, toward the client) and queued to dst. */
struct relay_dir {
    struct conn_side *src, *dst;
    struct crypto_ctr *dec, *enc;
    int tls_in, tls_out;
    uint64_t *counter;
    stat_t *stat_bytes[3]; /* the worker's total, the user's and the DC's (NULL: none) */
};

/* Counts n bytes moved along d: the connection's counter and each counter named. */
static inline void relay_count(const struct relay_dir *d, uint64_t n)
{
    *d->counter += n;
    for (int i = 0; i < 3; i++)
        if (d->stat_bytes[i])
            STAT_ADD(d->stat_bytes[i], n);
}

/* Bytes a rate-limited user's connection may read at once (and the GCRA burst). */
static size_t rate_burst(uint64_t rate)
{
    uint64_t b = rate / 16;
    return b < 4096 ? 4096 : (size_t)b;
}

/* The user's limits on n bytes just relayed in direction dir (0 up, 1 down): the quota
 * (used up: the connection ends) and the rate (over it: this direction pauses). Returns -1 if
 * c was closed, 1 if paused, 0 to go on. */
static int user_limits(struct conn *c, int dir, size_t n)
{
    const struct user_limit *l = c->lim;
    struct users *u = c->pw->users;
    if (l->quota && users_charge(u, (uint32_t)c->uid, l->quota, n))
        return conn_close(c, CR_LIMIT);
    if (l->rate) {
        double w = users_rate_take(u, (uint32_t)c->uid, dir, l->rate, rate_burst(l->rate), n,
                                   ev_now(c->pw->w->loop));
        if (w > 0) {
            conn_rate_pause(c, dir, w);
            return 1;
        }
    }
    return 0;
}

/* Bulk connections (the last read filled its whole room; never toward an ee client, whose
 * reads are one record each): one readv into the tail block's room and up to src->wide - 1
 * fresh blocks, so a busy stream makes a quarter of the calls at 64 KiB a read with 16 KiB
 * blocks. Each block's bytes are then deframed, decrypted and re-encrypted while they are in
 * L1. Blocks not filled go back at once, so an idle connection holds no more than before.
 * Returns 1 if it tried (*rv: what readv returned, errno kept; *got: payload bytes queued;
 * *full: the read filled all it asked for), 0 if it did not (fewer than two blocks to be had:
 * the one-block path runs), -1 if c was closed. */
static int pump_wide(struct conn *c, const struct relay_dir *d, size_t cap, ssize_t *rv,
                     size_t *got, int *full)
{
    struct proxy_worker *pw = c->pw;
    struct conn_side *src = d->src, *dst = d->dst;
    size_t bs = pw->arena.block_size, max = pw->opt->max_buffer;
    size_t budget = max - dst->queued;
    if (budget > cap)
        budget = cap;
    struct arena_block *blk[RELAY_WIDE_MAX + 1];
    struct iovec iov[RELAY_WIDE_MAX + 1];
    int n = 0, nfresh = 0;
    size_t room = 0;
    struct arena_block *tail = dst->qtail;
    if (tail && tail->end < bs && budget) {
        blk[n] = tail;
        iov[n].iov_base = tail->data + tail->end;
        iov[n].iov_len = bs - tail->end < budget ? bs - tail->end : budget;
        room += iov[n++].iov_len;
    }
    while (nfresh < src->wide && room < budget) {
        struct arena_block *b = block_get(c, dst);
        if (!b)
            break;
        b->start = b->end = 0;
        blk[n] = b;
        iov[n].iov_base = b->data;
        iov[n].iov_len = bs < budget - room ? bs : budget - room;
        room += iov[n++].iov_len;
        nfresh++;
    }
    int first_fresh = n - nfresh;
    if (n < 2) { /* nothing to gain over one read: let the one-block path do it */
        for (int i = first_fresh; i < n; i++)
            block_put(c, dst, blk[i]);
        return 0;
    }
    ssize_t r = readv(src->fd, iov, n);
    int err = errno;
    STAT_INC(&pw->stats.reads);
    size_t left = r > 0 ? (size_t)r : 0, moved = 0;
    for (int i = 0; i < n; i++) {
        size_t k = left < iov[i].iov_len ? left : iov[i].iov_len, m = k;
        left -= k;
        uint8_t *p = iov[i].iov_base;
        if (k && d->tls_in && faketls_deframe(&c->defr, p, k, &m) != FAKETLS_OK) {
            for (int j = i > first_fresh ? i : first_fresh; j < n; j++)
                block_put(c, dst, blk[j]);
            return conn_close(c, CR_CLIENT_PROTOCOL);
        }
        if (m && d->dec)
            crypto_ctr_apply(d->dec, p, p, m);
        if (m && d->enc)
            crypto_ctr_apply(d->enc, p, p, m);
        moved += m;
        if (i < first_fresh) {
            blk[i]->end += (uint32_t)m;
        } else if (m) {
            blk[i]->end = (uint32_t)m;
            if (dst->qtail)
                dst->qtail->next = blk[i];
            else
                dst->qhead = blk[i];
            dst->qtail = blk[i];
        } else {
            block_put(c, dst, blk[i]);
        }
    }
    dst->queued += moved;
    *rv = r;
    *got = moved;
    *full = r > 0 && (size_t)r == room;
    if (r > 0) {
        STAT_INC(&pw->stats.wide_reads);
        src->wide = *full ? (uint8_t)(src->wide * 2 > RELAY_WIDE_MAX ? RELAY_WIDE_MAX
                                                                     : src->wide * 2)
                          : 1;
    }
    errno = err;
    return 1;
}

/* Moves bytes along one direction and writes them out. One function for both directions.
 * Returns 0, or -1 if the connection was closed. */
static int relay_pump(struct conn *c, const struct relay_dir *d)
{
    struct proxy_worker *pw = c->pw;
    struct conn_side *src = d->src, *dst = d->dst;
    struct crypto_ctr *dec = d->dec, *enc = d->enc;
    size_t bs = pw->arena.block_size, max = pw->opt->max_buffer;
    size_t hdr = d->tls_out ? FAKETLS_RECORD_HDR_LEN : 0;
    int dir = src == &c->cli ? 0 : 1;
    size_t cap = c->lim && c->lim->rate ? rate_burst(c->lim->rate) : SIZE_MAX;
    for (int round = 0; round < RELAY_READS_PER_EVENT && !src->rd_eof; round++) {
        if (dst->queued + hdr >= max)
            break;
        /* Zero-copy path: only for bytes that need no transformation (toward an ee client,
         * side_flush puts a record header before each spliced record), and never while
         * blocks are queued to dst (the pipe and the block queue must not interleave). */
        if (c->splice && !dec && !enc && !d->tls_in && (!d->tls_out || pw->opt->splice_tls) &&
            !dst->qhead && (dst->pipe_r >= 0 || pipe_take(pw, dst) == 0)) {
            size_t room = max - dst->queued;
            if (room > (size_t)pw->pipe_size - dst->piped)
                room = (size_t)pw->pipe_size - dst->piped;
            if (room > cap)
                room = cap;
            ssize_t n = splice(src->fd, NULL, dst->pipe_w, NULL, room,
                               SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
            STAT_INC(&pw->stats.reads);
            if (n > 0) {
                dst->piped += (size_t)n;
                dst->queued += (size_t)n;
                relay_count(d, (uint64_t)n);
                STAT_ADD(&pw->stats.spliced, (uint64_t)n);
                c->last_io = ev_now(pw->w->loop);
                if (flush_or_batch(c, dst, src))
                    return -1;
                if (c->lim) {
                    int l = user_limits(c, dir, (size_t)n);
                    if (l < 0)
                        return -1;
                    if (l)
                        break;
                }
                if ((size_t)n < room)
                    break;
                continue;
            }
            if (n == 0) {
                src->rd_eof = 1;
                if (side_flush(c, dst, src))
                    return -1;
                break;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                /* Nothing to read, or the pipe is full: out of slots before out of bytes
                 * (a slot holds one page-sized piece of a segment). Only the latter must
                 * stop reading src until the pipe drains, else a readable src would spin
                 * the loop. */
                int avail = 0;
                if (dst->piped && ioctl(src->fd, FIONREAD, &avail) == 0 && avail > 0) {
                    dst->pipe_full = 1;
                    STAT_INC(&pw->stats.pipe_full);
                }
                if (!dst->piped)
                    pipe_give(pw, dst);
                break;
            }
            if (errno == EINTR)
                continue;
            if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
                c->splice = 0; /* not for these sockets: fall back to read/write */
                if (!dst->piped)
                    pipe_give(pw, dst);
                continue;
            }
            return conn_close(c, src == &c->cli ? CR_CLIENT_CLOSED : CR_DC_CLOSED);
        }
        if (src->wide > 1 && !d->tls_out) {
            ssize_t r = 0;
            size_t got = 0;
            int full = 0, w = pump_wide(c, d, cap, &r, &got, &full);
            if (w < 0)
                return -1;
            if (w && r > 0) {
                relay_count(d, got);
                c->last_io = ev_now(pw->w->loop);
                if (flush_or_batch(c, dst, src))
                    return -1;
                if (c->lim && got) {
                    int l = user_limits(c, dir, got);
                    if (l < 0)
                        return -1;
                    if (l)
                        break;
                }
                if (!full)
                    break;
                continue;
            }
            if (w && r == 0) {
                src->rd_eof = 1;
                if (!dst->qhead && side_flush(c, dst, src))
                    return -1;
                break;
            }
            if (w) {
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    break;
                if (errno == EINTR)
                    continue;
                return conn_close(c, src == &c->cli ? CR_CLIENT_CLOSED : CR_DC_CLOSED);
            }
        }
        struct arena_block *b = dst->qtail;
        int fresh = 0;
        if (!b || b->end == bs || d->tls_out) { /* tls_out: a fresh block is one record */
            b = block_get(c, dst);
            if (!b) {
                STAT_INC(&pw->stats.block_waits);
                if (!c->waiting_block) { /* fronted ones wait for their own budget */
                    struct conn **list = c->mode == CONN_MODE_MASK ? &pw->mask_waiters
                                                                   : &pw->waiters;
                    c->waiting_block = 1;
                    c->wait_next = *list;
                    *list = c;
                }
                conn_check_accept(pw);
                break;
            }
            fresh = 1;
            b->end = (uint32_t)hdr; /* room for the record header */
        }
        size_t room = bs - b->end;
        if (room > max - dst->queued - hdr)
            room = max - dst->queued - hdr;
        if (room > cap)
            room = cap;
        if (d->tls_out) {
            size_t rcap = record_cap(c);
            if (room > rcap)
                room = rcap;
        }
        uint8_t *p = b->data + b->end;
        ssize_t n = read(src->fd, p, room);
        STAT_INC(&pw->stats.reads);
        if (n > 0) {
            size_t m = (size_t)n;
            if (d->tls_in && faketls_deframe(&c->defr, p, (size_t)n, &m) != FAKETLS_OK) {
                if (fresh)
                    block_put(c, dst, b);
                return conn_close(c, CR_CLIENT_PROTOCOL);
            }
            if (dec) /* NULL on the download direction in fast mode: bytes pass as they are */
                crypto_ctr_apply(dec, p, p, m);
            if (enc)
                crypto_ctr_apply(enc, p, p, m);
            if (m == 0 && fresh) { /* only record headers arrived */
                block_put(c, dst, b);
            } else {
                if (d->tls_out) {
                    faketls_record_header(b->data, m);
                    record_sent(c, m);
                }
                b->end += (uint32_t)m;
                if (fresh) {
                    if (dst->qtail)
                        dst->qtail->next = b;
                    else
                        dst->qhead = b;
                    dst->qtail = b;
                    dst->queued += hdr;
                }
                dst->queued += m;
            }
            relay_count(d, m);
            c->last_io = ev_now(pw->w->loop);
            if (flush_or_batch(c, dst, src))
                return -1;
            if (c->lim && m) {
                int l = user_limits(c, dir, m);
                if (l < 0)
                    return -1;
                if (l)
                    break;
            }
            if ((size_t)n < room) {
                src->wide = 1;
                break; /* the socket is drained: another read would only say EAGAIN */
            }
            if (!d->tls_out && room == bs - hdr)
                src->wide = 2; /* a whole block came: read wider next time (pump_wide) */
            continue;
        }
        if (fresh)
            block_put(c, dst, b);
        if (n == 0) {
            src->rd_eof = 1;
            if (!dst->qhead && side_flush(c, dst, src))
                return -1;
            break;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            break;
        if (errno == EINTR)
            continue;
        return conn_close(c, src == &c->cli ? CR_CLIENT_CLOSED : CR_DC_CLOSED);
    }
    return 0;
}

/* After any relay event: close when both directions ended and drained, else re-watch. */
static void relay_settle(struct conn *c)
{
    if (c->cli.rd_eof && c->dc.rd_eof && !c->cli.queued && !c->dc.queued) {
        conn_close(c, CR_DONE);
        return;
    }
    relay_watch(c);
}

void relay_event(struct conn *c, struct conn_side *s, int revents)
{
    int is_cli = s == &c->cli;
    struct conn_side *o = is_cli ? &c->dc : &c->cli;
    if (revents & EV_WRITE) {
        if (side_flush(c, s, o))
            return;
    }
    if (revents & EV_READ) {
        struct relay_dir d = {.src = s, .dst = o};
        int mask = c->mode == CONN_MODE_MASK; /* fronting: bytes pass untouched both ways */
        if (is_cli) {
            d.dec = mask ? NULL : c->cli_dec;
            d.enc = mask ? NULL : c->dc_enc;
            d.tls_in = c->tls;
            d.counter = &c->up_bytes;
            conn_byte_counters(c, 0, d.stat_bytes);
        } else {
            d.dec = mask || c->fast ? NULL : c->dc_dec;
            d.enc = mask || c->fast ? NULL : c->cli_enc;
            d.tls_out = c->tls;
            d.counter = &c->down_bytes;
            conn_byte_counters(c, 1, d.stat_bytes);
        }
        if (relay_pump(c, &d))
            return;
    }
    relay_settle(c);
}

