/* metrics.c: a small bounded HTTP/1.1 server on a low-priority thread of its own: /metrics, /stats, the status page, QR codes. */
#include "admin/metrics.h"

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
#include "core/replay.h"
#include "core/worker.h"
#include "proto/http.h"
#include "admin/api.h"
#include "conn/counters.h"
#include "config/lstore.h"
#include "config/prefix.h"
#include "admin/qr.h"
#include "config/reload.h"
#include "admin/userpage.h"

/* The status page (src/admin/status.html), embedded at build time. */
extern const char metrics_status_html[];
extern const size_t metrics_status_html_len;

/* Another worker's plain size_t gauge (arena, pipes): a relaxed load of one aligned word. */
#define GAUGE(p) ((uint64_t)__atomic_load_n((p), __ATOMIC_RELAXED))

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

/* --- one writer, two formats ----------------------------------------------------------- */

/* Samples go out as Prometheus text or as JSON objects of the "metrics" array. */
struct emit {
    struct sbuf *b;
    int json;
    int first; /* JSON: no comma before the next sample */
};

static void family(struct emit *e, const char *name, const char *type, const char *help)
{
    if (!e->json)
        sbuf_printf(e->b, "# HELP mtproxy_%s %s\n# TYPE mtproxy_%s %s\n", name, help, name, type);
}

/* One sample with up to two labels (k2 NULL: one; k1 NULL: none); value is its text. Label
 * values here are user names ([A-Za-z0-9_.-]), numbers and fixed words: nothing to escape. */
static void sample(struct emit *e, const char *name, const char *k1, const char *v1,
                   const char *k2, const char *v2, const char *value)
{
    if (e->json) {
        sbuf_printf(e->b, "%s\n{\"name\":\"mtproxy_%s\",\"labels\":{", e->first ? "" : ",",
                    name);
        if (k1)
            sbuf_printf(e->b, "\"%s\":\"%s\"", k1, v1);
        if (k2)
            sbuf_printf(e->b, ",\"%s\":\"%s\"", k2, v2);
        sbuf_printf(e->b, "},\"value\":%s}", value);
        e->first = 0;
        return;
    }
    sbuf_printf(e->b, "mtproxy_%s", name);
    if (k1)
        sbuf_printf(e->b, k2 ? "{%s=\"%s\",%s=\"%s\"}" : "{%s=\"%s\"}", k1, v1, k2, v2);
    sbuf_printf(e->b, " %s\n", value);
}

static void u64(struct emit *e, const char *name, const char *k1, const char *v1,
                const char *k2, const char *v2, uint64_t v)
{
    char t[32];
    snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    sample(e, name, k1, v1, k2, v2, t);
}

static void dbl(struct emit *e, const char *name, const char *k1, const char *v1, double v)
{
    char t[48];
    snprintf(t, sizeof t, "%.3f", v);
    sample(e, name, k1, v1, NULL, NULL, t);
}

/* A family with one unlabelled sample. */
static void single(struct emit *e, const char *name, const char *type, const char *help,
                   uint64_t v)
{
    family(e, name, type, help);
    u64(e, name, NULL, NULL, NULL, NULL, v);
}

/* Seconds of CPU worker w's thread has used (0 if the clock cannot be read). */
static double worker_cpu(const struct worker *w)
{
    clockid_t cid;
    struct timespec ts;
    if (!w->started || pthread_getcpuclockid(w->thread, &cid) || clock_gettime(cid, &ts))
        return 0;
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The metrics servers' counters (struct metrics_stats): field, outcome label. */
#define HTTP_COUNTERS(X)                                                                       \
    X(requests, "answered") X(bad_requests, "bad") X(unauthorized, "unauthorized")             \
    X(evicted, "evicted") X(timeouts, "timeout") X(misdirected, "misdirected")

/* The sums over workers that both formats use. */
struct totals {
    struct proxy_stats s;
    uint64_t pool[DCPOOL_NCOUNTERS]; /* in DCPOOL_COUNTERS's order */
    uint64_t arena_in_use, arena_alloc, arena_max, mask_blocks, pipes_lent, pipes_idle,
        pipes_max;
    uint64_t http[0 HTTP_COUNTERS(COUNTERS_ONE)]; /* in HTTP_COUNTERS's order */
    uint64_t pool_ready;
    uint64_t renders;
};

static void totals_collect(const struct metrics_shared *ms, struct totals *t)
{
    memset(t, 0, sizeof *t);
    for (int i = 0; i < ms->nworkers; i++) {
        const struct proxy_worker *pw = &ms->pws[i];
        proxy_stats_add(&t->s, &pw->stats);
        int p = 0;
#define POOL_SUM(f, label) t->pool[p++] += STAT_GET(&pw->dcpool.stats.f);
        DCPOOL_COUNTERS(POOL_SUM)
#undef POOL_SUM
        t->pool_ready += STAT_GET(&pw->dcpool.stats.ready);
        t->arena_in_use += GAUGE(&pw->arena.in_use);
        t->arena_alloc += GAUGE(&pw->arena.allocated);
        t->arena_max += GAUGE(&pw->arena.max_blocks);
        t->mask_blocks += GAUGE(&pw->mask_blocks);
        t->pipes_lent += (uint64_t)__atomic_load_n(&pw->pipes_out, __ATOMIC_RELAXED);
        t->pipes_idle += (uint64_t)__atomic_load_n(&pw->npipes, __ATOMIC_RELAXED);
        t->pipes_max += (uint64_t)pw->pipes_cap;
    }
    if (ms->http) {
        int k = 0;
#define HTTP_SUM(f, label) t->http[k++] = STAT_GET(&ms->http->f);
        HTTP_COUNTERS(HTTP_SUM)
#undef HTTP_SUM
        t->renders = STAT_GET(&ms->http->renders);
    }
}

/* User i's (g's i-th secret's) counters summed over workers. */
static void user_totals_of(const struct gen *g, int i, struct user_totals *t)
{
    memset(t, 0, sizeof *t);
    if (g->users && g->uid)
        users_stats_sum(g->users, g->uid[i], t);
}

/* User i's quota (0 = none) and expiry (0 = never). */
static void user_limits_of(const struct gen *g, int i, uint64_t *quota, int64_t *expires)
{
    const struct user_limit *l = g->lim ? g->lim[i] : NULL;
    *quota = l ? l->quota : 0;
    *expires = l ? l->expires : 0;
}

/* The per-user families, in /metrics order: UF(metric, type, help), then what each user has
 * in it: US(field, key, value, json) a counter of struct user_totals, labelled key=value beside
 * user (key NULL: user only), its key in /stats's user object (NULL: none); UH(id) hand code
 * (user_sample): the refusals by reason, and the quota left and the expiry, computed. */
#define USER_METRICS(UF, US, UH)                                                               \
    UF("user_bytes_total", "counter", "Payload bytes relayed per user.")                       \
    US(bytes_up, "direction", "up", "bytes_up")                                                \
    US(bytes_down, "direction", "down", "bytes_down")                                          \
    UF("user_connections_active", "gauge", "Open connections per user.")                      \
    US(active, NULL, NULL, "active")                                                           \
    UF("user_connections_total", "counter", "Connections per user (proved its secret).")       \
    US(conns, NULL, NULL, "connections")                                                       \
    UF("user_limit_refusals_total", "counter",                                                 \
       "New connections of a user refused by a limit (conns, ips, quota, expired, disabled; "  \
       "store: limits-store down with limits-store-fail = closed).")                           \
    UH(REFUSED)                                                                                \
    UF("user_quota_remaining_bytes", "gauge",                                                  \
       "Bytes left of each user's quota (users with a quota only).")                           \
    UH(QUOTA_LEFT)                                                                             \
    UF("user_expiry_timestamp_seconds", "gauge",                                               \
       "When each user's access ends (users with an expiry only).")                           \
    UH(EXPIRY)                                                                                 \
    UF("user_quota_used_bytes", "gauge", "Bytes counted against each user's quota.")           \
    US(quota_used, NULL, NULL, "quota_used")                                                   \
    UF("user_foreign_address_refusals_total", "counter",                                       \
       "listen-prefix: connections with the user's secret refused on an address not the "      \
       "user's.")                                                                              \
    US(foreign_addr, NULL, NULL, "foreign_address_refusals")                                   \
    UF("user_quota_reset_timestamp_seconds", "gauge",                                          \
       "When each user's periodic quota (SIZE/day, /week, /month) next starts over.")          \
    UH(QUOTA_RESET)

enum user_hand { UM_COUNTER, UM_REFUSED, UM_QUOTA_LEFT, UM_EXPIRY, UM_QUOTA_RESET };

/* User i's next quota reset (unix s), 0 if its quota is not periodic; *period its name. */
static int64_t user_quota_reset(const struct gen *g, int i, const char **period)
{
    const struct user_limit *l = g->lim ? g->lim[i] : NULL;
    int64_t next = 0;
    *period = l && l->quota ? users_period_name(l->quota_period) : NULL;
    if (*period)
        users_period_start(l->quota_period, l->quota_day, (int64_t)time(NULL), &next);
    return next;
}

static const struct user_metric {
    int family;                       /* 1: a family (name, type, help); 0: a sample */
    const char *name, *type, *help;
    enum user_hand hand;
    size_t off;                       /* UM_COUNTER: the field in struct user_totals */
    const char *key, *value, *json;
} user_metrics[] = {
#define UM_F(m, t, h) {.family = 1, .name = m, .type = t, .help = h},
#define UM_S(f, k, v, j)                                                                       \
    {.hand = UM_COUNTER, .off = offsetof(struct user_totals, f), .key = k, .value = v, .json = j},
#define UM_H(id) {.hand = UM_##id},
    USER_METRICS(UM_F, UM_S, UM_H)
#undef UM_F
#undef UM_S
#undef UM_H
};
#define USER_NMETRICS (sizeof user_metrics / sizeof user_metrics[0])

static uint64_t user_counter(const struct user_totals *t, const struct user_metric *m)
{
    return *(const uint64_t *)(const void *)((const char *)t + m->off);
}

/* User i's samples (totals t) in family fam of row m. */
static void user_sample(const struct gen *g, int i, const struct user_totals *t,
                        const char *fam, const struct user_metric *m, struct emit *e)
{
    const char *name = g->opt.secrets[i].name;
    uint64_t quota;
    int64_t expires;
    user_limits_of(g, i, &quota, &expires);
    switch (m->hand) {
    case UM_COUNTER:
        u64(e, fam, "user", name, m->key, m->value, user_counter(t, m));
        break;
    case UM_REFUSED:
        for (int r = 0; r < UR_COUNT; r++)
            u64(e, fam, "user", name, "reason", users_refusal_name(r), t->refused[r]);
        break;
    case UM_QUOTA_LEFT:
        if (quota)
            u64(e, fam, "user", name, NULL, NULL,
                quota > t->quota_used ? quota - t->quota_used : 0);
        break;
    case UM_EXPIRY:
        if (expires)
            u64(e, fam, "user", name, NULL, NULL, (uint64_t)expires);
        break;
    case UM_QUOTA_RESET: {
        const char *period;
        int64_t next = user_quota_reset(g, i, &period);
        if (next)
            u64(e, fam, "user", name, NULL, NULL, (uint64_t)next);
        break;
    }
    }
}

/* The per-user families: one pass over the users per family (Prometheus wants a family's
 * samples together). */
static void emit_users(const struct gen *g, struct emit *e)
{
    int n = g->opt.nsecrets;
    struct user_totals *t = malloc((size_t)(n ? n : 1) * sizeof *t);
    if (!t) {
        e->b->failed = 1;
        return;
    }
    for (int i = 0; i < n; i++)
        user_totals_of(g, i, &t[i]);
    for (size_t f = 0; f < USER_NMETRICS; f++) {
        const struct user_metric *fm = &user_metrics[f];
        if (!fm->family)
            continue;
        family(e, fm->name, fm->type, fm->help);
        for (int i = 0; i < n; i++)
            for (size_t s = f + 1; s < USER_NMETRICS && !user_metrics[s].family; s++)
                user_sample(g, i, &t[i], fm->name, &user_metrics[s], e);
    }
    free(t);
}

/* Computed gauges and other structs' counters: the arenas, the pipes, the replay cache, each
 * worker's own figures (CPU), the metrics server's requests. */
static void emit_resources(const struct metrics_shared *ms, const struct options *o,
                           const struct totals *t, struct emit *e)
{
    family(e, "arena_blocks", "gauge", "Relay buffer blocks: in use, allocated, fronted "
           "connections' share, cap (0 = none).");
    u64(e, "arena_blocks", "state", "in_use", NULL, NULL, t->arena_in_use);
    u64(e, "arena_blocks", "state", "allocated", NULL, NULL, t->arena_alloc);
    u64(e, "arena_blocks", "state", "fronted", NULL, NULL, t->mask_blocks);
    u64(e, "arena_blocks", "state", "max", NULL, NULL, t->arena_max);
    single(e, "arena_block_size_bytes", "gauge", "Bytes per buffer block.",
           (uint64_t)o->block_size);
    family(e, "pipes", "gauge", "Splice pipes: lent to connections, idle, cap.");
    u64(e, "pipes", "state", "lent", NULL, NULL, t->pipes_lent);
    u64(e, "pipes", "state", "idle", NULL, NULL, t->pipes_idle);
    u64(e, "pipes", "state", "max", NULL, NULL, t->pipes_max);

    if (ms->replay) {
        struct replay_stats r;
        replay_stats(ms->replay, &r);
        single(e, "replay_cache_entries", "gauge", "Replay cache slots in use.", r.entries);
        single(e, "replay_cache_capacity", "gauge", "Replay cache slots.", r.capacity);
        single(e, "replay_cache_memory_bytes", "gauge", "Replay cache memory.", r.memory);
        single(e, "replay_cache_lookups_total", "counter", "Replay cache lookups.", r.lookups);
        single(e, "replay_cache_evictions_total", "counter",
               "Live replay cache entries pushed out by newer ones.", r.evicted);
    }

    static const struct {
        const char *name, *type, *help;
    } per_worker[] = {
        {"worker_connections_active", "gauge", "Open client connections per worker."},
        {"worker_connections_accepted_total", "counter", "Connections accepted per worker."},
        {"worker_cpu_seconds_total", "counter", "CPU time used by each worker thread."},
        {"worker_accept_pauses_total", "counter",
         "Times a worker paused accepting (connection slots or buffers full)."},
        {"worker_fd_limit_total", "counter", "Times a worker ran out of descriptors."},
    };
    for (size_t f = 0; f < sizeof per_worker / sizeof per_worker[0]; f++) {
        family(e, per_worker[f].name, per_worker[f].type, per_worker[f].help);
        for (int i = 0; i < ms->nworkers; i++) {
            char id[16];
            snprintf(id, sizeof id, "%d", i);
            if (f == 2) {
                dbl(e, per_worker[f].name, "worker", id, worker_cpu(&ms->ws[i]));
                continue;
            }
            const stat_t *v = f == 0   ? &ms->pws[i].stats.active
                              : f == 1 ? &ms->pws[i].stats.accepted
                              : f == 3 ? &ms->ws[i].stats.accept_pauses
                                       : &ms->ws[i].stats.accept_fd_limit;
            u64(e, per_worker[f].name, "worker", id, NULL, NULL, STAT_GET(v));
        }
    }

    family(e, "http_requests_total", "counter",
           "Metrics server requests by outcome (answered, bad, unauthorized, evicted, timeout, "
           "misdirected: a foreign Host on a loopback address).");
    int k = 0;
#define HTTP_SAMPLE(f, label)                                                                  \
    u64(e, "http_requests_total", "outcome", label, NULL, NULL, t->http[k++]);
    HTTP_COUNTERS(HTTP_SAMPLE)
#undef HTTP_SAMPLE
    single(e, "http_renders_total", "counter",
           "/metrics and /stats bodies rendered (the others were served from the cache).",
           t->renders);
}

/* The families and samples the table leaves to hand code (H rows of proxy/counters.h): the
 * arrays, by loops over their names, and what is computed from other structs. */
static void emit_hand(const struct metrics_shared *ms, const struct gen *g,
                      const struct totals *t, struct emit *e, enum counters_hand h)
{
    const struct proxy_stats *s = &t->s;
    const struct options *o = &g->opt;
    switch (h) {
    case CH_INFO:
        family(e, "build_info", "gauge", "Build of this proxy (value 1).");
        sample(e, "build_info", "version", MTPROXY_VERSION, NULL, NULL, "1");
        family(e, "start_time_seconds", "gauge", "Start time, seconds since the Unix epoch.");
        u64(e, "start_time_seconds", NULL, NULL, NULL, NULL, (uint64_t)ms->start_time);
        single(e, "workers", "gauge", "Worker threads.", (uint64_t)ms->nworkers);
        single(e, "users", "gauge", "Users (secrets) configured.", (uint64_t)o->nsecrets);
        single(e, "config_generation", "gauge", "Configuration generation (1 at start, +1 per "
               "accepted reload).", g->serial);
        break;
    case CH_KIND_TOTAL:
        for (int k = 1; k < CK_COUNT; k++)
            u64(e, "connections_total", "kind", conn_kind_name(k), NULL, NULL,
                STAT_GET(&s->kind_total[k]));
        break;
    case CH_KIND_ACTIVE: {
        uint64_t known = 0;
        for (int k = 1; k < CK_COUNT; k++) {
            known += STAT_GET(&s->kind_active[k]);
            u64(e, "connections_active", "kind", conn_kind_name(k), NULL, NULL,
                STAT_GET(&s->kind_active[k]));
        }
        uint64_t active = STAT_GET(&s->active); /* computed: open, kind not known yet */
        u64(e, "connections_active", "kind", "handshake", NULL, NULL,
            active > known ? active - known : 0);
        break;
    }
    case CH_CLOSED:
        for (int r = 0; r < CR_COUNT; r++)
            u64(e, "connections_closed_total", "reason", conn_reason_name(r), NULL, NULL,
                STAT_GET(&s->closed[r]));
        break;
    case CH_DC_BYTES:
        for (int d = 0; d < CONN_DC_SLOTS; d++) {
            uint64_t up = STAT_GET(&s->dc_bytes[d][0]), down = STAT_GET(&s->dc_bytes[d][1]);
            if (d >= 5 && !up && !down)
                continue; /* media, CDN and other DCs only once used */
            u64(e, "dc_bytes_total", "dc", conn_dc_slot_name(d), "direction", "up", up);
            u64(e, "dc_bytes_total", "dc", conn_dc_slot_name(d), "direction", "down", down);
        }
        break;
    case CH_DC_POOL: {
        family(e, "dc_pool_total", "counter", "DC pool: sockets connected, claimed by clients, "
               "dropped by the DC, failed connects, recycled before the DC's idle timeout.");
        int i = 0;
#define POOL_SAMPLE(f, label) u64(e, "dc_pool_total", "event", label, NULL, NULL, t->pool[i++]);
        DCPOOL_COUNTERS(POOL_SAMPLE)
#undef POOL_SAMPLE
        single(e, "dc_pool_size", "gauge", "Pre-connected sockets kept per DC per worker.",
               (uint64_t)o->dc_pool);
        single(e, "dc_pool_ready", "gauge", "Pre-connected DC sockets ready for a client now "
               "(all workers and DCs).", t->pool_ready);
        break;
    }
    case CH_USERS:
        emit_users(g, e);
        break;
    case CH_MIDDLE_MODE:
        /* Middle-proxy mode (ad-tag): the RPC links to Telegram's MEs. */
        single(e, "middle_mode", "gauge", "1 in middle-proxy mode (ad-tag set), else 0.",
               (uint64_t)(o->middle != 0));
        break;
    case CH_RESOURCES:
        emit_resources(ms, o, t, e);
        break;
    case CH_COUNT:
        break;
    }
}

/* The counter table's rows in order. */
static void emit_table(const struct metrics_shared *ms, const struct gen *g,
                       const struct totals *t, struct emit *e)
{
    const char *fam = NULL;
    for (size_t i = 0; i < counters_nrows; i++) {
        const struct counters_row *r = &counters_rows[i];
        if (r->kind == CROW_FAMILY) {
            fam = r->name;
            family(e, fam, r->type, r->help);
        } else if ((r->kind == CROW_COUNTER || r->kind == CROW_VIEW) && r->sample) {
            u64(e, fam, r->k1, r->v1, r->k2, r->v2, counters_get(&t->s, r));
        } else if (r->kind == CROW_HAND) {
            emit_hand(ms, g, t, e, r->hand);
        }
    }
}

/* The sections of /metrics, and of /stats's "metrics" array, in this order: each writes its
 * families through e (family, sample, u64...: either format). Add a section here. */
typedef void (*metrics_section_fn)(const struct metrics_shared *ms, const struct gen *g,
                                   const struct totals *t, struct emit *e);

/* limits-store (only when it is on): the flusher's counters, and per user with a conns or
 * ips limit what the other instances hold. */
static void emit_lstore(const struct metrics_shared *ms, const struct gen *g,
                        const struct totals *t, struct emit *e)
{
    (void)ms, (void)t;
    const struct lstore *ls = g->users ? g->users->fleet : NULL;
    if (!ls)
        return;
    struct lstore_view v;
    lstore_read(ls, &v);
    single(e, "limits_store_up", "gauge", "limits-store: 1 if the last flush was answered, 0 "
           "while it is down (limits-store-fail applies).", v.state == LSTORE_UP);
    single(e, "limits_store_flushes_total", "counter", "limits-store: flushes answered in full.",
           v.flushes);
    single(e, "limits_store_failures_total", "counter", "limits-store: flushes that failed "
           "(down, an error, no answer within two intervals).", v.failures);
    single(e, "limits_store_commands_total", "counter", "limits-store: Redis commands sent.",
           v.commands);
    single(e, "limits_store_instances", "gauge", "limits-store: other instances with live "
           "connections of users with limits, as of the last flush.", v.instances);
    family(e, "limits_store_cpu_seconds_total", "counter", "limits-store: CPU time of the "
           "flusher thread.");
    dbl(e, "limits_store_cpu_seconds_total", NULL, NULL, v.cpu_seconds);
    family(e, "limits_store_flush_seconds", "gauge", "limits-store: the last answered flush's "
           "round trip.");
    char rtt[32]; /* to the microsecond: a loopback flush takes well under a millisecond */
    snprintf(rtt, sizeof rtt, "%.6f", v.last_flush_seconds);
    sample(e, "limits_store_flush_seconds", NULL, NULL, NULL, NULL, rtt);
    family(e, "user_fleet_connections", "gauge", "limits-store: live connections of each user "
           "with a conns or ips limit on the other instances, as of the last flush.");
    for (int i = 0; i < g->opt.nsecrets; i++)
        if (g->lim && g->lim[i] && (g->lim[i]->conns || g->lim[i]->ips))
            u64(e, "user_fleet_connections", "user", g->opt.secrets[i].name, NULL, NULL,
                atomic_load(&users_shared(g->users, g->uid[i])->fleet_conns));
    family(e, "user_fleet_addresses", "gauge", "limits-store: recent client addresses of each "
           "user with a conns or ips limit on the other instances (each instance's distinct "
           "ones, summed), as of the last flush.");
    for (int i = 0; i < g->opt.nsecrets; i++)
        if (g->lim && g->lim[i] && (g->lim[i]->conns || g->lim[i]->ips))
            u64(e, "user_fleet_addresses", "user", g->opt.secrets[i].name, NULL, NULL,
                atomic_load(&users_shared(g->users, g->uid[i])->fleet_ips));
}

static const metrics_section_fn sections[] = {
    emit_table,
    emit_lstore,
};

/* Every metric, in either format. */
static void emit_all(const struct metrics_shared *ms, const struct gen *g,
                     const struct totals *t, struct emit *e)
{
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
        sections[i](ms, g, t, e);
}

int metrics_render_prometheus(const struct metrics_shared *ms, const struct gen *g,
                              struct sbuf *out)
{
    struct totals *t = malloc(sizeof *t);
    if (!t)
        return -1;
    totals_collect(ms, t);
    struct emit e = {.b = out, .json = 0, .first = 1};
    emit_all(ms, g, t, &e);
    ja4stat_render_prometheus(ms->pws, ms->nworkers, g, out);
    free(t);
    return out->failed ? -1 : 0;
}

/* /stats's (and /users's) opening: "{" the version, times, workers, links and summary. */
static void stats_head(const struct metrics_shared *ms, const struct totals *t, int links,
                       struct sbuf *out)
{
    time_t now = time(NULL);
    sbuf_printf(out,
                "{\"version\":\"%s\",\"start_time\":%lld,\"now\":%lld,\"uptime\":%lld,"
                "\"workers\":%d,\"links\":%s,\"summary\":",
                MTPROXY_VERSION, (long long)ms->start_time, (long long)now,
                (long long)(now - ms->start_time), ms->nworkers, links ? "true" : "false");
    counters_json_summary(&t->s, out);
}

/* User i of g as a /stats user object; its links (and address) only if links. host and port:
 * options_link_host's. */
static void user_json(const struct gen *g, int i, const char *host, int port, int links,
                      struct sbuf *out)
{
    const struct options *o = &g->opt;
    const struct secret *sec = &o->secrets[i];
    struct user_totals ut;
    user_totals_of(g, i, &ut);
    uint64_t quota;
    int64_t expires;
    user_limits_of(g, i, &quota, &expires);
    char ql[32] = "null", ex[32] = "null";
    if (quota)
        snprintf(ql, sizeof ql, "%llu",
                 (unsigned long long)(quota > ut.quota_used ? quota - ut.quota_used : 0));
    if (expires)
        snprintf(ex, sizeof ex, "%lld", (long long)expires);
    sbuf_printf(out, "{\"name\":\"%s\",\"kind\":\"%s\"", sec->name,
                sec->kind == SECRET_EE ? "ee" : sec->kind == SECRET_DD ? "dd" : "plain");
    for (size_t m = 0; m < USER_NMETRICS; m++)
        if (user_metrics[m].json)
            sbuf_printf(out, ",\"%s\":%llu", user_metrics[m].json,
                        (unsigned long long)user_counter(&ut, &user_metrics[m]));
    sbuf_printf(out, ",\"quota_left\":%s,\"expires\":%s", ql, ex);
    const char *period;
    int64_t reset = user_quota_reset(g, i, &period);
    if (reset) /* a periodic quota only: its period and the next reset (unix s) */
        sbuf_printf(out, ",\"quota_period\":\"%s\",\"quota_reset\":%lld", period,
                    (long long)reset);
    if (g->users && g->users->fleet && g->uid) /* limits-store: the other instances' share */
        sbuf_printf(out, ",\"fleet_connections\":%u,\"fleet_addresses\":%u",
                    atomic_load(&users_shared(g->users, g->uid[i])->fleet_conns),
                    atomic_load(&users_shared(g->users, g->uid[i])->fleet_ips));
    char tg[1024], https[1024], uhost[256];
    snprintf(uhost, sizeof uhost, "%s", host);
    int uport = prefix_link_host(o, i, uhost, sizeof uhost, port);
    if (links && o->user_addr) /* as secret as the links: a censor would block them */
        sbuf_printf(out, ",\"address\":\"%s\"", uhost);
    if (links && !secret_links(sec, uhost, uport, tg, sizeof tg, https, sizeof https))
        sbuf_printf(out, ",\"tg\":\"%s\",\"https\":\"%s\"", tg, https);
    sbuf_printf(out, "}");
}

int metrics_render_json(const struct metrics_shared *ms, const struct gen *g, int links,
                        struct sbuf *out)
{
    struct totals *t = malloc(sizeof *t);
    if (!t)
        return -1;
    totals_collect(ms, t);
    const struct options *o = &g->opt;
    char host[256];
    int port = options_link_host(o, host, sizeof host);
    stats_head(ms, t, links, out);
    sbuf_printf(out, ",\"users\":[");
    for (int i = 0; i < o->nsecrets; i++) {
        sbuf_printf(out, "%s", i ? "," : "");
        user_json(g, i, host, port, links, out);
    }
    sbuf_printf(out, "],\"metrics\":[");
    struct emit e = {.b = out, .json = 1, .first = 1};
    emit_all(ms, g, t, &e);
    ja4stat_render_json(ms->pws, ms->nworkers, g, out);
    sbuf_printf(out, "\n]}\n");
    free(t);
    return out->failed ? -1 : 0;
}

/* --- the server ------------------------------------------------------------------------ */

/* A response body: shared by every connection sending it and by the cache (one reference
 * each); the last reference frees it, so a slow reader keeps an old body alive while the
 * cache moves on. Only the server's thread touches it. */
struct mbody {
    int refs;
    int owned;         /* p is the body's own memory (else static: the status page) */
    const char *p;
    size_t len, cap;
    struct metrics_server *home; /* a cached body: its memory goes to home's spare[kind] */
    int kind;
    uint64_t serial;   /* the generation it was rendered from */
    double born;       /* when its rendering started (seconds, monotonic) */
    double cost;       /* the CPU time its rendering took (seconds) */
};

enum { MB_METRICS, MB_STATS, MB_COUNT };

/* The memory of a cached body no longer used, for the next rendering of its kind: in steady
 * state rendering allocates nothing (no mmap, munmap or page faults, which would make the
 * relays' threads wait for the process's memory map or a TLB flush). */
struct mspare {
    char *p;
    size_t cap;
};

struct metrics_conn {
    struct metrics_server *s;
    int fd;                 /* -1: slot free */
    ev_io io;
    ev_timer timer;
    ev_tstamp born;
    uint8_t src[16];        /* the peer's address (IPv4 as ::ffff:a.b.c.d) */
    enum { MC_READ = 0, MC_WRITE, MC_LINGER } state;
    int api;                /* accepted on the API's listener */
    uint8_t *big;           /* API: a request whose body outgrows req (head and body) */
    size_t bigcap;
    size_t len;             /* request bytes in req (or big) */
    uint8_t req[METRICS_REQ_MAX];
    char head[1280];        /* status line and headers, then a short text body if any */
    size_t head_len;
    struct mbody *body;     /* a reference, or NULL (no body, or HEAD) */
    size_t off;             /* bytes of head, then body, written */
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
    struct mbody *cache[MB_COUNT];
    struct mspare spare[MB_COUNT];
    struct mbody *status_page;
    ev_timer hist_timer;            /* once a second: the traffic history rings */
    struct hist_ring *hist;         /* the whole proxy's (NULL: out of memory) */
    struct hist_users hist_users;   /* the users being viewed */
    struct upage_row *rows;         /* the user list's rows, one per user of gen */
    size_t rows_cap;
    struct metrics_stats stats;
    struct metrics_conn conns[METRICS_MAX_CONNS];
};

static double clock_now(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct mbody *body_new(const char *p, size_t len, int owned)
{
    struct mbody *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->refs = 1;
    b->owned = owned;
    b->p = p;
    b->len = len;
    return b;
}

static void body_unref(struct mbody *b)
{
    if (!b || --b->refs > 0)
        return;
    struct mspare *sp = b->home ? &b->home->spare[b->kind] : NULL;
    if (sp && !sp->p) {
        sp->p = (char *)b->p;
        sp->cap = b->cap;
    } else if (b->owned) {
        free((char *)b->p);
    }
    free(b);
}

/* An sbuf's text as a body (the sbuf is emptied), or NULL (it failed, or out of memory). */
static struct mbody *body_of(struct sbuf *out)
{
    struct mbody *b = out->failed ? NULL : body_new(out->p ? out->p : "", out->len, out->p != NULL);
    if (!b)
        sbuf_free(out);
    else
        b->cap = out->cap;
    return b;
}

/* /metrics or /stats (which) as served now: the cached body while it is fresh (rendered from
 * the generation served now, less than METRICS_CACHE_FACTOR times the CPU time its rendering
 * took ago, at most METRICS_CACHE_MAX), else a new one, cached. CPU time, not wall time: a
 * render that waited for the CPU (the relays come first) cost the process nothing more.
 * Returns a reference, or NULL (out of memory, or larger than METRICS_BODY_MAX). */
static struct mbody *body_get(struct metrics_server *s, int which, int links)
{
    double now = clock_now(CLOCK_MONOTONIC), cpu = clock_now(CLOCK_THREAD_CPUTIME_ID);
    struct mbody *b = s->cache[which];
    if (b && b->serial == s->gen->serial) {
        double ttl = METRICS_CACHE_FACTOR * b->cost;
        if (now - b->born < (ttl < METRICS_CACHE_MAX ? ttl : METRICS_CACHE_MAX)) {
            b->refs++;
            return b;
        }
    }
    struct mspare *sp = &s->spare[which];
    struct sbuf out = {.p = sp->p, .cap = sp->cap, .max = METRICS_BODY_MAX};
    *sp = (struct mspare){0};
    if (which == MB_METRICS)
        metrics_render_prometheus(s->ms, s->gen, &out);
    else
        metrics_render_json(s->ms, s->gen, links, &out);
    STAT_INC(&s->stats.renders);
    if (!(b = body_of(&out)))
        return NULL;
    b->home = s;
    b->kind = which;
    b->serial = s->gen->serial;
    b->born = now;
    b->cost = clock_now(CLOCK_THREAD_CPUTIME_ID) - cpu;
    body_unref(s->cache[which]);
    s->cache[which] = b;
    b->refs++;
    return b;
}

static void mconn_close(struct metrics_conn *m)
{
    struct ev_loop *loop = m->s->loop;
    if (m->api && m->s->napi-- == API_MAX_CONNS && m->s->alfd >= 0)
        ev_io_start(loop, &m->s->alio); /* a slot for the next queued API client */
    ev_io_stop(loop, &m->io);
    ev_timer_stop(loop, &m->timer);
    close(m->fd);
    m->fd = -1;
    body_unref(m->body);
    m->body = NULL;
    free(m->big);
    m->big = NULL;
    m->bigcap = 0;
}

/* What a send/recv result means: IO_MOVED bytes moved, IO_AGAIN retry at once (EINTR),
 * IO_WAIT wait for the socket, IO_END end of stream or error. */
enum io_step { IO_MOVED, IO_AGAIN, IO_WAIT, IO_END };

static enum io_step io_step(ssize_t n)
{
    if (n > 0)
        return IO_MOVED;
    if (n < 0 && errno == EINTR)
        return IO_AGAIN;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return IO_WAIT;
    return IO_END;
}

/* (Re)arms m's deadline: timeout seconds from now. */
static void mconn_deadline(struct metrics_conn *m, double timeout)
{
    ev_timer_stop(m->s->loop, &m->timer);
    ev_timer_set(&m->timer, timeout, 0);
    ev_timer_start(m->s->loop, &m->timer);
}

/* (Re)arms m's watcher for events and its deadline. */
static void mconn_watch(struct metrics_conn *m, int events, double timeout)
{
    struct ev_loop *loop = m->s->loop;
    ev_io_stop(loop, &m->io);
    ev_io_set(&m->io, m->fd, events);
    ev_io_start(loop, &m->io);
    mconn_deadline(m, timeout);
}

/* Writes what is left of the response: the head, then the shared body from m->off on, at
 * most METRICS_SEND_CHUNK bytes a call; every send that moves bytes restarts the
 * METRICS_WRITE_IDLE deadline. Once all is written: FIN,
 * then a lingering close (bytes the client pipelined are read and dropped for a moment, so
 * that closing with them unread does not reset the connection before the client read the
 * answer). */
static void mconn_write(struct metrics_conn *m)
{
    size_t blen = m->body ? m->body->len : 0, total = m->head_len + blen;
    int moved = 0;
    while (m->off < total) {
        struct iovec iov[2];
        int n = 0;
        if (m->off < m->head_len)
            iov[n++] = (struct iovec){m->head + m->off, m->head_len - m->off};
        size_t bo = m->off > m->head_len ? m->off - m->head_len : 0;
        if (bo < blen)
            iov[n++] = (struct iovec){(char *)m->body->p + bo,
                                      blen - bo < METRICS_SEND_CHUNK ? blen - bo
                                                                     : METRICS_SEND_CHUNK};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t r = sendmsg(m->fd, &mh, MSG_NOSIGNAL);
        enum io_step st = io_step(r);
        if (st == IO_WAIT) {
            if (moved)
                mconn_deadline(m, METRICS_WRITE_IDLE);
            return;
        }
        if (st == IO_END) {
            mconn_close(m);
            return;
        }
        if (st == IO_MOVED) {
            m->off += (size_t)r;
            moved = 1;
        }
    }
    shutdown(m->fd, SHUT_WR);
    body_unref(m->body);
    m->body = NULL;
    m->state = MC_LINGER;
    m->len = 0;
    mconn_watch(m, EV_READ, METRICS_LINGER_TIMEOUT);
}

/* Lingering close: drops what the client still sends until its EOF, a cap or the timer. */
static void mconn_linger(struct metrics_conn *m)
{
    for (;;) {
        ssize_t n = recv(m->fd, m->req, sizeof m->req, 0);
        enum io_step st = io_step(n);
        if (st == IO_WAIT)
            return;
        if (st == IO_END || (st == IO_MOVED && (m->len += (size_t)n) >= METRICS_LINGER_MAX)) {
            mconn_close(m);
            return;
        }
    }
}

static const char *status_text(int code)
{
    switch (code) {
    case 200: return "OK";
    case 201: return "Created";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 504: return "Gateway Timeout";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 414: return "URI Too Long";
    case 421: return "Misdirected Request";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "HTTP Version Not Supported";
    }
}

/* Sets m's response: head, then body (a reference handed over; dropped for HEAD), or the
 * short text (body NULL; at most a few hundred bytes). */
static void respond(struct metrics_conn *m, int code, const char *type, struct mbody *body,
                    const char *text, int head_only)
{
    size_t len = body ? body->len : strlen(text);
    int n = snprintf(m->head, sizeof m->head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\nCache-Control: no-store\r\n"
                     "X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n"
                     "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; "
                     "style-src 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
                     "base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n%s\r\n%s",
                     code, status_text(code), type, len,
                     code == 401 ? "WWW-Authenticate: Bearer realm=\"mtproxy\"\r\n" : "",
                     body || head_only ? "" : text);
    m->head_len = n < 0 ? 0 : (size_t)n < sizeof m->head ? (size_t)n : sizeof m->head - 1;
    if (head_only) {
        body_unref(body);
        body = NULL;
    }
    m->body = body;
}

static void respond_text(struct metrics_conn *m, int code, const char *text, int head_only)
{
    respond(m, code, "text/plain; charset=utf-8", NULL, text, head_only);
}

/* /qr/NAME.svg: the t.me link of user NAME of g as a QR code, or NULL. */
static struct mbody *qr_body(const struct gen *g, const char *name)
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
        return body_of(&out);
    }
    return NULL;
}

/* --- the status page for many users: the user list, one user, the history (userpage.c) --- */

/* The query string of m's request line (after '?', not decoded) into q ("" if none). */
static void request_query(const struct metrics_conn *m, char *q, size_t qlen)
{
    const uint8_t *p = memchr(m->req, ' ', m->len), *end = m->req + m->len;
    q[0] = 0;
    if (!p)
        return;
    const uint8_t *sp = memchr(p + 1, ' ', (size_t)(end - p - 1));
    const uint8_t *qm = memchr(p + 1, '?', (size_t)((sp ? sp : end) - p - 1));
    if (!sp || !qm)
        return;
    size_t n = (size_t)(sp - qm - 1);
    if (n >= qlen)
        n = qlen - 1;
    memcpy(q, qm + 1, n);
    q[n] = 0;
}

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
static struct mbody *users_body(struct metrics_server *s, const char *query, int links,
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
        user_totals_of(g, (int)i, &ut);
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
    struct totals *t = malloc(sizeof *t);
    if (!t)
        return NULL;
    totals_collect(s->ms, t);
    stats_head(s->ms, t, links, &out);
    free(t);
    sbuf_printf(&out, ",\"user_addr\":%s,\"total\":%zu,\"matched\":%zu,\"offset\":%zu,"
                "\"limit\":%zu,\"sort\":\"%s\",\"order\":\"%s\",\"users\":[",
                g->opt.user_addr ? "true" : "false", n, k, uq.offset, uq.limit,
                upage_sort_name(uq.sort), uq.desc ? "desc" : "asc");
    for (size_t i = uq.offset; i < k && i < uq.offset + uq.limit; i++) {
        sbuf_printf(&out, "%s", i > uq.offset ? "," : "");
        user_json(g, (int)s->rows[i].idx, host, port, 0, &out);
    }
    sbuf_printf(&out, "]}\n");
    return body_of(&out);
}

/* GET /users/NAME: user NAME with its links (if links), or NULL (no such user). */
static struct mbody *user_body(struct metrics_server *s, const char *path, int links)
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
    user_json(s->gen, i, host, port, links, &out);
    sbuf_printf(&out, "}\n");
    return body_of(&out);
}

/* GET /history (name NULL) or /history/NAME: the last hour per second. A user's is kept
 * from the first time it is asked for (HIST_USERS users at most: the least recently viewed
 * is dropped). NULL: no such user, or out of memory. */
static struct mbody *history_body(struct metrics_server *s, const char *path)
{
    const struct hist_ring *r = s->hist;
    char name[SECRET_NAME_MAX + 1] = "";
    if (path) {
        if (http_pct_decode(path, strlen(path), name, sizeof name, 0) < 0 ||
            user_index(s->gen, name) < 0)
            return NULL;
        r = hist_users_get(&s->hist_users, name, clock_now(CLOCK_MONOTONIC));
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
    return body_of(&out);
}

/* Once a second on the server's thread: the counters (relaxed reads, as /stats) into the
 * rings; nothing runs on the relays' loops. */
static void on_hist_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct metrics_server *s = t->data;
    (void)loop, (void)revents;
    int64_t now = (int64_t)clock_now(CLOCK_MONOTONIC);
    struct totals *tt = malloc(sizeof *tt);
    if (s->hist && tt) {
        totals_collect(s->ms, tt);
        hist_sample(s->hist, now, STAT_GET(&tt->s.bytes_up) + STAT_GET(&tt->s.bytes_down),
                    STAT_GET(&tt->s.accepted), STAT_GET(&tt->s.active));
    }
    free(tt);
    for (int k = 0; k < HIST_USERS; k++) {
        struct hist_user *hu = &s->hist_users.u[k];
        int i = hu->name[0] && hu->ring ? user_index(s->gen, hu->name) : -1;
        struct user_totals ut = {0};
        if (i >= 0)
            user_totals_of(s->gen, i, &ut);
        if (hu->name[0] && hu->ring) /* a user gone counts nothing */
            hist_sample(hu->ring, now, ut.bytes_up + ut.bytes_down, ut.conns, ut.active);
    }
}

/* Serves the paths above; 0 if path is not one of them. */
static int serve_userpage(struct metrics_conn *m, const struct http_request *rq, int links,
                          int head)
{
    struct metrics_server *s = m->s;
    struct mbody *body = NULL;
    if (!strcmp(rq->path, "/users")) {
        char query[METRICS_REQ_MAX];
        const char *why = NULL;
        request_query(m, query, sizeof query);
        if (!(body = users_body(s, query, links, &why))) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s\n", why);
            respond_text(m, strcmp(why, "out of memory") ? 400 : 503, msg, head);
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
        respond_text(m, 404, "no such user\n", head);
    else
        respond(m, 200, "application/json", body, NULL, head);
    return 1;
}

/* Serves one parsed request: sets m's response. */
static void serve(struct metrics_conn *m, const struct http_request *rq)
{
    struct metrics_server *s = m->s;
    const struct metrics_shared *ms = s->ms;
    const struct gen *g = s->gen; /* the users, links and token served now */
    const char *token = g->opt.metrics_token;
    int head = rq->method == HTTP_HEAD;
    if (token[0] && !((rq->has_bearer && http_token_equal(rq->bearer, token)) ||
                      (rq->has_token && http_token_equal(rq->token, token)))) {
        STAT_INC(&s->stats.unauthorized);
        respond_text(m, 401, "a token is needed: Authorization: Bearer TOKEN or ?token=TOKEN\n",
                     head);
        return;
    }
    /* Links are served for the address alone: a page of another site that the browser
     * resolved to loopback (DNS rebinding) must not read them; its Host is that site's. */
    if (!token[0] && ms->loopback && rq->has_host && !metrics_host_is_loopback(rq->host)) {
        STAT_INC(&s->stats.misdirected);
        respond_text(m, 421, "this server answers only to Host: localhost, 127.0.0.1 or [::1] "
                     "(or with metrics-token)\n", head);
        return;
    }
    int links = token[0] || ms->loopback;
    struct mbody *body = NULL;
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
            respond_text(m, 404, "no such user, or no QR codes in this build\n", head);
            return;
        }
        type = "image/svg+xml";
    } else {
        respond_text(m, 404, "not found: try /, /metrics, /stats, /users or /history\n", head);
        return;
    }
    if (!body) {
        respond_text(m, 503, "out of memory\n", head);
        return;
    }
    respond(m, 200, type, body, NULL, head);
}

/* An API request (its body follows the head): the answer is JSON. */
static void serve_api(struct metrics_conn *m, const struct http_request *rq, const uint8_t *buf)
{
    struct sbuf out = {.max = METRICS_BODY_MAX};
    int code = api_serve(m->s->api, rq, (const char *)buf + rq->consumed, rq->content_length,
                         &out);
    if (code == 401)
        STAT_INC(&m->s->stats.unauthorized);
    struct mbody *b = body_of(&out);
    if (!b)
        respond_text(m, 503, "out of memory\n", 0);
    else
        respond(m, code, "application/json", b, NULL, rq->method == HTTP_HEAD);
}

static void mconn_read(struct metrics_conn *m)
{
    for (;;) {
        uint8_t *buf = m->big ? m->big : m->req;
        size_t cap = m->big ? m->bigcap : sizeof m->req;
        if (m->len >= cap)
            break;
        ssize_t n = recv(m->fd, buf + m->len, cap - m->len, 0);
        enum io_step st = io_step(n);
        if (st == IO_WAIT)
            break;
        if (st == IO_END) {
            mconn_close(m); /* EOF or error before a whole request */
            return;
        }
        if (st == IO_MOVED)
            m->len += (size_t)n;
    }
    struct http_request rq;
    const uint8_t *buf = m->big ? m->big : m->req;
    enum http_status st = http_parse_request_body(buf, m->len, sizeof m->req, METRICS_MAX_HEADERS,
                                                  m->api ? API_BODY_MAX : 0, &rq);
    if (st == HTTP_NEED_MORE)
        return;
    if (st == HTTP_OK && m->len < rq.consumed + rq.content_length) { /* the body's rest */
        size_t need = rq.consumed + rq.content_length;
        if (need > (m->big ? m->bigcap : sizeof m->req)) {
            uint8_t *big = malloc(need);
            if (!big) {
                mconn_close(m);
                return;
            }
            memcpy(big, buf, m->len);
            free(m->big);
            m->big = big;
            m->bigcap = need;
        }
        return; /* level-triggered: bytes still queued wake us again */
    }
    if (st == HTTP_BAD) {
        STAT_INC(&m->s->stats.bad_requests);
        char msg[160];
        snprintf(msg, sizeof msg, "%s\n", rq.why);
        respond_text(m, rq.code, msg, 0);
    } else if (m->api) {
        serve_api(m, &rq, buf);
    } else {
        serve(m, &rq);
    }
    STAT_INC(&m->s->stats.requests);
    /* One request per connection: anything pipelined after it is never served. */
    m->state = MC_WRITE;
    m->off = 0;
    mconn_watch(m, EV_WRITE, METRICS_WRITE_IDLE);
    mconn_write(m);
}

static void on_mconn_io(struct ev_loop *loop, ev_io *io, int revents)
{
    struct metrics_conn *m = io->data;
    if (m->state == MC_WRITE)
        mconn_write(m);
    else if (m->state == MC_LINGER)
        mconn_linger(m);
    else
        mconn_read(m);
}

static void on_mconn_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct metrics_conn *m = t->data;
    if (m->state != MC_LINGER)
        STAT_INC(&m->s->stats.timeouts);
    mconn_close(m);
}

/* Closes m to give its slot to a new connection. */
static struct metrics_conn *slot_evict(struct metrics_server *s, struct metrics_conn *m)
{
    if (m->state == MC_READ)
        STAT_INC(&s->stats.evicted);
    mconn_close(m);
    return m;
}

/* A slot for a new connection from src: a source that already has METRICS_MAX_PER_SOURCE
 * connections gets the slot of its own oldest one not writing a response (or none); else a
 * free slot, or the slot of the oldest connection not writing a response. NULL: none. */
static struct metrics_conn *slot_get(struct metrics_server *s, const uint8_t src[16])
{
    struct metrics_conn *free_slot = NULL, *oldest = NULL, *oldest_mine = NULL;
    int mine = 0;
    for (int i = 0; i < METRICS_MAX_CONNS; i++) {
        struct metrics_conn *m = &s->conns[i];
        if (m->fd < 0) {
            if (!free_slot)
                free_slot = m;
            continue;
        }
        int same = !memcmp(m->src, src, 16);
        mine += same;
        if (m->state == MC_WRITE || m->api) /* API clients wait their turn: never evicted */
            continue;
        if (!oldest || m->born < oldest->born)
            oldest = m;
        if (same && (!oldest_mine || m->born < oldest_mine->born))
            oldest_mine = m;
    }
    if (mine >= METRICS_MAX_PER_SOURCE)
        return oldest_mine ? slot_evict(s, oldest_mine) : NULL;
    if (free_slot)
        return free_slot;
    return oldest ? slot_evict(s, oldest) : NULL;
}

/* A free slot for an API connection, or NULL. */
static struct metrics_conn *slot_free(struct metrics_server *s)
{
    for (int i = 0; i < METRICS_MAX_CONNS; i++)
        if (s->conns[i].fd < 0)
            return &s->conns[i];
    return NULL;
}

static void source_key(const struct sockaddr_storage *ss, uint8_t k[16])
{
    memset(k, 0, 16);
    if (ss->ss_family == AF_INET) {
        k[10] = k[11] = 0xff;
        memcpy(k + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        memcpy(k, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    }
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
        if (api && !slot_free(s)) { /* every slot busy: try again in a moment */
            ev_io_stop(loop, &s->alio);
            ev_timer_start(loop, &s->retry);
            return;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(io->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                       errno == ENOMEM)) {
            /* Out of descriptors: the socket stays readable; wait instead of spinning. */
            ev_io_stop(loop, &s->lio);
            ev_io_stop(loop, &s->alio);
            ev_timer_start(loop, &s->retry);
            return;
        }
        if (fd < 0)
            return; /* EAGAIN, or a connection that went away */
        uint8_t src[16];
        source_key(&ss, src);
        struct metrics_conn *m = api ? slot_free(s) : slot_get(s, src);
        if (!m) {
            close(fd);
            STAT_INC(&s->stats.evicted);
            continue;
        }
        m->fd = fd;
        m->api = api;
        s->napi += api;
        memcpy(m->src, src, 16);
        m->len = 0;
        m->off = 0;
        m->head_len = 0;
        m->body = NULL;
        m->state = MC_READ;
        m->born = ev_now(loop);
        ev_io_set(&m->io, fd, EV_READ);
        ev_io_start(loop, &m->io);
        ev_timer_set(&m->timer, api ? API_READ_TIMEOUT : METRICS_READ_TIMEOUT, 0);
        ev_timer_start(loop, &m->timer);
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
        s->status_page = body_new(metrics_status_html, metrics_status_html_len, 0);
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
    for (int i = 0; i < METRICS_MAX_CONNS; i++) {
        struct metrics_conn *m = &s->conns[i];
        m->s = s;
        m->fd = -1;
        ev_io_init(&m->io, on_mconn_io, -1, EV_READ);
        m->io.data = m;
        ev_timer_init(&m->timer, on_mconn_timer, METRICS_READ_TIMEOUT, 0);
        m->timer.data = m;
    }
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
        struct metrics_conn *m = &s->conns[i];
        if (m->fd >= 0)
            close(m->fd);
        body_unref(m->body);
    }
    for (int i = 0; i < MB_COUNT; i++)
        body_unref(s->cache[i]);
    for (int i = 0; i < MB_COUNT; i++)
        free(s->spare[i].p);
    body_unref(s->status_page);
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
