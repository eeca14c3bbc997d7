/* httpd.c: a small bounded HTTP/1.1 server's pieces: bodies, a cache, connection slots. */
#include "http/httpd.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

double httpd_clock(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

struct httpd_body *httpd_body_new(const char *p, size_t len, int owned)
{
    struct httpd_body *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->refs = 1;
    b->owned = owned;
    b->p = p;
    b->len = len;
    return b;
}

void httpd_body_unref(struct httpd_body *b)
{
    if (!b || --b->refs > 0)
        return;
    struct httpd_spare *sp = b->spare;
    if (sp && !sp->p) {
        sp->p = (char *)b->p;
        sp->cap = b->cap;
    } else if (b->owned) {
        free((char *)b->p);
    }
    free(b);
}

struct httpd_body *httpd_body_of(struct sbuf *out)
{
    struct httpd_body *b =
        out->failed ? NULL : httpd_body_new(out->p ? out->p : "", out->len, out->p != NULL);
    if (!b)
        sbuf_free(out);
    else
        b->cap = out->cap;
    return b;
}

struct httpd_body *httpd_cache_fresh(struct httpd_cache *c, uint64_t serial, double now,
                                     double factor, double max_age)
{
    struct httpd_body *b = c->body;
    if (b && b->serial == serial) {
        double ttl = factor * b->cost;
        if (now - b->born < (ttl < max_age ? ttl : max_age)) {
            b->refs++;
            return b;
        }
    }
    return NULL;
}

struct sbuf httpd_cache_sbuf(struct httpd_cache *c, size_t max)
{
    struct sbuf out = {.p = c->spare.p, .cap = c->spare.cap, .max = max};
    c->spare = (struct httpd_spare){0};
    return out;
}

struct httpd_body *httpd_cache_put(struct httpd_cache *c, struct sbuf *out, uint64_t serial,
                                   double born, double cost)
{
    struct httpd_body *b = httpd_body_of(out);
    if (!b)
        return NULL;
    b->spare = &c->spare;
    b->serial = serial;
    b->born = born;
    b->cost = cost;
    httpd_body_unref(c->body);
    c->body = b;
    b->refs++;
    return b;
}

void httpd_cache_free(struct httpd_cache *c)
{
    httpd_body_unref(c->body);
    c->body = NULL;
    free(c->spare.p);
    c->spare = (struct httpd_spare){0};
}

void httpd_conn_init(struct httpd_conn *c, void *owner,
                     void (*on_io)(struct ev_loop *, ev_io *, int),
                     void (*on_timer)(struct ev_loop *, ev_timer *, int))
{
    c->owner = owner;
    c->fd = -1;
    ev_io_init(&c->io, on_io, -1, EV_READ);
    c->io.data = c;
    ev_timer_init(&c->timer, on_timer, 1.0, 0);
    c->timer.data = c;
}

void httpd_conn_open(struct httpd_conn *c, struct ev_loop *loop, int fd, const uint8_t src[16],
                     double timeout)
{
    c->loop = loop;
    c->fd = fd;
    memcpy(c->src, src, 16);
    c->len = 0;
    c->off = 0;
    c->head_len = 0;
    c->body = NULL;
    c->state = HTTPD_READ;
    c->born = ev_now(loop);
    ev_io_set(&c->io, fd, EV_READ);
    ev_io_start(loop, &c->io);
    ev_timer_set(&c->timer, timeout, 0);
    ev_timer_start(loop, &c->timer);
}

int httpd_conn_preload(struct httpd_conn *c, const uint8_t *p, size_t n)
{
    uint8_t *dst = c->req;
    if (n > sizeof c->req) {
        free(c->big);
        if (!(c->big = malloc(n)))
            return -1;
        c->bigcap = n;
        dst = c->big;
    }
    memcpy(dst, p, n);
    c->len = n;
    return 0;
}

int httpd_conn_detach(struct httpd_conn *c)
{
    int fd = c->fd;
    c->fd = -1; /* kept open for the caller */
    httpd_conn_close(c);
    return fd;
}

void httpd_conn_close(struct httpd_conn *c)
{
    ev_io_stop(c->loop, &c->io);
    ev_timer_stop(c->loop, &c->timer);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    httpd_body_unref(c->body);
    c->body = NULL;
    free(c->big);
    c->big = NULL;
    c->bigcap = 0;
}

/* What a send/recv result means: IO_MOVED bytes moved, IO_AGAIN retry at once (EINTR),
 * IO_WAIT wait for the socket, IO_END end of stream or error. */
enum io_step { IO_MOVED, IO_AGAIN, IO_WAIT, IO_END };

static enum io_step io_step(ssize_t n)
{
    if (n > 0)
        return IO_MOVED;
    if (n < 0 && errno == EINTR)
        return IO_AGAIN;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return IO_WAIT;
    return IO_END;
}

/* (Re)arms c's deadline: timeout seconds from now. */
static void conn_deadline(struct httpd_conn *c, double timeout)
{
    ev_timer_stop(c->loop, &c->timer);
    ev_timer_set(&c->timer, timeout, 0);
    ev_timer_start(c->loop, &c->timer);
}

/* (Re)arms c's watcher for events and its deadline. */
static void conn_watch(struct httpd_conn *c, int events, double timeout)
{
    ev_io_stop(c->loop, &c->io);
    ev_io_set(&c->io, c->fd, events);
    ev_io_start(c->loop, &c->io);
    conn_deadline(c, timeout);
}

int httpd_conn_read(struct httpd_conn *c, int max_headers, size_t body_max,
                    struct http_request *rq, const uint8_t **buf)
{
    for (;;) {
        uint8_t *b = c->big ? c->big : c->req;
        size_t cap = c->big ? c->bigcap : sizeof c->req;
        if (c->len >= cap)
            break;
        ssize_t n = recv(c->fd, b + c->len, cap - c->len, 0);
        enum io_step st = io_step(n);
        if (st == IO_WAIT)
            break;
        if (st == IO_END)
            return HTTPD_CLOSE; /* EOF or error before a whole request */
        if (st == IO_MOVED)
            c->len += (size_t)n;
    }
    *buf = c->big ? c->big : c->req;
    enum http_status st = http_parse_request_body(*buf, c->len, sizeof c->req, max_headers,
                                                  body_max, rq);
    if (st == HTTP_OK && c->len < rq->consumed + rq->content_length) { /* the body's rest */
        size_t need = rq->consumed + rq->content_length;
        if (need > (c->big ? c->bigcap : sizeof c->req)) {
            uint8_t *big = malloc(need);
            if (!big)
                return HTTPD_CLOSE;
            memcpy(big, *buf, c->len);
            free(c->big);
            c->big = big;
            c->bigcap = need;
        }
        return HTTP_NEED_MORE; /* level-triggered: bytes still queued wake us again */
    }
    return (int)st;
}

static const char *status_text(int code)
{
    switch (code) {
    case 200: return "OK";
    case 201: return "Created";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 504: return "Gateway Timeout";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 414: return "URI Too Long";
    case 421: return "Misdirected Request";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "HTTP Version Not Supported";
    }
}

void httpd_respond(struct httpd_conn *c, int code, const char *type, struct httpd_body *body,
                   const char *text, int head_only)
{
    size_t len = body ? body->len : strlen(text);
    int n = snprintf(c->head, sizeof c->head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\nCache-Control: no-store\r\n"
                     "X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n"
                     "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; "
                     "style-src 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
                     "base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n%s\r\n%s",
                     code, status_text(code), type, len,
                     code == 401 ? "WWW-Authenticate: Bearer realm=\"mtproxy\"\r\n" : "",
                     body || head_only ? "" : text);
    c->head_len = n < 0 ? 0 : (size_t)n < sizeof c->head ? (size_t)n : sizeof c->head - 1;
    if (head_only) {
        httpd_body_unref(body);
        body = NULL;
    }
    c->body = body;
}

void httpd_respond_text(struct httpd_conn *c, int code, const char *text, int head_only)
{
    httpd_respond(c, code, "text/plain; charset=utf-8", NULL, text, head_only);
}

int httpd_conn_send(struct httpd_conn *c, const struct httpd_limits *lim)
{
    /* One request per connection: anything pipelined after it is never served. */
    c->state = HTTPD_WRITE;
    c->off = 0;
    conn_watch(c, EV_WRITE, lim->write_idle);
    return httpd_conn_write(c, lim);
}

int httpd_conn_write(struct httpd_conn *c, const struct httpd_limits *lim)
{
    size_t blen = c->body ? c->body->len : 0, total = c->head_len + blen;
    int moved = 0;
    while (c->off < total) {
        struct iovec iov[2];
        int n = 0;
        if (c->off < c->head_len)
            iov[n++] = (struct iovec){c->head + c->off, c->head_len - c->off};
        size_t bo = c->off > c->head_len ? c->off - c->head_len : 0;
        if (bo < blen)
            iov[n++] = (struct iovec){(char *)c->body->p + bo,
                                      blen - bo < lim->send_chunk ? blen - bo : lim->send_chunk};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t r = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        enum io_step st = io_step(r);
        if (st == IO_WAIT) {
            if (moved)
                conn_deadline(c, lim->write_idle);
            return 0;
        }
        if (st == IO_END)
            return -1;
        if (st == IO_MOVED) {
            c->off += (size_t)r;
            moved = 1;
        }
    }
    shutdown(c->fd, SHUT_WR);
    httpd_body_unref(c->body);
    c->body = NULL;
    c->state = HTTPD_LINGER;
    c->len = 0;
    conn_watch(c, EV_READ, lim->linger_timeout);
    return 0;
}

int httpd_conn_linger(struct httpd_conn *c, const struct httpd_limits *lim)
{
    for (;;) {
        ssize_t n = recv(c->fd, c->req, sizeof c->req, 0);
        enum io_step st = io_step(n);
        if (st == IO_WAIT)
            return 0;
        if (st == IO_END || (st == IO_MOVED && (c->len += (size_t)n) >= lim->linger_max))
            return -1;
    }
}

void httpd_conn_query(const struct httpd_conn *c, char *q, size_t qlen)
{
    const uint8_t *p = memchr(c->req, ' ', c->len), *end = c->req + c->len;
    q[0] = 0;
    if (!p)
        return;
    const uint8_t *sp = memchr(p + 1, ' ', (size_t)(end - p - 1));
    const uint8_t *qm = memchr(p + 1, '?', (size_t)((sp ? sp : end) - p - 1));
    if (!sp || !qm)
        return;
    size_t n = (size_t)(sp - qm - 1);
    if (n >= qlen)
        n = qlen - 1;
    memcpy(q, qm + 1, n);
    q[n] = 0;
}

struct httpd_conn *httpd_slot_get(struct httpd_conn *conns, int n, int per_source,
                                  const uint8_t src[16])
{
    struct httpd_conn *free_slot = NULL, *oldest = NULL, *oldest_mine = NULL;
    int mine = 0;
    for (int i = 0; i < n; i++) {
        struct httpd_conn *c = &conns[i];
        if (c->fd < 0) {
            if (!free_slot)
                free_slot = c;
            continue;
        }
        int same = !memcmp(c->src, src, 16);
        mine += same;
        if (c->state == HTTPD_WRITE || c->pinned)
            continue;
        if (!oldest || c->born < oldest->born)
            oldest = c;
        if (same && (!oldest_mine || c->born < oldest_mine->born))
            oldest_mine = c;
    }
    if (mine >= per_source)
        return oldest_mine;
    return free_slot ? free_slot : oldest;
}

struct httpd_conn *httpd_slot_free(struct httpd_conn *conns, int n)
{
    for (int i = 0; i < n; i++)
        if (conns[i].fd < 0)
            return &conns[i];
    return NULL;
}

void httpd_source_key(const struct sockaddr_storage *ss, uint8_t k[16])
{
    memset(k, 0, 16);
    if (ss->ss_family == AF_INET) {
        k[10] = k[11] = 0xff;
        memcpy(k + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        memcpy(k, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    }
}

int httpd_accept(int lfd, uint8_t src[16])
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM))
        return -2;
    if (fd < 0)
        return -1; /* EAGAIN, or a connection that went away */
    httpd_source_key(&ss, src);
    return fd;
}
