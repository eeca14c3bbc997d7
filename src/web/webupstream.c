/* webupstream.c: web-upstream: the ordinary site from an HTTP/1.1 server. A request the WEB
 * carrier does not take goes to the upstream as it came (its Connection header replaced by
 * "Connection: close"), and the upstream's answer, read to its EOF, goes back as it is: a
 * probe and a visitor get the same bytes for the same request. Non-blocking, on the worker's
 * loop; bounded in size (WEB_SITE_MAX) and time (WEB_UPSTREAM_TIMEOUT). */
#include "web/webint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define WEB_UPSTREAM_TIMEOUT 10.0 /* seconds for the whole exchange */

struct webfetch {
    struct webhttp *h;
    struct httpd_conn *c;
    int fd;
    ev_io io;
    ev_timer timer;
    uint8_t *req; /* the request to send */
    size_t req_len, req_off;
    uint8_t *resp; /* the answer so far */
    size_t resp_len, resp_cap;
    int connected;
};

/* The request in c's buffer with every Connection header dropped and "Connection: close"
 * added after the request line, into a new buffer (*n bytes); NULL if out of memory. */
static uint8_t *rewrite(const struct httpd_conn *c, size_t head, size_t total, size_t *n)
{
    const uint8_t *b = c->big ? c->big : c->req;
    uint8_t *out = malloc(total + 20);
    if (!out)
        return NULL;
    const uint8_t *eol = memchr(b, '\n', head);
    size_t line = eol ? (size_t)(eol - b) + 1 : head, o = line;
    memcpy(out, b, line);
    memcpy(out + o, "Connection: close\r\n", 19);
    o += 19;
    for (size_t i = line; i < head;) {
        const uint8_t *e = memchr(b + i, '\n', head - i);
        size_t k = e ? (size_t)(e - (b + i)) + 1 : head - i;
        if (k < 11 || strncasecmp((const char *)b + i, "connection:", 11)) {
            memcpy(out + o, b + i, k);
            o += k;
        }
        i += k;
    }
    memcpy(out + o, b + head, total - head);
    *n = o + total - head;
    return out;
}

/* Ends f: c gets the answer read (raw), or code's own page if it has none; f is freed. */
static void fetch_end(struct webfetch *f, int code)
{
    struct webhttp *h = f->h;
    struct httpd_conn *c = f->c;
    ev_io_stop(h->loop, &f->io);
    ev_timer_stop(h->loop, &f->timer);
    close(f->fd);
    h->fetch[c - h->conns] = NULL;
    struct httpd_body *b = NULL;
    if (!code && f->resp_len >= 12 && !memcmp(f->resp, "HTTP/1.", 7) &&
        (b = httpd_body_new((const char *)f->resp, f->resp_len, 1)) != NULL) {
        f->resp = NULL;
        c->head_len = 0; /* the upstream's head and body, as they came */
        c->body = b;
    } else {
        web_respond(c, code ? code : 502, "", "text/plain; charset=utf-8",
                    httpd_body_new(code == 504 ? "upstream timeout\n" : "bad gateway\n",
                                   code == 504 ? 17 : 12, 0),
                    0);
    }
    free(f->req);
    free(f->resp);
    free(f);
    c->pinned = 0;
    h->upstream_done(h, c);
}

static void fetch_io(struct ev_loop *loop, ev_io *io, int revents)
{
    (void)loop, (void)revents;
    struct webfetch *f = io->data;
    if (!f->connected) {
        if (sock_connect_result(f->fd) != 0) {
            fetch_end(f, 502);
            return;
        }
        f->connected = 1;
    }
    if (f->req_off < f->req_len) {
        ssize_t k = send(f->fd, f->req + f->req_off, f->req_len - f->req_off, MSG_NOSIGNAL);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (k <= 0) {
            fetch_end(f, 502);
            return;
        }
        if ((f->req_off += (size_t)k) == f->req_len) {
            ev_io_stop(f->h->loop, &f->io);
            ev_io_set(&f->io, f->fd, EV_READ);
            ev_io_start(f->h->loop, &f->io);
        }
        return;
    }
    if (f->resp_cap - f->resp_len < 16384) {
        size_t cap = f->resp_cap ? f->resp_cap * 2 : 65536;
        uint8_t *p = cap <= WEB_SITE_MAX + 65536 ? realloc(f->resp, cap) : NULL;
        if (!p) {
            fetch_end(f, 502); /* larger than the site's limit */
            return;
        }
        f->resp = p;
        f->resp_cap = cap;
    }
    ssize_t k = recv(f->fd, f->resp + f->resp_len, f->resp_cap - f->resp_len, 0);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (k > 0) {
        f->resp_len += (size_t)k;
        if (f->resp_len > WEB_SITE_MAX)
            fetch_end(f, 502);
        return;
    }
    fetch_end(f, k == 0 ? 0 : 502);
}

static void fetch_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop, (void)revents;
    fetch_end(t->data, 504);
}

int webupstream_start(struct webhttp *h, struct httpd_conn *c, const struct http_request *rq)
{
    struct webfetch *f = calloc(1, sizeof *f);
    size_t total = rq->consumed + rq->content_length;
    if (!f || total > c->len || !(f->req = rewrite(c, rq->consumed, total, &f->req_len))) {
        free(f);
        return -1;
    }
    f->fd = sock_connect(&h->upstream, NULL);
    if (f->fd < 0) {
        free(f->req);
        free(f);
        return -1;
    }
    f->h = h;
    f->c = c;
    h->fetch[c - h->conns] = f;
    c->pinned = 1; /* its answer is on the way */
    ev_timer_stop(h->loop, &c->timer);
    ev_io_init(&f->io, fetch_io, f->fd, EV_WRITE);
    ev_timer_init(&f->timer, fetch_timeout, WEB_UPSTREAM_TIMEOUT, 0);
    f->io.data = f->timer.data = f;
    ev_io_start(h->loop, &f->io);
    ev_timer_start(h->loop, &f->timer);
    return 0;
}

void webupstream_cancel(struct webhttp *h, struct httpd_conn *c)
{
    struct webfetch *f = h->fetch[c - h->conns];
    if (!f)
        return;
    ev_io_stop(h->loop, &f->io);
    ev_timer_stop(h->loop, &f->timer);
    close(f->fd);
    h->fetch[c - h->conns] = NULL;
    free(f->req);
    free(f->resp);
    free(f);
}
