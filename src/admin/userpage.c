/* userpage.c: the status page's user list (search, sort, paging) and traffic history rings. */
#include "admin/userpage.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proto/http.h"

void hist_sample(struct hist_ring *r, int64_t now, uint64_t bytes_total, uint64_t conns_total,
                 uint64_t active)
{
    if (!r->primed || now <= r->last) {
        if (!r->primed || now < r->last) { /* first sample, or the clock went back */
            r->primed = 1;
            r->last = now;
            r->prev_bytes = bytes_total;
            r->prev_conns = conns_total;
        }
        return;
    }
    uint64_t db = bytes_total >= r->prev_bytes ? bytes_total - r->prev_bytes : 0;
    uint64_t dc = conns_total >= r->prev_conns ? conns_total - r->prev_conns : 0;
    int64_t k = now - r->last;
    if (k > HIST_LEN)
        k = HIST_LEN;
    for (int64_t i = 0; i < k; i++) {
        /* spread evenly; the remainder goes to the last seconds */
        uint64_t b = db / (uint64_t)k + ((uint64_t)i >= (uint64_t)k - db % (uint64_t)k);
        uint64_t c = dc / (uint64_t)k + ((uint64_t)i >= (uint64_t)k - dc % (uint64_t)k);
        r->bytes[r->head] = b;
        r->conns[r->head] = c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
        r->active[r->head] = active > UINT32_MAX ? UINT32_MAX : (uint32_t)active;
        r->head = (r->head + 1) % HIST_LEN;
        if (r->n < HIST_LEN)
            r->n++;
    }
    r->last = now;
    r->prev_bytes = bytes_total;
    r->prev_conns = conns_total;
}

void hist_json(const struct hist_ring *r, struct sbuf *out)
{
    uint32_t first = (r->head + HIST_LEN - r->n) % HIST_LEN;
    sbuf_printf(out, "{\"interval\":1,\"end\":%lld,\"len\":%u,\"bytes\":[",
                (long long)(r->primed ? r->last : 0), r->n);
    for (uint32_t i = 0; i < r->n; i++)
        sbuf_printf(out, "%s%llu", i ? "," : "",
                    (unsigned long long)r->bytes[(first + i) % HIST_LEN]);
    sbuf_printf(out, "],\"conns\":[");
    for (uint32_t i = 0; i < r->n; i++)
        sbuf_printf(out, "%s%u", i ? "," : "", r->conns[(first + i) % HIST_LEN]);
    sbuf_printf(out, "],\"active\":[");
    for (uint32_t i = 0; i < r->n; i++)
        sbuf_printf(out, "%s%u", i ? "," : "", r->active[(first + i) % HIST_LEN]);
    sbuf_printf(out, "]}");
}

struct hist_ring *hist_users_get(struct hist_users *h, const char *name, double now)
{
    if (strlen(name) >= sizeof h->u[0].name || !name[0])
        return NULL;
    struct hist_user *lru = NULL; /* a free slot, else the least recently viewed */
    for (int i = 0; i < HIST_USERS; i++) {
        struct hist_user *u = &h->u[i];
        if (u->name[0] && !strcmp(u->name, name)) {
            u->viewed = now;
            return u->ring;
        }
        if (!lru || (lru->name[0] && (!u->name[0] || u->viewed < lru->viewed)))
            lru = u;
    }
    if (!lru->ring && !(lru->ring = malloc(sizeof *lru->ring)))
        return NULL;
    memset(lru->ring, 0, sizeof *lru->ring);
    strcpy(lru->name, name);
    lru->viewed = now;
    return lru->ring;
}

void hist_users_free(struct hist_users *h)
{
    for (int i = 0; i < HIST_USERS; i++) {
        free(h->u[i].ring);
        h->u[i] = (struct hist_user){0};
    }
}

/* --- the user list --------------------------------------------------------------------- */

static int param(const char *query, const char *key, char *buf, size_t buflen)
{
    return http_query_param(query, strlen(query), key, buf, buflen);
}

static const char *const sort_names[] = {"name", "bytes", "conns", "active", "quota"};

const char *upage_sort_name(enum upage_sort s)
{
    return (unsigned)s < sizeof sort_names / sizeof *sort_names ? sort_names[s] : "name";
}

static int number(const char *s, size_t max, size_t *out)
{
    char *end;
    if (!*s || !isdigit((unsigned char)*s))
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || v > max)
        return -1;
    *out = (size_t)v;
    return 0;
}

int upage_parse(const char *query, struct upage_query *out, const char **why)
{
    char v[80];
    int r;
    *out = (struct upage_query){.limit = UPAGE_LIMIT_DEFAULT};
    if ((r = param(query, "offset", v, sizeof v)) < 0 ||
        (r && number(v, 100000000, &out->offset))) {
        *why = "offset: a number expected";
        return -1;
    }
    if ((r = param(query, "limit", v, sizeof v)) < 0 ||
        (r && (number(v, UPAGE_LIMIT_MAX, &out->limit) || !out->limit))) {
        *why = "limit: a number from 1 to 500 expected";
        return -1;
    }
    if ((r = param(query, "q", out->q, sizeof out->q)) < 0) {
        *why = "q: malformed or longer than 63 bytes";
        return -1;
    }
    if (!r)
        out->q[0] = 0;
    if ((r = param(query, "sort", v, sizeof v)) < 0) {
        *why = "sort: one of name, bytes, conns, active, quota expected";
        return -1;
    }
    if (r) {
        size_t i, ns = sizeof sort_names / sizeof *sort_names;
        for (i = 0; i < ns && strcmp(v, sort_names[i]); i++)
            ;
        if (i == ns) {
            *why = "sort: one of name, bytes, conns, active, quota expected";
            return -1;
        }
        out->sort = (enum upage_sort)i;
    }
    out->desc = out->sort != UP_NAME;
    if ((r = param(query, "order", v, sizeof v)) < 0 ||
        (r && strcmp(v, "asc") && strcmp(v, "desc"))) {
        *why = "order: asc or desc expected";
        return -1;
    }
    if (r)
        out->desc = !strcmp(v, "desc");
    return 0;
}

/* 1 if hay holds needle, ASCII case-insensitively. */
static int holds(const char *hay, const char *needle, size_t nl)
{
    for (; *hay; hay++)
        if (!strncasecmp(hay, needle, nl))
            return 1;
    return nl == 0;
}

size_t upage_filter(struct upage_row *rows, size_t n, const char *q)
{
    size_t ql = strlen(q), k = 0;
    if (!ql)
        return n;
    for (size_t i = 0; i < n; i++)
        if (holds(rows[i].name, q, ql))
            rows[k++] = rows[i];
    return k;
}

static enum upage_sort sort_by;
static int sort_desc;

static int cmp_u64(uint64_t a, uint64_t b)
{
    return a < b ? -1 : a > b;
}

static int row_cmp(const void *pa, const void *pb)
{
    const struct upage_row *a = pa, *b = pb;
    int c = 0;
    switch (sort_by) {
    case UP_BYTES: c = cmp_u64(a->bytes, b->bytes); break;
    case UP_CONNS: c = cmp_u64(a->conns, b->conns); break;
    case UP_ACTIVE: c = cmp_u64(a->active, b->active); break;
    case UP_QUOTA: c = cmp_u64(a->quota_used, b->quota_used); break;
    case UP_NAME: break;
    }
    if (c)
        return sort_desc ? -c : c;
    /* ties (and the name sort): by name, ascending unless the name is the key */
    c = strcmp(a->name, b->name);
    if (!c)
        c = cmp_u64(a->idx, b->idx);
    return sort_desc && sort_by == UP_NAME ? -c : c;
}

void upage_sort(struct upage_row *rows, size_t n, enum upage_sort s, int desc)
{
    /* one thread sorts (the metrics thread; tests) */
    sort_by = s;
    sort_desc = desc;
    qsort(rows, n, sizeof *rows, row_cmp);
}
