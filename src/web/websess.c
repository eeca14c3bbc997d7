/* websess.c: WEB proxy v1 sessions: tokens, bootstraps, sessions, the carriers' up and down. */
#include "web/websessi.h"

#include <stdlib.h>
#include <string.h>

#include "core/siphash.h"
#include "crypto/crypto.h"
#include "proto/webframe.h"

/* Takes one event from a bucket of rate per minute and burst at now: 0, or -1. */
static int bucket_take(struct bucket *b, uint32_t rate, uint32_t burst, int64_t now)
{
    uint64_t cap = (uint64_t)burst * RATE_UNIT;
    if (now > b->last) {
        uint64_t add = (uint64_t)(now - b->last) * rate;
        b->tokens = add >= cap || b->tokens >= cap - add ? cap : b->tokens + add;
        b->last = now;
    }
    if (b->tokens < RATE_UNIT)
        return -1;
    b->tokens -= RATE_UNIT;
    return 0;
}

static size_t pow2_at_least(size_t n)
{
    size_t p = 16;
    while (p < n)
        p <<= 1;
    return p;
}

struct websess_table *websess_table_new(const struct websess_limits *l, struct websess_shared *g,
                                        const struct websess_hooks *hooks)
{
    struct websess_table *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->l = *l;
    t->g = g;
    if (hooks)
        t->h = *hooks;
    siphash_key_random(&t->key);
    size_t ns = pow2_at_least((size_t)l->sessions * 2);
    size_t nb = pow2_at_least((size_t)l->bootstraps * 2);
    t->sess = calloc(ns, sizeof *t->sess);
    t->boots = calloc(nb, sizeof *t->boots);
    if (!t->sess || !t->boots) {
        free(t->sess);
        free(t->boots);
        free(t);
        return NULL;
    }
    t->smask = ns - 1;
    t->bmask = nb - 1;
    t->session_rate.tokens = (uint64_t)l->session_burst * RATE_UNIT;
    t->stream_rate.tokens = (uint64_t)l->stream_burst * RATE_UNIT;
    t->boot_rate.tokens = (uint64_t)l->bootstrap_burst * RATE_UNIT;
    return t;
}

const struct websess_counters *websess_counters(const struct websess_table *t)
{
    return &t->c;
}

size_t websess_count(const struct websess_table *t)
{
    return t->nsess;
}

size_t websess_bootstrap_count(const struct websess_table *t)
{
    return t->nboot;
}

const char *websess_token(const struct websess *s)
{
    return s->e.token;
}

enum websess_mode websess_mode(const struct websess *s)
{
    return s->mode;
}

int websess_user(const struct websess *s)
{
    return s->user;
}

void websess_touch(struct websess *s, int64_t now)
{
    if (now > s->last)
        s->last = now;
}

static size_t slot(const struct websess_table *t, const char *tok, size_t mask)
{
    return (size_t)siphash13(&t->key, tok, WEBSESS_TOKEN_LEN) & mask;
}

static const char b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* A fresh token: 32 random bytes in base64url, whose first two characters then say who holds
 * it (the instance and the worker: 246 random bits stay). 0, or -1. */
static int mint_token(const struct websess_table *t, char out[WEBSESS_TOKEN_LEN + 1])
{
    uint8_t raw[32];
    if (crypto_random(raw, sizeof raw) != 0)
        return -1;
    webcap_b64url(raw, sizeof raw, out, WEBSESS_TOKEN_LEN + 1);
    memset(raw, 0, sizeof raw);
    out[0] = b64url[t->l.instance & 63];
    out[1] = b64url[t->l.worker & 63];
    return 0;
}

int websess_token_owner(const char *tok, size_t n, int *instance, int *worker)
{
    const char *a = n == WEBSESS_TOKEN_LEN ? memchr(b64url, tok[0], 64) : NULL;
    const char *b = a ? memchr(b64url, tok[1], 64) : NULL;
    if (!a || !b || !tok[0] || !tok[1])
        return -1;
    *instance = (int)(a - b64url);
    *worker = (int)(b - b64url);
    return 0;
}

/* How a new entry is admitted: a process-wide count below max, and a rate. */
struct admit {
    atomic_size_t *count;
    uint64_t max;
    enum websess_reason full;
    struct bucket *b;
    uint32_t rate, burst;
    enum websess_reason slow;
};

/* A zeroed entry of size bytes with a fresh token, counted in a->count, or NULL with the
 * refusal counted. */
static void *entry_new(struct websess_table *t, size_t size, const struct admit *a, int64_t now)
{
    if (wsq_reserve(a->count, 1, a->max) != 0) {
        wsq_refuse(t, a->full);
        return NULL;
    }
    if (bucket_take(a->b, a->rate, a->burst, now) != 0) {
        atomic_fetch_sub(a->count, 1);
        wsq_refuse(t, a->slow);
        return NULL;
    }
    struct entry *e = calloc(1, size);
    if (!e || mint_token(t, e->token) != 0) {
        free(e);
        atomic_fetch_sub(a->count, 1);
        wsq_refuse(t, WEBSESS_R_RANDOM);
        return NULL;
    }
    return e;
}

static void entry_insert(struct websess_table *t, struct entry **buckets, size_t mask,
                         struct entry *e)
{
    size_t i = slot(t, e->token, mask);
    e->next = buckets[i];
    buckets[i] = e;
}

/* The entry whose token is tok[0..n), or NULL; every token of the chain is compared in
 * constant time. */
static struct entry *entry_find(struct websess_table *t, struct entry **buckets, size_t mask,
                                const char *tok, size_t n)
{
    if (n != WEBSESS_TOKEN_LEN)
        return NULL;
    struct entry *found = NULL;
    for (struct entry *e = buckets[slot(t, tok, mask)]; e; e = e->next)
        if (crypto_memeq(e->token, tok, WEBSESS_TOKEN_LEN))
            found = e;
    return found;
}

/* An OPEN from the client: a live stream, or (a limit) CLOSE down and the session lives on.
 * 0, or -1 for a protocol error. */
static int stream_open(struct websess_table *t, struct websess *s, const struct webframe *f,
                       int64_t now)
{
    if (wsq_stream_find(s, f->stream) || wsq_closed_has(s, f->stream))
        return -1; /* an id used again */
    int r = -1;
    if (s->nstreams >= t->l.streams_per_session)
        r = WEBSESS_R_STREAMS_SESSION;
    else if (wsq_reserve(&t->g->streams, 1, t->l.streams) != 0)
        r = WEBSESS_R_STREAMS;
    else if (bucket_take(&t->stream_rate, t->l.stream_rate, t->l.stream_burst, now) != 0) {
        atomic_fetch_sub(&t->g->streams, 1);
        r = WEBSESS_R_STREAM_RATE;
    }
    struct stream *st = r < 0 ? wsq_stream_add(s, f->stream) : NULL;
    if (r < 0 && !st) {
        atomic_fetch_sub(&t->g->streams, 1);
        r = WEBSESS_R_STREAMS_SESSION;
    }
    if (r >= 0) {
        wsq_refuse(t, (enum websess_reason)r);
        wsq_closed_add(t, s, f->stream);
        wsq_queue_frame(t, s, WEBFRAME_CLOSE, f->stream, NULL, 0, 1);
        struct lane *ln = wsq_lane_of(s, f->stream);
        if (ln && ln != &s->l0)
            ln->closed = 1; /* it carries that CLOSE, then ends */
        return 0;
    }
    webframe_stream_step(&st->st, f, WEBFRAME_UP);
    STAT_INC(&t->c.streams);
    if (t->h.on_open)
        t->h.on_open(t->h.ctx, s, f->stream);
    return 0;
}

/* A stream frame other than OPEN from the client. 0, or -1 for a protocol error. */
static int stream_frame(struct websess_table *t, struct websess *s, const struct webframe *f)
{
    struct stream *st = wsq_stream_find(s, f->stream);
    if (!st) {
        struct webframe_stream gone = {0};
        if (wsq_closed_has(s, f->stream))
            gone.state = WEBFRAME_STREAM_CLOSED;
        return webframe_stream_step(&gone, f, WEBFRAME_UP) == WEBFRAME_FATAL ? -1 : 0;
    }
    enum webframe_verdict v = webframe_stream_step(&st->st, f, WEBFRAME_UP);
    if (v != WEBFRAME_ACCEPT)
        return v == WEBFRAME_FATAL ? -1 : 0;
    uint32_t id = st->id;
    if (f->type == WEBFRAME_DATA) {
        struct item *it = malloc(sizeof *it + f->len);
        if (!it)
            return -1;
        memcpy(it->b, f->payload, f->len);
        it->len = f->len;
        it->off = 0;
        wsq_charge(t, s, wsq_cost(t, f->len), 1);
        STAT_ADD(&t->c.bytes_up, f->len);
        wsq_queue_push(&st->up, it);
        if (t->h.on_up)
            t->h.on_up(t->h.ctx, s, id);
    } else if (f->type == WEBFRAME_WINDOW) {
        if (t->h.on_window)
            t->h.on_window(t->h.ctx, s, id);
    } else if (f->type == WEBFRAME_CLOSE) {
        st->client_closed = 1;
        if (t->h.on_close)
            t->h.on_close(t->h.ctx, s, id);
    }
    return 0;
}

static void boot_free(struct websess_table *t, struct boot *b)
{
    if (b->sess)
        b->sess->boot = NULL;
    memset(b->e.token, 0, sizeof b->e.token);
    free(b);
    t->nboot--;
    atomic_fetch_sub(&t->g->bootstraps, 1);
}

/* Frees the bootstraps past their lifetime at now; returns how many. */
static unsigned boot_sweep(struct websess_table *t, int64_t now)
{
    unsigned n = 0;
    for (size_t i = 0; i <= t->bmask; i++) {
        struct entry **pp = &t->boots[i];
        while (*pp) {
            struct boot *b = (struct boot *)*pp;
            if (now >= b->expires) {
                *pp = b->e.next;
                boot_free(t, b);
                n++;
            } else {
                pp = &b->e.next;
            }
        }
    }
    STAT_ADD(&t->c.expired_bootstraps, n);
    return n;
}

enum websess_result websess_bootstrap_mint(struct websess_table *t, int user, int64_t now,
                                           char out[WEBSESS_TOKEN_LEN + 1])
{
    out[0] = 0;
    if (atomic_load(&t->g->bootstraps) >= t->l.bootstraps)
        boot_sweep(t, now); /* full: make room from the expired ones first */
    const struct admit a = {&t->g->bootstraps, t->l.bootstraps,      WEBSESS_R_BOOTSTRAPS,
                            &t->boot_rate,     t->l.bootstrap_rate,   t->l.bootstrap_burst,
                            WEBSESS_R_BOOTSTRAP_RATE};
    struct boot *b = entry_new(t, sizeof *b, &a, now);
    if (!b)
        return WEBSESS_BUSY;
    b->user = user;
    b->expires = now + t->l.bootstrap_ms;
    entry_insert(t, t->boots, t->bmask, &b->e);
    t->nboot++;
    STAT_INC(&t->c.bootstraps);
    memcpy(out, b->e.token, WEBSESS_TOKEN_LEN + 1);
    return WEBSESS_OK;
}

/* The live, unexpired bootstrap tok[0..n), or NULL (counted). */
static struct boot *boot_live(struct websess_table *t, const char *tok, size_t n, int64_t now)
{
    struct boot *b = (struct boot *)entry_find(t, t->boots, t->bmask, tok, n);
    if (!b || now >= b->expires) {
        wsq_refuse(t, WEBSESS_R_BOOTSTRAP_UNKNOWN);
        return NULL;
    }
    return b;
}

enum websess_result websess_bootstrap_spend(struct websess_table *t, const char *tok, size_t n,
                                            int64_t now, int *user)
{
    struct boot *b = boot_live(t, tok, n, now);
    if (!b)
        return WEBSESS_REFUSED;
    if (b->spent) {
        wsq_refuse(t, WEBSESS_R_BOOTSTRAP_UNKNOWN);
        return WEBSESS_REFUSED;
    }
    b->spent = 1;
    if (user)
        *user = b->user;
    return WEBSESS_OK;
}

static void session_unlink(struct websess_table *t, struct websess *s)
{
    struct entry **pp = &t->sess[slot(t, s->e.token, t->smask)];
    while (*pp && *pp != &s->e)
        pp = &(*pp)->next;
    if (*pp)
        *pp = s->e.next;
}

/* Ends s: on_end, then every queue, stream and the batch go, and s is freed. */
static void session_end(struct websess_table *t, struct websess *s)
{
    if (t->h.on_end)
        t->h.on_end(t->h.ctx, s);
    session_unlink(t, s);
    while (s->nstreams)
        wsq_stream_remove(t, s, &s->streams[s->nstreams - 1]);
    wsq_lane_clear(t, s, &s->l0);
    for (uint32_t i = 0; i < s->nlanes; i++)
        wsq_lane_clear(t, s, &s->lanes[i]);
    free(s->lanes);
    free(s->closed);
    if (s->boot)
        s->boot->sess = NULL;
    memset(s->e.token, 0, sizeof s->e.token);
    free(s);
    t->nsess--;
    atomic_fetch_sub(&t->g->sessions, 1);
}

static void session_fatal(struct websess_table *t, struct websess *s)
{
    wsq_refuse(t, WEBSESS_R_PROTOCOL);
    session_end(t, s);
}

/* 1 if body[0..n) is exactly one valid HELLO frame. */
static int is_hello(const uint8_t *body, size_t n)
{
    struct webframe f;
    struct webframe_session fs = {0};
    return webframe_parse(body, n, WEBFRAME_MAX_PAYLOAD, &f, NULL) == WEBFRAME_OK &&
           f.total == n && webframe_check(&f, WEBFRAME_UP) == 0 && f.type == WEBFRAME_HELLO &&
           webframe_session_step(&fs, &f, WEBFRAME_UP) == WEBFRAME_ACCEPT;
}

/* A new session for bootstrap b (limits checked), or NULL with the refusal counted. */
static struct websess *session_new(struct websess_table *t, struct boot *b,
                                   enum websess_mode mode, int64_t now, enum websess_result *res)
{
    *res = WEBSESS_BUSY;
    const struct admit a = {&t->g->sessions, t->l.sessions,     WEBSESS_R_SESSIONS,
                            &t->session_rate, t->l.session_rate, t->l.session_burst,
                            WEBSESS_R_SESSION_RATE};
    struct websess *s = entry_new(t, sizeof *s, &a, now);
    if (!s)
        return NULL;
    s->mode = mode;
    s->user = b->user;
    s->last = now;
    s->fs.up_started = s->fs.down_started = 1; /* HELLO received, WELCOME answered */
    s->boot = b;
    b->spent = 1;
    b->sess = s;
    entry_insert(t, t->sess, t->smask, &s->e);
    t->nsess++;
    STAT_INC(&t->c.sessions);
    STAT_INC(&t->c.sessions_mode[mode & 3]);
    *res = WEBSESS_OK;
    return s;
}

enum websess_result websess_create(struct websess_table *t, const char *tok, size_t n,
                                   const uint8_t *body, size_t blen, enum websess_mode mode,
                                   int64_t now, struct websess **out)
{
    *out = NULL;
    struct boot *b = boot_live(t, tok, n, now);
    if (!b)
        return WEBSESS_REFUSED;
    if (!is_hello(body, blen)) {
        wsq_refuse(t, WEBSESS_R_HELLO);
        return WEBSESS_REFUSED;
    }
    if (b->spent) {
        if (!b->sess) {
            wsq_refuse(t, WEBSESS_R_BOOTSTRAP_UNKNOWN);
            return WEBSESS_REFUSED;
        }
        *out = b->sess;
        websess_touch(b->sess, now);
        return WEBSESS_REPLAY;
    }
    enum websess_result res;
    *out = session_new(t, b, mode, now, &res);
    return res;
}

struct websess *websess_find(struct websess_table *t, const char *tok, size_t n)
{
    return (struct websess *)entry_find(t, t->sess, t->smask, tok, n);
}

void websess_close(struct websess_table *t, struct websess *s)
{
    STAT_INC(&t->c.closed_sessions);
    session_end(t, s);
}

void websess_table_free(struct websess_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i <= t->smask; i++)
        while (t->sess[i])
            session_end(t, (struct websess *)t->sess[i]);
    for (size_t i = 0; i <= t->bmask; i++)
        while (t->boots[i]) {
            struct boot *b = (struct boot *)t->boots[i];
            t->boots[i] = b->e.next;
            boot_free(t, b);
        }
    free(t->sess);
    free(t->boots);
    free(t);
}

struct websess_swept websess_sweep(struct websess_table *t, int64_t now)
{
    struct websess_swept w = {0, 0};
    for (size_t i = 0; i <= t->smask; i++) {
        struct websess *s = (struct websess *)t->sess[i];
        while (s) {
            struct websess *next = (struct websess *)s->e.next;
            if (now - s->last >= t->l.grace_ms) {
                session_end(t, s);
                w.sessions++;
            }
            s = next;
        }
    }
    STAT_ADD(&t->c.expired_sessions, w.sessions);
    w.bootstraps = boot_sweep(t, now);
    return w;
}

size_t websess_bytes(const struct websess *s)
{
    size_t n = sizeof *s + wsq_lane_bytes(&s->l0) + (size_t)s->cap_lanes * sizeof *s->lanes;
    for (uint32_t i = 0; i < s->nlanes; i++)
        n += wsq_lane_bytes(&s->lanes[i]);
    n += (size_t)s->cap_streams * sizeof *s->streams + (size_t)s->cap_closed * sizeof *s->closed;
    for (uint32_t i = 0; i < s->nstreams; i++)
        n += wsq_queue_bytes(&s->streams[i].up);
    return n;
}

/* The queue charge the DATA frames of a valid body[0..n) need. */
static void up_need(const struct websess_table *t, const uint8_t *body, size_t n,
                    uint64_t *bytes, uint64_t *items)
{
    *bytes = *items = 0;
    struct webframe f;
    for (size_t off = 0; off < n; off += f.total) {
        webframe_parse(body + off, n - off, t->l.frame_payload, &f, NULL);
        if (f.type == WEBFRAME_DATA) {
            *bytes += wsq_cost(t, f.len);
            *items += 1;
        }
    }
}

/* Applies one client frame. 0, or -1 for a protocol error. */
static int up_frame(struct websess_table *t, struct websess *s, const struct webframe *f,
                    int64_t now)
{
    if (webframe_check(f, WEBFRAME_UP) != 0)
        return -1;
    if (f->stream == 0)
        return webframe_session_step(&s->fs, f, WEBFRAME_UP) == WEBFRAME_ACCEPT ? 0 : -1;
    if (f->type == WEBFRAME_OPEN)
        return stream_open(t, s, f, now);
    return stream_frame(t, s, f);
}

/* Whether the frames of a valid body[0..n) may go up on lane: in the lanes carriers each is of
 * the lane's stream (lane 0: session frames), and a new lane's first is its OPEN. */
static int lane_frames_ok(const struct websess_table *t, const struct websess *s, uint32_t lane,
                          int fresh, const uint8_t *body, size_t n)
{
    if (!wsq_lanes(s))
        return 1;
    struct webframe f;
    for (size_t off = 0; off < n; off += f.total) {
        webframe_parse(body + off, n - off, t->l.frame_payload, &f, NULL);
        if (f.stream != lane || (fresh && off == 0 && f.type != WEBFRAME_OPEN))
            return 0;
    }
    return 1;
}

/* Applies the frames of a valid body[0..n). 0, or -1 for a protocol error. */
static int up_apply(struct websess_table *t, struct websess *s, const uint8_t *body, size_t n,
                    int64_t now)
{
    struct webframe f;
    for (size_t off = 0; off < n; off += f.total) {
        webframe_parse(body + off, n - off, t->l.frame_payload, &f, NULL);
        if (up_frame(t, s, &f, now) != 0)
            return -1;
    }
    return 0;
}

/* A protocol error on lane: in websocket-lanes it ends only that lane (its stream closes;
 * WEBSESS_REFUSED), elsewhere the session (WEBSESS_FATAL: s is freed). */
static enum websess_result up_fail(struct websess_table *t, struct websess *s, uint32_t lane)
{
    if (lane && s->mode == WEBSESS_WEBSOCKET_LANES) {
        wsq_refuse(t, WEBSESS_R_PROTOCOL);
        websess_lane_drop(t, s, lane);
        return WEBSESS_REFUSED;
    }
    session_fatal(t, s);
    return WEBSESS_FATAL;
}

enum websess_result websess_up(struct websess_table *t, struct websess *s, uint32_t lane,
                               uint64_t seq, const uint8_t *body, size_t n, int64_t now)
{
    if (n > t->l.body_bytes || (lane && !wsq_lanes(s))) {
        wsq_refuse(t, WEBSESS_R_BODY);
        return WEBSESS_REFUSED;
    }
    struct lane *ln = wsq_lane_of(s, lane);
    int ended = !ln && wsq_closed_has(s, lane); /* late frames of a lane that ended */
    struct webframe_up fresh = {0};
    uint8_t digest[32];
    crypto_sha256(body, n, NULL, 0, digest);
    enum webframe_replay v = ended ? WEBFRAME_FRESH
                                   : webframe_up_judge(ln ? &ln->up : &fresh, seq, digest);
    size_t count;
    if (v == WEBFRAME_REFUSE ||
        (v == WEBFRAME_FRESH &&
         (webframe_batch(body, n, t->l.frame_payload, &count) != WEBFRAME_OK ||
          !lane_frames_ok(t, s, lane, !ln && !ended, body, n))))
        return up_fail(t, s, lane);
    websess_touch(s, now);
    if (v == WEBFRAME_REPLAY)
        return WEBSESS_REPLAY;
    uint64_t bytes, items;
    up_need(t, body, n, &bytes, &items);
    int r = wsq_fits(t, s, bytes, items);
    if (r < 0 && !ln && !ended && s->nlanes >= 2 * t->l.streams_per_session)
        r = WEBSESS_R_STREAMS_SESSION; /* lanes still delivering their CLOSE: later */
    if (r >= 0) {
        wsq_refuse(t, (enum websess_reason)r);
        return WEBSESS_BUSY;
    }
    if (!ln && !ended && !wsq_lane_add(s, lane)) {
        wsq_refuse(t, WEBSESS_R_PENDING_PROCESS);
        return WEBSESS_BUSY;
    }
    if (up_apply(t, s, body, n, now) != 0)
        return up_fail(t, s, lane);
    if (!ended && (ln = wsq_lane_of(s, lane)) != NULL) /* found again: OPEN may move lanes */
        webframe_up_commit(&ln->up, seq, digest);
    return WEBSESS_OK;
}

int websess_stream_up(const struct websess *s, uint32_t stream, const uint8_t **p, size_t *n)
{
    const struct stream *st = wsq_stream_find(s, stream);
    if (!st)
        return -1;
    const struct item *it = st->up.head;
    *p = it ? it->b + it->off : NULL;
    *n = it ? it->len - it->off : 0;
    return 0;
}

/* Returns n bytes of up credit to the client: a WINDOW down, merged into a WINDOW for the same
 * stream still waiting at the queue's tail. */
static void window_down(struct websess_table *t, struct websess *s, struct stream *st, uint32_t n)
{
    struct lane *ln = wsq_lane_of(s, st->id);
    if (!ln || webframe_credit_grant(&st->st.up_credit, n) != 0)
        return;
    struct item *tail = ln->downq.tail;
    struct webframe f;
    uint32_t merged = 0;
    if (tail && webframe_parse(tail->b, tail->len, 4, &f, NULL) == WEBFRAME_OK &&
        f.type == WEBFRAME_WINDOW && f.stream == st->id) {
        merged = webframe_window_delta(&f);
        if (webframe_credit_grant(&merged, n) == 0) {
            uint8_t d[4] = {(uint8_t)(merged >> 24), (uint8_t)(merged >> 16),
                            (uint8_t)(merged >> 8), (uint8_t)merged};
            memcpy(tail->b + WEBFRAME_HDR_LEN, d, 4);
            return;
        }
    }
    uint8_t d[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    wsq_queue_frame(t, s, WEBFRAME_WINDOW, st->id, d, 4, 1);
}

int websess_stream_written(struct websess_table *t, struct websess *s, uint32_t stream, size_t n)
{
    struct stream *st = wsq_stream_find(s, stream);
    struct item *it = st ? st->up.head : NULL;
    if (!it || n == 0 || n > it->len - it->off)
        return -1;
    it->off += (uint32_t)n;
    if (it->off == it->len) {
        wsq_queue_pop(&st->up);
        wsq_uncharge(t, s, wsq_cost(t, it->len), 1);
        free(it);
    }
    if (st->st.state == WEBFRAME_STREAM_LIVE)
        window_down(t, s, st, (uint32_t)n);
    return 0;
}

uint32_t websess_stream_credit(const struct websess *s, uint32_t stream)
{
    const struct stream *st = wsq_stream_find(s, stream);
    return st && st->st.state == WEBFRAME_STREAM_LIVE ? st->st.down_credit : 0;
}

size_t websess_send(struct websess_table *t, struct websess *s, uint32_t stream,
                    const uint8_t *data, size_t len)
{
    struct stream *st = wsq_stream_find(s, stream);
    if (!st || st->st.state != WEBFRAME_STREAM_LIVE)
        return 0;
    size_t done = 0;
    while (done < len && st->st.down_credit > 0) {
        uint32_t k = t->l.data_chunk;
        if (k > len - done)
            k = (uint32_t)(len - done);
        if (k > st->st.down_credit)
            k = st->st.down_credit;
        if (wsq_queue_frame(t, s, WEBFRAME_DATA, stream, data + done, k, 0) != 0)
            break;
        webframe_credit_take(&st->st.down_credit, k);
        done += k;
    }
    STAT_ADD(&t->c.bytes_down, done);
    return done;
}

void websess_stream_end(struct websess_table *t, struct websess *s, uint32_t stream)
{
    struct stream *st = wsq_stream_find(s, stream);
    if (!st)
        return;
    if (!st->client_closed)
        wsq_queue_frame(t, s, WEBFRAME_CLOSE, stream, NULL, 0, 1);
    wsq_stream_remove(t, s, st);
    struct lane *ln = wsq_lane_of(s, stream);
    if (ln && ln != &s->l0) { /* it ends once the client polled past its last frame */
        ln->closed = 1;
        if (ln->dropped)
            wsq_lane_reap(t, s, ln);
        else if (!ln->downq.head && !ln->batch && t->h.on_down)
            t->h.on_down(t->h.ctx, s, stream); /* nothing more comes: its reader learns it */
    }
}

int websess_lane_known(const struct websess *s, uint32_t lane)
{
    for (uint32_t i = 0; i < s->nlanes; i++)
        if (s->lanes[i].id == lane)
            return 1;
    return lane && wsq_closed_has(s, lane);
}

void websess_lane_drop(struct websess_table *t, struct websess *s, uint32_t lane)
{
    struct lane *ln = lane ? wsq_lane_of(s, lane) : NULL;
    if (!ln || ln == &s->l0)
        return;
    wsq_lane_clear(t, s, ln);
    ln->dropped = 1;
    struct stream *st = wsq_stream_find(s, lane);
    if (!st) {
        ln->closed = 1;
        wsq_lane_reap(t, s, ln);
    } else if (!st->client_closed) {
        struct webframe f = {.type = WEBFRAME_CLOSE, .stream = lane,
                             .payload = (const uint8_t *)"", .total = WEBFRAME_HDR_LEN};
        webframe_stream_step(&st->st, &f, WEBFRAME_UP); /* as if the client sent CLOSE */
        st->client_closed = 1;
        if (t->h.on_close)
            t->h.on_close(t->h.ctx, s, lane);
    }
}

/* Moves ln's queued frames into a new batch (up to the batch target and WEBFRAME_MAX_BATCH
 * frames, at least one). 0, or -1 if out of memory. */
static int batch_build(struct websess_table *t, struct lane *ln)
{
    size_t len = 0, k = 0;
    for (const struct item *it = ln->downq.head; it && k < WEBFRAME_MAX_BATCH; it = it->next) {
        if (k > 0 && len + it->len > t->l.batch_bytes)
            break;
        len += it->len;
        k++;
    }
    uint8_t *p = malloc(len);
    if (!p)
        return -1;
    ln->batch = p;
    ln->batch_len = len;
    ln->batch_bytes = ln->batch_items = 0;
    for (size_t i = 0; i < k; i++) {
        struct item *it = wsq_queue_pop(&ln->downq);
        memcpy(p, it->b, it->len);
        p += it->len;
        ln->batch_bytes += wsq_cost(t, it->len);
        ln->batch_items++;
        free(it);
    }
    return 0;
}

enum websess_result websess_down(struct websess_table *t, struct websess *s, uint32_t lane,
                                 uint64_t cursor, int64_t now, const uint8_t **p, size_t *n,
                                 uint64_t *next)
{
    *p = NULL;
    *n = 0;
    *next = cursor;
    struct lane *ln = lane && !wsq_lanes(s) ? NULL : wsq_lane_of(s, lane);
    if (!ln && wsq_lanes(s) && (wsq_closed_has(s, lane) || cursor == 0)) {
        websess_touch(s, now); /* ended, or not opened yet: 204 (with X-Lane-Closed if ended) */
        return wsq_closed_has(s, lane) ? WEBSESS_GONE : WEBSESS_WAIT;
    }
    enum webframe_replay v = ln ? webframe_down_judge(&ln->down, cursor) : WEBFRAME_REFUSE;
    if (v == WEBFRAME_REFUSE) {
        session_fatal(t, s);
        return WEBSESS_FATAL;
    }
    websess_touch(s, now);
    if (v == WEBFRAME_REPLAY) {
        *p = ln->batch;
        *n = ln->batch_len;
        *next = ln->down.acked + 1;
        return WEBSESS_REPLAY;
    }
    if (ln->batch) { /* acknowledged */
        wsq_uncharge(t, s, ln->batch_bytes, ln->batch_items);
        free(ln->batch);
        ln->batch = NULL;
        ln->batch_len = 0;
    }
    *next = ln->down.acked;
    if (wsq_lane_reap(t, s, ln))
        return WEBSESS_GONE;
    if (!ln->downq.head || batch_build(t, ln) != 0)
        return WEBSESS_WAIT;
    *next = webframe_down_issue(&ln->down);
    *p = ln->batch;
    *n = ln->batch_len;
    return WEBSESS_OK;
}
