/* metrics_server.c: the metrics server: its thread, connections, routing, the API's listener. */
#include "admin/metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/worker.h"
#include "proto/http.h"
#include "admin/api.h"
#include "http/httpd.h"
#include "admin/metrics_page.h"
#include "config/reload.h"

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

/* An API call of one connection slot, served on the API's thread (a change waits there for
 * its reload; the server's thread goes on serving scrapes). */
enum { JOB_NONE = 0, JOB_QUEUED, JOB_RUNNING, JOB_DONE };
struct api_job {
    int state;               /* under api_mu */
    unsigned long seq;       /* FIFO order */
    struct http_request rq;
    const uint8_t *body;     /* in its connection's buffer (untouched until answered) */
    int code;
    struct sbuf out;
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
    struct httpd_cache cache[MB_COUNT];
    ev_timer hist_timer;            /* once a second: the traffic history rings */
    struct metrics_page page;       /* the status page, its users' rows, the history */
    struct metrics_stats stats;
    struct httpd_conn conns[METRICS_MAX_CONNS];
    /* the API's thread and its calls */
    pthread_t api_thread;
    int api_started, api_stop;    /* api_stop under api_mu */
    pthread_mutex_t api_mu;
    pthread_cond_t api_cv;
    unsigned long api_seq;
    ev_async api_done;            /* a call answered */
    struct api_job jobs[METRICS_MAX_CONNS];
    struct gen *_Atomic api_next_gen; /* posted by main, one reference */
    struct gen *api_gen;              /* the API thread's, one reference */
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

/* Once a second: the traffic history rings (metrics_page_sample). */
static void on_hist_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct metrics_server *s = t->data;
    metrics_page_sample(&s->page, s->ms, s->gen);
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
        httpd_respond_text(m, 401,
                           "a token is needed: Authorization: Bearer TOKEN or ?token=TOKEN\n",
                           head);
        return;
    }
    /* Links are served for the address alone: a page of another site that the browser
     * resolved to loopback (DNS rebinding) must not read them; its Host is that site's. */
    if (!token[0] && ms->loopback && rq->has_host && !metrics_host_is_loopback(rq->host)) {
        STAT_INC(&s->stats.misdirected);
        httpd_respond_text(m, 421,
                           "this server answers only to Host: localhost, 127.0.0.1 or [::1] "
                           "(or with metrics-token)\n",
                           head);
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
    } else if (metrics_page_serve(&s->page, ms, g, m, rq, links)) {
        return;
    } else {
        httpd_respond_text(m, 404, "not found: try /, /metrics, /stats, /users or /history\n",
                           head);
        return;
    }
    if (!body) {
        httpd_respond_text(m, 503, "out of memory\n", head);
        return;
    }
    httpd_respond(m, 200, type, body, NULL, head);
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
    } else if (m->pinned) { /* an API request: the API's thread answers (on_api_done) */
        struct api_job *j = &s->jobs[m - s->conns];
        ev_io_stop(s->loop, &m->io);
        ev_timer_stop(s->loop, &m->timer);
        m->state = HTTPD_WRITE; /* not idle, never taken for another connection */
        pthread_mutex_lock(&s->api_mu);
        *j = (struct api_job){JOB_QUEUED, ++s->api_seq, rq, buf + rq.consumed, 0, {0}};
        pthread_cond_signal(&s->api_cv);
        pthread_mutex_unlock(&s->api_mu);
        return;
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
    if (m->pinned && m->state == HTTPD_READ) {
        /* its request may have come while a reload held this thread: served if whole */
        mconn_read(m);
        if (m->fd < 0 || m->state != HTTPD_READ)
            return;
    }
    if (m->state != HTTPD_LINGER)
        STAT_INC(&s->stats.timeouts);
    mconn_close(m);
}

/* The API's thread: the queued calls, oldest first, one at a time. */
static void *api_thread_main(void *arg)
{
    struct metrics_server *s = arg;
    worker_thread_idle("api");
    pthread_mutex_lock(&s->api_mu);
    for (;;) {
        struct api_job *j = NULL;
        for (int i = 0; i < METRICS_MAX_CONNS; i++)
            if (s->jobs[i].state == JOB_QUEUED && (!j || s->jobs[i].seq < j->seq))
                j = &s->jobs[i];
        if (!j && s->api_stop)
            break;
        if (!j) {
            pthread_cond_wait(&s->api_cv, &s->api_mu);
            continue;
        }
        j->state = JOB_RUNNING;
        pthread_mutex_unlock(&s->api_mu);
        struct sbuf out = {.max = METRICS_BODY_MAX};
        int code = api_serve(s->api, &j->rq, (const char *)j->body, j->rq.content_length, &out);
        pthread_mutex_lock(&s->api_mu);
        j->code = code;
        j->out = out;
        j->state = JOB_DONE;
        ev_async_send(s->loop, &s->api_done);
    }
    pthread_mutex_unlock(&s->api_mu);
    return NULL;
}

/* Answered API calls go out (the server's thread). */
static void on_api_done(struct ev_loop *loop, ev_async *a, int revents)
{
    struct metrics_server *s = a->data;
    for (int i = 0; i < METRICS_MAX_CONNS; i++) {
        pthread_mutex_lock(&s->api_mu);
        struct api_job j = s->jobs[i];
        if (j.state == JOB_DONE)
            s->jobs[i].state = JOB_NONE;
        pthread_mutex_unlock(&s->api_mu);
        if (j.state != JOB_DONE)
            continue;
        struct httpd_conn *m = &s->conns[i];
        struct httpd_body *b = httpd_body_of(&j.out);
        if (!b)
            httpd_respond_text(m, 503, "out of memory\n", 0);
        else
            httpd_respond(m, j.code, "application/json", b, NULL, j.rq.method == HTTP_HEAD);
        if (j.code == 401)
            STAT_INC(&s->stats.unauthorized);
        STAT_INC(&s->stats.requests);
        if (httpd_conn_send(m, &metrics_limits))
            mconn_close(m);
    }
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

/* 1 if c is an API connection still waiting for its request API_IDLE_MIN after its accept:
 * not a whole one in its buffer or its socket (one that came unnoticed is read now and served
 * by the next loop turn; one whose client went away is closed). */
static int api_idle(struct metrics_server *s, struct httpd_conn *c)
{
    if (c->fd < 0 || !c->pinned || c->state != HTTPD_READ ||
        ev_now(s->loop) - c->born < API_IDLE_MIN)
        return 0;
    struct http_request rq;
    const uint8_t *buf;
    int st = httpd_conn_read(c, METRICS_MAX_HEADERS, API_BODY_MAX, &rq, &buf);
    if (st == HTTPD_CLOSE) {
        mconn_close(c);
        return 0;
    }
    if (st != HTTP_NEED_MORE) {
        ev_feed_event(s->loop, &c->io, EV_READ);
        return 0;
    }
    return 1;
}

/* The slot of an API connection from src: the oldest idle API connection (api_idle) of a
 * source with API_MAX_PER_SOURCE of them, else a free slot while fewer than API_MAX_CONNS are
 * open, else the oldest idle one of any source (an idle connection cannot hold the API; a
 * client sends its request at once); a taken slot is closed here. NULL: none. */
static struct httpd_conn *api_slot(struct metrics_server *s, const uint8_t src[16])
{
    struct httpd_conn *oldest = NULL, *oldest_mine = NULL;
    int mine = 0;
    for (int i = 0; i < METRICS_MAX_CONNS; i++) {
        struct httpd_conn *c = &s->conns[i];
        int same = c->fd >= 0 && c->pinned && !memcmp(c->src, src, 16);
        mine += same;
        if (!api_idle(s, c))
            continue;
        if (!oldest || c->born < oldest->born)
            oldest = c;
        if (same && (!oldest_mine || c->born < oldest_mine->born))
            oldest_mine = c;
    }
    struct httpd_conn *m = mine >= API_MAX_PER_SOURCE && oldest_mine ? oldest_mine
                           : s->napi < API_MAX_CONNS ? httpd_slot_free(s->conns,
                                                                       METRICS_MAX_CONNS)
                                                     : oldest;
    if (m && m->fd >= 0) {
        STAT_INC(&s->stats.evicted);
        mconn_close(m);
    }
    return m;
}

/* 1 if a new API connection can have a slot now (api_slot): one free, or an idle one. */
static int api_slot_ready(struct metrics_server *s)
{
    if (s->napi < API_MAX_CONNS)
        return httpd_slot_free(s->conns, METRICS_MAX_CONNS) != NULL;
    int idle = 0;
    for (int i = 0; i < METRICS_MAX_CONNS; i++)
        idle |= api_idle(s, &s->conns[i]);
    return idle;
}

static void on_metrics_accept(struct ev_loop *loop, ev_io *io, int revents)
{
    struct metrics_server *s = io->data;
    int api = io == &s->alio;
    for (int i = 0; i < 16; i++) {
        if (api && !api_slot_ready(s)) {
            /* More API clients wait in the listen queue (calls are one at a time anyway);
             * they are not refused, and a metrics flood cannot push them out. A slot that
             * frees restarts it (mconn_close); every slot busy: tried again in a moment. */
            ev_io_stop(loop, &s->alio);
            ev_timer_start(loop, &s->retry); /* an idle one may be old enough then */
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
        struct httpd_conn *m = api ? api_slot(s, src) : slot_get(s, src);
        if (!m) {
            close(fd);
            STAT_INC(&s->stats.evicted);
            continue;
        }
        m->pinned = api; /* API clients wait their turn: never evicted */
        s->napi += api;
        httpd_conn_open(m, loop, fd, src, api ? API_HEADER_TIMEOUT : METRICS_READ_TIMEOUT);
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
    if (!s || metrics_page_init(&s->page)) {
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
    ev_timer_init(&s->hist_timer, on_hist_timer, 1.0, 1.0);
    s->hist_timer.data = s;
    ev_async_init(&s->api_done, on_api_done);
    s->api_done.data = s;
    pthread_mutex_init(&s->api_mu, NULL);
    pthread_cond_init(&s->api_cv, NULL);
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
    ev_async_start(s->loop, &s->api_done);
    ev_async_send(s->loop, &s->wake); /* a generation posted before the start */
    ev_timer_start(s->loop, &s->hist_timer);
    on_hist_timer(s->loop, &s->hist_timer, 0); /* primes the rings */
    int rc = s->api ? pthread_create(&s->api_thread, NULL, api_thread_main, s) : 0;
    if (rc)
        return rc;
    s->api_started = s->api != NULL;
    rc = pthread_create(&s->thread, NULL, metrics_thread, s);
    if (rc)
        return rc;
    s->started = 1;
    return 0;
}

/* The API's view of the generation (its own thread's): the newest posted, adopted now (its
 * caller waited for a reload that posted one). */
static struct gen *api_current_gen(void *arg)
{
    struct metrics_server *s = arg;
    struct gen *g = atomic_exchange(&s->api_next_gen, NULL);
    if (g) {
        gen_unref(s->api_gen);
        s->api_gen = g;
    }
    return s->api_gen;
}

int metrics_server_add_api(struct metrics_server *s, int fd, struct api_reloads *rl)
{
    if (!(s->api = api_new(rl, api_current_gen, s))) {
        close(fd);
        return -1;
    }
    s->alfd = fd;
    gen_ref(s->gen);
    s->api_gen = s->gen;
    ev_io_set(&s->alio, fd, EV_READ);
    return 0;
}

void metrics_server_post_gen(struct metrics_server *s, struct gen *g)
{
    gen_ref(g);
    gen_unref(atomic_exchange(&s->next_gen, g));
    if (s->api) {
        gen_ref(g);
        gen_unref(atomic_exchange(&s->api_next_gen, g));
    }
    if (s->loop)
        ev_async_send(s->loop, &s->wake);
}

void metrics_server_stop(struct metrics_server *s)
{
    if (s && s->api_started) { /* its call in progress ends first (reloads answer at stop) */
        pthread_mutex_lock(&s->api_mu);
        s->api_stop = 1;
        pthread_cond_signal(&s->api_cv);
        pthread_mutex_unlock(&s->api_mu);
        pthread_join(s->api_thread, NULL);
        s->api_started = 0;
    }
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
    metrics_page_free(&s->page);
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->alfd >= 0)
        close(s->alfd);
    api_free(s->api);
    for (int i = 0; i < METRICS_MAX_CONNS; i++)
        if (s->jobs[i].state == JOB_DONE)
            sbuf_free(&s->jobs[i].out);
    pthread_mutex_destroy(&s->api_mu);
    pthread_cond_destroy(&s->api_cv);
    if (s->loop)
        ev_loop_destroy(s->loop);
    gen_unref(s->api_gen);
    gen_unref(atomic_exchange(&s->api_next_gen, NULL));
    gen_unref(s->gen);
    gen_unref(atomic_exchange(&s->next_gen, NULL));
    s->ms->http = NULL;
    free(s);
}
