/* test_websess.c: WEB sessions: bootstraps, sessions, up/down replay, streams, limits, counts. */
#include "web/websess.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/webframe.h"

static const uint8_t hello[] = {0x10, 0, 0, 0, 0, 0, 0, 1, 1};

/* What the hooks saw. */
struct seen {
    int opens, ups, windows, closes, downs, ends;
    uint32_t last_down_lane;
};

static void on_open(void *c, struct websess *s, uint32_t id)
{
    (void)s, (void)id;
    ((struct seen *)c)->opens++;
}

static void on_up(void *c, struct websess *s, uint32_t id)
{
    (void)s, (void)id;
    ((struct seen *)c)->ups++;
}

static void on_window(void *c, struct websess *s, uint32_t id)
{
    (void)s, (void)id;
    ((struct seen *)c)->windows++;
}

static void on_close(void *c, struct websess *s, uint32_t id)
{
    (void)s, (void)id;
    ((struct seen *)c)->closes++;
}

static void on_down(void *c, struct websess *s, uint32_t lane)
{
    (void)s;
    ((struct seen *)c)->downs++;
    ((struct seen *)c)->last_down_lane = lane;
}

static void on_end(void *c, struct websess *s)
{
    (void)s;
    ((struct seen *)c)->ends++;
}

struct fixture {
    struct websess_limits l;
    struct websess_shared g;
    struct seen seen;
    struct websess_table *t;
};

static struct fixture *fixture_new(void (*tune)(struct websess_limits *))
{
    struct fixture *x = calloc(1, sizeof *x);
    websess_limits_default(&x->l);
    if (tune)
        tune(&x->l);
    websess_shared_init(&x->g);
    struct websess_hooks h = {&x->seen, on_open, on_up, on_window, on_close, on_down, on_end};
    x->t = websess_table_new(&x->l, &x->g, &h);
    assert_non_null(x->t);
    return x;
}

static void fixture_free(struct fixture *x)
{
    websess_table_free(x->t);
    assert_int_equal(atomic_load(&x->g.sessions), 0);
    assert_int_equal(atomic_load(&x->g.streams), 0);
    assert_int_equal(atomic_load(&x->g.pending_bytes), 0);
    assert_int_equal(atomic_load(&x->g.pending_items), 0);
    assert_int_equal(atomic_load(&x->g.bootstraps), 0);
    free(x);
}

static uint64_t refused(const struct fixture *x, enum websess_reason r)
{
    return STAT_GET(&websess_counters(x->t)->refused[r]);
}

/* A new session of carrier mode at now (a fresh bootstrap and HELLO). */
static struct websess *session_mode_at(struct fixture *x, int64_t now, enum websess_mode mode)
{
    char tok[WEBSESS_TOKEN_LEN + 1];
    struct websess *s = NULL;
    assert_int_equal(websess_bootstrap_mint(x->t, 7, now, tok), WEBSESS_OK);
    assert_int_equal(websess_create(x->t, tok, strlen(tok), hello, sizeof hello, mode, now, &s),
                     WEBSESS_OK);
    return s;
}

static struct websess *session_at(struct fixture *x, int64_t now)
{
    return session_mode_at(x, now, WEBSESS_HTTPS);
}

/* Appends one frame to a body being built at b[*n]. */
static void put(uint8_t *b, size_t *n, uint8_t type, uint32_t id, const void *p, uint32_t len)
{
    size_t k = webframe_build(type, id, p, len, b + *n, WEBFRAME_HDR_LEN + len);
    assert_int_not_equal(k, 0);
    *n += k;
}

static void test_bootstrap(void **state)
{
    (void)state;
    struct fixture *x = fixture_new(NULL);
    char a[WEBSESS_TOKEN_LEN + 1], b[WEBSESS_TOKEN_LEN + 1];
    int user = -1;
    assert_int_equal(websess_bootstrap_mint(x->t, 3, 1000, a), WEBSESS_OK);
    assert_int_equal(strlen(a), WEBSESS_TOKEN_LEN);
    assert_int_equal(strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
                     WEBSESS_TOKEN_LEN);
    assert_int_equal(websess_bootstrap_mint(x->t, 4, 1000, b), WEBSESS_OK);
    assert_string_not_equal(a, b);
    /* Single use, bound to its user. */
    assert_int_equal(websess_bootstrap_spend(x->t, a, strlen(a), 2000, &user), WEBSESS_OK);
    assert_int_equal(user, 3);
    assert_int_equal(websess_bootstrap_spend(x->t, a, strlen(a), 2000, &user), WEBSESS_REFUSED);
    /* Unknown, wrong length, expired (2 minutes). */
    char other[WEBSESS_TOKEN_LEN + 1];
    memcpy(other, b, sizeof other);
    other[0] = other[0] == 'A' ? 'B' : 'A';
    assert_int_equal(websess_bootstrap_spend(x->t, other, strlen(other), 2000, &user),
                     WEBSESS_REFUSED);
    assert_int_equal(websess_bootstrap_spend(x->t, b, 42, 2000, &user), WEBSESS_REFUSED);
    assert_int_equal(websess_bootstrap_spend(x->t, b, strlen(b), 121000, &user), WEBSESS_REFUSED);
    assert_int_equal(refused(x, WEBSESS_R_BOOTSTRAP_UNKNOWN), 4);
    struct websess_swept w = websess_sweep(x->t, 120999);
    assert_int_equal(w.bootstraps, 0);
    w = websess_sweep(x->t, 121000);
    assert_int_equal(w.bootstraps, 2);
    assert_int_equal(websess_bootstrap_count(x->t), 0);
    fixture_free(x);
}

static void tune_boot(struct websess_limits *l)
{
    l->bootstraps = 2;
}

static void tune_boot_rate(struct websess_limits *l)
{
    l->bootstrap_burst = 1;
    l->bootstrap_rate = 60; /* one a second */
}

static void test_bootstrap_full_and_rate(void **state)
{
    (void)state;
    struct fixture *x = fixture_new(tune_boot);
    char tok[WEBSESS_TOKEN_LEN + 1];
    assert_int_equal(websess_bootstrap_mint(x->t, 0, 0, tok), WEBSESS_OK);
    assert_int_equal(websess_bootstrap_mint(x->t, 0, 0, tok), WEBSESS_OK);
    assert_int_equal(websess_bootstrap_mint(x->t, 0, 0, tok), WEBSESS_BUSY);
    assert_int_equal(tok[0], 0);
    assert_int_equal(refused(x, WEBSESS_R_BOOTSTRAPS), 1);
    /* Full entries make room by expiring old ones. */
    assert_int_equal(websess_bootstrap_mint(x->t, 0, 120000, tok), WEBSESS_OK);
    assert_int_equal(websess_bootstrap_count(x->t), 1);
    assert_int_equal(STAT_GET(&websess_counters(x->t)->bootstraps), 3);
    fixture_free(x);
    x = fixture_new(tune_boot_rate);
    assert_int_equal(websess_bootstrap_mint(x->t, 0, 0, tok), WEBSESS_OK);
    assert_int_equal(websess_bootstrap_mint(x->t, 0, 999, tok), WEBSESS_BUSY);
    assert_int_equal(refused(x, WEBSESS_R_BOOTSTRAP_RATE), 1);
    assert_int_equal(websess_bootstrap_mint(x->t, 0, 1000, tok), WEBSESS_OK);
    fixture_free(x);
}

static void test_session(void **state)
{
    (void)state;
    struct fixture *x = fixture_new(NULL);
    char tok[WEBSESS_TOKEN_LEN + 1];
    struct websess *s = NULL, *again = NULL;
    assert_int_equal(websess_bootstrap_mint(x->t, 5, 0, tok), WEBSESS_OK);
    uint8_t bad[sizeof hello];
    memcpy(bad, hello, sizeof bad);
    bad[8] = 2;
    assert_int_equal(websess_create(x->t, tok, strlen(tok), bad, sizeof bad, WEBSESS_HTTPS, 0, &s),
                     WEBSESS_REFUSED);
    assert_int_equal(websess_create(x->t, tok, strlen(tok), hello, 8, WEBSESS_HTTPS, 0, &s),
                     WEBSESS_REFUSED);
    assert_int_equal(refused(x, WEBSESS_R_HELLO), 2);
    assert_int_equal(websess_create(x->t, tok, strlen(tok), hello, sizeof hello,
                                    WEBSESS_WEBSOCKET, 10, &s),
                     WEBSESS_OK);
    assert_int_equal(websess_mode(s), WEBSESS_WEBSOCKET);
    assert_string_equal(websess_mode_name(websess_mode(s)), "websocket");
    assert_int_equal(websess_user(s), 5);
    assert_int_equal(strlen(websess_token(s)), WEBSESS_TOKEN_LEN);
    assert_string_not_equal(websess_token(s), tok);
    /* The same creation request again: the same session (the bootstrap is its key). */
    assert_int_equal(websess_create(x->t, tok, strlen(tok), hello, sizeof hello,
                                    WEBSESS_WEBSOCKET, 20, &again),
                     WEBSESS_REPLAY);
    assert_ptr_equal(again, s);
    assert_int_equal(websess_bootstrap_spend(x->t, tok, strlen(tok), 20, NULL), WEBSESS_REFUSED);
    assert_ptr_equal(websess_find(x->t, websess_token(s), WEBSESS_TOKEN_LEN), s);
    assert_null(websess_find(x->t, tok, strlen(tok)));
    assert_null(websess_find(x->t, websess_token(s), 10));
    /* Idle for the grace (2 minutes from the last activity): reclaimed. */
    websess_touch(s, 1000);
    struct websess_swept w = websess_sweep(x->t, 120999);
    assert_int_equal(w.sessions, 0);
    w = websess_sweep(x->t, 121000);
    assert_int_equal(w.sessions, 1);
    assert_int_equal(x->seen.ends, 1);
    assert_int_equal(websess_count(x->t), 0);
    assert_int_equal(STAT_GET(&websess_counters(x->t)->expired_sessions), 1);
    fixture_free(x);
}

static void tune_sessions(struct websess_limits *l)
{
    l->sessions = 1;
    l->session_burst = 2;
    l->session_rate = 1;
}

static void test_session_limits(void **state)
{
    (void)state;
    struct fixture *x = fixture_new(tune_sessions);
    char tok[WEBSESS_TOKEN_LEN + 1];
    struct websess *s = session_at(x, 0), *t2 = NULL;
    assert_int_equal(websess_bootstrap_mint(x->t, 1, 0, tok), WEBSESS_OK);
    assert_int_equal(websess_create(x->t, tok, strlen(tok), hello, sizeof hello, WEBSESS_HTTPS,
                                    0, &t2),
                     WEBSESS_BUSY);
    assert_null(t2);
    assert_int_equal(refused(x, WEBSESS_R_SESSIONS), 1);
    /* The refused bootstrap stays unspent: after a DELETE it creates the session. */
    websess_close(x->t, s);
    assert_int_equal(websess_create(x->t, tok, strlen(tok), hello, sizeof hello, WEBSESS_HTTPS,
                                    0, &t2),
                     WEBSESS_OK);
    websess_close(x->t, t2);
    assert_int_equal(websess_bootstrap_mint(x->t, 1, 0, tok), WEBSESS_OK);
    assert_int_equal(websess_create(x->t, tok, strlen(tok), hello, sizeof hello, WEBSESS_HTTPS,
                                    0, &t2),
                     WEBSESS_BUSY);
    assert_int_equal(refused(x, WEBSESS_R_SESSION_RATE), 1);
    assert_int_equal(STAT_GET(&websess_counters(x->t)->closed_sessions), 2);
    fixture_free(x);
}

static void test_up_replay(void **state)
{
    (void)state;
    struct fixture *x = fixture_new(NULL);
    struct websess *s = session_at(x, 0);
    uint8_t body[64];
    size_t n = 0;
    put(body, &n, WEBFRAME_OPEN, 1, NULL, 0);
    put(body, &n, WEBFRAME_DATA, 1, "abc", 3);
    assert_int_equal(websess_up(x->t, s, 0, 1, body, n, 1), WEBSESS_OK);
    assert_int_equal(x->seen.opens, 1);
    assert_int_equal(x->seen.ups, 1);
    /* The exact retry is acknowledged and applies nothing. */
    assert_int_equal(websess_up(x->t, s, 0, 1, body, n, 2), WEBSESS_REPLAY);
    assert_int_equal(x->seen.ups, 1);
    assert_int_equal(STAT_GET(&websess_counters(x->t)->bytes_up), 3); /* the replay: not again */
    assert_int_equal(STAT_GET(&websess_counters(x->t)->streams), 1);
    const uint8_t *p;
    size_t len;
    assert_int_equal(websess_stream_up(s, 1, &p, &len), 0);
    assert_int_equal(len, 3);
    assert_memory_equal(p, "abc", 3);
    assert_int_equal(websess_stream_written(x->t, s, 1, 2), 0);
    assert_int_equal(websess_stream_written(x->t, s, 1, 1), 0);
    assert_int_equal(websess_stream_up(s, 1, &p, &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(websess_stream_written(x->t, s, 1, 1), -1);
    /* The same number with other bytes ends the session. */
    n = 0;
    put(body, &n, WEBFRAME_DATA, 1, "abd", 3);
    assert_int_equal(websess_up(x->t, s, 0, 1, body, n, 3), WEBSESS_FATAL);
    assert_int_equal(refused(x, WEBSESS_R_PROTOCOL), 1);
    assert_int_equal(x->seen.ends, 1);
    /* A gap ends it too, and so does an invalid frame. */
    s = session_at(x, 10);
    assert_int_equal(websess_up(x->t, s, 0, 2, body, n, 11), WEBSESS_FATAL);
    s = session_at(x, 20);
    assert_int_equal(websess_up(x->t, s, 0, 1, body, n, 21), WEBSESS_FATAL); /* DATA never opened */
    s = session_at(x, 30);
    assert_int_equal(websess_up(x->t, s, 0, 1, hello, sizeof hello, 31), WEBSESS_FATAL);
    s = session_at(x, 40);
    assert_int_equal(websess_up(x->t, s, 0, 1, body, n - 1, 41), WEBSESS_FATAL); /* partial */
    assert_int_equal(refused(x, WEBSESS_R_PROTOCOL), 5);
    assert_int_equal(websess_count(x->t), 0);
    assert_int_equal(STAT_GET(&websess_counters(x->t)->sessions_mode[WEBSESS_HTTPS]), 5);
    assert_int_equal(STAT_GET(&websess_counters(x->t)->sessions_mode[WEBSESS_WEBSOCKET]), 0);
    assert_string_equal(websess_reason_name(WEBSESS_R_PROTOCOL), "protocol");
    assert_string_equal(websess_reason_name(WEBSESS_R_COUNT), "other");
    fixture_free(x);
}

/* Sends `want` bytes of data down on stream 1 of s (opened before). */
static void down_bytes(struct fixture *x, struct websess *s, size_t want, size_t expect)
{
    uint8_t *data = calloc(1, want);
    for (size_t i = 0; i < want; i++)
        data[i] = (uint8_t)i;
    assert_int_equal(websess_send(x->t, s, 1, data, want), expect);
    free(data);
}

static void test_down_replay(void **state)
{
    (void)state;
    struct fixture *x = fixture_new(NULL);
    struct websess *s = session_at(x, 0);
    size_t idle = websess_bytes(s);
    const uint8_t *p;
    size_t n;
    uint64_t next;
    assert_int_equal(websess_down(x->t, s, 0, 0, 1, &p, &n, &next), WEBSESS_WAIT);
    assert_int_equal(next, 0);
    uint8_t body[16];
    size_t bn = 0;
    put(body, &bn, WEBFRAME_OPEN, 1, NULL, 0);
    assert_int_equal(websess_up(x->t, s, 0, 1, body, bn, 2), WEBSESS_OK);
    down_bytes(x, s, 100000, 100000); /* two DATA frames: 64 KiB and the rest */
    assert_int_equal(x->seen.downs, 1);
    assert_int_equal(websess_down(x->t, s, 0, 0, 3, &p, &n, &next), WEBSESS_OK);
    assert_int_equal(next, 1);
    assert_int_equal(n, 100000 + 2 * WEBFRAME_HDR_LEN);
    assert_int_equal(p[0], WEBFRAME_DATA);
    uint8_t *copy = malloc(n);
    memcpy(copy, p, n);
    size_t copy_len = n;
    /* More frames queue meanwhile; the unacknowledged batch comes again byte for byte. */
    down_bytes(x, s, 10, 10);
    assert_int_equal(STAT_GET(&websess_counters(x->t)->bytes_down), 100010);
    assert_int_equal(websess_down(x->t, s, 0, 0, 4, &p, &n, &next), WEBSESS_REPLAY);
    assert_int_equal(next, 1);
    assert_int_equal(n, copy_len);
    assert_memory_equal(p, copy, n);
    free(copy);
    /* Cursor 1 acknowledges it: the next batch holds only the new frame. */
    assert_int_equal(websess_down(x->t, s, 0, 1, 5, &p, &n, &next), WEBSESS_OK);
    assert_int_equal(next, 2);
    assert_int_equal(n, 10 + WEBFRAME_HDR_LEN);
    assert_int_equal(websess_down(x->t, s, 0, 2, 6, &p, &n, &next), WEBSESS_WAIT);
    assert_int_equal(next, 2);
    /* Acknowledged and ended: the session is back to its idle size (and one closed id). */
    websess_stream_end(x->t, s, 1);
    assert_int_equal(websess_down(x->t, s, 0, 2, 7, &p, &n, &next), WEBSESS_OK);
    assert_int_equal(p[0], WEBFRAME_CLOSE);
    assert_int_equal(websess_down(x->t, s, 0, 3, 8, &p, &n, &next), WEBSESS_WAIT);
    assert_int_equal(websess_bytes(s), idle + 8 * sizeof(uint32_t));
    assert_int_equal(atomic_load(&x->g.pending_bytes), 0);
    /* A cursor that is neither the acknowledged nor the issued one ends the session. */
    assert_int_equal(websess_down(x->t, s, 0, 5, 9, &p, &n, &next), WEBSESS_FATAL);
    assert_int_equal(refused(x, WEBSESS_R_PROTOCOL), 1);
    fixture_free(x);
}

/* body = one frame; websess_up on lane. */
static enum websess_result up1(struct fixture *x, struct websess *s, uint32_t lane,
                               uint64_t seq, uint8_t type, uint32_t id)
{
    uint8_t body[32], win[4] = {0, 0, 1, 0};
    size_t n = 0;
    if (type == WEBFRAME_DATA)
        put(body, &n, type, id, "x", 1);
    else if (type == WEBFRAME_WINDOW)
        put(body, &n, type, id, win, 4);
    else
        put(body, &n, type, id, NULL, 0);
    return websess_up(x->t, s, lane, seq, body, n, 1);
}

static void test_lanes(void **state)
{
    (void)state;
    struct fixture *x = fixture_new(NULL);
    const uint8_t *p;
    size_t n;
    uint64_t next;
    /* Protocol errors end the session: a stream frame on lane 0, a new lane without its
     * OPEN, a frame of another stream, an advanced cursor on a lane never opened. */
    struct websess *bad = session_mode_at(x, 0, WEBSESS_HTTPS_LANES);
    assert_int_equal(up1(x, bad, 0, 1, WEBFRAME_OPEN, 1), WEBSESS_FATAL);
    bad = session_mode_at(x, 0, WEBSESS_HTTPS_LANES);
    assert_int_equal(up1(x, bad, 1, 1, WEBFRAME_DATA, 1), WEBSESS_FATAL);
    bad = session_mode_at(x, 0, WEBSESS_HTTPS_LANES);
    assert_int_equal(up1(x, bad, 1, 1, WEBFRAME_OPEN, 2), WEBSESS_FATAL);
    bad = session_mode_at(x, 0, WEBSESS_HTTPS_LANES);
    assert_int_equal(websess_down(x->t, bad, 3, 4, 1, &p, &n, &next), WEBSESS_FATAL);
    assert_int_equal(refused(x, WEBSESS_R_PROTOCOL), 4);
    /* A lane other than 0 where the carrier has none. */
    struct websess *https = session_at(x, 0);
    assert_int_equal(up1(x, https, 1, 1, WEBFRAME_OPEN, 1), WEBSESS_REFUSED);
    /* Each lane numbers its uplink from 1, with its own replay. */
    struct websess *s = session_mode_at(x, 0, WEBSESS_HTTPS_LANES);
    assert_int_equal(up1(x, s, 1, 1, WEBFRAME_OPEN, 1), WEBSESS_OK);
    assert_int_equal(up1(x, s, 2, 1, WEBFRAME_OPEN, 2), WEBSESS_OK);
    assert_int_equal(up1(x, s, 1, 1, WEBFRAME_OPEN, 1), WEBSESS_REPLAY);
    assert_int_equal(x->seen.opens, 2);
    /* A lane not opened yet, polled from cursor 0, waits. */
    assert_int_equal(websess_down(x->t, s, 3, 0, 1, &p, &n, &next), WEBSESS_WAIT);
    /* Frames go down on their stream's lane only. */
    down_bytes(x, s, 10, 10);
    assert_int_equal(x->seen.last_down_lane, 1);
    assert_int_equal(websess_down(x->t, s, 2, 0, 1, &p, &n, &next), WEBSESS_WAIT);
    assert_int_equal(websess_down(x->t, s, 0, 0, 1, &p, &n, &next), WEBSESS_WAIT);
    assert_int_equal(websess_down(x->t, s, 1, 0, 1, &p, &n, &next), WEBSESS_OK);
    assert_int_equal(next, 1);
    assert_int_equal(n, WEBFRAME_HDR_LEN + 10);
    assert_int_equal(p[0], WEBFRAME_DATA);
    /* The stream ends: its CLOSE goes down, then the lane ends once that is acknowledged. */
    websess_stream_end(x->t, s, 1);
    assert_int_equal(websess_down(x->t, s, 1, 1, 2, &p, &n, &next), WEBSESS_OK);
    assert_int_equal(p[0], WEBFRAME_CLOSE);
    assert_int_equal(next, 2);
    assert_int_equal(websess_down(x->t, s, 1, 1, 3, &p, &n, &next), WEBSESS_REPLAY);
    assert_int_equal(websess_down(x->t, s, 1, 2, 4, &p, &n, &next), WEBSESS_GONE);
    assert_int_equal(websess_down(x->t, s, 1, 0, 5, &p, &n, &next), WEBSESS_GONE);
    assert_true(websess_lane_known(s, 1));
    assert_false(websess_lane_known(s, 3));
    /* Late frames of an ended lane are dropped (a closed stream's), unnumbered. */
    assert_int_equal(up1(x, s, 1, 9, WEBFRAME_WINDOW, 1), WEBSESS_OK);
    assert_int_equal(up1(x, s, 1, 9, WEBFRAME_OPEN, 1), WEBSESS_FATAL); /* an id used again */
    fixture_free(x);
}

static void tune_one_stream(struct websess_limits *l)
{
    l->streams_per_session = 1;
}

static void test_lanes_bounded_and_dropped(void **state)
{
    (void)state;
    struct fixture *x = fixture_new(tune_one_stream);
    const uint8_t *p;
    size_t n;
    uint64_t next;
    /* Lanes still delivering a refused OPEN's CLOSE count: at most twice the streams. */
    struct websess *s = session_mode_at(x, 0, WEBSESS_HTTPS_LANES);
    assert_int_equal(up1(x, s, 1, 1, WEBFRAME_OPEN, 1), WEBSESS_OK);
    assert_int_equal(up1(x, s, 2, 1, WEBFRAME_OPEN, 2), WEBSESS_OK); /* refused: CLOSE down */
    assert_int_equal(refused(x, WEBSESS_R_STREAMS_SESSION), 1);
    assert_int_equal(up1(x, s, 3, 1, WEBFRAME_OPEN, 3), WEBSESS_BUSY);
    assert_int_equal(websess_down(x->t, s, 2, 0, 1, &p, &n, &next), WEBSESS_OK);
    assert_int_equal(p[0], WEBFRAME_CLOSE);
    assert_int_equal(websess_down(x->t, s, 2, 1, 1, &p, &n, &next), WEBSESS_GONE);
    assert_int_equal(up1(x, s, 3, 1, WEBFRAME_OPEN, 3), WEBSESS_OK); /* room again */
    /* websocket-lanes: a lane's protocol error ends that lane only; a dropped lane (its
     * socket failed) closes its stream as the client's CLOSE would. */
    struct websess *w = session_mode_at(x, 0, WEBSESS_WEBSOCKET_LANES);
    assert_int_equal(up1(x, w, 5, 1, WEBFRAME_DATA, 5), WEBSESS_REFUSED);
    assert_ptr_equal(websess_find(x->t, websess_token(w), WEBSESS_TOKEN_LEN), w);
    assert_int_equal(up1(x, w, 1, 1, WEBFRAME_OPEN, 1), WEBSESS_OK);
    int closes = x->seen.closes;
    websess_lane_drop(x->t, w, 1);
    assert_int_equal(x->seen.closes, closes + 1);
    assert_int_equal(websess_send(x->t, w, 1, (const uint8_t *)"x", 1), 0);
    websess_stream_end(x->t, w, 1); /* the backend side is done: the lane goes at once */
    assert_int_equal(websess_down(x->t, w, 1, 0, 2, &p, &n, &next), WEBSESS_GONE);
    fixture_free(x);
}

static void tune_owner(struct websess_limits *l)
{
    l->instance = 5;
    l->worker = 63;
}

static void test_token_owner(void **state)
{
    (void)state;
    struct fixture *x = fixture_new(tune_owner);
    char tok[WEBSESS_TOKEN_LEN + 1];
    int inst = -1, worker = -1;
    assert_int_equal(websess_bootstrap_mint(x->t, 1, 0, tok), WEBSESS_OK);
    assert_int_equal(tok[0], 'F'); /* base64url's 6th character: instance 5 */
    assert_int_equal(tok[1], '_'); /* its 64th: worker 63 */
    assert_int_equal(websess_token_owner(tok, strlen(tok), &inst, &worker), 0);
    assert_int_equal(inst, 5);
    assert_int_equal(worker, 63);
    struct websess *s = NULL;
    assert_int_equal(websess_create(x->t, tok, strlen(tok), hello, sizeof hello, WEBSESS_HTTPS,
                                    0, &s),
                     WEBSESS_OK);
    assert_int_equal(websess_token(s)[0], 'F');
    assert_int_equal(websess_token_owner(websess_token(s), WEBSESS_TOKEN_LEN, &inst, &worker), 0);
    assert_int_equal(inst, 5);
    /* The rest stays random: two tokens differ past their owner. */
    char other[WEBSESS_TOKEN_LEN + 1];
    assert_int_equal(websess_bootstrap_mint(x->t, 1, 0, other), WEBSESS_OK);
    assert_memory_not_equal(tok + 2, other + 2, WEBSESS_TOKEN_LEN - 2);
    assert_int_equal(websess_token_owner("F", 1, &inst, &worker), -1);
    assert_int_equal(websess_token_owner("*_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 43, &inst,
                                         &worker),
                     -1);
    fixture_free(x);
}

static void tune_streams(struct websess_limits *l)
{
    l->streams_per_session = 2;
    l->streams = 3;
}

static void test_stream_limits(void **state)
{
    (void)state;
    struct fixture *x = fixture_new(tune_streams);
    struct websess *s = session_at(x, 0), *s2 = session_at(x, 0);
    uint8_t body[64];
    size_t n = 0;
    for (uint32_t id = 1; id <= 3; id++)
        put(body, &n, WEBFRAME_OPEN, id, NULL, 0);
    put(body, &n, WEBFRAME_DATA, 3, "x", 1); /* the refused id is closed: dropped, not fatal */
    assert_int_equal(websess_up(x->t, s, 0, 1, body, n, 1), WEBSESS_OK);
    assert_int_equal(x->seen.opens, 2);
    assert_int_equal(refused(x, WEBSESS_R_STREAMS_SESSION), 1);
    const uint8_t *p;
    size_t len;
    uint64_t next;
    assert_int_equal(websess_down(x->t, s, 0, 0, 2, &p, &len, &next), WEBSESS_OK);
    assert_int_equal(len, WEBFRAME_HDR_LEN);
    assert_int_equal(p[0], WEBFRAME_CLOSE);
    assert_int_equal(p[3], 3);
    /* The process has room for 3: the second session's second OPEN is refused. */
    n = 0;
    put(body, &n, WEBFRAME_OPEN, 1, NULL, 0);
    put(body, &n, WEBFRAME_OPEN, 2, NULL, 0);
    assert_int_equal(websess_up(x->t, s2, 0, 1, body, n, 3), WEBSESS_OK);
    assert_int_equal(refused(x, WEBSESS_R_STREAMS), 1);
    /* An id is never used again, even a refused one. */
    n = 0;
    put(body, &n, WEBFRAME_OPEN, 3, NULL, 0);
    assert_int_equal(websess_up(x->t, s, 0, 2, body, n, 4), WEBSESS_FATAL);
    fixture_free(x);
}

static void test_windows(void **state)
{
    (void)state;
    struct fixture *x = fixture_new(NULL);
    struct websess *s = session_at(x, 0);
    uint32_t mib = 1u << 20;
    uint8_t *body = calloc(1, 2 * (WEBFRAME_HDR_LEN + mib)), *zeros = calloc(1, mib + 64);
    size_t n = 0;
    uint64_t seq = 1;
    put(body, &n, WEBFRAME_OPEN, 1, NULL, 0);
    assert_int_equal(websess_up(x->t, s, 0, seq++, body, n, 1), WEBSESS_OK);
    for (int i = 0; i < 2; i++) { /* 4 MiB of up credit: two 2 MiB bodies and 32 bytes */
        n = 0;
        put(body, &n, WEBFRAME_DATA, 1, zeros, mib);
        put(body, &n, WEBFRAME_DATA, 1, zeros, mib - 2 * WEBFRAME_HDR_LEN);
        assert_int_equal(websess_up(x->t, s, 0, seq++, body, n, 2), WEBSESS_OK);
    }
    n = 0;
    put(body, &n, WEBFRAME_DATA, 1, zeros, 32);
    assert_int_equal(websess_up(x->t, s, 0, seq++, body, n, 2), WEBSESS_OK);
    /* The credit is spent until the relay writes to the backend (WINDOW down) ... */
    const uint8_t *p;
    size_t len;
    assert_int_equal(websess_stream_up(s, 1, &p, &len), 0);
    assert_int_equal(len, mib);
    assert_int_equal(websess_stream_written(x->t, s, 1, 100), 0);
    assert_int_equal(websess_stream_written(x->t, s, 1, 28), 0); /* merged into one WINDOW */
    uint64_t next;
    assert_int_equal(websess_down(x->t, s, 0, 0, 3, &p, &len, &next), WEBSESS_OK);
    assert_int_equal(len, WEBFRAME_HDR_LEN + 4);
    assert_int_equal(p[0], WEBFRAME_WINDOW);
    assert_int_equal(p[11], 128);
    n = 0;
    put(body, &n, WEBFRAME_DATA, 1, "y", 1);
    assert_int_equal(websess_up(x->t, s, 0, seq++, body, n, 4), WEBSESS_OK);
    /* ... and DATA beyond it is a protocol error. */
    n = 0;
    put(body, &n, WEBFRAME_DATA, 1, zeros, 128);
    assert_int_equal(websess_up(x->t, s, 0, seq++, body, n, 5), WEBSESS_FATAL);
    free(body);
    free(zeros);
    /* Down: 4 MiB of credit, then nothing until the client's WINDOW. */
    s = session_at(x, 10);
    uint8_t small[32];
    n = 0;
    put(small, &n, WEBFRAME_OPEN, 1, NULL, 0);
    assert_int_equal(websess_up(x->t, s, 0, 1, small, n, 11), WEBSESS_OK);
    down_bytes(x, s, 5u << 20, 4u << 20);
    assert_int_equal(websess_stream_credit(s, 1), 0);
    down_bytes(x, s, 10, 0);
    n = 0;
    uint8_t d[4] = {0, 0, 1, 0};
    put(small, &n, WEBFRAME_WINDOW, 1, d, 4);
    assert_int_equal(websess_up(x->t, s, 0, 2, small, n, 12), WEBSESS_OK);
    assert_int_equal(x->seen.windows, 1);
    assert_int_equal(websess_stream_credit(s, 1), 256);
    fixture_free(x);
}

static void tune_pending(struct websess_limits *l)
{
    l->pending_session = 2000;
    l->pending_process = 2500;
}

static void test_pending_limits(void **state)
{
    (void)state;
    struct fixture *x = fixture_new(tune_pending);
    struct websess *s = session_at(x, 0), *s2 = session_at(x, 0);
    uint8_t body[4096], filler[2048] = {0};
    size_t n = 0;
    put(body, &n, WEBFRAME_OPEN, 1, NULL, 0);
    put(body, &n, WEBFRAME_DATA, 1, filler, 1800); /* 1800 + 256 > 2000 */
    assert_int_equal(websess_up(x->t, s, 0, 1, body, n, 1), WEBSESS_BUSY);
    assert_int_equal(refused(x, WEBSESS_R_PENDING_SESSION), 1);
    assert_int_equal(x->seen.opens, 0); /* nothing applied, seq 1 not committed */
    n = 0;
    put(body, &n, WEBFRAME_OPEN, 1, NULL, 0);
    put(body, &n, WEBFRAME_DATA, 1, filler, 1000);
    assert_int_equal(websess_up(x->t, s, 0, 1, body, n, 2), WEBSESS_OK);
    /* 1256 held by s: the process has 1244 left, s2 may not take 1000 + 256. */
    assert_int_equal(websess_up(x->t, s2, 0, 1, body, n, 3), WEBSESS_BUSY);
    assert_int_equal(refused(x, WEBSESS_R_PENDING_PROCESS), 1);
    /* Down DATA stops at the limits as well. */
    n = 0;
    put(body, &n, WEBFRAME_OPEN, 1, NULL, 0);
    assert_int_equal(websess_up(x->t, s2, 0, 1, body, n, 4), WEBSESS_OK);
    assert_int_equal(websess_send(x->t, s2, 1, filler, 1000), 0);
    assert_int_equal(refused(x, WEBSESS_R_PENDING_PROCESS), 2);
    assert_int_equal(websess_send(x->t, s2, 1, filler, 500), 500);
    assert_true(websess_bytes(s) > 1000);
    /* A body above the body limit is refused whole. */
    assert_int_equal(websess_up(x->t, s, 0, 2, body, (2u << 20) + 1, 5), WEBSESS_REFUSED);
    assert_int_equal(refused(x, WEBSESS_R_BODY), 1);
    fixture_free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bootstrap),     cmocka_unit_test(test_bootstrap_full_and_rate),
        cmocka_unit_test(test_session),       cmocka_unit_test(test_session_limits),
        cmocka_unit_test(test_up_replay),     cmocka_unit_test(test_down_replay),
        cmocka_unit_test(test_stream_limits), cmocka_unit_test(test_windows),
        cmocka_unit_test(test_pending_limits),
        cmocka_unit_test(test_token_owner),
        cmocka_unit_test(test_lanes),         cmocka_unit_test(test_lanes_bounded_and_dropped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
