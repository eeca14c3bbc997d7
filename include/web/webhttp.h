/* webhttp.h: the WEB proxy's HTTP server (docs/web.md): bridge page, https carrier, site. */
#ifndef MTPROXY_WEB_WEBHTTP_H
#define MTPROXY_WEB_WEBHTTP_H

struct proxy_worker;
struct options;

/*
 * Plain HTTP/1.1 for the operator's TLS terminator, on ONE worker's loop (worker 0 for now),
 * so every request of a session meets the session table that holds it (a later step routes
 * tokens to workers). Endpoints (docs/web.md 4): GET /?bridge=CAP (the bridge page, minting a
 * bootstrap), POST /api/v1/session, /api/v1/up, /api/v1/down (the 25 s long poll) and
 * DELETE /api/v1/session; everything else, and every request the carrier refuses, gets the
 * ordinary site (web-root, or a built-in page). Each stream becomes a connection of the
 * worker's state machine (webstream.c).
 */
struct webhttp;

/* A server for opt's web keys on pw's worker, listening on lfd (it owns it from now on): its
 * watchers are started on the worker's loop (before the worker's thread starts), and it stops
 * with the worker (pw->service_stop, in the worker's thread). NULL if out of memory (lfd is
 * closed). */
struct webhttp *webhttp_new(struct proxy_worker *pw, int lfd, const struct options *opt);

struct websess_counters;
struct websess_shared;

/* What /metrics reads of h, from any thread, until h's worker stops (the metrics server stops
 * first): the session table's counters (stat_t: STAT_GET) and the process-wide live counts
 * (atomics). */
struct webhttp_view {
    const struct websess_counters *c;
    const struct websess_shared *live;
};

/* Fills v for h (NULL: v's members are NULL). */
void webhttp_view(const struct webhttp *h, struct webhttp_view *v);

/* Frees h once its worker's loop has ended (or never ran): closes what is still open without
 * touching the loop. NULL is allowed. */
void webhttp_free(struct webhttp *h);

#endif
