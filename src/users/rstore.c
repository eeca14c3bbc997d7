/* rstore.c: replay store in Redis through hiredis's async API on the worker's libev loop. */
#include "users/rstore.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/log.h"

#ifdef MTPROXY_HAVE_HIREDIS
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <hiredis/adapters/libev.h>

#define RSTORE_BACKOFF_MIN 0.2
#define RSTORE_BACKOFF_MAX 10.0
#define RSTORE_INFLIGHT_MAX 4096 /* questions waiting per worker; past it: "down" */


#define RSTORE_BUILT 1
#else
#define RSTORE_BUILT 0
#endif

/* The config key a store was configured by (its log lines and errors name it). */
#define KEY(cfg) ((cfg)->key[0] ? (cfg)->key : "replay-store")

void rstore_printable(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < cap; i++)
        out[o++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    if (cap)
        out[o] = 0;
}

#ifdef MTPROXY_HAVE_HIREDIS
/*
 * Our replies are +OK, a nil, or an error: an array is never asked for. A reader's default
 * functions would allocate an array of whatever count the store sends (*2147483647 asks for
 * 16 GB); these pass everything to them but refuse a count over the limit, which the reader
 * reports as an error and the connection is dropped. The defaults are kept in the reader's
 * privdata, which the reader hands every task.
 */
static void *lim_string(const redisReadTask *t, char *s, size_t n)
{
    const redisReplyObjectFunctions *d = t->privdata;
    return d->createString(t, s, n);
}

static void *lim_array(const redisReadTask *t, int n)
{
    const redisReplyObjectFunctions *d = t->privdata;
    return n < 0 || n > RSTORE_REPLY_MAX_ELEMENTS ? NULL : d->createArray(t, n);
}

static void *lim_integer(const redisReadTask *t, long long v)
{
    const redisReplyObjectFunctions *d = t->privdata;
    return d->createInteger(t, v);
}

static void *lim_nil(const redisReadTask *t)
{
    const redisReplyObjectFunctions *d = t->privdata;
    return d->createNil(t);
}

static const redisReplyObjectFunctions limited = {lim_string, lim_array, lim_integer, lim_nil,
                                                  freeReplyObject};

/* The same with the larger limit of a store asked for arrays (limits-store). */
static void *lim_array_big(const redisReadTask *t, int n)
{
    const redisReplyObjectFunctions *d = t->privdata;
    return n < 0 || n > RSTORE_BIG_MAX_ELEMENTS ? NULL : d->createArray(t, n);
}

static const redisReplyObjectFunctions limited_big = {lim_string, lim_array_big, lim_integer,
                                                      lim_nil, freeReplyObject};

static void reader_limit_to(redisReader *r, int big)
{
    const redisReplyObjectFunctions *l = big ? &limited_big : &limited;
    if (r->fn == &limited || r->fn == &limited_big || !r->fn)
        return;
    r->privdata = r->fn;
    r->fn = (redisReplyObjectFunctions *)l; /* hiredis never writes through fn */
}

static redisReader *reader_new(int big)
{
    redisReader *r = redisReaderCreate();
    if (r)
        reader_limit_to(r, big);
    return r;
}

/* The verdict a reply to SET ... NX gives. */
static enum rstore_verdict verdict_of(const redisReply *reply)
{
    if (!reply || reply->type == REDIS_REPLY_ERROR)
        return RSTORE_FAILED;
    if (reply->type == REDIS_REPLY_NIL)
        return RSTORE_SEEN;
    if (reply->type == REDIS_REPLY_STATUS && reply->len == 2 && !memcmp(reply->str, "OK", 2))
        return RSTORE_NEW;
    return RSTORE_FAILED; /* anything else is no answer to SET NX */
}

int rstore_each_reply(const char *buf, size_t len, int big, rstore_reply_cb fn, void *ctx)
{
    redisReader *r = reader_new(big);
    if (!r)
        return -1;
    int n = 0;
    if (redisReaderFeed(r, buf, len) != REDIS_OK) {
        redisReaderFree(r);
        return -1;
    }
    for (;;) {
        void *reply = NULL;
        if (redisReaderGetReply(r, &reply) != REDIS_OK) {
            n = -1;
            break;
        }
        if (!reply)
            break;
        fn(reply, ctx);
        n++;
        freeReplyObject(reply);
    }
    redisReaderFree(r);
    return n;
}

struct verdicts {
    enum rstore_verdict *out;
    size_t cap, n;
    char *text;
    size_t textlen;
};

static void verdict_one(void *reply, void *ctx)
{
    struct verdicts *v = ctx;
    const redisReply *rp = reply;
    if (v->text && (rp->type == REDIS_REPLY_ERROR || rp->type == REDIS_REPLY_STATUS))
        rstore_printable(rp->str, rp->len, v->text, v->textlen);
    if (v->n < v->cap)
        v->out[v->n] = verdict_of(rp);
    v->n++;
}

int rstore_parse_replies(const char *buf, size_t len, enum rstore_verdict *out, size_t cap,
                         char *text, size_t textlen)
{
    struct verdicts v = {out, cap, 0, textlen ? text : NULL, textlen};
    if (text && textlen)
        text[0] = 0;
    return rstore_each_reply(buf, len, 0, verdict_one, &v);
}
#else
int rstore_each_reply(const char *buf, size_t len, int big, rstore_reply_cb fn, void *ctx)
{
    (void)buf, (void)len, (void)big, (void)fn, (void)ctx;
    return -1;
}

int rstore_parse_replies(const char *buf, size_t len, enum rstore_verdict *out, size_t cap,
                         char *text, size_t textlen)
{
    (void)buf, (void)len, (void)out, (void)cap;
    if (text && textlen)
        text[0] = 0;
    return -1;
}
#endif

int rstore_parse_url(const char *url, struct rstore_config *out, char *err, size_t errlen)
{
    return rstore_parse_url_as("replay-store", url, out, err, errlen);
}

int rstore_parse_url_as(const char *key, const char *url, struct rstore_config *out, char *err,
                        size_t errlen)
{
    if (!RSTORE_BUILT) {
        snprintf(err, errlen, "%s: this mtproxy was built without Redis support "
                 "(libhiredis); rebuild with libhiredis-dev installed", key);
        return -1;
    }
    memset(out, 0, sizeof *out);
    snprintf(out->key, sizeof out->key, "%s", key);
    static const char scheme[] = "redis://";
    if (strncmp(url, scheme, sizeof scheme - 1) != 0) {
        /* No part of it is quoted: a password may come anywhere in what is not a URL. */
        snprintf(err, errlen, "%s: the URL must start with redis:// "
                 "(redis://[:PASSWORD@]HOST:PORT[/DB] or redis://[:PASSWORD@]/PATH[?db=N])", key);
        return -1;
    }
    const char *p = url + sizeof scheme - 1;
    const char *at = strrchr(p, '@');
    if (at) {
        if (*p != ':' || at - p - 1 < 1 || (size_t)(at - p - 1) >= sizeof out->password) {
            snprintf(err, errlen, "%s: a password is given as redis://:PASSWORD@...", key);
            return -1;
        }
        memcpy(out->password, p + 1, (size_t)(at - p - 1));
        p = at + 1;
    }
    if (*p == '/') { /* a Unix socket */
        const char *q = strchr(p, '?');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n < 2 || n >= sizeof out->path) {
            snprintf(err, errlen, "%s: socket path must be 2 to %zu bytes", key,
                     sizeof out->path - 1);
            return -1;
        }
        memcpy(out->path, p, n);
        if (q) {
            char *end;
            if (strncmp(q, "?db=", 4) != 0 || !q[4] ||
                (out->db = (int)strtol(q + 4, &end, 10), *end) || out->db < 0 ||
                out->db > 1000000) {
                snprintf(err, errlen, "%s: after the socket path only ?db=N", key);
                return -1;
            }
        }
        out->on = 1;
        return 0;
    }
    const char *hend, *rest;
    if (*p == '[') {
        hend = strchr(p, ']');
        if (!hend || hend[1] != ':') {
            snprintf(err, errlen, "%s: expected [IPV6]:PORT", key);
            return -1;
        }
        p++;
        rest = hend + 1;
    } else {
        hend = strchr(p, ':');
        if (!hend) {
            snprintf(err, errlen, "%s: expected HOST:PORT", key);
            return -1;
        }
        rest = hend;
    }
    size_t hl = (size_t)(hend - p);
    if (hl == 0 || hl >= sizeof out->host) {
        snprintf(err, errlen, "%s: bad host", key);
        return -1;
    }
    memcpy(out->host, p, hl);
    char *end;
    long port = strtol(rest + 1, &end, 10);
    if (end == rest + 1 || port < 1 || port > 65535 || (*end && *end != '/')) {
        snprintf(err, errlen, "%s: port must be 1..65535", key);
        return -1;
    }
    out->port = (int)port;
    if (*end == '/') {
        long db = strtol(end + 1, &end, 10);
        if (*end || db < 0 || db > 1000000) {
            snprintf(err, errlen, "%s: /DB must be a database number", key);
            return -1;
        }
        out->db = (int)db;
    }
    out->on = 1;
    return 0;
}

int rstore_resolve(struct rstore_config *cfg, char *err, size_t errlen)
{
    if (!cfg->on || cfg->path[0])
        return 0;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(cfg->host, NULL, &hints, &res);
    if (rc || !res) {
        snprintf(err, errlen, "%s: cannot resolve %s: %s", KEY(cfg), cfg->host,
                 rc ? gai_strerror(rc) : "no address");
        return -1;
    }
    char a[INET6_ADDRSTRLEN] = "";
    if (res->ai_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, a, sizeof a);
    else
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)res->ai_addr)->sin6_addr, a, sizeof a);
    freeaddrinfo(res);
    snprintf(cfg->host, sizeof cfg->host, "%s", a);
    return 0;
}

#ifdef MTPROXY_HAVE_HIREDIS
static void connect_now(struct rstore *rs);

static void schedule_retry(struct rstore *rs)
{
    if (rs->stopping)
        return;
    ev_timer_stop(rs->loop, &rs->retry);
    ev_timer_set(&rs->retry, rs->backoff, 0);
    ev_timer_start(rs->loop, &rs->retry);
    rs->backoff *= 2;
    if (rs->backoff > RSTORE_BACKOFF_MAX)
        rs->backoff = RSTORE_BACKOFF_MAX;
}

static void on_retry(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop, (void)revents;
    connect_now(t->data);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct rstore *rs = ac->data;
    if (status != REDIS_OK) {
        /* hiredis frees the context after this callback. */
        log_warn("%s: cannot connect: %s", KEY(rs->cfg), ac->errstr);
        rs->ac = NULL;
        rs->ready = 0;
        schedule_retry(rs);
        return;
    }
    rs->backoff = RSTORE_BACKOFF_MIN;
    rs->ready = 1;
    log_info("%s: connected", KEY(rs->cfg));
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct rstore *rs = ac->data;
    rs->ac = NULL;
    rs->ready = 0;
    if (status != REDIS_OK && !rs->stopping)
        log_warn("%s: disconnected: %s", KEY(rs->cfg), ac->errstr);
    STAT_INC(&rs->stats.reconnects);
    schedule_retry(rs);
}

/* Replies to AUTH/SELECT: a failure there makes every later answer an error, which the
 * callers see as RSTORE_FAILED; say it once here. */
static void on_setup_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    redisReply *reply = r;
    if (reply && reply->type == REDIS_REPLY_ERROR) {
        struct rstore *rs = ac->data;
        char text[200]; /* the store's words, not ours: printable and bounded in the log */
        rstore_printable(reply->str, reply->len, text, sizeof text);
        log_warn("%s: %s failed: %s", KEY(rs->cfg), (const char *)privdata, text);
    }
}

static void connect_now(struct rstore *rs)
{
    if (rs->stopping || rs->ac)
        return;
    redisAsyncContext *ac = rs->cfg->path[0] ? redisAsyncConnectUnix(rs->cfg->path)
                                             : redisAsyncConnect(rs->cfg->host, rs->cfg->port);
    if (!ac || ac->err) {
        log_warn("%s: cannot connect: %s", KEY(rs->cfg), ac ? ac->errstr : "out of memory");
        if (ac)
            redisAsyncFree(ac);
        schedule_retry(rs);
        return;
    }
    ac->data = rs;
    reader_limit_to(ac->c.reader, rs->big);
    if (redisLibevAttach(rs->loop, ac) != REDIS_OK) {
        redisAsyncFree(ac);
        schedule_retry(rs);
        return;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    rs->ac = ac;
    /* Queued now, sent once connected, answered before any question asked after them. */
    if (rs->cfg->password[0])
        redisAsyncCommand(ac, on_setup_reply, (void *)"AUTH", "AUTH %s", rs->cfg->password);
    if (rs->cfg->db > 0)
        redisAsyncCommand(ac, on_setup_reply, (void *)"SELECT", "SELECT %d", rs->cfg->db);
}

void rstore_init(struct rstore *rs, struct ev_loop *loop, const struct rstore_config *cfg)
{
    rstore_open(rs, loop, cfg, 0);
}

void rstore_open(struct rstore *rs, struct ev_loop *loop, const struct rstore_config *cfg,
                 int big)
{
    memset(rs, 0, sizeof *rs);
    rs->loop = loop;
    rs->cfg = cfg;
    rs->big = big;
    rs->backoff = RSTORE_BACKOFF_MIN;
    ev_init(&rs->retry, on_retry);
    rs->retry.data = rs;
    if (cfg && cfg->on)
        connect_now(rs);
}

struct question {
    struct rstore *rs;
    rstore_cb cb;
    void *owner;
    uint64_t token;
};

static void on_answer(redisAsyncContext *ac, void *r, void *privdata)
{
    (void)ac;
    struct question *q = privdata;
    enum rstore_verdict v = verdict_of(r);
    if (v == RSTORE_SEEN)
        STAT_INC(&q->rs->stats.seen);
    else if (v == RSTORE_FAILED)
        STAT_INC(&q->rs->stats.failed);
    q->rs->inflight--;
    q->cb(q->owner, q->token, v);
    free(q);
}

int rstore_check(struct rstore *rs, const uint8_t key[RSTORE_KEY_LEN], unsigned ttl_ms,
                 rstore_cb cb, void *owner, uint64_t token)
{
    if (!rs->ac || !rs->ready || rs->inflight >= RSTORE_INFLIGHT_MAX) {
        STAT_INC(&rs->stats.down);
        return -1;
    }
    struct question *q = malloc(sizeof *q);
    if (!q) {
        STAT_INC(&rs->stats.down);
        return -1;
    }
    *q = (struct question){rs, cb, owner, token};
    char k[2 + 2 * RSTORE_KEY_LEN + 16];
    int n = snprintf(k, sizeof k, "mtproxy:r:");
    for (int i = 0; i < RSTORE_KEY_LEN; i++)
        n += snprintf(k + n, sizeof k - (size_t)n, "%02x", key[i]);
    if (redisAsyncCommand(rs->ac, on_answer, q, "SET %s 1 NX PX %u", k,
                          ttl_ms ? ttl_ms : 1) != REDIS_OK) {
        free(q);
        STAT_INC(&rs->stats.down);
        return -1;
    }
    rs->inflight++;
    STAT_INC(&rs->stats.asked);
    return 0;
}

struct command {
    struct rstore *rs;
    rstore_reply_cb cb;
    void *priv;
};

static void on_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    (void)ac;
    struct command *c = privdata;
    c->rs->inflight--;
    c->cb(r, c->priv);
    free(c);
}

int rstore_command(struct rstore *rs, int argc, const char **argv, const size_t *argvlen,
                   rstore_reply_cb cb, void *priv)
{
    if (!rs->ac || !rs->ready)
        return -1;
    struct command *c = malloc(sizeof *c);
    if (!c)
        return -1;
    *c = (struct command){rs, cb, priv};
    if (redisAsyncCommandArgv(rs->ac, on_reply, c, argc, argv, argvlen) != REDIS_OK) {
        free(c);
        return -1;
    }
    rs->inflight++;
    return 0;
}

void rstore_reconnect(struct rstore *rs)
{
    if (rs->ac) {
        redisAsyncContext *ac = rs->ac;
        rs->ac = NULL;
        rs->ready = 0;
        redisAsyncFree(ac); /* pending callbacks get NULL replies; no disconnect callback */
        STAT_INC(&rs->stats.reconnects);
        schedule_retry(rs);
    }
}

void rstore_stop(struct rstore *rs)
{
    rs->stopping = 1;
    ev_timer_stop(rs->loop, &rs->retry);
    if (rs->ac) {
        redisAsyncContext *ac = rs->ac;
        rs->ac = NULL;
        redisAsyncFree(ac); /* pending callbacks get NULL replies: RSTORE_FAILED */
    }
}
#else /* no hiredis: rstore_parse_url refuses every URL, so no store is ever configured */
void rstore_init(struct rstore *rs, struct ev_loop *loop, const struct rstore_config *cfg)
{
    rstore_open(rs, loop, cfg, 0);
}

void rstore_open(struct rstore *rs, struct ev_loop *loop, const struct rstore_config *cfg,
                 int big)
{
    (void)big;
    memset(rs, 0, sizeof *rs);
    rs->loop = loop;
    rs->cfg = cfg;
}

int rstore_check(struct rstore *rs, const uint8_t key[RSTORE_KEY_LEN], unsigned ttl_ms,
                 rstore_cb cb, void *owner, uint64_t token)
{
    (void)key, (void)ttl_ms, (void)cb, (void)owner, (void)token;
    STAT_INC(&rs->stats.down);
    return -1;
}

int rstore_command(struct rstore *rs, int argc, const char **argv, const size_t *argvlen,
                   rstore_reply_cb cb, void *priv)
{
    (void)rs, (void)argc, (void)argv, (void)argvlen, (void)cb, (void)priv;
    return -1;
}

void rstore_reconnect(struct rstore *rs)
{
    (void)rs;
}

void rstore_stop(struct rstore *rs)
{
    rs->stopping = 1;
}
#endif
