/* lstore.c: per-user limits across the fleet: the flusher thread and its one pipelined flush. */
#include "config/lstore.h"

#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/shared64.h"
#include "crypto/crypto.h"
#include "config/options.h"
#include "config/reload.h"
#include "users/rstore.h"
#include "users/users.h"

#ifdef MTPROXY_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

/* --- the flusher ------------------------------------------------------------------------------ */

#define SLOW_TICKS 2          /* a flush unanswered this many ticks: the store is down */
#define RECONNECT_TICKS 4     /* ... and this many: the connection is dropped and made again */
#define IDLE_REFRESH_TICKS 10 /* every quota user's fleet total is read at least this often */
#define RECENT_SECONDS 60.0   /* a user active here within this is flushed every interval */
#define MAX_INSTANCES 4096    /* other instances read per flush */

/* One user's state in the flusher (the flusher's thread only). */
struct lu {
    const struct user_limit *lim; /* NULL: not a fleet user now */
    int seen;                     /* base initialised */
    uint64_t base;                /* the value of used already accounted in mine */
    uint64_t mine;                /* this process's bytes in (period, epoch) */
    uint64_t epoch;
    int64_t period;               /* start of the period of mine (0: lifetime) */
    uint64_t snap;                /* used when the flush in flight was sent */
    uint64_t fleet;               /* fleet total from the flush in flight */
    uint64_t new_epoch;
    uint32_t conns_applied;       /* other instances' connections folded into active */
    uint32_t conns_other, ips_other; /* summed over the flush in flight's live replies */
    double last_active;           /* when it last had a live connection or bytes here */
    uint8_t in_quota;             /* the flush in flight carries its quota */
    uint8_t got_quota;            /* ... and its total came */
    uint8_t resetting;            /* ... and bumps its epoch */
    uint8_t live_written;         /* this instance's live hash holds it */
    uint8_t reseed;               /* the store lost counts: the next flush puts them back */
    uint8_t epoch_known;          /* epoch is the store's (else: taken from the next reply) */
    uint8_t folded;               /* a total of the store applied since this process started */
    uint64_t seed;                /* ... this many bytes (field "s", if the hash has none) */
};

/* What a command's reply is for. */
enum { K_PLAIN = 0, K_MEMBERS, K_LIVE, K_QUOTA, K_EPOCH };

struct plan {
    uint8_t kind;
    uint32_t idx; /* K_LIVE: index into others; K_QUOTA/K_EPOCH: user id */
};

struct name_uid {
    const char *name;
    uint32_t uid;
};

struct lstore {
    struct users *users;
    struct rstore_config cfg; /* as at start (a change needs a restart), resolved */
    struct rstore_config cfg_given; /* as configured (a reload's is compared with it) */
    int fail_closed;
    double interval;
    char inst[96];            /* this instance's id */
    char live_key[128];
    pthread_t thread;
    int started;
    struct ev_loop *loop;
    ev_timer tick, deadline;
    ev_async wake;
    _Atomic int stop;
    struct gen *_Atomic next_gen;
    struct gen *gen;
    struct rstore rs;
    /* users */
    struct lu *lu;
    uint32_t nlu;
    struct name_uid *index;   /* fleet users by name (sorted) */
    uint32_t nindex;
    pthread_mutex_t mu;       /* reset requests */
    char (*resets)[SECRET_NAME_MAX];
    uint32_t nresets;
    /* the flush in flight */
    int inflight, ticks_waiting, failed_replies, down_logged;
    int final;                /* stopping: the flush being built or in flight is the last */
    int stopping;             /* stop asked; the last flush not sent yet */
    int resync;               /* a failure since the last full flush: the next one is full */
    int full_inflight;
    unsigned long long tickno;
    struct plan *plan;
    size_t nplan, capplan, answered;
    char **others;            /* other instances (their ids), read this flush */
    size_t nothers;
    char *gone_names[MAX_INSTANCES]; /* to SREM in the next flush */
    size_t ngone;
    char **members;           /* SMEMBERS answer: the next flush's others */
    size_t nmembers;
    uint8_t *gone;            /* per others: its live hash was empty (expired: crashed, or
                               * nothing live): taken out of the set by the next flush */
    double sent_at;
    /* what lstore_read shows */
    _Atomic int state;
    stat_t flushes, failures, commands;
    /* shared64: 64-bit atomics need libatomic on 32-bit MIPS and ARM (core/shared64.h) */
    shared64 nusers, ninstances;
    shared64 cpu_ns, last_flush_ns;
};

void lstore_read(const struct lstore *ls, struct lstore_view *out)
{
    memset(out, 0, sizeof *out);
    if (!ls)
        return;
    out->state = atomic_load(&ls->state);
    out->flushes = STAT_GET(&ls->flushes);
    out->failures = STAT_GET(&ls->failures);
    out->commands = STAT_GET(&ls->commands);
    out->users = shared64_load(&ls->nusers);
    out->instances = shared64_load(&ls->ninstances);
    out->cpu_seconds = (double)shared64_load(&ls->cpu_ns) / 1e9;
    out->last_flush_seconds = (double)shared64_load(&ls->last_flush_ns) / 1e9;
}

static void free_strs(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const struct name_uid *)a)->name, ((const struct name_uid *)b)->name);
}

static void fold_others(struct lstore *ls, uint32_t uid, uint32_t conns, uint32_t ips);

/* The fleet users of generation g: those with a conns, ips or quota limit. */
static void adopt_gen(struct lstore *ls, struct gen *g)
{
    uint32_t n = g->nusers;
    if (n > ls->nlu) {
        struct lu *lu = realloc(ls->lu, n * sizeof *lu);
        if (!lu) {
            log_error("limits-store: out of memory: the new users are not shared");
            n = ls->nlu;
        } else {
            memset(lu + ls->nlu, 0, (n - ls->nlu) * sizeof *lu);
            ls->lu = lu;
            ls->nlu = n;
        }
    }
    for (uint32_t i = 0; i < ls->nlu; i++)
        ls->lu[i].lim = NULL;
    free(ls->index);
    ls->index = NULL;
    ls->index = calloc(g->opt.nsecrets ? (size_t)g->opt.nsecrets : 1, sizeof *ls->index);
    ls->nindex = 0;
    for (int i = 0; i < g->opt.nsecrets; i++) {
        const struct user_limit *l = g->lim[i];
        uint32_t uid = g->uid[i];
        if (!l || !(l->conns || l->ips || l->quota) || uid >= ls->nlu || ls->lu[uid].lim)
            continue;
        ls->lu[uid].lim = l;
        if (!ls->lu[uid].seen) { /* what it used so far was counted before (the state file) */
            ls->lu[uid].seen = 1;
            ls->lu[uid].base = shared64_load(&users_shared(ls->users, uid)->used);
            ls->lu[uid].period = -1;
        }
        if (ls->index)
            ls->index[ls->nindex++] = (struct name_uid){users_name(ls->users, uid), uid};
    }
    if (ls->index)
        qsort(ls->index, ls->nindex, sizeof *ls->index, cmp_name);
    for (uint32_t i = 0; i < ls->nlu; i++) /* no fleet limit now: its own counts only */
        if (!ls->lu[i].lim && (ls->lu[i].conns_applied ||
                               atomic_load(&users_shared(ls->users, i)->fleet_ips)))
            fold_others(ls, i, 0, 0);
    if (ls->gen)
        gen_unref(ls->gen);
    ls->gen = g;
}

static int32_t find_uid(const struct lstore *ls, const char *name, size_t n)
{
    char key[SECRET_NAME_MAX];
    if (n >= sizeof key || !ls->index)
        return -1;
    memcpy(key, name, n);
    key[n] = 0;
    struct name_uid k = {key, 0};
    const struct name_uid *f = bsearch(&k, ls->index, ls->nindex, sizeof k, cmp_name);
    return f ? (int32_t)f->uid : -1;
}

static double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Folds the other instances' live connections and addresses of user uid into its limit
 * state (0, 0: local counts only). */
static void fold_others(struct lstore *ls, uint32_t uid, uint32_t conns, uint32_t ips)
{
    struct lu *l = &ls->lu[uid];
    struct user_shared *s = users_shared(ls->users, uid);
    if (conns != l->conns_applied) {
        atomic_fetch_add_explicit(&s->active, conns - l->conns_applied, memory_order_relaxed);
        l->conns_applied = conns;
    }
    atomic_store_explicit(&s->fleet_conns, conns, memory_order_relaxed);
    atomic_store_explicit(&s->fleet_ips, ips, memory_order_relaxed);
}

static void set_state(struct lstore *ls, int up, const char *why)
{
    int was = atomic_load(&ls->state);
    atomic_store(&ls->state, up ? LSTORE_UP : LSTORE_DOWN);
    if (!up)
        ls->resync = 1;
    atomic_store_explicit(&ls->users->fleet_refuse, !up && ls->fail_closed, memory_order_relaxed);
    if (up && was == LSTORE_DOWN) {
        log_info("limits-store: flushed again: fleet limits shared (what was counted while it "
                 "was away is in this flush)");
        ls->down_logged = 0;
    } else if (!up && !ls->down_logged) {
        ls->down_logged = 1;
        log_warn("limits-store: flush failed (%s): %s", why,
                 ls->fail_closed ? "new connections of users with limits are refused until it "
                                   "is back (limits-store-fail = closed; live ones go on)"
                                 : "limits are enforced on this instance's counts until it is "
                                   "back (limits-store-fail = open)");
    }
    if (!up && !ls->fail_closed) /* open: local counts only */
        for (uint32_t i = 0; i < ls->nlu; i++)
            if (ls->lu[i].conns_applied || atomic_load(&users_shared(ls->users, i)->fleet_ips))
                fold_others(ls, i, 0, 0);
}

/* The fleet total of a flush applied to user l's `used` (s). A total below what this
 * instance knew when it sent the flush (snap: the state file's usage at start, the last
 * total since), or an epoch older than its own, is a store that lost counts (emptied: a
 * restart without persistence, FLUSHALL, an empty replica): the larger is kept; at start the
 * next flush seeds the store with the difference (field "s", HSETNX: once for the fleet). */
static void fold_quota(struct lu *l, struct user_shared *s)
{
    uint64_t fleet = l->fleet;
    if (!l->epoch_known) { /* a new user, or a state file without it: the store's is taken */
        l->epoch = l->new_epoch;
        l->epoch_known = 1;
    }
    if (l->new_epoch < l->epoch) { /* its epoch lost: put back first, the total after */
        l->reseed = 1;
        l->seed = 0;
        fleet = l->snap;
    } else if (l->new_epoch != l->epoch) { /* a reset (here or elsewhere) */
        l->epoch = l->new_epoch;
        if (!l->resetting) /* elsewhere: what was counted here was of the old epoch */
            l->mine = 0;
        else /* here: the bytes since the reset are ours in the new one (written next) */
            fleet = fleet + l->mine < fleet ? UINT64_MAX : fleet + l->mine;
    } else if (fleet < l->snap) {
        /* Seeded from this process's first total only (the state file's usage): later, a
         * store emptied under running instances gets their absolute shares again at their
         * next flushes (a seed then would count them twice); until then the larger stays. */
        if (!l->folded) {
            l->reseed = 1;
            l->seed = l->snap - fleet;
        }
        fleet = l->snap;
    }
    l->folded = 1;
    uint64_t cur = shared64_load(&s->used), nv;
    int stale;
    do {
        nv = lstore_adjust(cur, l->snap, fleet, &stale);
    } while (!stale && !shared64_cas(&s->used, &cur, nv));
    l->base = stale ? 0 : fleet;
    shared64_store(&s->epoch, l->epoch + 1); /* saved with the usage (the state file) */
}

static void flush_last(struct lstore *ls);

/* The flush in flight is over: its answers applied if all came, else counted as failed. */
static void flush_done(struct lstore *ls)
{
    int ok = !ls->failed_replies && ls->answered == ls->nplan;
    struct users *u = ls->users;
    uint64_t nusers = 0;
    for (uint32_t i = 0; i < ls->nlu; i++) {
        struct lu *l = &ls->lu[i];
        if (l->in_quota) {
            nusers++;
            struct user_shared *s = users_shared(u, i);
            if (ok && l->got_quota) {
                fold_quota(l, s);
            } else if (l->resetting) {
                /* not known whether the epoch moved: asked again next time (one more reset
                 * changes nothing) */
                pthread_mutex_lock(&ls->mu);
                char (*r)[SECRET_NAME_MAX] = realloc(ls->resets, (ls->nresets + 1) * sizeof *r);
                if (r) {
                    ls->resets = r;
                    snprintf(r[ls->nresets++], SECRET_NAME_MAX, "%s", users_name(u, i));
                }
                pthread_mutex_unlock(&ls->mu);
            }
            l->in_quota = l->got_quota = l->resetting = 0;
        }
        if (ok && l->lim && (l->lim->conns || l->lim->ips))
            fold_others(ls, i, l->conns_other, l->ips_other);
        l->conns_other = l->ips_other = 0;
    }
    if (ok) {
        /* the instances seen empty go out of the set (an empty live hash is a crashed
         * instance's or one with nothing live: the latter adds itself back at its flush) */
        for (size_t j = 0; j < ls->nothers && ls->gone; j++)
            if (ls->gone[j] && ls->ngone < MAX_INSTANCES)
                ls->gone_names[ls->ngone++] = ls->others[j], ls->others[j] = NULL;
        free_strs(ls->others, ls->nothers);
        ls->others = ls->members;
        ls->nothers = ls->nmembers;
        ls->members = NULL;
        ls->nmembers = 0;
        STAT_INC(&ls->flushes);
        if (ls->full_inflight)
            ls->resync = 0;
        shared64_store(&ls->nusers, nusers);
        shared64_store(&ls->last_flush_ns, (uint64_t)((now_mono() - ls->sent_at) * 1e9));
        set_state(ls, 1, NULL);
    } else {
        free_strs(ls->members, ls->nmembers);
        ls->members = NULL;
        ls->nmembers = 0;
        STAT_INC(&ls->failures);
        set_state(ls, 0, ls->failed_replies ? "an error or no answer" : "incomplete");
    }
    ls->inflight = 0;
    ls->ticks_waiting = 0;
    ls->nplan = ls->answered = 0;
    ls->failed_replies = 0;
    if (ls->final)
        ev_break(ls->loop, EVBREAK_ALL);
    else if (ls->stopping)
        flush_last(ls);
}

#ifdef MTPROXY_HAVE_HIREDIS
static void on_live(struct lstore *ls, const redisReply *r, uint32_t idx)
{
    struct lstore_kv *kv;
    long n = lstore_parse_pairs(r, &kv);
    if (n < 0) {
        ls->failed_replies++;
        return;
    }
    if (n == 0 && ls->gone && idx < ls->nothers)
        ls->gone[idx] = 1;
    if (n > 0)
        shared64_fetch_add(&ls->ninstances, 1);
    for (long i = 0; i < n; i++) {
        uint32_t c, ip;
        int32_t uid = find_uid(ls, kv[i].k, kv[i].kn);
        if (uid < 0 || lstore_parse_live(kv[i].v, kv[i].vn, &c, &ip))
            continue;
        struct lu *l = &ls->lu[uid];
        l->conns_other = l->conns_other + c < c ? UINT32_MAX : l->conns_other + c;
        l->ips_other = l->ips_other + ip < ip ? UINT32_MAX : l->ips_other + ip;
    }
    free(kv);
}

static void on_members(struct lstore *ls, const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        ls->failed_replies++;
        return;
    }
    size_t n = r->elements < MAX_INSTANCES ? r->elements : MAX_INSTANCES;
    ls->members = calloc(n ? n : 1, sizeof *ls->members);
    if (!ls->members)
        return;
    for (size_t i = 0; i < n; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_STRING || e->len == 0 || e->len > 90 ||
            (e->len == strlen(ls->inst) && !memcmp(e->str, ls->inst, e->len)))
            continue;
        char *m = malloc(e->len + 1);
        if (!m)
            continue;
        memcpy(m, e->str, e->len);
        m[e->len] = 0;
        ls->members[ls->nmembers++] = m;
    }
}

/* Reply r to command p of the flush in flight. */
static void take_reply(struct lstore *ls, const struct plan *p, const redisReply *r)
{
    if (!r || r->type == REDIS_REPLY_ERROR) {
        if (r && !ls->down_logged) {
            char text[200];
            rstore_printable(r->str, r->len, text, sizeof text);
            log_warn("limits-store: the store answered: %s", text);
        }
        ls->failed_replies++;
    } else if (p->kind == K_MEMBERS) {
        on_members(ls, r);
    } else if (p->kind == K_LIVE) {
        on_live(ls, r, p->idx);
    } else if (p->kind == K_EPOCH) {
        if (r->type == REDIS_REPLY_INTEGER && r->integer >= 0)
            ls->lu[p->idx].new_epoch = (uint64_t)r->integer;
    } else if (p->kind == K_QUOTA) {
        struct lstore_kv *kv;
        long n = lstore_parse_pairs(r, &kv);
        if (n >= 0) {
            struct lu *l = &ls->lu[p->idx];
            uint64_t e;
            l->fleet = lstore_quota_total(kv, (size_t)n, &e, NULL);
            l->new_epoch = e;
            l->got_quota = l->fleet != UINT64_MAX;
            if (!l->got_quota) { /* more than the fleet could have counted */
                if (!ls->down_logged)
                    log_warn("limits-store: the fleet total of %s is implausible (over 2^56 "
                             "bytes): refused", users_name(ls->users, p->idx));
                ls->failed_replies++;
            }
        } else {
            ls->failed_replies++;
        }
        free(kv);
    }
}
#else
static void take_reply(struct lstore *ls, const struct plan *p, const void *r)
{
    (void)p, (void)r;
    ls->failed_replies++;
}
#endif

static void on_reply(void *reply, void *priv)
{
    struct lstore *ls = priv;
    size_t i = ls->answered++;
    if (i >= ls->nplan) /* cannot happen: one flush at a time */
        return;
    take_reply(ls, &ls->plan[i], reply);
    if (ls->answered == ls->nplan)
        flush_done(ls);
}

/* Queues one command of the flush. Returns 0, or -1 (not sent: the flush fails). */
static int send_cmd(struct lstore *ls, uint8_t kind, uint32_t idx, int argc, const char **argv,
                    const size_t *lens)
{
    if (ls->nplan == ls->capplan) {
        size_t c = ls->capplan ? ls->capplan * 2 : 256;
        struct plan *p = realloc(ls->plan, c * sizeof *p);
        if (!p)
            return -1;
        ls->plan = p;
        ls->capplan = c;
    }
    ls->plan[ls->nplan] = (struct plan){kind, idx};
    ls->nplan++;
    if (rstore_command(&ls->rs, argc, argv, lens, on_reply, ls)) {
        ls->nplan--;
        return -1;
    }
    STAT_INC(&ls->commands);
    return 0;
}

/* A command of up to 4 plain string arguments. */
static int send4(struct lstore *ls, uint8_t kind, uint32_t idx, const char *a, const char *b,
                 const char *c, const char *d)
{
    const char *argv[4] = {a, b, c, d};
    size_t lens[4];
    int n = 0;
    for (; n < 4 && argv[n]; n++)
        lens[n] = strlen(argv[n]);
    return send_cmd(ls, kind, idx, n, argv, lens);
}

/* Takes the reset requests: each named fleet user with a quota is reset by this flush. */
static void take_resets(struct lstore *ls)
{
    pthread_mutex_lock(&ls->mu);
    for (uint32_t i = 0; i < ls->nresets; i++) {
        int32_t uid = find_uid(ls, ls->resets[i], strlen(ls->resets[i]));
        if (uid >= 0 && ls->lu[uid].lim && ls->lu[uid].lim->quota)
            ls->lu[uid].resetting = 1;
    }
    ls->nresets = 0;
    pthread_mutex_unlock(&ls->mu);
}

/* User i's quota state brought to period (the one holding now): a new period starts over here
 * and in its count; an asked-for reset starts its share over (who asked zeroed the local
 * count). Returns its used bytes now. */
static uint64_t quota_roll(struct lstore *ls, uint32_t i, int64_t period)
{
    struct lu *l = &ls->lu[i];
    struct user_shared *s = users_shared(ls->users, i);
    uint64_t used = shared64_load(&s->used);
    if (period != l->period) {
        if (l->period != -1) { /* a new period: it starts over here too (see users_quota_roll) */
            shared64_store(&s->period, (uint64_t)period);
            shared64_store(&s->used, 0);
            used = 0;
            l->base = 0;
        }
        /* at start: the epoch the state file saved with the usage (a store that lost its
         * epoch, or a reset made while this process was down, are told apart by it); a
         * new period's hash starts at 0 */
        uint64_t saved = l->period == -1 ? shared64_load(&s->epoch) : 1;
        l->epoch = saved ? saved - 1 : 0;
        l->epoch_known = saved != 0;
        l->period = period;
        l->mine = 0;
    }
    if (l->resetting) { /* zeroed here by who asked (users_quota_reset): what it counted
                         * since is this instance's share of the new epoch */
        l->base = 0;
        l->mine = 0;
    }
    return used;
}

/* Queues user i's quota commands: its share written (resetting: its epoch bumped instead),
 * the hash's expiry (a periodic quota, next its end), its fleet total read. Returns 0, or -1. */
static int send_quota(struct lstore *ls, uint32_t i, int64_t period, int64_t next, double wall)
{
    struct lu *l = &ls->lu[i];
    char key[SECRET_NAME_MAX + 48], val[48], ttl[24];
    snprintf(key, sizeof key, "mtproxy:l:q:%s:%lld", users_name(ls->users, i),
             (long long)period);
    if (l->reseed && !l->resetting) { /* HSETNX: the first instance to put it back wins */
        char ev[24], sv[48];
        snprintf(ev, sizeof ev, "%llu", (unsigned long long)l->epoch);
        snprintf(sv, sizeof sv, "%llu %llu", (unsigned long long)l->epoch,
                 (unsigned long long)l->seed);
        if ((l->epoch && send4(ls, K_PLAIN, i, "HSETNX", key, "e", ev)) ||
            (l->seed && send4(ls, K_PLAIN, i, "HSETNX", key, "s", sv)))
            return -1;
    }
    l->reseed = 0;
    if (l->resetting) {
        if (send4(ls, K_EPOCH, i, "HINCRBY", key, "e", "1"))
            return -1;
    } else {
        snprintf(val, sizeof val, "%llu %llu", (unsigned long long)l->epoch,
                 (unsigned long long)l->mine);
        const char *hv[4] = {"HSET", key, ls->inst, val};
        size_t hl[4] = {4, strlen(key), strlen(ls->inst), strlen(val)};
        if (send_cmd(ls, K_PLAIN, i, 4, hv, hl))
            return -1;
    }
    if (next) {
        snprintf(ttl, sizeof ttl, "%lld", lstore_quota_ttl_ms(next, (int64_t)wall));
        if (send4(ls, K_PLAIN, i, "PEXPIRE", key, ttl, NULL))
            return -1;
    }
    return send4(ls, K_QUOTA, i, "HGETALL", key, NULL, NULL);
}

/* The quota part of a flush: the share and total of each quota user active here lately, past
 * its quota or resetting (every quota user's in a full flush). Returns 0, or -1. */
static int flush_quota(struct lstore *ls, double wall, double mono, int full)
{
    for (uint32_t i = 0; i < ls->nlu; i++) {
        struct lu *l = &ls->lu[i];
        if (!l->lim || !l->lim->quota)
            continue;
        struct user_shared *s = users_shared(ls->users, i);
        int64_t next, period = users_period_start(l->lim->quota_period, l->lim->quota_day,
                                                  (int64_t)wall, &next);
        uint64_t used = quota_roll(ls, i, period);
        uint64_t d = lstore_delta(used, l->base);
        uint32_t live = atomic_load_explicit(&s->active, memory_order_relaxed) - l->conns_applied;
        if (d || live)
            l->last_active = mono;
        int exhausted = used >= l->lim->quota;
        if (!full && !l->resetting && !exhausted && !(l->last_active && mono - l->last_active <
                                                       RECENT_SECONDS))
            continue;
        l->mine += d;
        l->base = used;
        l->snap = used;
        l->in_quota = 1;
        if (send_quota(ls, i, period, next, wall))
            return -1;
    }
    return 0;
}

/* This instance's live counts of the users with a conns or ips limit (none in the last flush):
 * those not 0 appended to argv as NAME "CONNS IPS" pairs (the values in vals, one per user),
 * those gone to 0 since written appended to del; *na and *ndel are the lengths. */
static void live_collect(struct lstore *ls, double wall, const char **argv, char (*vals)[48],
                         int *na, const char **del, int *ndel)
{
    struct users *u = ls->users;
    double window = ls->gen->opt.ips_window_ms / 1000.0;
    for (uint32_t i = 0; i < ls->nlu; i++) {
        struct lu *l = &ls->lu[i];
        int want = l->lim && (l->lim->conns || l->lim->ips);
        uint32_t c = 0, ip = 0;
        if (want && !ls->final) {
            struct user_shared *s = users_shared(u, i);
            c = atomic_load_explicit(&s->active, memory_order_relaxed) - l->conns_applied;
            if (c > (1u << 30))
                c = 0; /* a release racing the fold: counted next time */
            ip = l->lim->ips ? users_ips_recent(u, i, wall, window) : 0;
        }
        if (c || ip) {
            snprintf(vals[i], sizeof vals[i], "%u %u", c, ip);
            argv[*na] = users_name(u, i);
            argv[*na + 1] = vals[i];
            *na += 2;
            l->live_written = 1;
        } else if (l->live_written) {
            del[(*ndel)++] = users_name(u, i);
            l->live_written = 0;
        }
    }
}

/* The live part of a flush: this instance's counts written into its live hash (HSET), the
 * users gone to 0 taken out (HDEL). argv and lens hold cap entries, vals one per user.
 * Returns 0, or -1. */
static int flush_live(struct lstore *ls, double wall, const char **argv, size_t *lens,
                      char (*vals)[48], size_t cap)
{
    int na = 2;
    argv[0] = "HSET";
    argv[1] = ls->live_key;
    int ndel = 2;
    const char **del = malloc(cap * sizeof *del);
    size_t *dlens = malloc(cap * sizeof *dlens);
    if (!del || !dlens) {
        free(del);
        free(dlens);
        return -1;
    }
    del[0] = "HDEL";
    del[1] = ls->live_key;
    live_collect(ls, wall, argv, vals, &na, del, &ndel);
    for (int i = 0; i < na; i++)
        lens[i] = strlen(argv[i]);
    for (int i = 0; i < ndel; i++)
        dlens[i] = strlen(del[i]);
    int bad = (na > 2 && send_cmd(ls, K_PLAIN, 0, na, argv, lens)) ||
              (ndel > 2 && send_cmd(ls, K_PLAIN, 0, ndel, del, dlens));
    free(del);
    free(dlens);
    return bad ? -1 : 0;
}

/* The instance set: this instance in it with its live hash kept alive, and the set read (the
 * next flush's others), or in the last flush taken out; the instances seen gone taken out.
 * Returns 0, or -1. */
static int flush_instances(struct lstore *ls)
{
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%lld",
             lstore_live_ttl_ms((unsigned)(ls->interval * 1000 + 0.5)));
    if (ls->final) {
        if (send4(ls, K_PLAIN, 0, "SREM", "mtproxy:l:instances", ls->inst, NULL))
            return -1;
    } else if (send4(ls, K_PLAIN, 0, "PEXPIRE", ls->live_key, ttl, NULL) ||
               send4(ls, K_PLAIN, 0, "SADD", "mtproxy:l:instances", ls->inst, NULL) ||
               send4(ls, K_MEMBERS, 0, "SMEMBERS", "mtproxy:l:instances", NULL, NULL)) {
        return -1;
    }
    if (!ls->ngone)
        return 0;
    const char *sv[2 + MAX_INSTANCES];
    size_t sl[2 + MAX_INSTANCES];
    sv[0] = "SREM";
    sv[1] = "mtproxy:l:instances";
    for (size_t j = 0; j < ls->ngone; j++)
        sv[2 + j] = ls->gone_names[j];
    for (size_t j = 0; j < 2 + ls->ngone; j++)
        sl[j] = strlen(sv[j]);
    int bad_srem = send_cmd(ls, K_PLAIN, 0, (int)(2 + ls->ngone), sv, sl);
    for (size_t j = 0; j < ls->ngone; j++)
        free(ls->gone_names[j]);
    ls->ngone = 0;
    return bad_srem ? -1 : 0;
}

/* The other instances' live hashes read (an empty one marks its instance gone). Returns 0,
 * or -1. */
static int flush_others(struct lstore *ls)
{
    free(ls->gone);
    ls->gone = calloc(ls->nothers ? ls->nothers : 1, 1);
    shared64_store(&ls->ninstances, 0);
    for (size_t j = 0; j < ls->nothers; j++) {
        char key[128];
        snprintf(key, sizeof key, "mtproxy:l:i:%s", ls->others[j]);
        if (send4(ls, K_LIVE, (uint32_t)j, "HGETALL", key, NULL, NULL))
            return -1;
    }
    return 0;
}

/* A flush built (rc 0) or given up on (rc -1): in flight if anything was queued, else its
 * users' quota marks cleared. Returns 0 (in flight), or -1 (nothing sent). */
static int flush_settle(struct lstore *ls, int rc, int full)
{
    if (rc == 0 && ls->nplan) {
        ls->inflight = 1;
        ls->full_inflight = full;
        return 0;
    }
    if (ls->nplan) {
        /* partly queued: the connection is dropped so the queued part fails as a whole
         * (flush_done counts it, from the callbacks the drop calls) */
        ls->failed_replies++;
        ls->inflight = 1;
        rstore_reconnect(&ls->rs);
        return 0;
    }
    /* nothing sent: the bytes stay in mine; a reset stays asked for */
    for (uint32_t i = 0; i < ls->nlu; i++)
        ls->lu[i].in_quota = 0;
    return -1;
}

/* Builds and sends one flush. Returns 0, or -1 (the store is down: nothing in flight). */
static int flush_send(struct lstore *ls)
{
    double wall = (double)time(NULL), mono = now_mono();
    /* full: every quota user's share written and its total read (idle ones too): now and then,
     * at the end, and after a failure (the store may have lost its data: a Redis restart) */
    int full = ls->tickno % IDLE_REFRESH_TICKS == 1 || ls->final || ls->resync;
    uint32_t nlu = ls->nlu;
    size_t cap = 2 + 2 * (size_t)nlu;
    const char **argv = malloc(cap * sizeof *argv);
    size_t *lens = malloc(cap * sizeof *lens);
    char (*vals)[48] = malloc((nlu ? nlu : 1) * sizeof *vals);
    int rc = -1;
    if (argv && lens && vals) {
        ls->sent_at = mono;
        take_resets(ls);
        /* quota; live: this instance's counts, the instance set, then the others' counts */
        if (!flush_quota(ls, wall, mono, full) && !flush_live(ls, wall, argv, lens, vals, cap) &&
            !flush_instances(ls) && !flush_others(ls))
            rc = 0;
    }
    free(argv);
    free(lens);
    free(vals);
    return flush_settle(ls, rc, full);
}

static void sample_cpu(struct lstore *ls)
{
    struct timespec ts;
    if (!clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
        shared64_store(&ls->cpu_ns, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
}

static void on_tick(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop, (void)revents;
    struct lstore *ls = t->data;
    ls->tickno++;
    if (ls->inflight) {
        ls->ticks_waiting++;
        if (ls->ticks_waiting == SLOW_TICKS) {
            STAT_INC(&ls->failures);
            set_state(ls, 0, "no answer in time");
        }
        if (ls->ticks_waiting >= RECONNECT_TICKS)
            rstore_reconnect(&ls->rs); /* the flush fails (its callbacks get NULL) */
        sample_cpu(ls);
        return;
    }
    if (!ls->rs.ac || !ls->rs.ready || flush_send(ls)) {
        STAT_INC(&ls->failures);
        /* the flushes before it, if any, leave the bytes counted into mine: none lost */
        for (uint32_t i = 0; i < ls->nlu; i++)
            if (ls->lu[i].in_quota)
                ls->lu[i].in_quota = 0;
        set_state(ls, 0, ls->rs.ac ? "not connected yet" : "not connected");
    }
    sample_cpu(ls);
}

static void on_deadline(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)t, (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

/* The last flush (this instance's live counts removed, every share written), once no other
 * is in flight; the loop ends when it is answered or at the deadline. */
static void flush_last(struct lstore *ls)
{
    ls->final = 1;
    if (!ls->rs.ac || !ls->rs.ready || flush_send(ls))
        ev_break(ls->loop, EVBREAK_ALL);
}

static void on_wake(struct ev_loop *loop, ev_async *w, int revents)
{
    (void)revents;
    struct lstore *ls = w->data;
    struct gen *g = atomic_exchange(&ls->next_gen, NULL);
    if (g)
        adopt_gen(ls, g);
    if (atomic_load(&ls->stop) && !ls->stopping) {
        ls->stopping = 1;
        ev_timer_stop(loop, &ls->tick);
        ev_timer_set(&ls->deadline, 1.0, 0);
        ev_timer_start(loop, &ls->deadline);
        if (!ls->inflight) /* else after its answer (flush_done) */
            flush_last(ls);
    }
}

static void *flusher_main(void *arg)
{
    struct lstore *ls = arg;
    rstore_open(&ls->rs, ls->loop, &ls->cfg, 1);
    ev_run(ls->loop, 0);
    rstore_stop(&ls->rs);
    sample_cpu(ls);
    return NULL;
}

struct lstore *lstore_start(struct users *u, struct gen *g, char *err, size_t errlen)
{
    const struct options *o = &g->opt;
    err[0] = 0;
    if (!o->lstore.on)
        return NULL;
    struct lstore *ls = calloc(1, sizeof *ls);
    if (!ls) {
        snprintf(err, errlen, "limits-store: out of memory");
        return NULL;
    }
    ls->users = u;
    ls->cfg = o->lstore;
    ls->cfg_given = o->lstore;
    ls->fail_closed = o->lstore_fail_closed;
    ls->interval = o->lstore_interval_ms / 1000.0;
    if (rstore_resolve(&ls->cfg, err, errlen)) {
        free(ls);
        return NULL;
    }
    char host[48] = "";
    gethostname(host, sizeof host - 1);
    uint8_t rnd[4] = {0};
    crypto_random(rnd, sizeof rnd);
    snprintf(ls->inst, sizeof ls->inst, "%s:%ld:%02x%02x%02x%02x", host[0] ? host : "mtproxy",
             (long)getpid(), rnd[0], rnd[1], rnd[2], rnd[3]);
    snprintf(ls->live_key, sizeof ls->live_key, "mtproxy:l:i:%s", ls->inst);
    pthread_mutex_init(&ls->mu, NULL);
    ls->loop = ev_loop_new(EVFLAG_AUTO);
    if (!ls->loop) {
        snprintf(err, errlen, "limits-store: cannot make an event loop");
        pthread_mutex_destroy(&ls->mu);
        free(ls);
        return NULL;
    }
    gen_ref(g);
    adopt_gen(ls, g);
    ev_timer_init(&ls->tick, on_tick, ls->interval, ls->interval);
    ls->tick.data = ls;
    ev_timer_start(ls->loop, &ls->tick);
    ev_init(&ls->deadline, on_deadline);
    ev_async_init(&ls->wake, on_wake);
    ls->wake.data = ls;
    ev_async_start(ls->loop, &ls->wake);
    atomic_store(&ls->state, LSTORE_OFF); /* until the first flush: neither up nor down */
    int rc = pthread_create(&ls->thread, NULL, flusher_main, ls);
    if (rc) {
        snprintf(err, errlen, "limits-store: cannot start its thread: %s", strerror(rc));
        ev_loop_destroy(ls->loop);
        gen_unref(ls->gen);
        pthread_mutex_destroy(&ls->mu);
        free(ls->lu);
        free(ls->index);
        free(ls);
        return NULL;
    }
    ls->started = 1;
    u->fleet = ls;
    log_info("limits-store: instance %s, a flush every %.3g s (limits-store-fail = %s)",
             ls->inst, ls->interval, ls->fail_closed ? "closed" : "open");
    return ls;
}

void lstore_post_gen(struct lstore *ls, struct gen *g)
{
    if (!ls)
        return;
    const struct options *o = &g->opt;
    if (memcmp(&o->lstore, &ls->cfg_given, sizeof ls->cfg_given) ||
        o->lstore_fail_closed != ls->fail_closed ||
        o->lstore_interval_ms != (unsigned)(ls->interval * 1000 + 0.5))
        log_warn("SIGHUP: limits-store, limits-store-fail or limits-store-interval changed: "
                 "it takes effect only after a restart (the running store stays)");
    gen_ref(g);
    struct gen *old = atomic_exchange(&ls->next_gen, g);
    if (old)
        gen_unref(old);
    ev_async_send(ls->loop, &ls->wake);
}

int lstore_reset_quota(struct lstore *ls, const char *user)
{
    if (!ls)
        return -1;
    pthread_mutex_lock(&ls->mu);
    char (*r)[SECRET_NAME_MAX] = realloc(ls->resets, (ls->nresets + 1) * sizeof *r);
    if (r) {
        ls->resets = r;
        snprintf(r[ls->nresets++], SECRET_NAME_MAX, "%s", user);
    }
    pthread_mutex_unlock(&ls->mu);
    return r ? 0 : -1;
}

void lstore_stop(struct lstore *ls)
{
    if (!ls)
        return;
    if (ls->started) {
        atomic_store(&ls->stop, 1);
        ev_async_send(ls->loop, &ls->wake);
        pthread_join(ls->thread, NULL);
    }
    ls->users->fleet = NULL;
    atomic_store_explicit(&ls->users->fleet_refuse, 0, memory_order_relaxed);
    struct gen *g = atomic_exchange(&ls->next_gen, NULL);
    if (g)
        gen_unref(g);
    if (ls->gen)
        gen_unref(ls->gen);
    ev_loop_destroy(ls->loop);
    free_strs(ls->others, ls->nothers);
    free_strs(ls->members, ls->nmembers);
    for (size_t j = 0; j < ls->ngone; j++)
        free(ls->gone_names[j]);
    free(ls->gone);
    pthread_mutex_destroy(&ls->mu);
    free(ls->resets);
    free(ls->plan);
    free(ls->index);
    free(ls->lu);
    free(ls);
}
