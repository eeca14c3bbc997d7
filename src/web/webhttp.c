/* webhttp.c: the WEB server on one worker's loop: connections, routing, the https carrier. */
#include "web/webhttp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "config/reload.h"
#include "conn/conn.h"
#include "web/webint.h"
#include "web/webpage.h"

static const struct httpd_limits web_limits = {
    .write_idle = 10.0,
    .linger_timeout = 2.0,
    .linger_max = 64 << 10,
    .send_chunk = 256 << 10,
};

static void busy(struct httpd_conn *c)
{
    web_respond(c, 503, "Retry-After: 1\r\n", "text/plain; charset=utf-8", NULL, 0);
}

static int slot_of(const struct webhttp *h, const struct httpd_conn *c)
{
    return (int)(c - h->conns);
}

/* Lets go of the held /down p (its connection answers or closes). */
static struct httpd_conn *poll_release(struct webhttp *h, struct webpoll *p)
{
    struct httpd_conn *c = &h->conns[p - h->polls];
    struct webpoll **pp = &p->x->polls;
    while (*pp && *pp != p)
        pp = &(*pp)->next;
    if (*pp)
        *pp = p->next;
    *p = (struct webpoll){0};
    c->pinned = 0;
    return c;
}

/* Closes c (a held /down it had is let go, an upstream answer it waited for dropped). */
static void hconn_close(struct webhttp *h, struct httpd_conn *c)
{
    webupstream_cancel(h, c);
    if (h->polls[slot_of(h, c)].x)
        poll_release(h, &h->polls[slot_of(h, c)]);
    c->pinned = 0;
    httpd_conn_close(c);
}

static void hconn_send(struct webhttp *h, struct httpd_conn *c)
{
    if (httpd_conn_send(c, &web_limits))
        hconn_close(h, c);
}

/* The ordinary site's answer to c's request rq: web-upstream's (on its way: c waits), else
 * web-root's file or the built-in page. */
static void site(struct webhttp *h, struct httpd_conn *c, const struct http_request *rq)
{
    if (!h->upstream_on)
        website_answer(h, c, rq->method, rq->path);
    else if (webupstream_start(h, c, rq) != 0)
        web_respond(c, 502, "", "text/plain; charset=utf-8",
                    httpd_body_new("bad gateway\n", 12, 0), 0);
}

/* The upstream's answer is set (webupstream.c): it goes. */
static void site_done(struct webhttp *h, struct httpd_conn *c)
{
    hconn_send(h, c);
}

/* The site's answer to the request c holds (a held /down whose session is gone), sent unless
 * it is on its way from the upstream. */
static void site_again(struct webhttp *h, struct httpd_conn *c)
{
    struct http_request rq;
    const uint8_t *b = c->big ? c->big : c->req;
    if (http_parse_request_body(b, c->len, sizeof c->req, WEB_MAX_HEADERS, h->lim.body_bytes,
                                &rq) == HTTP_OK)
        site(h, c, &rq);
    else
        website_answer(h, c, HTTP_POST, "/api/v1/down");
    if (!h->fetch[c - h->conns])
        hconn_send(h, c);
}

/* Runs the held /down p: a batch if frames wait (200), 204 if its lane ended, else it goes on
 * holding. */
static void poll_run(struct webhttp *h, struct webpoll *p)
{
    const uint8_t *b;
    size_t n;
    uint64_t next;
    struct websx *x = p->x;
    p->ready = 0;
    enum websess_result r = websess_down(h->t, x->s, p->lane, p->cursor, web_now(), &b, &n, &next);
    if (r == WEBSESS_FATAL)
        return; /* the session ended: on_session_end answered the poll */
    if (r == WEBSESS_WAIT) {
        p->cursor = next;
        webstream_resume(h, x);
        return;
    }
    char extra[80];
    snprintf(extra, sizeof extra, "X-Down-Cursor: %llu\r\n%s", (unsigned long long)next,
             r == WEBSESS_GONE ? "X-Lane-Closed: 1\r\n" : "");
    struct httpd_conn *c = poll_release(h, p);
    if (r == WEBSESS_GONE) {
        web_respond(c, 204, extra, "", NULL, 0);
    } else {
        char *copy = malloc(n ? n : 1);
        struct httpd_body *body = copy ? httpd_body_new(copy, n, 1) : NULL;
        if (!body) {
            free(copy);
            busy(c); /* the batch stays issued: the client's retry names the same cursor */
        } else {
            memcpy(copy, b, n);
            web_respond(c, 200, extra, "application/octet-stream", body, 0);
        }
    }
    webstream_resume(h, x);
    hconn_send(h, c);
}

void webhttp_poll_answer(struct webhttp *h, struct webpoll *p, int timeout, int gone)
{
    if (!gone && !timeout) {
        poll_run(h, p);
        return;
    }
    uint64_t cursor = p->cursor;
    struct httpd_conn *c = poll_release(h, p);
    if (gone) {
        site_again(h, c);
        return;
    } else {
        char extra[64];
        snprintf(extra, sizeof extra, "X-Down-Cursor: %llu\r\n", (unsigned long long)cursor);
        web_respond(c, 204, extra, "", NULL, 0);
    }
    hconn_send(h, c);
}

/* One pass over the held polls and WebSockets whose lanes have frames. 1 if it ran any. */
static int kick_pass(struct webhttp *h)
{
    int ran = 0;
    for (int i = 0; i < WEB_MAX_CONNS; i++)
        if (h->polls[i].x && h->polls[i].ready) {
            poll_run(h, &h->polls[i]);
            ran = 1;
        }
    for (struct webws *w = h->wsl, *next; w; w = next) {
        next = webws_next(w);
        if (webws_ready(w)) {
            ran = 1;
            if (webws_flush(w))
                next = h->wsl; /* w is gone, and next may be (its session ended): again from
                                * the start (each close happens once: this ends) */
        }
    }
    return ran;
}

/* Before the loop sleeps: held polls and WebSockets whose lanes have frames get them. Serving
 * one lane resumes the session's streams, which can fill another lane: passes go on while
 * some run (a watcher started in this phase would wait for the next wake-up: a stall); past
 * a bound, an idle watcher keeps the loop from sleeping until they are done. */
static void on_kick(struct ev_loop *loop, ev_prepare *p, int revents)
{
    struct webhttp *h = p->data;
    int rounds = 0;
    do
        ev_prepare_stop(loop, p);
    while (kick_pass(h) && ev_is_active(p) && ++rounds < 16);
    if (ev_is_active(p)) {
        ev_prepare_stop(loop, p);
        ev_idle_start(loop, &h->idle);
    }
}

static void on_idle(struct ev_loop *loop, ev_idle *i, int revents)
{
    struct webhttp *h = i->data;
    ev_idle_stop(loop, i);
    on_kick(loop, &h->kick, 0);
}

/* The capabilities of the generation worker 0 serves now: two per plain or dd secret (its 16
 * bytes, and dd + them), each for its secret index. Kept when out of memory. */
static void caps_refresh(struct webhttp *h)
{
    const struct gen *g = h->pw->gen;
    if ((const void *)g == h->capgen && g->serial == h->capserial)
        return;
    const struct options *o = &g->opt;
    size_t max = 2 * (size_t)o->nsecrets + 1, n = 0;
    char(*caps)[WEBCAP_LEN + 1] = calloc(max, sizeof *caps);
    int *users = calloc(max, sizeof *users);
    if (!caps || !users) {
        free(caps);
        free(users);
        return;
    }
    for (int i = 0; i < o->nsecrets; i++) {
        if (o->secrets[i].kind == SECRET_EE)
            continue;
        uint8_t k[1 + SECRET_KEY_LEN] = {0xdd};
        memcpy(k + 1, o->secrets[i].key, SECRET_KEY_LEN);
        if (!webcap_derive(k + 1, SECRET_KEY_LEN, h->host, caps[n]))
            users[n++] = i;
        if (!webcap_derive(k, sizeof k, h->host, caps[n]))
            users[n++] = i;
    }
    free(h->caps);
    free(h->capuser);
    h->caps = caps;
    h->capuser = users;
    h->ncaps = n;
    h->capgen = g;
    h->capserial = g->serial;
}

/* The query of the request line in buf (after '?', up to the space) into q[0..cap) if it
 * fits (q may be NULL). Returns its length plus one if there is a '?', else 0. */
static size_t query_of(const uint8_t *buf, const struct http_request *rq, char *q, size_t cap)
{
    const uint8_t *end = buf + rq->consumed, *sp = memchr(buf, ' ', rq->consumed);
    const uint8_t *sp2 = sp ? memchr(sp + 1, ' ', (size_t)(end - sp - 1)) : NULL;
    const uint8_t *qm = sp2 ? memchr(sp + 1, '?', (size_t)(sp2 - sp - 1)) : NULL;
    if (!qm)
        return 0;
    size_t n = (size_t)(sp2 - qm - 1);
    if (q && cap)
        snprintf(q, cap, "%.*s", (int)(n < cap ? n : cap - 1), (const char *)qm + 1);
    return n + 1;
}

/* GET /?bridge=CAP with a capability of ours: a bootstrap for its user, in the bridge page.
 * 1 if answered, 0 for the site. */
static int serve_bridge(struct webhttp *h, struct httpd_conn *c, const uint8_t *buf,
                        const struct http_request *rq)
{
    char q[128], tok[WEBSESS_TOKEN_LEN + 1], csp[WEBPAGE_CSP_MAX], extra[WEBPAGE_CSP_MAX + 40];
    if (query_of(buf, rq, q, sizeof q) != 8 + WEBCAP_LEN || strncmp(q, "bridge=", 7))
        return 0;
    caps_refresh(h);
    int i = webcap_find(q + 7, WEBCAP_LEN, (const char(*)[WEBCAP_LEN + 1])h->caps, h->ncaps);
    if (i < 0 || websess_bootstrap_mint(h->t, h->capuser[i], web_now(), tok) != WEBSESS_OK)
        return 0;
    struct sbuf out = {.max = 1 << 20};
    struct httpd_body *b = NULL;
    if (webpage_render(tok, h->mode, h->host, &out, csp) == 0)
        b = httpd_body_of(&out);
    else
        sbuf_free(&out);
    if (!b)
        return 0;
    snprintf(extra, sizeof extra, "Content-Security-Policy: %s\r\n", csp);
    web_respond(c, 200, extra, "text/html; charset=utf-8", b, rq->method == HTTP_HEAD);
    return 1;
}

/* The request's client: behind a trusted terminator the last hop of X-Forwarded-For, else the
 * TCP peer (port 0: the WEB client's port is not known). */
static void client_addr(const struct webhttp *h, const struct httpd_conn *c,
                        const uint8_t *buf, const struct http_request *rq, struct sock_addr *a)
{
    memset(a, 0, sizeof *a);
    a->u.in6.sin6_family = AF_INET6;
    memcpy(&a->u.in6.sin6_addr, c->src, 16);
    a->len = sizeof a->u.in6;
    const char *v;
    size_t vn;
    char ip[INET6_ADDRSTRLEN];
    if (cidr_set_contains(&h->trusted, &a->u.sa) &&
        http_header(buf, rq->consumed, "x-forwarded-for", &v, &vn) == 1) {
        const char *comma = memrchr(v, ',', vn), *s = comma ? comma + 1 : v;
        while (s < v + vn && *s == ' ')
            s++;
        size_t n = (size_t)(v + vn - s);
        if (n < sizeof ip) {
            memcpy(ip, s, n);
            ip[n] = 0;
            struct in_addr a4;
            if (inet_pton(AF_INET, ip, &a4) == 1) {
                memset(a->u.in6.sin6_addr.s6_addr, 0, 10);
                memset(a->u.in6.sin6_addr.s6_addr + 10, 0xff, 2);
                memcpy(a->u.in6.sin6_addr.s6_addr + 12, &a4, 4);
            } else {
                inet_pton(AF_INET6, ip, &a->u.in6.sin6_addr); /* unchanged if not one */
            }
        }
    }
    const uint8_t *b = a->u.in6.sin6_addr.s6_addr;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (!memcmp(b, mapped, 12)) { /* as an IPv4 accept gives it */
        struct in_addr a4;
        memcpy(&a4, b + 12, 4);
        memset(a, 0, sizeof *a);
        a->u.in4.sin_family = AF_INET;
        a->u.in4.sin_addr = a4;
        a->len = sizeof a->u.in4;
    }
}

/* The API's common rules (docs/web.md 4): the public Host, no query, no cookies, a 43-character
 * bearer, and Content-Type: application/octet-stream exactly when a body is present. */
static int api_ok(const struct webhttp *h, const struct httpd_conn *c, const uint8_t *buf,
                  const struct http_request *rq)
{
    const char *v;
    size_t vn;
    if (strcasecmp(rq->host, h->host) || query_of(buf, rq, NULL, 0) ||
        http_header(buf, rq->consumed, "cookie", &v, &vn) || !rq->has_bearer ||
        strlen(rq->bearer) != WEBSESS_TOKEN_LEN)
        return 0;
    int typed = http_header(buf, rq->consumed, "content-type", &v, &vn);
    if (!rq->content_length)
        return typed == 0;
    return typed == 1 && vn == 24 && !memcmp(v, "application/octet-stream", 24);
}

/* A canonical decimal header (X-Up-Seq, X-Down-Cursor) given once. 0, or -1. */
static int header_number(const uint8_t *buf, const struct http_request *rq, const char *name,
                         uint64_t *out)
{
    const char *v;
    size_t vn;
    return http_header(buf, rq->consumed, name, &v, &vn) == 1 && !webframe_decimal(v, vn, out)
               ? 0
               : -1;
}

/* POST /api/v1/session: a HELLO with the bootstrap creates the session (or the same request
 * again while the bootstrap lives gets the same answer). 1 if answered, 0 for the site. */
static int api_session(struct webhttp *h, struct httpd_conn *c, const struct http_request *rq,
                       const uint8_t *body, const struct sock_addr *peer)
{
    static const uint8_t welcome[WEBFRAME_HDR_LEN] = {WEBFRAME_WELCOME};
    struct websess *s;
    if (rq->content_length > WEB_CREATE_MAX)
        return 0;
    enum websess_result r = websess_create(h->t, rq->bearer, WEBSESS_TOKEN_LEN, body,
                                           rq->content_length, h->mode, web_now(), &s);
    if (r == WEBSESS_BUSY)
        busy(c);
    if (r != WEBSESS_OK && r != WEBSESS_REPLAY)
        return r == WEBSESS_BUSY;
    if (r == WEBSESS_OK && !webstream_sx_new(h, s, peer)) {
        websess_close(h->t, s);
        busy(c);
        return 1;
    }
    char extra[200];
    snprintf(extra, sizeof extra,
             "X-Session-Token: %s\r\nX-Carrier-Mode: %s\r\nX-Down-Cursor: 0\r\n",
             websess_token(s), websess_mode_name(websess_mode(s)));
    struct httpd_body *b = httpd_body_new((const char *)welcome, sizeof welcome, 0);
    if (b)
        web_respond(c, 200, extra, "application/octet-stream", b, 0);
    else
        busy(c);
    return 1;
}

/* The session an /up or /down names (its bearer), with its number header (X-Up-Seq or
 * X-Down-Cursor) in *n, its lane (X-Lane-ID: exactly in https-lanes) in *lane, and a body
 * exactly when want_body; NULL if any of it is missing. */
static struct websx *carrier_session(struct webhttp *h, const struct http_request *rq,
                                     const uint8_t *buf, const char *name, int want_body,
                                     uint64_t *n, uint32_t *lane)
{
    struct websess *s = websess_find(h->t, rq->bearer, WEBSESS_TOKEN_LEN);
    int mode = s ? (int)websess_mode(s) : -1;
    struct websx *x = mode == WEBSESS_HTTPS || mode == WEBSESS_HTTPS_LANES ? webstream_sx(h, s)
                                                                          : NULL;
    uint64_t id = 0;
    const char *v;
    size_t vn;
    int has_lane = http_header(buf, rq->consumed, "x-lane-id", &v, &vn) != 0;
    if (!x || !rq->content_length != !want_body || header_number(buf, rq, name, n) ||
        has_lane != (mode == WEBSESS_HTTPS_LANES) ||
        (has_lane && (header_number(buf, rq, "x-lane-id", &id) || id > WEBFRAME_MAX_STREAM)))
        return NULL;
    *lane = (uint32_t)id;
    return x;
}

/* POST /api/v1/up: a batch of frames with X-Up-Seq. 1 if answered, 0 for the site. */
static int api_up(struct webhttp *h, struct httpd_conn *c, const struct http_request *rq,
                  const uint8_t *buf, const struct sock_addr *peer)
{
    uint64_t seq;
    uint32_t lane;
    struct websx *x = carrier_session(h, rq, buf, "x-up-seq", 1, &seq, &lane);
    if (!x)
        return 0;
    x->peer = *peer;
    enum websess_result r =
        websess_up(h->t, x->s, lane, seq, buf + rq->consumed, rq->content_length, web_now());
    if (r == WEBSESS_BUSY) {
        busy(c);
        return 1;
    }
    if (r != WEBSESS_OK && r != WEBSESS_REPLAY)
        return 0; /* the session is gone (FATAL) or the body too large */
    char extra[64];
    snprintf(extra, sizeof extra, "X-Up-Ack: %llu\r\n", (unsigned long long)seq);
    web_respond(c, 204, extra, "", NULL, 0);
    return 1;
}

/* POST /api/v1/down with X-Down-Cursor (and X-Lane-ID in https-lanes): a batch now, or held
 * until frames come or the long poll ends (204). A second poll of the same lane lets the first
 * go (204). 1 if answered or held, 0 for the site. */
static int api_down(struct webhttp *h, struct httpd_conn *c, const struct http_request *rq,
                    const uint8_t *buf, const struct sock_addr *peer)
{
    uint64_t cursor;
    uint32_t lane;
    struct websx *x = carrier_session(h, rq, buf, "x-down-cursor", 0, &cursor, &lane);
    if (!x)
        return 0;
    for (struct webpoll *o = x->polls; o; o = o->next)
        if (o->lane == lane) {
            webhttp_poll_answer(h, o, 1, 0);
            break;
        }
    x->peer = *peer;
    struct webpoll *p = &h->polls[slot_of(h, c)];
    *p = (struct webpoll){.x = x, .lane = lane, .cursor = cursor, .next = x->polls};
    x->polls = p;
    c->pinned = 1; /* never evicted for another connection while it holds */
    ev_timer_stop(h->loop, &c->timer);
    ev_timer_set(&c->timer, (double)h->lim.poll_ms / 1000.0, 0);
    ev_timer_start(h->loop, &c->timer);
    poll_run(h, p); /* may answer (a batch), end the session (404), or hold */
    return 1;
}

/* A session token DELETE closed a moment ago (answered 204 again), constant-time. */
static int closed_recently(const struct webhttp *h, const char *tok, int64_t now)
{
    int found = 0;
    for (int i = 0; i < WEB_CLOSED_TOKENS; i++)
        found |= http_token_equal(h->closed[i], tok) && now - h->closed_at[i] < h->lim.grace_ms;
    return found;
}

/* DELETE /api/v1/session: 1 if answered (204), 0 for the site. */
static int api_delete(struct webhttp *h, struct httpd_conn *c, const struct http_request *rq)
{
    int64_t now = web_now();
    struct websess *s = websess_find(h->t, rq->bearer, WEBSESS_TOKEN_LEN);
    if (rq->content_length || (!s && !closed_recently(h, rq->bearer, now)))
        return 0;
    if (s) {
        unsigned i = h->closed_head++ % WEB_CLOSED_TOKENS;
        memcpy(h->closed[i], websess_token(s), WEBSESS_TOKEN_LEN + 1);
        h->closed_at[i] = now;
        websess_close(h->t, s);
    }
    web_respond(c, 204, "", "", NULL, 0);
    return 1;
}

/* The token a request carries: an API request's bearer, or the one in a WebSocket's
 * subprotocol (tproxy-v1.TOKEN, tproxy-lane-v1.TOKEN.N). NULL if none. */
static const char *request_token(const struct http_request *rq, const uint8_t *buf)
{
    static const char *const protos[] = {"tproxy-v1.", "tproxy-lane-v1."};
    const char *v;
    size_t vn;
    if (rq->has_bearer && strlen(rq->bearer) == WEBSESS_TOKEN_LEN)
        return rq->bearer;
    if (http_header(buf, rq->consumed, "sec-websocket-protocol", &v, &vn) != 1)
        return NULL;
    for (int i = 0; i < 2; i++) {
        size_t k = strlen(protos[i]);
        if (vn >= k + WEBSESS_TOKEN_LEN && !strncmp(v, protos[i], k))
            return v + k;
    }
    return NULL;
}

/* Hands c (its socket and the request read) to worker w's server, which holds the request's
 * token; c is a free slot again. 0, or -1 (out of memory: c is untouched). */
static int move_to(struct webhttp *h, struct httpd_conn *c, int w)
{
    struct webhttp *to = h->group->h[w];
    const uint8_t *b = c->big ? c->big : c->req;
    struct webmove *m = malloc(sizeof *m + c->len);
    if (!m)
        return -1;
    memcpy(m->src, c->src, sizeof m->src);
    memcpy(m->b, b, c->len);
    m->len = c->len;
    m->next = NULL;
    m->fd = httpd_conn_detach(c);
    pthread_mutex_lock(&to->inbox_mu);
    *to->inbox_tail = m;
    to->inbox_tail = &m->next;
    pthread_mutex_unlock(&to->inbox_mu);
    ev_async_send(to->loop, &to->inbox_async);
    return 0;
}

/* The other worker of this instance whose table holds the request's token, or -1. */
static int owner_elsewhere(const struct webhttp *h, const struct http_request *rq,
                           const uint8_t *buf)
{
    const char *tok = request_token(rq, buf);
    int inst, w;
    if (!tok || h->group->n < 2 ||
        websess_token_owner(tok, WEBSESS_TOKEN_LEN, &inst, &w) != 0 ||
        inst != h->lim.instance || w == h->index || w >= h->group->n)
        return -1;
    return w;
}

/* Serves one parsed request: the bridge, the carrier, or the site; or hands it to the worker
 * that holds its token. */
static void serve(struct webhttp *h, struct httpd_conn *c, const struct http_request *rq,
                  const uint8_t *buf)
{
    int w = owner_elsewhere(h, rq, buf);
    if (w >= 0 && move_to(h, c, w) == 0)
        return; /* c->fd is -1: the slot is free */
    struct sock_addr peer;
    client_addr(h, c, buf, rq, &peer);
    const char *p = rq->path;
    int m = rq->method, done = 0;
    if (!strcmp(p, "/") && (m == HTTP_GET || m == HTTP_HEAD) && !strcasecmp(rq->host, h->host))
        done = serve_bridge(h, c, buf, rq);
    else if (!strcmp(p, "/api/v1/ws") && !query_of(buf, rq, NULL, 0) &&
             (h->mode == WEBSESS_WEBSOCKET || h->mode == WEBSESS_WEBSOCKET_LANES))
        done = webws_upgrade(h, c, rq, buf); /* c's socket is the WebSocket's now */
    else if (!strncmp(p, "/api/v1/", 8) && api_ok(h, c, buf, rq)) {
        if (m == HTTP_POST && !strcmp(p + 8, "session"))
            done = api_session(h, c, rq, buf + rq->consumed, &peer);
        else if (m == HTTP_DELETE && !strcmp(p + 8, "session"))
            done = api_delete(h, c, rq);
        else if (m == HTTP_POST && !strcmp(p + 8, "up"))
            done = api_up(h, c, rq, buf, &peer);
        else if (m == HTTP_POST && !strcmp(p + 8, "down"))
            done = api_down(h, c, rq, buf, &peer);
    }
    if (!done)
        site(h, c, rq);
}

static void hconn_read(struct webhttp *h, struct httpd_conn *c)
{
    struct http_request rq;
    const uint8_t *buf;
    int st = httpd_conn_read(c, WEB_MAX_HEADERS, h->lim.body_bytes, &rq, &buf);
    if (st == HTTPD_CLOSE) {
        hconn_close(h, c);
        return;
    }
    if (st == HTTP_NEED_MORE)
        return;
    if (st == HTTP_BAD)
        httpd_respond_text(c, rq.code, "bad request\n", 0);
    else
        serve(h, c, &rq, buf);
    if (c->fd < 0) /* upgraded: the slot is free, the socket a WebSocket's */
        return;
    int slot = slot_of(h, c);
    if (!h->polls[slot].x && !h->fetch[slot] && c->state == HTTPD_READ) /* not held, answered */
        hconn_send(h, c);
}

/* A held /down's connection is readable: its client went away (or sent what it must not). */
static void conn_held_read(struct webhttp *h, struct httpd_conn *c)
{
    ssize_t n = recv(c->fd, c->req, sizeof c->req, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
        n > 0)
        hconn_close(h, c);
}

static void on_conn_io(struct ev_loop *loop, ev_io *io, int revents)
{
    struct httpd_conn *c = io->data;
    struct webhttp *h = c->owner;
    if (c->state == HTTPD_WRITE) {
        if (httpd_conn_write(c, &web_limits))
            hconn_close(h, c);
    } else if (c->state == HTTPD_LINGER) {
        if (httpd_conn_linger(c, &web_limits))
            hconn_close(h, c);
    } else if (h->polls[slot_of(h, c)].x || h->fetch[slot_of(h, c)]) {
        conn_held_read(h, c);
    } else {
        hconn_read(h, c);
    }
}

static void on_conn_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct httpd_conn *c = t->data;
    struct webhttp *h = c->owner;
    struct webpoll *p = &h->polls[slot_of(h, c)];
    if (p->x)
        webhttp_poll_answer(h, p, 1, 0); /* the long poll's end: 204 */
    else
        hconn_close(h, c);
}

/* 1 if the source key src is one of web-trusted-proxies. */
static int src_trusted(const struct webhttp *h, const uint8_t src[16])
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};
    memcpy(&a.sin6_addr, src, 16);
    return cidr_set_contains(&h->trusted, (const struct sockaddr *)&a);
}

static void on_accept(struct ev_loop *loop, ev_io *io, int revents)
{
    struct webhttp *h = io->data;
    for (int i = 0; i < 16; i++) {
        uint8_t src[16];
        int fd = httpd_accept(h->lfd, src);
        if (fd == -2) { /* out of descriptors: wait instead of spinning */
            ev_io_stop(loop, &h->lio);
            ev_timer_start(loop, &h->retry);
            return;
        }
        if (fd < 0)
            return;
        webhttp_adopt(h, fd, src);
    }
}

/* A slot for fd from src (evicting as the slots' rules say), open; NULL (fd closed) if none. */
static struct httpd_conn *adopt(struct webhttp *h, int fd, const uint8_t src[16])
{
    int per = src_trusted(h, src) ? WEB_MAX_CONNS : WEB_MAX_PER_SOURCE;
    struct httpd_conn *c = httpd_slot_get(h->conns, WEB_MAX_CONNS, per, src);
    if (c && c->fd >= 0)
        hconn_close(h, c);
    if (!c) {
        close(fd);
        return NULL;
    }
    httpd_conn_open(c, h->loop, fd, src, WEB_READ_TIMEOUT);
    return c;
}

void webhttp_adopt(struct webhttp *h, int fd, const uint8_t src[16])
{
    adopt(h, fd, src);
}

static void on_retry(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct webhttp *h = t->data;
    ev_io_start(loop, &h->lio);
}

static void on_sweep(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct webhttp *h = t->data;
    websess_sweep(h->t, web_now());
}

/* Frames wait to go down on lane: its held /down or its WebSocket is answered before the loop
 * sleeps. */
static void on_lane_down(void *ctx, struct websess *s, uint32_t lane)
{
    struct webhttp *h = ctx;
    struct websx *x = webstream_sx(h, s);
    if (!x || h->stopped)
        return;
    int any = webws_mark(x, lane);
    for (struct webpoll *p = x->polls; p; p = p->next)
        if (p->lane == lane)
            any = p->ready = 1;
    if (any)
        ev_prepare_start(h->loop, &h->kick);
}

/* The session ends: a held /down gets the site's 404, then its streams and carrier state go
 * (webstream_end). */
static void on_session_end(void *ctx, struct websess *s)
{
    struct webhttp *h = ctx;
    struct websx *x = webstream_sx(h, s);
    while (x && x->polls)
        webhttp_poll_answer(h, x->polls, 0, 1);
    if (x)
        webws_close_all(x);
    webstream_end(h, s);
}

/* Stops everything on the loop (the worker's thread, before its loop ends): sessions end
 * (their streams' sockets close), connections and the listener close. */
static void web_stop(void *arg)
{
    struct webhttp *h = arg;
    if (h->stopped)
        return;
    ev_io_stop(h->loop, &h->lio);
    ev_timer_stop(h->loop, &h->retry);
    ev_timer_stop(h->loop, &h->sweep);
    ev_prepare_stop(h->loop, &h->kick);
    ev_idle_stop(h->loop, &h->idle);
    while (h->wsl)
        webws_close(h->wsl);
    websess_table_free(h->t);
    h->t = NULL;
    for (int i = 0; i < WEB_MAX_CONNS; i++)
        if (h->conns[i].fd >= 0)
            hconn_close(h, &h->conns[i]);
    if (h->lfd >= 0)
        close(h->lfd);
    h->lfd = -1;
    h->stopped = 1;
}

/* Requests other workers handed over: each served as if just read here. */
static void on_inbox(struct ev_loop *loop, ev_async *a, int revents)
{
    struct webhttp *h = a->data;
    pthread_mutex_lock(&h->inbox_mu);
    struct webmove *m = h->inbox;
    h->inbox = NULL;
    h->inbox_tail = &h->inbox;
    pthread_mutex_unlock(&h->inbox_mu);
    while (m) {
        struct webmove *next = m->next;
        struct httpd_conn *c = h->stopped ? NULL : adopt(h, m->fd, m->src);
        if (c && httpd_conn_preload(c, m->b, m->len) == 0)
            hconn_read(h, c); /* the whole request is there: served now */
        else if (c)
            hconn_close(h, c);
        free(m);
        m = next;
    }
}

/* One worker's server (its table counting in g->live). NULL if out of memory (lfd closed). */
static struct webhttp *server_new(struct webgroup *g, int index, struct proxy_worker *pw,
                                  int lfd, const struct options *opt)
{
    struct webhttp *h = calloc(1, sizeof *h);
    struct websess_hooks hooks;
    if (h) {
        h->sxmask = 255;
        h->sx = calloc(h->sxmask + 1, sizeof *h->sx);
        websess_limits_from(opt, &h->lim);
        h->lim.worker = (uint8_t)index;
        webstream_hooks(h, &hooks);
        hooks.on_end = on_session_end;
        hooks.on_down = on_lane_down;
        h->t = websess_table_new(&h->lim, &g->live, &hooks);
    }
    if (!h || !h->sx || !h->t) {
        if (h) {
            websess_table_free(h->t);
            free(h->sx);
        }
        free(h);
        close(lfd);
        return NULL;
    }
    h->pw = pw;
    h->loop = pw->w->loop;
    h->lfd = lfd;
    h->index = index;
    h->group = g;
    pthread_mutex_init(&h->inbox_mu, NULL);
    h->inbox_tail = &h->inbox;
    h->mode = opt->web_carrier == WEB_WEBSOCKET         ? WEBSESS_WEBSOCKET
              : opt->web_carrier == WEB_WEBSOCKET_LANES ? WEBSESS_WEBSOCKET_LANES
              : opt->web_carrier == WEB_HTTPS_LANES     ? WEBSESS_HTTPS_LANES
                                                        : WEBSESS_HTTPS;
    webcap_host(opt->web_host, strlen(opt->web_host), h->host, sizeof h->host);
    snprintf(h->root, sizeof h->root, "%s", opt->web_root);
    h->upstream_on = opt->web_upstream_on;
    h->upstream = opt->web_upstream;
    h->upstream_done = site_done;
    cidr_set_init(&h->trusted);
    for (int i = 0; i < opt->nweb_trusted; i++)
        cidr_set_add(&h->trusted, &opt->web_trusted[i]);
    cidr_set_finish(&h->trusted);
    for (int i = 0; i < WEB_MAX_CONNS; i++)
        httpd_conn_init(&h->conns[i], h, on_conn_io, on_conn_timer);
    ev_io_init(&h->lio, on_accept, lfd, EV_READ);
    ev_timer_init(&h->retry, on_retry, 0.25, 0);
    ev_timer_init(&h->sweep, on_sweep, 1.0, 1.0);
    ev_prepare_init(&h->kick, on_kick);
    ev_idle_init(&h->idle, on_idle);
    ev_async_init(&h->inbox_async, on_inbox);
    h->lio.data = h->retry.data = h->sweep.data = h->kick.data = h->idle.data = h;
    h->inbox_async.data = h;
    ev_io_start(h->loop, &h->lio);
    ev_timer_start(h->loop, &h->sweep);
    ev_async_start(h->loop, &h->inbox_async);
    pw->service_stop = web_stop;
    pw->service = h;
    return h;
}

/* Frees h once its worker's loop has ended (or never ran). */
static void server_free(struct webhttp *h)
{
    web_stop(h); /* a worker that never ran: its loop is still there */
    h->pw->service_stop = NULL;
    for (struct webmove *m = h->inbox, *next; m; m = next) { /* handed over, never served */
        next = m->next;
        close(m->fd);
        free(m);
    }
    pthread_mutex_destroy(&h->inbox_mu);
    for (size_t i = 0; i <= h->sxmask; i++)
        while (h->sx[i]) {
            struct websx *x = h->sx[i];
            h->sx[i] = x->next;
            free(x);
        }
    free(h->sx);
    free(h->caps);
    free(h->capuser);
    cidr_set_free(&h->trusted);
    free(h);
}

struct webgroup *webgroup_new(struct proxy_worker *pws, int n, const int *lfds,
                              const struct options *opt)
{
    struct webgroup *g = n > 0 && n <= WEB_MAX_WORKERS
                             ? calloc(1, sizeof *g + (size_t)n * sizeof g->h[0])
                             : NULL;
    if (g)
        websess_shared_init(&g->live);
    for (int i = 0; i < n; i++) {
        if (g && (g->h[i] = server_new(g, i, &pws[i], lfds[i], opt)) != NULL) {
            g->n = i + 1;
            continue;
        }
        if (!g) {
            close(lfds[i]);
            continue;
        }
        for (int k = i + 1; k < n; k++)
            close(lfds[k]);
        webgroup_free(g);
        return NULL;
    }
    return g;
}

struct webhttp *webgroup_server(struct webgroup *g, int i)
{
    return g && i >= 0 && i < g->n ? g->h[i] : NULL;
}

void webgroup_view(const struct webgroup *g, struct webhttp_view *v)
{
    v->n = 0;
    v->live = g ? &g->live : NULL;
    for (int i = 0; g && i < g->n; i++)
        if (g->h[i]->t)
            v->c[v->n++] = websess_counters(g->h[i]->t);
}

void webgroup_free(struct webgroup *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n; i++)
        server_free(g->h[i]);
    free(g);
}
