/* metrics_server.c: the metrics server: its thread, connections, routing, the API's listener. */
#include "admin/metrics.h"
#include "admin/metrics_render.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/log.h"
#include "core/worker.h"
#include "proto/http.h"
#include "admin/api.h"
#include "config/prefix.h"
#include "admin/qr.h"
#include "config/reload.h"
#include "admin/userpage.h"

/* The status page (src/admin/status.html), embedded at build time. */
extern const char metrics_status_html[];
extern const size_t metrics_status_html_len;

int metrics_host_is_loopback(const char *host)
{
    char name[256];
    const char *port;
    if (host[0] == '[') { /* [v6]:port */
        const char *e = strchr(host, ']');
        if (!e || (size_t)(e - host - 1) >= sizeof name)
            return 0;
        memcpy(name, host + 1, (size_t)(e - host - 1));
        name[e - host - 1] = 0;
        port = e + 1;
        struct in6_addr a6;
        if (inet_pton(AF_INET6, name, &a6) != 1 || !IN6_IS_ADDR_LOOPBACK(&a6))
            return 0;
    } else {
        const char *c = strchr(host, ':');
        size_t n = c ? (size_t)(c - host) : strlen(host);
        if (n >= sizeof name)
            return 0;
        memcpy(name, host, n);
        name[n] = 0;
        port = host + n;
        struct in_addr a4;
        if (strcasecmp(name, "localhost") != 0 &&
            !(inet_pton(AF_INET, name, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127))
            return 0;
    }
    if (!*port)
        return 1;
    if (*port++ != ':' || !*port || strlen(port) > 5)
        return 0;
    for (; *port; port++)
        if (*port < '0' || *port > '9')
            return 0;
    return 1;
}

int metrics_shared_init(struct metrics_shared *ms, const struct options *opt,
                        struct proxy_worker *pws, struct worker *ws, int nworkers,
                        struct replay *replay)
{
    memset(ms, 0, sizeof *ms);
    ms->opt = opt;
    ms->pws = pws;
    ms->ws = ws;
    ms->nworkers = nworkers;
    ms->replay = replay;
    ms->start_time = time(NULL);
    ms->loopback = sock_addr_is_loopback(&opt->metrics_addr);
    return 0;
}

/* --- the server ------------------------------------------------------------------------ */

/* A response body: shared by every connection sending it and by the cache (one reference
 * each); the last reference frees it, so a slow reader keeps an old body alive while the
 * cache moves on. Only the server's thread touches it. */
struct mbody {
    int refs;
    int owned;         /* p is the body's own memory (else static: the status page) */
    const char *p;
    size_t len, cap;
    struct metrics_server *home; /* a cached body: its memory goes to home's spare[kind] */
    int kind;
    uint64_t serial;   /* the generation it was rendered from */
    double born;       /* when its rendering started (seconds, monotonic) */
    double cost;       /* the CPU time its rendering took (seconds) */
};

enum { MB_METRICS, MB_STATS, MB_COUNT };

/* The memory of a cached body no longer used, for the next rendering of its kind: in steady
 * state rendering allocates nothing (no mmap, munmap or page faults, which would make the
 * relays' threads wait for the process's memory map or a TLB flush). */
struct mspare {
    char *p;
    size_t cap;
};

struct metrics_conn {
    struct metrics_server *s;
    int fd;                 /* -1: slot free */
    ev_io io;
    ev_timer timer;
    ev_tstamp born;
    uint8_t src[16];        /* the peer's address (IPv4 as ::ffff:a.b.c.d) */
    enum { MC_READ = 0, MC_WRITE, MC_LINGER } state;
    int api;                /* accepted on the API's listener */
    uint8_t *big;           /* API: a request whose body outgrows req (head and body) */
    size_t bigcap;
    size_t len;             /* request bytes in req (or big) */
    uint8_t req[METRICS_REQ_MAX];
    char head[1280];        /* status line and headers, then a short text body if any */
    size_t head_len;
    struct mbody *body;     /* a reference, or NULL (no body, or HEAD) */
    size_t off;             /* bytes of head, then body, written */
};

struct metrics_server {
    struct metrics_shared *ms;
    int lfd;                /* -1: only the API */
    int napi;               /* API connections open (at most API_MAX_CONNS) */
    int alfd;               /* the API's listener, or -1 */
    ev_io alio;
    struct api *api;
    struct ev_loop *loop;   /* made by metrics_server_start (after any fork) */
    pthread_t thread;
    int started;
    ev_io lio;
    ev_timer retry;         /* accepting again after running out of descriptors */
    ev_async wake;          /* a new generation, or stop */
    _Atomic int stop;
    struct gen *_Atomic next_gen; /* posted by main, one reference */
    struct gen *gen;              /* served now, one reference */
    struct mbody *cache[MB_COUNT];
    struct mspare spare[MB_COUNT];
    struct mbody *status_page;
    ev_timer hist_timer;            /* once a second: the traffic history rings */
    struct hist_ring *hist;         /* the whole proxy's (NULL: out of memory) */
    struct hist_users hist_users;   /* the users being viewed */
    struct upage_row *rows;         /* the user list's rows, one per user of gen */
    size_t rows_cap;
    struct metrics_stats stats;
    struct metrics_conn conns[METRICS_MAX_CONNS];
};

static double clock_now(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct mbody *body_new(const char *p, size_t len, int owned)
{
    struct mbody *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->refs = 1;
    b->owned = owned;
    b->p = p;
    b->len = len;
    return b;
}

static void body_unref(struct mbody *b)
{
    if (!b || --b->refs > 0)
        return;
    struct mspare *sp = b->home ? &b->home->spare[b->kind] : NULL;
    if (sp && !sp->p) {
        sp->p = (char *)b->p;
        sp->cap = b->cap;
    } else if (b->owned) {
        free((char *)b->p);
    }
    free(b);
}

/* An sbuf's text as a body (the sbuf is emptied), or NULL (it failed, or out of memory). */
static struct mbody *body_of(struct sbuf *out)
{
    struct mbody *b = out->failed ? NULL : body_new(out->p ? out->p : "", out->len, out->p != NULL);
    if (!b)
        sbuf_free(out);
    else
        b->cap = out->cap;
    return b;
}

/* /metrics or /stats (which) as served now: the cached body while it is fresh (rendered from
 * the generation served now, less than METRICS_CACHE_FACTOR times the CPU time its rendering
 * took ago, at most METRICS_CACHE_MAX), else a new one, cached. CPU time, not wall time: a
 * render that waited for the CPU (the relays come first) cost the process nothing more.
 * Returns a reference, or NULL (out of memory, or larger than METRICS_BODY_MAX). */
static struct mbody *body_get(struct metrics_server *s, int which, int links)
{
    double now = clock_now(CLOCK_MONOTONIC), cpu = clock_now(CLOCK_THREAD_CPUTIME_ID);
    struct mbody *b = s->cache[which];
    if (b && b->serial == s->gen->serial) {
        double ttl = METRICS_CACHE_FACTOR * b->cost;
        if (now - b->born < (ttl < METRICS_CACHE_MAX ? ttl : METRICS_CACHE_MAX)) {
            b->refs++;
            return b;
        }
    }
    struct mspare *sp = &s->spare[which];
    struct sbuf out = {.p = sp->p, .cap = sp->cap, .max = METRICS_BODY_MAX};
    *sp = (struct mspare){0};
    if (which == MB_METRICS)
        metrics_render_prometheus(s->ms, s->gen, &out);
    else
        metrics_render_json(s->ms, s->gen, links, &out);
    STAT_INC(&s->stats.renders);
    if (!(b = body_of(&out)))
        return NULL;
    b->home = s;
    b->kind = which;
    b->serial = s->gen->serial;
    b->born = now;
    b->cost = clock_now(CLOCK_THREAD_CPUTIME_ID) - cpu;
    body_unref(s->cache[which]);
    s->cache[which] = b;
    b->refs++;
    return b;
}

static void mconn_close(struct metrics_conn *m)
{
    struct ev_loop *loop = m->s->loop;
    if (m->api && m->s->napi-- == API_MAX_CONNS && m->s->alfd >= 0)
        ev_io_start(loop, &m->s->alio); /* a slot for the next queued API client */
    ev_io_stop(loop, &m->io);
    ev_timer_stop(loop, &m->timer);
    close(m->fd);
    m->fd = -1;
    body_unref(m->body);
    m->body = NULL;
    free(m->big);
    m->big = NULL;
    m->bigcap = 0;
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

/* (Re)arms m's deadline: timeout seconds from now. */
static void mconn_deadline(struct metrics_conn *m, double timeout)
{
    ev_timer_stop(m->s->loop, &m->timer);
    ev_timer_set(&m->timer, timeout, 0);
    ev_timer_start(m->s->loop, &m->timer);
}

/* (Re)arms m's watcher for events and its deadline. */
static void mconn_watch(struct metrics_conn *m, int events, double timeout)
{
    struct ev_loop *loop = m->s->loop;
    ev_io_stop(loop, &m->io);
    ev_io_set(&m->io, m->fd, events);
    ev_io_start(loop, &m->io);
    mconn_deadline(m, timeout);
}

/* Writes what is left of the response: the head, then the shared body from m->off on, at
 * most METRICS_SEND_CHUNK bytes a call; every send that moves bytes restarts the
 * METRICS_WRITE_IDLE deadline. Once all is written: FIN,
 * then a lingering close (bytes the client pipelined are read and dropped for a moment, so
 * that closing with them unread does not reset the connection before the client read the
 * answer). */
static void mconn_write(struct metrics_conn *m)
{
    size_t blen = m->body ? m->body->len : 0, total = m->head_len + blen;
    int moved = 0;
    while (m->off < total) {
        struct iovec iov[2];
        int n = 0;
        if (m->off < m->head_len)
            iov[n++] = (struct iovec){m->head + m->off, m->head_len - m->off};
        size_t bo = m->off > m->head_len ? m->off - m->head_len : 0;
        if (bo < blen)
            iov[n++] = (struct iovec){(char *)m->body->p + bo,
                                      blen - bo < METRICS_SEND_CHUNK ? blen - bo
                                                                     : METRICS_SEND_CHUNK};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t r = sendmsg(m->fd, &mh, MSG_NOSIGNAL);
        enum io_step st = io_step(r);
        if (st == IO_WAIT) {
            if (moved)
                mconn_deadline(m, METRICS_WRITE_IDLE);
            return;
        }
        if (st == IO_END) {
            mconn_close(m);
            return;
        }
        if (st == IO_MOVED) {
            m->off += (size_t)r;
            moved = 1;
        }
    }
    shutdown(m->fd, SHUT_WR);
    body_unref(m->body);
    m->body = NULL;
    m->state = MC_LINGER;
    m->len = 0;
    mconn_watch(m, EV_READ, METRICS_LINGER_TIMEOUT);
}

/* Lingering close: drops what the client still sends until its EOF, a cap or the timer. */
static void mconn_linger(struct metrics_conn *m)
{
    for (;;) {
        ssize_t n = recv(m->fd, m->req, sizeof m->req, 0);
        enum io_step st = io_step(n);
        if (st == IO_WAIT)
            return;
        if (st == IO_END || (st == IO_MOVED && (m->len += (size_t)n) >= METRICS_LINGER_MAX)) {
            mconn_close(m);
            return;
        }
    }
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

/* Sets m's response: head, then body (a reference handed over; dropped for HEAD), or the
 * short text (body NULL; at most a few hundred bytes). */
static void respond(struct metrics_conn *m, int code, const char *type, struct mbody *body,
                    const char *text, int head_only)
{
    size_t len = body ? body->len : strlen(text);
    int n = snprintf(m->head, sizeof m->head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\nCache-Control: no-store\r\n"
                     "X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n"
                     "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; "
                     "style-src 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
                     "base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n%s\r\n%s",
                     code, status_text(code), type, len,
                     code == 401 ? "WWW-Authenticate: Bearer realm=\"mtproxy\"\r\n" : "",
                     body || head_only ? "" : text);
    m->head_len = n < 0 ? 0 : (size_t)n < sizeof m->head ? (size_t)n : sizeof m->head - 1;
    if (head_only) {
        body_unref(body);
        body = NULL;
    }
    m->body = body;
}

static void respond_text(struct metrics_conn *m, int code, const char *text, int head_only)
{
    respond(m, code, "text/plain; charset=utf-8", NULL, text, head_only);
}

/* /qr/NAME.svg: the t.me link of user NAME of g as a QR code, or NULL. */
static struct mbody *qr_body(const struct gen *g, const char *name)
{
    size_t n = strlen(name);
    const struct options *o = &g->opt;
    char host[256];
    int port = options_link_host(o, host, sizeof host);
    for (int i = 0; n > 4 && !strcmp(name + n - 4, ".svg") && i < o->nsecrets; i++) {
        if (strlen(o->secrets[i].name) != n - 4 || memcmp(o->secrets[i].name, name, n - 4))
            continue;
        char tg[1024], https[1024];
        struct sbuf out = {.max = METRICS_BODY_MAX};
        port = prefix_link_host(o, i, host, sizeof host, port);
        if (secret_links(&o->secrets[i], host, port, tg, sizeof tg, https, sizeof https) ||
            qr_svg(https, 4, &out)) {
            sbuf_free(&out);
            return NULL;
        }
        return body_of(&out);
    }
    return NULL;
}

/* --- the status page for many users: the user list, one user, the history (userpage.c) --- */

/* The query string of m's request line (after '?', not decoded) into q ("" if none). */
static void request_query(const struct metrics_conn *m, char *q, size_t qlen)
{
    const uint8_t *p = memchr(m->req, ' ', m->len), *end = m->req + m->len;
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

/* The index of user name in g, or -1. */
static int user_index(const struct gen *g, const char *name)
{
    for (int i = 0; i < g->opt.nsecrets; i++)
        if (!strcmp(g->opt.secrets[i].name, name))
            return i;
    return -1;
}

/* GET /users?offset=&limit=&q=&sort=&order=: one page of the users searched and sorted, no
 * links. NULL with *why set on a bad query (or out of memory). */
static struct mbody *users_body(struct metrics_server *s, const char *query, int links,
                               const char **why)
{
    const struct gen *g = s->gen;
    struct upage_query uq;
    if (upage_parse(query, &uq, why))
        return NULL;
    *why = "out of memory"; /* from here on, the only failure */
    size_t n = (size_t)g->opt.nsecrets;
    if (n > s->rows_cap) {
        struct upage_row *r = realloc(s->rows, n * sizeof *r);
        if (!r)
            return NULL;
        s->rows = r;
        s->rows_cap = n;
    }
    for (size_t i = 0; i < n; i++) {
        struct user_totals ut;
        metrics_user_totals(g, (int)i, &ut);
        s->rows[i] = (struct upage_row){.name = g->opt.secrets[i].name, .idx = (uint32_t)i,
                                        .bytes = ut.bytes_up + ut.bytes_down,
                                        .conns = ut.conns, .active = ut.active,
                                        .quota_used = ut.quota_used};
    }
    size_t k = upage_filter(s->rows, n, uq.q);
    upage_sort(s->rows, k, uq.sort, uq.desc);
    char host[256];
    int port = options_link_host(&g->opt, host, sizeof host);
    struct sbuf out = {.max = METRICS_BODY_MAX};
    struct metrics_totals *t = malloc(sizeof *t);
    if (!t)
        return NULL;
    metrics_totals_collect(s->ms, t);
    metrics_stats_head(s->ms, t, links, &out);
    free(t);
    sbuf_printf(&out, ",\"user_addr\":%s,\"total\":%zu,\"matched\":%zu,\"offset\":%zu,"
                "\"limit\":%zu,\"sort\":\"%s\",\"order\":\"%s\",\"users\":[",
                g->opt.user_addr ? "true" : "false", n, k, uq.offset, uq.limit,
                upage_sort_name(uq.sort), uq.desc ? "desc" : "asc");
    for (size_t i = uq.offset; i < k && i < uq.offset + uq.limit; i++) {
        sbuf_printf(&out, "%s", i > uq.offset ? "," : "");
        metrics_user_json(g, (int)s->rows[i].idx, host, port, 0, &out);
    }
    sbuf_printf(&out, "]}\n");
    return body_of(&out);
}

/* GET /users/NAME: user NAME with its links (if links), or NULL (no such user). */
static struct mbody *user_body(struct metrics_server *s, const char *path, int links)
{
    char name[SECRET_NAME_MAX + 1];
    int i;
    if (http_pct_decode(path, strlen(path), name, sizeof name, 0) < 0 ||
        (i = user_index(s->gen, name)) < 0)
        return NULL;
    char host[256];
    int port = options_link_host(&s->gen->opt, host, sizeof host);
    struct sbuf out = {.max = METRICS_BODY_MAX};
    sbuf_printf(&out, "{\"links\":%s,\"user\":", links ? "true" : "false");
    metrics_user_json(s->gen, i, host, port, links, &out);
    sbuf_printf(&out, "}\n");
    return body_of(&out);
}

/* GET /history (name NULL) or /history/NAME: the last hour per second. A user's is kept
 * from the first time it is asked for (HIST_USERS users at most: the least recently viewed
 * is dropped). NULL: no such user, or out of memory. */
static struct mbody *history_body(struct metrics_server *s, const char *path)
{
    const struct hist_ring *r = s->hist;
    char name[SECRET_NAME_MAX + 1] = "";
    if (path) {
        if (http_pct_decode(path, strlen(path), name, sizeof name, 0) < 0 ||
            user_index(s->gen, name) < 0)
            return NULL;
        r = hist_users_get(&s->hist_users, name, clock_now(CLOCK_MONOTONIC));
    }
    if (!r)
        return NULL;
    struct sbuf out = {.max = METRICS_BODY_MAX};
    sbuf_printf(&out, "{\"user\":");
    if (path)
        sbuf_printf(&out, "\"%s\"", name);
    else
        sbuf_printf(&out, "null");
    sbuf_printf(&out, ",\"users_kept\":%d,\"history\":", HIST_USERS);
    hist_json(r, &out);
    sbuf_printf(&out, "}\n");
    return body_of(&out);
}

/* Once a second on the server's thread: the counters (relaxed reads, as /stats) into the
 * rings; nothing runs on the relays' loops. */
static void on_hist_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct metrics_server *s = t->data;
    (void)loop, (void)revents;
    int64_t now = (int64_t)clock_now(CLOCK_MONOTONIC);
    struct metrics_totals *tt = malloc(sizeof *tt);
    if (s->hist && tt) {
        metrics_totals_collect(s->ms, tt);
        hist_sample(s->hist, now, STAT_GET(&tt->s.bytes_up) + STAT_GET(&tt->s.bytes_down),
                    STAT_GET(&tt->s.accepted), STAT_GET(&tt->s.active));
    }
    free(tt);
    for (int k = 0; k < HIST_USERS; k++) {
        struct hist_user *hu = &s->hist_users.u[k];
        int i = hu->name[0] && hu->ring ? user_index(s->gen, hu->name) : -1;
        struct user_totals ut = {0};
        if (i >= 0)
            metrics_user_totals(s->gen, i, &ut);
        if (hu->name[0] && hu->ring) /* a user gone counts nothing */
            hist_sample(hu->ring, now, ut.bytes_up + ut.bytes_down, ut.conns, ut.active);
    }
}

/* Serves the paths above; 0 if path is not one of them. */
static int serve_userpage(struct metrics_conn *m, const struct http_request *rq, int links,
                          int head)
{
    struct metrics_server *s = m->s;
    struct mbody *body = NULL;
    if (!strcmp(rq->path, "/users")) {
        char query[METRICS_REQ_MAX];
        const char *why = NULL;
        request_query(m, query, sizeof query);
        if (!(body = users_body(s, query, links, &why))) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s\n", why);
            respond_text(m, strcmp(why, "out of memory") ? 400 : 503, msg, head);
            return 1;
        }
    } else if (!strncmp(rq->path, "/users/", 7)) {
        body = user_body(s, rq->path + 7, links);
    } else if (!strcmp(rq->path, "/history")) {
        body = history_body(s, NULL);
    } else if (!strncmp(rq->path, "/history/", 9)) {
        body = history_body(s, rq->path + 9);
    } else {
        return 0;
    }
    if (!body)
        respond_text(m, 404, "no such user\n", head);
    else
        respond(m, 200, "application/json", body, NULL, head);
    return 1;
}

/* Serves one parsed request: sets m's response. */
static void serve(struct metrics_conn *m, const struct http_request *rq)
{
    struct metrics_server *s = m->s;
    const struct metrics_shared *ms = s->ms;
    const struct gen *g = s->gen; /* the users, links and token served now */
    const char *token = g->opt.metrics_token;
    int head = rq->method == HTTP_HEAD;
    if (token[0] && !((rq->has_bearer && http_token_equal(rq->bearer, token)) ||
                      (rq->has_token && http_token_equal(rq->token, token)))) {
        STAT_INC(&s->stats.unauthorized);
        respond_text(m, 401, "a token is needed: Authorization: Bearer TOKEN or ?token=TOKEN\n",
                     head);
        return;
    }
    /* Links are served for the address alone: a page of another site that the browser
     * resolved to loopback (DNS rebinding) must not read them; its Host is that site's. */
    if (!token[0] && ms->loopback && rq->has_host && !metrics_host_is_loopback(rq->host)) {
        STAT_INC(&s->stats.misdirected);
        respond_text(m, 421, "this server answers only to Host: localhost, 127.0.0.1 or [::1] "
                     "(or with metrics-token)\n", head);
        return;
    }
    int links = token[0] || ms->loopback;
    struct mbody *body = NULL;
    const char *type = NULL;
    if (!strcmp(rq->path, "/metrics")) {
        body = body_get(s, MB_METRICS, links);
        type = "text/plain; version=0.0.4; charset=utf-8";
    } else if (!strcmp(rq->path, "/stats")) {
        body = body_get(s, MB_STATS, links);
        type = "application/json";
    } else if (!strcmp(rq->path, "/")) {
        if ((body = s->status_page))
            body->refs++;
        type = "text/html; charset=utf-8";
    } else if (serve_userpage(m, rq, links, head)) {
        return;
    } else if (!strncmp(rq->path, "/qr/", 4) && links) {
        if (!(body = qr_body(g, rq->path + 4))) {
            respond_text(m, 404, "no such user, or no QR codes in this build\n", head);
            return;
        }
        type = "image/svg+xml";
    } else {
        respond_text(m, 404, "not found: try /, /metrics, /stats, /users or /history\n", head);
        return;
    }
    if (!body) {
        respond_text(m, 503, "out of memory\n", head);
        return;
    }
    respond(m, 200, type, body, NULL, head);
}

/* An API request (its body follows the head): the answer is JSON. */
static void serve_api(struct metrics_conn *m, const struct http_request *rq, const uint8_t *buf)
{
    struct sbuf out = {.max = METRICS_BODY_MAX};
    int code = api_serve(m->s->api, rq, (const char *)buf + rq->consumed, rq->content_length,
                         &out);
    if (code == 401)
        STAT_INC(&m->s->stats.unauthorized);
    struct mbody *b = body_of(&out);
    if (!b)
        respond_text(m, 503, "out of memory\n", 0);
    else
        respond(m, code, "application/json", b, NULL, rq->method == HTTP_HEAD);
}

static void mconn_read(struct metrics_conn *m)
{
    for (;;) {
        uint8_t *buf = m->big ? m->big : m->req;
        size_t cap = m->big ? m->bigcap : sizeof m->req;
        if (m->len >= cap)
            break;
        ssize_t n = recv(m->fd, buf + m->len, cap - m->len, 0);
        enum io_step st = io_step(n);
        if (st == IO_WAIT)
            break;
        if (st == IO_END) {
            mconn_close(m); /* EOF or error before a whole request */
            return;
        }
        if (st == IO_MOVED)
            m->len += (size_t)n;
    }
    struct http_request rq;
    const uint8_t *buf = m->big ? m->big : m->req;
    enum http_status st = http_parse_request_body(buf, m->len, sizeof m->req, METRICS_MAX_HEADERS,
                                                  m->api ? API_BODY_MAX : 0, &rq);
    if (st == HTTP_NEED_MORE)
        return;
    if (st == HTTP_OK && m->len < rq.consumed + rq.content_length) { /* the body's rest */
        size_t need = rq.consumed + rq.content_length;
        if (need > (m->big ? m->bigcap : sizeof m->req)) {
            uint8_t *big = malloc(need);
            if (!big) {
                mconn_close(m);
                return;
            }
            memcpy(big, buf, m->len);
            free(m->big);
            m->big = big;
            m->bigcap = need;
        }
        return; /* level-triggered: bytes still queued wake us again */
    }
    if (st == HTTP_BAD) {
        STAT_INC(&m->s->stats.bad_requests);
        char msg[160];
        snprintf(msg, sizeof msg, "%s\n", rq.why);
        respond_text(m, rq.code, msg, 0);
    } else if (m->api) {
        serve_api(m, &rq, buf);
    } else {
        serve(m, &rq);
    }
    STAT_INC(&m->s->stats.requests);
    /* One request per connection: anything pipelined after it is never served. */
    m->state = MC_WRITE;
    m->off = 0;
    mconn_watch(m, EV_WRITE, METRICS_WRITE_IDLE);
    mconn_write(m);
}

static void on_mconn_io(struct ev_loop *loop, ev_io *io, int revents)
{
    struct metrics_conn *m = io->data;
    if (m->state == MC_WRITE)
        mconn_write(m);
    else if (m->state == MC_LINGER)
        mconn_linger(m);
    else
        mconn_read(m);
}

static void on_mconn_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct metrics_conn *m = t->data;
    if (m->state != MC_LINGER)
        STAT_INC(&m->s->stats.timeouts);
    mconn_close(m);
}

/* Closes m to give its slot to a new connection. */
static struct metrics_conn *slot_evict(struct metrics_server *s, struct metrics_conn *m)
{
    if (m->state == MC_READ)
        STAT_INC(&s->stats.evicted);
    mconn_close(m);
    return m;
}

/* A slot for a new connection from src: a source that already has METRICS_MAX_PER_SOURCE
 * connections gets the slot of its own oldest one not writing a response (or none); else a
 * free slot, or the slot of the oldest connection not writing a response. NULL: none. */
static struct metrics_conn *slot_get(struct metrics_server *s, const uint8_t src[16])
{
    struct metrics_conn *free_slot = NULL, *oldest = NULL, *oldest_mine = NULL;
    int mine = 0;
    for (int i = 0; i < METRICS_MAX_CONNS; i++) {
        struct metrics_conn *m = &s->conns[i];
        if (m->fd < 0) {
            if (!free_slot)
                free_slot = m;
            continue;
        }
        int same = !memcmp(m->src, src, 16);
        mine += same;
        if (m->state == MC_WRITE || m->api) /* API clients wait their turn: never evicted */
            continue;
        if (!oldest || m->born < oldest->born)
            oldest = m;
        if (same && (!oldest_mine || m->born < oldest_mine->born))
            oldest_mine = m;
    }
    if (mine >= METRICS_MAX_PER_SOURCE)
        return oldest_mine ? slot_evict(s, oldest_mine) : NULL;
    if (free_slot)
        return free_slot;
    return oldest ? slot_evict(s, oldest) : NULL;
}

/* A free slot for an API connection, or NULL. */
static struct metrics_conn *slot_free(struct metrics_server *s)
{
    for (int i = 0; i < METRICS_MAX_CONNS; i++)
        if (s->conns[i].fd < 0)
            return &s->conns[i];
    return NULL;
}

static void source_key(const struct sockaddr_storage *ss, uint8_t k[16])
{
    memset(k, 0, 16);
    if (ss->ss_family == AF_INET) {
        k[10] = k[11] = 0xff;
        memcpy(k + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        memcpy(k, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    }
}

static void on_metrics_accept(struct ev_loop *loop, ev_io *io, int revents)
{
    struct metrics_server *s = io->data;
    int api = io == &s->alio;
    for (int i = 0; i < 16; i++) {
        if (api && s->napi >= API_MAX_CONNS) {
            /* More API clients wait in the listen queue (calls are one at a time anyway);
             * they are not refused, and a metrics flood cannot push them out. */
            ev_io_stop(loop, &s->alio);
            return;
        }
        if (api && !slot_free(s)) { /* every slot busy: try again in a moment */
            ev_io_stop(loop, &s->alio);
            ev_timer_start(loop, &s->retry);
            return;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(io->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                       errno == ENOMEM)) {
            /* Out of descriptors: the socket stays readable; wait instead of spinning. */
            ev_io_stop(loop, &s->lio);
            ev_io_stop(loop, &s->alio);
            ev_timer_start(loop, &s->retry);
            return;
        }
        if (fd < 0)
            return; /* EAGAIN, or a connection that went away */
        uint8_t src[16];
        source_key(&ss, src);
        struct metrics_conn *m = api ? slot_free(s) : slot_get(s, src);
        if (!m) {
            close(fd);
            STAT_INC(&s->stats.evicted);
            continue;
        }
        m->fd = fd;
        m->api = api;
        s->napi += api;
        memcpy(m->src, src, 16);
        m->len = 0;
        m->off = 0;
        m->head_len = 0;
        m->body = NULL;
        m->state = MC_READ;
        m->born = ev_now(loop);
        ev_io_set(&m->io, fd, EV_READ);
        ev_io_start(loop, &m->io);
        ev_timer_set(&m->timer, api ? API_READ_TIMEOUT : METRICS_READ_TIMEOUT, 0);
        ev_timer_start(loop, &m->timer);
    }
}

static void on_metrics_retry(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct metrics_server *s = t->data;
    if (s->lfd >= 0)
        ev_io_start(loop, &s->lio);
    if (s->alfd >= 0)
        ev_io_start(loop, &s->alio);
}

/* A new generation (its cached bodies go stale with it), or stop. */
static void on_metrics_wake(struct ev_loop *loop, ev_async *a, int revents)
{
    struct metrics_server *s = a->data;
    struct gen *g = atomic_exchange(&s->next_gen, NULL);
    if (g) {
        gen_unref(s->gen);
        s->gen = g;
    }
    if (atomic_load(&s->stop))
        ev_break(loop, EVBREAK_ALL);
}

struct metrics_server *metrics_server_new(struct metrics_shared *ms, struct gen *g, int lfd)
{
    struct metrics_server *s = calloc(1, sizeof *s);
    if (s)
        s->status_page = body_new(metrics_status_html, metrics_status_html_len, 0);
    if (!s || !s->status_page) {
        free(s);
        close(lfd);
        return NULL;
    }
    s->ms = ms;
    ms->http = &s->stats;
    s->lfd = lfd;
    s->alfd = -1;
    gen_ref(g);
    s->gen = g;
    for (int i = 0; i < METRICS_MAX_CONNS; i++) {
        struct metrics_conn *m = &s->conns[i];
        m->s = s;
        m->fd = -1;
        ev_io_init(&m->io, on_mconn_io, -1, EV_READ);
        m->io.data = m;
        ev_timer_init(&m->timer, on_mconn_timer, METRICS_READ_TIMEOUT, 0);
        m->timer.data = m;
    }
    ev_io_init(&s->lio, on_metrics_accept, lfd, EV_READ);
    s->lio.data = s;
    ev_io_init(&s->alio, on_metrics_accept, -1, EV_READ);
    s->alio.data = s;
    ev_timer_init(&s->retry, on_metrics_retry, 0.25, 0);
    s->retry.data = s;
    ev_async_init(&s->wake, on_metrics_wake);
    s->wake.data = s;
    s->hist = calloc(1, sizeof *s->hist);
    ev_timer_init(&s->hist_timer, on_hist_timer, 1.0, 1.0);
    s->hist_timer.data = s;
    return s;
}

/* The server thread: the smallest share of a CPU, so that relays always win
 * (worker_thread_idle). */
static void *metrics_thread(void *arg)
{
    struct metrics_server *s = arg;
    worker_thread_idle("metrics");
    ev_run(s->loop, 0);
    return NULL;
}

int metrics_server_start(struct metrics_server *s)
{
    if (!(s->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK)))
        return ENOMEM;
    if (s->lfd >= 0)
        ev_io_start(s->loop, &s->lio);
    if (s->alfd >= 0)
        ev_io_start(s->loop, &s->alio);
    ev_async_start(s->loop, &s->wake);
    ev_async_send(s->loop, &s->wake); /* a generation posted before the start */
    ev_timer_start(s->loop, &s->hist_timer);
    on_hist_timer(s->loop, &s->hist_timer, 0); /* primes the rings */
    int rc = pthread_create(&s->thread, NULL, metrics_thread, s);
    if (rc)
        return rc;
    s->started = 1;
    return 0;
}

/* The API's view of the generation: the newest posted, adopted now (its caller waited for a
 * reload that posted one). */
static struct gen *api_current_gen(void *arg)
{
    struct metrics_server *s = arg;
    struct gen *g = atomic_exchange(&s->next_gen, NULL);
    if (g) {
        gen_unref(s->gen);
        s->gen = g;
    }
    return s->gen;
}

int metrics_server_add_api(struct metrics_server *s, int fd, struct api_reloads *rl)
{
    if (!(s->api = api_new(rl, api_current_gen, s))) {
        close(fd);
        return -1;
    }
    s->alfd = fd;
    ev_io_set(&s->alio, fd, EV_READ);
    return 0;
}

void metrics_server_post_gen(struct metrics_server *s, struct gen *g)
{
    gen_ref(g);
    gen_unref(atomic_exchange(&s->next_gen, g));
    if (s->loop)
        ev_async_send(s->loop, &s->wake);
}

void metrics_server_stop(struct metrics_server *s)
{
    if (!s || !s->started)
        return;
    atomic_store(&s->stop, 1);
    ev_async_send(s->loop, &s->wake);
    pthread_join(s->thread, NULL);
    s->started = 0;
}

void metrics_server_free(struct metrics_server *s)
{
    if (!s)
        return;
    for (int i = 0; i < METRICS_MAX_CONNS; i++) {
        struct metrics_conn *m = &s->conns[i];
        if (m->fd >= 0)
            close(m->fd);
        body_unref(m->body);
    }
    for (int i = 0; i < MB_COUNT; i++)
        body_unref(s->cache[i]);
    for (int i = 0; i < MB_COUNT; i++)
        free(s->spare[i].p);
    body_unref(s->status_page);
    free(s->hist);
    hist_users_free(&s->hist_users);
    free(s->rows);
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->alfd >= 0)
        close(s->alfd);
    api_free(s->api);
    if (s->loop)
        ev_loop_destroy(s->loop);
    gen_unref(s->gen);
    gen_unref(atomic_exchange(&s->next_gen, NULL));
    s->ms->http = NULL;
    free(s);
}
