/* webframe.c: WEB proxy v1 shared frames: parsing, building, order, credit and replay rules. */
#include "proto/webframe.h"

#include <string.h>

#include "crypto/crypto.h"

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

enum webframe_status webframe_parse(const uint8_t *p, size_t n, size_t max_payload,
                                    struct webframe *f, size_t *need)
{
    if (max_payload > WEBFRAME_MAX_PAYLOAD)
        max_payload = WEBFRAME_MAX_PAYLOAD;
    if (n < WEBFRAME_HDR_LEN) {
        if (need)
            *need = WEBFRAME_HDR_LEN;
        return WEBFRAME_NEED_MORE;
    }
    uint32_t len = get_u32(p + 4);
    if (len > max_payload)
        return WEBFRAME_BAD;
    size_t total = WEBFRAME_HDR_LEN + (size_t)len;
    if (n < total) {
        if (need)
            *need = total;
        return WEBFRAME_NEED_MORE;
    }
    f->type = p[0];
    f->stream = (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    f->len = len;
    f->payload = p + WEBFRAME_HDR_LEN;
    f->total = total;
    return WEBFRAME_OK;
}

enum webframe_status webframe_batch(const uint8_t *p, size_t n, size_t max_payload,
                                    size_t *count)
{
    size_t off = 0, k = 0;
    while (off < n) {
        struct webframe f;
        if (k == WEBFRAME_MAX_BATCH ||
            webframe_parse(p + off, n - off, max_payload, &f, NULL) != WEBFRAME_OK)
            return WEBFRAME_BAD;
        off += f.total;
        k++;
    }
    if (k == 0)
        return WEBFRAME_BAD;
    *count = k;
    return WEBFRAME_OK;
}

size_t webframe_header(uint8_t type, uint32_t stream, uint32_t len, uint8_t out[WEBFRAME_HDR_LEN])
{
    if (stream > WEBFRAME_MAX_STREAM || len > WEBFRAME_MAX_PAYLOAD)
        return 0;
    out[0] = type;
    out[1] = (uint8_t)(stream >> 16);
    out[2] = (uint8_t)(stream >> 8);
    out[3] = (uint8_t)stream;
    put_u32(out + 4, len);
    return WEBFRAME_HDR_LEN;
}

size_t webframe_build(uint8_t type, uint32_t stream, const void *payload, uint32_t len,
                      uint8_t *out, size_t cap)
{
    if (cap < WEBFRAME_HDR_LEN || cap - WEBFRAME_HDR_LEN < len)
        return 0;
    if (webframe_header(type, stream, len, out) == 0)
        return 0;
    if (len)
        memcpy(out + WEBFRAME_HDR_LEN, payload, len);
    return WEBFRAME_HDR_LEN + (size_t)len;
}

uint32_t webframe_window_delta(const struct webframe *f)
{
    return get_u32(f->payload);
}

/* 1 if the frame type travels in dir. */
static int direction_ok(uint8_t type, enum webframe_dir dir)
{
    switch (type) {
    case WEBFRAME_OPEN:
    case WEBFRAME_PONG:
    case WEBFRAME_HELLO:
        return dir == WEBFRAME_UP;
    case WEBFRAME_PING:
    case WEBFRAME_WELCOME:
    case WEBFRAME_BYE:
        return dir == WEBFRAME_DOWN;
    default:
        return 1;
    }
}

/* 1 if the payload has the shape of its (known) type; -1 for an unknown type. */
static int shape_ok(const struct webframe *f)
{
    switch (f->type) {
    case WEBFRAME_OPEN:
    case WEBFRAME_CLOSE:
    case WEBFRAME_WELCOME:
        return f->len == 0;
    case WEBFRAME_DATA:
        return f->len > 0;
    case WEBFRAME_WINDOW:
        return f->len == 4 && get_u32(f->payload) != 0;
    case WEBFRAME_PING:
    case WEBFRAME_PONG:
        return f->len <= WEBFRAME_TOKEN_MAX;
    case WEBFRAME_HELLO:
        return f->len == 1 && f->payload[0] == 1;
    case WEBFRAME_BYE:
        return f->len <= WEBFRAME_BYE_MAX;
    default:
        return -1;
    }
}

/* 1 for the types that belong to a stream (nonzero id), 0 for the session's (id 0). */
static int is_stream_type(uint8_t type)
{
    return type >= WEBFRAME_OPEN && type <= WEBFRAME_WINDOW;
}

int webframe_check(const struct webframe *f, enum webframe_dir dir)
{
    if (shape_ok(f) != 1 || !direction_ok(f->type, dir))
        return -1;
    if (is_stream_type(f->type) ? f->stream == 0 : f->stream != 0)
        return -1;
    return 0;
}

/* A direction's opening rule: its first frame is `first`, which never comes again. Returns 1
 * when f was that first frame (now recorded), -1 when f breaks the rule, 0 when f is a later
 * frame for the other rules to judge. */
static int opening(uint8_t *started, uint8_t first, const struct webframe *f)
{
    if (!*started) {
        if (f->type != first)
            return -1;
        *started = 1;
        return 1;
    }
    return f->type == first ? -1 : 0;
}

/* The session-order rules for a frame going up (client to relay). */
static enum webframe_verdict session_up(struct webframe_session *s, const struct webframe *f)
{
    int o = opening(&s->up_started, WEBFRAME_HELLO, f);
    if (o != 0)
        return o > 0 ? WEBFRAME_ACCEPT : WEBFRAME_FATAL;
    if (f->type == WEBFRAME_PONG) {
        if (!s->ping_out || f->len != s->ping_len ||
            (f->len && !crypto_memeq(f->payload, s->ping, f->len)))
            return WEBFRAME_FATAL;
        s->ping_out = 0;
    }
    return WEBFRAME_ACCEPT;
}

/* The session-order rules for a frame going down (relay to client). */
static enum webframe_verdict session_down(struct webframe_session *s, const struct webframe *f)
{
    if (s->bye)
        return WEBFRAME_FATAL;
    if (f->type == WEBFRAME_PING && s->down_started && s->ping_out)
        return WEBFRAME_FATAL;
    int o = opening(&s->down_started, WEBFRAME_WELCOME, f);
    if (o != 0)
        return o > 0 ? WEBFRAME_ACCEPT : WEBFRAME_FATAL;
    if (f->type == WEBFRAME_PING) {
        s->ping_out = 1;
        s->ping_len = (uint8_t)f->len;
        if (f->len)
            memcpy(s->ping, f->payload, f->len);
    }
    if (f->type == WEBFRAME_BYE)
        s->bye = 1;
    return WEBFRAME_ACCEPT;
}

enum webframe_verdict webframe_session_step(struct webframe_session *s, const struct webframe *f,
                                            enum webframe_dir dir)
{
    return dir == WEBFRAME_UP ? session_up(s, f) : session_down(s, f);
}

int webframe_credit_take(uint32_t *credit, uint32_t n)
{
    if (n > *credit)
        return -1;
    *credit -= n;
    return 0;
}

int webframe_credit_grant(uint32_t *credit, uint32_t delta)
{
    if (delta == 0 || delta > UINT32_MAX - *credit)
        return -1;
    *credit += delta;
    return 0;
}

enum webframe_verdict webframe_stream_step(struct webframe_stream *st, const struct webframe *f,
                                           enum webframe_dir dir)
{
    if (!is_stream_type(f->type))
        return WEBFRAME_FATAL;
    if (f->type == WEBFRAME_OPEN) {
        if (st->state != WEBFRAME_STREAM_UNKNOWN)
            return WEBFRAME_FATAL;
        st->state = WEBFRAME_STREAM_LIVE;
        st->up_credit = WEBFRAME_INITIAL_WINDOW;
        st->down_credit = WEBFRAME_INITIAL_WINDOW;
        return WEBFRAME_ACCEPT;
    }
    if (st->state == WEBFRAME_STREAM_CLOSED)
        return WEBFRAME_DROP;
    if (st->state != WEBFRAME_STREAM_LIVE)
        return WEBFRAME_FATAL;
    /* DATA spends the sender's credit; WINDOW adds to the credit of the one it goes to. */
    uint32_t *sender = dir == WEBFRAME_UP ? &st->up_credit : &st->down_credit;
    uint32_t *receiver = dir == WEBFRAME_UP ? &st->down_credit : &st->up_credit;
    switch (f->type) {
    case WEBFRAME_DATA:
        return webframe_credit_take(sender, f->len) == 0 ? WEBFRAME_ACCEPT : WEBFRAME_FATAL;
    case WEBFRAME_WINDOW:
        return webframe_credit_grant(receiver, webframe_window_delta(f)) == 0 ? WEBFRAME_ACCEPT
                                                                              : WEBFRAME_FATAL;
    default: /* CLOSE */
        st->state = WEBFRAME_STREAM_CLOSED;
        return WEBFRAME_ACCEPT;
    }
}

enum webframe_replay webframe_up_judge(const struct webframe_up *u, uint64_t seq,
                                       const uint8_t digest[32])
{
    if (u->committed < UINT64_MAX && seq == u->committed + 1)
        return WEBFRAME_FRESH;
    if (seq != 0 && seq == u->committed && crypto_memeq(digest, u->digest, sizeof u->digest))
        return WEBFRAME_REPLAY;
    return WEBFRAME_REFUSE;
}

void webframe_up_commit(struct webframe_up *u, uint64_t seq, const uint8_t digest[32])
{
    u->committed = seq;
    memcpy(u->digest, digest, sizeof u->digest);
}

enum webframe_replay webframe_down_judge(struct webframe_down *d, uint64_t cursor)
{
    if (cursor == d->acked)
        return d->pending ? WEBFRAME_REPLAY : WEBFRAME_FRESH;
    if (d->pending && cursor == d->acked + 1) {
        d->acked = cursor;
        d->pending = 0;
        return WEBFRAME_FRESH;
    }
    return WEBFRAME_REFUSE;
}

uint64_t webframe_down_issue(struct webframe_down *d)
{
    if (d->pending || d->acked == UINT64_MAX)
        return 0;
    d->pending = 1;
    return d->acked + 1;
}

int webframe_decimal(const char *s, size_t n, uint64_t *out)
{
    if (n == 0 || n > 20 || (n > 1 && s[0] == '0'))
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}
