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
#include "admin/httpd.h"
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

enum { MB_METRICS, MB_STATS, MB_COUNT };

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
    struct httpd_cache cache[MB_COUNT];
    struct httpd_body *status_page;
    ev_timer hist_timer;            /* once a second: the traffic history rings */
    struct hist_ring *hist;         /* the whole proxy's (NULL: out of memory) */
    struct hist_users hist_users;   /* the users being viewed */
    struct upage_row *rows;         /* the user list's rows, one per user of gen */
    size_t rows_cap;
    struct metrics_stats stats;
    struct httpd_conn conns[METRICS_MAX_CONNS];
};

/* The connections' timeouts and caps. */
static const struct httpd_limits metrics_limits = {
    .write_idle = METRICS_WRITE_IDLE,
    .linger_timeout = METRICS_LINGER_TIMEOUT,
    .linger_max = METRICS_LINGER_MAX,
    .send_chunk = METRICS_SEND_CHUNK,
};

/* /metrics or /stats (which) as served now: the cached body while it is fresh (rendered from
 * the generation served now, less than METRICS_CACHE_FACTOR times the CPU time its rendering
 * took ago, at most METRICS_CACHE_MAX), else a new one, cached. CPU time, not wall time: a
 * render that waited for the CPU (the relays come first) cost the process nothing more.
 * Returns a reference, or NULL (out of memory, or larger than METRICS_BODY_MAX). */
static struct httpd_body *body_get(struct metrics_server *s, int which, int links)
{
    double now = httpd_clock(CLOCK_MONOTONIC), cpu = httpd_clock(CLOCK_THREAD_CPUTIME_ID);
    struct httpd_cache *c = &s->cache[which];
    struct httpd_body *b = httpd_cache_fresh(c, s->gen->serial, now, METRICS_CACHE_FACTOR,
                                             METRICS_CACHE_MAX);
    if (b)
        return b;
    struct sbuf out = httpd_cache_sbuf(c, METRICS_BODY_MAX);
    if (which == MB_METRICS)
        metrics_render_prometheus(s->ms, s->gen, &out);
    else
        metrics_render_json(s->ms, s->gen, links, &out);
    STAT_INC(&s->stats.renders);
    return httpd_cache_put(c, &out, s->gen->serial, now,
                           httpd_clock(CLOCK_THREAD_CPUTIME_ID) - cpu);
}

/* Closes m (an API connection's slot lets the next queued API client in). */
static void mconn_close(struct httpd_conn *m)
{
    struct metrics_server *s = m->owner;
    if (m->pinned && s->napi-- == API_MAX_CONNS && s->alfd >= 0)
        ev_io_start(s->loop, &s->alio); /* a slot for the next queued API client */
    httpd_conn_close(m);
}

/* /qr/NAME.svg: the t.me link of user NAME of g as a QR code, or NULL. */
static struct httpd_body *qr_body(const struct gen *g, const char *name)
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
        return httpd_body_of(&out);
    }
    return NULL;
}

/* --- the status page for many users: the user list, one user, the history (userpage.c) --- */

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
static struct httpd_body *users_body(struct metrics_server *s, const char *query, int links,
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
    return httpd_body_of(&out);
}

/* GET /users/NAME: user NAME with its links (if links), or NULL (no such user). */
static struct httpd_body *user_body(struct metrics_server *s, const char *path, int links)
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
    return httpd_body_of(&out);
}

/* GET /history (name NULL) or /history/NAME: the last hour per second. A user's is kept
 * from the first time it is asked for (HIST_USERS users at most: the least recently viewed
 * is dropped). NULL: no such user, or out of memory. */
static struct httpd_body *history_body(struct metrics_server *s, const char *path)
{
    const struct hist_ring *r = s->hist;
    char name[SECRET_NAME_MAX + 1] = "";
    if (path) {
        if (http_pct_decode(path, strlen(path), name, sizeof name, 0) < 0 ||
            user_index(s->gen, name) < 0)
            return NULL;
        r = hist_users_get(&s->hist_users, name, httpd_clock(CLOCK_MONOTONIC));
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
    return httpd_body_of(&out);
}

/* Once a second on the server's thread: the counters (relaxed reads, as /stats) into the
 * rings; nothing runs on the relays' loops. */
static void on_hist_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct metrics_server *s = t->data;
    (void)loop, (void)revents;
    int64_t now = (int64_t)httpd_clock(CLOCK_MONOTONIC);
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
static int serve_userpage(struct httpd_conn *m, const struct http_request *rq, int links,
                          int head)
{
    struct metrics_server *s = m->owner;
    struct httpd_body *body = NULL;
    if (!strcmp(rq->path, "/users")) {
        char query[METRICS_REQ_MAX];
        const char *why = NULL;
        httpd_conn_query(m, query, sizeof query);
        if (!(body = users_body(s, query, links, &why))) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s\n", why);
            httpd_respond_text(m, strcmp(why, "out of memory") ? 400 : 503, msg, head);
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
        httpd_respond_text(m, 404, "no such user\n", head);
    else
        httpd_respond(m, 200, "application/json", body, NULL, head);
    return 1;
}

/* Serves one parsed request: sets m's response. */
static void serve(struct httpd_conn *m, const struct http_request *rq)
{
    struct metrics_server *s = m->owner;
    const struct metrics_shared *ms = s->ms;
    const struct gen *g = s->gen; /* the users, links and token served now */
    const char *token = g->opt.metrics_token;
    int head = rq->method == HTTP_HEAD;
    if (token[0] && !((rq->has_bearer && http_token_equal(rq->bearer, token)) ||
                      (rq->has_token && http_token_equal(rq->token, token)))) {
        STAT_INC(&s->stats.unauthorized);
        httpd_respond_text(m, 401, "a token is needed: Authorization: Bearer TOKEN or ?token=TOKEN\n",
                     head);
        return;
    }
    /* Links are served for the address alone: a page of another site that the browser
     * resolved to loopback (DNS rebinding) must not read them; its Host is that site's. */
    if (!token[0] && ms->loopback && rq->has_host && !metrics_host_is_loopback(rq->host)) {
        STAT_INC(&s->stats.misdirected);
        httpd_respond_text(m, 421, "this server answers only to Host: localhost, 127.0.0.1 or [::1] "
                     "(or with metrics-token)\n", head);
        return;
    }
    int links = token[0] || ms->loopback;
    struct httpd_body *body = NULL;
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
            httpd_respond_text(m, 404, "no such user, or no QR codes in this build\n", head);
            return;
        }
        type = "image/svg+xml";
    } else {
        httpd_respond_text(m, 404, "not found: try /, /metrics, /stats, /users or /history\n", head);
        return;
    }
    if (!body) {
        httpd_respond_text(m, 503, "out of memory\n", head);
        return;
    }
    httpd_respond(m, 200, type, body, NULL, head);
}

/* An API request (its body follows the head): the answer is JSON. */
static void serve_api(struct httpd_conn *m, const struct http_request *rq, const uint8_t *buf)
{
    struct metrics_server *s = m->owner;
    struct sbuf out = {.max = METRICS_BODY_MAX};
    int code = api_serve(s->api, rq, (const char *)buf + rq->consumed, rq->content_length,
                         &out);
    if (code == 401)
        STAT_INC(&s->stats.unauthorized);
    struct httpd_body *b = httpd_body_of(&out);
    if (!b)
        httpd_respond_text(m, 503, "out of memory\n", 0);
    else
        httpd_respond(m, code, "application/json", b, NULL, rq->method == HTTP_HEAD);
}

static void mconn_read(struct httpd_conn *m)
{
    struct metrics_server *s = m->owner;
    struct http_request rq;
    const uint8_t *buf;
    int st = httpd_conn_read(m, METRICS_MAX_HEADERS, m->pinned ? API_BODY_MAX : 0, &rq, &buf);
    if (st == HTTPD_CLOSE) {
        mconn_close(m);
        return;
    }
    if (st == HTTP_NEED_MORE)
        return;
    if (st == HTTP_BAD) {
        STAT_INC(&s->stats.bad_requests);
        char msg[160];
        snprintf(msg, sizeof msg, "%s\n", rq.why);
        httpd_respond_text(m, rq.code, msg, 0);
    } else if (m->pinned) {
        serve_api(m, &rq, buf);
    } else {
        serve(m, &rq);
    }
    STAT_INC(&s->stats.requests);
    if (httpd_conn_send(m, &metrics_limits))
        mconn_close(m);
}

static void on_mconn_io(struct ev_loop *loop, ev_io *io, int revents)
{
    struct httpd_conn *m = io->data;
    if (m->state == HTTPD_WRITE) {
        if (httpd_conn_write(m, &metrics_limits))
            mconn_close(m);
    } else if (m->state == HTTPD_LINGER) {
        if (httpd_conn_linger(m, &metrics_limits))
            mconn_close(m);
    } else {
        mconn_read(m);
    }
}

static void on_mconn_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct httpd_conn *m = t->data;
    struct metrics_server *s = m->owner;
    if (m->state != HTTPD_LINGER)
        STAT_INC(&s->stats.timeouts);
    mconn_close(m);
}

/* A slot for a new connection from src (httpd_slot_get's), its connection closed if open, or
 * NULL. */
static struct httpd_conn *slot_get(struct metrics_server *s, const uint8_t src[16])
{
    struct httpd_conn *m = httpd_slot_get(s->conns, METRICS_MAX_CONNS, METRICS_MAX_PER_SOURCE,
                                          src);
    if (m && m->fd >= 0) { /* closed to give its slot to a new connection */
        if (m->state == HTTPD_READ)
            STAT_INC(&s->stats.evicted);
        mconn_close(m);
    }
    return m;
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
        if (api && !httpd_slot_free(s->conns, METRICS_MAX_CONNS)) {
            ev_io_stop(loop, &s->alio); /* every slot busy: try again in a moment */
            ev_timer_start(loop, &s->retry);
            return;
        }
        uint8_t src[16];
        int fd = httpd_accept(io->fd, src);
        if (fd == -2) {
            /* Out of descriptors: the socket stays readable; wait instead of spinning. */
            ev_io_stop(loop, &s->lio);
            ev_io_stop(loop, &s->alio);
            ev_timer_start(loop, &s->retry);
            return;
        }
        if (fd < 0)
            return; /* EAGAIN, or a connection that went away */
        struct httpd_conn *m =
            api ? httpd_slot_free(s->conns, METRICS_MAX_CONNS) : slot_get(s, src);
        if (!m) {
            close(fd);
            STAT_INC(&s->stats.evicted);
            continue;
        }
        m->pinned = api; /* API clients wait their turn: never evicted */
        s->napi += api;
        httpd_conn_open(m, loop, fd, src, api ? API_READ_TIMEOUT : METRICS_READ_TIMEOUT);
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
        s->status_page = httpd_body_new(metrics_status_html, metrics_status_html_len, 0);
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
    for (int i = 0; i < METRICS_MAX_CONNS; i++)
        httpd_conn_init(&s->conns[i], s, on_mconn_io, on_mconn_timer);
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
        struct httpd_conn *m = &s->conns[i];
        if (m->fd >= 0)
            close(m->fd);
        httpd_body_unref(m->body);
    }
    for (int i = 0; i < MB_COUNT; i++)
        httpd_cache_free(&s->cache[i]);
    httpd_body_unref(s->status_page);
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
