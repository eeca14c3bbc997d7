/* metrics.h: the metrics server (metrics = ADDR:PORT): /metrics, /stats and the status page, on each worker's loop. */
#ifndef MTPROXY_PROXY_METRICS_H
#define MTPROXY_PROXY_METRICS_H

#include <ev.h>
#include <stdint.h>
#include <time.h>

#include "core/sbuf.h"
#include "core/stat.h"
#include "core/worker.h"
#include "proxy/conn.h"
#include "proxy/options.h"

#define METRICS_MAX_CONNS 16     /* per worker; the oldest still reading is dropped for a new one */
#define METRICS_REQ_MAX 4096     /* request head bytes */
#define METRICS_MAX_HEADERS 32
#define METRICS_READ_TIMEOUT 5.0 /* seconds for the whole request head (not per byte) */
#define METRICS_WRITE_TIMEOUT 30.0
#define METRICS_LINGER_TIMEOUT 2.0 /* after the answer, reading what the client still sends */
#define METRICS_LINGER_MAX (64u << 10)
#define METRICS_BODY_MAX (256u << 20) /* a larger page is refused (503) */

struct metrics_worker;

struct gen;

/* What every worker's server reads: fixed once workers start (counters are read relaxed).
 * The users, their links and the token come from the serving worker's current generation
 * (proxy/reload.h), so a reload changes them. */
struct metrics_shared {
    const struct options *opt;  /* as started: the metrics address */
    struct proxy_worker *pws;
    struct worker *ws;
    struct metrics_worker *mws; /* their servers' counters (NULL: none) */
    int nworkers;
    struct replay *replay;
    time_t start_time;
    int loopback;       /* the metrics listener is on a loopback address */
};

/* Counters of one worker's metrics server (written by it only). */
struct metrics_stats {
    stat_t requests;     /* answered (any status) */
    stat_t bad_requests; /* malformed heads (4xx/5xx from the parser) */
    stat_t unauthorized; /* 401 */
    stat_t evicted;      /* connections dropped for a newer one at METRICS_MAX_CONNS */
    stat_t timeouts;     /* closed by METRICS_READ_TIMEOUT or METRICS_WRITE_TIMEOUT */
};

struct metrics_conn {
    struct metrics_worker *mw;
    int fd;                 /* -1: slot free */
    ev_io io;
    ev_timer timer;
    ev_tstamp born;
    enum { MC_READ = 0, MC_WRITE, MC_LINGER } state;
    size_t len;             /* request bytes in req */
    uint8_t req[METRICS_REQ_MAX];
    struct sbuf out;        /* the response */
    size_t off;             /* bytes of out written */
};

/* Per-worker server state. */
struct metrics_worker {
    const struct metrics_shared *ms;
    struct worker *w;
    int lfd;
    ev_io lio;
    ev_timer retry;             /* accepting again after running out of descriptors */
    struct metrics_conn *conns; /* METRICS_MAX_CONNS slots */
    struct metrics_stats stats;
};

/* The metrics server's descriptors per worker (listener + connections), for fd budgets. */
#define METRICS_FDS_PER_WORKER (METRICS_MAX_CONNS + 1)

/* Sets up shared state for the server (opt: the options it starts with). Returns 0. */
int metrics_shared_init(struct metrics_shared *ms, const struct options *opt,
                        struct proxy_worker *pws, struct worker *ws, int nworkers,
                        struct replay *replay);

/* Starts worker w's server on listening socket lfd (owned from now on) in w's loop. Call
 * before the worker's thread starts. Returns 0, or -1 (out of memory). */
int metrics_worker_start(struct metrics_worker *mw, const struct metrics_shared *ms,
                         struct worker *w, int lfd);

/* After the worker's loop has ended: closes every socket and frees memory. */
void metrics_worker_destroy(struct metrics_worker *mw);

/* The Prometheus text (format 0.0.4) of every counter, summed over workers, to out; the
 * users are g's. Any thread holding a reference to g. Returns 0, or -1 (out of memory). */
int metrics_render_prometheus(const struct metrics_shared *ms, const struct gen *g,
                              struct sbuf *out);

/* The same as one JSON document; with links, each user's tg:// and t.me links too. */
int metrics_render_json(const struct metrics_shared *ms, const struct gen *g, int links,
                        struct sbuf *out);

/* The host put in links for opt (public-host, else the listen address, else the host
 * name) into host, and returns the port (public-port, else the first listen port). */
int metrics_link_host(const struct options *opt, char *host, size_t hostlen);

#endif
