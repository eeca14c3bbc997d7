/* users.c: the users registry, per-user per-worker counters, shared limit state, limit parser. */
#include "users/users.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/config.h"
#include "core/log.h"

static const char *const refusal_names[UR_COUNT] = {
    [UR_CONNS] = "conns", [UR_IPS] = "ips", [UR_QUOTA] = "quota", [UR_EXPIRED] = "expired",
    [UR_DISABLED] = "disabled", [UR_STORE] = "store"};

const char *users_refusal_name(enum user_refusal r)
{
    return (unsigned)r < UR_COUNT ? refusal_names[r] : "?";
}

/* --- limit = NAME [conns=N] [ips=N] [quota=SIZE] [expires=DATE] [rate=SIZE/s] ----------- */

static int name_ok(const char *s, size_t n)
{
    if (n == 0 || n >= SECRET_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
            return 0;
    return 1;
}

/* days since 1970-01-01 of a civil date (proleptic Gregorian) */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

/* The civil date of day z since 1970-01-01 (the inverse of days_from_civil). */
static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

const char *users_period_name(enum quota_period p)
{
    return p == QP_DAY ? "day" : p == QP_WEEK ? "week" : p == QP_MONTH ? "month" : NULL;
}

int64_t users_period_start(enum quota_period p, unsigned day, int64_t now, int64_t *next)
{
    int64_t days = now / 86400 - (now % 86400 < 0); /* floor */
    int64_t start;
    switch (p) {
    case QP_DAY:
        start = days;
        *next = (days + 1) * 86400;
        break;
    case QP_WEEK: {
        if (day < 1 || day > 7)
            day = 1;
        unsigned wd = (unsigned)(((days + 3) % 7 + 7) % 7) + 1; /* 1970-01-01: Thursday (4) */
        start = days - (int64_t)((wd + 7 - day) % 7);
        *next = (start + 7) * 86400;
        break;
    }
    case QP_MONTH: {
        if (day < 1 || day > 28)
            day = 1;
        int64_t y;
        unsigned m, d;
        civil_from_days(days, &y, &m, &d);
        if (d < day && --m == 0) { /* before this month's day: the period began last month */
            m = 12;
            y--;
        }
        start = days_from_civil(y, m, day);
        if (++m == 13) {
            m = 1;
            y++;
        }
        *next = days_from_civil(y, m, day) * 86400;
        break;
    }
    default:
        *next = 0;
        return 0;
    }
    return start * 86400;
}

/* YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ (UTC) -> unix seconds. Returns 0, or -1. */
static int parse_date(const char *s, size_t n, int64_t *out)
{
    unsigned y, mo, d, h = 0, mi = 0, se = 0;
    char tail[4] = {0};
    char buf[32];
    if (n >= sizeof buf)
        return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    int consumed = 0;
    if (n == 10) {
        if (sscanf(buf, "%4u-%2u-%2u%n", &y, &mo, &d, &consumed) != 3 || consumed != 10)
            return -1;
    } else if (n == 20) {
        if (sscanf(buf, "%4u-%2u-%2uT%2u:%2u:%2u%1[Z]%n", &y, &mo, &d, &h, &mi, &se, tail,
                   &consumed) != 7 ||
            consumed != 20)
            return -1;
    } else {
        return -1;
    }
    for (size_t i = 0; i < n; i++) /* sscanf takes signs and blanks: digits only */
        if (!isdigit((unsigned char)buf[i]) && i != 4 && i != 7 && i != 10 && i != 13 &&
            i != 16 && i != 19)
            return -1;
    static const unsigned mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (y < 1970 || y > 9999 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || h > 23 ||
        mi > 59 || se > 59)
        return -1;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (mo == 2 && d == 29 && !leap)
        return -1;
    *out = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se;
    return 0;
}

/* quota-day=DAY (text, "" if not given) of a limit whose quota period is parsed: l->quota_day
 * set (QP_WEEK: Monday by default; QP_MONTH: 0 = quota-reset-day). Returns 0, or -1 with err. */
static int quota_day_parse(struct user_limit *l, const char *text, char *err, size_t errlen)
{
    static const char *const wdays[7] = {"monday", "tuesday", "wednesday", "thursday",
                                         "friday", "saturday", "sunday"};
    if (l->quota_period == QP_WEEK)
        l->quota_day = 1;
    if (!text[0])
        return 0;
    if (l->quota_period != QP_WEEK && l->quota_period != QP_MONTH) {
        snprintf(err, errlen, "limit %s: quota-day needs quota=SIZE/week or SIZE/month",
                 l->name);
        return -1;
    }
    size_t n = strlen(text);
    unsigned v = 0;
    if (n <= 2 && isdigit((unsigned char)text[0]) && isdigit((unsigned char)text[n - 1]))
        v = (unsigned)atoi(text);
    for (unsigned i = 0; i < 7 && l->quota_period == QP_WEEK && n >= 3; i++)
        if (!strncasecmp(text, wdays[i], n) && (n == 3 || n == strlen(wdays[i])))
            v = i + 1;
    if (l->quota_period == QP_WEEK ? v < 1 || v > 7 : v < 1 || v > 28) {
        snprintf(err, errlen, "limit %s: quota-day must be %s", l->name,
                 l->quota_period == QP_WEEK ? "a weekday (mon ... sun, or 1-7 with Monday 1)"
                                            : "a day of the month, 1-28");
        return -1;
    }
    l->quota_day = (uint8_t)v;
    return 0;
}

/* The KEY=VALUE fields of a limit line, by the bit each sets in limit_words.seen. */
enum { LF_CONNS, LF_IPS, LF_QUOTA, LF_EXPIRES, LF_RATE, LF_QUOTA_DAY, LF_COUNT };
static const char *const limit_keys[LF_COUNT] = {"conns", "ips", "quota", "expires", "rate",
                                                 "quota-day"};

/* What a limit line's words have given so far. */
struct limit_words {
    unsigned seen;  /* bit k: limit_keys[k] given */
    int nfields;    /* fields given, `disabled` included */
    char qday[16];  /* quota-day's value ("": none), parsed once the quota's period is known */
};

/* quota=SIZE[/day|/week|/month] (val, cut at the slash) into l. Returns 0, or -1 with err. */
static int limit_quota_parse(struct user_limit *l, char *val, char *err, size_t errlen)
{
    char e2[128];
    unsigned long long sz;
    char *slash = strchr(val, '/');
    if (slash) {
        *slash++ = 0;
        for (int qp = QP_DAY; qp <= QP_MONTH; qp++)
            if (!strcmp(slash, users_period_name(qp)))
                l->quota_period = (uint8_t)qp;
    }
    if (config_parse_size(val, &sz, e2, sizeof e2) || sz == 0 || (slash && !l->quota_period)) {
        snprintf(err, errlen, "limit %s: quota must be a size above 0, alone or per "
                              "day, week or month (e.g. 10G, 50G/month)", l->name);
        return -1;
    }
    l->quota = sz;
    return 0;
}

/* rate=SIZE/s (val of vlen bytes, the /s cut off) into l. Returns 0, or -1 with err. */
static int limit_rate_parse(struct user_limit *l, char *val, size_t vlen, char *err,
                            size_t errlen)
{
    char e2[128];
    unsigned long long sz;
    if (vlen < 3 || strcmp(val + vlen - 2, "/s") != 0) {
        snprintf(err, errlen, "limit %s: rate must be SIZE/s (e.g. 1M/s)", l->name);
        return -1;
    }
    val[vlen - 2] = 0;
    if (config_parse_size(val, &sz, e2, sizeof e2) || sz < 1024 || sz > (1ULL << 40)) {
        snprintf(err, errlen, "limit %s: rate must be 1k/s to 1024G/s", l->name);
        return -1;
    }
    l->rate = sz;
    return 0;
}

/* The value val (vlen bytes, may be changed) of field k (LF_*) into l (quota-day's into
 * w->qday). Returns 0, or -1 with err. */
static int limit_value_parse(struct user_limit *l, int k, char *val, size_t vlen,
                             struct limit_words *w, char *err, size_t errlen)
{
    char e2[128];
    long long v;
    switch (k) {
    case LF_CONNS:
    case LF_IPS:
        if (config_parse_int(val, &v, e2, sizeof e2) || v < 1 || v > 1000000) {
            snprintf(err, errlen, "limit %s: %s must be an integer in 1..1000000", l->name,
                     limit_keys[k]);
            return -1;
        }
        if (k == LF_CONNS)
            l->conns = (uint32_t)v;
        else
            l->ips = (uint32_t)v;
        return 0;
    case LF_QUOTA:
        return limit_quota_parse(l, val, err, errlen);
    case LF_QUOTA_DAY:
        if (vlen >= sizeof w->qday) {
            snprintf(err, errlen, "limit %s: quota-day '%.20s' is too long", l->name, val);
            return -1;
        }
        memcpy(w->qday, val, vlen + 1);
        return 0;
    case LF_EXPIRES:
        if (parse_date(val, vlen, &l->expires)) {
            snprintf(err, errlen, "limit %s: expires must be YYYY-MM-DD or "
                                  "YYYY-MM-DDTHH:MM:SSZ (UTC)", l->name);
            return -1;
        }
        return 0;
    case LF_RATE:
        return limit_rate_parse(l, val, vlen, err, errlen);
    }
    return 0;
}

/* One word p..q (q: its end) of a limit line after the name: `disabled` or KEY=VALUE, into l
 * and w. Returns 0, or -1 with err. */
static int limit_word_parse(struct user_limit *l, const char *p, const char *q,
                            struct limit_words *w, char *err, size_t errlen)
{
    const char *eq = memchr(p, '=', (size_t)(q - p));
    if (q - p == 8 && !memcmp(p, "disabled", 8)) {
        if (l->disabled) {
            snprintf(err, errlen, "limit %s: disabled given twice", l->name);
            return -1;
        }
        l->disabled = 1;
        w->nfields++;
        return 0;
    }
    char val[64];
    size_t klen = eq ? (size_t)(eq - p) : 0;
    size_t vlen = eq ? (size_t)(q - eq - 1) : 0;
    if (!eq || vlen == 0 || vlen >= sizeof val) {
        snprintf(err, errlen, "limit %s: '%.*s' is not KEY=VALUE", l->name,
                 (int)(q - p > 40 ? 40 : q - p), p);
        return -1;
    }
    memcpy(val, eq + 1, vlen);
    val[vlen] = 0;
    int k = -1;
    for (int i = 0; i < LF_COUNT; i++)
        if (strlen(limit_keys[i]) == klen && !memcmp(p, limit_keys[i], klen))
            k = i;
    if (k < 0) {
        snprintf(err, errlen, "limit %s: unknown field '%.*s' (conns, ips, quota, "
                              "quota-day, expires, rate, disabled)", l->name,
                 (int)(klen > 20 ? 20 : klen), p);
        return -1;
    }
    if (w->seen & (1u << k)) {
        snprintf(err, errlen, "limit %s: %s given twice", l->name, limit_keys[k]);
        return -1;
    }
    w->seen |= 1u << k;
    w->nfields++;
    return limit_value_parse(l, k, val, vlen, w, err, errlen);
}

int users_limit_parse(const char *text, struct user_limit *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *p = text;
    while (*p == ' ' || *p == '\t')
        p++;
    const char *q = p;
    while (*q && *q != ' ' && *q != '\t')
        q++;
    if (!name_ok(p, (size_t)(q - p))) {
        snprintf(err, errlen, "limit must be 'NAME [conns=N] [ips=N] "
                              "[quota=SIZE[/day|/week|/month]] [quota-day=DAY] "
                              "[expires=YYYY-MM-DD[THH:MM:SSZ]] [rate=SIZE/s] [disabled]' "
                              "with NAME a secret's name");
        return -1;
    }
    memcpy(out->name, p, (size_t)(q - p));
    out->name[q - p] = 0;
    struct limit_words w = {0};
    for (p = q;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        q = p;
        while (*q && *q != ' ' && *q != '\t')
            q++;
        if (limit_word_parse(out, p, q, &w, err, errlen))
            return -1;
        p = q;
    }
    if (!w.nfields) {
        snprintf(err, errlen, "limit %s: no limit given (conns=, ips=, quota=, expires=, rate=, "
                              "disabled)",
                 out->name);
        return -1;
    }
    return quota_day_parse(out, w.qday, err, errlen);
}

/* --- registry ------------------------------------------------------------------------------ */

struct user_ips {
    pthread_mutex_t mu;
    uint32_t n, cap;
    struct ip_entry {
        uint8_t a[16];
        uint32_t refs; /* live connections from this address */
        double last;   /* last connection start or end */
    } *e;
};

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u;
    while (*s)
        h = (h ^ (uint8_t)*s++) * 16777619u;
    return h;
}

int users_init(struct users *u, int nworkers)
{
    memset(u, 0, sizeof *u);
    u->nworkers = nworkers;
    u->max = USERS_MAX;
    u->stats = calloc((size_t)nworkers, sizeof *u->stats);
    if (!u->stats)
        return -1;
    for (int w = 0; w < nworkers; w++)
        if (!(u->stats[w] = calloc(USERS_MAX_CHUNKS, sizeof **u->stats)))
            return -1;
    return 0;
}

void users_destroy(struct users *u)
{
    for (int c = 0; c < USERS_MAX_CHUNKS && u->shared[c]; c++) {
        for (int i = 0; i < USERS_CHUNK; i++) {
            struct user_ips *ip = atomic_load(&u->shared[c][i].ips);
            if (ip) {
                pthread_mutex_destroy(&ip->mu);
                free(ip->e);
                free(ip);
            }
        }
        free(u->shared[c]);
    }
    if (u->stats) {
        for (int w = 0; w < u->nworkers; w++) {
            if (!u->stats[w])
                continue;
            for (int c = 0; c < USERS_MAX_CHUNKS; c++)
                free(u->stats[w][c]);
            free(u->stats[w]);
        }
        free(u->stats);
    }
    free(u->slots);
    memset(u, 0, sizeof *u);
}

int32_t users_find(const struct users *u, const char *name)
{
    if (!u->nslots)
        return -1;
    for (size_t i = name_hash(name) & (u->nslots - 1);; i = (i + 1) & (u->nslots - 1)) {
        uint32_t s = u->slots[i];
        if (!s)
            return -1;
        if (!strcmp(users_name(u, s - 1), name))
            return (int32_t)(s - 1);
    }
}

static int slots_grow(struct users *u)
{
    size_t n = u->nslots ? u->nslots * 2 : 64;
    uint32_t *s = calloc(n, sizeof *s);
    if (!s)
        return -1;
    for (size_t i = 0; i < u->nslots; i++) {
        uint32_t v = u->slots[i];
        if (!v)
            continue;
        size_t j = name_hash(users_name(u, v - 1)) & (n - 1);
        while (s[j])
            j = (j + 1) & (n - 1);
        s[j] = v;
    }
    free(u->slots);
    u->slots = s;
    u->nslots = n;
    return 0;
}

int32_t users_intern(struct users *u, const char *name)
{
    int32_t id = users_find(u, name);
    if (id >= 0)
        return id;
    uint32_t n = atomic_load_explicit(&u->n, memory_order_relaxed);
    if (n >= u->max)
        return -1;
    if ((n + 1) * 2 > u->nslots && slots_grow(u))
        return -1;
    uint32_t c = n / USERS_CHUNK;
    if (!u->shared[c]) {
        if (!(u->shared[c] = calloc(USERS_CHUNK, sizeof *u->shared[c])))
            return -1;
        for (int w = 0; w < u->nworkers; w++)
            if (!(u->stats[w][c] = calloc(USERS_CHUNK, sizeof *u->stats[w][c])))
                return -1;
    }
    snprintf(u->shared[c][n % USERS_CHUNK].name, SECRET_NAME_MAX, "%s", name);
    size_t j = name_hash(name) & (u->nslots - 1);
    while (u->slots[j])
        j = (j + 1) & (u->nslots - 1);
    u->slots[j] = n + 1;
    atomic_store_explicit(&u->n, n + 1, memory_order_release);
    return (int32_t)n;
}

uint32_t users_count(const struct users *u)
{
    return atomic_load_explicit(&u->n, memory_order_acquire);
}

int users_mark(const struct users *u, struct users_mark *m)
{
    m->n = atomic_load_explicit(&u->n, memory_order_relaxed);
    m->nslots = u->nslots;
    m->slots = NULL;
    if (!u->nslots)
        return 0;
    if (!(m->slots = malloc(u->nslots * sizeof *m->slots)))
        return -1;
    memcpy(m->slots, u->slots, u->nslots * sizeof *m->slots);
    return 0;
}

void users_rollback(struct users *u, struct users_mark *m)
{
    /* The ids given back were never in a published generation: no worker holds them. Their
     * storage chunks stay (capacity, reused by the next names interned). */
    free(u->slots);
    u->slots = m->slots;
    u->nslots = m->nslots;
    atomic_store_explicit(&u->n, m->n, memory_order_release);
    m->slots = NULL;
}

void users_mark_drop(struct users_mark *m)
{
    free(m->slots);
    m->slots = NULL;
}

struct user_shared *users_shared(const struct users *u, uint32_t id)
{
    return &u->shared[id / USERS_CHUNK][id % USERS_CHUNK];
}

const char *users_name(const struct users *u, uint32_t id)
{
    return users_shared(u, id)->name;
}

struct user_stats *users_wstats(const struct users *u, int worker, uint32_t id)
{
    return &u->stats[worker][id / USERS_CHUNK][id % USERS_CHUNK];
}

void users_stats_sum(const struct users *u, uint32_t id, struct user_totals *out)
{
    memset(out, 0, sizeof *out);
    if (id >= users_count(u))
        return;
    for (int w = 0; w < u->nworkers; w++) {
        const struct user_stats *s = users_wstats(u, w, id);
        out->bytes_up += STAT_GET(&s->bytes_up);
        out->bytes_down += STAT_GET(&s->bytes_down);
        out->active += STAT_GET(&s->active);
        out->conns += STAT_GET(&s->conns);
        out->closed_limit += STAT_GET(&s->closed_limit);
        out->foreign_addr += STAT_GET(&s->foreign_addr);
        for (int r = 0; r < UR_COUNT; r++)
            out->refused[r] += STAT_GET(&s->refused[r]);
    }
    out->quota_used = shared64_load(&users_shared(u, id)->used);
}

/* --- limits -------------------------------------------------------------------------------- */

static void addr_key(const struct sock_addr *a, uint8_t k[16])
{
    memset(k, 0, 16);
    if (a->u.sa.sa_family == AF_INET) {
        k[10] = k[11] = 0xff;
        memcpy(k + 12, &a->u.in4.sin_addr, 4);
    } else if (a->u.sa.sa_family == AF_INET6) {
        memcpy(k, &a->u.in6.sin6_addr, 16);
    }
}

static struct user_ips *ips_get(struct user_shared *s)
{
    struct user_ips *ip = atomic_load(&s->ips);
    if (ip)
        return ip;
    struct user_ips *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    pthread_mutex_init(&n->mu, NULL);
    if (atomic_compare_exchange_strong(&s->ips, &ip, n))
        return n;
    pthread_mutex_destroy(&n->mu); /* another worker made it first */
    free(n);
    return ip;
}

/* Admits addr into the user's recent addresses. Returns 0, or -1 if limit distinct ones are
 * there already (or no memory). */
static int ips_admit(struct user_shared *s, const struct sock_addr *addr, uint32_t limit,
                     double now, double window)
{
    struct user_ips *ip = ips_get(s);
    if (!ip)
        return -1;
    uint8_t k[16];
    addr_key(addr, k);
    int rc = -1;
    pthread_mutex_lock(&ip->mu);
    struct ip_entry *found = NULL;
    for (uint32_t i = 0; i < ip->n;) {
        struct ip_entry *e = &ip->e[i];
        if (!memcmp(e->a, k, 16)) {
            found = e;
            i++;
        } else if (!e->refs && e->last < now - window) { /* forgotten: out of the window */
            *e = ip->e[--ip->n];
        } else {
            i++;
        }
    }
    if (found) {
        found->refs++;
        found->last = now;
        rc = 0;
    } else if (ip->n + atomic_load_explicit(&s->fleet_ips, memory_order_relaxed) < limit) {
        if (ip->n == ip->cap) {
            uint32_t cap = ip->cap ? ip->cap * 2 : 4;
            struct ip_entry *e = realloc(ip->e, cap * sizeof *e);
            if (!e)
                goto out;
            ip->e = e;
            ip->cap = cap;
        }
        struct ip_entry *e = &ip->e[ip->n++];
        memcpy(e->a, k, 16);
        e->refs = 1;
        e->last = now;
        rc = 0;
    }
out:
    pthread_mutex_unlock(&ip->mu);
    return rc;
}

static void ips_release(struct user_shared *s, const struct sock_addr *addr, double now)
{
    struct user_ips *ip = atomic_load(&s->ips);
    if (!ip)
        return;
    uint8_t k[16];
    addr_key(addr, k);
    pthread_mutex_lock(&ip->mu);
    for (uint32_t i = 0; i < ip->n; i++) {
        if (!memcmp(ip->e[i].a, k, 16)) {
            if (ip->e[i].refs)
                ip->e[i].refs--;
            ip->e[i].last = now;
            break;
        }
    }
    pthread_mutex_unlock(&ip->mu);
}

uint32_t users_ips_recent(const struct users *u, uint32_t id, double now, double window)
{
    struct user_ips *ip = atomic_load(&users_shared(u, id)->ips);
    uint32_t n = 0;
    if (!ip)
        return 0;
    pthread_mutex_lock(&ip->mu);
    for (uint32_t i = 0; i < ip->n; i++)
        n += ip->e[i].refs || ip->e[i].last >= now - window;
    pthread_mutex_unlock(&ip->mu);
    return n;
}

int users_admit(const struct users *u, uint32_t id, const struct user_limit *lim,
                const struct sock_addr *addr, double now, double ips_window)
{
    struct user_shared *s = users_shared(u, id);
    if (lim && lim->disabled)
        return UR_DISABLED;
    if (lim && (lim->conns || lim->ips || lim->quota) &&
        atomic_load_explicit(&u->fleet_refuse, memory_order_relaxed))
        return UR_STORE;
    if (lim && lim->expires && now >= (double)lim->expires)
        return UR_EXPIRED;
    if (lim && lim->quota && shared64_load(&s->used) >= lim->quota)
        return UR_QUOTA;
    uint32_t a = atomic_fetch_add_explicit(&s->active, 1, memory_order_relaxed);
    if (lim && lim->conns && a >= lim->conns) {
        atomic_fetch_sub_explicit(&s->active, 1, memory_order_relaxed);
        return UR_CONNS;
    }
    if (lim && lim->ips && ips_admit(s, addr, lim->ips, now, ips_window)) {
        atomic_fetch_sub_explicit(&s->active, 1, memory_order_relaxed);
        return UR_IPS;
    }
    return -1;
}

void users_release(const struct users *u, uint32_t id, const struct sock_addr *addr,
                   double now)
{
    struct user_shared *s = users_shared(u, id);
    atomic_fetch_sub_explicit(&s->active, 1, memory_order_relaxed);
    ips_release(s, addr, now);
}

int users_charge(const struct users *u, uint32_t id, uint64_t quota, uint64_t n)
{
    struct user_shared *s = users_shared(u, id);
    uint64_t before = shared64_fetch_add(&s->used, n), used = before + n;
    if (used < before) { /* saturates: never wraps to a small count */
        shared64_store(&s->used, UINT64_MAX);
        used = UINT64_MAX;
    }
    return quota && used >= quota;
}

double users_rate_take(const struct users *u, uint32_t id, int dir, uint64_t rate,
                       uint64_t burst, uint64_t n, double now)
{
    shared64 *tat = &users_shared(u, id)->tat[dir & 1];
    uint64_t now_us = (uint64_t)(now * 1e6);
    uint64_t cost = (uint64_t)((double)n * 1e6 / (double)rate);
    uint64_t old = shared64_load(tat), nt;
    do {
        nt = (old > now_us ? old : now_us) + cost;
    } while (!shared64_cas(tat, &old, nt));
    uint64_t burst_us = (uint64_t)((double)burst * 1e6 / (double)rate);
    return nt > now_us + burst_us ? (double)(nt - now_us - burst_us) / 1e6 : 0;
}

int users_log_allowed(const struct users *u, uint32_t id, double now)
{
    _Atomic uint32_t *l = &users_shared(u, id)->last_log;
    uint32_t sec = (uint32_t)now | 1; /* 0 = never logged (odd: never 0; a second is noise) */
    uint32_t old = atomic_load_explicit(l, memory_order_relaxed);
    /* 60 s since the last line, not a new calendar minute: a burst that straddles a minute's
     * turn is still one line. */
    return (old == 0 || sec - old >= 60) && atomic_compare_exchange_strong(l, &old, sec);
}

int users_quota_roll(struct users *u, const struct user_limit *lim, int n, int64_t now)
{
    int reset = 0;
    for (int i = 0; i < n; i++) {
        const struct user_limit *l = &lim[i];
        int32_t id = l->quota ? users_find(u, l->name) : -1;
        if (id < 0)
            continue;
        struct user_shared *s = users_shared(u, (uint32_t)id);
        int64_t next, start = users_period_start(l->quota_period, l->quota_day, now, &next);
        int64_t was = (int64_t)shared64_load(&s->period);
        if (was == start)
            continue;
        shared64_store(&s->period, (uint64_t)start);
        /* Not known yet, a lifetime quota, or later than now (the clock went back, the day
         * moved back): the bytes stay, in this period. */
        if (!was || !start || was > start)
            continue;
        uint64_t used = shared64_load(&s->used);
        if (!used)
            continue; /* nothing to start over (and no line for each idle user) */
        shared64_store(&s->used, 0);
        shared64_store(&s->epoch, 0); /* a new period: its hash's epoch is learnt anew */
        reset++;
        u->resets++;
        log_info("quota of user %s starts over (%s): %llu bytes used in the period before; "
                 "next reset at %lld (unix, UTC)", l->name, users_period_name(l->quota_period),
                 (unsigned long long)used, (long long)next);
    }
    return reset;
}

uint64_t users_quota_reset(struct users *u, uint32_t id)
{
    struct user_shared *s = users_shared(u, id);
    uint64_t used = shared64_load(&s->used);
    shared64_store(&s->used, 0);
    atomic_fetch_add(&u->resets, 1);
    /* with limits-store, the caller (the API) asks the flusher to reset the fleet's count too */
    log_info("quota of user %s reset by the management API or CLI: %llu bytes were used",
             users_name(u, id), (unsigned long long)used);
    return used;
}

/* --- state file ----------------------------------------------------------------------------- */

long users_state_format(const struct users *u, char **buf, size_t *cap)
{
    size_t len = 0;
    uint32_t n = users_count(u);
    for (uint32_t id = 0; id < n; id++) {
        uint64_t used = shared64_load(&users_shared(u, id)->used);
        uint64_t period = shared64_load(&users_shared(u, id)->period);
        uint64_t epoch = shared64_load(&users_shared(u, id)->epoch);
        if (!used)
            continue;
        if (*cap - len < SECRET_NAME_MAX + 64) {
            size_t nc = *cap * 2 + SECRET_NAME_MAX + 4096;
            char *b = realloc(*buf, nc);
            if (!b)
                return -1;
            *buf = b;
            *cap = nc;
        }
        len += (size_t)snprintf(*buf + len, *cap - len, "quota-used = %s %llu", users_name(u, id),
                                (unsigned long long)used);
        if (period || epoch)
            len += (size_t)snprintf(*buf + len, *cap - len, " %llu",
                                    (unsigned long long)period);
        if (epoch)
            len += (size_t)snprintf(*buf + len, *cap - len, " %llu",
                                    (unsigned long long)epoch - 1);
        (*buf)[len++] = '\n';
    }
    if (*cap == len) {
        char *b = realloc(*buf, len + 1);
        if (!b)
            return -1;
        *buf = b;
        *cap = len + 1;
    }
    if (*buf)
        (*buf)[len] = 0;
    return (long)len;
}

int users_state_apply(struct users *u, const char *value, char *err, size_t errlen)
{
    char name[SECRET_NAME_MAX];
    const char *sp = strpbrk(value, " \t");
    if (!sp || !name_ok(value, (size_t)(sp - value))) {
        snprintf(err, errlen, "quota-used must be 'NAME BYTES [PERIOD_START [EPOCH]]'");
        return -1;
    }
    memcpy(name, value, (size_t)(sp - value));
    name[sp - value] = 0;
    /* bytes, the start of their period (0: lifetime), limits-store's epoch of them */
    unsigned long long v[3] = {0, 0, 0};
    int i = 0;
    for (; i < 3; i++) {
        while (*sp == ' ' || *sp == '\t')
            sp++;
        if (i >= 1 && !*sp)
            break; /* the shorter lines (before periodic quotas, before the epoch) */
        char *end;
        errno = 0;
        v[i] = strtoull(sp, &end, 10);
        if (errno || end == sp || (*end && *end != ' ' && *end != '\t') || *sp == '-' ||
            (i == 1 && v[i] > (1ULL << 40))) {
            snprintf(err, errlen, "quota-used %s: '%s' is not a %s", name, sp,
                     i == 2 ? "limits-store epoch" : i ? "period start (unix seconds)"
                                                       : "byte count");
            return -1;
        }
        sp = end;
    }
    while (*sp == ' ' || *sp == '\t')
        sp++;
    if (*sp) {
        snprintf(err, errlen, "quota-used %s: '%s' after the epoch", name, sp);
        return -1;
    }
    int32_t id = users_intern(u, name);
    if (id < 0) {
        snprintf(err, errlen, "quota-used %s: too many users", name);
        return -1;
    }
    shared64_store(&users_shared(u, (uint32_t)id)->used, v[0]);
    shared64_store(&users_shared(u, (uint32_t)id)->period, v[1]);
    shared64_store(&users_shared(u, (uint32_t)id)->epoch, i == 3 ? v[2] + 1 : 0);
    return 0;
}

static int state_quota(void *conf, const char *v, char *err, size_t errlen)
{
    return users_state_apply(conf, v, err, errlen);
}

/* `quota-reset = NAME`: an offline reset-quota that the fleet (limits-store) has yet to see. */
static int state_reset_asked(void *conf, const char *v, char *err, size_t errlen)
{
    struct users *u = conf;
    int32_t id = name_ok(v, strlen(v)) ? users_intern(u, v) : -1;
    if (id < 0) {
        snprintf(err, errlen, "quota-reset %s: not a user name (or too many users)", v);
        return -1;
    }
    shared64_store(&users_shared(u, (uint32_t)id)->used, 0);
    users_shared(u, (uint32_t)id)->reset_asked = 1;
    return 0;
}

static int state_skip(void *conf, const char *v, char *err, size_t errlen)
{
    return 0;
}

static void state_reset(void *conf)
{
}

int users_state_load(struct users *u, const char *path, char *err, size_t errlen)
{
    static const struct config_option table[] = {
        {.name = "secret", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .parse = state_skip,
         .reset = state_reset},
        {.name = "quota-used", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .parse = state_quota,
         .reset = state_reset},
        {.name = "quota-reset", .type = CFG_CUSTOM, .flags = CFG_REPEAT,
         .parse = state_reset_asked, .reset = state_reset},
    };
    FILE *f = fopen(path, "r");
    if (!f)
        return 0; /* none yet */
    fclose(f);
    struct config_parser *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    config_init(p, table, sizeof table / sizeof table[0], u);
    int rc = 0;
    if (config_load_file(p, path)) {
        snprintf(err, errlen, "state file: %s", p->errors.msg[0]);
        rc = -1;
    }
    free(p);
    return rc;
}
