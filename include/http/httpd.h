/* httpd.h: pieces of a small bounded HTTP/1.1 server, for any server on any one ev loop. */
#ifndef MTPROXY_ADMIN_HTTPD_H
#define MTPROXY_ADMIN_HTTPD_H

#include <ev.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include "core/sbuf.h"
#include "proto/http.h"

#define HTTPD_REQ_MAX 4096 /* request head bytes (and a body that fits beside it) */

/*
 * A response body, shared by every connection sending it and by a cache (one reference each);
 * the last reference frees it, so a slow reader keeps an old body alive while the cache moves
 * on. Not thread-safe: only the thread of the server that made it touches it.
 */
struct httpd_spare;
struct httpd_body {
    int refs;
    int owned;         /* p is the body's own memory (else static) */
    const char *p;
    size_t len, cap;
    struct httpd_spare *spare; /* a cached body: where its memory goes once unused (or NULL) */
    uint64_t serial;   /* what it was rendered from (the cache's key) */
    double born;       /* when its rendering started (seconds, monotonic) */
    double cost;       /* the CPU time its rendering took (seconds) */
};

/* The memory of a cached body no longer used, for the next rendering of its kind: in steady
 * state rendering allocates nothing (no mmap, munmap or page faults, which would make other
 * threads wait for the process's memory map or a TLB flush). */
struct httpd_spare {
    char *p;
    size_t cap;
};

/* One body kept for reuse, and the memory of the last one dropped. Zeroed: empty. */
struct httpd_cache {
    struct httpd_body *body;
    struct httpd_spare spare;
};

/* A body of len bytes at p (owned: freed with the body, else static). Returns it with one
 * reference, or NULL (out of memory). */
struct httpd_body *httpd_body_new(const char *p, size_t len, int owned);

/* Drops a reference to b (NULL: no-op); the last one frees it, or hands its memory to its
 * spare if that is empty. */
void httpd_body_unref(struct httpd_body *b);

/* out's text as a body, one reference (out is emptied), or NULL (out failed, or out of memory:
 * out is freed). */
struct httpd_body *httpd_body_of(struct sbuf *out);

/* c's body with one more reference if it was rendered from serial less than factor times its
 * rendering's CPU time before now (both seconds, monotonic), and less than max_age; else NULL. */
struct httpd_body *httpd_cache_fresh(struct httpd_cache *c, uint64_t serial, double now,
                                     double factor, double max_age);

/* An empty sbuf (at most max bytes) on the cache's spare memory, which it takes over. */
struct sbuf httpd_cache_sbuf(struct httpd_cache *c, size_t max);

/* out (rendered from serial, started at born, cost CPU seconds) as c's body, replacing the old
 * one. Returns a reference for the caller, or NULL (out failed, or out of memory: c keeps its
 * old body). */
struct httpd_body *httpd_cache_put(struct httpd_cache *c, struct sbuf *out, uint64_t serial,
                                   double born, double cost);

/* Drops c's body and frees its spare memory (c is empty again). */
void httpd_cache_free(struct httpd_cache *c);

/* Seconds on clock id (CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID...). */
double httpd_clock(clockid_t id);

/* The timeouts and caps of a server's connections. */
struct httpd_limits {
    double write_idle;     /* seconds a response may make no progress (reset per send) */
    double linger_timeout; /* after the answer, reading what the client still sends */
    size_t linger_max;     /* bytes read and dropped while lingering, at most */
    size_t send_chunk;     /* body bytes per send call, at most */
};

enum httpd_state { HTTPD_READ = 0, HTTPD_WRITE, HTTPD_LINGER };

/* A connection slot: one request, one response, then a lingering close. */
struct httpd_conn {
    struct ev_loop *loop;   /* set by httpd_conn_open */
    void *owner;            /* the server's (io.data and timer.data point at the slot) */
    int fd;                 /* -1: slot free */
    ev_io io;
    ev_timer timer;
    ev_tstamp born;
    uint8_t src[16];        /* the peer's address (IPv4 as ::ffff:a.b.c.d) */
    enum httpd_state state;
    int pinned;             /* never evicted for another connection */
    uint8_t *big;           /* a request whose body outgrows req (head and body) */
    size_t bigcap;
    size_t len;             /* request bytes in req (or big) */
    uint8_t req[HTTPD_REQ_MAX];
    char head[1280];        /* status line and headers, then a short text body if any */
    size_t head_len;
    struct httpd_body *body; /* a reference, or NULL (no body, or HEAD) */
    size_t off;             /* bytes of head, then body, written */
};

/* Puts p[0..n) in c's request buffer as if read from its socket (a request another thread read
 * and handed over with the socket). 0, or -1 if out of memory. */
int httpd_conn_preload(struct httpd_conn *c, const uint8_t *p, size_t n);

/* Makes c a free slot of owner whose events call on_io and on_timer (c->io.data and
 * c->timer.data are c). */
void httpd_conn_init(struct httpd_conn *c, void *owner,
                     void (*on_io)(struct ev_loop *, ev_io *, int),
                     void (*on_timer)(struct ev_loop *, ev_timer *, int));

/* Starts free slot c on accepted socket fd from src (httpd_source_key's) on loop: reading a
 * request within timeout seconds. */
void httpd_conn_open(struct httpd_conn *c, struct ev_loop *loop, int fd, const uint8_t src[16],
                     double timeout);

/* Stops c's watchers, closes its socket, drops its body and request: c is a free slot again. */
void httpd_conn_close(struct httpd_conn *c);

/* Frees slot c but keeps its socket open: returns it, for the caller (a protocol upgrade). */
int httpd_conn_detach(struct httpd_conn *c);

/* Reads what the socket holds and parses it (at most max_headers headers; a body up to
 * body_max bytes, 0: none), growing c's buffer for a body that outgrows it. Returns HTTP_OK
 * or HTTP_BAD with *rq set (*buf: the request's bytes, rq->consumed of head then the body),
 * HTTP_NEED_MORE (wait for more), or HTTPD_CLOSE: EOF, an error or out of memory, the caller
 * closes c. */
#define HTTPD_CLOSE (-2)
int httpd_conn_read(struct httpd_conn *c, int max_headers, size_t body_max,
                    struct http_request *rq, const uint8_t **buf);

/* Sets c's response: head, then body (a reference handed over; dropped for HEAD), or the
 * short text (body NULL; at most a few hundred bytes). */
void httpd_respond(struct httpd_conn *c, int code, const char *type, struct httpd_body *body,
                   const char *text, int head_only);

/* httpd_respond with a text/plain text. */
void httpd_respond_text(struct httpd_conn *c, int code, const char *text, int head_only);

/* After httpd_respond: sends the response (httpd_conn_write). Returns 0, or -1: the caller
 * closes c. */
int httpd_conn_send(struct httpd_conn *c, const struct httpd_limits *lim);

/* Writes what is left of the response: the head, then the body from c->off on, at most
 * lim->send_chunk bytes a call; every send that moves bytes restarts the lim->write_idle
 * deadline. Once all is written: FIN, then a lingering close (bytes the client pipelined are
 * read and dropped for a moment, so that closing with them unread does not reset the
 * connection before the client read the answer). Returns 0, or -1: the caller closes c. */
int httpd_conn_write(struct httpd_conn *c, const struct httpd_limits *lim);

/* Lingering close: drops what the client still sends. Returns 0, or -1 (its EOF, an error or
 * lim->linger_max bytes): the caller closes c. */
int httpd_conn_linger(struct httpd_conn *c, const struct httpd_limits *lim);

/* The query string of c's request line (after '?', not decoded) into q ("" if none). */
void httpd_conn_query(const struct httpd_conn *c, char *q, size_t qlen);

/* A slot among conns[0..n) for a new connection from src: a source that already has
 * per_source connections gets the slot of its own oldest one not writing a response and not
 * pinned (or none); else a free slot, or the slot of the oldest connection not writing and not
 * pinned. Returns it (if open, the caller closes it first), or NULL (none). */
struct httpd_conn *httpd_slot_get(struct httpd_conn *conns, int n, int per_source,
                                  const uint8_t src[16]);

/* A free slot among conns[0..n), or NULL. */
struct httpd_conn *httpd_slot_free(struct httpd_conn *conns, int n);

/* A connection's source key: its address as 16 bytes (IPv4 as ::ffff:a.b.c.d). */
void httpd_source_key(const struct sockaddr_storage *ss, uint8_t k[16]);

/* Accepts a connection on listening socket lfd (non-blocking, close-on-exec); *src its source
 * key. Returns its fd, -1 (nothing to accept now), or -2 (out of descriptors or memory: the
 * listener stays readable, stop watching it for a moment). */
int httpd_accept(int lfd, uint8_t src[16]);

#endif
