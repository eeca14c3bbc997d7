/* webstream.c: WEB sessions' streams as connections of the worker's state machine. */
#include "web/webint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn/conn.h"

/*
 * Interim design (docs/web.md, src/web/README.md): each stream is an in-process
 * socketpair(AF_UNIX, SOCK_STREAM). One end goes to the worker's accept path as if a client
 * had connected from the WEB client's address, so the obfuscated2 handshake, user checks,
 * DC dial, relay, limits and close reasons are the proxy's own; the other end is ours: client
 * DATA is written into it (its credit returns as WINDOW once the socket took the bytes), and
 * what it reads goes down as DATA within the stream's down credit.
 */
struct webstream {
    struct webhttp *h;
    struct websx *x;
    uint32_t id;
    int fd;
    ev_io io;
    int closing;     /* the client closed it: ends once its queued bytes are written */
    uint8_t *held;   /* read from the socket, not yet taken by websess_send */
    size_t held_len, held_off;
    struct webstream *next;
};

static size_t sx_slot(const struct webhttp *h, const struct websess *s)
{
    uintptr_t p = (uintptr_t)s;
    return (size_t)((p >> 4) ^ (p >> 13)) & h->sxmask;
}

struct websx *webstream_sx(const struct webhttp *h, const struct websess *s)
{
    for (struct websx *x = h->sx[sx_slot(h, s)]; x; x = x->next)
        if (x->s == s)
            return x;
    return NULL;
}

struct websx *webstream_sx_new(struct webhttp *h, struct websess *s,
                               const struct sock_addr *peer)
{
    struct websx *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->s = s;
    x->peer = *peer;
    size_t i = sx_slot(h, s);
    x->next = h->sx[i];
    h->sx[i] = x;
    return x;
}

static struct webstream *stream_find(const struct websx *x, uint32_t id)
{
    struct webstream *ws = x ? x->streams : NULL;
    while (ws && ws->id != id)
        ws = ws->next;
    return ws;
}

/* Stops and frees ws (its socket closed: the connection on the other end sees EOF). */
static void stream_free(struct webstream *ws)
{
    struct webstream **pp = &ws->x->streams;
    while (*pp != ws)
        pp = &(*pp)->next;
    *pp = ws->next;
    ev_io_stop(ws->h->loop, &ws->io);
    close(ws->fd);
    free(ws->held);
    free(ws);
}

/* The socket side of ws is done: freed, and CLOSE goes down unless the client closed it. */
static void stream_end(struct webstream *ws)
{
    struct webhttp *h = ws->h;
    struct websess *s = ws->x->s;
    uint32_t id = ws->id;
    stream_free(ws);
    websess_stream_end(h->t, s, id);
}

/* Watches ws's socket for what it waits for: writing while client bytes are queued, reading
 * while it has down credit and holds nothing back. */
static void stream_watch(struct webstream *ws)
{
    const uint8_t *p;
    size_t n = 0;
    websess_stream_up(ws->x->s, ws->id, &p, &n);
    int ev = n ? EV_WRITE : 0;
    if (!ws->held_len && !ws->closing && websess_stream_credit(ws->x->s, ws->id) > 0)
        ev |= EV_READ;
    if (ev_is_active(&ws->io) && (ws->io.events & (EV_READ | EV_WRITE)) == ev)
        return;
    ev_io_stop(ws->h->loop, &ws->io);
    if (ev) {
        ev_io_set(&ws->io, ws->fd, ev);
        ev_io_start(ws->h->loop, &ws->io);
    }
}

/* Writes the client's queued bytes into ws's socket as far as it takes them (their credit
 * returns as WINDOW). 0, or -1: ws ended. */
static int stream_write(struct webstream *ws)
{
    struct webhttp *h = ws->h;
    const uint8_t *p;
    size_t n = 0;
    while (websess_stream_up(ws->x->s, ws->id, &p, &n) == 0 && n > 0) {
        ssize_t k = send(ws->fd, p, n, MSG_NOSIGNAL);
        if (k > 0) {
            websess_stream_written(h->t, ws->x->s, ws->id, (size_t)k);
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        stream_end(ws);
        return -1;
    }
    if (ws->closing && n == 0) {
        stream_end(ws);
        return -1;
    }
    stream_watch(ws);
    return 0;
}

/* Hands held bytes to websess_send. 1 if some are still held (stop reading), else 0. */
static int stream_flush_held(struct webstream *ws)
{
    if (!ws->held_len)
        return 0;
    size_t k = websess_send(ws->h->t, ws->x->s, ws->id, ws->held + ws->held_off, ws->held_len);
    ws->held_off += k;
    ws->held_len -= k;
    if (ws->held_len)
        return 1;
    free(ws->held);
    ws->held = NULL;
    ws->held_off = 0;
    return 0;
}

/* Reads ws's socket into DATA frames down while its credit and the queues' room last. 0, or
 * -1: ws ended (EOF or an error: CLOSE down). */
static int stream_read(struct webstream *ws)
{
    struct webhttp *h = ws->h;
    struct websess *s = ws->x->s;
    for (int i = 0; i < 8 && !stream_flush_held(ws); i++) {
        uint32_t credit = websess_stream_credit(s, ws->id);
        if (credit == 0 || ws->closing)
            break;
        size_t want = credit < sizeof h->rbuf ? credit : sizeof h->rbuf;
        ssize_t k = recv(ws->fd, h->rbuf, want, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (k <= 0) {
            stream_end(ws);
            return -1;
        }
        size_t took = websess_send(h->t, s, ws->id, h->rbuf, (size_t)k);
        if (took < (size_t)k) { /* a queue is full: keep the rest until a poll drains it */
            if (!(ws->held = malloc((size_t)k - took))) {
                stream_end(ws);
                return -1;
            }
            memcpy(ws->held, h->rbuf + took, (size_t)k - took);
            ws->held_len = (size_t)k - took;
        }
    }
    stream_watch(ws);
    return 0;
}

static void on_stream_io(struct ev_loop *loop, ev_io *io, int revents)
{
    struct webstream *ws = io->data;
    if ((revents & EV_WRITE) && stream_write(ws))
        return;
    if (revents & EV_READ)
        stream_read(ws);
}

void webstream_resume(struct webhttp *h, struct websx *x)
{
    for (struct webstream *ws = x->streams, *next; ws; ws = next) {
        next = ws->next;
        if (ws->held_len || !(ws->io.events & EV_READ) || !ev_is_active(&ws->io))
            stream_read(ws);
    }
}

/* OPEN: a socketpair, one end handed to the worker's accept path from the client's address.
 * Out of descriptors or memory: CLOSE down. */
static void hook_open(void *ctx, struct websess *s, uint32_t id)
{
    struct webhttp *h = ctx;
    struct websx *x = webstream_sx(h, s);
    struct webstream *ws = x ? calloc(1, sizeof *ws) : NULL;
    struct worker *w = h->pw->w;
    int sv[2] = {-1, -1};
    if (!ws || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) ||
        worker_reserve_hold(w)) {
        if (sv[0] >= 0) {
            close(sv[0]);
            close(sv[1]);
        }
        free(ws);
        websess_stream_end(h->t, s, id);
        return;
    }
    *ws = (struct webstream){.h = h, .x = x, .id = id, .fd = sv[1], .next = x->streams};
    x->streams = ws;
    ev_io_init(&ws->io, on_stream_io, sv[1], EV_READ);
    ws->io.data = ws;
    stream_watch(ws);
    proxy_worker_take_gen(h->pw); /* as an accept does: the newest generation first */
    w->accept_tag = 0;
    proxy_on_accept(w, sv[0], &x->peer);
}

static void hook_up(void *ctx, struct websess *s, uint32_t id)
{
    struct webstream *ws = stream_find(webstream_sx(ctx, s), id);
    if (ws)
        stream_write(ws);
}

static void hook_window(void *ctx, struct websess *s, uint32_t id)
{
    struct webstream *ws = stream_find(webstream_sx(ctx, s), id);
    if (ws)
        stream_read(ws);
}

/* CLOSE from the client: its queued bytes are written, then the socket is closed. */
static void hook_close(void *ctx, struct websess *s, uint32_t id)
{
    struct webstream *ws = stream_find(webstream_sx(ctx, s), id);
    if (ws) {
        ws->closing = 1;
        stream_write(ws);
    }
}

void webstream_end(struct webhttp *h, struct websess *s)
{
    struct websx *x = webstream_sx(h, s);
    if (!x)
        return;
    while (x->streams)
        stream_free(x->streams);
    struct websx **pp = &h->sx[sx_slot(h, s)];
    while (*pp != x)
        pp = &(*pp)->next;
    *pp = x->next;
    free(x);
}

void webstream_hooks(struct webhttp *h, struct websess_hooks *out)
{
    *out = (struct websess_hooks){.ctx = h,
                                  .on_open = hook_open,
                                  .on_up = hook_up,
                                  .on_window = hook_window,
                                  .on_close = hook_close,
                                  .on_down = NULL,
                                  .on_end = NULL};
}
