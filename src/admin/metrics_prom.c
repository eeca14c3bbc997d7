/* metrics_prom.c: the metrics in Prometheus text (/metrics) and as /stats's JSON samples. */
#include "admin/metrics.h"
#include "admin/metrics_render.h"

#include <pthread.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/replay.h"
#include "core/worker.h"
#include "conn/counters.h"
#include "config/lstore.h"
#include "config/prefix.h"
#include "config/reload.h"
#include "users/ja4stat.h"
#include "web/webhttp.h"
#include "web/websess.h"

/* Another worker's plain size_t gauge (arena, pipes): a relaxed load of one aligned word. */
#define GAUGE(p) ((uint64_t)__atomic_load_n((p), __ATOMIC_RELAXED))

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

void metrics_totals_collect(const struct metrics_shared *ms, struct metrics_totals *t)
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

void metrics_user_totals(const struct gen *g, int i, struct user_totals *t)
{
    memset(t, 0, sizeof *t);
    if (g->users && g->uid)
        users_stats_sum(g->users, g->uid[i], t);
}

void metrics_user_limits(const struct gen *g, int i, uint64_t *quota, int64_t *expires)
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

int64_t metrics_user_quota_reset(const struct gen *g, int i, const char **period)
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
    metrics_user_limits(g, i, &quota, &expires);
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
        int64_t next = metrics_user_quota_reset(g, i, &period);
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
        metrics_user_totals(g, i, &t[i]);
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
                           const struct metrics_totals *t, struct emit *e)
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
                      const struct metrics_totals *t, struct emit *e, enum counters_hand h)
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
                       const struct metrics_totals *t, struct emit *e)
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
                                   const struct metrics_totals *t, struct emit *e);

/* limits-store (only when it is on): the flusher's counters, and per user with a conns or
 * ips limit what the other instances hold. */
static void emit_lstore(const struct metrics_shared *ms, const struct gen *g,
                        const struct metrics_totals *t, struct emit *e)
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

/* WEB proxy mode (only when web-listen is on): sessions and streams live and made, by carrier,
 * the streams' payload both ways, and every refusal by its reason. */
/* The sum over the workers' tables of counter k of the stat_t array at off in struct
 * websess_counters (a single counter: k 0). */
static uint64_t web_sum(const struct webhttp_view *v, size_t off, int k)
{
    uint64_t n = 0;
    for (int i = 0; i < v->n; i++)
        n += STAT_GET((const stat_t *)((const char *)v->c[i] + off) + k);
    return n;
}
#define WEB_SUM(v, field, k) web_sum(v, offsetof(struct websess_counters, field), k)

static void emit_web(const struct metrics_shared *ms, const struct gen *g,
                     const struct metrics_totals *t, struct emit *e)
{
    (void)g, (void)t;
    struct webhttp_view v;
    webgroup_view(ms->web, &v);
    if (!v.live)
        return;
    single(e, "web_sessions", "gauge", "WEB proxy: live sessions.",
           atomic_load(&v.live->sessions));
    single(e, "web_streams", "gauge", "WEB proxy: live streams (each a client connection).",
           atomic_load(&v.live->streams));
    single(e, "web_bootstraps", "gauge", "WEB proxy: bootstrap tokens minted and not yet expired.",
           atomic_load(&v.live->bootstraps));
    single(e, "web_pending_bytes", "gauge", "WEB proxy: bytes queued in sessions (both ways).",
           atomic_load(&v.live->pending_bytes));
    family(e, "web_sessions_total", "counter", "WEB proxy: sessions created, by carrier.");
    for (int m = WEBSESS_HTTPS; m <= WEBSESS_WEBSOCKET_LANES; m++)
        u64(e, "web_sessions_total", "carrier", websess_mode_name((enum websess_mode)m), NULL,
            NULL, WEB_SUM(&v, sessions_mode, m));
    family(e, "web_sessions_ended_total", "counter", "WEB proxy: sessions ended, by how: closed "
           "(DELETE, BYE or a protocol error) or expired (no request within the grace).");
    u64(e, "web_sessions_ended_total", "how", "closed", NULL, NULL,
        WEB_SUM(&v, closed_sessions, 0));
    u64(e, "web_sessions_ended_total", "how", "expired", NULL, NULL,
        WEB_SUM(&v, expired_sessions, 0));
    single(e, "web_bootstraps_total", "counter", "WEB proxy: bootstrap tokens minted (bridge "
           "pages served).", WEB_SUM(&v, bootstraps, 0));
    single(e, "web_streams_total", "counter", "WEB proxy: streams opened.",
           WEB_SUM(&v, streams, 0));
    family(e, "web_bytes_total", "counter", "WEB proxy: stream payload, up (client DATA taken) "
           "and down (backend DATA queued).");
    u64(e, "web_bytes_total", "direction", "up", NULL, NULL, WEB_SUM(&v, bytes_up, 0));
    u64(e, "web_bytes_total", "direction", "down", NULL, NULL, WEB_SUM(&v, bytes_down, 0));
    family(e, "web_refusals_total", "counter", "WEB proxy: requests and frames refused, by reason "
           "(a limit, a rate, an unknown token, a protocol error).");
    for (int r = 0; r < WEBSESS_R_COUNT; r++)
        u64(e, "web_refusals_total", "reason", websess_reason_name((enum websess_reason)r), NULL,
            NULL, WEB_SUM(&v, refused, r));
}

static const metrics_section_fn sections[] = {
    emit_table,
    emit_lstore,
    emit_web,
};

/* Every metric, in either format. */
static void emit_all(const struct metrics_shared *ms, const struct gen *g,
                     const struct metrics_totals *t, struct emit *e)
{
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
        sections[i](ms, g, t, e);
}

int metrics_render_prometheus(const struct metrics_shared *ms, const struct gen *g,
                              struct sbuf *out)
{
    struct metrics_totals *t = malloc(sizeof *t);
    if (!t)
        return -1;
    metrics_totals_collect(ms, t);
    struct emit e = {.b = out, .json = 0, .first = 1};
    emit_all(ms, g, t, &e);
    ja4stat_render_prometheus(ms->pws, ms->nworkers, g, out);
    free(t);
    return out->failed ? -1 : 0;
}

void metrics_user_counters_json(const struct user_totals *t, struct sbuf *out)
{
    for (size_t m = 0; m < USER_NMETRICS; m++)
        if (user_metrics[m].json)
            sbuf_printf(out, ",\"%s\":%llu", user_metrics[m].json,
                        (unsigned long long)user_counter(t, &user_metrics[m]));
}

void metrics_samples_json(const struct metrics_shared *ms, const struct gen *g,
                          const struct metrics_totals *t, struct sbuf *out)
{
    struct emit e = {.b = out, .json = 1, .first = 1};
    emit_all(ms, g, t, &e);
}
