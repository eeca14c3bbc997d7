/* webws.c: the websocket carriers (docs/web.md 4, "WebSocket"): GET /api/v1/ws with the one
 * subprotocol tproxy-v1.<session token> (websocket: one socket for the session's lane 0) or
 * tproxy-lane-v1.<session token>.<stream> (websocket-lanes: one socket per stream's lane)
 * upgrades the request's connection (RFC 6455); then every binary message from the client is a
 * batch of frames (as an /up body on that lane, numbered here), and every batch the lane has to
 * send goes down as one binary message (as a /down answer, acknowledged once written: the
 * socket is ordered and reliable). Pings keep it alive. A lane's socket ends with its lane
 * (a close once the last batch is written), and takes the lane with it if it fails first. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "crypto/crypto.h"
#include "web/webint.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11" /* RFC 6455 1.3 */
#define WS_HDR_MAX 14
#define WS_RETRY 0.05 /* seconds: a batch that did not fit the queues is tried again */
#define WS_LINGER 2.0 /* seconds: after our close, what the client still sends is read away */

struct webws {
    struct webhttp *h;
    struct websx *x;
    int fd;
    ev_io io;
    ev_timer timer;      /* pings and silence */
    ev_timer retry;      /* a message that did not fit (BUSY), tried again */
    uint8_t *in;         /* received bytes: frames being parsed */
    size_t in_len, in_cap;
    uint8_t *msg;        /* the binary message being assembled (fragments) */
    size_t msg_len, msg_cap;
    int in_msg;          /* a fragmented message is open */
    int full;            /* msg is complete but waits for room (BUSY) */
    uint8_t *out;        /* what is being written */
    size_t out_len, out_off, out_cap;
    int issued;          /* out holds a batch: the cursor moves once it is written */
    uint64_t up_seq, cursor, next;
    int64_t last_rx, last_tx;
    int closing;         /* a close frame is queued: the socket ends once it is written */
    uint32_t lane;       /* 0: the session's socket (websocket); else a stream's */
    int ready;           /* frames wait on the lane */
    int ended;           /* the lane ended first: closing leaves the session alone */
    int lingering;       /* our close is written: reading until the client's close or EOF */
    int peer_closed;     /* the client's close frame came: nothing more will */
    struct webws *prev_, *next_; /* the server's list */
    struct webws *snext;         /* the session's list (x->ws) */
};

static void ws_io(struct ev_loop *loop, ev_io *io, int revents);
static void ws_tick(struct ev_loop *loop, ev_timer *t, int revents);
static void ws_retry(struct ev_loop *loop, ev_timer *t, int revents);
static int linger_read(struct webws *w);

static int grow(uint8_t **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 4096;
    while (n < need)
        n *= 2;
    uint8_t *q = realloc(*p, n);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

struct webws *webws_next(const struct webws *w)
{
    return w->next_;
}

int webws_ready(const struct webws *w)
{
    return w->x && w->ready;
}

int webws_mark(struct websx *x, uint32_t lane)
{
    int any = 0;
    for (struct webws *w = x->ws; w; w = w->snext)
        if (w->lane == lane)
            any = w->ready = 1;
    return any;
}

void webws_close_all(struct websx *x)
{
    while (x->ws) {
        struct webws *w = x->ws;
        x->ws = w->snext;
        w->x = NULL;
        webws_close(w);
    }
}

void webws_close(struct webws *w)
{
    struct webhttp *h = w->h;
    ev_io_stop(h->loop, &w->io);
    ev_timer_stop(h->loop, &w->timer);
    ev_timer_stop(h->loop, &w->retry);
    close(w->fd);
    struct websx *x = w->x;
    if (x) {
        struct webws **pp = &x->ws;
        while (*pp && *pp != w)
            pp = &(*pp)->snext;
        if (*pp)
            *pp = w->snext;
        if (w->lane && !w->ended) /* no one reads the lane any more: it ends, and its stream */
            websess_lane_drop(h->t, x->s, w->lane);
    }
    if (w->prev_)
        w->prev_->next_ = w->next_;
    else
        h->wsl = w->next_;
    if (w->next_)
        w->next_->prev_ = w->prev_;
    free(w->in);
    free(w->msg);
    free(w->out);
    free(w);
}

/* Queues one frame of opcode with payload p[0..n) (server frames are not masked). */
static int queue(struct webws *w, int opcode, const uint8_t *p, size_t n)
{
    if (grow(&w->out, &w->out_cap, w->out_len + WS_HDR_MAX + n))
        return -1;
    uint8_t *o = w->out + w->out_len;
    size_t k = 0;
    o[k++] = (uint8_t)(0x80 | opcode);
    if (n < 126) {
        o[k++] = (uint8_t)n;
    } else if (n < 65536) {
        o[k++] = 126;
        o[k++] = (uint8_t)(n >> 8);
        o[k++] = (uint8_t)n;
    } else {
        o[k++] = 127;
        for (int i = 7; i >= 0; i--)
            o[k++] = (uint8_t)((uint64_t)n >> (8 * i));
    }
    if (n)
        memcpy(o + k, p, n);
    w->out_len += k + n;
    return 0;
}

/* Writes what is queued. 0, or -1: the socket is gone (w is freed). */
static int flush_out(struct webws *w)
{
    while (w->out_off < w->out_len) {
        ssize_t k = send(w->fd, w->out + w->out_off, w->out_len - w->out_off, MSG_NOSIGNAL);
        if (k > 0) {
            w->out_off += (size_t)k;
            w->last_tx = web_now();
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            ev_io_stop(w->h->loop, &w->io);
            ev_io_set(&w->io, w->fd, EV_READ | EV_WRITE);
            ev_io_start(w->h->loop, &w->io);
            return 0;
        }
        webws_close(w);
        return -1;
    }
    w->out_len = w->out_off = 0;
    if (w->issued) { /* written: the next take acknowledges it */
        w->cursor = w->next;
        w->issued = 0;
    }
    if (w->closing && w->peer_closed) { /* both closes went: the TCP close is the server's
                                         * (RFC 6455 7.1.1), and nothing is left unread */
        webws_close(w);
        return -1;
    }
    if (w->closing) { /* closing at once with unread bytes would reset the connection, and
                       * the client could lose what it had not read yet: read until its close
                       * frame (or EOF, or WS_LINGER), which it sends once it has read ours
                       * (no half-close: a terminator may take our FIN for the end of the
                       * tunnel) */
        if (!w->lingering) {
            w->lingering = 1;
            ev_timer_stop(w->h->loop, &w->timer);
            ev_timer_set(&w->timer, WS_LINGER, 0);
            ev_timer_start(w->h->loop, &w->timer);
        }
        ev_io_stop(w->h->loop, &w->io);
        ev_io_set(&w->io, w->fd, EV_READ);
        ev_io_start(w->h->loop, &w->io);
        return linger_read(w); /* its close may be here already */
    }
    ev_io_stop(w->h->loop, &w->io);
    if (!w->full) { /* a message waiting for room: nothing more is read meanwhile */
        ev_io_set(&w->io, w->fd, EV_READ);
        ev_io_start(w->h->loop, &w->io);
    }
    return 0;
}

/* Writes what is pending, then the session's next batches while the socket takes them (frames
 * queued while a write was pending go out as soon as it completes). 0, or -1 (w is gone). */
int webws_flush(struct webws *w)
{
    struct webhttp *h = w->h;
    w->ready = 0;
    for (;;) {
        if (w->out_len) {
            if (flush_out(w))
                return -1;
            if (w->out_len)
                return 0; /* the socket is full: EV_WRITE brings us back */
        }
        if (w->closing)
            return 0;
        const uint8_t *p;
        size_t n;
        struct websx *x = w->x;
        enum websess_result r = websess_down(h->t, x->s, w->lane, w->cursor, web_now(), &p, &n,
                                             &w->next);
        if (r == WEBSESS_FATAL)
            return -1; /* the session ended: on_session_end closed w */
        if (r == WEBSESS_GONE) { /* the lane's last frames are written: a normal close */
            static const uint8_t normal[2] = {0x03, 0xe8};
            w->ended = w->closing = 1;
            if (queue(w, 0x8, normal, sizeof normal)) {
                webws_close(w);
                return -1;
            }
            continue;
        }
        int more = (r == WEBSESS_OK || r == WEBSESS_REPLAY) && n;
        if (more) {
            if (queue(w, 0x2, p, n)) {
                webws_close(w);
                return -1;
            }
            w->issued = 1;
        }
        webstream_resume(h, x);
        if (!more)
            return 0;
    }
}

/* A complete binary message: a batch of frames up. 0, 1 (no room: it waits, w->full), or -1
 * (w is gone). */
static int take_message(struct webws *w)
{
    struct webhttp *h = w->h;
    int64_t now = web_now();
    websess_touch(w->x->s, now);
    enum websess_result r =
        websess_up(h->t, w->x->s, w->lane, w->up_seq + 1, w->msg, w->msg_len, now);
    if (r == WEBSESS_BUSY) { /* no room in the queues: stop reading, try again shortly */
        w->full = 1;
        ev_io_stop(h->loop, &w->io);
        if (w->out_len) {
            ev_io_set(&w->io, w->fd, EV_WRITE);
            ev_io_start(h->loop, &w->io);
        }
        ev_timer_start(h->loop, &w->retry);
        return 1;
    }
    if (r == WEBSESS_FATAL)
        return -1; /* the session ended, and with it w (on_session_end) */
    if (r != WEBSESS_OK && r != WEBSESS_REPLAY) { /* too large, or the lane failed */
        struct websess *s = w->x->s;
        uint32_t lane = w->lane;
        webws_close(w); /* a lane's socket takes only its lane with it */
        if (!lane)
            websess_close(h->t, s);
        return -1;
    }
    w->up_seq++;
    w->msg_len = 0;
    w->full = 0;
    return 0;
}

/* XORs p[0..n) with the 4-byte mask, eight bytes at a time (the byte loop cost about 0.7
 * CPU-seconds per GB upstream, BENCHMARKS.md). */
static void unmask(uint8_t *p, size_t n, const uint8_t mask[4])
{
    uint8_t m8[8];
    for (int i = 0; i < 8; i++)
        m8[i] = mask[i & 3];
    uint64_t m;
    memcpy(&m, m8, 8);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        v ^= m;
        memcpy(p + i, &v, 8);
    }
    for (; i < n; i++)
        p[i] ^= mask[i & 3];
}

/* The head of the frame at b[0..have): payload length *n, head length before the mask *k.
 * 1, or 0 (need more). */
static int frame_head(const uint8_t *b, size_t have, uint64_t *n, size_t *k)
{
    if (have < 2)
        return 0;
    *n = b[1] & 0x7f;
    *k = 2;
    if (*n == 126) {
        if (have < 4)
            return 0;
        *n = (uint64_t)b[2] << 8 | b[3];
        *k = 4;
    } else if (*n == 127) {
        if (have < 10)
            return 0;
        *n = 0;
        for (int i = 0; i < 8; i++)
            *n = *n << 8 | b[2 + i];
        *k = 10;
    }
    return 1;
}

/* One frame at w->in[off..): its length (consumed), 0 (need more), or -1 (w is gone). */
static long one_frame(struct webws *w, size_t off)
{
    uint8_t *b = w->in + off;
    size_t have = w->in_len - off;
    uint64_t n;
    size_t k;
    if (!frame_head(b, have, &n, &k))
        return 0;
    int fin = b[0] & 0x80, op = b[0] & 0x0f;
    int bad = !(b[1] & 0x80) || (b[0] & 0x70) || n > w->h->lim.body_bytes ||
              (op >= 0x8 && (!fin || n > 125)) || (op != 0 && op != 2 && op < 8) || op > 0xa ||
              (op == 0 && !w->in_msg) || (op == 2 && w->in_msg);
    if (bad) {
        webws_close(w); /* a client frame unmasked, reserved bits, text, or out of order */
        return -1;
    }
    if (have < k + 4 + n)
        return 0;
    uint8_t *pl = b + k + 4;
    unmask(pl, (size_t)n, b + k);
    long used = (long)(k + 4 + n);
    w->last_rx = web_now();
    if (op == 0x8) { /* close: answer it, then end the socket (the session lives on) */
        w->closing = w->peer_closed = 1;
        if (queue(w, 0x8, pl, n >= 2 ? 2 : 0)) {
            webws_close(w);
            return -1;
        }
        return used;
    }
    if (op == 0x9 && queue(w, 0xa, pl, (size_t)n)) {
        webws_close(w);
        return -1;
    }
    if (op >= 0x8)
        return used;
    if (w->msg_len + n > w->h->lim.body_bytes || grow(&w->msg, &w->msg_cap, w->msg_len + n)) {
        webws_close(w);
        return -1;
    }
    memcpy(w->msg + w->msg_len, pl, (size_t)n);
    w->msg_len += (size_t)n;
    w->in_msg = !fin;
    if (fin && take_message(w) < 0)
        return -1;
    return used;
}

/* Parses what was received; stops at a message waiting for room. 0, or -1 (w is gone). */
static int parse(struct webws *w)
{
    size_t off = 0;
    while (!w->full && !w->closing) {
        long k = one_frame(w, off);
        if (k < 0)
            return -1;
        if (k == 0)
            break;
        off += (size_t)k;
    }
    if (off) { /* a frame still partial stays where it is: no copy per read */
        memmove(w->in, w->in + off, w->in_len - off);
        w->in_len -= off;
    }
    return 0;
}

/* After our close: what the client still sends is dropped, up to its close frame, which ends
 * the socket. 0, or -1 (w is gone). */
static int linger_read(struct webws *w)
{
    size_t off = 0;
    uint64_t n;
    size_t k;
    while (frame_head(w->in + off, w->in_len - off, &n, &k) &&
           w->in_len - off >= k + 4 + n) {
        if ((w->in[off] & 0x0f) == 0x8) {
            webws_close(w);
            return -1;
        }
        off += k + 4 + n;
    }
    memmove(w->in, w->in + off, w->in_len - off);
    w->in_len -= off;
    return 0;
}

static void ws_read(struct webws *w)
{
    size_t cap = w->h->lim.body_bytes + WS_HDR_MAX;
    if (grow(&w->in, &w->in_cap, w->in_len + 65536 < cap ? w->in_len + 65536 : cap)) {
        webws_close(w);
        return;
    }
    ssize_t k = recv(w->fd, w->in + w->in_len, w->in_cap - w->in_len, 0);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        webws_close(w); /* the client went: the session lives on until its grace */
        return;
    }
    if (k > 0)
        w->in_len += (size_t)k;
    if (w->lingering)
        linger_read(w);
    else if (parse(w) == 0)
        webws_flush(w);
}

static void ws_io(struct ev_loop *loop, ev_io *io, int revents)
{
    (void)loop;
    struct webws *w = io->data;
    if ((revents & EV_WRITE) && webws_flush(w))
        return;
    if (revents & EV_READ)
        ws_read(w);
}

static void ws_retry(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)revents;
    struct webws *w = t->data;
    if (take_message(w) == 0 && parse(w) == 0 && webws_flush(w) == 0 && !w->out_len) {
        ev_io_stop(loop, &w->io); /* reading again */
        ev_io_set(&w->io, w->fd, EV_READ);
        ev_io_start(loop, &w->io);
    }
}

/* Every poll period: a ping when nothing went down for one, the end of the socket after two
 * of silence; a live socket keeps its session from the grace. */
static void ws_tick(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop, (void)revents;
    struct webws *w = t->data;
    int64_t now = web_now(), period = w->h->lim.poll_ms;
    if (w->lingering || now - w->last_rx >= 2 * period) {
        webws_close(w);
        return;
    }
    websess_touch(w->x->s, now);
    if (now - w->last_tx >= period && w->out_len == 0 && !queue(w, 0x9, NULL, 0))
        flush_out(w);
}

/* The Sec-WebSocket-Accept value of key[0..n) into out (28 characters and a NUL): base64 of
 * SHA-1(key + GUID), from webcap's base64url (27 characters for 20 bytes) and its padding. */
static void accept_of(const char *key, size_t n, char out[29])
{
    uint8_t cat[128], dig[CRYPTO_SHA1_LEN];
    size_t gl = strlen(WS_GUID);
    memcpy(cat, key, n);
    memcpy(cat + n, WS_GUID, gl);
    crypto_sha1(cat, n + gl, dig);
    size_t k = webcap_b64url(dig, sizeof dig, out, 29);
    for (size_t i = 0; i < k; i++)
        out[i] = out[i] == '-' ? '+' : out[i] == '_' ? '/' : out[i];
    out[k] = '=';
    out[k + 1] = 0;
}

/* 1 if header name of the request has exactly the value want (case-insensitive), or contains
 * it as a comma-separated token when list. */
static int header_is(const uint8_t *buf, const struct http_request *rq, const char *name,
                     const char *want, int list)
{
    const char *v;
    size_t vn, wl = strlen(want);
    if (http_header(buf, rq->consumed, name, &v, &vn) != 1)
        return 0;
    if (!list)
        return vn == wl && !strncasecmp(v, want, wl);
    for (size_t i = 0; i + wl <= vn; i++)
        if (!strncasecmp(v + i, want, wl) && (i == 0 || v[i - 1] == ',' || v[i - 1] == ' ') &&
            (i + wl == vn || v[i + wl] == ',' || v[i + wl] == ' '))
            return 1;
    return 0;
}

/* The session and lane Sec-WebSocket-Protocol's one value sp[0..n) names: tproxy-v1.TOKEN
 * (a websocket session, lane 0) or tproxy-lane-v1.TOKEN.N (a websocket-lanes session's stream
 * N, canonical decimal 1..16777215, not opened before nor held by another socket). NULL if
 * neither. */
static struct websx *ws_target(struct webhttp *h, const char *sp, size_t n, uint32_t *lane)
{
    static const char one[] = "tproxy-v1.", lanes[] = "tproxy-lane-v1.";
    size_t k1 = sizeof one - 1, kl = sizeof lanes - 1, t = WEBSESS_TOKEN_LEN;
    int is_lane = n > kl + t + 1 && !memcmp(sp, lanes, kl) && sp[kl + t] == '.';
    if (!is_lane && (n != k1 + t || memcmp(sp, one, k1)))
        return NULL;
    uint64_t id = 0;
    if (is_lane && (webframe_decimal(sp + kl + t + 1, n - kl - t - 1, &id) || id == 0 ||
                    id > WEBFRAME_MAX_STREAM))
        return NULL;
    struct websess *s = websess_find(h->t, sp + (is_lane ? kl : k1), t);
    struct websx *x = s ? webstream_sx(h, s) : NULL;
    if (!x || websess_mode(s) != (is_lane ? WEBSESS_WEBSOCKET_LANES : WEBSESS_WEBSOCKET))
        return NULL;
    if (is_lane && websess_lane_known(s, (uint32_t)id))
        return NULL;
    for (struct webws *w = x->ws; is_lane && w; w = w->snext)
        if (w->lane == id)
            return NULL;
    *lane = (uint32_t)id;
    return x;
}

int webws_upgrade(struct webhttp *h, struct httpd_conn *c, const struct http_request *rq,
                  const uint8_t *buf)
{
    const char *key, *sp;
    size_t keyn, spn;
    uint32_t lane = 0;
    if (rq->method != HTTP_GET || strcasecmp(rq->host, h->host) || rq->has_bearer ||
        rq->content_length || !header_is(buf, rq, "upgrade", "websocket", 0) ||
        !header_is(buf, rq, "connection", "upgrade", 1) ||
        !header_is(buf, rq, "sec-websocket-version", "13", 0) ||
        http_header(buf, rq->consumed, "sec-websocket-key", &key, &keyn) != 1 || keyn != 24 ||
        http_header(buf, rq->consumed, "sec-websocket-protocol", &sp, &spn) != 1)
        return 0;
    struct websx *x = ws_target(h, sp, spn, &lane);
    if (!x)
        return 0;
    struct websess *s = x->s;
    struct webws *w = calloc(1, sizeof *w);
    char acc[29];
    if (!w)
        return 0;
    accept_of(key, keyn, acc);
    if (!lane && x->ws)
        webws_close(x->ws); /* a new socket replaces the session's old one */
    w->h = h;
    w->x = x;
    w->lane = lane;
    w->snext = x->ws;
    x->ws = w;
    size_t extra = c->len > rq->consumed ? c->len - rq->consumed : 0; /* sent after the head */
    if (extra && !grow(&w->in, &w->in_cap, extra)) {
        memcpy(w->in, buf + rq->consumed, extra);
        w->in_len = extra;
    }
    w->fd = httpd_conn_detach(c);
    int one = 1; /* each batch goes at once: no Nagle wait behind the last one's ACK */
    setsockopt(w->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    w->last_rx = w->last_tx = web_now();
    w->next_ = h->wsl;
    if (h->wsl)
        h->wsl->prev_ = w;
    h->wsl = w;
    websess_touch(s, w->last_rx);
    ev_io_init(&w->io, ws_io, w->fd, EV_READ);
    ev_timer_init(&w->timer, ws_tick, (double)h->lim.poll_ms / 1000.0,
                  (double)h->lim.poll_ms / 1000.0);
    ev_timer_init(&w->retry, ws_retry, WS_RETRY, 0);
    w->io.data = w->timer.data = w->retry.data = w;
    ev_timer_start(h->loop, &w->timer);
    char head[320];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n"
                     "Sec-WebSocket-Protocol: %.*s\r\n\r\n",
                     acc, (int)spn, sp);
    if (grow(&w->out, &w->out_cap, (size_t)n)) {
        webws_close(w);
        return 1;
    }
    memcpy(w->out, head, (size_t)n);
    w->out_len = (size_t)n;
    ev_io_start(h->loop, &w->io);
    if (flush_out(w) == 0 && (!w->in_len || parse(w) == 0))
        webws_flush(w);
    return 1;
}
