/* api.c: the management API: JSON under /api/v1, changes written to users-file and applied by the reload path (see api.h). */
#include "proxy/api.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "crypto/crypto.h"
#include "proto/json.h"
#include "proto/secret.h"
#include "proxy/metrics.h"
#include "proxy/options.h"
#include "proxy/prefix.h"
#include "proxy/qr.h"
#include "proxy/reload.h"
#include "proxy/users.h"

struct api {
    pthread_mutex_t lock; /* one change (write + reload) at a time */
    struct api_reloads *rl;
    api_gen_fn current;
    void *arg;
};

void api_reload_begin(struct api_reloads *rl)
{
    atomic_fetch_add(&rl->begun, 1);
}

void api_reload_end(struct api_reloads *rl, int ok, const char *err)
{
    snprintf(rl->err, sizeof rl->err, "%s", ok || !err ? "" : err);
    atomic_store(&rl->ok, ok);
    atomic_fetch_add(&rl->done, 1);
}

struct api *api_new(struct api_reloads *rl, api_gen_fn current, void *arg)
{
    struct api *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    pthread_mutex_init(&a->lock, NULL);
    a->rl = rl;
    a->current = current;
    a->arg = arg;
    return a;
}

void api_free(struct api *a)
{
    if (!a)
        return;
    pthread_mutex_destroy(&a->lock);
    free(a);
}

/* --- JSON out ------------------------------------------------------------------------- */

static void jstr(struct sbuf *o, const char *s)
{
    char small[512];
    size_t n = json_escape(s, small, sizeof small);
    if (n < sizeof small) {
        sbuf_printf(o, "\"%s\"", small);
        return;
    }
    char *big = malloc(n + 1);
    if (!big) {
        o->failed = 1;
        return;
    }
    json_escape(s, big, n + 1);
    sbuf_printf(o, "\"%s\"", big);
    free(big);
}

/* {"error":MSG,"field":FIELD|null}; returns code. */
static int fail(struct sbuf *o, int code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(struct sbuf *o, int code, const char *field, const char *fmt, ...)
{
    char msg[CONFIG_ERR_LEN + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    o->len = 0;
    sbuf_printf(o, "{\"error\":");
    jstr(o, msg);
    sbuf_printf(o, ",\"field\":");
    if (field)
        jstr(o, field);
    else
        sbuf_printf(o, "null");
    sbuf_printf(o, "}\n");
    return code;
}

/* --- users-file as records ------------------------------------------------------------ */

/* One user of users-file: its secret line's value and limit line's value (NULL: none). */
struct urec {
    char name[SECRET_NAME_MAX];
    char *secret, *limit;
};

struct ufile {
    struct urec *r;
    int n, cap;
    char *text; /* as read (NULL: no file) */
    size_t len;
};

static void ufile_free(struct ufile *u)
{
    for (int i = 0; i < u->n; i++) {
        free(u->r[i].secret);
        free(u->r[i].limit);
    }
    free(u->r);
    free(u->text);
    memset(u, 0, sizeof *u);
}

static int ufile_find(const struct ufile *u, const char *name)
{
    for (int i = 0; i < u->n; i++)
        if (!strcmp(u->r[i].name, name))
            return i;
    return -1;
}

/* The record of name (added if new), or NULL (out of memory). */
static struct urec *ufile_rec(struct ufile *u, const char *name, size_t n)
{
    char nm[SECRET_NAME_MAX];
    snprintf(nm, sizeof nm, "%.*s", (int)(n < sizeof nm ? n : sizeof nm - 1), name);
    int i = ufile_find(u, nm);
    if (i >= 0)
        return &u->r[i];
    if (u->n == u->cap) {
        int cap = u->cap ? 2 * u->cap : 16;
        struct urec *r = realloc(u->r, (size_t)cap * sizeof *r);
        if (!r)
            return NULL;
        u->r = r;
        u->cap = cap;
    }
    struct urec *r = &u->r[u->n++];
    memset(r, 0, sizeof *r);
    memcpy(r->name, nm, sizeof nm);
    return r;
}

/* Records a line's value (what = the secret or the limit slot of its user). */
static int ufile_keep(struct ufile *u, const char *v, size_t namelen, int limit, char *err,
                      size_t errlen)
{
    struct urec *r = ufile_rec(u, v, namelen);
    char *copy = strdup(v);
    if (!r || !copy) {
        free(copy);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    char **slot = limit ? &r->limit : &r->secret;
    free(*slot);
    *slot = copy;
    return 0;
}

static int keep_secret(void *conf, const char *v, char *err, size_t errlen)
{
    return ufile_keep(conf, v, strcspn(v, ":"), 0, err, errlen);
}

static int keep_limit(void *conf, const char *v, char *err, size_t errlen)
{
    return ufile_keep(conf, v, strcspn(v, " \t"), 1, err, errlen);
}

static const struct config_option ufile_keys[] = {
    {.name = "secret", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .parse = keep_secret},
    {.name = "limit", .type = CFG_CUSTOM, .flags = CFG_REPEAT, .parse = keep_limit},
};

/* Checks users-file text with the reload's own parser. Returns 0, or -1 with the first error
 * in err and the key of the line it is on in key ("" if none). */
static int ufile_check(const char *path, const char *text, size_t len, char *err, size_t errlen,
                       char *key, size_t keylen)
{
    struct options *o = calloc(1, sizeof *o);
    struct config_errors *e = calloc(1, sizeof *e);
    int rc = -1;
    key[0] = 0;
    if (!o || !e) {
        snprintf(err, errlen, "out of memory");
    } else if (options_load_users(o, path, text, len, e) == 0) {
        rc = 0;
    } else {
        snprintf(err, errlen, "%s", e->msg[0]);
        /* PATH:LINE: ...: the key of that line of text */
        const char *c = e->msg[0] + strlen(path);
        int line = *c == ':' ? atoi(c + 1) : 0;
        const char *l = text;
        for (int i = 1; l && i < line; i++)
            if ((l = memchr(l, '\n', len - (size_t)(l - text))))
                l++;
        if (l && line > 0)
            snprintf(key, keylen, "%.*s", (int)strcspn(l, " =\n"), l);
    }
    options_free(o);
    free(o);
    free(e);
    return rc;
}

/* Reads path into u (a missing file is empty). Returns 0, or -1 with err (unreadable, or
 * lines that do not parse: the operator's hand edit must be fixed first). */
static int ufile_load(struct ufile *u, const char *path, char *err, size_t errlen)
{
    memset(u, 0, sizeof *u);
    FILE *f = fopen(path, "re");
    if (!f && errno != ENOENT) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    if (f) {
        struct sbuf b = {.max = CONFIG_FILE_MAX};
        char chunk[8192];
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
            sbuf_add(&b, chunk, n);
        int bad = ferror(f) || b.failed;
        fclose(f);
        if (bad) {
            sbuf_free(&b);
            snprintf(err, errlen, "%s: cannot read (or larger than %d bytes)", path,
                     CONFIG_FILE_MAX);
            return -1;
        }
        u->text = b.p ? b.p : strdup("");
        u->len = b.len;
    }
    char key[32];
    if (u->text && ufile_check(path, u->text, u->len, err, errlen, key, sizeof key))
        return -1;
    struct config_parser *p = malloc(sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    config_init(p, ufile_keys, 2, u);
    int bad = u->text && config_load_buffer(p, path, u->text, u->len);
    if (bad)
        snprintf(err, errlen, "%s", p->errors.msg[0]);
    free(p);
    return bad ? -1 : 0;
}

/* users-file's text for u. */
static int ufile_render(const struct ufile *u, struct sbuf *b)
{
    sbuf_printf(b, "# mtproxy users-file: secret and limit lines, rewritten by the management "
                   "API (comments are not kept). Keep it private.\n");
    for (int i = 0; i < u->n; i++) {
        if (u->r[i].secret)
            sbuf_printf(b, "secret = %s\n", u->r[i].secret);
        if (u->r[i].limit)
            sbuf_printf(b, "limit = %s\n", u->r[i].limit);
    }
    return b->failed ? -1 : 0;
}

/* --- applying a change ---------------------------------------------------------------- */

/* Raises SIGHUP and waits for the reload that starts after now. Returns 0 (accepted), -1
 * (refused: err), -2 (no answer in time). */
static int reload_now(struct api *a, char *err, size_t errlen)
{
    unsigned long b0 = atomic_load(&a->rl->begun);
    if (kill(getpid(), SIGHUP)) {
        snprintf(err, errlen, "cannot signal the reload: %s", strerror(errno));
        return -1;
    }
    struct timespec t0, now, nap = {0, 1000000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (atomic_load(&a->rl->done) < b0 + 1) {
        nanosleep(&nap, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9 >
            API_RELOAD_WAIT) {
            snprintf(err, errlen, "the reload did not finish in %.0f s", API_RELOAD_WAIT);
            return -2;
        }
    }
    if (!atomic_load(&a->rl->ok)) {
        snprintf(err, errlen, "%s", a->rl->err[0] ? a->rl->err : "configuration rejected");
        return -1;
    }
    return 0;
}

/* Drops the NAME.prev users (keep_previous) whose grace has passed. */
static void ufile_prune(struct ufile *u)
{
    time_t now = time(NULL);
    for (int i = 0; i < u->n; i++) {
        size_t n = strlen(u->r[i].name);
        struct user_limit l;
        char err[CONFIG_ERR_LEN];
        if (n < 6 || strcmp(u->r[i].name + n - 5, ".prev") || !u->r[i].limit ||
            users_limit_parse(u->r[i].limit, &l, err, sizeof err) || !l.expires ||
            l.expires > (int64_t)now)
            continue;
        free(u->r[i].secret);
        free(u->r[i].limit);
        u->r[i--] = u->r[--u->n];
    }
}

/* Checks u's text, writes it to path and reloads; on a refused reload the old text goes
 * back. Returns 0, or the HTTP status of the error written to o. */
static int ufile_commit(struct api *a, const char *path, struct ufile *u, struct sbuf *o)
{
    struct sbuf b = {.max = CONFIG_FILE_MAX};
    char err[CONFIG_ERR_LEN], key[32];
    int code = 0;
    ufile_prune(u);
    if (ufile_render(u, &b)) {
        code = fail(o, 500, NULL, "users-file would be larger than %d bytes", CONFIG_FILE_MAX);
    } else if (ufile_check(path, b.p, b.len, err, sizeof err, key, sizeof key)) {
        code = fail(o, 400, !strcmp(key, "limit") ? "limits" : key[0] ? key : NULL, "%s", err);
    } else if (fs_write_atomic(path, b.p, b.len, 0600, (uid_t)-1, err, sizeof err)) {
        code = fail(o, 500, NULL, "cannot write users-file (nothing changed): %s", err);
    } else {
        int rc = reload_now(a, err, sizeof err);
        if (rc == -1) {
            char e2[CONFIG_ERR_LEN] = "";
            if (u->text ? fs_write_atomic(path, u->text, u->len, 0600, (uid_t)-1, e2, sizeof e2)
                        : unlink(path))
                code = fail(o, 500, NULL, "the reload refused users-file (%s), and the old "
                            "one could not be put back: %s", err, e2);
            else
                code = fail(o, 400, NULL, "the reload refused the change (nothing changed): %s",
                            err);
        } else if (rc == -2) {
            code = fail(o, 504, NULL, "users-file is written but %s", err);
        }
    }
    sbuf_free(&b);
    return code;
}

/* --- users as JSON -------------------------------------------------------------------- */

static const char *kind_name(enum secret_kind k)
{
    return k == SECRET_EE ? "ee" : k == SECRET_DD ? "dd" : "plain";
}

static void num_or_null(struct sbuf *o, const char *key, unsigned long long v, int comma)
{
    if (v)
        sbuf_printf(o, "%s\"%s\":%llu", comma ? "," : "", key, v);
    else
        sbuf_printf(o, "%s\"%s\":null", comma ? "," : "", key);
}

/* User i of g; its users-file record (NULL: from the config); with qr the QR code too. */
static void user_json(struct sbuf *o, const struct gen *g, int i, const struct urec *rec, int qr)
{
    const struct options *opt = &g->opt;
    const struct secret *s = &opt->secrets[i];
    char hex[SECRET_HEX_MAX];
    secret_to_hex(s, hex, sizeof hex);
    sbuf_printf(o, "{\"name\":");
    jstr(o, s->name);
    sbuf_printf(o, ",\"kind\":\"%s\"", kind_name(s->kind));
    if (s->kind == SECRET_EE) {
        sbuf_printf(o, ",\"domain\":");
        jstr(o, s->domain);
    }
    sbuf_printf(o, ",\"secret\":\"%s\",\"source\":\"%s\",\"limits\":{", hex,
                rec ? "users-file" : "config");
    const struct user_limit *l = g->lim ? g->lim[i] : NULL;
    num_or_null(o, "conns", l ? l->conns : 0, 0);
    num_or_null(o, "ips", l ? l->ips : 0, 1);
    num_or_null(o, "quota", l ? l->quota : 0, 1);
    num_or_null(o, "expires", l && l->expires > 0 ? (unsigned long long)l->expires : 0, 1);
    num_or_null(o, "rate", l ? l->rate : 0, 1);
    sbuf_printf(o, "},\"limit_line\":");
    if (rec && rec->limit)
        jstr(o, rec->limit);
    else
        sbuf_printf(o, "null");
    struct user_totals t = {0};
    if (g->users && g->uid)
        users_stats_sum(g->users, g->uid[i], &t);
    sbuf_printf(o, ",\"usage\":{\"bytes_up\":%llu,\"bytes_down\":%llu,\"active\":%llu,"
                   "\"connections\":%llu,\"quota_used\":%llu}",
                (unsigned long long)t.bytes_up, (unsigned long long)t.bytes_down,
                (unsigned long long)t.active, (unsigned long long)t.conns,
                (unsigned long long)t.quota_used);
    char host[256], tg[1024], https[1024];
    int port = options_link_host(opt, host, sizeof host);
    port = prefix_link_host(opt, i, host, sizeof host, port);
    if (!secret_links(s, host, port, tg, sizeof tg, https, sizeof https)) {
        sbuf_printf(o, ",\"links\":{\"tg\":");
        jstr(o, tg);
        sbuf_printf(o, ",\"https\":");
        jstr(o, https);
        sbuf_printf(o, "}");
        struct sbuf svg = {.max = 1 << 20};
        if (qr && !qr_svg(https, 4, &svg) && svg.p) {
            sbuf_printf(o, ",\"qr_svg\":");
            jstr(o, svg.p);
        }
        sbuf_free(&svg);
    }
    sbuf_printf(o, "}");
}

static int user_answer(struct api *a, const char *name, int code, int qr, struct sbuf *o)
{
    const struct gen *g = a->current(a->arg);
    int i = options_find_secret(&g->opt, name);
    if (i < 0)
        return fail(o, 404, NULL, "no user '%s'", name);
    struct ufile u;
    char err[CONFIG_ERR_LEN];
    int have = g->opt.users_file[0] && !ufile_load(&u, g->opt.users_file, err, sizeof err);
    int r = have ? ufile_find(&u, name) : -1;
    o->len = 0;
    user_json(o, g, i, r >= 0 && u.r[r].secret ? &u.r[r] : NULL, qr);
    sbuf_printf(o, "\n");
    if (have)
        ufile_free(&u);
    return code;
}

static int users_list(struct api *a, struct sbuf *o)
{
    const struct gen *g = a->current(a->arg);
    struct ufile u;
    char err[CONFIG_ERR_LEN];
    int have = g->opt.users_file[0] && !ufile_load(&u, g->opt.users_file, err, sizeof err);
    sbuf_printf(o, "{\"generation\":%llu,\"users\":[", (unsigned long long)g->serial);
    for (int i = 0; i < g->opt.nsecrets; i++) {
        int r = have ? ufile_find(&u, g->opt.secrets[i].name) : -1;
        if (i)
            sbuf_printf(o, ",");
        user_json(o, g, i, r >= 0 && u.r[r].secret ? &u.r[r] : NULL, 0);
    }
    sbuf_printf(o, "]}\n");
    if (have)
        ufile_free(&u);
    return 200;
}

/* --- request fields ------------------------------------------------------------------- */

/* A string field: 1 and its value, 0 if absent, -1 (error written) if of another type. */
static int field_str(const struct json_obj *j, const char *key, const char **v, struct sbuf *o,
                     int *code)
{
    const struct json_field *f = json_get(j, NULL, key);
    if (!f)
        return 0;
    if (f->type != JSON_STRING) {
        *code = fail(o, 400, key, "%s must be a string", key);
        return -1;
    }
    *v = f->val;
    return 1;
}

/* 1 if s holds only characters a config value may carry inside a limit field. */
static int plain_word(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s <= ' ' || *s >= 0x7f || strchr("=#\"'\\", *s))
            return 0;
    return 1;
}

/* The limit line for name: the fields of old (a limit line's value, or NULL) with those of
 * the request's "limits" object lim changed (null removes one). Each field is checked alone
 * by the limit parser (error: field limits.KEY). Writes "" if no field is left. Returns 0,
 * or the HTTP status of the error written to o. */
static int limit_line(const char *name, const char *old, const struct json_obj *j,
                      const struct json_field *lim, char *out, size_t cap, struct sbuf *o)
{
    char keys[16][32], vals[16][96];
    int n = 0;
    if (old) { /* NAME k=v k=v */
        const char *p = old + strcspn(old, " \t");
        while (*p) {
            p += strspn(p, " \t");
            size_t w = strcspn(p, " \t"), eq = strcspn(p, "=");
            if (!w)
                break;
            if (eq < w && n < 16) {
                snprintf(keys[n], sizeof keys[n], "%.*s", (int)eq, p);
                snprintf(vals[n], sizeof vals[n], "%.*s", (int)(w - eq - 1), p + eq + 1);
                n++;
            }
            p += w;
        }
    }
    int li = lim ? (int)(lim - j->f) : -2;
    for (int k = 0; lim && k < j->n; k++) {
        const struct json_field *f = &j->f[k];
        if (f->parent != li)
            continue;
        char field[64], v[96];
        snprintf(field, sizeof field, "limits.%s", f->key);
        if (!plain_word(f->key) || strlen(f->key) >= sizeof keys[0])
            return fail(o, 400, field, "unknown limit '%s'", f->key);
        if (f->type == JSON_NUMBER && !strcmp(f->key, "expires")) {
            time_t t = (time_t)strtoll(f->val, NULL, 10);
            struct tm tm;
            if (f->val[0] == '-' || strchr(f->val, '.') || !gmtime_r(&t, &tm))
                return fail(o, 400, field, "expires must be a unix time or YYYY-MM-DD");
            strftime(v, sizeof v, "%Y-%m-%dT%H:%M:%SZ", &tm);
        } else if (f->type != JSON_NULL && strlen(f->val) > 80) {
            return fail(o, 400, field, "%s is too long", field);
        } else if (f->type == JSON_NUMBER) {
            snprintf(v, sizeof v, "%.80s%s", f->val, !strcmp(f->key, "rate") ? "/s" : "");
        } else if (f->type == JSON_STRING && plain_word(f->val)) {
            snprintf(v, sizeof v, "%.80s", f->val);
        } else if (f->type != JSON_NULL) {
            return fail(o, 400, field, "%s must be a number, a string without blanks or null",
                        field);
        }
        int at = 0;
        while (at < n && strcmp(keys[at], f->key))
            at++;
        if (f->type == JSON_NULL) {
            if (at < n) {
                memmove(keys[at], keys[at + 1], (size_t)(n - at - 1) * sizeof keys[0]);
                memmove(vals[at], vals[at + 1], (size_t)(n - at - 1) * sizeof vals[0]);
                n--;
            }
            continue;
        }
        char one[256], err[CONFIG_ERR_LEN];
        struct user_limit ul;
        snprintf(one, sizeof one, "%s %s=%s", name, f->key, v);
        if (users_limit_parse(one, &ul, err, sizeof err))
            return fail(o, 400, field, "%s", err);
        if (at == n && n == 16)
            return fail(o, 400, field, "too many limits");
        snprintf(keys[at], sizeof keys[at], "%s", f->key);
        snprintf(vals[at], sizeof vals[at], "%s", v);
        if (at == n)
            n++;
    }
    size_t len = 0;
    out[0] = 0;
    for (int k = 0; k < n; k++)
        len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%s %s=%s",
                                k ? "" : name, "", keys[k], vals[k]);
    if (len >= cap)
        return fail(o, 400, "limits", "limit line too long");
    return 0;
}

/* Fields other than those allowed (a NULL-terminated list) are refused by name. */
static int only_fields(const struct json_obj *j, const char *const *allowed, struct sbuf *o)
{
    for (int k = 0; k < j->n; k++) {
        if (j->f[k].parent != -1)
            continue;
        int ok = 0;
        for (int i = 0; allowed[i]; i++)
            ok |= !strcmp(allowed[i], j->f[k].key);
        if (!ok)
            return fail(o, 400, j->f[k].key, "unknown field '%s'", j->f[k].key);
    }
    return 0;
}

static int parse_body(const char *body, size_t blen, struct json_obj *j, struct sbuf *o)
{
    char err[128];
    if (!blen)
        return fail(o, 400, NULL, "a JSON object is needed in the request body");
    if (json_parse_object(body, blen, j, err, sizeof err))
        return fail(o, 400, NULL, "malformed JSON: %s", err);
    const struct json_field *l = json_get(j, NULL, "limits");
    if (l && l->type != JSON_OBJECT && l->type != JSON_NULL)
        return fail(o, 400, "limits", "limits must be an object");
    return 0;
}

/* The key of a new secret: 32 hex digits given, or drawn. */
static int secret_key_hex(const char *given, char out[2 * SECRET_KEY_LEN + 1], struct sbuf *o)
{
    if (given) {
        if (strlen(given) != 2 * SECRET_KEY_LEN ||
            strspn(given, "0123456789abcdefABCDEF") != 2 * SECRET_KEY_LEN)
            return fail(o, 400, "secret", "secret must be 32 hex digits (the key; the kind "
                        "and domain are given apart)");
        memcpy(out, given, 2 * SECRET_KEY_LEN + 1);
        return 0;
    }
    uint8_t k[SECRET_KEY_LEN];
    if (crypto_random(k, sizeof k))
        return fail(o, 500, NULL, "no random source");
    for (int i = 0; i < SECRET_KEY_LEN; i++)
        snprintf(out + 2 * i, 3, "%02x", k[i]);
    return 0;
}

/* "NAME:SECRET" for kind and domain, checked by the config's secret parser. */
static int secret_text(const char *name, const char *kind, const char *domain, const char *key,
                       char *out, size_t cap, struct sbuf *o)
{
    char dhex[2 * SECRET_DOMAIN_MAX + 1] = "";
    const char *pre;
    if (!strcmp(kind, "plain")) {
        pre = "";
    } else if (!strcmp(kind, "dd")) {
        pre = "dd";
    } else if (!strcmp(kind, "ee")) {
        pre = "ee";
        if (!domain || !*domain || strlen(domain) > SECRET_DOMAIN_MAX)
            return fail(o, 400, "domain", "kind ee needs a domain of 1 to %d characters",
                        SECRET_DOMAIN_MAX);
        for (size_t i = 0; domain[i]; i++)
            snprintf(dhex + 2 * i, 3, "%02x", (unsigned char)domain[i]);
    } else {
        return fail(o, 400, "kind", "kind must be plain, dd or ee");
    }
    if (domain && strcmp(kind, "ee"))
        return fail(o, 400, "domain", "domain is for kind ee only");
    snprintf(out, cap, "%s:%s%s%s", name, pre, key, dhex);
    struct secret s;
    char err[CONFIG_ERR_LEN];
    if (secret_parse_named(out, &s, err, sizeof err))
        return fail(o, 400, strstr(err, "name") ? "name" : *dhex ? "domain" : "secret", "%s",
                    err);
    if (options_documented_secret(&s))
        return fail(o, 400, "secret", "this key is shown in mtproxy's documentation: pick another");
    return 0;
}

/* Sets r's limit line's value to lim ("": none). Returns 0, or -1 (out of memory). */
static int rec_limit(struct urec *r, const char *lim)
{
    free(r->limit);
    r->limit = lim[0] ? strdup(lim) : NULL;
    return lim[0] && !r->limit ? -1 : 0;
}

/* --- the calls ------------------------------------------------------------------------ */

/* users-file of g, or 409 written. */
static const char *users_file(const struct gen *g, struct sbuf *o, int *code)
{
    if (g->opt.users_file[0])
        return g->opt.users_file;
    *code = fail(o, 409, NULL, "no users-file is configured: add `users-file = PATH` to the "
                 "config (and reload) before changing users through the API");
    return NULL;
}

static int user_create(struct api *a, const char *body, size_t blen, struct sbuf *o)
{
    static const char *const allowed[] = {"name", "kind", "domain", "secret", "limits", NULL};
    struct json_obj *j = malloc(sizeof *j);
    struct ufile u = {0};
    char st[SECRET_NAME_MAX + SECRET_HEX_MAX + 2], lim[1024];
    const char *name = NULL, *kind = "plain", *domain = NULL, *given = NULL;
    int code = 0;
    const struct gen *g = a->current(a->arg);
    const char *path = users_file(g, o, &code);
    char key[2 * SECRET_KEY_LEN + 1], err[CONFIG_ERR_LEN];
    if (!j)
        code = fail(o, 500, NULL, "out of memory");
    if (code || (code = parse_body(body, blen, j, o)) || (code = only_fields(j, allowed, o)))
        goto out;
    if (field_str(j, "name", &name, o, &code) < 0 || field_str(j, "kind", &kind, o, &code) < 0 ||
        field_str(j, "domain", &domain, o, &code) < 0 ||
        field_str(j, "secret", &given, o, &code) < 0)
        goto out;
    if (!name) {
        code = fail(o, 400, "name", "name is required");
        goto out;
    }
    if (strlen(name) > 5 && !strcmp(name + strlen(name) - 5, ".prev")) {
        code = fail(o, 400, "name", "names ending in .prev are kept for the previous secret "
                    "of a user rotated with a grace");
        goto out;
    }
    if ((code = secret_key_hex(given, key, o)) ||
        (code = secret_text(name, kind, domain, key, st, sizeof st, o)) ||
        (code = limit_line(name, NULL, j, json_get(j, NULL, "limits"), lim, sizeof lim, o)))
        goto out;
    if (ufile_load(&u, path, err, sizeof err)) {
        code = fail(o, 409, NULL, "users-file must be fixed first: %s", err);
        goto out;
    }
    int r = ufile_find(&u, name);
    if ((r >= 0 && u.r[r].secret) || options_find_secret(&g->opt, name) >= 0) {
        code = fail(o, 409, "name", "a user named '%s' exists already%s", name,
                    r >= 0 && u.r[r].secret ? "" : " (in the config file)");
        goto out;
    }
    struct urec *rec = ufile_rec(&u, name, strlen(name));
    if (!rec || !(rec->secret = strdup(st)) || rec_limit(rec, lim)) {
        code = fail(o, 500, NULL, "out of memory");
        goto out;
    }
    if (!(code = ufile_commit(a, path, &u, o)))
        code = user_answer(a, name, 201, 1, o);
out:
    ufile_free(&u);
    free(j);
    return code;
}

/* Loads users-file and finds name's record with a secret line; else the error is written
 * (404, or 409 for a user of the config file). */
static int user_of_file(const struct gen *g, const char *path, const char *name,
                        struct ufile *u, int *r, struct sbuf *o)
{
    char err[CONFIG_ERR_LEN];
    if (ufile_load(u, path, err, sizeof err))
        return fail(o, 409, NULL, "users-file must be fixed first: %s", err);
    *r = ufile_find(u, name);
    if (*r >= 0 && u->r[*r].secret)
        return 0;
    if (options_find_secret(&g->opt, name) >= 0)
        return fail(o, 409, NULL, "user '%s' is in the config file, not in users-file: change "
                    "it there", name);
    return fail(o, 404, NULL, "no user '%s'", name);
}

static int user_patch(struct api *a, const char *name, const char *body, size_t blen,
                      struct sbuf *o)
{
    static const char *const allowed[] = {"limits", NULL};
    struct json_obj *j = malloc(sizeof *j);
    struct ufile u = {0};
    char lim[1024];
    int code = 0, r;
    const struct gen *g = a->current(a->arg);
    const char *path = users_file(g, o, &code);
    if (!j)
        code = fail(o, 500, NULL, "out of memory");
    if (code || (code = parse_body(body, blen, j, o)) || (code = only_fields(j, allowed, o)) ||
        (code = user_of_file(g, path, name, &u, &r, o)))
        goto out;
    const struct json_field *l = json_get(j, NULL, "limits");
    if ((code = limit_line(name, u.r[r].limit, j, l && l->type == JSON_OBJECT ? l : NULL, lim,
                           sizeof lim, o)))
        goto out;
    if (rec_limit(&u.r[r], lim)) {
        code = fail(o, 500, NULL, "out of memory");
        goto out;
    }
    if (!(code = ufile_commit(a, path, &u, o)))
        code = user_answer(a, name, 200, 0, o);
out:
    ufile_free(&u);
    free(j);
    return code;
}

static int user_delete(struct api *a, const char *name, struct sbuf *o)
{
    struct ufile u = {0};
    int code = 0, r;
    const struct gen *g = a->current(a->arg);
    const char *path = users_file(g, o, &code);
    if (code || (code = user_of_file(g, path, name, &u, &r, o)))
        goto out;
    char prev[SECRET_NAME_MAX + 8];
    snprintf(prev, sizeof prev, "%s.prev", name);
    for (int k = 0; k < 2; k++) { /* the user, and its previous secret still in its grace */
        if ((r = ufile_find(&u, k ? prev : name)) < 0)
            continue;
        free(u.r[r].secret);
        free(u.r[r].limit);
        u.r[r] = u.r[--u.n];
    }
    if (!(code = ufile_commit(a, path, &u, o))) {
        o->len = 0;
        sbuf_printf(o, "{\"deleted\":");
        jstr(o, name);
        sbuf_printf(o, ",\"generation\":%llu}\n",
                    (unsigned long long)a->current(a->arg)->serial);
        code = 200;
    }
out:
    ufile_free(&u);
    return code;
}

/* The previous secret of name, kept for grace seconds after a rotation: user NAME.prev (its
 * own counters) with a limit line expires=now+grace, which the proxy enforces by itself (no
 * timer; the line is dropped by a later change once past, see ufile_prune). Returns 0, or the
 * HTTP status of the error written to o. */
static int keep_previous(const struct gen *g, struct ufile *u, const char *name,
                         const struct secret *old, long long grace, struct sbuf *o)
{
    char prev[SECRET_NAME_MAX + 8], hex[SECRET_HEX_MAX], st[sizeof prev + SECRET_HEX_MAX + 2],
        lim[sizeof prev + 64];
    snprintf(prev, sizeof prev, "%s.prev", name);
    if (strlen(prev) >= SECRET_NAME_MAX)
        return fail(o, 400, "grace_seconds", "a grace needs the name NAME.prev for the old "
                    "secret, and '%s' is too long for that", prev);
    int r = ufile_find(u, prev);
    if ((r < 0 || !u->r[r].secret) && options_find_secret(&g->opt, prev) >= 0)
        return fail(o, 409, "grace_seconds", "a grace needs the name '%s' for the old secret, "
                    "and a user of the config file has it", prev);
    time_t until = time(NULL) + (time_t)grace;
    struct tm tm;
    char when[32];
    gmtime_r(&until, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    secret_to_hex(old, hex, sizeof hex);
    snprintf(st, sizeof st, "%s:%s", prev, hex);
    snprintf(lim, sizeof lim, "%s expires=%s", prev, when);
    struct urec *rec = ufile_rec(u, prev, strlen(prev));
    char *sc = strdup(st);
    if (!rec || !sc || rec_limit(rec, lim)) {
        free(sc);
        return fail(o, 500, NULL, "out of memory");
    }
    free(rec->secret);
    rec->secret = sc;
    return 0;
}

static int user_rotate(struct api *a, const char *name, const char *body, size_t blen,
                       struct sbuf *o)
{
    static const char *const allowed[] = {"grace_seconds", NULL};
    struct json_obj *j = calloc(1, sizeof *j);
    struct ufile u = {0};
    int code = 0, r;
    const struct gen *g = a->current(a->arg);
    const char *path = users_file(g, o, &code);
    if (!j)
        code = fail(o, 500, NULL, "out of memory");
    if (code || (blen && ((code = parse_body(body, blen, j, o)) ||
                          (code = only_fields(j, allowed, o)))))
        goto out;
    const struct json_field *gr = json_get(j, NULL, "grace_seconds");
    long long grace = 0;
    if (gr && gr->type != JSON_NULL) {
        char *end;
        grace = gr->type == JSON_NUMBER ? strtoll(gr->val, &end, 10) : -1;
        if (grace < 0 || grace > 30 * 86400 || (gr->type == JSON_NUMBER && *end)) {
            code = fail(o, 400, "grace_seconds", "grace_seconds must be a whole number of "
                        "seconds from 0 to 2592000 (30 days)");
            goto out;
        }
    }
    if ((code = user_of_file(g, path, name, &u, &r, o)))
        goto out;
    struct secret s;
    char err[CONFIG_ERR_LEN], hex[SECRET_HEX_MAX], st[SECRET_NAME_MAX + SECRET_HEX_MAX + 2];
    if (secret_parse_named(u.r[r].secret, &s, err, sizeof err)) {
        code = fail(o, 409, NULL, "users-file: %s", err);
        goto out;
    }
    if (grace && (code = keep_previous(g, &u, name, &s, grace, o)))
        goto out;
    r = ufile_find(&u, name); /* keep_previous may have moved the records */
    if (crypto_random(s.key, sizeof s.key)) {
        code = fail(o, 500, NULL, "no random source");
        goto out;
    }
    secret_to_hex(&s, hex, sizeof hex);
    snprintf(st, sizeof st, "%s:%s", name, hex);
    char *copy = strdup(st);
    if (!copy) {
        code = fail(o, 500, NULL, "out of memory");
        goto out;
    }
    free(u.r[r].secret);
    u.r[r].secret = copy;
    if (!(code = ufile_commit(a, path, &u, o)))
        code = user_answer(a, name, 200, 1, o);
out:
    ufile_free(&u);
    free(j);
    return code;
}

static int do_reload(struct api *a, struct sbuf *o)
{
    char err[CONFIG_ERR_LEN];
    int rc = reload_now(a, err, sizeof err);
    if (rc)
        return fail(o, rc == -2 ? 504 : 400, NULL, "%s", err);
    sbuf_printf(o, "{\"generation\":%llu}\n", (unsigned long long)a->current(a->arg)->serial);
    return 200;
}

static int health(struct api *a, struct sbuf *o)
{
    const struct gen *g = a->current(a->arg);
    sbuf_printf(o, "{\"status\":\"ok\",\"version\":\"%s\",\"generation\":%llu,\"users\":%d,"
                   "\"users_file\":",
                MTPROXY_VERSION, (unsigned long long)g->serial, g->opt.nsecrets);
    if (g->opt.users_file[0])
        jstr(o, g->opt.users_file);
    else
        sbuf_printf(o, "null");
    sbuf_printf(o, ",\"qr\":%s}\n", qr_available() ? "true" : "false");
    return 200;
}

static int method_not_allowed(struct sbuf *o, const char *allow)
{
    return fail(o, 405, NULL, "method not allowed here (allowed: %s)", allow);
}

/* Routes an authorised request; the caller holds the lock. */
static int route(struct api *a, const struct http_request *rq, const char *body, size_t blen,
                 struct sbuf *o)
{
    const char *p = rq->path;
    enum http_method m = rq->method;
    int get = m == HTTP_GET || m == HTTP_HEAD;
    if (strncmp(p, "/api/v1/", 8))
        return fail(o, 404, NULL, "not found: the API is under /api/v1/");
    p += 8;
    if (!strcmp(p, "health"))
        return get ? health(a, o) : method_not_allowed(o, "GET");
    if (!strcmp(p, "reload"))
        return m == HTTP_POST ? do_reload(a, o) : method_not_allowed(o, "POST");
    if (!strcmp(p, "users"))
        return get ? users_list(a, o)
               : m == HTTP_POST ? user_create(a, body, blen, o)
                                : method_not_allowed(o, "GET, POST");
    if (strncmp(p, "users/", 6))
        return fail(o, 404, NULL, "not found");
    p += 6;
    char name[SECRET_NAME_MAX];
    size_t n = strcspn(p, "/");
    if (!n || n >= sizeof name)
        return fail(o, 404, NULL, "no such user");
    memcpy(name, p, n);
    name[n] = 0;
    p += n;
    if (!strcmp(p, "/rotate"))
        return m == HTTP_POST ? user_rotate(a, name, body, blen, o)
                              : method_not_allowed(o, "POST");
    if (*p)
        return fail(o, 404, NULL, "not found");
    if (get)
        return user_answer(a, name, 200, 1, o);
    if (m == HTTP_PATCH)
        return user_patch(a, name, body, blen, o);
    if (m == HTTP_DELETE)
        return user_delete(a, name, o);
    return method_not_allowed(o, "GET, PATCH, DELETE");
}

int api_serve(struct api *a, const struct http_request *rq, const char *body, size_t blen,
              struct sbuf *out)
{
    const struct gen *g = a->current(a->arg);
    const char *token = g->opt.api_token;
    if (!token[0] || !rq->has_bearer || !http_token_equal(rq->bearer, token))
        return fail(out, 401, NULL, "a token is needed: Authorization: Bearer API-TOKEN");
    pthread_mutex_lock(&a->lock);
    int code = route(a, rq, body, blen, out);
    pthread_mutex_unlock(&a->lock);
    return code;
}
