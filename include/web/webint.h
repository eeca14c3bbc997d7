/* webint.h: the WEB server's internals shared by webhttp.c, webstream.c and website.c. */
#ifndef MTPROXY_WEB_WEBINT_H
#define MTPROXY_WEB_WEBINT_H

#include <ev.h>
#include <pthread.h>
#include <stdint.h>

#include "config/options.h"
#include "core/cidr.h"
#include "core/sock.h"
#include "http/httpd.h"
#include "proto/webcap.h"
#include "proto/webframe.h"
#include "web/websess.h"

#define WEB_MAX_CONNS 512      /* HTTP connections at once */
#define WEB_MAX_PER_SOURCE 64  /* from one address (not counted behind a trusted terminator) */
#define WEB_READ_TIMEOUT 15.0  /* seconds for a whole request */
#define WEB_MAX_HEADERS 64
#define WEB_CREATE_MAX 64      /* the create body (one HELLO) */
#define WEB_CLOSED_TOKENS 64   /* tokens DELETE still answers 204 for */
#define WEB_SITE_MAX (4u << 20) /* a web-root file served, at most */

struct webstream;
struct webws;
struct webfetch;

/* A held /down (one per connection slot): its session, lane and cursor. */
struct webpoll {
    struct websx *x;         /* NULL: the slot holds no poll */
    uint32_t lane;
    uint64_t cursor;         /* for its 204 */
    int ready;               /* frames wait: answered before the loop sleeps */
    struct webpoll *next;    /* x's held polls */
};

/* One live session's carrier state beside the table's (found by the session's pointer). */
struct websx {
    struct websess *s;
    struct sock_addr peer;     /* the client's address (its last request) */
    struct webstream *streams; /* its streams' sockets */
    struct webpoll *polls;     /* its held /downs (one per lane at most) */
    struct webws *ws;          /* its WebSockets (one, or one per lane), or NULL */
    struct websx *next;        /* hash chain */
};

/* A request handed from the worker that read it to the one whose table holds its token. */
struct webmove {
    struct webmove *next;
    int fd;
    uint8_t src[16];
    size_t len;
    uint8_t b[]; /* the request's bytes read so far */
};

struct webhttp {
    struct proxy_worker *pw;
    struct ev_loop *loop;
    int index;                 /* its worker's (the second character of its tokens) */
    struct webgroup *group;    /* every worker's server */
    pthread_mutex_t inbox_mu;  /* inbox: written by other workers' threads */
    struct webmove *inbox, **inbox_tail;
    ev_async inbox_async;
    int lfd;
    ev_io lio;
    ev_timer retry;  /* accepting again after running out of descriptors */
    ev_timer sweep;  /* once a second: websess_sweep */
    ev_prepare kick; /* held polls whose lane has frames: answered before the loop sleeps */
    ev_idle idle;    /* more of them than one kick's passes served: the loop must not sleep */
    int stopped;
    struct websess_limits lim;
    struct websess_table *t;
    enum websess_mode mode;          /* the carrier sessions get (web-carrier) */
    struct webws *wsl;               /* open WebSockets */
    char host[WEBCAP_HOST_MAX + 1];
    char root[OPT_PATH_MAX];
    int upstream_on;                 /* web-upstream: the site from an HTTP server */
    struct sock_addr upstream;
    void (*upstream_done)(struct webhttp *h, struct httpd_conn *c); /* its answer is set */
    struct cidr_set trusted;
    const void *capgen;              /* the generation the capabilities are of */
    uint64_t capserial;
    char (*caps)[WEBCAP_LEN + 1];    /* two per plain/dd secret: its 16 bytes, dd + 16 */
    int *capuser;                    /* the secret index of each */
    size_t ncaps;
    struct websx **sx;               /* sessions by pointer */
    size_t sxmask;
    char closed[WEB_CLOSED_TOKENS][WEBSESS_TOKEN_LEN + 1];
    int64_t closed_at[WEB_CLOSED_TOKENS];
    unsigned closed_head;
    uint8_t rbuf[WEBFRAME_DATA_CHUNK]; /* a stream's socket read */
    struct httpd_conn conns[WEB_MAX_CONNS];
    struct webpoll polls[WEB_MAX_CONNS]; /* per slot: the /down it holds */
    struct webfetch *fetch[WEB_MAX_CONNS]; /* per slot: the upstream's answer it waits for */
};

/* The servers of the workers, and what the process counts across them. */
struct webgroup {
    int n;
    struct websess_shared live;
    struct webhttp *h[];
};

/* The table's clock: milliseconds, monotonic. */
int64_t web_now(void);

/* Sets c's response: status code, then extra header lines (each ending CRLF; "" for none), the
 * body (a reference handed over; NULL: none) of type, head only if head_only. No-store always. */
void web_respond(struct httpd_conn *c, int code, const char *extra, const char *type,
                 struct httpd_body *body, int head_only);

/* website.c: sets c's response to the ordinary site's answer to method and path (what any
 * visitor gets for them: a file of root or the built-in page, else the 404 page). */
void website_answer(const struct webhttp *h, struct httpd_conn *c, int method, const char *path);

/* webupstream.c: sends c's request rq (whole in its buffer) to web-upstream; its answer
 * becomes c's, then h->upstream_done(h, c) sends it (a 502 or 504 of ours if the upstream
 * fails, says too much or nothing in time). 0 (on its way: c is pinned), or -1 (nothing
 * started: answer c otherwise). */
int webupstream_start(struct webhttp *h, struct httpd_conn *c, const struct http_request *rq);

/* c goes away while its upstream answer is on the way: the fetch ends unanswered. */
void webupstream_cancel(struct webhttp *h, struct httpd_conn *c);

/* webstream.c: the session hooks the table calls, with h as their ctx (on_end and on_down
 * excepted: the server's own, which answer held /downs and wake WebSockets). */
void webstream_hooks(struct webhttp *h, struct websess_hooks *out);

/* The session s ends: its streams' sockets close (their connections end) and its carrier
 * state goes (x->poll must have been answered). */
void webstream_end(struct webhttp *h, struct websess *s);

/* The carrier state of s, or NULL. */
struct websx *webstream_sx(const struct webhttp *h, const struct websess *s);

/* A carrier state for the new session s from peer. NULL if out of memory. */
struct websx *webstream_sx_new(struct webhttp *h, struct websess *s,
                               const struct sock_addr *peer);

/* After a /down took frames or acknowledged a batch: the session's streams that stopped
 * reading for want of credit or queue room read again. */
void webstream_resume(struct webhttp *h, struct websx *x);

/* webws.c: GET /api/v1/ws (docs/web.md 4): a valid upgrade for a websocket session
 * (tproxy-v1.TOKEN) or one stream of a websocket-lanes session (tproxy-lane-v1.TOKEN.N) takes
 * c's socket over (c is a free slot again) and answers 101. 1 if so, 0 for the site. */
int webws_upgrade(struct webhttp *h, struct httpd_conn *c, const struct http_request *rq,
                  const uint8_t *buf);

/* Sends w's lane's next batch if nothing is being written. 0, or -1 (w is gone). */
int webws_flush(struct webws *w);

/* Closes w's socket and frees it. Its session lives on; a lane's WebSocket that ends before
 * its lane did takes the lane and its stream with it (websess_lane_drop). */
void webws_close(struct webws *w);

/* The session ends: each of x's WebSockets closes (without touching the session). */
void webws_close_all(struct websx *x);

/* The next open WebSocket after w (the server's list), and whether w's lane has frames to
 * send (the on_down hook said so: webws_mark). */
struct webws *webws_next(const struct webws *w);
int webws_ready(const struct webws *w);

/* Frames wait on lane of x: its WebSocket (if any) is marked ready. 1 if one was. */
int webws_mark(struct websx *x, uint32_t lane);

/* webhttp.c: serves the connected, non-blocking socket fd from src (an IPv6 or IPv4-mapped
 * address) as if just accepted: every accept goes through it, and so does the fuzz target
 * (tests/fuzz/fuzz_webhttp.c), which hands in one end of a socketpair. */
void webhttp_adopt(struct webhttp *h, int fd, const uint8_t src[16]);

/* webhttp.c: answers the held /down p now (a batch if frames wait, else 204 if timeout,
 * else keeps holding), or with the site's 404 if the session is gone (gone set). */
void webhttp_poll_answer(struct webhttp *h, struct webpoll *p, int timeout, int gone);

#endif
