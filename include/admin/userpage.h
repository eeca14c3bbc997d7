/* userpage.h: the status page's data for many users: a paged, searched, sorted user list and
 * per-second traffic history rings (the whole proxy's, and a few users' being viewed). Pure
 * functions; the metrics thread calls them (metrics.c). */
#ifndef MTPROXY_PROXY_USERPAGE_H
#define MTPROXY_PROXY_USERPAGE_H

#include <stddef.h>
#include <stdint.h>

#include "core/sbuf.h"

#define HIST_LEN 3600          /* one hour of seconds */
#define HIST_USERS 16          /* user rings kept at most (the least recently viewed goes) */
#define UPAGE_LIMIT_MAX 500    /* users in one page at most */
#define UPAGE_LIMIT_DEFAULT 50

/* One second's traffic per entry, the oldest first from (head - n). */
struct hist_ring {
    uint64_t bytes[HIST_LEN];  /* bytes up + down in that second */
    uint32_t conns[HIST_LEN];  /* connections started in that second */
    uint32_t active[HIST_LEN]; /* open connections when sampled */
    uint32_t head, n;          /* next slot; entries held */
    int primed;                /* prev_* and last are set */
    int64_t last;              /* the second of the last sample */
    uint64_t prev_bytes, prev_conns;
};

/* Samples counters (running totals) at second now: the deltas since the previous sample are
 * entries; seconds missed (a late timer) share the delta evenly. The first call only primes.
 * A counter that went back (a reload that removed a user) counts as 0. */
void hist_sample(struct hist_ring *r, int64_t now, uint64_t bytes_total, uint64_t conns_total,
                 uint64_t active);

/* {"interval":1,"end":LAST,"bytes":[...],"conns":[...],"active":[...]} oldest first. */
void hist_json(const struct hist_ring *r, struct sbuf *out);

/* The rings of users being viewed, found by name; the least recently viewed evicted. */
struct hist_user {
    char name[64];             /* "" = slot free */
    double viewed;             /* when last asked for (monotonic seconds) */
    struct hist_ring *ring;
};
struct hist_users {
    struct hist_user u[HIST_USERS];
};

/* name's ring, started (or an evicted one reused) if it had none; NULL if out of memory or
 * the name is too long. Marks it viewed at now. */
struct hist_ring *hist_users_get(struct hist_users *h, const char *name, double now);
void hist_users_free(struct hist_users *h);

/* --- the user list --------------------------------------------------------------------- */

enum upage_sort { UP_NAME = 0, UP_BYTES, UP_CONNS, UP_ACTIVE, UP_QUOTA };

struct upage_row {
    const char *name;
    uint32_t idx;              /* the secret's index in its generation */
    uint64_t bytes, conns, active, quota_used;
};

struct upage_query {
    size_t offset, limit;
    char q[64];                /* search: a case-insensitive substring of the name ("" = all) */
    enum upage_sort sort;
    int desc;
};

/* Parses a query string (after '?', not decoded: offset, limit, q, sort, order; others are
 * ignored) into out. Defaults: 0, UPAGE_LIMIT_DEFAULT, "", name, asc (bytes, conns, active,
 * quota: desc). Returns 0, or -1 with *why set (a bad number or a sort or order unknown). */
int upage_parse(const char *query, struct upage_query *out, const char **why);

/* Keeps the rows whose name holds q (case-insensitively), in order; returns how many. */
size_t upage_filter(struct upage_row *rows, size_t n, const char *q);

/* Sorts rows by s, descending if desc; ties by name (then index) ascending. */
void upage_sort(struct upage_row *rows, size_t n, enum upage_sort s, int desc);

const char *upage_sort_name(enum upage_sort s);

#endif
