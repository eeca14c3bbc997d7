/* relay.c: moving bytes between a connection's two sockets: interest, queues, pipes, pump. */
#include "relay/relay.h"

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
#include "config/reload.h"

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
    size_t max = c->gen->opt.max_buffer;
    unsigned ce = 0, de = 0;
    if (!c->cli.rd_eof && c->dc.queued < max && !c->dc.pipe_full && !c->waiting_block &&
        !c->rate_until[0])
        ce |= EV_READ;
    if (!c->dc.rd_eof && c->cli.queued < max && !c->cli.pipe_full && !c->waiting_block &&
        !c->rate_until[1])
        de |= EV_READ;
    /* write-batch-mode buffer: a batched write waits for the batch timer */
    int hold = c->batched && c->gen->opt.write_batch_mode == WB_BUFFER;
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

void conn_check_accept(struct proxy_worker *pw)
{
    if (pool_full(&pw->conns) || relay_blocks_full(pw) || arena_exhausted(&pw->arena))
        worker_pause_accept(pw->w);
    else
        worker_resume_accept(pw->w);
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
    if (c->gen->opt.buffers && !s->spare && s->fd >= 0)
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
    if (!c->gen->opt.record_sizing)
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
 * its length first if no record is open. Returns CR_NONE (the header is out, unless
 * s->rec_hdr_left says the socket is full) or CR_CLIENT_CLOSED. */
static enum conn_reason record_header_flush(struct conn *c, struct conn_side *s)
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
            return errno == EAGAIN || errno == EWOULDBLOCK ? CR_NONE : CR_CLIENT_CLOSED;
        }
        s->rec_hdr_left -= (uint8_t)w;
    }
    return CR_NONE;
}

/* Why c ends when a read from or a write to side s failed (errno neither EAGAIN nor EINTR). */
static enum conn_reason side_error(const struct conn *c, const struct conn_side *s)
{
    return s == &c->cli ? CR_CLIENT_CLOSED : CR_DC_CLOSED;
}

enum conn_reason side_flush(struct conn *c, struct conn_side *s, struct conn_side *from)
{
    struct proxy_worker *pw = c->pw;
    int more = s->corked && c->gen->opt.write_batch_mode == WB_MORE;
    int records = side_records(c, s);
    while (s->piped) {
        size_t len = s->piped;
        unsigned flags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK | (more ? SPLICE_F_MORE : 0);
        if (records) { /* header, payload, header, payload, ... */
            enum conn_reason r = record_header_flush(c, s);
            if (r != CR_NONE || s->rec_hdr_left)
                return r; /* failed, or the socket is full */
            len = s->rec_left;
            if (s->piped > len)
                flags |= SPLICE_F_MORE; /* the next record follows at once */
        }
        ssize_t w = splice(s->pipe_r, NULL, s->fd, NULL, len, flags);
        STAT_INC(&pw->stats.writes);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return CR_NONE;
            if (errno == EINTR)
                continue;
            return side_error(c, s);
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
                return CR_NONE;
            if (errno == EINTR)
                continue;
            return side_error(c, s);
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
            return CR_NONE; /* short write: the socket is full, wait for EV_WRITE */
    }
    if (pw->waiters)
        waiters_wake(pw);
    if (from->rd_eof && !s->wr_shut) {
        shutdown(s->fd, SHUT_WR);
        s->wr_shut = 1;
    }
    return CR_NONE;
}

enum conn_reason side_queue(struct conn *c, struct conn_side *s, const uint8_t *p, size_t n)
{
    struct proxy_worker *pw = c->pw;
    size_t bs = pw->arena.block_size;
    while (n) {
        struct arena_block *b = s->qtail;
        if (!b || b->end == bs) {
            if (!(b = block_get(c, s)))
                return CR_NO_MEMORY;
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
    return CR_NONE;
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
            ev_timer_set(&pw->batch_timer, c->gen->opt.write_batch_ms / 1000.0, 0);
            ev_timer_start(pw->w->loop, &pw->batch_timer);
        }
    }
}

/* Writes dst now, or holds the bytes until the worker's batch timer so that several small
 * reads leave in fewer, fuller segments: write-batch-mode buffer keeps less than a block in
 * user space; cork and msg-more write at once into a socket told to hold partial segments. */
static enum conn_reason flush_or_batch(struct conn *c, struct conn_side *dst,
                                       struct conn_side *src)
{
    const struct options *o = &c->gen->opt;
    if (!o->write_batch_ms)
        return side_flush(c, dst, src);
    if (o->write_batch_mode == WB_BUFFER) {
        if (dst->piped || dst->queued >= c->pw->arena.block_size)
            return side_flush(c, dst, src);
        batch_join(c);
        return CR_NONE;
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
    if (c->gen->opt.write_batch_mode == WB_CORK)
        setsockopt(s->fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero);
    else
        setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* After any relay event: CR_DONE when both directions ended and drained, else re-watches. */
static enum conn_reason relay_settle(struct conn *c)
{
    if (c->cli.rd_eof && c->dc.rd_eof && !c->cli.queued && !c->dc.queued)
        return CR_DONE;
    relay_watch(c);
    return CR_NONE;
}

/* The batch window closed: flushes every batched connection. Not one of their events: a
 * connection that ends here is marked and closed before the loop sleeps. */
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
        enum conn_reason r = side_flush(c, &c->dc, &c->cli);
        if (r == CR_NONE)
            r = side_flush(c, &c->cli, &c->dc);
        if (r == CR_NONE)
            r = relay_settle(c);
        if (r != CR_NONE)
            conn_close_later(c, r);
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


/* One direction of the relay: what is read from src is deframed (tls_in: FakeTLS records
 * from the client), decrypted with dec, encrypted with enc (either may be NULL: no crypto),
 * framed (tls_out: one TLS record per read, toward the client) and queued to dst. */
struct relay_dir {
    struct conn_side *src, *dst;
    struct crypto_ctr *dec, *enc;
    int tls_in, tls_out;
    uint64_t *counter;
    stat_t *stat_bytes[3]; /* the worker's total, the user's and the DC's (NULL: none) */
    size_t max;            /* what dst may hold (max-buffer of c's generation) */
    size_t hdr;            /* room kept for a record header in a fresh block (tls_out) */
    size_t cap;            /* bytes one read may take (a rate-limited user's burst) */
};

/* MTPROXY_GUARD_SLOWDOWN (bench/CMakeLists.txt's mtproxy_guard_slow only): every relayed
 * byte takes one more trip through a scratch buffer, the regression bench/guard's self-test
 * must catch. Off, it is nothing at all. */
#ifdef MTPROXY_GUARD_SLOWDOWN
static void guard_slowdown(uint8_t *p, size_t n)
{
    static uint8_t scratch[1 << 20];
    for (size_t k; n; n -= k, p += k) {
        k = n < sizeof scratch ? n : sizeof scratch;
        memcpy(scratch, p, k);
        __asm__ volatile("" ::: "memory"); /* the two copies stay two */
        memcpy(p, scratch, k);
    }
}
#else
#define guard_slowdown(p, n) ((void)0)
#endif

/* A pump step's verdict: a close reason, CR_NONE (read on), or one of these two, which never
 * leave relay_pump: stop reading this direction for this event (drained, paused, waiting);
 * the wide read did not try (the one-block read runs instead). */
#define PUMP_STOP ((enum conn_reason)CR_COUNT)
#define PUMP_SKIP ((enum conn_reason)(CR_COUNT + 1))

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
 * (used up: CR_LIMIT) and the rate (over it: this direction pauses, PUMP_STOP). */
static enum conn_reason user_limits(struct conn *c, int dir, size_t n)
{
    const struct user_limit *l = c->lim;
    struct users *u = c->pw->users;
    if (l->quota && users_charge(u, (uint32_t)c->uid, l->quota, n))
        return CR_LIMIT;
    if (l->rate) {
        double w = users_rate_take(u, (uint32_t)c->uid, dir, l->rate, rate_burst(l->rate), n,
                                   ev_now(c->pw->w->loop));
        if (w > 0) {
            conn_rate_pause(c, dir, w);
            return PUMP_STOP;
        }
    }
    return CR_NONE;
}

/* After a read queued m payload bytes to d->dst (the same steps on every read path): counts
 * them, writes them out (or batches them), charges the user's limits. */
static inline enum conn_reason pump_moved(struct conn *c, const struct relay_dir *d,
                                           size_t m)
{
    relay_count(d, m);
    c->last_io = ev_now(c->pw->w->loop);
    enum conn_reason r = flush_or_batch(c, d->dst, d->src);
    if (r == CR_NONE && c->lim && m)
        r = user_limits(c, d->src == &c->cli ? 0 : 1, m);
    return r;
}

/* A read from d->src returned n <= 0 (errno set when n < 0; one errno handling for every read
 * path): at the end of the stream, writes out what dst holds (half-closing it once drained)
 * and stops; on EAGAIN stops; on EINTR reads again (CR_NONE); else the side's close reason. */
static enum conn_reason pump_ended(struct conn *c, const struct relay_dir *d, ssize_t n)
{
    if (n == 0) {
        d->src->rd_eof = 1;
        if (!d->dst->qhead) {
            enum conn_reason r = side_flush(c, d->dst, d->src);
            if (r != CR_NONE)
                return r;
        }
        return PUMP_STOP;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return PUMP_STOP;
    if (errno == EINTR)
        return CR_NONE;
    return side_error(c, d->src);
}

/* Zero-copy: splices up to cap bytes from d->src into d->dst's pipe (the caller checked the
 * bytes need no transformation and gave dst a pipe). */
static enum conn_reason pump_splice(struct conn *c, const struct relay_dir *d)
{
    struct proxy_worker *pw = c->pw;
    struct conn_side *src = d->src, *dst = d->dst;
    size_t room = d->max - dst->queued;
    if (room > (size_t)pw->pipe_size - dst->piped)
        room = (size_t)pw->pipe_size - dst->piped;
    if (room > d->cap)
        room = d->cap;
    ssize_t n = splice(src->fd, NULL, dst->pipe_w, NULL, room, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    STAT_INC(&pw->stats.reads);
    if (n > 0) {
        dst->piped += (size_t)n;
        dst->queued += (size_t)n;
        STAT_ADD(&pw->stats.spliced, (uint64_t)n);
        enum conn_reason r = pump_moved(c, d, (size_t)n);
        return r == CR_NONE && (size_t)n < room ? PUMP_STOP : r;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        /* Nothing to read, or the pipe is full: out of slots before out of bytes (a slot
         * holds one page-sized piece of a segment). Only the latter must stop reading src
         * until the pipe drains, else a readable src would spin the loop. */
        int avail = 0;
        if (dst->piped && ioctl(src->fd, FIONREAD, &avail) == 0 && avail > 0) {
            dst->pipe_full = 1;
            STAT_INC(&pw->stats.pipe_full);
        }
        if (!dst->piped)
            pipe_give(pw, dst);
        return PUMP_STOP;
    }
    if (n < 0 && (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
        c->splice = 0; /* not for these sockets: fall back to read/write */
        if (!dst->piped)
            pipe_give(pw, dst);
        return CR_NONE;
    }
    return pump_ended(c, d, n);
}

/* Bulk connections (the last read filled its whole room; never toward an ee client, whose
 * reads are one record each): one readv into the tail block's room and up to src->wide - 1
 * fresh blocks, so a busy stream makes a quarter of the calls at 64 KiB a read with 16 KiB
 * blocks. Each block's bytes are then deframed, decrypted and re-encrypted while they are in
 * L1. Blocks not filled go back at once, so an idle connection holds no more than before.
 * PUMP_SKIP if fewer than two blocks are to be had (the one-block read runs). */
static enum conn_reason pump_wide(struct conn *c, const struct relay_dir *d)
{
    struct proxy_worker *pw = c->pw;
    struct conn_side *src = d->src, *dst = d->dst;
    size_t bs = pw->arena.block_size;
    size_t budget = d->max - dst->queued;
    if (budget > d->cap)
        budget = d->cap;
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
        return PUMP_SKIP;
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
            return CR_CLIENT_PROTOCOL;
        }
        if (m && d->dec)
            crypto_ctr_apply(d->dec, p, p, m);
        if (m && d->enc)
            crypto_ctr_apply(d->enc, p, p, m);
        guard_slowdown(p, m);
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
    if (r <= 0) {
        errno = err;
        return pump_ended(c, d, r);
    }
    STAT_INC(&pw->stats.wide_reads);
    int full = (size_t)r == room;
    src->wide = full ? (uint8_t)(src->wide * 2 > RELAY_WIDE_MAX ? RELAY_WIDE_MAX : src->wide * 2)
                     : 1;
    enum conn_reason v = pump_moved(c, d, moved);
    return v == CR_NONE && !full ? PUMP_STOP : v;
}

/* One read into dst's tail block, or into a fresh block (always toward an ee client: a
 * fresh block is one record, its header written in front of what was read). */
static enum conn_reason pump_block(struct conn *c, const struct relay_dir *d)
{
    struct proxy_worker *pw = c->pw;
    struct conn_side *src = d->src, *dst = d->dst;
    size_t bs = pw->arena.block_size, hdr = d->hdr;
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
            return PUMP_STOP;
        }
        fresh = 1;
        b->end = (uint32_t)hdr; /* room for the record header */
    }
    size_t room = bs - b->end;
    if (room > d->max - dst->queued - hdr)
        room = d->max - dst->queued - hdr;
    if (room > d->cap)
        room = d->cap;
    if (d->tls_out) {
        size_t rcap = record_cap(c);
        if (room > rcap)
            room = rcap;
    }
    uint8_t *p = b->data + b->end;
    ssize_t n = read(src->fd, p, room);
    STAT_INC(&pw->stats.reads);
    if (n <= 0) {
        if (fresh)
            block_put(c, dst, b);
        return pump_ended(c, d, n);
    }
    size_t m = (size_t)n;
    if (d->tls_in && faketls_deframe(&c->defr, p, (size_t)n, &m) != FAKETLS_OK) {
        if (fresh)
            block_put(c, dst, b);
        return CR_CLIENT_PROTOCOL;
    }
    if (d->dec) /* NULL on the download direction in fast mode: bytes pass as they are */
        crypto_ctr_apply(d->dec, p, p, m);
    if (d->enc)
        crypto_ctr_apply(d->enc, p, p, m);
    guard_slowdown(p, m);
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
    enum conn_reason r = pump_moved(c, d, m);
    if (r != CR_NONE)
        return r;
    if ((size_t)n < room) {
        src->wide = 1;
        return PUMP_STOP; /* the socket is drained: another read would only say EAGAIN */
    }
    if (!d->tls_out && room == bs - hdr)
        src->wide = 2; /* a whole block came: read wider next time (pump_wide) */
    return CR_NONE;
}

/* Moves bytes along one direction and writes them out. One function for both directions:
 * up to RELAY_READS_PER_EVENT reads, each spliced, wide or into one block. */
static enum conn_reason relay_pump(struct conn *c, struct relay_dir *d)
{
    struct proxy_worker *pw = c->pw;
    struct conn_side *src = d->src, *dst = d->dst;
    d->max = c->gen->opt.max_buffer;
    d->hdr = d->tls_out ? FAKETLS_RECORD_HDR_LEN : 0;
    d->cap = c->lim && c->lim->rate ? rate_burst(c->lim->rate) : SIZE_MAX;
    for (int round = 0; round < RELAY_READS_PER_EVENT && !src->rd_eof; round++) {
        if (dst->queued + d->hdr >= d->max)
            break;
        enum conn_reason r = PUMP_SKIP;
        /* Zero-copy path: only for bytes that need no transformation (toward an ee client,
         * side_flush puts a record header before each spliced record), and never while
         * blocks are queued to dst (the pipe and the block queue must not interleave). */
        if (c->splice && !d->dec && !d->enc && !d->tls_in &&
            (!d->tls_out || c->gen->opt.splice_tls) && !dst->qhead &&
            (dst->pipe_r >= 0 || pipe_take(pw, dst) == 0))
            r = pump_splice(c, d);
        else if (src->wide > 1 && !d->tls_out)
            r = pump_wide(c, d);
        if (r == PUMP_SKIP)
            r = pump_block(c, d);
        if (r == PUMP_STOP)
            break;
        if (r != CR_NONE)
            return r;
    }
    return CR_NONE;
}

enum conn_reason relay_event(struct conn *c, struct conn_side *s, int revents)
{
    int is_cli = s == &c->cli;
    struct conn_side *o = is_cli ? &c->dc : &c->cli;
    if (revents & EV_WRITE) {
        enum conn_reason r = side_flush(c, s, o);
        if (r != CR_NONE)
            return r;
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
        enum conn_reason r = relay_pump(c, &d);
        if (r != CR_NONE)
            return r;
    }
    return relay_settle(c);
}
