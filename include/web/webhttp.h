/* webhttp.h: the WEB proxy's HTTP server (docs/web.md): bridge page, https carrier, site. */
#ifndef MTPROXY_WEB_WEBHTTP_H
#define MTPROXY_WEB_WEBHTTP_H

struct proxy_worker;
struct options;

/*
 * Plain HTTP/1.1 for the operator's TLS terminator, on every worker's loop (one SO_REUSEPORT
 * listener each; never the metrics thread). Each worker holds its own session table; every
 * token says which worker holds it (its second character, websess_token_owner), and a request
 * that reaches another worker is handed over, socket and bytes read, to the one that holds it.
 * Endpoints (docs/web.md 4): GET /?bridge=CAP (the bridge page, minting a bootstrap), POST
 * /api/v1/session, /api/v1/up, /api/v1/down (the 25 s long poll), DELETE /api/v1/session and
 * GET /api/v1/ws; everything else, and every request the carrier refuses, gets the ordinary
 * site (web-root, or a built-in page). Each stream becomes a connection of its worker's state
 * machine (webstream.c).
 */
struct webhttp;
struct webgroup;

#define WEB_MAX_WORKERS 64 /* a token's second character names one of them */

/* Servers for opt's web keys on the workers pws[0..n) (n at most WEB_MAX_WORKERS), listening
 * on lfds[0..n) (one each; it owns them from now on): their watchers are started on the
 * workers' loops (before the workers' threads start), and each stops with its worker
 * (pw->service_stop, in the worker's thread). NULL if out of memory (every lfd is closed). */
struct webgroup *webgroup_new(struct proxy_worker *pws, int n, const int *lfds,
                              const struct options *opt);

/* Worker i's server. */
struct webhttp *webgroup_server(struct webgroup *g, int i);

struct websess_counters;
struct websess_shared;

/* What /metrics reads of g, from any thread, until the workers stop (the metrics server stops
 * first): each worker's table counters (stat_t: STAT_GET, summed by the reader) and the
 * process-wide live counts (atomics). */
struct webhttp_view {
    int n;
    const struct websess_counters *c[WEB_MAX_WORKERS];
    const struct websess_shared *live;
};

/* Fills v for g (NULL: n is 0, live NULL). */
void webgroup_view(const struct webgroup *g, struct webhttp_view *v);

/* Frees g once the workers' loops have ended (or never ran): closes what is still open
 * without touching the loops. NULL is allowed. */
void webgroup_free(struct webgroup *g);

#endif
