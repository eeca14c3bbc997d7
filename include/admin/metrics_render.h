/* metrics_render.h: what the metrics server's renderers share (src/admin/metrics_*.c only). */
#ifndef MTPROXY_ADMIN_METRICS_RENDER_H
#define MTPROXY_ADMIN_METRICS_RENDER_H

#include <stdint.h>

#include "admin/metrics.h"
#include "conn/counters.h"
#include "core/sbuf.h"
#include "users/users.h"

/* The metrics servers' counters (struct metrics_stats): field, outcome label. */
#define HTTP_COUNTERS(X)                                                                       \
    X(requests, "answered") X(bad_requests, "bad") X(unauthorized, "unauthorized")             \
    X(evicted, "evicted") X(timeouts, "timeout") X(misdirected, "misdirected")

/* The sums over workers that both formats use. */
struct metrics_totals {
    struct proxy_stats s;
    uint64_t pool[DCPOOL_NCOUNTERS]; /* in DCPOOL_COUNTERS's order */
    uint64_t arena_in_use, arena_alloc, arena_max, mask_blocks, pipes_lent, pipes_idle,
        pipes_max;
    uint64_t http[0 HTTP_COUNTERS(COUNTERS_ONE)]; /* in HTTP_COUNTERS's order */
    uint64_t pool_ready;
    uint64_t renders;
};

/* metrics_prom.c. Sums every worker's counters of ms (relaxed reads) and the server's own
 * into t (all of it overwritten). */
void metrics_totals_collect(const struct metrics_shared *ms, struct metrics_totals *t);

/* User i's (g's i-th secret's) counters summed over workers into t (zeros: no users). */
void metrics_user_totals(const struct gen *g, int i, struct user_totals *t);

/* User i's quota (0 = none) and expiry (0 = never). */
void metrics_user_limits(const struct gen *g, int i, uint64_t *quota, int64_t *expires);

/* User i's next quota reset (unix s), 0 if its quota is not periodic; *period its name (NULL
 * if none). */
int64_t metrics_user_quota_reset(const struct gen *g, int i, const char **period);

/* Appends each per-user counter that /stats shows as ,"key":value (t: one user's totals). */
void metrics_user_counters_json(const struct user_totals *t, struct sbuf *out);

/* Appends every metric (t: metrics_totals_collect's) as the JSON objects of /stats's
 * "metrics" array, each after a newline, comma-separated. */
void metrics_samples_json(const struct metrics_shared *ms, const struct gen *g,
                          const struct metrics_totals *t, struct sbuf *out);

/* metrics_stats.c. Appends /stats's (and /users's) opening: "{" the version, times, workers,
 * links (as given) and the summary of t; the caller writes the rest and the closing "}". */
void metrics_stats_head(const struct metrics_shared *ms, const struct metrics_totals *t,
                        int links, struct sbuf *out);

/* Appends user i of g as a /stats user object; its links (and address) only if links. host
 * and port: options_link_host's (host is not changed). */
void metrics_user_json(const struct gen *g, int i, const char *host, int port, int links,
                       struct sbuf *out);

#endif
