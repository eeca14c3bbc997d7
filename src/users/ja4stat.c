/* ja4stat.c: FakeTLS hellos counted by JA4 fingerprint in fixed per-worker heavy-hitter tables. */
#include "users/ja4stat.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sbuf.h"
#include "conn/conn_int.h"
#include "config/reload.h"
#include "users/users.h"

/* --- keys ------------------------------------------------------------------------------ */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int ja4stat_key(const char *ja4, uint8_t key[JA4STAT_KEY_LEN])
{
    memset(key, 0, JA4STAT_KEY_LEN);
    if (ja4 && strlen(ja4) == JA4_LEN && ja4[0] == 't' && ja4[10] == '_' && ja4[23] == '_') {
        memcpy(key, ja4, 10);
        int ok = 1;
        for (int i = 0; i < 12 && ok; i++) {
            int p = i < 6 ? 11 + 2 * i : 24 + 2 * (i - 6);
            int hi = hexval(ja4[p]), lo = hexval(ja4[p + 1]);
            ok = hi >= 0 && lo >= 0;
            key[10 + i] = (uint8_t)(hi << 4 | lo);
        }
        if (ok)
            return 0;
        memset(key, 0, JA4STAT_KEY_LEN);
    }
    key[0] = '-';
    return -1;
}

const char *ja4stat_key_str(const uint8_t key[JA4STAT_KEY_LEN], char out[JA4_LEN + 1])
{
    static const char hx[] = "0123456789abcdef";
    if (key[0] == 0)
        out[0] = '\0';
    else if (key[0] != 't')
        memcpy(out, "malformed", 10);
    else {
        memcpy(out, key, 10);
        out[10] = out[23] = '_';
        for (int i = 0; i < 12; i++) {
            char *p = out + (i < 6 ? 11 + 2 * i : 24 + 2 * (i - 6));
            p[0] = hx[key[10 + i] >> 4];
            p[1] = hx[key[10 + i] & 15];
        }
        out[JA4_LEN] = '\0';
    }
    return out;
}

/* --- the Space-Saving table (owner writes, anyone reads through seq) ---------------------- */

/* key and valid as the table's words */
static void key_words(const uint8_t key[JA4STAT_KEY_LEN], int valid, uint32_t w[JA4STAT_WORDS])
{
    uint8_t b[JA4STAT_WORDS * 4] = {0};
    memcpy(b, key, JA4STAT_KEY_LEN);
    b[JA4STAT_KEY_LEN] = (uint8_t)(valid != 0);
    memcpy(w, b, sizeof b);
}

#define LD(p) atomic_load_explicit((p), memory_order_relaxed)
#define ST(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)

static uint64_t ent_count(const struct ja4stat_ent *e)
{
    return (uint64_t)LD(&e->count_hi) << 32 | LD(&e->count_lo);
}

/* Counts key words w in the n entries e under seq (the owner's thread). */
static void ss_add(_Atomic uint32_t *seq, struct ja4stat_ent *e, int n,
                   const uint32_t w[JA4STAT_WORDS])
{
    int at = -1, min = 0;
    uint64_t minc = UINT64_MAX;
    for (int i = 0; i < n; i++) {
        uint64_t c = ent_count(&e[i]);
        if (c && LD(&e[i].w[0]) == w[0] && LD(&e[i].w[1]) == w[1] && LD(&e[i].w[2]) == w[2] &&
            LD(&e[i].w[3]) == w[3] && LD(&e[i].w[4]) == w[4] && LD(&e[i].w[5]) == w[5]) {
            at = i;
            break;
        }
        if (c < minc) {
            minc = c;
            min = i;
        }
    }
    uint32_t s = LD(seq);
    ST(seq, s + 1); /* odd: readers retry */
    atomic_thread_fence(memory_order_release);
    if (at < 0) { /* a new key takes the least-counted entry (an empty one first) */
        at = min;
        for (int k = 0; k < JA4STAT_WORDS; k++)
            ST(&e[at].w[k], w[k]);
    }
    uint64_t c = ent_count(&e[at]) + 1;
    ST(&e[at].count_lo, (uint32_t)c);
    ST(&e[at].count_hi, (uint32_t)(c >> 32));
    atomic_store_explicit(seq, s + 2, memory_order_release);
}

void ja4stat_add(struct ja4stat *t, const uint8_t key[JA4STAT_KEY_LEN], int valid)
{
    uint32_t w[JA4STAT_WORDS];
    key_words(key, valid, w);
    ss_add(&t->seq, t->ent, JA4STAT_SLOTS, w);
}

void ja4stat_user_add(struct ja4stat_user *u, const uint8_t key[JA4STAT_KEY_LEN])
{
    uint32_t w[JA4STAT_WORDS];
    key_words(key, 1, w);
    ss_add(&u->seq, u->ent, JA4STAT_USER_SLOTS, w);
}

/* Appends the non-empty entries of e[0..n) under seq to rows (a consistent copy). */
static size_t ss_copy(const _Atomic uint32_t *seq, const struct ja4stat_ent *e, int n,
                      struct ja4stat_row *rows)
{
    size_t k;
    for (unsigned tries = 0;; tries++) {
        uint32_t s1 = atomic_load_explicit(seq, memory_order_acquire);
        k = 0;
        if (!(s1 & 1)) {
            for (int i = 0; i < n; i++) {
                uint64_t c = ent_count(&e[i]);
                if (!c)
                    continue;
                uint32_t w[JA4STAT_WORDS];
                for (int j = 0; j < JA4STAT_WORDS; j++)
                    w[j] = LD(&e[i].w[j]);
                uint8_t b[JA4STAT_WORDS * 4];
                memcpy(b, w, sizeof b);
                memcpy(rows[k].key, b, JA4STAT_KEY_LEN);
                rows[k].valid = b[JA4STAT_KEY_LEN];
                rows[k].count = c;
                k++;
            }
            atomic_thread_fence(memory_order_acquire);
            if (LD(seq) == s1)
                return k;
        }
        if (tries > 64) /* the owner is busy counting: let it run */
            sched_yield();
    }
}

static int row_key_cmp(const void *a, const void *b)
{
    const struct ja4stat_row *x = a, *y = b;
    int c = memcmp(x->key, y->key, JA4STAT_KEY_LEN);
    return c ? c : (int)x->valid - (int)y->valid;
}

static int row_count_cmp(const void *a, const void *b)
{
    const struct ja4stat_row *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return row_key_cmp(a, b);
}

/* Sums equal (key, valid) rows and sorts by count. */
static size_t rows_merge(struct ja4stat_row *rows, size_t n, uint64_t *total)
{
    qsort(rows, n, sizeof *rows, row_key_cmp);
    size_t k = 0;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += rows[i].count;
        if (k && !row_key_cmp(&rows[k - 1], &rows[i]))
            rows[k - 1].count += rows[i].count;
        else
            rows[k++] = rows[i];
    }
    qsort(rows, k, sizeof *rows, row_count_cmp);
    if (total)
        *total = sum;
    return k;
}

size_t ja4stat_merge(const struct ja4stat *const *t, int n, struct ja4stat_row *rows, size_t cap,
                     uint64_t *total)
{
    size_t k = 0;
    for (int i = 0; i < n && k + JA4STAT_SLOTS <= cap; i++)
        k += ss_copy(&t[i]->seq, t[i]->ent, JA4STAT_SLOTS, rows + k);
    return rows_merge(rows, k, total);
}

size_t ja4stat_user_merge(const struct ja4stat_user *const *u, int n, struct ja4stat_row *rows,
                          size_t cap, uint64_t *total)
{
    size_t k = 0;
    for (int i = 0; i < n && k + JA4STAT_USER_SLOTS <= cap; i++)
        k += ss_copy(&u[i]->seq, u[i]->ent, JA4STAT_USER_SLOTS, rows + k);
    return rows_merge(rows, k, total);
}

/* --- the proxy's side --------------------------------------------------------------------- */

void ja4stat_hello(struct conn *c)
{
    if (c->ja4[0]) /* done once: a hello resumed after the replay store's answer is the same */
        return;
    char s[JA4_LEN + 1];
    ja4stat_key(ja4_from_hello(c->hbuf, c->hlen, s) == 0 ? s : NULL, c->ja4);
}

void ja4stat_conn_close(struct conn *c)
{
    if (!c->ja4[0])
        return;
    int valid = c->authed && c->tls;
    ja4stat_add(&c->pw->ja4stat, c->ja4, valid);
    if (valid && c->us)
        ja4stat_user_add(&c->us->ja4, c->ja4);
}

const char *ja4stat_conn_str(const struct conn *c, char out[JA4_LEN + 1])
{
    return ja4stat_key_str(c->ja4, out);
}

/* --- rendering ---------------------------------------------------------------------------- */

/* The worker tables merged: rows (malloc'ed, *rows) and the count; -1 out of memory. */
static long merged(const struct proxy_worker *pws, int n, struct ja4stat_row **rows,
                   uint64_t *total)
{
    const struct ja4stat **t = malloc((size_t)(n > 0 ? n : 1) * sizeof *t);
    *rows = malloc((size_t)(n > 0 ? n : 1) * JA4STAT_SLOTS * sizeof **rows);
    if (!t || !*rows) {
        free(t);
        free(*rows);
        *rows = NULL;
        return -1;
    }
    for (int i = 0; i < n; i++)
        t[i] = &pws[i].ja4stat;
    size_t k = ja4stat_merge(t, n, *rows, (size_t)n * JA4STAT_SLOTS, total);
    free(t);
    return (long)k;
}

/* User i of g: its rows merged over the workers (rows holds nworkers * JA4STAT_USER_SLOTS). */
static size_t user_rows(const struct gen *g, int i, const struct ja4stat_user **tabs,
                        struct ja4stat_row *rows)
{
    if (!g->users || !g->uid)
        return 0;
    int nw = g->users->nworkers;
    for (int w = 0; w < nw; w++)
        tabs[w] = &users_wstats(g->users, w, g->uid[i])->ja4;
    size_t k = ja4stat_user_merge(tabs, nw, rows, (size_t)nw * JA4STAT_USER_SLOTS, NULL);
    return k < JA4STAT_USER_SLOTS ? k : JA4STAT_USER_SLOTS;
}

/* Scratch for user_rows, sized for g's workers; 0 or -1. */
static int user_scratch(const struct gen *g, const struct ja4stat_user ***tabs,
                        struct ja4stat_row **rows)
{
    int nw = g->users ? g->users->nworkers : 1;
    *tabs = malloc((size_t)(nw > 0 ? nw : 1) * sizeof **tabs);
    *rows = malloc((size_t)(nw > 0 ? nw : 1) * JA4STAT_USER_SLOTS * sizeof **rows);
    if (*tabs && *rows)
        return 0;
    free(*tabs);
    free(*rows);
    return -1;
}

/* What both pages show: the merged rows, the top, "other" per valid; the users' scratch. */
struct view {
    struct ja4stat_row *rows, *ur;
    const struct ja4stat_user **ut;
    uint64_t total, other[2];
    long top;
};

static void view_free(struct view *v)
{
    free(v->rows);
    free(v->ut);
    free(v->ur);
}

static int view_get(struct view *v, const struct proxy_worker *pws, int n, const struct gen *g)
{
    memset(v, 0, sizeof *v);
    long k = merged(pws, n, &v->rows, &v->total);
    if (k < 0 || user_scratch(g, &v->ut, &v->ur)) {
        free(v->rows);
        return -1;
    }
    v->top = k < JA4STAT_TOP ? k : JA4STAT_TOP;
    for (long i = v->top; i < k; i++)
        v->other[v->rows[i].valid != 0] += v->rows[i].count;
    return 0;
}

/* One sample: a Prometheus line, or (json) an entry of /stats's "metrics" array after others. */
static void sample(struct sbuf *out, int json, const char *name, const char *k1, const char *v1,
                   const char *k2, const char *v2, const char *value)
{
    if (json)
        sbuf_printf(out, ",\n{\"name\":\"mtproxy_%s\",\"labels\":{\"%s\":\"%s\",\"%s\":\"%s\"},"
                         "\"value\":%s}",
                    name, k1, v1, k2, v2, value);
    else
        sbuf_printf(out, "mtproxy_%s{%s=\"%s\",%s=\"%s\"} %s\n", name, k1, v1, k2, v2, value);
}

static void family(struct sbuf *out, int json, const char *name, const char *type,
                   const char *help)
{
    if (!json)
        sbuf_printf(out, "# HELP mtproxy_%s %s\n# TYPE mtproxy_%s %s\n", name, help, name, type);
}

_Static_assert(JA4STAT_USER_SLOTS == 3, "the help text says 3");

/* The families of the header's comment, from the view v. */
static void emit(const struct view *v, const struct gen *g, struct sbuf *out, int json)
{
    static const char *const fam[2] = {"tls_hello_fingerprint_total",
                                       "tls_hello_fingerprint_share"};
    static const char *const help[2] = {
        "FakeTLS hellos by JA4 fingerprint (counted at the connection's close; the most "
        "frequent, then ja4=\"other\"), valid = answered.",
        "Each fingerprint's share of all FakeTLS hellos counted."};
    char s[JA4_LEN + 1], val[32];
    for (int f = 0; f < 2; f++) {
        family(out, json, fam[f], f ? "gauge" : "counter", help[f]);
        for (long i = 0; i < v->top + 2; i++) {
            int valid = i < v->top ? v->rows[i].valid : (int)(i - v->top) == 0;
            uint64_t c = i < v->top ? v->rows[i].count : v->other[valid];
            if (f == 0)
                snprintf(val, sizeof val, "%llu", (unsigned long long)c);
            else
                snprintf(val, sizeof val, "%.6f",
                         v->total ? (double)c / (double)v->total : 0.0);
            sample(out, json, fam[f], "ja4",
                   i < v->top ? ja4stat_key_str(v->rows[i].key, s) : "other", "valid",
                   valid ? "yes" : "no", val);
        }
    }
    family(out, json, "user_tls_fingerprint_total", "counter",
           "Each user's most frequent JA4 fingerprints of valid FakeTLS hellos (at most 3).");
    for (int i = 0; i < g->opt.nsecrets; i++) {
        size_t m = user_rows(g, i, v->ut, v->ur);
        for (size_t r = 0; r < m; r++) {
            snprintf(val, sizeof val, "%llu", (unsigned long long)v->ur[r].count);
            sample(out, json, "user_tls_fingerprint_total", "user", g->opt.secrets[i].name,
                   "ja4", ja4stat_key_str(v->ur[r].key, s), val);
        }
    }
}

static int render(const struct proxy_worker *pws, int n, const struct gen *g, struct sbuf *out,
                  int json)
{
    struct view v;
    if (view_get(&v, pws, n, g)) {
        out->failed = 1;
        return -1;
    }
    emit(&v, g, out, json);
    view_free(&v);
    return out->failed ? -1 : 0;
}

int ja4stat_render_prometheus(const struct proxy_worker *pws, int n, const struct gen *g,
                              struct sbuf *out)
{
    return render(pws, n, g, out, 0);
}

int ja4stat_render_json(const struct proxy_worker *pws, int n, const struct gen *g,
                        struct sbuf *out)
{
    return render(pws, n, g, out, 1);
}
