/* api.c: the management API: JSON under /api/v1, changes written to users-file and applied by the reload path (see api.h). */
#include "admin/api.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "crypto/crypto.h"
#include "proto/json.h"
#include "proto/secret.h"
#include "config/lstore.h"
#include "admin/metrics.h"
#include "config/options.h"
#include "config/prefix.h"
#include "admin/qr.h"
#include "config/reload.h"
#include "users/users.h"
#include "admin/usersfile.h"

struct api {
    pthread_mutex_t lock; /* one change (write + reload) at a time */
    struct api_reloads *rl;
    api_gen_fn current;
    api_reload_fn reload; /* offline (`mtproxy user` with the daemon stopped): the rebuild */
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

void api_state_saved(struct api_reloads *rl, int ok)
{
    atomic_store(&rl->save_ok, ok);
    atomic_fetch_add(&rl->saved, 1);
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

struct api *api_new_offline(api_gen_fn current, api_reload_fn reload, void *arg)
{
    struct api *a = api_new(NULL, current, arg);
    if (a)
        a->reload = reload;
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

void api_json_str(struct sbuf *o, const char *s)
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
    api_json_str(o, msg);
    sbuf_printf(o, ",\"field\":");
    if (field)
        api_json_str(o, field);
    else
        sbuf_printf(o, "null");
    sbuf_printf(o, "}\n");
    return code;
}

/* --- applying a change ---------------------------------------------------------------- */

/* Raises sig in this process (main takes it) and waits until *count (main's tally of what
 * sig asks) reaches target. Returns 0, -1 (not raised: err) or -2 (no answer within
 * API_RELOAD_WAIT: err says "WHAT did not finish"). */
static int raise_and_wait(int sig, _Atomic unsigned long *count, unsigned long target,
                          const char *what, char *err, size_t errlen)
{
    if (kill(getpid(), sig)) {
        snprintf(err, errlen, "cannot signal the %s: %s", what, strerror(errno));
        return -1;
    }
    struct timespec t0, now, nap = {0, 1000000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (atomic_load(count) < target) {
        nanosleep(&nap, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9 >
            API_RELOAD_WAIT) {
            snprintf(err, errlen, "the %s did not finish in %.0f s", what, API_RELOAD_WAIT);
            return -2;
        }
    }
    return 0;
}

/* Raises SIGHUP and waits for the reload that starts after now. Returns 0 (accepted), -1
 * (refused: err), -2 (no answer in time). */
static int reload_now(struct api *a, char *err, size_t errlen)
{
    if (a->reload)
        return a->reload(a->arg, err, errlen) ? -1 : 0;
    /* ours is the first to begin after now: done reaches begun + 1 when it has ended */
    int rc = raise_and_wait(SIGHUP, &a->rl->done, atomic_load(&a->rl->begun) + 1, "reload", err,
                            errlen);
    if (rc)
        return rc;
    if (!atomic_load(&a->rl->ok)) {
        snprintf(err, errlen, "%s", a->rl->err[0] ? a->rl->err : "configuration rejected");
        return -1;
    }
    return 0;
}

/* The running proxy's state file written now (SIGUSR2 to main, waited for), so that a usage
 * changed by the API survives a kill -9 right after the answer. Returns 0, or -1 with err. */
static int state_save_now(struct api *a, char *err, size_t errlen)
{
    if (raise_and_wait(SIGUSR2, &a->rl->saved, atomic_load(&a->rl->saved) + 1,
                       "state file save", err, errlen))
        return -1;
    if (!atomic_load(&a->rl->save_ok)) {
        snprintf(err, errlen, "the state file could not be written (the log says why)");
        return -1;
    }
    return 0;
}

/* User uid's (name's) quota usage starts over: here, in the fleet (limits-store) and in the
 * state file (offline: its line dropped; running: saved before the answer). Returns 0, or -1
 * with err. */
static int usage_forget(struct api *a, struct users *users, uint32_t uid, const char *name,
                        const char *state_file, int fleet, char *err, size_t errlen)
{
    users_quota_reset(users, uid);
    /* limits-store: every instance's share of the period stops counting (its next flush) */
    if (users->fleet && lstore_reset_quota(users->fleet, name)) {
        snprintf(err, errlen, "out of memory: the fleet's count of '%s' was not reset", name);
        return -1;
    }
    int found;
    if (a->reload) /* the daemon is stopped: its state file is the usage */
        return usersfile_state_drop_quota(state_file, name, fleet, &found, err, errlen);
    return state_save_now(a, err, errlen); /* on disk before the answer */
}

/* Writes u to path (usersfile_write) and reloads; on a refused reload the old text goes
 * back. Returns 0, or the HTTP status of the error written to o. */
static int ufile_commit(struct api *a, const char *path, struct usersfile *u, struct sbuf *o)
{
    char err[CONFIG_ERR_LEN], key[32];
    int code = 0;
    switch (usersfile_write(path, u, err, sizeof err, key, sizeof key)) {
    case 0:
        break;
    case USERSFILE_INVALID:
        return fail(o, 400, !strcmp(key, "limit") ? "limits" : key[0] ? key : NULL, "%s", err);
    case USERSFILE_TOO_BIG:
        return fail(o, 500, NULL, "%s", err);
    default:
        return fail(o, 500, NULL, "cannot write users-file (nothing changed): %s", err);
    }
    int rc = reload_now(a, err, sizeof err);
    if (rc == -1) {
        char e2[CONFIG_ERR_LEN] = "";
        if (usersfile_restore(path, u, e2, sizeof e2))
            code = fail(o, 500, NULL, "the reload refused users-file (%s), and the old "
                        "one could not be put back: %s", err, e2);
        else
            code = fail(o, 400, NULL, "the reload refused the change (nothing changed): %s", err);
    } else if (rc == -2) {
        code = fail(o, 504, NULL, "users-file is written but %s", err);
    }
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

/* "disabled", "expired", "quota" (used up) or "active": whether a new connection of the user
 * is served now (in that order of precedence, as users_admit checks). */
static const char *user_state(const struct user_limit *l, const struct user_totals *t)
{
    if (l && l->disabled)
        return "disabled";
    if (l && l->expires && time(NULL) >= (time_t)l->expires)
        return "expired";
    if (l && l->quota && t->quota_used >= l->quota)
        return "quota";
    return "active";
}

/* User i of g; its users-file record (NULL: from the config); with qr the QR code too. */
static void user_json(struct sbuf *o, const struct gen *g, int i, const struct usersfile_rec *rec,
                      int qr)
{
    const struct options *opt = &g->opt;
    const struct secret *s = &opt->secrets[i];
    char hex[SECRET_HEX_MAX];
    secret_to_hex(s, hex, sizeof hex);
    sbuf_printf(o, "{\"name\":");
    api_json_str(o, s->name);
    sbuf_printf(o, ",\"kind\":\"%s\"", kind_name(s->kind));
    if (s->kind == SECRET_EE) {
        sbuf_printf(o, ",\"domain\":");
        api_json_str(o, s->domain);
    }
    sbuf_printf(o, ",\"secret\":\"%s\",\"source\":\"%s\",\"limits\":{", hex,
                rec ? "users-file" : "config");
    const struct user_limit *l = g->lim ? g->lim[i] : NULL;
    num_or_null(o, "conns", l ? l->conns : 0, 0);
    num_or_null(o, "ips", l ? l->ips : 0, 1);
    num_or_null(o, "quota", l ? l->quota : 0, 1);
    num_or_null(o, "expires", l && l->expires > 0 ? (unsigned long long)l->expires : 0, 1);
    num_or_null(o, "rate", l ? l->rate : 0, 1);
    struct user_totals t = {0};
    if (g->users && g->uid)
        users_stats_sum(g->users, g->uid[i], &t);
    sbuf_printf(o, "},\"state\":\"%s\",\"limit_line\":", user_state(l, &t));
    if (rec && rec->limit)
        api_json_str(o, rec->limit);
    else
        sbuf_printf(o, "null");
    sbuf_printf(o, ",\"usage\":{\"bytes_up\":%llu,\"bytes_down\":%llu,\"active\":%llu,"
                   "\"connections\":%llu,\"quota_used\":%llu",
                (unsigned long long)t.bytes_up, (unsigned long long)t.bytes_down,
                (unsigned long long)t.active, (unsigned long long)t.conns,
                (unsigned long long)t.quota_used);
    /* what is left of the quota, and for a periodic one its period and next start (unix s) */
    if (l && l->quota) /* 0 when used up: a number, not null */
        sbuf_printf(o, ",\"quota_left\":%llu",
                    (unsigned long long)(l->quota > t.quota_used ? l->quota - t.quota_used : 0));
    else
        sbuf_printf(o, ",\"quota_left\":null");
    const char *period = l && l->quota && l->quota_period ? users_period_name(l->quota_period)
                                                          : NULL;
    int64_t next = 0;
    if (period)
        users_period_start(l->quota_period, l->quota_day, (int64_t)time(NULL), &next);
    sbuf_printf(o, ",\"quota_period\":");
    if (period)
        api_json_str(o, period);
    else
        sbuf_printf(o, "null");
    num_or_null(o, "quota_reset", (unsigned long long)next, 1);
    sbuf_printf(o, "}");
    char host[256], tg[1024], https[1024];
    int port = options_link_host(opt, host, sizeof host);
    port = prefix_link_host(opt, i, host, sizeof host, port);
    if (!secret_links(s, host, port, tg, sizeof tg, https, sizeof https)) {
        sbuf_printf(o, ",\"links\":{\"tg\":");
        api_json_str(o, tg);
        sbuf_printf(o, ",\"https\":");
        api_json_str(o, https);
        char wtg[1024], whttps[1024];
        if (opt->web_on && /* plain and dd users: WEB proxy links too (docs/web.md) */
            !secret_web_links(s, opt->web_host, wtg, sizeof wtg, whttps, sizeof whttps)) {
            sbuf_printf(o, ",\"web_tg\":");
            api_json_str(o, wtg);
            sbuf_printf(o, ",\"web_https\":");
            api_json_str(o, whttps);
        }
        sbuf_printf(o, "}");
        struct sbuf svg = {.max = 1 << 20};
        if (qr && !qr_svg(https, 4, &svg) && svg.p) {
            sbuf_printf(o, ",\"qr_svg\":");
            api_json_str(o, svg.p);
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
    struct usersfile u;
    char err[CONFIG_ERR_LEN];
    int have = g->opt.users_file[0] && !usersfile_load(&u, g->opt.users_file, err, sizeof err);
    int r = have ? usersfile_find(&u, name) : -1;
    o->len = 0;
    user_json(o, g, i, r >= 0 && u.r[r].secret ? &u.r[r] : NULL, qr);
    sbuf_printf(o, "\n");
    if (have)
        usersfile_free(&u);
    return code;
}

static int users_list(struct api *a, struct sbuf *o)
{
    const struct gen *g = a->current(a->arg);
    struct usersfile u;
    char err[CONFIG_ERR_LEN];
    int have = g->opt.users_file[0] && !usersfile_load(&u, g->opt.users_file, err, sizeof err);
    sbuf_printf(o, "{\"generation\":%llu,\"users\":[", (unsigned long long)g->serial);
    for (int i = 0; i < g->opt.nsecrets; i++) {
        int r = have ? usersfile_find(&u, g->opt.secrets[i].name) : -1;
        if (i)
            sbuf_printf(o, ",");
        user_json(o, g, i, r >= 0 && u.r[r].secret ? &u.r[r] : NULL, 0);
    }
    sbuf_printf(o, "]}\n");
    if (have)
        usersfile_free(&u);
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
            if (n < 16) { /* KEY=VALUE, or a bare word (disabled): VALUE "" */
                snprintf(keys[n], sizeof keys[n], "%.*s", (int)(eq < w ? eq : w), p);
                snprintf(vals[n], sizeof vals[n], "%.*s", (int)(eq < w ? w - eq - 1 : 0),
                         eq < w ? p + eq + 1 : "");
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
            /* digits only: 2e9 or 1.5 are not read as something else; 0 is not "never"
             * (null removes the limit) */
            char *end;
            errno = 0;
            long long secs = strtoll(f->val, &end, 10);
            time_t t = (time_t)secs;
            struct tm tm;
            if (f->val[strspn(f->val, "0123456789")] || errno || secs < 1 ||
                secs > 253402300799LL || !gmtime_r(&t, &tm))
                return fail(o, 400, field, "expires must be a unix time (whole seconds, 1 to "
                            "253402300799), a date YYYY-MM-DD[THH:MM:SSZ], or null (none)");
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
        len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s %s%s%s",
                                k ? "" : name, keys[k], vals[k][0] ? "=" : "", vals[k]);
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
        return fail(o, 400, !strncmp(err, "secret name", 11) ? "name" : *dhex ? "domain" : "secret",
                    "%s", err);
    if (options_documented_secret(&s))
        return fail(o, 400, "secret", "this key is shown in mtproxy's documentation: pick another");
    return 0;
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
    struct usersfile u = {0};
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
    if (!name[strspn(name, ".")]) { /* "..": a URL path segment clients resolve away */
        code = fail(o, 400, "name", "a name of dots only cannot be used in a URL (/users/NAME)");
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
    if (usersfile_load(&u, path, err, sizeof err)) {
        code = fail(o, 409, NULL, "users-file must be fixed first: %s", err);
        goto out;
    }
    int r = usersfile_find(&u, name);
    if ((r >= 0 && u.r[r].secret) || options_find_secret(&g->opt, name) >= 0) {
        code = fail(o, 409, "name", "a user named '%s' exists already%s", name,
                    r >= 0 && u.r[r].secret ? "" : " (in the config file)");
        goto out;
    }
    struct usersfile_rec *rec = usersfile_rec(&u, name, strlen(name));
    if (!rec || !(rec->secret = strdup(st)) || usersfile_set_limit(rec, lim)) {
        code = fail(o, 500, NULL, "out of memory");
        goto out;
    }
    /* a new user starts from zero: usage a deleted user of the name left (a delete killed
     * before its state save) goes first, on disk, before the user exists */
    int32_t old = g->users ? users_find(g->users, name) : -1;
    if (old >= 0 && shared64_load(&users_shared(g->users, (uint32_t)old)->used) &&
        usage_forget(a, g->users, (uint32_t)old, name, g->opt.state_file, g->opt.lstore.on, err,
                     sizeof err)) {
        code = fail(o, 500, NULL, "the usage a former user '%s' left cannot be dropped: %s",
                    name, err);
        goto out;
    }
    if (!(code = ufile_commit(a, path, &u, o)))
        code = user_answer(a, name, 201, 1, o);
out:
    usersfile_free(&u);
    free(j);
    return code;
}

/* Loads users-file and finds name's record with a secret line; else the error is written
 * (404, or 409 for a user of the config file). */
static int user_of_file(const struct gen *g, const char *path, const char *name,
                        struct usersfile *u, int *r, struct sbuf *o)
{
    char err[CONFIG_ERR_LEN];
    if (usersfile_load(u, path, err, sizeof err))
        return fail(o, 409, NULL, "users-file must be fixed first: %s", err);
    *r = usersfile_find(u, name);
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
    struct usersfile u = {0};
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
    if (usersfile_set_limit(&u.r[r], lim) || usersfile_sync_prev(&u, name, 0)) {
        code = fail(o, 500, NULL, "out of memory");
        goto out;
    }
    if (!(code = ufile_commit(a, path, &u, o)))
        code = user_answer(a, name, 200, 0, o);
out:
    usersfile_free(&u);
    free(j);
    return code;
}

static int user_delete(struct api *a, const char *name, struct sbuf *o)
{
    struct usersfile u = {0};
    int code = 0, r;
    const struct gen *g = a->current(a->arg);
    const char *path = users_file(g, o, &code);
    if (code || (code = user_of_file(g, path, name, &u, &r, o)))
        goto out;
    /* its usage goes with it (a user made again with the name starts from zero) */
    int si = options_find_secret(&g->opt, name);
    struct users *users = g->users;
    uint32_t uid = si >= 0 && g->uid ? g->uid[si] : UINT32_MAX;
    char prev[SECRET_NAME_MAX + 8], state_file[OPT_PATH_MAX], err[CONFIG_ERR_LEN];
    int fleet = g->opt.lstore.on;
    snprintf(state_file, sizeof state_file, "%s", g->opt.state_file);
    snprintf(prev, sizeof prev, "%s.prev", name);
    for (int k = 0; k < 2; k++) { /* the user, and its previous secret still in its grace */
        if ((r = usersfile_find(&u, k ? prev : name)) < 0)
            continue;
        free(u.r[r].secret);
        free(u.r[r].limit);
        u.r[r] = u.r[--u.n];
    }
    if (!(code = ufile_commit(a, path, &u, o))) {
        if (users && uid != UINT32_MAX &&
            usage_forget(a, users, uid, name, state_file, fleet, err, sizeof err))
            log_warn("API: user %s deleted, but its quota usage is kept: %s", name, err);
        o->len = 0;
        sbuf_printf(o, "{\"deleted\":");
        api_json_str(o, name);
        sbuf_printf(o, ",\"generation\":%llu}\n",
                    (unsigned long long)a->current(a->arg)->serial);
        code = 200;
    }
out:
    usersfile_free(&u);
    return code;
}

/* The previous secret of name, kept for grace seconds after a rotation: user NAME.prev, the
 * same user under its old secret (its bytes count against NAME's quota: gen_map_users) with
 * NAME's limits and expires=now+grace (usersfile_sync_prev), which the proxy enforces by
 * itself (no timer; the line is dropped by a later change once past, see ufile_prune).
 * Returns 0, or the HTTP status of the error written to o. */
static int keep_previous(const struct gen *g, struct usersfile *u, const char *name,
                         const struct secret *old, long long grace, struct sbuf *o)
{
    char prev[SECRET_NAME_MAX + 8], hex[SECRET_HEX_MAX], st[sizeof prev + SECRET_HEX_MAX + 2];
    snprintf(prev, sizeof prev, "%s.prev", name);
    if (strlen(prev) >= SECRET_NAME_MAX)
        return fail(o, 400, "grace_seconds", "a grace needs the name NAME.prev for the old "
                    "secret, and '%s' is too long for that", prev);
    int r = usersfile_find(u, prev);
    if ((r < 0 || !u->r[r].secret) && options_find_secret(&g->opt, prev) >= 0)
        return fail(o, 409, "grace_seconds", "a grace needs the name '%s' for the old secret, "
                    "and a user of the config file has it", prev);
    secret_to_hex(old, hex, sizeof hex);
    snprintf(st, sizeof st, "%s:%s", prev, hex);
    struct usersfile_rec *rec = usersfile_rec(u, prev, strlen(prev));
    char *sc = strdup(st);
    if (!rec || !sc) {
        free(sc);
        return fail(o, 500, NULL, "out of memory");
    }
    free(rec->secret);
    rec->secret = sc;
    if (usersfile_sync_prev(u, name, (int64_t)time(NULL) + grace))
        return fail(o, 400, "grace_seconds", "the limit line of '%s' is too long", prev);
    return 0;
}

static int user_rotate(struct api *a, const char *name, const char *body, size_t blen,
                       struct sbuf *o)
{
    static const char *const allowed[] = {"grace_seconds", NULL};
    struct json_obj *j = calloc(1, sizeof *j);
    struct usersfile u = {0};
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
    r = usersfile_find(&u, name); /* keep_previous may have moved the records */
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
    usersfile_free(&u);
    free(j);
    return code;
}

/* disable (on) / enable: the word `disabled` in the user's limit line. */
static int user_disable(struct api *a, const char *name, int on, struct sbuf *o)
{
    struct usersfile u = {0};
    int code = 0, r;
    const struct gen *g = a->current(a->arg);
    const char *path = users_file(g, o, &code);
    if (code || (code = user_of_file(g, path, name, &u, &r, o)))
        goto out;
    if (usersfile_set_word(&u.r[r], "disabled", on) || usersfile_sync_prev(&u, name, 0)) {
        code = fail(o, 500, NULL, "out of memory");
        goto out;
    }
    if (!(code = ufile_commit(a, path, &u, o)))
        code = user_answer(a, name, 200, 0, o);
out:
    usersfile_free(&u);
    return code;
}

/* reset-quota: the user's quota usage starts over (usage_forget). Users of the config file
 * may be reset as well (nothing is written to a config). */
static int user_reset_quota(struct api *a, const char *name, struct sbuf *o)
{
    const struct gen *g = a->current(a->arg);
    int i = options_find_secret(&g->opt, name);
    if (i < 0)
        return fail(o, 404, NULL, "no user '%s'", name);
    if (!g->users || !g->uid)
        return fail(o, 500, NULL, "no users registry");
    char err[CONFIG_ERR_LEN];
    if (usage_forget(a, g->users, g->uid[i], name, g->opt.state_file, g->opt.lstore.on, err,
                     sizeof err))
        return fail(o, 500, NULL, "quota reset, but a restart would bring the usage back: %s",
                    err);
    return user_answer(a, name, 200, 0, o);
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
        api_json_str(o, g->opt.users_file);
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
    if (!strcmp(p, "/disable") || !strcmp(p, "/enable"))
        return m == HTTP_POST ? user_disable(a, name, p[1] == 'd', o)
                              : method_not_allowed(o, "POST");
    if (!strcmp(p, "/reset-quota"))
        return m == HTTP_POST ? user_reset_quota(a, name, o) : method_not_allowed(o, "POST");
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
    if (!a->reload && (!token[0] || !rq->has_bearer || !http_token_equal(rq->bearer, token)))
        return fail(out, 401, NULL, "a token is needed: Authorization: Bearer API-TOKEN");
    pthread_mutex_lock(&a->lock);
    int code = route(a, rq, body, blen, out);
    pthread_mutex_unlock(&a->lock);
    return code;
}
