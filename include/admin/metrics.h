/* metrics.h: the metrics server (metrics = ADDR:PORT): /metrics, /stats and the status page, on a low-priority thread of its own. */
#ifndef MTPROXY_PROXY_METRICS_H
#define MTPROXY_PROXY_METRICS_H

#include <ev.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "core/sbuf.h"
#include "core/sock.h"
#include "core/stat.h"
#include "core/worker.h"
#include "conn/conn.h"
#include "config/options.h"

#define METRICS_MAX_CONNS 64     /* for the process; the oldest idle one is dropped for a new one */
#define METRICS_MAX_PER_SOURCE 8 /* connections from one source address */
#define METRICS_REQ_MAX 4096     /* request head bytes */
#define METRICS_MAX_HEADERS 32
#define METRICS_READ_TIMEOUT 5.0 /* seconds for the whole request head (not per byte) */
#define METRICS_WRITE_IDLE 10.0  /* seconds a response may make no progress (reset per send) */
#define METRICS_LINGER_TIMEOUT 2.0 /* after the answer, reading what the client still sends */
#define METRICS_LINGER_MAX (64u << 10)
#define METRICS_BODY_MAX (256u << 20) /* a larger page is refused (503) */
/* Bytes of body per send call: a kernel that does not preempt system calls (PREEMPT_NONE)
 * gives the CPU to a waking relay thread only between them, and one call can copy megabytes
 * into a loopback socket. */
#define METRICS_SEND_CHUNK (128u << 10)
/* A rendered /metrics or /stats body is reused for METRICS_CACHE_FACTOR times the CPU time it
 * took to render, at most METRICS_CACHE_MAX seconds: rendering takes at most 1/FACTOR of a
 * CPU whatever the number of scrapers, and a small page stays fresh. */
#define METRICS_CACHE_FACTOR 20.0
#define METRICS_CACHE_MAX 1.0

/* The metrics server's descriptors (listener, its loop's two, connections), for fd budgets. */
#define METRICS_FDS (METRICS_MAX_CONNS + 3)
#define METRICS_FDS_PER_WORKER METRICS_FDS /* counted per worker: more than enough */

struct gen;
struct webgroup;

/* Counters of the metrics server (written by its thread only). */
struct metrics_stats {
    stat_t requests;     /* answered (any status) */
    stat_t bad_requests; /* malformed heads (4xx/5xx from the parser) */
    stat_t unauthorized; /* 401 */
    stat_t evicted;      /* connections dropped or refused: slots or the per-source cap full */
    stat_t timeouts;     /* closed by METRICS_READ_TIMEOUT or METRICS_WRITE_IDLE */
    stat_t misdirected;  /* 421: a foreign Host on a loopback address without a token */
    stat_t renders;      /* bodies rendered (/metrics, /stats), not taken from the cache */
};

/* What the server reads: fixed once it starts (counters are read relaxed). The users, their
 * links and the token come from the generation main posts (metrics_server_post_gen). */
struct metrics_shared {
    const struct options *opt;  /* as started: the metrics address */
    struct proxy_worker *pws;
    struct worker *ws;
    const struct metrics_stats *http; /* the server's counters (NULL: none) */
    int nworkers;
    struct replay *replay;
    time_t start_time;
    int loopback;       /* the metrics listener is on a loopback address */
    const struct webgroup *web; /* WEB proxy mode's servers (NULL: off); set before the start */
};

struct metrics_server;

/* 1 if host (a Host header value: name or address, then an optional :port) names this
 * machine's loopback: localhost (any case), 127.0.0.0/8 or [::1]. */
int metrics_host_is_loopback(const char *host);

/* Sets up shared state for the server (opt: the options it starts with). Returns 0. */
int metrics_shared_init(struct metrics_shared *ms, const struct options *opt,
                        struct proxy_worker *pws, struct worker *ws, int nworkers,
                        struct replay *replay);

/* A server on listening socket lfd (-1: none, the API only; owned from now on, also on failure) serving ms (which
 * must outlive it; ms->http is pointed at the server's counters) with generation g (a
 * reference is taken). Nothing runs until metrics_server_start. Returns it, or NULL (out of
 * memory). */
struct metrics_server *metrics_server_new(struct metrics_shared *ms, struct gen *g, int lfd);

struct api_reloads;

/* Adds the management API's listener fd (owned from now on, also on failure) to s, before
 * metrics_server_start; rl is where main counts its reloads (proxy/api.h). Returns 0, or -1
 * (out of memory). */
int metrics_server_add_api(struct metrics_server *s, int fd, struct api_reloads *rl);

/* Starts the server's thread (after any fork: daemonize), at the lowest priority (SCHED_IDLE,
 * nice 19) so that the relays' threads always win. Returns 0, or an errno value. */
int metrics_server_start(struct metrics_server *s);

/* From any thread: the server serves g from now on (a reference is taken). */
void metrics_server_post_gen(struct metrics_server *s, struct gen *g);

/* Stops and joins the thread (if started). Call before the workers' state is freed: the
 * thread reads their counters. */
void metrics_server_stop(struct metrics_server *s);

/* After metrics_server_stop (or if never started): closes every socket, frees s. NULL: no-op. */
void metrics_server_free(struct metrics_server *s);

/* The Prometheus text (format 0.0.4) of every counter, summed over workers, to out; the
 * users are g's. Any thread holding a reference to g. Returns 0, or -1 (out of memory). */
int metrics_render_prometheus(const struct metrics_shared *ms, const struct gen *g,
                              struct sbuf *out);

/* The same as one JSON document; with links, each user's tg:// and t.me links too. */
int metrics_render_json(const struct metrics_shared *ms, const struct gen *g, int links,
                        struct sbuf *out);


#endif
