/* reload.c: builds and checks a config generation whole (start and SIGHUP), refcounts it. */
#include "config/reload.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/worker.h"
#include "upstream/middle.h"
#include "config/prefix.h"
#include "config/statefile.h"

static void reloader_job(struct reloader *rd)
{
    if (rd->reaper)
        gen_reap(rd->reaper);
    rd->fn(rd->arg);
}

void reload_init(struct reload *r, struct users *users, const char *config_path, int argc,
                 char **argv)
{
    memset(r, 0, sizeof *r);
    r->users = users;
    r->config_path = config_path;
    r->argc = argc;
    r->argv = argv;
    r->lock_fd = -1;
}

static void gen_free(struct gen *g)
{
    middle_table_put(g->me);
    if (g->pmap)
        prefix_map_free(g->pmap);
    free(g->pmap);
    acl_free(&g->acl);
    faketls_sni_index_free(&g->sni);
    options_free(&g->opt);
    free(g->uid);
    free(g->lim);
    free(g->live);
    free(g);
}

void gen_ref(struct gen *g)
{
    atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
}

void gen_unref(struct gen *g)
{
    if (!g || atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) != 1)
        return;
    struct gen_reaper *r = g->reaper;
    if (!r) {
        gen_free(g);
        return;
    }
    /* A push on a stack that is only ever emptied whole (gen_reap): no ABA. */
    struct gen *head = atomic_load_explicit(&r->head, memory_order_relaxed);
    do
        g->reap_next = head;
    while (!atomic_compare_exchange_weak_explicit(&r->head, &head, g, memory_order_release,
                                                  memory_order_relaxed));
}

int gen_reap(struct gen_reaper *r)
{
    int n = 0;
    for (struct gen *g = atomic_exchange_explicit(&r->head, NULL, memory_order_acquire), *next;
         g; g = next, n++) {
        next = g->reap_next;
        gen_free(g);
    }
    return n;
}

static void *reloader_main(void *arg)
{
    struct reloader *rd = arg;
#ifdef __linux__
    pthread_setname_np(pthread_self(), "mtproxy/reload");
#endif
    worker_thread_idle("reload");
    for (;;) {
        while (sem_wait(&rd->go) && errno == EINTR)
            ;
        if (rd->stop)
            return NULL;
        reloader_job(rd);
        sem_post(&rd->done);
    }
}

int reloader_start(struct reloader *rd, void (*fn)(void *), void *arg, struct gen_reaper *reaper)
{
    memset(rd, 0, sizeof *rd);
    rd->fn = fn;
    rd->arg = arg;
    rd->reaper = reaper;
    if (sem_init(&rd->go, 0, 0))
        return errno;
    if (sem_init(&rd->done, 0, 0)) {
        int e = errno;
        sem_destroy(&rd->go);
        return e;
    }
    int rc = pthread_create(&rd->thread, NULL, reloader_main, rd);
    if (rc) {
        sem_destroy(&rd->go);
        sem_destroy(&rd->done);
        return rc;
    }
    rd->started = 1;
    return 0;
}

void reloader_run(struct reloader *rd)
{
    if (!rd->started) {
        reloader_job(rd);
        return;
    }
    sem_post(&rd->go);
    while (sem_wait(&rd->done) && errno == EINTR)
        ;
}

void reloader_stop(struct reloader *rd)
{
    if (!rd->started)
        return;
    rd->stop = 1;
    sem_post(&rd->go);
    pthread_join(rd->thread, NULL);
    sem_destroy(&rd->go);
    sem_destroy(&rd->done);
    rd->started = 0;
}

static void copy_errors(struct config_errors *dst, const struct config_errors *src)
{
    int shown = src->count < CONFIG_MAX_ERRORS ? src->count : CONFIG_MAX_ERRORS;
    for (int i = 0; i < shown && dst->count < CONFIG_MAX_ERRORS; i++)
        memcpy(dst->msg[dst->count++], src->msg[i], CONFIG_ERR_LEN);
    dst->count += src->count - shown;
}

static void add_error(struct config_errors *e, const char *msg)
{
    if (e->count < CONFIG_MAX_ERRORS)
        snprintf(e->msg[e->count], CONFIG_ERR_LEN, "%s", msg);
    e->count++;
}

int gen_map_users(struct gen *g)
{
    const struct options *o = &g->opt;
    size_t n = (size_t)o->nsecrets + 1;
    uint32_t *uid = realloc(g->uid, n * sizeof *uid);
    if (!uid)
        return -1;
    g->uid = uid;
    const struct user_limit **lim = realloc(g->lim, n * sizeof *lim);
    if (!lim)
        return -1;
    g->lim = lim;
    for (int i = 0; i < o->nsecrets; i++) {
        /* NAME.prev, a rotation's old secret in its grace, is user NAME (one user, two
         * secrets: the same quota, conns slots and usage) while NAME is configured */
        char base[SECRET_NAME_MAX];
        const char *name = o->secrets[i].name;
        size_t len = strlen(name);
        if (len > 5 && !strcmp(name + len - 5, ".prev")) {
            snprintf(base, sizeof base, "%.*s", (int)(len - 5), name);
            if (options_find_secret(o, base) >= 0)
                name = base;
        }
        int32_t id = users_intern(g->users, name);
        if (id < 0)
            return -1;
        g->uid[i] = (uint32_t)id;
        g->lim[i] = NULL;
    }
    for (int i = 0; i < o->nlimits; i++) {
        int s = options_find_secret(o, o->limits[i].name);
        if (s >= 0)
            g->lim[s] = &o->limits[i];
    }
    g->nusers = users_count(g->users);
    free(g->live);
    if (!(g->live = calloc(g->nusers + 1, 1)))
        return -1;
    for (int i = 0; i < o->nsecrets; i++)
        g->live[g->uid[i]] = 1;
    for (int i = 0; i < o->nsecrets; i++) /* disabled: its live connections go as if removed */
        if (g->lim[i] && g->lim[i]->disabled)
            g->live[g->uid[i]] = 0;
    faketls_sni_index_free(&g->sni);
    return faketls_sni_index_build(&g->sni, o->secrets, (size_t)o->nsecrets);
}

/* Middle mode's ME table, from the files named now; the mode is the running one's. */
static void build_me(struct reload *r, struct gen *g, const struct gen *old,
                     struct config_errors *errs)
{
    r->me_err[0] = 0;
    if (errs->count || !(old ? old->opt.middle : g->opt.middle))
        return;
    char e[CONFIG_ERR_LEN];
    if ((g->me = middle_table_load(&g->opt, e, sizeof e)))
        return;
    if (!old && !r->tool) {
        add_error(errs, e);
        return;
    }
    snprintf(r->me_err, sizeof r->me_err, "%s", e);
    g->me = old ? middle_table_get(old->me) : NULL;
}

/* Start-up's part of the first build (struct reload_start). */
static void build_start(struct reload *r, struct gen *g, struct config_errors *errs)
{
    struct reload_start *s = r->start;
    struct options *o = &g->opt;
    char e[CONFIG_ERR_LEN];
    s->nworkers = preflight_workers(o);
    s->secret_drawn = 0;
    g->state_secret = !o->nsecrets;
    int rc = o->nsecrets ? 1 : options_load_state(o, o->state_file, e, sizeof e);
    if (rc < 0) {
        add_error(errs, e);
        return;
    }
    if (rc == 0) { /* no secret anywhere: a new one, saved by main once it holds the lock */
        struct secret sec = {.kind = SECRET_PLAIN};
        snprintf(sec.name, sizeof sec.name, "default");
        if (preflight_draw_key(&sec)) {
            add_error(errs, "no random source");
            return;
        }
        if (options_add_secret(o, &sec, e, sizeof e)) {
            add_error(errs, e);
            return;
        }
        s->secret_drawn = 1;
    }
    s->max_connections = o->max_connections;
    preflight_fds(o, s->nworkers, g->me, preflight_fd_limit(), &s->fds);
    if (!s->fds.fits)
        o->max_connections = s->fds.fit < 1 ? 1 : (int)s->fds.fit;
    /* The users registry: one id per secret name, per-user counters per worker; the quota
     * used so far comes from the state file. */
    if (!r->users || users_init(r->users, s->nworkers)) {
        add_error(errs, "out of memory for the users table");
        return;
    }
    if (users_state_load(r->users, o->state_file, e, sizeof e))
        add_error(errs, e);
}

struct gen *reload_build(struct reload *r, const struct gen *old, struct config_errors *errs)
{
    struct gen *g = calloc(1, sizeof *g);
    struct config_parser *p = calloc(1, sizeof *p);
    if (!g || !p) {
        free(g);
        free(p);
        add_error(errs, "out of memory for a new configuration");
        return NULL;
    }
    atomic_init(&g->refs, 1);
    g->users = r->users;
    g->reaper = r->reaper;
    options_init(p, &g->opt);
    if (r->config_path)
        config_load_file(p, r->config_path);
    config_load_args(p, r->argc, r->argv);
    char lock[OPT_PATH_MAX + 8];
    snprintf(lock, sizeof lock, "%s.lock", g->opt.state_file);
    /* no lock file: nobody holds it, and a start that fails leaves none (preflight makes it) */
    if (r->lock_wait_ms && r->lock_fd == -1 && access(lock, F_OK) == 0) {
        char le[CONFIG_ERR_LEN];
        r->lock_fd = statefile_lock_wait(g->opt.state_file, r->lock_wait_ms, r->lock_poll,
                                         r->lock_arg, le, sizeof le);
    }
    r->lock_wait_ms = 0; /* once */
    if (g->opt.users_file[0]) /* its lines are added to the config's (and the arguments') */
        options_load_users_file(&g->opt, g->opt.users_file, &p->errors);
    options_validate(p, &g->opt);
    /* The access list's files are read here, so their bad lines are reported as PATH:LINE. */
    acl_build(&g->acl, &g->opt, &p->errors);
    copy_errors(errs, &p->errors);
    free(p);
    char e[CONFIG_ERR_LEN];
    if (!errs->count && !r->no_resolve &&
        (options_resolve_socks5(&g->opt, e, sizeof e) ||
         rstore_resolve(&g->opt.rstore, e, sizeof e)))
        add_error(errs, e);
    if (!errs->count && !r->no_resolve && mask_table_build(&g->masks, &g->opt, e, sizeof e))
        add_error(errs, e);
    if (!errs->count && !g->opt.nsecrets && old && old->state_secret &&
        !strcmp(old->opt.state_file, g->opt.state_file)) {
        /* No secret configured: the generated one (from state-file) stays. */
        for (int i = 0; i < old->opt.nsecrets && !errs->count; i++)
            if (options_add_secret(&g->opt, &old->opt.secrets[i], e, sizeof e))
                add_error(errs, e);
    }
    if (!errs->count && !g->opt.nsecrets && old)
        add_error(errs, "no secret configured (a secret is generated only at start)");
    if (!errs->count)
        dc_table_build(&g->dcs, &g->opt);
    r->nrestart = 0;
    if (!errs->count && old) { /* keys that need a restart keep their running values */
        r->nrestart = reload_restart_keys(old, g, r->restart_keys, sizeof r->restart_keys);
        g->state_secret = old->state_secret && g->opt.nsecrets == old->opt.nsecrets;
    }
    build_me(r, g, old, errs);
    if (!errs->count && r->start && !old)
        build_start(r, g, errs);
    /* New names are interned only for a generation that is kept: a failed build gives them
     * back (else repeated bad reloads would grow the registry for good). */
    struct users_mark mark = {0};
    int marked = 0;
    if (!errs->count && g->users && g->opt.nsecrets) {
        marked = !users_mark(g->users, &mark);
        if (!marked || gen_map_users(g))
            add_error(errs, marked && users_count(g->users) >= g->users->max
                                ? "the users table is full (every name configured since "
                                  "start keeps its id): restart to drop removed users"
                                : "out of memory for the users table");
    }
    /* listen-prefix: the users' addresses (links, tools) and the address map (the proxy) */
    if (!errs->count && (g->uid || r->tool) &&
        prefix_build(g, r->start && !old, (int64_t)time(NULL), e, sizeof e))
        add_error(errs, e);
    if (errs->count) {
        if (marked)
            users_rollback(g->users, &mark);
        gen_unref(g);
        return NULL;
    }
    users_mark_drop(&mark);
    /* What a worker would otherwise work out from the whole table when it adopts g. */
    if (old)
        g->removed = reload_removed_users(old, g);
    for (int i = 0; i < g->opt.nsecrets && !g->has_ee; i++)
        g->has_ee = g->opt.secrets[i].kind == SECRET_EE;
    /* Every periodic quota knows its period before a worker counts a byte of it (a usage
     * whose period ended while the proxy was stopped starts over here). */
    if (g->users)
        users_quota_roll(g->users, g->opt.limits, g->opt.nlimits, (int64_t)time(NULL));
    return g;
}

void reload_commit(struct reload *r, struct gen *g)
{
    g->serial = ++r->serial;
}

/* Keys read once at start (sockets, pools, caches, privileges): a change waits for a
 * restart. */
static const char *const restart_keys[] = {
    "listen", "workers", "user", "daemonize", "pidfile", "state-file", "log",
    "block-size", "max-buffer", "buffer-memory", "mask-buffer-memory", "max-connections",
    "backlog", "buffers", "replay-cache", "replay-store", "replay-store-fail",
    "replay-store-timeout", "replay-store-ttl", "socks5", "socks5-mask", "dc-pool",
    "probe-limit-per-ip", "tcp-nodelay", "tcp-keepalive", "sndbuf", "rcvbuf", "max-handshakes",
    "ad-tag", "client-mss", "tls-profile-refresh", "tls-profile-idle-max", "metrics",
    "listen-prefix", "api", "web-listen", "web-host", "web-root", "web-upstream", "web-carrier",
    "web-trusted-proxies", "web-public", "web-instance",
};

/* Size of an option's field by its type (custom keys that need a restart compare their own
 * fields below). */
static size_t field_size(const struct config_option *o)
{
    switch (o->type) {
    case CFG_BOOL:
    case CFG_INT:
    case CFG_ENUM:
        return sizeof(int);
    case CFG_SIZE:
        return sizeof(size_t);
    case CFG_DURATION:
        return sizeof(unsigned);
    case CFG_STRING:
        return o->str_size;
    default:
        return 0;
    }
}

/* 1 if key differs between a and b; then b takes a's value (the running one stays until a
 * restart). */
static int keep_old(const struct options *a, struct options *b, const char *key)
{
    if (!strcmp(key, "listen")) {
        if (a->nlisten == b->nlisten &&
            !memcmp(a->listen, b->listen, (size_t)a->nlisten * sizeof a->listen[0]))
            return 0;
        memcpy(b->listen, a->listen, sizeof a->listen);
        b->nlisten = a->nlisten;
        return 1;
    }
    if (!strcmp(key, "socks5")) {
        if (a->socks5_on == b->socks5_on && !memcmp(&a->socks5, &b->socks5, sizeof a->socks5))
            return 0;
        b->socks5 = a->socks5;
        b->socks5_on = a->socks5_on;
        b->socks5_addr = a->socks5_addr;
        return 1;
    }
    if (!strcmp(key, "ad-tag")) {
        /* Switching middle-proxy mode on or off needs a restart (its links are set up at
         * start); another tag takes effect for new clients at once. */
        if (a->middle == b->middle)
            return 0;
        b->middle = a->middle;
        memcpy(b->ad_tag, a->ad_tag, sizeof b->ad_tag);
        return 1;
    }
    if (!strcmp(key, "api")) { /* bound at start, like metrics */
        if (a->api_on == b->api_on && !memcmp(&a->api_addr, &b->api_addr, sizeof a->api_addr))
            return 0;
        b->api_on = a->api_on;
        b->api_addr = a->api_addr;
        return 1;
    }
    if (!strcmp(key, "metrics")) { /* the listeners are bound at start */
        if (a->metrics_on == b->metrics_on &&
            !memcmp(&a->metrics_addr, &b->metrics_addr, sizeof a->metrics_addr))
            return 0;
        b->metrics_on = a->metrics_on;
        b->metrics_addr = a->metrics_addr;
        return 1;
    }
    if (!strcmp(key, "listen-prefix")) { /* its listeners and route are set up at start */
        if (a->prefix_on == b->prefix_on && a->prefix_len == b->prefix_len &&
            a->prefix_port == b->prefix_port && !memcmp(&a->prefix, &b->prefix, sizeof a->prefix))
            return 0;
        b->prefix_on = a->prefix_on;
        b->prefix = a->prefix;
        b->prefix_len = a->prefix_len;
        b->prefix_port = a->prefix_port;
        return 1;
    }
    if (!strcmp(key, "web-listen")) { /* bound at start, on worker 0 */
        if (a->web_on == b->web_on && !memcmp(&a->web_addr, &b->web_addr, sizeof a->web_addr))
            return 0;
        b->web_on = a->web_on;
        b->web_addr = a->web_addr;
        return 1;
    }
    if (!strcmp(key, "web-trusted-proxies")) { /* copied by the WEB server at start */
        if (a->nweb_trusted == b->nweb_trusted &&
            !memcmp(a->web_trusted, b->web_trusted, sizeof a->web_trusted))
            return 0;
        memcpy(b->web_trusted, a->web_trusted, sizeof a->web_trusted);
        b->nweb_trusted = a->nweb_trusted;
        return 1;
    }
    if (!strcmp(key, "replay-store")) {
        if (!memcmp(&a->rstore, &b->rstore, sizeof a->rstore))
            return 0;
        b->rstore = a->rstore;
        return 1;
    }
    for (size_t i = 0; i < options_count; i++) {
        const struct config_option *o = &options_table[i];
        if (strcmp(o->name, key))
            continue;
        size_t n = field_size(o);
        const char *fa = (const char *)a + o->offset;
        char *fb = (char *)b + o->offset;
        if (!n || !memcmp(fa, fb, n))
            return 0;
        memcpy(fb, fa, n);
        return 1;
    }
    return 0;
}

int reload_restart_keys(const struct gen *old, struct gen *g, char *out, size_t outlen)
{
    int n = 0;
    size_t len = 0;
    if (outlen)
        out[0] = 0;
    for (size_t i = 0; i < sizeof restart_keys / sizeof restart_keys[0]; i++) {
        if (!keep_old(&old->opt, &g->opt, restart_keys[i]))
            continue;
        if (len < outlen)
            len += (size_t)snprintf(out + len, outlen - len, "%s%s", n ? ", " : "",
                                    restart_keys[i]);
        n++;
    }
    return n;
}

uint32_t reload_removed_users(const struct gen *old, const struct gen *g)
{
    uint32_t n = 0;
    for (uint32_t id = 0; id < old->nusers; id++)
        n += old->live[id] && (id >= g->nusers || !g->live[id]);
    return n;
}

enum gen_fate gen_user_fate(const struct gen *g, int32_t uid, double now, double *drain_at)
{
    if (uid < 0 || ((uint32_t)uid < g->nusers && g->live[uid])) {
        *drain_at = 0;
        return GEN_KEEP;
    }
    if (g->opt.removed_user != REMOVED_DRAIN)
        return GEN_CLOSE;
    if (*drain_at == 0)
        *drain_at = now + g->opt.drain_timeout_ms / 1000.0;
    return GEN_DRAIN;
}
